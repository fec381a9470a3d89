//! `tessera df`: the capacity and use of every iod's storage, and their total.
//!
//! Each iod answers a `Statfs` request with the `statvfs(3)` figures of the file system under
//! its data directory and the bytes its objects hold; `df` prints one line per iod and a
//! total (or, with `--json`, one object). Iods that share a file system (a local cluster)
//! each count it, so the total capacity is the sum of what every iod sees.

use serde::Serialize;
use tessera_client::{Client, ClientError, ClientOptions, ClusterConfig};
use thiserror::Error;

use crate::files::print_json;
use tessera_cluster::ClusterArg;

use tessera_cluster::human;
use tessera_cluster::outln;

/// Arguments of `df`.
#[derive(Debug, clap::Args)]
pub struct DfArgs {
    /// Print one JSON object: `iods` (one entry per iod) and `total`, sizes in bytes.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Capacity and use of one iod, or of all of them (the field names are stable).
#[derive(Debug, Default, Clone, Serialize)]
struct Usage {
    /// Size of the file system, bytes.
    total_bytes: u64,
    /// Bytes in use (`total_bytes - free_bytes`).
    used_bytes: u64,
    /// Bytes free.
    free_bytes: u64,
    /// Bytes free for the iod's writes.
    available_bytes: u64,
    /// Objects stored.
    objects: u64,
    /// Their logical sizes added up, bytes.
    object_bytes: u64,
    /// The disk space they take, bytes.
    object_allocated_bytes: u64,
}

impl Usage {
    fn add(&mut self, other: &Usage) {
        self.total_bytes += other.total_bytes;
        self.used_bytes += other.used_bytes;
        self.free_bytes += other.free_bytes;
        self.available_bytes += other.available_bytes;
        self.objects += other.objects;
        self.object_bytes += other.object_bytes;
        self.object_allocated_bytes += other.object_allocated_bytes;
    }

    /// Percent of the space an unprivileged writer can reach that is used, as `df` shows it.
    fn used_percent(&self) -> f64 {
        let reachable = self.used_bytes + self.available_bytes;
        if reachable == 0 {
            0.0
        } else {
            100.0 * self.used_bytes as f64 / reachable as f64
        }
    }
}

/// One iod's line.
#[derive(Debug, Serialize)]
struct IodUsage {
    index: usize,
    address: String,
    /// `None` when the iod did not answer (`error` says why).
    #[serde(flatten)]
    usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// What `df --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    iods: Vec<IodUsage>,
    /// The sum over the iods that answered.
    total: Usage,
}

/// Why `df` failed.
#[derive(Debug, Error)]
pub enum DfError {
    /// The cluster file is missing or malformed.
    #[error(transparent)]
    Cluster(#[from] ClientError),
    /// The JSON output could not be made.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Iods did not answer (the others were printed).
    #[error("df: {down} iod(s) not answering")]
    NotAnswering {
        /// How many.
        down: usize,
    },
}

/// `tessera df`. Fails (after printing the others) when an iod does not answer.
pub fn df(args: &DfArgs) -> Result<(), DfError> {
    let config = match &args.cluster.cluster {
        Some(path) => ClusterConfig::load(path),
        None => ClusterConfig::from_env(),
    }?;
    let client = Client::new(&config, &ClientOptions::default());
    let mut report = Report {
        iods: Vec::new(),
        total: Usage::default(),
    };
    for (index, entry) in config.iods.iter().enumerate() {
        let (usage, error) = match client.server_statfs(index) {
            Ok(reply) => {
                let usage = Usage {
                    total_bytes: reply.total_bytes,
                    used_bytes: reply.total_bytes.saturating_sub(reply.free_bytes),
                    free_bytes: reply.free_bytes,
                    available_bytes: reply.available_bytes,
                    objects: reply.objects,
                    object_bytes: reply.object_bytes,
                    object_allocated_bytes: reply.object_allocated_bytes,
                };
                report.total.add(&usage);
                (Some(usage), None)
            }
            Err(err) => (None, Some(err.to_string())),
        };
        report.iods.push(IodUsage {
            index,
            address: entry.address.clone(),
            usage,
            error,
        });
    }
    if args.json {
        print_json(&report)?;
    } else {
        print_table(&report);
    }
    let down = report.iods.iter().filter(|iod| iod.error.is_some()).count();
    if down == 0 {
        Ok(())
    } else {
        Err(DfError::NotAnswering { down })
    }
}

fn print_table(report: &Report) {
    outln!(
        "{:<6} {:<22} {:>9} {:>9} {:>9} {:>5} {:>8} {:>9}",
        "iod",
        "address",
        "size",
        "used",
        "avail",
        "use%",
        "objects",
        "in objects"
    );
    let line = |name: &str, address: &str, usage: &Usage| {
        outln!(
            "{name:<6} {address:<22} {:>9} {:>9} {:>9} {:>4.0}% {:>8} {:>9}",
            human::size(usage.total_bytes),
            human::size(usage.used_bytes),
            human::size(usage.available_bytes),
            usage.used_percent(),
            usage.objects,
            human::size(usage.object_bytes),
        );
    };
    for iod in &report.iods {
        match (&iod.usage, &iod.error) {
            (Some(usage), _) => line(&iod.index.to_string(), &iod.address, usage),
            (None, error) => outln!(
                "{:<6} {:<22} {}",
                iod.index,
                iod.address,
                error.as_deref().unwrap_or("no answer")
            ),
        }
    }
    line("total", "", &report.total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_up_and_reports_the_reachable_share_used() {
        let one = Usage {
            total_bytes: 100,
            used_bytes: 40,
            free_bytes: 60,
            available_bytes: 40,
            objects: 2,
            object_bytes: 10,
            object_allocated_bytes: 12,
        };
        let mut total = Usage::default();
        assert!(total.used_percent().abs() < f64::EPSILON);
        total.add(&one);
        total.add(&one);
        assert_eq!((total.total_bytes, total.objects), (200, 4));
        assert!((total.used_percent() - 50.0).abs() < 1e-9);
    }
}
