//! The Python package `tessera` (its native module `tessera._tessera`): Tessera files from
//! Python, with N-d NumPy subarrays moved in one datatype request.
//!
//! Python calls come in through [`client`] (connect and the namespace) and [`file`] (bytes,
//! piece lists, arrays, views, and the mpi4py collectives of [`collective`]). An array's
//! two sides become datatypes in [`layout`] (pure Rust, unit-tested) from what [`ndarray`]
//! reads off the NumPy array: the file side a subarray of the file's array, the memory side
//! the array's own strides, so no contiguous copy is made. Every call releases the GIL while
//! it waits on the servers; every failure leaves as one Python exception ([`error`]).
//! `python/tessera/__init__.py` re-exports these names with the `.pyi` stubs beside it.

pub mod client;
pub mod collective;
pub mod error;
pub mod file;
pub mod layout;
pub mod ndarray;
pub mod stat;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _tessera(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(client::connect, module)?)?;
    module.add_class::<client::Client>()?;
    module.add_class::<stat::Stat>()?;
    module.add_class::<file::File>()?;
    module.add_class::<file::View>()?;
    module.add("ARRAY_DIMS_MAX", layout::ARRAY_DIMS_MAX)?;
    Ok(())
}
