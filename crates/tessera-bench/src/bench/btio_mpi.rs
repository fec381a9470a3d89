//! `tessera bench btio-mpi`: NAS BT-IO class A output written by a real MPI program through
//! the MPI-IO shim, once per method (seed 001 Table 3.2, issue 6).
//!
//! The program is `mpiio/bench/btio.c`, which `make mpiio` builds with each MPI's `mpicc`
//! beside its shim (`target/mpiio/<mpi>/btio`): 4 processes in BT's multi-partition, a struct of one subarray per
//! cell as the file type of `MPI_File_set_view`, one `MPI_File_write_at` (independent methods,
//! hint `tessera_method`) or `MPI_File_write_at_all` (collective methods, hint
//! `tessera_coll`) per output step, then a read-back of the whole file with every byte
//! compared. This module starts (or uses) a cluster, finds the shim and the program of the MPI
//! (`target/mpiio/<mpi>/libtessera_mpiio.so` and `btio`), launches the program with
//! `mpiexec.mpich` or `mpirun.openmpi` and the shim preloaded, one run per method, and turns
//! the one JSON line process 0 prints into a row. The program sees only MPI, so request and
//! piece counts are not reported (0).

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use super::blockcol::open_cluster;
use super::{mib_s, CommonArgs, Report, Row};
use crate::plot::{Plot, Series};

/// The program `make mpiio` builds beside the shim (from `mpiio/bench/btio.c`).
const PROGRAM: &str = "btio";
/// The MPI-IO shim's file name in `target/mpiio/<mpi>/`.
pub(super) const SHIM: &str = "libtessera_mpiio.so";
/// I/O servers of a private cluster (`open_cluster`).
const SERVERS: u16 = 4;
const PROCESSES: u32 = 4;
/// Class A: 64^3 points.
const POINTS: u32 = 64;
const STEPS_QUICK: u32 = 2;
/// Class A: 200 iterations, output every 5.
const STEPS_FULL: u32 = 40;
/// The longest one run of the program may take before it is killed.
const RUN_SECONDS_MAX: u64 = 900;
/// The most bytes of the program's standard output kept.
const OUTPUT_BYTES_MAX: u64 = 1 << 20;
/// Independent methods (hint `tessera_method`), then collective ones (hint `tessera_coll`).
const METHODS: [(&str, &str); 7] = [
    ("multiple", "independent"),
    ("sieve", "independent"),
    ("list", "independent"),
    ("datatype", "independent"),
    ("view", "independent"),
    ("two_phase", "collective"),
    ("server_directed", "collective"),
];
/// Seed 001 Table 3.2 (class A, 4 clients, 40 steps, PVFS): I/O overhead in seconds of the
/// methods it has; its collective I/O is ROMIO's two-phase.
const PAPER_SECONDS: [(&str, f64); 4] = [
    ("multiple", 14.4),
    ("sieve", 11.7),
    ("list", 2.6),
    ("two_phase", 4.0),
];

/// The MPI to run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mpi {
    /// MPICH: `mpiexec.mpich`.
    Mpich,
    /// Open MPI: `mpirun.openmpi`.
    Openmpi,
}

impl Mpi {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Mpich => "mpich",
            Self::Openmpi => "openmpi",
        }
    }

    /// Where `make mpiio` put this MPI's shim and benchmark programs: `target/mpiio/<mpi>/`
    /// beside the target directory this binary runs from (`target/release/tessera-bench`).
    fn built_dir(self) -> Result<PathBuf, String> {
        let exe =
            std::env::current_exe().map_err(|err| format!("cannot find tessera-bench: {err}"))?;
        Ok(exe
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| format!("{} has no target directory", exe.display()))?
            .join("mpiio")
            .join(self.name()))
    }

    /// The file `name` that `make mpiio` built for this MPI (the shim or a benchmark program),
    /// or an error naming `bench`, the path and `make mpiio`.
    pub(super) fn built(self, bench: &str, name: &str) -> Result<PathBuf, String> {
        built_file(bench, &self.built_dir()?.join(name))
    }

    /// The package that installs this MPI's launcher.
    pub(super) fn package(self) -> &'static str {
        match self {
            Self::Mpich => "mpich and libmpich-dev",
            Self::Openmpi => "openmpi-bin and libopenmpi-dev",
        }
    }

    pub(super) fn launcher(self) -> &'static str {
        match self {
            Self::Mpich => "mpiexec.mpich",
            Self::Openmpi => "mpirun.openmpi",
        }
    }

    /// The launch command up to the program: `processes` processes, the shim preloaded, the
    /// cluster file in the environment.
    fn launch(self, processes: u32, shim: &Path, cluster: &Path) -> Command {
        let mut command = Command::new(self.launcher());
        let count = processes.to_string();
        match self {
            Self::Mpich => {
                command.args(["-n", &count, "-genv", "LD_PRELOAD"]);
                command
                    .arg(shim)
                    .args(["-genv", "TESSERA_CLUSTER"])
                    .arg(cluster);
            }
            Self::Openmpi => {
                command.args(["--allow-run-as-root", "--oversubscribe", "-n", &count]);
                command
                    .arg("-x")
                    .arg(format!("LD_PRELOAD={}", shim.display()))
                    .arg("-x")
                    .arg(format!("TESSERA_CLUSTER={}", cluster.display()));
            }
        }
        command
    }
}

