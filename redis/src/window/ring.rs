//! The ring's machinery: the window's time, reading and reconciling the ring record with
//! the live generations' filters, lookups across generations, and making, recording and
//! expiring the generation that takes writes.

use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use redis::Value;

use crate::error::{Error, Result};
use crate::filter::SharedFilter;
use crate::layout::Layout;
use crate::resp::Sink;
use crate::value;

use super::record::{gen_field, incarnation_text, parse_incarnation, RECORD_SCRIPT};
use super::{gen_name, SharedWindow};

impl SharedWindow {
    /// The window's time: its clock, but never earlier than a time this handle already
    /// read, so a clock stepping back does not hide generations.
    pub(super) fn now(&self) -> u64 {
        let t = self.clock.now_ms();
        self.latest.fetch_max(t, Ordering::SeqCst).max(t)
    }

    /// The generations a lookup at `now` reads: the live ones, and the next one, which a
    /// client whose clock runs slightly ahead may already be writing to.
    pub(super) fn read_range(&self, now: u64) -> RangeInclusive<u64> {
        let ring = self.config.ring;
        let live = ring.live(ring.generation_of(now));
        *live.start()..=live.end().saturating_add(1)
    }

    pub(super) fn gen_layout(&self, e: u64) -> Result<Layout> {
        Layout::new(
            &gen_name(&self.name, self.incarnation, e),
            self.shape.num_blocks,
            self.shape.shards,
            self.shape.cells(),
        )
    }

    pub(super) fn gen_handle(&self, e: u64, incarnation: u64) -> Result<Arc<SharedFilter>> {
        Ok(Arc::new(SharedFilter {
            session: self.session.clone(),
            layout: self.gen_layout(e)?,
            shape: self.shape,
            incarnation,
        }))
    }

    pub(super) fn lost(&self, key: &str, why: String) -> Error {
        Error::SharedFilterLost {
            name: self.name.clone(),
            key: key.into(),
            why,
        }
    }

    /// `HMGET record epoch <fields>` (`epoch`: the stored field of the incarnation tag).
    pub(super) fn write_ring_read(&self, w: &mut dyn Sink, fields: &[String]) {
        w.command(3 + fields.len());
        w.arg(b"HMGET");
        w.arg(self.key.as_bytes());
        w.arg(b"epoch");
        for f in fields {
            w.arg(f.as_bytes());
        }
    }

    /// Checks the record's incarnation in a [`SharedWindow::write_ring_read`] reply and returns
    /// the ring entries of `gens`: each generation and its filter's incarnation, if it exists.
    pub(super) fn read_ring(
        &self,
        reply: Value,
        gens: RangeInclusive<u64>,
    ) -> Result<Vec<(u64, Option<u64>)>> {
        let key = &self.key;
        let items = match reply {
            Value::Array(v) => v,
            Value::ServerError(e) => return Err(Error::Redis(e.into())),
            other => return Err(value::unexpected(key, format!("{other:?} from HMGET"))),
        };
        let mut items = items.into_iter();
        match items.next() {
            Some(Value::Nil) | None => {
                return Err(self.lost(
                    key,
                    "the window record is gone: the window was deleted, or Redis was flushed, \
                     evicted the record, or restarted or failed over empty"
                        .into(),
                ))
            }
            Some(v) => {
                let text = value::bytes(v, key)?;
                if parse_incarnation(&text) != Some(self.incarnation) {
                    return Err(self.lost(
                        key,
                        format!(
                            "the window record has incarnation {}, not {}: the window was deleted \
                             and created again; reopen it",
                            String::from_utf8_lossy(&text),
                            incarnation_text(self.incarnation)
                        ),
                    ));
                }
            }
        }
        let mut out = Vec::new();
        for e in gens {
            let incarnation = match items.next() {
                Some(Value::Nil) => None,
                Some(v) => {
                    let text = value::bytes(v, key)?;
                    Some(parse_incarnation(&text).ok_or_else(|| {
                        Error::Corrupt(format!(
                            "shared window {:?}: ring entry of generation {e} is {:?}",
                            self.name,
                            String::from_utf8_lossy(&text)
                        ))
                    })?)
                }
                None => return Err(value::unexpected(key, "a short HMGET reply")),
            };
            out.push((e, incarnation));
        }
        Ok(out)
    }

