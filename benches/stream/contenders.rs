//! The contenders of one size, registered by group in the order they run in a round:
//! lookups per query stream (filters, then the tree and window, then the store's gets),
//! the absent-`get` bound's parts, the denser stores; then `get` paired with what it is
//! held to, and the inserts.

use std::cell::RefCell;
use std::hint::black_box;
use std::time::Instant;

use bloomsled::hash::hash_key;

use crate::common::rounds::{interleave, ns_per};
use crate::common::{load_chunks, size_label, write_key};
use crate::setup::{Passed, Queries, Setup};
use crate::{count, paired, sled_gets, Contenders, Run, CHUNK, Q, Q_SLED, VALUE};

/// The lookup contenders' figures: per contender, its ns per key round by round.
pub struct Measured {
    names: Vec<String>,
    per: Vec<Vec<f64>>,
}

impl Measured {
    /// The figures of the contender `name`, if it ran.
    pub fn get(&self, name: &str) -> Option<&[f64]> {
        self.names
            .iter()
            .position(|x| x == name)
            .map(|i| &self.per[i][..])
    }
}

/// Every lookup contender of one size, in interleaved rounds.
pub fn lookup_rounds(s: &Setup, q: &Queries, p: &Passed<'_>, rounds: usize) -> Measured {
    #[cfg(feature = "metrics")]
    let recording = s
        .stores
        .as_ref()
        .map(|(db, _)| crate::recording::Recording::start(db.clone()));
    let mut c = Contenders::default();
    for (tag, keys, hashes) in [
        ("absent", &q.absent, &s.ah),
        ("present", &q.present, &s.ph),
        ("mixed", &q.mixed, &s.mh),
    ] {
        add_filter_lookups(&mut c, s, tag, keys, hashes);
        add_tree_lookups(&mut c, s, tag, keys);
        if tag != "mixed" {
            add_store_gets(&mut c, s, tag, keys);
        }
    }
    if let Some((db, _)) = &s.stores {
        add_composed(&mut c, s, db, &q.absent);
        add_false_positives(&mut c, s.seed, db, &q.absent, p);
        add_rejected(&mut c, db, p);
    }
    // With `--features metrics`: the same store's filter path and absent `get` while its
    // series are being recorded (issue 35's bound: ≤ 1.03× without).
    #[cfg(feature = "metrics")]
    if let (Some((db, _)), Some(rec)) = (&s.stores, &recording) {
        for (tag, keys) in [("absent", &q.absent), ("present", &q.present)] {
            c.add(format!("may_contain_metrics/{tag}"), move || {
                rec.during(|| ns_per(Q, || count(keys, |k| db.may_contain(k))))
            });
        }
        let absent = &q.absent;
        c.add("get_metrics/absent", move || {
            rec.during(|| ns_per(Q, || count(absent, |k| db.get(k).unwrap().is_some())))
        });
    }
    for (b, db) in &s.denser {
        let absent = &q.absent;
        c.add(format!("may_contain@{b}/absent"), move || {
            ns_per(Q, || count(absent, |k| db.may_contain(k)))
        });
        c.add(format!("get@{b}/absent"), move || {
            ns_per(Q, || count(absent, |k| db.get(k).unwrap().is_some()))
        });
    }
    let (names, mut runs) = c.into_parts();
    let mut refs: Vec<&mut dyn FnMut() -> f64> = runs.iter_mut().map(|b| &mut **b as _).collect();
    let t = Instant::now();
    let per = interleave(rounds, &mut refs);
    drop(refs);
    drop(runs);
    eprintln!("[{}] lookup rounds in {:.1?}", size_label(s.n), t.elapsed());
    Measured { names, per }
}

/// The filters on one query stream: fastbloom, bloomsled's and bloomfilter by key, then
/// fastbloom and bloomsled by hash (hashes made beforehand).
fn add_filter_lookups<'a>(
    c: &mut Contenders<'a>,
    s: &'a Setup,
    tag: &str,
    keys: &'a [Vec<u8>],
    hashes: &'a [u64],
) {
    let (f, fb, bf, seed) = (&s.f, &s.fb, &s.bf, s.seed);
    c.add(format!("fastbloom/{tag}"), move || {
        ns_per(Q, || count(keys, |k| fb.contains_hash(hash_key(k, seed))))
    });
    c.add(format!("filter/{tag}"), move || {
        ns_per(Q, || count(keys, |k| f.contains(k)))
    });
    c.add(format!("bloomfilter/{tag}"), move || {
        ns_per(Q, || count(keys, |k| bf.check(k)))
    });
    c.add(format!("fastbloom_hash/{tag}"), move || {
        ns_per(Q, || {
            hashes.iter().filter(|&&h| fb.contains_hash(h)).count() as u64
        })
    });
    c.add(format!("filter_hash/{tag}"), move || {
        ns_per(Q, || {
            hashes.iter().filter(|&&h| f.contains_hash(h)).count() as u64
        })
    });
}

