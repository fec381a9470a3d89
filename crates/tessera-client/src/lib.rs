//! The Tessera client library.
//!
//! A [`Client`] reads the cluster file, sends namespace calls to the metadata server and opens
//! [`File`]s. A file's I/O goes straight to the I/O servers: `read_at`/`write_at` for one
//! contiguous range, and `read_list`/`write_list` for many memory pieces against many file
//! pieces in one call, which reaches each involved server as one request (see [`plan`]) while
//! the servers work in parallel. For comparison, [`File`] also has the baseline methods: one
//! call per piece ([`File::write_multiple`], [`File::read_multiple`]) and client-side data
//! sieving ([`File::write_sieve`], [`File::read_sieve`]), whose writes hold byte-range locks
//! from the mds ([`File::lock_range`]).
//!
//! ```no_run
//! use std::io::IoSlice;
//! use tessera_client::{Client, CreateOptions, Piece};
//!
//! let client = Client::from_file("cluster.toml".as_ref())?;
//! let file = client.create("/grid", &CreateOptions::default())?;
//! let rows = [[1u8; 64], [2u8; 64]];
//! let memory = [IoSlice::new(&rows[0]), IoSlice::new(&rows[1])];
//! let report = file.write_list(&memory, &[Piece::new(0, 64), Piece::new(4096, 64)])?;
//! assert_eq!(report.bytes, 128);
//! # Ok::<(), tessera_client::ClientError>(())
//! ```

mod access;
mod cache;
mod client;
pub mod collective;
pub mod config;
mod encodable;
mod error;
#[cfg(feature = "ofi")]
pub mod fabric;
mod file;
pub mod layouts;
mod methods;
mod options;
pub mod plan;
pub mod registration;
pub mod shared_pointer;
mod size;
mod typed;
pub mod umask;

pub use access::{Method, ViewedFile};
pub use cache::{
    ClientCacheStats, WriteBackStats, BLOCK_BYTES as CLIENT_CACHE_BLOCK_BYTES,
    BUFFERED_WRITE_BYTES_MAX, DEMOTE_BUFFER_BLOCKS as CLIENT_DEMOTE_BUFFER_BLOCKS,
    WRITE_BACK_AGE_MAX, WRITE_BACK_BYTES_MAX, WRITE_BACK_FILES_MAX,
};
pub use client::{Client, SetTime};
pub use collective::{
    CollectiveBuffering, CollectiveMethod, CollectiveOptions, Communicator, SocketCommunicator,
    ThreadCommunicator,
};
pub use config::ClusterConfig;
pub use error::ClientError;
pub use file::{File, IoReport};
pub use methods::{
    LockOptions, RangeLock, SieveOptions, LOCK_LEASE_DEFAULT, LOCK_WAIT_DEFAULT,
    SIEVE_READ_BUFFER_BYTES_DEFAULT, SIEVE_WRITE_BUFFER_BYTES_DEFAULT,
};
pub use options::{
    ClientOptions, CreateOptions, DemoteMode, OpenMode, CLIENT_CACHE_ENV, CLIENT_DEMOTE_ENV,
    CLIENT_WRITE_BACK_ENV, REPLY_SPIN_DEFAULT, REPLY_SPIN_ENV,
};
pub use registration::RegistryRegistration;
pub use shared_pointer::SharedPointer;
/// Memory shared with the servers of this host (`local` backend's registered memory): pieces
/// in one arena move with no `process_vm_*` call and no copy on this side.
pub use tessera_net::local::arena::Arena;
pub use tessera_net::local::policy::{Mechanism, Transfer, TransferPolicy};
pub use tessera_net::Registration;
pub use tessera_proto::dtype;
pub use tessera_proto::{
    Attr, Datatype, DirEntry, ErrorCode, FileKind, Layout, ObjectLeft, PatternLayout, Piece,
    StripeLayout, TransferMode,
};
pub use tessera_reg;
pub use typed::View;