/// Arguments of `tessera bench btio-mpi`.
#[derive(Debug, Clone, clap::Args)]
pub struct BtioMpiArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The MPI to run the program with (its build of the program and of the shim).
    #[arg(long, value_enum, default_value = "mpich")]
    pub mpi: Mpi,
    /// The MPI-IO shim to preload (default: target/mpiio/MPI/libtessera_mpiio.so in the
    /// target directory this binary is in, made by `make mpiio` with the program).
    #[arg(long)]
    pub shim: Option<PathBuf>,
}

/// The line process 0 of the program prints.
#[derive(Debug, Deserialize)]
struct Outcome {
    method: String,
    mode: String,
    seconds: f64,
    write_seconds: f64,
    verify_seconds: f64,
    bytes: u64,
    errors: u64,
    verified: bool,
}

/// Whether `program` can be found on `$PATH`.
pub(super) fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// `path` canonical if it is a file `make mpiio` built; else an error naming `bench`.
fn built_file(bench: &str, path: &Path) -> Result<PathBuf, String> {
    if !path.is_file() {
        return Err(format!(
            "bench {bench}: {} is missing: run `make mpiio` first (it builds the MPI-IO shim and the benchmark programs for each MPI)",
            path.display()
        ));
    }
    std::fs::canonicalize(path).map_err(|err| format!("{}: {err}", path.display()))
}

/// The shim to preload: `--shim`, or the one `make mpiio` built ([`Mpi::built`]).
fn find_shim(args: &BtioMpiArgs) -> Result<PathBuf, String> {
    match &args.shim {
        Some(shim) => built_file("btio-mpi", shim),
        None => args.mpi.built("btio-mpi", SHIM),
    }
}

/// The program `make mpiio` built for the MPI, once its launcher is known to be installed.
fn find_program(mpi: Mpi) -> Result<PathBuf, String> {
    if !on_path(mpi.launcher()) {
        return Err(format!(
            "bench btio-mpi: {} is not installed: install {} (make deps) or choose another --mpi",
            mpi.launcher(),
            mpi.package()
        ));
    }
    mpi.built("btio-mpi", PROGRAM)
}