    /// Brings the known generations in line with the ring: adopts the ones it lists that
    /// this handle did not know, and reports a known generation that the ring no longer
    /// lists or lists with another incarnation as lost. Returns the adopted ones.
    pub(super) fn reconcile(&self, ring: &[(u64, Option<u64>)]) -> Result<Vec<Arc<SharedFilter>>> {
        let mut gens = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        let mut fresh = Vec::new();
        for &(e, listed) in ring {
            match (gens.get(&e), listed) {
                (Some(g), Some(x)) if g.incarnation == x => {}
                (Some(g), Some(x)) => {
                    return Err(self.lost(
                        &g.config_key(),
                        format!(
                            "generation {e} was lost and created again (the ring says incarnation \
                             {x:#x}, this handle wrote to {:#x})",
                            g.incarnation
                        ),
                    ))
                }
                (Some(g), None) => {
                    return Err(self.lost(
                        &self.key,
                        format!(
                            "the ring no longer lists generation {e} (filter incarnation {:#x}), \
                             which is still live: its entry was deleted",
                            g.incarnation
                        ),
                    ))
                }
                (None, Some(x)) => {
                    let g = self.gen_handle(e, x)?;
                    gens.insert(e, g.clone());
                    fresh.push(g);
                }
                (None, None) => {}
            }
        }
        Ok(fresh)
    }

    /// The known generations in `read` and their filters, oldest first; forgets older ones.
    pub(super) fn known(&self, read: &RangeInclusive<u64>) -> Vec<(u64, Arc<SharedFilter>)> {
        let mut gens = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        *gens = gens.split_off(read.start());
        gens.range(read.clone())
            .map(|(&e, g)| (e, g.clone()))
            .collect()
    }

