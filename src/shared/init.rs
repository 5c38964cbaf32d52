//! Creation: writing every block with the new epoch, then marking the record ready.

use redis::Value;

use crate::error::{Error, Result};

use super::layout::{Layout, TAG_BYTES};
use super::record::{Record, State};
use super::session::Session;

/// Bytes of commands per pipeline while creating or copying a filter: bounds the memory a
/// copy holds besides the filter itself.
pub(crate) const PIPELINE_BYTES: u64 = 16 << 20;

/// How long an `init` record lives unless its creator renews it (after every pipeline of
/// blocks it writes): a creator that dies leaves the name free again within this time.
pub(crate) const LEASE: std::time::Duration = std::time::Duration::from_secs(20);

/// Renews the lease only if the record is still this creator's `init` record: never puts a
/// deadline on another creator's record, least of all a ready one.
const RENEW_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                            return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";

/// Writes every shard in full: zero bits and the epoch in every block's tag. The first
/// write of a shard is a `SET`, which replaces whatever the key held (a stale shard of a
/// lost incarnation, bits a late client set after a flush).
pub(crate) fn write_blocks(session: &Session, layout: &Layout, record: &Record) -> Result<()> {
    let chunk = tagged_zeros(
        layout.cells.chunk_blocks().min(layout.shard_blocks),
        layout,
        record.epoch,
    );
    let renew = redis::cmd("EVAL")
        .arg(RENEW_SCRIPT)
        .arg(1)
        .arg(super::layout::config_key(&layout.name))
        .arg(record.encode())
        .arg(LEASE.as_millis() as u64)
        .clone();
    let mut cmds = Vec::new();
    let mut pending = 0u64;
    for s in 0..layout.shards as usize {
        let len = layout.shard_len(s);
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(chunk.len() as u64) as usize;
            let cmd = if at == 0 {
                redis::cmd("SET")
                    .arg(layout.key(s))
                    .arg(&chunk[..n])
                    .clone()
            } else {
                redis::cmd("SETRANGE")
                    .arg(layout.key(s))
                    .arg(at)
                    .arg(&chunk[..n])
                    .clone()
            };
            cmds.push(cmd);
            pending += n as u64;
            at += n as u64;
            if pending >= PIPELINE_BYTES {
                cmds.push(renew.clone());
                let batch = std::mem::take(&mut cmds);
                session.run(|| batch.clone())?;
                pending = 0;
            }
        }
    }
    session.run(|| cmds.clone())?;
    Ok(())
}

/// `blocks` blocks of zero cells, each followed by the big-endian epoch.
fn tagged_zeros(blocks: u64, layout: &Layout, epoch: u64) -> Vec<u8> {
    let stride = layout.stride() as usize;
    let mut v = vec![0u8; blocks as usize * stride];
    for b in v.chunks_exact_mut(stride) {
        b[stride - TAG_BYTES..].copy_from_slice(&epoch.to_be_bytes());
    }
    v
}

/// Replaces the `init` record by the `ready` one, only if it is still ours (compare and
/// set in a script): a record deleted or replaced during creation is an error.
pub(crate) fn mark_ready(session: &Session, name: &str, record: &Record) -> Result<()> {
    const SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                          redis.call('SET', KEYS[1], ARGV[2]) return 1 else return 0 end";
    let key = super::layout::config_key(name);
    let ready = Record {
        state: State::Ready,
        ..*record
    };
    let done = session.one(
        redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(1)
            .arg(&key)
            .arg(record.encode())
            .arg(ready.encode())
            .clone(),
    )?;
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
