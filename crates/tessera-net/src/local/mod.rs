//! The `local` backend: bulk data moved one-sidedly between two processes on one host.
//!
//! The client sends its request over a Unix socket with a [`tessera_proto::RemoteMemory`]
//! describing where its data lies; the server learns the client's pid from the socket
//! (`SO_PEERCRED`, never from the message) and pulls a write's data out of the client's
//! memory, or pushes a read's data into it, with `process_vm_readv`/`process_vm_writev`
//! ([`rma`]). That is the same-host analogue of server-initiated RDMA read/write with
//! gather/scatter lists: no frame carries data and no side packs it. Memory the client
//! shares outright — the connection's [`eager`] buffer and [`arena`]s — reaches the server
//! as sealed memfd descriptors passed over the socket ([`scm`], [`region`]), never by path.
//! [`policy`] decides per request between these and the other mechanisms with a cost model
//! measured on this machine.

pub mod arena;
pub mod eager;
pub mod mover;
pub mod policy;
pub mod region;
pub mod rma;
pub mod scm;
