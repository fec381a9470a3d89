//! Raw bindings to the system's libfabric, for `tessera-ofi` only.
//!
//! With the `link` feature, `build.rs` runs bindgen over the installed headers (libfabric 1.17
//! on Debian 12; no published crate builds against it) and compiles `shim/shim.c`, which turns
//! each `static inline` call of the headers (`fi_domain`, `fi_mr_reg`, `fi_readmsg`, ...) into a
//! real function named `tessera_fi_*`. Nothing here is safe to call without reading libfabric's
//! man pages; the safe wrapper is `tessera-ofi`. Without the feature the crate is empty, so the
//! workspace builds on machines without libfabric.

#[cfg(feature = "link")]
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

#[cfg(feature = "link")]
pub use bindings::*;

/// `FI_ADDR_UNSPEC` (`((uint64_t) -1)` in `fabric.h`, a cast bindgen cannot evaluate).
#[cfg(feature = "link")]
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
