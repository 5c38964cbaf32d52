//! Counting-mode removes: one script per shard a batch touches, which lowers a key's
//! counters only if none is zero, and keeps its answer in a marker key so that a replayed
//! script (a pipeline re-sent after a dropped connection or a cluster redirection) returns
//! its first answer and changes nothing.

use redis::Value;

use crate::error::Result;
use crate::filter::SharedFilter;
use crate::resp::Sink;
use crate::value;

use super::{groups, Group, Incarnation, Probe};

/// The remove script. KEYS: the shard, a marker key in the same slot. ARGV: the byte offset
/// of the first key's tag, the incarnation (8 bytes), then per key the number of its counters and
/// their `u4` bit offsets. Returns `L<tag>` if the shard is not this filter's, else `R`
/// followed by `1` (removed) or `0` (a counter was zero: not in the filter, nothing changed)
/// per key, which it keeps in the marker for an hour so that a replay returns it again.
const REMOVE_SCRIPT: &str = "\
local done = redis.call('GET', KEYS[2]) \
if done then return done end \
local t = redis.call('GETRANGE', KEYS[1], ARGV[1], ARGV[1] + 7) \
if t ~= ARGV[2] then return 'L' .. t end \
local out = {'R'} \
local i = 3 \
while i <= #ARGV do \
  local n = tonumber(ARGV[i]) \
  local get = {} \
  for j = 1, n do \
    get[#get + 1] = 'GET' get[#get + 1] = 'u4' get[#get + 1] = ARGV[i + j] \
  end \
  local c = redis.call('BITFIELD', KEYS[1], unpack(get)) \
  local ok = '1' \
  for j = 1, n do if c[j] == 0 then ok = '0' end end \
  if ok == '1' then \
    local dec = {} \
    for j = 1, n do \
      if c[j] < 15 then \
        dec[#dec + 1] = 'INCRBY' dec[#dec + 1] = 'u4' dec[#dec + 1] = ARGV[i + j] \
        dec[#dec + 1] = '-1' \
      end \
    end \
    if #dec > 0 then redis.call('BITFIELD', KEYS[1], unpack(dec)) end \
  end \
  out[#out + 1] = ok \
  i = i + n + 1 \
end \
local r = table.concat(out) \
redis.call('SET', KEYS[2], r, 'EX', 3600) \
return r";

impl SharedFilter {
    /// Removes one pipeline's worth of keys from a counting filter: see the module
    /// documentation.
    pub(crate) fn remove_batch<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let batch = self.wire().remove_plan(keys);
        let replies = self
            .session
            .run_fast(|w| self.wire().write_remove(w, &batch))?;
        self.wire().read_remove(&batch, replies, out)
    }
}

/// One remove pipeline's keys: their probes, the scripts (groups) they go out in, and each
/// script's marker key (where its answer is kept for a replay).
pub(crate) struct RemoveBatch {
    plan: Vec<Probe>,
    groups: Vec<Group>,
    markers: Vec<String>,
}

impl Incarnation<'_> {
    /// The keys of one remove pipeline, by shard, each script with a fresh marker.
    pub(crate) fn remove_plan<K: AsRef<[u8]>>(&self, keys: &[K]) -> RemoveBatch {
        let plan = self.plan(keys);
        let groups = groups(&plan, self.layout.shards as usize);
        let markers: Vec<String> = groups
            .iter()
            .map(|g| {
                format!(
                    "{}:rm:{:016x}",
                    self.layout.key(g.shard),
                    crate::record::new_incarnation()
                )
            })
            .collect();
        RemoveBatch {
            plan,
            groups,
            markers,
        }
    }

    /// Writes the remove scripts of a batch: one per group.
    pub(crate) fn write_remove(&self, w: &mut dyn Sink, batch: &RemoveBatch) {
        let (plan, groups) = (&batch.plan, &batch.groups);
        let incarnation = self.incarnation.to_be_bytes();
        for (g, marker) in groups.iter().zip(&batch.markers) {
            w.command(7 + g.keys.len() + g.cells);
            w.arg(b"EVAL");
            w.arg(REMOVE_SCRIPT.as_bytes());
            w.arg(b"2");
            w.arg(self.layout.key(g.shard).as_bytes());
            w.arg(marker.as_bytes());
            w.uint(plan[g.keys[0]].addr.tag_byte());
            w.arg(&incarnation);
            for &i in &g.keys {
                let p = &plan[i];
                w.uint(p.cells() as u64);
                for pos in p.positions() {
                    w.uint(p.addr.counter_bit(pos));
                }
            }
        }
    }

    /// Reads the replies of [`Incarnation::write_remove`] (one per group, in order) and
    /// appends, per key, whether it was removed.
    pub(crate) fn read_remove(
        &self,
        batch: &RemoveBatch,
        replies: impl IntoIterator<Item = Value>,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let (plan, groups) = (&batch.plan, &batch.groups);
        let base = out.len();
        out.resize(base + plan.len(), false);
        let mut replies = replies.into_iter();
        for g in groups {
            let key = self.layout.key(g.shard);
            let reply = replies
                .next()
                .ok_or_else(|| value::unexpected(key, "a missing remove script reply"))?;
            let r = value::bytes(reply, key)?;
            match r.split_first() {
                Some((b'L', tag)) => self.check_tag(plan[g.keys[0]].addr, tag)?,
                Some((b'R', answers)) if answers.len() == g.keys.len() => {
                    for (&i, &a) in g.keys.iter().zip(answers) {
                        out[base + i] = a == b'1';
                    }
                }
                _ => {
                    return Err(value::unexpected(
                        key,
                        format!("{:?} from the remove script", String::from_utf8_lossy(&r)),
                    ))
                }
            }
        }
        Ok(())
    }
}
