//! Tessera's libfabric backend: one-sided list reads and writes between registered memories.
//!
//! The data path is server-initiated, as in the rest of Tessera's transport: a client opens an
//! [`Endpoint`], registers the memory holding its pieces ([`Domain::register`]) and sends, in a
//! control message, its endpoint name ([`Endpoint::name`]), the registered region
//! ([`MemoryRegion::remote_region`]: virtual base, length, key) and its piece list. The server
//! inserts the name ([`Endpoint::insert_peer`]), turns the pieces into provider-ready
//! [`RemoteIov`]s ([`RemoteRegion::iovs`]) and pulls them into its buffers with
//! [`Endpoint::read_from`] (a write request) or pushes its buffers into them with
//! [`Endpoint::write_to`] (a read request). Each list moves as a chain of `fi_readmsg` /
//! `fi_writemsg` calls, each with at most the provider's `iov_limit` local and `rma_iov_limit`
//! remote entries, pieces split so the two lists line up, at most [`OPS_INFLIGHT_MAX`] in
//! flight. The client must keep its endpoint progressing meanwhile (libfabric's `tcp;ofi_rxm`
//! and `shm` move data only inside calls on the target's endpoint too): [`ProgressThread`].
//!
//! Files follow libfabric's provider layout: `fabric.rs` (provider, fabric, domain),
//! `endpoint.rs` (RDM endpoint, address vector, completion queue), `mem.rs` (registration and
//! the local/remote piece types), `rma.rs` (splitting lists into operations and issuing them),
//! `progress.rs` (completion polling, errors, the progress thread), `registrar.rs` (the `ofi`
//! registrar for `tessera-reg`), and `call.rs` (libfabric's return codes and strings, a leaf
//! the others use). Opening an endpoint and registering memory are calls on the `Domain`, but
//! live in `endpoint.rs` and `mem.rs`, so no two files import each other.
//!
//! Everything is behind the `ofi` feature: without it this crate is empty and the workspace
//! builds on machines without libfabric.

#[cfg(feature = "ofi")]
mod call;
#[cfg(feature = "ofi")]
mod endpoint;
#[cfg(feature = "ofi")]
mod error;
#[cfg(feature = "ofi")]
mod fabric;
#[cfg(feature = "ofi")]
mod mem;
#[cfg(feature = "ofi")]
mod progress;
#[cfg(feature = "ofi")]
mod registrar;
#[cfg(feature = "ofi")]
mod rma;

#[cfg(feature = "ofi")]
pub use endpoint::{Endpoint, Peer};
#[cfg(feature = "ofi")]
pub use error::{CompletionFailure, OfiError};
#[cfg(feature = "ofi")]
pub use fabric::{Addressing, Domain, Limits};
#[cfg(feature = "ofi")]
pub use mem::{Access, Descriptor, LocalIov, MemoryRegion, RemoteIov, RemoteRegion};
#[cfg(feature = "ofi")]
pub use progress::{ProgressThread, PROGRESS_IDLE_SLEEP};
#[cfg(feature = "ofi")]
pub use registrar::{OfiRegistrar, OFI_COST_DEFAULT, OFI_REGISTRATIONS_MAX};
#[cfg(feature = "ofi")]
pub use rma::TransferCounts;

/// Operations (`fi_readmsg`/`fi_writemsg` calls) one endpoint keeps in flight at most; the
/// provider's transmit queue size lowers it further.
pub const OPS_INFLIGHT_MAX: usize = 64;
/// Pieces on either side of one `read_from`/`write_to` call.
pub const TRANSFER_PIECES_MAX: usize = 1 << 20;
/// Distinct peers one endpoint's address vector holds.
pub const PEERS_MAX: usize = 4096;
/// Bytes of an endpoint name (`fi_getname`) this crate accepts.
pub const ENDPOINT_NAME_BYTES_MAX: usize = 256;
/// How long a transfer with operations in flight waits without any completion before the
/// endpoint is closed and the call fails; [`Endpoint::set_completion_timeout`] changes it per
/// endpoint.
pub const COMPLETION_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(30);

const _: () = assert!(OPS_INFLIGHT_MAX > 0 && OPS_INFLIGHT_MAX <= 1024);
