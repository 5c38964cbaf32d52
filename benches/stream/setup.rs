//! What one size of the stream benchmark measures: its query keys (made first, each its own
//! allocation), then its stores, window and filters loaded with the keys `0..n`.

use std::time::Instant;

use bloomsled::hash::hash_key;
use bloomsled::window::Window;
use bloomsled::Filter;

use crate::common::{key, load_chunks, size_label, splitmix64, write_key};
use crate::{count, load, ABSENT_BASE, CHUNK, FRESH_BASE, Q, Q_INSERT};

/// The query keys of one size, each a separate allocation, as a service receives them.
pub struct Queries {
    pub absent: Vec<Vec<u8>>,
    pub present: Vec<Vec<u8>>,
    /// Half absent (ids past the absent set's), half present, in random order.
    pub mixed: Vec<Vec<u8>>,
    /// Fresh keys to insert, a set per round.
    pub fresh: Vec<Vec<Vec<u8>>>,
}

impl Queries {
    /// The query keys for a store of the keys `0..n`, and `rounds` sets of fresh keys.
    pub fn make(n: u64, rounds: usize) -> Self {
        let t = Instant::now();
        let absent: Vec<Vec<u8>> = (0..Q as u64).map(|j| key(ABSENT_BASE + j)).collect();
        let present: Vec<Vec<u8>> = (0..Q as u64)
            .map(|j| key(splitmix64(j ^ 0xA5A5_5A5A) % n))
            .collect();
        let mixed: Vec<Vec<u8>> = (0..Q as u64)
            .map(|j| match splitmix64(j ^ 0x3C3C) & 1 {
                0 => key(ABSENT_BASE + Q as u64 + j),
                _ => key(splitmix64(j ^ 0x5A5A_A5A5) % n),
            })
            .collect();
        let fresh: Vec<Vec<Vec<u8>>> = (0..rounds as u64)
            .map(|r| {
                (0..Q_INSERT as u64)
                    .map(|j| key(FRESH_BASE + r * Q_INSERT as u64 + j))
                    .collect()
            })
            .collect();
        eprintln!("[{}] query keys made in {:.1?}", size_label(n), t.elapsed());
        Queries {
            absent,
            present,
            mixed,
            fresh,
        }
    }
}

/// The stores, window and filters of one size, loaded with the keys `0..n`.
pub struct Setup {
    pub n: u64,
    /// bloomsled's store and a plain sled of the same keys (sizes up to the store limit).
    pub stores: Option<(bloomsled::Db, sled::Db)>,
    /// Past the store sizes, `Tree::may_contain` still gets a row: a tree whose filter is
    /// sized for `n` keys (the same bytes, so the same cache misses: the probe has no branch
    /// on what it reads), holding the present query keys.
    pub sized: Option<bloomsled::Db>,
    /// Stores at more bits per key, measured in the same rounds as the 10 bits/key one.
    pub denser: Vec<(u64, bloomsled::Db)>,
    /// A second bloomsled store of the same keys with its false-positive memory off.
    pub nomemory: Option<bloomsled::Db>,
    /// The window of [`crate::GENERATIONS`] generations holding the same keys.
    pub window: Option<(bloomsled::Db, Window)>,
    pub f: Filter,
    pub fb: fastbloom::BloomFilter,
    pub bf: bloomfilter::Bloom<[u8]>,
    /// The filters' bits (all three the same).
    pub bits: usize,
    /// bloomsled's hash seed, fastbloom fed the same hashes.
    pub seed: u64,
    /// The query keys' hashes: absent, present, mixed.
    pub ah: Vec<u64>,
    pub ph: Vec<u64>,
    pub mh: Vec<u64>,
    /// False-positive rates on the absent keys: bloomsled, fastbloom, bloomfilter.
    pub fpr_bs: f64,
    pub fpr_fb: f64,
    pub fpr_bf: f64,
}

