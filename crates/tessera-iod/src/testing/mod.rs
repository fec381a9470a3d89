//! Storage for tests (feature `testing`, and the crate's own unit tests): [`MemStorage`]
//! keeps objects in memory, [`Faulty`] wraps any storage and makes chosen calls fail (`EIO`,
//! `ENOSPC`), come back short, or wait. An `Iod<MemStorage>` or `Iod<Faulty<…>>` serves
//! every request kind the real one does; the paths that need a kernel file (io_uring batches,
//! mapped reads) fall back to positioned calls (`StorageObject::as_file`).

mod faulty;
mod mem;

pub use faulty::{
    Fault, FaultKind, FaultPlan, Faulty, FaultyObject, Op, FAULT_DELAY_MAX, FAULT_RULES_MAX,
};
pub use mem::{MemObject, MemStorage, MEM_STORAGE_BYTES_DEFAULT};
