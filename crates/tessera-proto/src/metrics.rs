//! The names of the metrics the servers record, in one catalogue ([`CATALOGUE`]) so the
//! servers, the docs (`docs/ARCHITECTURE.md` §4.3) and the tests agree.
//!
//! The servers record them with the `metrics` crate's macros; `--metrics ADDR` on `tessera
//! mds`, `iod` or `agent` serves them in the Prometheus text format at `http://ADDR/metrics`.
//! Without `--metrics` no recorder is installed and every record is a no-op. Labels are
//! small, bounded sets: `kind` is an [`Opcode::name`](crate::Opcode::name), `code` an
//! [`ErrorCode::name`](crate::ErrorCode::name), `direction` is `read` or `write`, `plan` a
//! [`StoragePlan::name`](crate::StoragePlan::name) or `mapped`.

/// Counter: requests served, by `kind` (every server; the agent counts `agent_sign`).
pub const REQUESTS: &str = "tessera_requests_total";
/// Histogram: time from a request's header read to its reply written, seconds, by `kind`.
pub const REQUEST_SECONDS: &str = "tessera_request_seconds";
/// Counter: error replies sent, by `kind` and `code`.
pub const ERRORS: &str = "tessera_errors_total";
/// Counter: connections dropped for a protocol, socket or handshake failure.
pub const CONNECTIONS_DROPPED: &str = "tessera_connections_dropped_total";

/// Counter (iod): data requests served by the object store, by `direction`.
pub const STORAGE_REQUESTS: &str = "tessera_storage_requests_total";
/// Counter (iod): pieces those requests asked for, by `direction`.
pub const STORAGE_PIECES: &str = "tessera_storage_pieces_total";
/// Counter (iod): storage calls made (a sieving read-modify-write counts two per chunk), by
/// `direction`.
pub const STORAGE_CALLS: &str = "tessera_storage_calls_total";
/// Counter (iod): bytes the requests asked for, by `direction`.
pub const STORAGE_BYTES_WANTED: &str = "tessera_storage_bytes_wanted_total";
/// Counter (iod): bytes moved to or from storage (a sieving read moves the holes too), by
/// `direction`.
pub const STORAGE_BYTES_MOVED: &str = "tessera_storage_bytes_moved_total";
/// Counter (iod): requests by the plan that served them, by `direction` and `plan`.
pub const STORAGE_PLANS: &str = "tessera_storage_plans_total";
/// Counter (iod): the planner's decisions for requests of more than one run, by
/// `direction`, `requested` plan, `chosen` plan and `priced` (`cached` or `cold`).
pub const PLAN_DECISIONS: &str = "tessera_plan_decisions_total";

/// Counter (iod): capability checks, by `result`: `hit` (the connection's cache held it) or
/// `miss` (its tag was verified).
pub const CAPABILITY_CACHE: &str = "tessera_capability_cache_total";
/// Counter (iod): shared-memory regions a same-host client registered (`ShareRegion`).
pub const REGIONS_SHARED: &str = "tessera_regions_shared_total";
/// Counter (iod): lookups of a registered region by a one-sided request, by `result`: `hit`
/// or `miss` (unknown or evicted: the client registers it again).
pub const REGION_LOOKUPS: &str = "tessera_region_lookups_total";

/// Gauge (mds): the metadata store's state, as `PingReply.store_state` reports it (0 ok).
pub const MDS_STORE_STATE: &str = "tessera_mds_store_state";

/// Counter (agent): credentials signed.
pub const AGENT_CREDENTIALS: &str = "tessera_agent_credentials_total";

/// Counter (iod, `--serve unified`): cache units a grant found cached.
pub const CACHE_HITS: &str = "tessera_cache_hits_total";
/// Counter (iod): cache units a grant had to create (a read fills them from storage).
pub const CACHE_MISSES: &str = "tessera_cache_misses_total";
/// Counter (iod): clean cache units dropped to make room.
pub const CACHE_EVICTIONS: &str = "tessera_cache_evictions_total";
/// Counter (iod): cache units a grant had to wait for (a conflicting grant, or room).
pub const CACHE_GRANT_WAITS: &str = "tessera_cache_grant_waits_total";
/// Counter (iod): write-back steps that wrote dirty units to storage.
pub const CACHE_FLUSHES: &str = "tessera_cache_flushes_total";
/// Counter (iod): bytes written back to storage.
pub const CACHE_FLUSHED_BYTES: &str = "tessera_cache_flushed_bytes_total";
/// Gauge (iod): dirty bytes in the cache.
pub const CACHE_DIRTY_BYTES: &str = "tessera_cache_dirty_bytes";
/// Gauge (iod): bytes of the cache's units.
pub const CACHE_BYTES: &str = "tessera_cache_bytes";
/// Counter (iod): cache units made, by `memory`: `ready` (a slot of the registered Ready
/// region) or `raw` (heap memory).
pub const CACHE_UNITS_MADE: &str = "tessera_cache_units_made_total";
/// Counter (iod): cache units a write's data was received straight into (over a socket, or
/// pulled from a same-host or fabric client), then installed as they were.
pub const CACHE_UNITS_LANDED: &str = "tessera_cache_units_landed_total";
/// Counter (iod): cache units a caching client demoted into the unified cache (DEMOTE).
pub const CACHE_UNITS_DEMOTED: &str = "tessera_cache_units_demoted_total";
/// Counter (iod, `--ofi-provider`): bytes of reads written by RMA into clients, by the
/// `memory` they left from: `ready` (the unified cache's registered Ready region), `raw`
/// (other cache units) or `buffer` (a request buffer).
pub const FABRIC_PUSHED_BYTES: &str = "tessera_fabric_pushed_bytes_total";

