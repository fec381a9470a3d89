//! Tessera's memory registration module (DESIGN.md "Memory registration", seed 000 §4.2 and
//! §5.1, seed 001 chapter 4).
//!
//! Zero-copy transfers need their buffers registered — pinned and translated — first, and on
//! RDMA fabrics that cost decides whether zero-copy pays. The data flowing through this crate
//! is lists of [`Segment`]s (byte ranges of this process) on their way to a transfer: the
//! transport hands them to a [`Registry`], which returns a [`Registration`] guard naming, for
//! each segment, the key of a registration covering it, and releases them when the transfer is
//! done. How it gets there is the [`Policy`]:
//!
//! - **grouping** ([`Grouping`]): one registration per segment, or Optimistic Group
//!   Registration ([`ogr`]) — group by the cost T = a·pages + b, register each group's hull,
//!   and on refusal find the holes ([`holes`]) and register the mapped parts;
//! - **caching** ([`Caching`]): none ("dynamic"), a pin-down cache (LRU, evicted entries
//!   deregistered at once), or FMRD (evicted entries deregistered in batches by a thread);
//! - **arenas** ([`Registry::register_arena`]): ranges registered once, every acquire inside
//!   them free;
//! - **invalidation**: cached registrations are watched for unmaps through userfaultfd
//!   ([`monitor`]), and [`Registry::invalidate`] does it explicitly, so a stale registration
//!   is never returned.
//!
//! Registrars implement [`Registrar`]: [`PinRegistrar`] (`mlock`/`munlock`, the pinning step
//! that dominates real registration, so the policies can be measured on any machine),
//! [`NoneRegistrar`], and `ofi` (`fi_mr_reg`) in its own crate. [`calibrate`] measures a
//! registrar's a and b; [`mapping::AnonymousMapping`] makes memory with holes for the tests and
//! benchmarks.

mod cache;
pub mod error;
pub mod fixed;
pub mod holes;
pub mod mapping;
pub mod monitor;
pub mod ogr;
pub mod pin;
pub mod policy;
pub mod registrar;
pub mod registry;
pub mod segment;
mod stats;

pub use error::RegError;
pub use fixed::{FixedRegistrar, FIXED_BYTES_MAX, FIXED_SLOTS_MAX};
pub use holes::{mapped_runs, HoleQuery, HOLE_RUNS_MAX};
pub use monitor::{Monitor, MONITOR_EVENTS_KEPT};
pub use ogr::{plan_groups, Group, OGR_QUERY_SEGMENTS_MIN};
pub use pin::{memlock_limit, PinRegistrar};
pub use policy::{
    CacheCapacity, Caching, Grouping, Policy, ACQUIRE_SEGMENTS_MAX, ARENAS_MAX,
    CACHE_BYTES_DEFAULT, CACHE_ENTRIES_DEFAULT, CACHE_ENTRIES_MAX, FMRD_BATCH,
    FMRD_BATCHES_QUEUED_MAX,
};
pub use registrar::{calibrate, CostModel, NoneRegistrar, RegHandle, Registrar};
pub use registry::{Cover, OwnedRegistration, Registration, Registry};
pub use segment::{page_bytes, Segment};
pub use stats::RegStats;

// The registry is shared between the transport's threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Registry>();
    send_sync::<PinRegistrar>();
    send_sync::<NoneRegistrar>();
    // The transport keeps one per outstanding request, on any thread.
    send_sync::<OwnedRegistration>();
};