    /// One lookup pipeline: the ring check and every known generation's blocks, then, if
    /// the ring lists generations this handle did not know, a second one for those.
    pub(super) fn lookup<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        read: &RangeInclusive<u64>,
        known: &[Arc<SharedFilter>],
        out: &mut [bool],
    ) -> Result<()> {
        let fields: Vec<String> = read.clone().map(gen_field).collect();
        let plans: Vec<Vec<_>> = known
            .iter()
            .map(|g| keys.iter().map(|k| g.probe(k.as_ref())).collect())
            .collect();
        let replies = self.session.run_fast(|w| {
            self.write_ring_read(w, &fields);
            for (g, plan) in known.iter().zip(&plans) {
                plan.iter().for_each(|p| g.write_getrange(w, p));
            }
        })?;
        let mut replies = replies.into_iter();
        let ring = self.read_ring(replies.next().unwrap_or(Value::Nil), read.clone())?;
        let fresh = self.reconcile(&ring)?;
        for (g, plan) in known.iter().zip(&plans) {
            for (p, o) in plan.iter().zip(out.iter_mut()) {
                if g.check_block(p, replies.next().unwrap_or(Value::Nil))? {
                    *o = true;
                }
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        // Generations another client created since this handle last looked.
        let todo: Vec<usize> = (0..keys.len()).filter(|&i| !out[i]).collect();
        let plans: Vec<Vec<_>> = fresh
            .iter()
            .map(|g| todo.iter().map(|&i| g.probe(keys[i].as_ref())).collect())
            .collect();
        let replies = self.session.run_fast(|w| {
            for (g, plan) in fresh.iter().zip(&plans) {
                plan.iter().for_each(|p| g.write_getrange(w, p));
            }
        })?;
        let mut replies = replies.into_iter();
        for (g, plan) in fresh.iter().zip(&plans) {
            for (p, &i) in plan.iter().zip(&todo) {
                if g.check_block(p, replies.next().unwrap_or(Value::Nil))? {
                    out[i] = true;
                }
            }
        }
        Ok(())
    }

    /// The filter of generation `e`, created if nobody has written to it yet: see the
    /// module documentation ("rotation").
    pub(super) fn generation_for_writes(&self, e: u64, now: u64) -> Result<Arc<SharedFilter>> {
        if let Some(g) = self.gens.lock().unwrap_or_else(|p| p.into_inner()).get(&e) {
            return Ok(g.clone());
        }
        let field = gen_field(e);
        let reply = self
            .session
            .run_fast(|w| self.write_ring_read(w, std::slice::from_ref(&field)))?
            .into_iter()
            .next()
            .unwrap_or(Value::Nil);
        let ring = self.read_ring(reply, e..=e)?;
        if ring[0].1.is_some() {
            self.reconcile(&ring)?;
        } else {
            let made = SharedFilter::create_in(
                self.session.clone(),
                self.gen_layout(e)?,
                self.shape,
                true,
            )?;
            // The TTL before the ring entry: a recorded generation always expires.
            self.expire(&made, e, now);
            self.record(e, &made)?;
            self.gens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(e)
                .or_insert_with(|| Arc::new(made));
        }
        let gens = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        gens.get(&e).cloned().ok_or_else(|| {
            Error::Corrupt(format!(
                "shared window {:?}: generation {e} not adopted",
                self.name
            ))
        })
    }

    /// Records generation `e` with `made`'s incarnation in the ring (once: a generation recorded
    /// with another incarnation was lost and created again, which is an error).
    pub(super) fn record(&self, e: u64, made: &SharedFilter) -> Result<()> {
        let floor = e.saturating_sub(u64::from(self.config.ring.generations()));
        let reply = self.session.one(
            redis::cmd("EVAL")
                .arg(RECORD_SCRIPT)
                .arg(1)
                .arg(&self.key)
                .arg(incarnation_text(self.incarnation))
                .arg(gen_field(e))
                .arg(incarnation_text(made.incarnation))
                .arg(floor)
                .clone(),
        )?;
        let parts = match reply {
            Value::Array(v) if v.len() == 2 => v,
            other => {
                return Err(value::unexpected(
                    &self.key,
                    format!("{other:?} from the record script"),
                ))
            }
        };
        let mut parts = parts.into_iter();
        let tag = value::bytes(parts.next().unwrap_or(Value::Nil), &self.key)?;
        let text = value::bytes(parts.next().unwrap_or(Value::Nil), &self.key)?;
        match tag.as_slice() {
            b"W" => Err(self.lost(
                &self.key,
                if text.is_empty() {
                    "the window record is gone: the window was deleted, or Redis was flushed \
                     or restarted empty"
                        .into()
                } else {
                    format!(
                        "the window record has incarnation {}, not {}: the window was deleted and \
                         created again; reopen it",
                        String::from_utf8_lossy(&text),
                        incarnation_text(self.incarnation)
                    )
                },
            )),
            b"N" | b"E" if parse_incarnation(&text) == Some(made.incarnation) => Ok(()),
            b"E" => Err(self.lost(
                &made.config_key(),
                format!(
                    "generation {e} was lost: the ring lists it with incarnation {}, but its filter \
                     is gone and was created again with incarnation {:#x}",
                    String::from_utf8_lossy(&text),
                    made.incarnation
                ),
            )),
            _ => Err(value::unexpected(
                &self.key,
                format!("{:?} from the record script", String::from_utf8_lossy(&tag)),
            )),
        }
    }

    /// Gives every key of generation `e`'s filter its TTL: the generation's expiry plus
    /// grace, from the window's time `now`. Best effort: a failure leaves keys that a
    /// later add or `destroy` deals with, and never changes an answer.
    pub(super) fn expire(&self, g: &SharedFilter, e: u64, now: u64) {
        let ttl = self.config.ring.ttl_ms(e, now, self.config.grace_ms);
        let mut keys = vec![g.config_key()];
        keys.extend(g.shard_keys());
        keys.extend(g.layout.fence_keys());
        let cmds: Vec<_> = keys
            .iter()
            .map(|k| redis::cmd("PEXPIRE").arg(k).arg(ttl).clone())
            .collect();
        if let Err(err) = self.session.run(|| cmds.clone()) {
            log::warn!(
                "shared window {:?}: could not set the TTL of generation {e}: {err}",
                self.name
            );
        }
    }
}
