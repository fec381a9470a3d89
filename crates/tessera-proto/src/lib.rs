//! Tessera's wire protocol: the bottom of the crate chain.
//!
//! Everything that crosses a socket is defined here: the fixed frame [`Header`], the
//! little-endian body [`codec`], the catalogue of operations in [`message`], the error codes
//! servers send back, and every named limit in [`limits`]. The stripe [`layout`] lives here
//! too because both the client and the metadata server compute with it. Nothing in this crate
//! does I/O, so every decoder can be fuzzed and property-tested in isolation.

pub mod access;
pub mod codec;
pub mod error;
pub mod header;
pub mod layout;
pub mod limits;
pub mod message;
pub mod metrics;
pub mod pattern;
pub mod segment;

pub use codec::{Decoder, Encoder, Wire};
pub use error::{ErrorCode, RemoteError, WireError};
pub use header::Header;
pub use layout::{Layout, Segment, SegmentCursor, StripeLayout};
pub use message::*;
pub use pattern::PatternLayout;
pub use tessera_dtype::{self as dtype, Datatype};
