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
//! `mpiexec.mpich` or `mpirun.openmpi` and the shim preloaded, one run per method and
//! repetition (the methods' order rotating from one repetition to the next), and turns the
//! JSON lines process 0 prints into one [`BtioMpiRow`] per method: the median over the
//! repetitions and its range. The program sees only MPI, so the rows hold no request or piece
//! counts.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::blockcol::open_cluster;
use super::CommonArgs;
use crate::report::{
    self, mib_s, Figure, Line, Measure, Meta, Outcome as Finished, Panel, Point, Progress, Report,
    Scale, SecondsRange, Spread,
};

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
/// Runs of each method (`--quick` and full alike: a run of 40 steps takes seconds).
const REPETITIONS: usize = 3;
/// The longest one run of the program may take before it is killed.
const RUN_SECONDS_MAX: u64 = 900;
/// The most bytes of the program's standard output kept.
const OUTPUT_BYTES_MAX: u64 = 1 << 20;
/// How a method's steps are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `MPI_File_write_at`, hint `tessera_method`.
    Independent,
    /// `MPI_File_write_at_all`, hint `tessera_coll`.
    Collective,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Independent => "independent",
            Self::Collective => "collective",
        }
    }
}

/// Independent methods (hint `tessera_method`), then collective ones (hint `tessera_coll`).
const METHODS: [(&str, Mode); 7] = [
    ("multiple", Mode::Independent),
    ("sieve", Mode::Independent),
    ("list", Mode::Independent),
    ("datatype", Mode::Independent),
    ("view", Mode::Independent),
    ("two_phase", Mode::Collective),
    ("server_directed", Mode::Collective),
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
    pub(super) fn launch(self, processes: u32, shim: &Path, cluster: &Path) -> Command {
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
#[derive(Debug, Clone, Deserialize)]
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
    let child = args
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
    let (status, text) = finish(
        child,
        Duration::from_secs(RUN_SECONDS_MAX),
        &format!("{method}: the program (RUN_SECONDS_MAX)"),
    )?;
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

/// Waits for `child`, whose standard output is piped, for at most `limit` (then kills it,
/// the error naming `what`): its exit status and the first `OUTPUT_BYTES_MAX` of its output.
pub(super) fn finish(
    mut child: std::process::Child,
    limit: Duration,
    what: &str,
) -> Result<(std::process::ExitStatus, String), String> {
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.take(OUTPUT_BYTES_MAX).read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|err| err.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{what} ran longer than {} s and was killed",
                limit.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((status, reader.join().unwrap_or_default()))
}

/// One method of btio-mpi: medians over the repetitions with their ranges.
#[derive(Debug, Clone, Serialize)]
pub struct BtioMpiRow {
    /// The MPI the program ran under.
    pub mpi: &'static str,
    /// Output steps written.
    pub steps: u32,
    /// The method (hint value).
    pub method: &'static str,
    /// Independent or collective.
    pub mode: Mode,
    /// MiB/s of the steps and I/O seconds (the slowest process's, barrier to barrier over all
    /// steps), medians over the repetitions.
    #[serde(flatten)]
    pub measure: Measure,
    /// The range of the I/O seconds.
    #[serde(flatten)]
    pub range: SecondsRange,
    /// Median seconds per step.
    pub seconds_per_step: f64,
    /// Seconds in the write calls alone, median.
    pub write_seconds: f64,
    /// Seconds of the read-back check, median.
    pub verify_seconds: f64,
    /// Bytes of all steps.
    pub bytes: u64,
    /// Wrong doubles found, summed over the repetitions.
    pub errors: u64,
    /// Every repetition read back right.
    pub verified: bool,
    /// 001 Table 3.2's I/O seconds for 40 steps (PVFS), where it has the method.
    pub paper_seconds_40_steps: Option<f64>,
    /// Runs of the program measured.
    pub repetitions: usize,
}

impl report::Row for BtioMpiRow {
    fn key(&self) -> (String, &str) {
        (case(self.mpi, self.steps), self.method)
    }
}

/// The case label of every row of one run.
fn case(mpi: &str, steps: u32) -> String {
    format!("{mpi}, {steps} steps")
}

/// The row of `method` from the outcomes of its runs.
fn row(
    mpi: Mpi,
    steps: u32,
    (method, mode): (&'static str, Mode),
    outcomes: &[Outcome],
) -> Result<BtioMpiRow, String> {
    let spread = |values: Vec<f64>| {
        Spread::of(&values).map_err(|err| {
            format!(
                "bench btio-mpi: case \"{}\", method \"{method}\": {err}",
                case(mpi.name(), steps)
            )
        })
    };
    let seconds = spread(outcomes.iter().map(|outcome| outcome.seconds).collect())?;
    let write_seconds = spread(
        outcomes
            .iter()
            .map(|outcome| outcome.write_seconds)
            .collect(),
    )?;
    let verify_seconds = spread(
        outcomes
            .iter()
            .map(|outcome| outcome.verify_seconds)
            .collect(),
    )?;
    if let Some(other) = outcomes.iter().find(|outcome| outcome.mode != mode.name()) {
        return Err(format!(
            "bench btio-mpi: {method}: the program ran it as {}, not {}",
            other.mode,
            mode.name()
        ));
    }
    let bytes = outcomes.first().map_or(0, |outcome| outcome.bytes);
    if let Some(other) = outcomes.iter().find(|outcome| outcome.bytes != bytes) {
        return Err(format!(
            "bench btio-mpi: {method}: one run wrote {bytes} bytes, another {}",
            other.bytes
        ));
    }
    Ok(BtioMpiRow {
        mpi: mpi.name(),
        steps,
        method,
        mode,
        measure: Measure::of_seconds(seconds, bytes),
        range: SecondsRange::of(seconds),
        seconds_per_step: seconds.median / f64::from(steps),
        write_seconds: write_seconds.median,
        verify_seconds: verify_seconds.median,
        bytes,
        errors: outcomes.iter().map(|outcome| outcome.errors).sum(),
        verified: outcomes.iter().all(|outcome| outcome.verified),
        paper_seconds_40_steps: paper_seconds(method),
        repetitions: outcomes.len(),
    })
}

fn paper_seconds(method: &str) -> Option<f64> {
    PAPER_SECONDS
        .iter()
        .find(|entry| entry.0 == method)
        .map(|entry| entry.1)
}

/// Runs the experiment and writes its report.
pub fn run(args: &BtioMpiArgs) -> Result<Finished, String> {
    let common = &args.common;
    let shim = find_shim(args)?;
    let program = find_program(args.mpi)?;
    let (cluster, _client) = open_cluster(common)?;
    let cluster_file = std::fs::canonicalize(&cluster.file)
        .map_err(|err| format!("{}: {err}", cluster.file.display()))?;
    let report = measure(args, &shim, &cluster_file, &program)?;
    report.finish(
        common,
        &text(&report, args.mpi)?,
        &[figure(&report, args.mpi)?],
    )
}

fn measure(
    args: &BtioMpiArgs,
    shim: &Path,
    cluster: &Path,
    program: &Path,
) -> Result<Report<BtioMpiRow>, String> {
    let steps = if args.common.quick {
        STEPS_QUICK
    } else {
        STEPS_FULL
    };
    let progress = Progress::new("btio-mpi", (REPETITIONS * METHODS.len()) as u64);
    let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::with_capacity(REPETITIONS); METHODS.len()];
    for repetition in 0..REPETITIONS {
        for turn in 0..METHODS.len() {
            let index = (turn + repetition) % METHODS.len();
            let (method, mode) = METHODS[index];
            progress.step(&format!(
                "{method} ({}), {steps} steps under {}, repetition {}",
                mode.name(),
                args.mpi.name(),
                repetition + 1
            ));
            outcomes[index].push(run_once(args, shim, cluster, program, method, steps)?);
        }
    }
    drop(progress);
    let rows = METHODS
        .iter()
        .zip(&outcomes)
        .map(|(&method, outcomes)| row(args.mpi, steps, method, outcomes))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Report {
        bench: "btio-mpi",
        quick: args.common.quick,
        meta: Meta::now(REPETITIONS),
        verified: rows.iter().all(|row| row.verified),
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
            "step_bytes": step_bytes(),
            "steps": steps,
            "steps_class_a": STEPS_FULL,
            "repetitions": REPETITIONS,
            "partition": "BT multi-partition: 2 x 2 x 2 cells of 32^3 points, 2 per process; file type = struct of one Fortran-order subarray of 5-double elements per cell, set with MPI_File_set_view at step * step_bytes; memory = the process's cells back to back",
            "methods": "independent: MPI_File_write_at with hint tessera_method; collective: MPI_File_write_at_all with hint tessera_coll",
            "figures": "seconds = the slowest process's time from the barrier before the first step to the barrier after the last (setting views and writing), median over the repetitions with min and max; the program sees only MPI, so the rows count no requests or pieces",
            "order": "one run of the program (one mpirun) per method and repetition, the methods' order rotating by repetition; each run makes, writes, reads back and removes its own file",
            "verify": "after the steps each process reads back a quarter of the file through the default view (MPI_File_read_at, 4 MiB at a time) and compares every double with the value the step, point and component give; the file size must be steps * step_bytes",
            "paper": "001 Table 3.2: I/O overhead s, class A, 4 clients, 40 steps, PVFS; its collective I/O is ROMIO two-phase",
        }),
        rows,
    })
}