/// One run of the program with `method`; its outcome, or why there is none.
fn run_once(
    args: &BtioMpiArgs,
    shim: &Path,
    cluster: &Path,
    program: &Path,
    method: &str,
    steps: u32,
) -> Result<Outcome, String> {
    let path = format!("tessera:/bench/btio-mpi-{}-{method}", std::process::id());
    let mut child = args
        .mpi
        .launch(PROCESSES, shim, cluster)
        .arg(program)
        .args([
            path.as_str(),
            &steps.to_string(),
            &POINTS.to_string(),
            method,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|err| format!("cannot start {}: {err}", args.mpi.launcher()))?;
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.take(OUTPUT_BYTES_MAX).read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(RUN_SECONDS_MAX);
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|err| err.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{method}: the program ran longer than {RUN_SECONDS_MAX} s (RUN_SECONDS_MAX) and was killed"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = reader.join().unwrap_or_default();
    let line = text
        .lines()
        .rev()
        .find(|line| line.starts_with('{'))
        .ok_or_else(|| format!("{method}: the program printed no result ({status})"))?;
    let outcome: Outcome = serde_json::from_str(line)
        .map_err(|err| format!("{method}: the program said {line:?}: {err}"))?;
    if outcome.method != method {
        return Err(format!(
            "{method}: the program reports method {}",
            outcome.method
        ));
    }
    if outcome.verified != status.success() {
        return Err(format!(
            "{method}: the program says verified={} but exited with {status}",
            outcome.verified
        ));
    }
    Ok(outcome)
}

fn row(method: &str, mode: &str, outcome: &Outcome) -> Row {
    let paper = PAPER_SECONDS
        .iter()
        .find(|entry| entry.0 == method)
        .map(|entry| entry.1);
    Row {
        case: "write".to_owned(),
        method: method.to_owned(),
        mib_s: mib_s(outcome.bytes, outcome.seconds),
        requests: 0,
        pieces: 0,
        bytes: outcome.bytes,
        seconds: outcome.seconds,
        extra: json!({
            "mode": mode,
            "program_mode": outcome.mode,
            "write_seconds": outcome.write_seconds,
            "verify_seconds": outcome.verify_seconds,
            "errors": outcome.errors,
            "verified": outcome.verified,
            "paper_io_seconds_40_steps": paper,
        }),
        skipped: None,
    }
}

/// Runs the experiment and returns its report.
pub fn run(args: &BtioMpiArgs) -> Result<Report, String> {
    let common = &args.common;
    let shim = find_shim(args)?;
    let program = find_program(args.mpi)?;
    let (cluster, _client) = open_cluster(common)?;
    let cluster_file = std::fs::canonicalize(&cluster.file)
        .map_err(|err| format!("{}: {err}", cluster.file.display()))?;
    let report = measure(args, &shim, &cluster_file, &program)?;
    let table = table(&report, args.mpi);
    if common.json {
        eprint!("{table}");
    } else {
        print!("{table}");
        write_outputs(common, &report)?;
    }
    Ok(report)
}

fn measure(
    args: &BtioMpiArgs,
    shim: &Path,
    cluster: &Path,
    program: &Path,
) -> Result<Report, String> {
    let steps = if args.common.quick {
        STEPS_QUICK
    } else {
        STEPS_FULL
    };
    let mut rows = Vec::with_capacity(METHODS.len());
    let mut verified = true;
    for (method, mode) in METHODS {
        eprintln!(
            "bench btio-mpi: {method} ({mode}), {steps} steps under {}",
            args.mpi.name()
        );
        let outcome = run_once(args, shim, cluster, program, method, steps)?;
        verified &= outcome.verified;
        rows.push(row(method, mode, &outcome));
    }
    Ok(Report {
        bench: "btio-mpi".to_owned(),
        quick: args.common.quick,
        config: json!({
            "servers": SERVERS,
            "clients": PROCESSES,
            "transport": "the C API client's default: the local one-sided backend on the servers' host (TESSERA_TRANSPORT=tcp for tcp)",
            "mpi": args.mpi.name(),
            "launcher": args.mpi.launcher(),
            "shim": shim.display().to_string(),
            "program": program.display().to_string(),
            "source": "mpiio/bench/btio.c",
            "class": "A",
            "grid_points": [POINTS, POINTS, POINTS],
            "step_bytes": u64::from(POINTS).pow(3) * 40,
            "steps": steps,
            "steps_class_a": STEPS_FULL,
            "partition": "BT multi-partition: 2 x 2 x 2 cells of 32^3 points, 2 per process; file type = struct of one Fortran-order subarray of 5-double elements per cell, set with MPI_File_set_view at step * step_bytes; memory = the process's cells back to back",
            "methods": "independent: MPI_File_write_at with hint tessera_method; collective: MPI_File_write_at_all with hint tessera_coll",
            "figures": "seconds = the slowest process's time from the barrier before the first step to the barrier after the last (setting views and writing); requests and pieces are not counted (the program sees only MPI): 0",
            "order": "one run of the program (one mpirun) per method, methods in the order of the rows; each run makes, writes, reads back and removes its own file",
            "verify": "after the steps each process reads back a quarter of the file through the default view (MPI_File_read_at, 4 MiB at a time) and compares every double with the value the step, point and component give; the file size must be steps * step_bytes",
            "paper": "001 Table 3.2: I/O overhead s, class A, 4 clients, 40 steps, PVFS; its collective I/O is ROMIO two-phase",
        }),
        verified,
        rows,
    })
}

fn table(report: &Report, mpi: Mpi) -> String {
    let steps = report.config["steps"].as_u64().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "btio-mpi: NAS BT-IO class A output from an MPI program ({}) through the MPI-IO shim: {POINTS}^3 points x 5 doubles, {PROCESSES} processes in BT's multi-partition, {steps} steps",
        mpi.name()
    );
    let _ = writeln!(
        out,
        "{:<16} {:<11} {:>8} {:>8} {:>9} {:>8} | {:>7}",
        "method", "mode", "I/O s", "MiB/s", "s/step", "verified", "paper s"
    );
    for row in &report.rows {
        let paper = row.extra["paper_io_seconds_40_steps"]
            .as_f64()
            .map_or_else(|| "-".to_owned(), |seconds| format!("{seconds:.1}"));
        let _ = writeln!(
            out,
            "{:<16} {:<11} {:>8.3} {:>8.1} {:>9.3} {:>8} | {:>7}",
            row.method,
            row.extra["mode"].as_str().unwrap_or(""),
            row.seconds,
            row.mib_s,
            row.seconds / steps.max(1) as f64,
            row.extra["verified"].as_bool().unwrap_or(false),
            paper
        );
    }
    let _ = writeln!(
        out,
        "paper (001 Table 3.2, 4 clients, PVFS): I/O seconds over 40 steps; ours over {steps}"
    );
    let _ = writeln!(out, "verified: {}", report.verified);
    out
}