/// `Tree::may_contain` (the store's tree or the sized one) and `Window::may_contain` on
/// one query stream, where they exist.
fn add_tree_lookups<'a>(c: &mut Contenders<'a>, s: &'a Setup, tag: &str, keys: &'a [Vec<u8>]) {
    if let Some(db) = s.tree() {
        c.add(format!("may_contain/{tag}"), move || {
            ns_per(Q, || count(keys, |k| db.may_contain(k)))
        });
    }
    if let Some((_, w)) = &s.window {
        c.add(format!("window/{tag}"), move || {
            ns_per(Q, || count(keys, |k| w.may_contain(k)))
        });
    }
}

/// With a store: `Tree::get`, plain sled's `get` and sled's `get` on bloomsled's store
/// (`Tree::get_unfiltered`) on one query stream.
fn add_store_gets<'a>(c: &mut Contenders<'a>, s: &'a Setup, tag: &str, keys: &'a [Vec<u8>]) {
    let Some((db, raw)) = &s.stores else {
        return;
    };
    let q = if tag == "absent" { Q } else { Q_SLED };
    c.add(format!("get/{tag}"), move || {
        ns_per(q, || count(&keys[..q], |k| db.get(k).unwrap().is_some()))
    });
    if let Some(nm) = &s.nomemory {
        c.add(format!("get_nomemory/{tag}"), move || {
            ns_per(q, || count(&keys[..q], |k| nm.get(k).unwrap().is_some()))
        });
    }
    c.add(format!("sled_get/{tag}"), move || {
        ns_per(Q_SLED, || {
            count(&keys[..Q_SLED], |k| raw.get(k).unwrap().is_some())
        })
    });
    c.add(format!("unfiltered/{tag}"), move || {
        sled_gets(db, &keys[..Q_SLED])
    });
}

/// The bound, measured: the filter, then sled's own get for the keys it passes; and the
/// same for fastbloom in front of the same store, what any filter's false positives cost
/// sled once the filter's probes run between them.
fn add_composed<'a>(
    c: &mut Contenders<'a>,
    s: &'a Setup,
    db: &'a bloomsled::Db,
    absent: &'a [Vec<u8>],
) {
    let (fb, seed) = (&s.fb, s.seed);
    c.add("composed/absent", move || {
        ns_per(Q, || {
            count(absent, |k| {
                db.may_contain(k) && db.get_unfiltered(k).unwrap().is_some()
            })
        })
    });
    c.add("fastbloom_composed/absent", move || {
        ns_per(Q, || {
            count(absent, |k| {
                fb.contains_hash(hash_key(k, seed)) && db.get_unfiltered(k).unwrap().is_some()
            })
        })
    });
}

/// What the false positives' sled lookups cost, on the same keys: back to back, and spread
/// through the stream as they come, after hashing the keys between them with no filter
/// probed (minus the hashing alone). Against `composed` (after bloomsled's probes) this
/// says whether the filter or the stream makes them slower. Beside them, as many other
/// absent keys, back to back: the first ones (contiguous in memory, like the tight loop's)
/// and every `spread_step`-th (spread through memory like the passed keys): whether the
/// passed keys' back-to-back cost is about how many lookups run, or about where their
/// bytes live.
fn add_false_positives<'a>(
    c: &mut Contenders<'a>,
    seed: u64,
    db: &'a bloomsled::Db,
    absent: &'a [Vec<u8>],
    p: &'a Passed<'_>,
) {
    let (passes, fps) = (&p.passes, &p.fps);
    c.add("fp/tight", move || sled_gets(db, fps));
    let (first, spread_keys) = (
        &absent[..fps.len()],
        absent
            .iter()
            .step_by(p.spread_step)
            .take(fps.len())
            .collect::<Vec<_>>(),
    );
    c.add("fp/first", move || sled_gets(db, first));
    c.add("fp/spread", move || sled_gets(db, &spread_keys));
    c.add("fp/hashed", move || {
        ns_per(Q, || {
            let mut x = 0u64;
            let mut found = 0u64;
            for (k, &pass) in absent.iter().zip(passes) {
                x ^= hash_key(k, seed);
                if pass {
                    found += db.get_unfiltered(k).unwrap().is_some() as u64;
                }
            }
            black_box(x) ^ found
        })
    });
    c.add("hash/absent", move || {
        ns_per(Q, || absent.iter().fold(0, |x, k| x ^ hash_key(k, seed)))
    });
}

