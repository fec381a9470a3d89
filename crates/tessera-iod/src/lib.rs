//! The Tessera I/O server (`tessera iod`).
//!
//! An iod stores, for every file handle, one local object holding this server's stripe
//! units of the file in logical order ([`store`]). Each client call reaches it as one request
//! describing all of the call's pieces on this server; [`handler`] moves the data in and out
//! of the socket by the request's transfer mode and turns the pieces into storage calls,
//! merging pieces that are adjacent in the object, and its [`plan`]ner decides per request,
//! with a [`cost`] model measured on the server's own storage, whether to serve the runs one
//! call each, in one io_uring batch ([`uring`]), or by sieving — Active Data Sieving, under
//! server-local [`extent`] locks. The store reaches its bytes through the [`ObjectStorage`]
//! trait ([`storage`]): files in a directory ([`files`]) in a server, in memory or with
//! injected faults in tests (feature `testing`). Bulk buffers come out of a fixed budget
//! (`IOD_BUFFER_BYTES_MAX`), so memory stays bounded however many clients write at once.
//! With `--serve unified` every request goes through the iod's own [`cache`] instead of the
//! page cache (`store/unified.rs`).

pub mod budget;
pub mod buffers;
pub mod cache;
pub mod collective;
pub mod cost;
pub mod extent;
pub mod fabric;
pub mod files;
pub mod handler;
pub mod leases;
pub mod mapping;
pub mod membership;
pub mod plan;
pub mod remote;
pub mod run;
pub mod storage;
pub mod store;
pub mod sweep;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod uring;
pub mod views;

// The one way a test that cannot run here says so (fails under CI=true).
#[cfg(test)]
use tessera_testing as not_run;

pub use files::FileStorage;
pub use handler::Iod;
pub use storage::{ObjectStorage, StorageObject};
pub use store::ObjectStore;