/// Bytes of one output step of class A: 64^3 points of 5 doubles.
fn step_bytes() -> u64 {
    u64::from(POINTS).pow(3) * 40
}

/// The table and notes for people.
fn text(report: &Report<BtioMpiRow>, mpi: Mpi) -> Result<String, String> {
    let steps = report.rows.first().map_or(0, |row| row.steps);
    let mut table = report::table([
        "method",
        "mode",
        "I/O s",
        "min-max s",
        "MiB/s",
        "s/step",
        "verified",
        "paper s",
    ]);
    for (method, _) in METHODS {
        let row = report.row(&case(mpi.name(), steps), method)?;
        table.add_row([
            row.method.to_owned(),
            row.mode.name().to_owned(),
            report::cell(row.measure.seconds, 3),
            format!("{:.3}-{:.3}", row.range.seconds_min, row.range.seconds_max),
            report::cell(row.measure.mib_s, 1),
            report::cell(row.seconds_per_step, 3),
            row.verified.to_string(),
            row.paper_seconds_40_steps
                .map_or_else(|| "-".to_owned(), |seconds| report::cell(seconds, 1)),
        ]);
    }
    Ok(format!(
        "btio-mpi: NAS BT-IO class A output from an MPI program ({}) through the MPI-IO shim: {POINTS}^3 points x 5 doubles, {PROCESSES} processes in BT's multi-partition, {steps} steps, median of {REPETITIONS} runs\n{table}\n\
         paper (001 Table 3.2, 4 clients, PVFS): I/O seconds over 40 steps; ours over {steps}\n\
         verified: {}\n",
        mpi.name(),
        report.verified
    ))
}