fn write_outputs(common: &CommonArgs, report: &Report) -> Result<(), String> {
    std::fs::create_dir_all(&common.out)
        .map_err(|err| format!("cannot create {}: {err}", common.out.display()))?;
    let mut csv = String::from(
        "case,method,mode,mib_s,bytes,seconds,write_seconds,verify_seconds,verified\n",
    );
    for row in &report.rows {
        let _ = writeln!(
            csv,
            "{},{},{},{:.3},{},{:.6},{},{},{}",
            row.case,
            row.method,
            row.extra["mode"].as_str().unwrap_or(""),
            row.mib_s,
            row.bytes,
            row.seconds,
            row.extra["write_seconds"],
            row.extra["verify_seconds"],
            row.extra["verified"]
        );
    }
    let csv_path = common.out.join("btio-mpi.csv");
    std::fs::write(&csv_path, csv)
        .map_err(|err| format!("cannot write {}: {err}", csv_path.display()))?;
    let series = ["independent", "collective"]
        .into_iter()
        .map(|mode| Series {
            name: mode.to_owned(),
            points: report
                .rows
                .iter()
                .zip(1u32..)
                .filter(|(row, _)| row.extra["mode"] == mode)
                .map(|(row, index)| (f64::from(index), row.mib_s))
                .collect(),
        })
        .collect();
    let plot = Plot {
        title: "btio-mpi: class A output through the MPI-IO shim, 4 processes".to_owned(),
        x_label: "1 multiple 2 sieve 3 list 4 datatype 5 view 6 2-phase 7 server-dir".to_owned(),
        y_label: "MiB/s".to_owned(),
        log2_x: false,
        series,
    };
    let png_path = super::write_plot(common, "btio-mpi.png", &plot)?;
    super::report_written(&[csv_path, png_path]);
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The program's source, read where the tests are built (the bench runs what `make mpiio`
    /// built from it).
    pub(crate) fn source(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../mpiio/bench")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    #[test]
    fn every_method_is_one_the_program_knows() {
        let program = source("btio.c");
        for (method, mode) in METHODS {
            assert!(
                program.contains(&format!("\"{method}\"")),
                "{method} is not in btio.c"
            );
            assert!(mode == "independent" || mode == "collective");
        }
        assert_eq!(METHODS.iter().filter(|m| m.1 == "collective").count(), 2);
    }

    #[test]
    fn launch_preloads_the_shim_under_both_mpis() {
        let shim = Path::new("/x/libtessera_mpiio.so");
        let cluster = Path::new("/c/cluster.toml");
        let mpich: Vec<String> = Mpi::Mpich
            .launch(4, shim, cluster)
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            mpich,
            [
                "-n",
                "4",
                "-genv",
                "LD_PRELOAD",
                "/x/libtessera_mpiio.so",
                "-genv",
                "TESSERA_CLUSTER",
                "/c/cluster.toml"
            ]
        );
        let openmpi: Vec<String> = Mpi::Openmpi
            .launch(4, shim, cluster)
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        assert!(openmpi.contains(&"LD_PRELOAD=/x/libtessera_mpiio.so".to_owned()));
        assert!(openmpi.contains(&"--oversubscribe".to_owned()));
    }

    #[test]
    fn a_missing_shim_names_make_mpiio() {
        let args = BtioMpiArgs {
            common: CommonArgs {
                quick: true,
                json: true,
                out: PathBuf::from("."),
                cluster: None,
                registrar: None,
            },
            mpi: Mpi::Openmpi,
            shim: Some(PathBuf::from("/nonexistent/libtessera_mpiio.so")),
        };
        let err = find_shim(&args).unwrap_err();
        assert!(err.contains("make mpiio"), "{err}");
        assert!(err.contains("/nonexistent/libtessera_mpiio.so"), "{err}");
        let err = built_file("mpiio", Path::new("/nonexistent/mpiio-bench")).unwrap_err();
        assert!(err.contains("run `make mpiio` first"), "{err}");
    }
}
