//! The write-once slots a tree's filters live in (see the module docs of `filters`).

use std::sync::OnceLock;

use super::MAX_SLOTS;
use crate::filter::any::AnyFilter;

/// Slots kept inline: a tree that is never rebuilt, or rebuilt at a few sizes, allocates
/// no more (the rest cost a kilobyte a tree, which thousands of small trees notice).
const INLINE_SLOTS: usize = 4;

/// The write-once slots of [`Filters`]: `MAX_SLOTS` of them, the first [`INLINE_SLOTS`]
/// inline, the rest in an array made (once, and never freed while the filters live) when
/// a rebuild first needs one. A filled slot is never emptied, refilled, moved or freed.
#[derive(Default)]
pub(super) struct Slots {
    inline: [OnceLock<Box<AnyFilter>>; INLINE_SLOTS],
    more: OnceLock<Box<[OnceLock<Box<AnyFilter>>; MAX_SLOTS - INLINE_SLOTS]>>,
}

impl Slots {
    /// Slot `i` (`i < MAX_SLOTS`), making the outer array if it is needed first.
    pub(super) fn cell(&self, i: usize) -> &OnceLock<Box<AnyFilter>> {
        match i.checked_sub(INLINE_SLOTS) {
            None => &self.inline[i],
            Some(j) => &self
                .more
                .get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())))[j],
        }
    }

    /// The filter in slot `i` (`i < MAX_SLOTS`), if it was filled.
    #[inline(always)]
    pub(super) fn get(&self, i: usize) -> Option<&AnyFilter> {
        match i.checked_sub(INLINE_SLOTS) {
            None => self.inline[i].get(),
            Some(j) => self.more.get()?[j].get(),
        }
        .map(|b| &**b)
    }
}