impl Setup {
    /// The store, then the filters, loaded with the keys `0..n`.
    pub fn load(n: u64, with_store: bool, bpk_extra: &[u64], q: &Queries) -> Self {
        let stores = with_store.then(|| load::load_stores(n, 10.0));
        let sized = (!with_store).then(|| {
            load::load_sized(
                n,
                10.0,
                &q.present,
                bloomsled::DEFAULT_FALSE_POSITIVE_MEMORY,
            )
        });
        let denser: Vec<(u64, bloomsled::Db)> = match with_store {
            true => bpk_extra
                .iter()
                .map(|&b| {
                    let t = Instant::now();
                    let db = load::load_bloomsled(n, b as f64);
                    eprintln!(
                        "[{}] store at {b} bits/key in {:.1?}",
                        size_label(n),
                        t.elapsed()
                    );
                    (b, db)
                })
                .collect(),
            false => Vec::new(),
        };
        let nomemory = with_store.then(|| load::load_bloomsled_with(n, 10.0, 0));
        let window = with_store.then(|| load::load_window(n, 10.0));
        let (f, fb, bf) = filters(n);
        let bits = f.num_bits() as usize;
        let seed = f.seed();
        let hashes =
            |keys: &[Vec<u8>]| -> Vec<u64> { keys.iter().map(|k| hash_key(k, seed)).collect() };
        let (ah, ph, mh) = (hashes(&q.absent), hashes(&q.present), hashes(&q.mixed));
        assert_eq!(
            count(&q.present, |k| f.contains(k)),
            Q as u64,
            "false negative"
        );
        let fpr = |c: &dyn Fn(&[u8]) -> bool| count(&q.absent, c) as f64 / Q as f64;
        let fpr_bs = fpr(&|k| f.contains(k));
        let fpr_fb = fpr(&|k| fb.contains_hash(hash_key(k, seed)));
        let fpr_bf = fpr(&|k| bf.check(k));
        Setup {
            n,
            stores,
            sized,
            denser,
            nomemory,
            window,
            f,
            fb,
            bf,
            bits,
            seed,
            ah,
            ph,
            mh,
            fpr_bs,
            fpr_fb,
            fpr_bf,
        }
    }

    /// The tree whose `may_contain` is measured: the store's, or the sized one.
    pub fn tree(&self) -> Option<&bloomsled::Db> {
        self.stores
            .as_ref()
            .map(|(db, _)| db)
            .or(self.sized.as_ref())
    }
}

/// bloomsled's filter, fastbloom's and bloomfilter's, the same bits, each holding the keys
/// `0..n` (fastbloom fed bloomsled's hashes).
fn filters(n: u64) -> (Filter, fastbloom::BloomFilter, bloomfilter::Bloom<[u8]>) {
    let t = Instant::now();
    let f = Filter::with_bits_per_key(n, 10.0).expect("filter");
    let bits = f.num_bits() as usize;
    let mut fb = fastbloom::BloomFilter::with_num_bits(bits).hashes(f.num_hashes());
    let mut bf = bloomfilter::Bloom::<[u8]>::new_with_seed(bits / 8, n as usize, &[7; 32])
        .expect("bloomfilter");
    let seed = f.seed();
    load_chunks(n, CHUNK, |ids, buf| {
        for i in ids {
            write_key(buf, i);
            let h = hash_key(buf, seed);
            f.insert_hash(h);
            fb.insert_hash(h);
            bf.set(buf);
        }
    });
    eprintln!(
        "[{}] filters built in {:.1?}: {bits} bits, k = {} (bloomfilter k = {})",
        size_label(n),
        t.elapsed(),
        f.num_hashes(),
        bf.number_of_hash_functions()
    );
    (f, fb, bf)
}

/// The absent query keys sorted by the store's filter: those it rejects and those it
/// passes (its false positives). Empty without a store.
pub struct Passed<'q> {
    /// Per absent key, whether the store's filter passes it.
    pub passes: Vec<bool>,
    pub negatives: Vec<&'q Vec<u8>>,
    pub fps: Vec<&'q Vec<u8>>,
    /// Every `spread_step`-th absent key: as many keys as the filter passes, spread like them.
    pub spread_step: usize,
}

impl<'q> Passed<'q> {
    /// Sorts `q`'s absent keys by `s`'s store's filter.
    pub fn sort(s: &Setup, q: &'q Queries) -> Self {
        let passes: Vec<bool> = match &s.stores {
            Some((db, _)) => q.absent.iter().map(|k| db.may_contain(k)).collect(),
            None => Vec::new(),
        };
        let pick = |pass: bool| -> Vec<&'q Vec<u8>> {
            q.absent
                .iter()
                .zip(&passes)
                .filter(|&(_, &p)| p == pass)
                .map(|(k, _)| k)
                .collect()
        };
        let (negatives, fps) = (pick(false), pick(true));
        let spread_step = (Q / fps.len().max(1)).max(1);
        Passed {
            passes,
            negatives,
            fps,
            spread_step,
        }
    }
}
