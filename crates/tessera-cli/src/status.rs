//! `tessera status`: the state of every server of a cluster, and with `--servers` every iod's
//! storage counters and cost model.

use std::path::PathBuf;
use std::time::Duration;

use tessera_client::{Client, ClientOptions, ClusterConfig};
use tessera_proto::{STORE_FAILED, STORE_NO_SPACE, STORE_OK};

/// Arguments of `tessera status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Cluster directory given to `tessera up` (else the cluster file is used).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also show every iod's storage counters (requests, pieces, storage calls, bytes
    /// wanted vs. moved, and the plans its cost model chose) and its cost model.
    #[arg(long)]
    servers: bool,
    #[command(flatten)]
    cluster: tessera_cluster::ClusterArg,
}

/// Reports every server of a cluster.
pub fn status(args: &StatusArgs) -> Result<(), String> {
    let config = match (&args.dir, &args.cluster.cluster) {
        (Some(dir), _) => ClusterConfig::load(&dir.join("cluster.toml")),
        (None, Some(file)) => ClusterConfig::load(file),
        (None, None) => ClusterConfig::from_env(),
    }
    .map_err(|err| err.to_string())?;
    let client = Client::new(
        &config,
        &ClientOptions {
            timeout: Duration::from_secs(2),
            ..ClientOptions::default()
        },
    );
    let mut down = 0;
    let mut degraded = 0;
    println!(
        "{:<28} {:<8} {:<8} {:>10}",
        "server", "state", "pid", "objects"
    );
    for (name, reply) in client.ping_all() {
        match reply {
            Ok(ping) if ping.store_state == STORE_OK => println!(
                "{name:<28} {:<8} {:<8} {:>10}",
                "up", ping.pid, ping.objects
            ),
            Ok(ping) => {
                degraded += 1;
                println!(
                    "{name:<28} {:<8} {:<8} {:>10}   {}",
                    "degraded",
                    ping.pid,
                    ping.objects,
                    store_condition(ping.store_state)
                );
            }
            Err(err) => {
                down += 1;
                println!("{name:<28} {:<8} {:<8} {:>10}   {err}", "down", "-", "-");
            }
        }
    }
    if args.servers {
        print_storage_counters(&client);
    }
    match (down, degraded) {
        (0, 0) => Ok(()),
        (0, _) => Err(format!("{degraded} server(s) degraded")),
        (_, 0) => Err(format!("{down} server(s) not answering")),
        _ => Err(format!(
            "{down} server(s) not answering, {degraded} degraded"
        )),
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
fn print_storage_counters(client: &Client) {
    println!();
    println!(
        "{:<6} {:<5} {:>9} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
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
    for index in 0..client.server_count() {
        match client.server_stats(index) {
            Ok(stats) => {
                for (op, counters) in [("read", &stats.reads), ("write", &stats.writes)] {
                    println!(
                        "{index:<6} {op:<5} {:>9} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
                        counters.requests,
                        counters.pieces,
                        counters.calls,
                        counters.bytes_wanted,
                        counters.bytes_storage,
                        counters.per_piece,
                        counters.batched,
                        counters.sieve,
                        counters.mapped,
                        if stats.io_uring { "yes" } else { "no" },
                    );
                }
                models.push(format!("iod {index}: {}", stats.model));
            }
            Err(err) => println!("{index:<6} -     {err}"),
        }
    }
    println!();
    for model in models {
        println!("{model}");
    }
}