/// MiB/s per method, independent and collective apart, beside the paper's (its seconds for
/// 40 steps turned into MiB/s).
fn figure(report: &Report<BtioMpiRow>, mpi: Mpi) -> Result<Figure, String> {
    let steps = report.rows.first().map_or(0, |row| row.steps);
    let mut panel = Panel::new(
        &format!(
            "class A, {PROCESSES} processes, {steps} steps ({})",
            mpi.name()
        ),
        ("method", Scale::Linear),
        ("MiB/s", Scale::Linear),
    );
    // Short names: the category labels sit side by side under the axis.
    panel.categories = METHODS
        .iter()
        .map(|(method, _)| match *method {
            "two_phase" => "2-phase".to_owned(),
            "server_directed" => "server-dir".to_owned(),
            other => other.to_owned(),
        })
        .collect();
    for mode in [Mode::Independent, Mode::Collective] {
        let mut points = Vec::new();
        for (index, (method, _)) in METHODS.iter().enumerate().filter(|(_, m)| m.1 == mode) {
            let row = report.row(&case(mpi.name(), steps), method)?;
            points.push(row.measure.point(index as f64));
        }
        panel.lines.push(Line {
            name: mode.name().to_owned(),
            points,
        });
    }
    let paper = METHODS
        .iter()
        .enumerate()
        .filter_map(|(index, (method, _))| {
            let rate = mib_s(step_bytes() * u64::from(STEPS_FULL), paper_seconds(method)?);
            Some(Point {
                x: index as f64,
                y: Spread {
                    min: rate,
                    median: rate,
                    max: rate,
                },
            })
        })
        .collect();
    panel.lines.push(Line {
        name: "paper (PVFS, 001 Table 3.2)".to_owned(),
        points: paper,
    });
    Ok(Figure {
        stem: "btio-mpi".to_owned(),
        title: "btio-mpi: BT-IO class A output through the MPI-IO shim".to_owned(),
        panels: vec![panel],
    })
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
            assert!(matches!(mode, Mode::Independent | Mode::Collective));
        }
        assert_eq!(
            METHODS.iter().filter(|m| m.1 == Mode::Collective).count(),
            2
        );
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