/// The absent keys the store's filter rejects: `may_contain`, `get`, and `get` with the
/// answer matched in place instead of moved out by `unwrap` (what the caller's copy of the
/// 40-byte `Option<IVec>` out of the `Result` costs).
fn add_rejected<'a>(c: &mut Contenders<'a>, db: &'a bloomsled::Db, p: &'a Passed<'_>) {
    let negatives = &p.negatives;
    c.add("may_contain/rejected", move || {
        ns_per(negatives.len(), || count(negatives, |k| db.may_contain(k)))
    });
    c.add("get/rejected", move || {
        ns_per(negatives.len(), || {
            count(negatives, |k| db.get(k).unwrap().is_some())
        })
    });
    c.add("get_matched/rejected", move || {
        ns_per(negatives.len(), || {
            count(negatives, |k| matches!(db.get(k), Ok(Some(_))))
        })
    });
}

/// Per round, `get` and what it is held to on the same keys, in alternating chunks:
/// ((present `get`, sled's `get`), (absent `get`, `may_contain` then sled's `get`)).
pub type Pairs = ((Vec<f64>, Vec<f64>), (Vec<f64>, Vec<f64>));

/// `get` and what it is held to, in alternating chunks of the same keys. Run as separate
/// contenders, each starts from the cache state the one before it left (a 1M-key stream,
/// another store's lookups), and a 5% question drowns in that. Paired, each chunk follows
/// a chunk of the other contender.
pub fn paired_gets(n: u64, db: &bloomsled::Db, q: &Queries, rounds: usize) -> Pairs {
    let t = Instant::now();
    let present_get = paired(
        &q.present[..Q_SLED],
        256,
        rounds,
        |ks| count(ks, |k| db.get(k).unwrap().is_some()),
        |ks| count(ks, |k| db.get_unfiltered(k).unwrap().is_some()),
    );
    let absent_get = paired(
        &q.absent,
        4096,
        rounds,
        |ks| count(ks, |k| db.get(k).unwrap().is_some()),
        |ks| {
            count(ks, |k| {
                db.may_contain(k) && db.get_unfiltered(k).unwrap().is_some()
            })
        },
    );
    eprintln!("[{}] paired rounds in {:.1?}", size_label(n), t.elapsed());
    (present_get, absent_get)
}

/// Inserts of fresh keys, per contender round by round: fastbloom, fastbloom atomic,
/// filter, bloomfilter, then (with a store) tree and sled. The atomic fastbloom is loaded
/// like the others first.
pub fn insert_rounds(s: &mut Setup, q: &Queries, rounds: usize) -> Vec<Vec<f64>> {
    let seed = s.seed;
    let fba = fastbloom::AtomicBloomFilter::with_num_bits(s.bits).hashes(s.f.num_hashes());
    load_chunks(s.n, CHUNK, |ids, buf| {
        for i in ids {
            write_key(buf, i);
            fba.insert_hash(hash_key(buf, seed));
        }
    });
    let mut round = [0usize; 6];
    let fbm = RefCell::new(&mut s.fb);
    let bfm = RefCell::new(&mut s.bf);
    let mut ins_runs: Vec<Run<'_>> = Vec::new();
    for (c, r) in round.iter_mut().enumerate() {
        let (f, fba, fbm, bfm, fresh, stores) = (&s.f, &fba, &fbm, &bfm, &q.fresh, &s.stores);
        if c >= 4 && stores.is_none() {
            break;
        }
        ins_runs.push(Box::new(move || {
            let keys = &fresh[*r % fresh.len()];
            *r += 1;
            ns_per(keys.len(), || match c {
                0 => {
                    let mut fb = fbm.borrow_mut();
                    count(keys, |k| fb.insert_hash(hash_key(k, seed)))
                }
                1 => count(keys, |k| fba.insert_hash(hash_key(k, seed))),
                2 => count(keys, |k| f.insert(k)),
                3 => {
                    let mut bf = bfm.borrow_mut();
                    count(keys, |k| bf.check_and_set(k))
                }
                4 => {
                    let db = &stores.as_ref().unwrap().0;
                    count(keys, |k| db.insert(k, VALUE).unwrap().is_some())
                }
                _ => {
                    let raw = &stores.as_ref().unwrap().1;
                    count(keys, |k| raw.insert(k, VALUE).unwrap().is_some())
                }
            })
        }));
    }
    let mut refs: Vec<&mut dyn FnMut() -> f64> =
        ins_runs.iter_mut().map(|b| &mut **b as _).collect();
    interleave(rounds, &mut refs)
}
