//! Cache policies, as plain data structures that both the live path and the simulator drive.
//!
//! Blocks flow down a two-level hierarchy: a client's [`ClientCache`] of clean blocks, the
//! server's [`ServerCache`], and the disk. With exclusive caching (DEMOTE, seed 001 §6.2) a
//! block the client evicts is demoted to the server, which places it by its [`Placement`];
//! with DEMOTE buffering (§6.3) evicted blocks wait in a [`DemoteBuffer`] and travel in
//! batches whose metadata goes first. Nothing here does I/O or keeps time: the iod's unified
//! cache uses [`replacement`] for its units, and `tessera-sim` replays traces through the same
//! types and charges the costs itself.
//!
//! Two decisions of an iod live here too, so that the supervisor (`tessera-cluster`) can name
//! them without depending on the server: how it serves reads ([`ServeMode`]), and the storage
//! [`cost`] model its planner prices plans by, with the file that model is kept in (the only
//! I/O of this crate; the measuring is the iod's).

pub mod buffer;
pub mod cache;
pub mod cost;
pub mod replacement;
pub mod serve;
pub mod server;

pub use buffer::{BatchId, BufferError, DemoteBuffer, Push, DEMOTE_BUFFER_BLOCKS_MAX};
pub use cache::{BlockCache, CacheError, ClientCache, CACHE_BLOCKS_MAX};
pub use replacement::{End, Lru, Replacement, UnitId};
pub use serve::ServeMode;
pub use server::{Placement, ServerCache};
