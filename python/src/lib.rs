//! The `bloomsled._bloomsled` extension module: the crate's `Db`, `Tree`, `Filter`,
//! `FingerprintSet` and `SharedFilter` for Python. The public package is `bloomsled` (python/bloomsled/), which
//! re-exports these classes and adds the Scrapy dupefilters.
//!
//! Rules kept throughout: every class is `frozen` and `Sync` (safe to share between
//! threads, also on free-threaded Python); calls that do I/O or batch work detach from the
//! interpreter; errors become the exception classes of `errors`; nothing here panics.

use pyo3::prelude::*;

mod errors;
mod filter;
mod fpset;
mod keys;
mod shared;
mod store;
mod sync;

// Python allocates objects 16-byte aligned (pymalloc's alignment; PyO3 places the Rust
// value inside the object), so a class whose value needs more would sit misaligned:
// undefined behaviour. Over-aligned state is boxed (see `filter::Filter`); this keeps it so.
const _: () = {
    const PYTHON_ALIGN: usize = 16;
    assert!(std::mem::align_of::<store::Tree>() <= PYTHON_ALIGN);
    assert!(std::mem::align_of::<store::Db>() <= PYTHON_ALIGN);
    assert!(std::mem::align_of::<store::KeyIter>() <= PYTHON_ALIGN);
    assert!(std::mem::align_of::<filter::Filter>() <= PYTHON_ALIGN);
    assert!(std::mem::align_of::<fpset::FingerprintSet>() <= PYTHON_ALIGN);
    assert!(std::mem::align_of::<shared::SharedFilter>() <= PYTHON_ALIGN);
};

#[pymodule]
fn _bloomsled(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<store::Tree>()?;
    m.add_class::<store::Db>()?;
    m.add_class::<store::KeyIter>()?;
    m.add_class::<filter::Filter>()?;
    m.add_class::<fpset::FingerprintSet>()?;
    m.add_class::<shared::SharedFilter>()?;
    m.add_function(wrap_pyfunction!(sync::_mark_failed_sync, m)?)?;
    m.add_function(wrap_pyfunction!(sync::_rewrite_after_failed_sync, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
