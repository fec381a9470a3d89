//! The trace-driven simulator of two-level caching with DEMOTE (`tessera sim demote`).
//!
//! Accesses come from a block trace or a synthetic workload (`workload`); `engine` replays
//! them through `tessera-policy`'s client caches, DEMOTE buffers and server cache, the same
//! types the live path drives, charging time with a network and disk model (`cost`); `table`
//! runs the seed's Table 6.3 experiment and sets its figures (`paper`) beside ours; `cli` is
//! the subcommand's arguments and output (a table, or JSON).

pub mod cli;
pub mod cost;
pub mod engine;
pub mod paper;
pub mod table;
pub mod workload;
