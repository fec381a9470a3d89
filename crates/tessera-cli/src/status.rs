//! `tessera status`: the state of every server of a cluster and how long each took to answer,
//! and with `--servers` every iod's storage counters and cost model; for people, or with
//! `--json` as one JSON object.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tessera_client::{Client, ClientError, ClientOptions, ClusterConfig};
use tessera_proto::{StorageCounters, STORE_FAILED, STORE_NO_SPACE, STORE_OK};

use crate::files::print_json;
use tessera_cluster::human;
use tessera_cluster::{out, outln};

/// How long `tessera status` waits for each server: a server slower than this is reported
/// down rather than waited for.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// Arguments of `tessera status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Cluster directory given to `tessera up` (else the cluster file is used).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also show every iod's storage counters (requests, pieces, storage calls, bytes
    /// wanted vs. moved, the plans its cost model chose), cost model and unified cache.
    #[arg(long)]
    servers: bool,
    /// Print one JSON object: `servers` (one entry per server), and `storage` with
    /// `--servers`; exact counts and bytes.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: tessera_cluster::ClusterArg,
}

/// One server as `status` reports it (the field names are stable).
#[derive(Debug, Serialize)]
struct ServerJson {
    name: String,
    /// `mds` or `iod`.
    role: &'static str,
    /// The iod's index (0 for the mds).
    index: usize,
    /// `up`, `degraded` or `down`.
    state: &'static str,
    pid: Option<u32>,
    /// Files (mds) or objects (iod) it holds.
    objects: Option<u64>,
    /// `PingReply.store_state` (0 ok).
    store_state: Option<u8>,
    /// How long it took to answer, seconds.
    answer_seconds: f64,
    /// Why it is degraded or down.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// One direction of an iod's storage counters.
#[derive(Debug, Serialize)]
struct CountersJson {
    requests: u64,
    pieces: u64,
    calls: u64,
    bytes_wanted: u64,
    bytes_moved: u64,
    per_piece: u64,
    batched: u64,
    sieve: u64,
    mapped: u64,
}

impl From<&StorageCounters> for CountersJson {
    fn from(counters: &StorageCounters) -> Self {
        Self {
            requests: counters.requests,
            pieces: counters.pieces,
            calls: counters.calls,
            bytes_wanted: counters.bytes_wanted,
            bytes_moved: counters.bytes_storage,
            per_piece: counters.per_piece,
            batched: counters.batched,
            sieve: counters.sieve,
            mapped: counters.mapped,
        }
    }
}

/// One iod's storage counters and cost model (`--servers`).
#[derive(Debug, Serialize)]
struct StorageJson {
    index: usize,
    reads: Option<CountersJson>,
    writes: Option<CountersJson>,
    io_uring: Option<bool>,
    model: Option<String>,
    /// `CacheCounters` by name (all zeros unless the iod serves `unified`).
    cache: Option<std::collections::BTreeMap<&'static str, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// What `status --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    /// When the report was made, RFC 3339 UTC, and in ns since the epoch.
    time: String,
    time_ns: u64,
    servers: Vec<ServerJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    storage: Option<Vec<StorageJson>>,
}

/// Asks every server of the cluster; the mds first, then the iods in index order.
fn servers(client: &Client) -> Vec<ServerJson> {
    client
        .ping_all_timed()
        .into_iter()
        .enumerate()
        .map(|(position, (name, elapsed, reply))| {
            let (role, index) = if position == 0 {
                ("mds", 0)
            } else {
                ("iod", position - 1)
            };
            let mut server = ServerJson {
                name,
                role,
                index,
                state: "down",
                pid: None,
                objects: None,
                store_state: None,
                answer_seconds: elapsed.as_secs_f64(),
                error: None,
            };
            match reply {
                Ok(ping) => {
                    server.state = if ping.store_state == STORE_OK {
                        "up"
                    } else {
                        server.error = Some(store_condition(ping.store_state));
                        "degraded"
                    };
                    server.pid = Some(ping.pid);
                    server.objects = Some(ping.objects);
                    server.store_state = Some(ping.store_state);
                }
                Err(err) => server.error = Some(err.to_string()),
            }
            server
        })
        .collect()
}

fn storage(client: &Client) -> Vec<StorageJson> {
    (0..client.server_count())
        .map(|index| match client.server_stats(index) {
            Ok(stats) => StorageJson {
                index,
                reads: Some((&stats.reads).into()),
                writes: Some((&stats.writes).into()),
                io_uring: Some(stats.io_uring),
                model: Some(stats.model),
                cache: Some(stats.cache.named().into_iter().collect()),
                error: None,
            },
            Err(err) => StorageJson {
                index,
                reads: None,
                writes: None,
                io_uring: None,
                model: None,
                cache: None,
                error: Some(err.to_string()),
            },
        })
        .collect()
}

/// Why `status` failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The cluster file is missing or malformed.
    #[error(transparent)]
    Cluster(#[from] ClientError),
    /// The JSON output could not be made.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Servers are down or degraded (the report was printed).
    #[error("{}", unhealthy(*down, *degraded))]
    Unhealthy {
        /// Servers not answering.
        down: usize,
        /// Servers answering with a degraded store.
        degraded: usize,
    },
}

fn unhealthy(down: usize, degraded: usize) -> String {
    match (down, degraded) {
        (0, degraded) => format!("{degraded} server(s) degraded"),
        (down, 0) => format!("{down} server(s) not answering"),
        (down, degraded) => format!("{down} server(s) not answering, {degraded} degraded"),
    }
}

/// Reports every server of a cluster. Fails when one is down or degraded.
pub fn status(args: &StatusArgs) -> Result<(), StatusError> {
    let config = match (&args.dir, &args.cluster.cluster) {
        (Some(dir), _) => ClusterConfig::load(&dir.join("cluster.toml")),
        (None, Some(file)) => ClusterConfig::load(file),
        (None, None) => ClusterConfig::from_env(),
    }?;
    let client = Client::new(
        &config,
        &ClientOptions {
            timeout: STATUS_TIMEOUT,
            ..ClientOptions::default()
        },
    );
    let time_ns = human::now_ns();
    let report = Report {
        time: human::rfc3339(time_ns),
        time_ns,
        servers: servers(&client),
        storage: args.servers.then(|| storage(&client)),
    };
    if args.json {
        print_json(&report)?;
    } else {
        print_servers(&report.servers);
        if let Some(storage) = &report.storage {
            print_storage_counters(storage);
        }
    }
    let count = |state: &str| {
        report
            .servers
            .iter()
            .filter(|server| server.state == state)
            .count()
    };
    match (count("down"), count("degraded")) {
        (0, 0) => Ok(()),
        (down, degraded) => Err(StatusError::Unhealthy { down, degraded }),
    }
}

fn print_servers(servers: &[ServerJson]) {
    outln!(
        "{:<28} {:<8} {:<8} {:>10} {:>9}",
        "server",
        "state",
        "pid",
        "objects",
        "answered"
    );
    for server in servers {
        let shown = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
        out!(
            "{:<28} {:<8} {:<8} {:>10} {:>9}",
            server.name,
            server.state,
            shown(server.pid.map(|pid| pid.to_string())),
            shown(server.objects.map(|objects| objects.to_string())),
            human::duration(Duration::from_secs_f64(server.answer_seconds)),
        );
        match &server.error {
            Some(error) => outln!("   {error}"),
            None => outln!(),
        }
    }
}

/// What `status` prints for a server whose `PingReply::store_state` is not `STORE_OK`.
fn store_condition(store_state: u8) -> String {
    match store_state {
        STORE_NO_SPACE => {
            "store degraded: no space left on its disk (changes fail until space is freed)"
                .to_owned()
        }
        STORE_FAILED => "store degraded: I/O error (the server reopens its store)".to_owned(),
        other => format!("store degraded: unknown state {other}"),
    }
}

/// The `--servers` table: one line per iod and direction, then each cost model.
fn print_storage_counters(storage: &[StorageJson]) {
    outln!();
    outln!(
        "{:<6} {:<5} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "iod",
        "op",
        "requests",
        "pieces",
        "calls",
        "wanted",
        "moved",
        "per-piece",
        "batched",
        "sieve",
        "mapped",
        "io_uring"
    );
    let mut models = Vec::new();
    for iod in storage {
        let index = iod.index;
        if let Some(error) = &iod.error {
            outln!("{index:<6} -     {error}");
            continue;
        }
        for (op, counters) in [("read", &iod.reads), ("write", &iod.writes)] {
            let Some(counters) = counters else { continue };
            outln!(
                "{index:<6} {op:<5} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
                counters.requests,
                counters.pieces,
                counters.calls,
                human::size(counters.bytes_wanted),
                human::size(counters.bytes_moved),
                counters.per_piece,
                counters.batched,
                counters.sieve,
                counters.mapped,
                if iod.io_uring == Some(true) { "yes" } else { "no" },
            );
        }
        if let Some(cache) = iod.cache.as_ref().filter(|cache| cache["budget_bytes"] > 0) {
            let named: Vec<String> = cache
                .iter()
                .map(|(name, n)| format!("{name}={n}"))
                .collect();
            outln!("{index:<6} cache {}", named.join(" "));
        }
        if let Some(model) = &iod.model {
            models.push(format!("iod {index}: {model}"));
        }
    }
    outln!();
    for model in models {
        outln!("{model}");
    }
}
