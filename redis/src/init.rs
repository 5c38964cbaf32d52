//! Creation: writing every block with the new incarnation, then marking the record ready.

use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::{Error, Result};

use super::layout::{Layout, TAG_BYTES};
use super::record::{Record, SharedShape, State};
use super::session::Session;

/// Bytes of commands per pipeline while creating or copying a filter: bounds the memory a
/// copy holds besides the filter itself.
pub(crate) const PIPELINE_BYTES: u64 = 16 << 20;

/// How long an `init` record lives unless its creator renews it (after every pipeline of
/// blocks it writes): a creator that dies leaves the name free again within this time.
pub(crate) const LEASE: Duration = Duration::from_secs(20);

/// Renews the lease only if the record is still this creator's `init` record: never puts a
/// deadline on another creator's record, least of all a ready one.
const RENEW_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                            return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";

/// How long `open` waits for a filter that another process is still creating (a live
/// creator keeps its lease, see [`LEASE`]; a dead one's record expires sooner).
pub(crate) const READY_WAIT: Duration = Duration::from_secs(120);

/// The pause between two reads of a record that is still being created.
pub(crate) const READY_PAUSE: Duration = Duration::from_millis(20);

/// Writes one shard's bytes for the creator holding fencing token `ARGV[1]` (from
/// [`lease`]), unless a newer creator already wrote the shard. KEYS: the shard, its fence
/// (`Layout::fence_key`, same slot). ARGV: the token, the byte offset, the bytes. Returns 1
/// if written, 0 if a newer creator's fence refuses it. A `SET` at offset 0, a `SETRANGE`
/// elsewhere.
const FENCED_WRITE_SCRIPT: &str = "\
local t = tonumber(ARGV[1]) \
local f = tonumber(redis.call('GET', KEYS[2]) or '0') \
if f > t then return 0 end \
if f < t then redis.call('SET', KEYS[2], ARGV[1]) end \
if ARGV[2] == '0' then redis.call('SET', KEYS[1], ARGV[3]) \
else redis.call('SETRANGE', KEYS[1], ARGV[2], ARGV[3]) end \
return 1";

/// Writes every shard in full: zero bits and the incarnation in every block's tag. The first
/// write of a shard is a `SET`, which replaces whatever the key held (a stale shard of a
/// lost incarnation, bits a late client set after a flush). Every write is fenced by the
/// creator's `token` ([`lease`]): a creator stalled past its lease, whose name another
/// process has since taken and created, writes nothing into that filter and fails.
pub(crate) fn write_blocks(
    session: &Session,
    layout: &Layout,
    record: &Record,
    token: u64,
) -> Result<()> {
    for batch in block_writes(layout, record, token) {
        let replies = session.run(|| batch.clone())?;
        check_written(&layout.name, &replies)?;
    }
    Ok(())
}

/// The replies of one pipeline of [`block_writes`]: an error if a fence refused a write or
/// the lease could not be renewed (another creator took the name over).
pub(crate) fn check_written(name: &str, replies: &[Value]) -> Result<()> {
    if !replies.iter().any(|v| *v == Value::Int(0)) {
        return Ok(());
    }
    Err(Error::SharedFilterLost {
        name: name.into(),
        key: super::layout::config_key(name),
        why: format!(
            "this process's lease on the name ran out while it created the filter (it was \
             held up for longer than {LEASE:?}) and another process took the name over; \
             nothing was written over that process's filter"
        ),
    })
}

/// The pipelines [`write_blocks`] sends, in order, made one at a time: fenced `SET` and
/// `SETRANGE` of tagged zeros (about 1 MiB each, see `FENCED_WRITE_SCRIPT`), at most about
/// [`PIPELINE_BYTES`] per pipeline, every full one ending with a renewal of the creator's
/// lease. Replaying a pipeline is harmless (same token, same bytes).
pub(crate) fn block_writes<'a>(
    layout: &'a Layout,
    record: &Record,
    token: u64,
) -> impl Iterator<Item = Vec<Cmd>> + 'a {
    let chunk = tagged_zeros(
        layout.cells.chunk_blocks().min(layout.shard_blocks),
        layout,
        record.incarnation,
    );
    let renew = redis::cmd("EVAL")
        .arg(RENEW_SCRIPT)
        .arg(1)
        .arg(super::layout::config_key(&layout.name))
        .arg(record.encode())
        .arg(LEASE.as_millis() as u64)
        .clone();
    // Each write: its shard, offset and length.
    let mut writes = Vec::new();
    for s in 0..layout.shards as usize {
        let len = layout.shard_len(s);
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(chunk.len() as u64) as usize;
            writes.push((s, at, n));
            at += n as u64;
        }
    }
    // The pipelines: ranges of writes, and whether the lease is renewed after them.
    let mut cuts = Vec::new();
    let (mut start, mut pending) = (0, 0u64);
    for (i, &(_, _, n)) in writes.iter().enumerate() {
        pending += n as u64;
        if pending >= PIPELINE_BYTES {
            cuts.push((start, i + 1, true));
            (start, pending) = (i + 1, 0);
        }
    }
    cuts.push((start, writes.len(), false));
    cuts.into_iter().map(move |(from, to, renews)| {
        let mut cmds: Vec<Cmd> = writes[from..to]
            .iter()
            .map(|&(s, at, n)| {
                redis::cmd("EVAL")
                    .arg(FENCED_WRITE_SCRIPT)
                    .arg(2)
                    .arg(layout.key(s))
                    .arg(layout.fence_key(s))
                    .arg(token)
                    .arg(at)
                    .arg(&chunk[..n])
                    .clone()
            })
            .collect();
        if renews {
            cmds.push(renew.clone());
        }
        cmds
    })
}

