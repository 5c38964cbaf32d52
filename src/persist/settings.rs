//! A tree's sizing and mode as its record stores them: written into a [`TreeRecord`] when
//! the record is made or the settings change, read back for rebuilds and empty filters.

use zerocopy::little_endian::{U32, U64};
use zerocopy::FromZeros;

use crate::filter::{FilterConfig, FilterMode, Sizing};
use crate::format::{self, TreeRecord};

/// A fresh record of tree `tree_id` storing `mode` and `cfg` (sequence 0, no snapshot,
/// never dirty). `cfg`'s seed must be fixed (a new tree's is drawn before).
pub(crate) fn record_for(tree_id: [u8; 16], mode: FilterMode, cfg: &FilterConfig) -> TreeRecord {
    let mut r = TreeRecord::new_zeroed();
    r.tree_id = tree_id;
    set_settings(&mut r, mode, cfg);
    r
}

/// Writes `mode` and `cfg` into `r`.
pub(crate) fn set_settings(r: &mut TreeRecord, mode: FilterMode, cfg: &FilterConfig) {
    r.filter_kind = U32::new(format::filter_kind(mode));
    let (kind, value) = match cfg.sizing() {
        Sizing::FalsePositiveRate(p) => (1, p),
        Sizing::BitsPerKey(b) => (2, b),
    };
    r.sizing_kind = U32::new(kind);
    r.sizing = U64::new(value.to_bits());
    r.capacity = U64::new(cfg.get_expected_items());
    r.num_hashes = U32::new(cfg.get_num_hashes().unwrap_or(0));
    let grows = if cfg.grows() { format::FLAG_GROWS } else { 0 };
    r.flags = U32::new((r.flags.get() & !format::FLAG_GROWS) | grows);
    // A configuration that fixes no seed keeps the stored one: a tree's seed never changes
    // unless its owner asks (and then its filter is rebuilt with it, as for any shape).
    if let Some(seed) = cfg.get_seed() {
        r.seed = U64::new(seed);
    }
}

/// The sizing a record stores.
pub(crate) fn settings_of(r: &TreeRecord) -> FilterConfig {
    let value = f64::from_bits(r.sizing.get());
    let grows = r.flags.get() & format::FLAG_GROWS != 0;
    let cfg = FilterConfig::new(r.capacity.get())
        .with_growth(r.capacity.get(), grows)
        .seed(r.seed.get());
    let cfg = if r.sizing_kind.get() == 2 {
        cfg.bits_per_key(value)
    } else {
        cfg.false_positive_rate(value)
    };
    match r.num_hashes.get() {
        0 => cfg,
        k => cfg.num_hashes(k),
    }
}
