//! Tessera's TCP transport.
//!
//! Frames (`header | body | bulk`, see `tessera-proto`) travel over TCP with `TCP_NODELAY`.
//! The client side ([`Connection`]) is blocking: one socket per server, bulk data gathered
//! straight from the caller's memory pieces with `writev` and scattered straight into them with
//! `readv`, in [`tessera_proto::TransferMode::Gather`]; `Pack` copies through one contiguous
//! buffer and `Multiple` sends one `Data` frame per piece, for the experiments that compare
//! them. The server side ([`server`]) is tokio: one task per connection, bounded connections,
//! bounded requests in flight, and a connection that sends garbage is dropped with one log line.

mod client;
mod error;
pub mod fabric;
pub mod iov;
pub mod local;
mod pool;
pub mod server;
pub mod stream;

pub use client::{Connection, Expected, PieceData, PieceDataMut, Registration, TransferCounts};
pub use error::NetError;
pub use pool::{Identity, Lease, Peer, Pool};
