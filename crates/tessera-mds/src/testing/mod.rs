//! Stores for tests of the mds (feature `testing`): the namespace's bytes in memory
//! ([`MemoryStore`]), and a wrapper that fails or holds the calls redb makes on another store
//! ([`FaultyStore`]), so the full-disk and reopen paths of `store.rs` run without root.
//! Open a namespace on them with [`Namespace::open_on`](crate::Namespace::open_on).

mod faulty;
mod memory;

pub use faulty::{FaultPlan, FaultyStore, Op, FAULT_HOLD_MAX};
pub use memory::MemoryStore;
