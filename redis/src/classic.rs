//! The classic PHP layout: one Redis bitmap (the "bucket"), one bit per classic hash.
//!
//! Reads and extends the filters the PHP `BloomFilterRedis` class keeps
//! (`SETBIT bucket <Hash($key)> 1` for each name in its `$hashFunction` list, `GETBIT` to
//! test), bit for bit: the offsets come from [`bloomsled::hash::classic`]. One key is one
//! command — `BITFIELD bucket SET u1 <o1> 1 …` to add (old bits returned, so `add` says
//! whether the key was new), `BITFIELD bucket GET u1 <o1> …` to test — and batches are
//! pipelined. The bucket is one key, so on a cluster it lives on one slot.
//!
//! The PHP layout has no incarnation: a bucket whose data was lost cannot be told from one that
//! never held these keys. What can be told is a bucket that does not exist at all; every
//! lookup checks that in the same round trip and reports
//! [`Error::SharedFilterNotFound`] rather than "absent". Prefer [`super::SharedFilter`] for
//! new filters.

use redis::{Cmd, Value};

use crate::error::{Error, Result};
use bloomsled::hash::classic::{offsets, ClassicHash};

use super::conn::Endpoint;
use super::session::Session;
use super::value;

/// Keys per pipeline.
const PIPELINE_KEYS: usize = 8192;

/// A PHP-compatible Bloom filter on one Redis bitmap.
///
/// ```no_run
/// use bloomsled::hash::classic::ClassicHash;
/// use bloomsled_redis::{ClassicFilter, Endpoint};
/// // The PHP class: $bucket = 'rptc'; $hashFunction = ['BKDRHash', 'SDBMHash', 'JSHash'];
/// let hashes = ClassicHash::parse_list("BKDR,SDBM,JS")?;
/// let f = ClassicFilter::open(&Endpoint::url("redis://127.0.0.1:6379/"), "rptc", &hashes)?;
/// f.insert(b"a comment")?;
/// assert!(f.contains(b"a comment")?); // and PHP's exists() says true as well
/// # Ok::<(), bloomsled_redis::Error>(())
/// ```
pub struct ClassicFilter {
    session: Session,
    bucket: String,
    hashes: Vec<ClassicHash>,
}

impl ClassicFilter {
    /// A handle on the bucket `bucket` with this ordered list of hashes (as the PHP class's
    /// `$hashFunction`; repeats allowed). Connects now; the bucket may not exist yet.
    pub fn open(endpoint: &Endpoint, bucket: &str, hashes: &[ClassicHash]) -> Result<Self> {
        if hashes.is_empty() {
            return Err(Error::config("a classic filter needs at least one hash"));
        }
        if bucket.is_empty() {
            return Err(Error::config("the bucket name is empty"));
        }
        Ok(ClassicFilter {
            session: Session::open(endpoint)?,
            bucket: bucket.to_owned(),
            hashes: hashes.to_vec(),
        })
    }

    /// Inserts `key`: sets the bits the PHP class's `add` sets. True if one was unset.
    pub fn insert(&self, key: &[u8]) -> Result<bool> {
        super::one(self.insert_many(&[key])?)
    }

    /// True if every bit of `key` is set, exactly as the PHP class's `exists`.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        super::one(self.contains_many(&[key])?)
    }

    /// Inserts every key (pipelined); returns for each whether it set a new bit.
    pub fn insert_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(PIPELINE_KEYS) {
            // Not replayed: a replay would answer "present" for the bits a lost attempt set.
            let replies = self.session.run_once(|| {
                chunk
                    .iter()
                    .map(|k| self.bitfield(k.as_ref(), true))
                    .collect()
            })?;
            for r in replies {
                out.push(value::ints(r, &self.bucket)?.contains(&0));
            }
        }
        Ok(out)
    }

    /// Looks up every key (pipelined, with the bucket's existence checked in the same round
    /// trip): a missing bucket is [`Error::SharedFilterNotFound`], not "absent".
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(PIPELINE_KEYS) {
            let mut replies = self
                .session
                .run(|| {
                    let mut cmds = vec![redis::cmd("EXISTS").arg(&self.bucket).clone()];
                    cmds.extend(chunk.iter().map(|k| self.bitfield(k.as_ref(), false)));
                    cmds
                })?
                .into_iter();
            let exists = value::int(replies.next().unwrap_or(Value::Nil), &self.bucket)?;
            if exists != 1 {
                return Err(Error::SharedFilterNotFound {
                    name: self.bucket.clone(),
                    why: "the bucket key does not exist (never written, or lost)".into(),
                });
            }
            for r in replies {
                out.push(!value::ints(r, &self.bucket)?.contains(&0));
            }
        }
        Ok(out)
    }

    /// The bucket's key.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The hashes, in order.
    pub fn hashes(&self) -> &[ClassicHash] {
        &self.hashes
    }

    fn bitfield(&self, key: &[u8], set: bool) -> Cmd {
        let mut c = redis::cmd("BITFIELD");
        c.arg(&self.bucket);
        for o in offsets(key, &self.hashes) {
            if set {
                c.arg("SET").arg("u1").arg(o).arg(1);
            } else {
                c.arg("GET").arg("u1").arg(o);
            }
        }
        c
    }
}

impl std::fmt::Debug for ClassicFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClassicFilter")
            .field("bucket", &self.bucket)
            .field("hashes", &self.hashes)
            .finish()
    }
}