/// `blocks` blocks of zero cells, each followed by the big-endian incarnation.
fn tagged_zeros(blocks: u64, layout: &Layout, incarnation: u64) -> Vec<u8> {
    let stride = layout.stride() as usize;
    let mut v = vec![0u8; blocks as usize * stride];
    for b in v.chunks_exact_mut(stride) {
        b[stride - TAG_BYTES..].copy_from_slice(&incarnation.to_be_bytes());
    }
    v
}

/// Replaces the `init` record by the `ready` one, only if it is still ours (compare and
/// set in a script): a record deleted or replaced during creation is an error.
pub(crate) fn mark_ready(session: &Session, name: &str, record: &Record) -> Result<()> {
    let done = session.one(ready_cmd(name, record))?;
    check_ready(name, done)
}

/// The script [`mark_ready`] runs.
pub(crate) fn ready_cmd(name: &str, record: &Record) -> Cmd {
    const SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                          redis.call('SET', KEYS[1], ARGV[2]) return 1 else return 0 end";
    let ready = Record {
        state: State::Ready,
        ..*record
    };
    redis::cmd("EVAL")
        .arg(SCRIPT)
        .arg(1)
        .arg(super::layout::config_key(name))
        .arg(record.encode())
        .arg(ready.encode())
        .clone()
}

/// Reads the reply of [`ready_cmd`]: the record was still ours and is ready now, or it was
/// deleted or replaced meanwhile (an error).
pub(crate) fn check_ready(name: &str, done: Value) -> Result<()> {
    let key = super::layout::config_key(name);
    if done == Value::Int(1) {
        Ok(())
    } else {
        Err(Error::SharedFilterLost {
            name: name.into(),
            key,
            why: "the config record was deleted or replaced while this process created the \
                  filter"
                .into(),
        })
    }
}

/// Claims the name with an `init` record (`SET NX PX`, a lease of [`LEASE`]) and, if the
/// claim succeeds, answers the creator's fencing token: the server's time in microseconds,
/// which grows from one creator to the next (the next can claim the name only once this
/// lease ran out; a server clock stepped back by more than that makes the newer creator's
/// writes the refused ones: its `create` fails, nothing is overwritten). KEYS: the config
/// record. ARGV: the record, the lease in ms.
const LEASE_SCRIPT: &str = "\
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
  local t = redis.call('TIME') \
  return tonumber(t[1]) * 1000000 + tonumber(t[2]) \
end \
return false";

/// The command that claims the name `key` with an `init` record, a lease of [`LEASE`]; its
/// reply is read by [`lease_token`].
pub(crate) fn lease(key: &str, record: &Record) -> Cmd {
    redis::cmd("EVAL")
        .arg(LEASE_SCRIPT)
        .arg(1)
        .arg(key)
        .arg(record.encode())
        .arg(LEASE.as_millis() as u64)
        .clone()
}

/// The fencing token a [`lease`] reply gives, `None` if another process holds the name.
pub(crate) fn lease_token(key: &str, reply: Value) -> Result<Option<u64>> {
    match reply {
        Value::Nil => Ok(None),
        Value::Int(t) if t > 0 => Ok(Some(t as u64)),
        other => Err(super::value::unexpected(
            key,
            format!("{other:?} from the lease script"),
        )),
    }
}

/// Reads a `GET` of the config record of `name` (at `key`) made `waited` after the first:
/// the record once it is ready, `None` while its creator is still writing the blocks, or
/// an error (no record, a damaged one, or a creation that never ends).
pub(crate) fn ready_record(
    name: &str,
    key: &str,
    reply: Value,
    waited: Duration,
) -> Result<Option<Record>> {
    let text = match reply {
        Value::Nil => {
            return Err(Error::SharedFilterNotFound {
                name: name.into(),
                why: format!("no config record at {key:?}"),
            })
        }
        v => super::value::bytes(v, key)?,
    };
    let r = Record::decode(&text)?;
    if r.state == State::Ready {
        return Ok(Some(r));
    }
    if waited > READY_WAIT {
        return Err(Error::SharedFilterNotFound {
            name: name.into(),
            why: format!(
                "still being created after {READY_WAIT:?} (a record without a lease, left by \
                 an older version whose creator died? delete {key:?} and create it again)"
            ),
        });
    }
    Ok(None)
}

/// A filter that exists with `found` when `asked` was created: the same filter, or
/// [`Error::RedisShapeMismatch`]. Unless `seed_fixed`, the seed of `asked` is a secret one
/// drawn for a filter that turned out to exist: the existing filter's seed is the one to use.
pub(crate) fn check_same_shape(
    name: &str,
    mut asked: SharedShape,
    found: SharedShape,
    seed_fixed: bool,
) -> Result<()> {
    if !seed_fixed {
        asked.seed = found.seed;
    }
    if asked == found {
        return Ok(());
    }
    Err(Error::RedisShapeMismatch {
        name: name.into(),
        asked: asked.to_string(),
        found: found.to_string(),
    })
}

/// The layout of the filter `name` its ready record describes; [`Error::Corrupt`] if this
/// build would lay its blocks out otherwise.
pub(crate) fn layout_of(name: &str, record: &Record) -> Result<Layout> {
    let layout = Layout::new(
        name,
        record.shape.num_blocks,
        record.shape.shards,
        record.shape.cells(),
    )?;
    if layout.shard_blocks != record.shape.shard_blocks {
        return Err(Error::Corrupt(format!(
            "config record of {name:?}: {} shards of {} blocks, this build lays out {}",
            record.shape.shards, record.shape.shard_blocks, layout.shard_blocks
        )));
    }
    Ok(layout)
}
