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
mod peer;
mod pool;
pub mod server;
pub mod stream;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use client::{
    Connection, PieceData, PieceDataMut, Registration, TransferCounts, REPLY_SPIN_MAX,
};
pub use error::NetError;
pub use peer::{Expected, Identity, Peer};
pub use pool::{Dial, Lease, Pool, SocketDial};
