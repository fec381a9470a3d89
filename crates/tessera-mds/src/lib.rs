//! The Tessera metadata server (`tessera mds`).
//!
//! The mds owns the namespace ([`namespace`]): directories, files, attributes and each file's
//! stripe layout, in an embedded redb store that survives restarts. It never touches file
//! data, but it is the one client of the iods for object life cycle: it creates a file's
//! objects before the name becomes visible, removes them after an unlink, and computes a
//! file's size from the sizes of its objects ([`handler`]). It also keeps the byte-range
//! locks clients take for read-modify-write ([`locks`]), in memory only: a restart drops them.
//! Every namespace call is checked against POSIX permission bits for the calling user
//! ([`access`]), with root squash as an option. The redb file is reopened after an I/O error
//! such as a full disk ([`store`]), so the mds serves again once the cause is gone, and changes
//! are committed in groups, one `fsync` for many. The store reaches its bytes through a
//! [`store::StoreBackend`]: the file in a server; in memory, or with injected faults, in tests
//! (`testing`, feature `testing`). Objects of ordinary files are made ahead of
//! their creates ([`precreate`]).

pub mod access;
pub mod handler;
pub mod locks;
pub mod namespace;
pub mod precreate;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use access::Caller;
pub use handler::{Mds, MdsOptions};

pub use namespace::Namespace;
