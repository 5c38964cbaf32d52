//! The exact record: every key added with [`SharedFilter::insert_exact`], kept in small Redis
//! hashes beside the filter, so that "new or not" is answered exactly, never by a false
//! positive.
//!
//! - **Buckets**: a key's first `b` bits pick one of `2^b` buckets, with `b` chosen from the
//!   filter's capacity so that a bucket holds about 32–64 keys at capacity. Redis keeps a
//!   hash that small as one listpack (up to `hash-max-listpack-entries`, 128 by default): a
//!   key costs its field's bytes plus about four, with no per-entry pointers.
//! - **Fields**: the key without the whole bytes the bucket index already says, as binary
//!   (a 20-byte SHA-1 fingerprint in 2^16 buckets is stored as its last 18 bytes); values
//!   are empty. Two keys of at least 4 bytes share a bucket and a field only if they are
//!   equal: the bucket fixes their first `b / 8` bytes, the field the rest.
//! - **Keys**: bucket `j` is `<shard key>:x<incarnation>:<j>`, carrying the hash tag of shard `j mod
//!   shards`: buckets spread over a cluster's masters as the shards do, and each lives in
//!   the slot of a shard. The filter's incarnation in the name means a recreated filter never
//!   reads the record of an earlier incarnation.
//! - **Check and add**: one pipeline carries the filter's `BITFIELD` (which sets the bits and
//!   reads the shard's incarnation tag, so a lost filter is still [`Error::SharedFilterLost`]) and
//!   one `HSETNX` per key. `HSETNX` is atomic: of two processes adding the same key, exactly
//!   one is told "new".
//!
//! A bucket evicted or deleted alone forgets its keys: they are then answered "new" again
//! (fetched twice), never "present" by mistake.

use redis::Value;

use crate::error::{Error, Result};

use super::filter::SharedFilter;
use super::value;

/// Keys per bucket at the filter's capacity, at most (at least half as many).
const BUCKET_KEYS: u64 = 64;
/// Buckets deleted per pipeline by [`SharedFilter::destroy`].
const DEL_KEYS: u64 = 8192;

impl SharedFilter {
    /// Bits of a key that pick its bucket: `2^bits` buckets of at most [`BUCKET_KEYS`] keys
    /// at capacity.
    fn exact_bits(&self) -> u32 {
        let buckets = (self.shape.capacity / BUCKET_KEYS).max(1);
        buckets.next_power_of_two().trailing_zeros().min(32)
    }

    /// The bucket key and the field of `key` in the exact record.
    pub(super) fn exact_slot<'k>(&self, key: &'k [u8]) -> Result<(String, &'k [u8])> {
        let bits = self.exact_bits();
        if bits == 0 {
            return Ok((self.bucket_key(0), key));
        }
        let Some(head) = key.first_chunk::<4>() else {
            return Err(Error::config(format!(
                "exact adds take keys of at least 4 bytes (fingerprints, digests), got {}",
                key.len()
            )));
        };
        let j = u64::from(u32::from_be_bytes(*head) >> (32 - bits));
        Ok((self.bucket_key(j), &key[bits as usize / 8..]))
    }

    fn bucket_key(&self, j: u64) -> String {
        let shard = (j % self.layout.shards) as usize;
        format!("{}:x{:x}:{j:x}", self.layout.key(shard), self.incarnation)
    }

    /// Deletes every bucket of the exact record (their names follow from the shape and the
    /// incarnation: no scan), a pipeline of `DEL`s per [`DEL_KEYS`] buckets.
    pub(super) fn destroy_exact(&self) -> Result<()> {
        let buckets = 1u64 << self.exact_bits();
        let mut j = 0;
        while j < buckets {
            let end = (j + DEL_KEYS).min(buckets);
            let cmds: Vec<redis::Cmd> = (j..end)
                .map(|b| redis::cmd("DEL").arg(self.bucket_key(b)).clone())
                .collect();
            self.session.run(|| cmds.clone())?;
            j = end;
        }
        Ok(())
    }

    /// Adds one pipeline's worth of keys to the filter and the exact record: see the module
    /// documentation. Like [`SharedFilter::add_batch`], a batch that may have reached Redis
    /// when the connection failed is sent again only once a lookup shows none of its keys
    /// recorded; otherwise [`Error::RedisOutcomeUnknown`].
    pub(super) fn add_exact_batch<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let batch = self.add_plan(keys);
        let slots = keys
            .iter()
            .map(|k| self.exact_slot(k.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let mut resend = self.session.endpoint().resends();
        loop {
            let sent = self.session.run_fast_once(|w| {
                self.write_add(w, &batch);
                for (bucket, field) in &slots {
                    w.command(4);
                    w.arg(b"HSETNX");
                    w.arg(bucket.as_bytes());
                    w.arg(field);
                    w.arg(b"");
                }
            });
            match sent {
                Ok(replies) => {
                    let mut replies = replies.into_iter();
                    let bloom: Vec<Value> = replies.by_ref().take(batch.commands()).collect();
                    // Checks every shard's incarnation: a lost filter is an error, not an answer.
                    self.read_add(&batch, bloom, &mut Vec::new())?;
                    for (bucket, _) in &slots {
                        let set = value::int(replies.next().unwrap_or(Value::Nil), bucket)?;
                        out.push(set == 1);
                    }
                    return Ok(());
                }
                Err(Error::RedisOutcomeUnknown { why }) => {
                    let recorded = self.session.run_fast(|w| {
                        for (bucket, field) in &slots {
                            w.command(3);
                            w.arg(b"HEXISTS");
                            w.arg(bucket.as_bytes());
                            w.arg(field);
                        }
                    })?;
                    let mut any = false;
                    for (r, (bucket, _)) in recorded.into_iter().zip(&slots) {
                        any |= value::int(r, bucket)? == 1;
                    }
                    resend.again(any, why)?;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