/// What kind of metric a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only ever rises (named `…_total`).
    Counter,
    /// Set to the current value.
    Gauge,
    /// A distribution in buckets.
    Histogram,
}

/// Every metric a server records, its kind and the help line a scrape shows (`# HELP`).
pub const CATALOGUE: [(&str, MetricKind, &str); 28] = [
    (REQUESTS, MetricKind::Counter, "Requests served, by kind."),
    (
        REQUEST_SECONDS,
        MetricKind::Histogram,
        "Time from a request's body read to its reply sent, seconds, by kind.",
    ),
    (
        ERRORS,
        MetricKind::Counter,
        "Error replies sent, by request kind and error code.",
    ),
    (
        CONNECTIONS_DROPPED,
        MetricKind::Counter,
        "Connections refused or closed on a failure, by reason.",
    ),
    (
        STORAGE_REQUESTS,
        MetricKind::Counter,
        "Data requests served by the object store, by direction.",
    ),
    (
        STORAGE_PIECES,
        MetricKind::Counter,
        "Pieces the data requests asked for, by direction.",
    ),
    (
        STORAGE_CALLS,
        MetricKind::Counter,
        "Storage calls made, by direction.",
    ),
    (
        STORAGE_BYTES_WANTED,
        MetricKind::Counter,
        "Bytes the data requests asked for, by direction.",
    ),
    (
        STORAGE_BYTES_MOVED,
        MetricKind::Counter,
        "Bytes moved to or from storage, by direction.",
    ),
    (
        STORAGE_PLANS,
        MetricKind::Counter,
        "Data requests by the storage plan that served them.",
    ),
    (
        PLAN_DECISIONS,
        MetricKind::Counter,
        "Storage planner decisions for requests of more than one run.",
    ),
    (
        CAPABILITY_CACHE,
        MetricKind::Counter,
        "Capability checks served from the connection's cache (hit) or verified (miss).",
    ),
    (
        REGIONS_SHARED,
        MetricKind::Counter,
        "Shared-memory regions registered by same-host clients.",
    ),
    (
        REGION_LOOKUPS,
        MetricKind::Counter,
        "One-sided requests finding their shared region registered (hit) or not (miss).",
    ),
    (
        MDS_STORE_STATE,
        MetricKind::Gauge,
        "The metadata store's state: 0 ok, 1 no space, 2 failed.",
    ),
    (
        CACHE_HITS,
        MetricKind::Counter,
        "Unified cache units a grant found cached.",
    ),
    (
        CACHE_MISSES,
        MetricKind::Counter,
        "Unified cache units a grant created (reads fill them from storage).",
    ),
    (
        CACHE_EVICTIONS,
        MetricKind::Counter,
        "Clean unified cache units dropped to make room.",
    ),
    (
        CACHE_GRANT_WAITS,
        MetricKind::Counter,
        "Unified cache units a grant waited for.",
    ),
    (
        CACHE_FLUSHES,
        MetricKind::Counter,
        "Write-back steps of the unified cache.",
    ),
    (
        CACHE_FLUSHED_BYTES,
        MetricKind::Counter,
        "Bytes the unified cache wrote back to storage.",
    ),
    (
        CACHE_DIRTY_BYTES,
        MetricKind::Gauge,
        "Dirty bytes in the unified cache.",
    ),
    (
        CACHE_BYTES,
        MetricKind::Gauge,
        "Bytes of the unified cache's units.",
    ),
    (
        CACHE_UNITS_MADE,
        MetricKind::Counter,
        "Unified cache units made, in the registered Ready region (ready) or heap memory (raw).",
    ),
    (
        CACHE_UNITS_LANDED,
        MetricKind::Counter,
        "Unified cache units a write's data was received straight into, then installed.",
    ),
    (
        CACHE_UNITS_DEMOTED,
        MetricKind::Counter,
        "Unified cache units a caching client demoted (evicted clean blocks, DEMOTE).",
    ),
    (
        FABRIC_PUSHED_BYTES,
        MetricKind::Counter,
        "Bytes of reads written by RMA into clients, from Ready cache units (ready), other units (raw) or a request buffer (buffer).",
    ),
    (
        AGENT_CREDENTIALS,
        MetricKind::Counter,
        "Credentials the agent signed.",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_names_each_metric_once_as_prometheus_expects() {
        let mut names = std::collections::HashSet::new();
        for (name, kind, help) in CATALOGUE {
            assert!(names.insert(name), "{name} twice");
            assert!(name.starts_with("tessera_"), "{name}");
            assert!(
                name.bytes()
                    .all(|byte| byte.is_ascii_lowercase() || byte == b'_'),
                "{name}"
            );
            assert_eq!(
                kind == MetricKind::Counter,
                name.ends_with("_total"),
                "{name}"
            );
            assert!(help.ends_with('.'), "{name}");
        }
    }
}
