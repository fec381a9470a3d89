//! `tessera bench NAME`: the experiments of the papers, run against a live cluster.
//!
//! Every benchmark measures all the methods it compares in the same run, interleaved, and
//! checks the data it reads back (see `shared/BENCH.md`). With `--json` it prints exactly one
//! JSON object on standard output; otherwise it prints the paper's table with our figures and
//! writes `NAME.csv` and `NAME.png` into `--out`. Without `--cluster` (or `$TESSERA_CLUSTER`)
//! it starts a private cluster in a temporary directory and stops it afterwards.

use std::path::{Path, PathBuf};

use serde::Serialize;

mod listio;
mod views;

/// Arguments of `tessera bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The experiment.
    #[command(subcommand)]
    experiment: Experiment,
}

#[derive(Debug, clap::Subcommand)]
enum Experiment {
    /// 4 clients x 4 servers, 128 pieces of 128 B to 8 KiB: multiple vs pack vs gather (000 Fig. 4).
    Listio(CommonArgs),
    /// 4 clients x 4 servers, n x n byte matrix, 3 distributions: list vs view I/O, and a
    /// view on stripes vs a matching pattern layout (002 Tables 2-3, Figs. 2-4).
    Views(CommonArgs),
}

impl Experiment {
    fn common(&self) -> &CommonArgs {
        match self {
            Self::Listio(common) | Self::Views(common) => common,
        }
    }
}

/// Options every benchmark takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Reduced sizes that finish in well under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object on standard output (tables go to standard error).
    #[arg(long)]
    pub json: bool,
    /// Where to write NAME.csv and NAME.png.
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// Cluster file of a running cluster (default: $TESSERA_CLUSTER, else a private cluster).
    #[arg(long, env = "TESSERA_CLUSTER")]
    pub cluster: Option<PathBuf>,
}

/// One row of the output contract.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The case (e.g. "write seg=128").
    pub case: String,
    /// The method.
    pub method: String,
    /// MiB of useful data per second of wall time.
    pub mib_s: f64,
    /// Client-to-server request messages.
    pub requests: u64,
    /// Contiguous file pieces the servers touched.
    pub pieces: u64,
    /// Useful bytes moved.
    pub bytes: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Experiment-specific figures.
    pub extra: serde_json::Value,
}

/// The whole output of one run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Experiment name.
    pub bench: String,
    /// Reduced sizes.
    pub quick: bool,
    /// Cluster and workload settings.
    pub config: serde_json::Value,
    /// Every byte read back was right.
    pub verified: bool,
    /// One row per (case, method).
    pub rows: Vec<Row>,
}

/// A cluster to run against: the caller's, or a private one stopped on drop.
pub struct BenchCluster {
    /// Its cluster file.
    pub file: PathBuf,
    private_dir: Option<PathBuf>,
}

impl BenchCluster {
    /// Uses `given`, or starts a private cluster of `servers` iods.
    pub fn open(given: Option<&Path>, servers: u16) -> Result<Self, String> {
        if let Some(file) = given {
            return Ok(Self {
                file: file.to_owned(),
                private_dir: None,
            });
        }
        let dir = std::env::temp_dir().join(format!("tessera-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "bench: starting a private cluster of {servers} I/O servers in {}",
            dir.display()
        );
        crate::cluster::start(
            &dir,
            servers,
            tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
        )?;
        Ok(Self {
            file: dir.join("cluster.toml"),
            private_dir: Some(dir),
        })
    }
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        if let Some(dir) = &self.private_dir {
            crate::cluster::stop_all(dir);
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Runs the chosen experiment.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let report = match &args.experiment {
        Experiment::Listio(common) => listio::run(common)?,
        Experiment::Views(common) => views::run(common)?,
    };
    if args.experiment.common().json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|err| err.to_string())?
        );
    }
    if report.verified {
        Ok(())
    } else {
        Err(format!(
            "bench {}: data read back did not match what was written",
            report.bench
        ))
    }
}
