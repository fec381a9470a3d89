//! `tessera bench meta`: metadata operations in the style of mdtest, against the local file
//! system and the round-trip floor, side by side in one run.
//!
//! 1 and 4 client processes, each in a directory of its own (`unique`) and all in one
//! (`shared`), run the phases of [`Phase::PASS`] — create (and close), stat, open-close,
//! readdir, rename, unlink, mkdir, rmdir, tree create, tree remove, and `tar-x` (unpacking an
//! archive of a small tree, [`tar`]) — on each method in
//! turn within every repetition (a shuffled order per repetition, [`report::turn_order`]):
//! - `native`: the Tessera client library;
//! - `mount`: the same system calls through `tessera mount` (FUSE; root and /dev/fuse);
//! - `local-disk`: the same system calls in a local directory on the disk of the cluster's
//!   directory (the private cluster's; `--cluster` given: the system's temporary directory);
//! - `tmpfs`: the same in `/dev/shm`;
//! - `floor`: a null request and reply (`Ping`) to the same mds over the same transport.
//!
//! Each row gives ops/s (all processes; median and range over the repetitions), p50 and p99
//! latency over every operation, its ratio to `local-disk` and to `tmpfs`, its p50 over the
//! floor's, and for `native` and `mount` the mds's durable commits per second and changes
//! per commit over the phase (`MdsStats`). Every phase is checked after it ran, untimed:
//! every name made is listed, every file is empty, every name removed is gone.

mod ops;
mod tar;
mod worker;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::json;
use tessera_client::{Client, ErrorCode};

use ops::{Target, TREE_FANOUT};
pub use worker::{run as run_worker, WorkerArgs};
use worker::{Outcome, Phase, Step};

use super::CommonArgs;
use crate::report::{self, Figure, Line, Meta, Panel, Point, Progress, Report, Scale, Spread};

/// Options of `tessera bench meta`.
#[derive(Debug, Clone, clap::Args)]
pub struct MetaArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Files (and directories) each process makes per phase (default 1000, 200 with --quick).
    #[arg(long)]
    pub files: Option<usize>,
    /// Repetitions of every (processes, directories, method) (default 5, 3 with --quick).
    #[arg(long)]
    pub repetitions: Option<usize>,
}

/// Client processes of the cases.
const PROCESS_COUNTS: [usize; 2] = [1, 4];
/// I/O servers of the private cluster.
const SERVERS: u16 = 4;

/// Where the processes of a case make their names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dirs {
    /// A directory per process.
    Unique,
    /// One directory for all.
    Shared,
}

impl Dirs {
    const BOTH: [Self; 2] = [Self::Unique, Self::Shared];

    fn name(self) -> &'static str {
        match self {
            Self::Unique => "unique",
            Self::Shared => "shared",
        }
    }
}

/// What a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The Tessera client library.
    Native,
    /// System calls through `tessera mount`.
    Mount,
    /// System calls in a local directory on the cluster directory's disk.
    LocalDisk,
    /// System calls in tmpfs.
    Tmpfs,
    /// A null request and reply to the mds.
    Floor,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Mount => "mount",
            Self::LocalDisk => "local-disk",
            Self::Tmpfs => "tmpfs",
            Self::Floor => "floor",
        }
    }

    /// Whether its operations reach the mds (its commits are counted).
    fn tessera(self) -> bool {
        matches!(self, Self::Native | Self::Mount)
    }
}

/// One (phase, processes, directories, method).
#[derive(Debug, Clone, Serialize)]
pub struct MetaRow {
    /// The mdtest phase (`ping` for the floor).
    pub phase: &'static str,
    /// Client processes.
    pub processes: usize,
    /// A directory per process or one shared.
    pub dirs: Dirs,
    /// What was measured.
    pub method: &'static str,
    /// Operations per second, all processes, median over the repetitions.
    pub ops_s: f64,
    /// The slowest repetition's.
    pub ops_s_min: f64,
    /// The fastest repetition's.
    pub ops_s_max: f64,
    /// Median latency of one operation over every repetition, microseconds.
    pub p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub p99_us: f64,
    /// Operations of one repetition, all processes.
    pub ops: u64,
    /// `ops_s` over `local-disk`'s in the same case.
    pub vs_local_disk: Option<f64>,
    /// `ops_s` over `tmpfs`'s in the same case.
    pub vs_tmpfs: Option<f64>,
    /// `p50_us` over the floor's (a ping with as many processes).
    pub p50_vs_floor: Option<f64>,
    /// The mds's durable commits per second during the phase (median repetition).
    pub mds_commits_s: Option<f64>,
    /// Namespace changes per durable commit during the phase (all repetitions).
    pub changes_per_commit: Option<f64>,
    /// Repetitions measured.
    pub repetitions: usize,
}

impl report::Row for MetaRow {
    fn key(&self) -> (String, &str) {
        (case(self.phase, self.processes, self.dirs), self.method)
    }
}

fn case(phase: &str, processes: usize, dirs: Dirs) -> String {
    format!("{phase} {processes}p {}", dirs.name())
}

/// The samples of one row.
#[derive(Default)]
struct Samples {
    ops_s: Vec<f64>,
    latencies_us: Vec<f32>,
    ops: u64,
    commits_s: Vec<f64>,
    changes: u64,
    commits: u64,
}

/// A method's place in one case: where its processes work and how the parent reaches it.
struct Place {
    method: Method,
    /// The workers' target.
    target: Target,
    /// The root of the run in the target's namespace.
    root: String,
}

/// What the parent uses to make and remove the case directories.
enum Maker<'a> {
    Native(&'a Client),
    Posix(&'a Path),
}

impl<'a> Maker<'a> {
    fn of(target: &'a Target, client: &'a Client) -> Self {
        match target {
            Target::Native(_) => Maker::Native(client),
            Target::Posix(root) => Maker::Posix(root),
        }
    }

    fn mkdir(&self, path: &str) -> Result<(), String> {
        match self {
            Maker::Native(client) => match client.mkdir(path, 0o755) {
                Ok(_) => Ok(()),
                Err(err) if err.code() == Some(ErrorCode::Exists) => Ok(()),
                Err(err) => Err(format!("mkdir {path}: {err}")),
            },
            Maker::Posix(root) => {
                let local = root.join(path.trim_start_matches('/'));
                std::fs::create_dir_all(&local)
                    .map_err(|err| format!("mkdir {}: {err}", local.display()))
            }
        }
    }

    fn rmdir(&self, path: &str) -> Result<(), String> {
        match self {
            Maker::Native(client) => client.rmdir(path).map_err(|e| format!("rmdir {path}: {e}")),
            Maker::Posix(root) => {
                let local = root.join(path.trim_start_matches('/'));
                std::fs::remove_dir(&local)
                    .map_err(|err| format!("rmdir {}: {err}", local.display()))
            }
        }
    }
}

/// A `tessera mount` of the bench's cluster, unmounted on drop.
struct Mount {
    dir: PathBuf,
}

impl Mount {
    /// Mounts the cluster of `cluster_file`, or says why it cannot.
    fn start(cluster_file: &Path) -> Result<Self, String> {
        // SAFETY: geteuid cannot fail and touches no memory of ours.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 || !Path::new("/dev/fuse").exists() {
            return Err(format!(
                "mounting needs root and /dev/fuse (uid {euid}, /dev/fuse present: {})",
                Path::new("/dev/fuse").exists()
            ));
        }
        let dir =
            std::env::temp_dir().join(format!("tessera-bench-meta-mount-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|err| format!("mount point {}: {err}", dir.display()))?;
        let program = tessera_cluster::tessera_program().map_err(|err| err.to_string())?;
        let output = std::process::Command::new(&program)
            .arg("mount")
            .arg(&dir)
            .arg("--cluster")
            .arg(cluster_file)
            .output()
            .map_err(|err| format!("{program} mount: {err}"))?;
        if !output.status.success() {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!(
                "tessera mount failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Self { dir })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Ok(program) = tessera_cluster::tessera_program() {
            let _ = std::process::Command::new(program)
                .arg("umount")
                .arg(&self.dir)
                .output();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A local directory of the run, removed on drop.
struct LocalDir(PathBuf);

impl LocalDir {
    fn make(path: PathBuf) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|err| format!("cannot make {}: {err}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for LocalDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn files(args: &MetaArgs) -> usize {
    args.files
        .unwrap_or(if args.common.quick { 200 } else { 1000 })
        .max(1)
}

fn repetitions(args: &MetaArgs) -> usize {
    args.repetitions
        .unwrap_or(if args.common.quick { 3 } else { 5 })
        .max(1)
}

/// The directories of one case under `base`: one per process, or one for all.
fn case_dirs(base: &str, processes: usize, dirs: Dirs) -> Vec<String> {
    match dirs {
        Dirs::Unique => (0..processes)
            .map(|rank| format!("{base}/p{rank}"))
            .collect(),
        Dirs::Shared => vec![format!("{base}/shared"); processes],
    }
}

/// Runs the experiment and writes its report.
pub fn run(args: &MetaArgs) -> Result<report::Outcome, String> {
    let common = &args.common;
    let (cluster, client) = super::open_cluster(common, SERVERS)?;
    let files = files(args);
    let repetitions = repetitions(args);
    let pid = std::process::id();
    // The local directory sits on the disk of the cluster's directory.
    let local_parent = cluster
        .file
        .parent()
        .and_then(Path::parent)
        .filter(|_| common.cluster.is_none())
        .map_or_else(std::env::temp_dir, Path::to_path_buf);
    let local = LocalDir::make(local_parent.join(format!("tessera-bench-meta-local-{pid}")))?;
    let tmpfs = LocalDir::make(PathBuf::from(format!("/dev/shm/tessera-bench-meta-{pid}")))?;
    let tar_dir = LocalDir::make(local_parent.join(format!("tessera-bench-meta-tar-{pid}")))?;
    let tar_source = tar::make_source(&tar_dir.0, files)?;
    let mount = Mount::start(&cluster.file);
    if let Err(why) = &mount {
        eprintln!("bench meta: the mount rows are not measured: {why}");
    }
    let (native_root, mount_root) = (
        format!("/bench/meta-native-{pid}"),
        format!("/bench/meta-mount-{pid}"),
    );
    let places = places(
        &cluster.file,
        (&native_root, &mount_root),
        (&local, &tmpfs),
        mount.as_ref().ok(),
    );
    for place in &places {
        Maker::of(&place.target, &client).mkdir(&place.root)?;
    }
    let sweep = Sweep {
        cluster_file: &cluster.file,
        client: &client,
        places: &places,
        files,
        repetitions,
        tar_source: &tar_source,
    };
    let (samples, verified) = sweep.measure()?;
    let rows = rows(&samples, &places, repetitions)?;
    drop(mount);
    let report = Report {
        bench: "meta",
        quick: common.quick,
        meta: Meta::now(repetitions),
        config: json!({
            "servers": SERVERS,
            "processes": PROCESS_COUNTS,
            "files_per_process": files,
            "tree_fanout": TREE_FANOUT,
            "local_disk": local.0.display().to_string(),
            "tmpfs": tmpfs.0.display().to_string(),
            "mount": match &mount_note(&places) { Some(note) => note.clone(), None => "measured".to_owned() },
            "transport": "tcp (the mds is reached by TCP on every host)",
        }),
        verified,
        rows,
    };
    let text = text(&report)?;
    let figure = figure(&report);
    for root in [&native_root, &mount_root] {
        let _ = client.rmdir(root);
    }
    report.finish(common, &text, &[figure])
}

/// The places of the methods: the native client under `native_root`, the mount (if it
/// started) under `mount_root`, and a local directory and tmpfs under `/run`.
fn places(
    cluster_file: &Path,
    (native_root, mount_root): (&str, &str),
    (local, tmpfs): (&LocalDir, &LocalDir),
    mount: Option<&Mount>,
) -> Vec<Place> {
    let mut places = vec![
        Place {
            method: Method::Native,
            target: Target::Native(cluster_file.to_path_buf()),
            root: native_root.to_owned(),
        },
        Place {
            method: Method::LocalDisk,
            target: Target::Posix(local.0.clone()),
            root: "/run".to_owned(),
        },
        Place {
            method: Method::Tmpfs,
            target: Target::Posix(tmpfs.0.clone()),
            root: "/run".to_owned(),
        },
    ];
    if let Some(mount) = mount {
        places.insert(
            1,
            Place {
                method: Method::Mount,
                target: Target::Posix(mount.dir.clone()),
                root: mount_root.to_owned(),
            },
        );
    }
    places
}

/// The samples of every row: by (processes, index of the dirs, index of the place or
/// `usize::MAX` for the floor, phase).
type SampleMap = std::collections::BTreeMap<(usize, usize, usize, &'static str), Samples>;

/// What every case of the run shares.
struct Sweep<'a> {
    cluster_file: &'a Path,
    client: &'a Client,
    places: &'a [Place],
    files: usize,
    repetitions: usize,
    tar_source: &'a tar::TarSource,
}

impl Sweep<'_> {
    /// Every case (process count, shared or unique directories), each repetition running a
    /// pass on every place in a shuffled order, then (unique directories) the floor. The
    /// samples, and whether every check passed.
    fn measure(&self) -> Result<(SampleMap, bool), String> {
        let cases = PROCESS_COUNTS.len() * Dirs::BOTH.len();
        let progress = Progress::new("meta", (cases * self.repetitions) as u64);
        let mut samples = SampleMap::new();
        let mut verified = true;
        for &processes in &PROCESS_COUNTS {
            let mut workers = worker::spawn(processes)?;
            for (dirs_index, &dirs) in Dirs::BOTH.iter().enumerate() {
                for repetition in 0..self.repetitions {
                    verified &= self.passes(
                        &mut workers,
                        (processes, dirs_index, dirs),
                        repetition,
                        &mut samples,
                    )?;
                    if dirs == Dirs::Unique {
                        verified &=
                            self.floor(&mut workers, processes, dirs_index, &mut samples)?;
                    }
                    progress.step(&format!(
                        "{processes} processes, {} directories",
                        dirs.name()
                    ));
                }
            }
        }
        Ok((samples, verified))
    }

    /// One repetition of one case: a pass of every phase on every place, in an order
    /// shuffled per repetition. Whether every check passed.
    fn passes(
        &self,
        workers: &mut crate::lockstep::Lockstep,
        (processes, dirs_index, dirs): (usize, usize, Dirs),
        repetition: usize,
        samples: &mut SampleMap,
    ) -> Result<bool, String> {
        let mut verified = true;
        for turn in report::turn_order(repetition, self.places.len()) {
            let place = &self.places[turn];
            let base = format!("{}/r{repetition}-{processes}{}", place.root, dirs.name());
            verified &= run_pass(
                self.client,
                place,
                &base,
                (processes, dirs, self.files, self.tar_source),
                workers,
                |phase, outcome, mds| {
                    let row = samples
                        .entry((processes, dirs_index, turn, phase.name()))
                        .or_default();
                    add(row, outcome, mds);
                },
            )?;
        }
        Ok(verified)
    }

    /// The floor: as many processes pinging the mds. Whether every ping answered.
    fn floor(
        &self,
        workers: &mut crate::lockstep::Lockstep,
        processes: usize,
        dirs_index: usize,
        samples: &mut SampleMap,
    ) -> Result<bool, String> {
        let steps = vec![
            Step {
                target: Target::Native(self.cluster_file.to_path_buf()),
                phase: Phase::Ping,
                dir: String::new(),
                items: self.files,
                tar: None,
            };
            processes
        ];
        let outcomes = workers.step::<_, Outcome>(&steps)?;
        let verified = report_problems(Method::Floor, Phase::Ping, &outcomes);
        let row = samples
            .entry((processes, dirs_index, usize::MAX, Phase::Ping.name()))
            .or_default();
        add(row, &outcomes, None);
        Ok(verified)
    }
}

fn mount_note(places: &[Place]) -> Option<String> {
    (!places.iter().any(|place| place.method == Method::Mount))
        .then(|| "not measured (see the bench's standard error)".to_owned())
}

/// The mds's (changes, commits) counters, for the methods that reach it.
type MdsCounts = Option<(u64, u64)>;

fn mds_counts(client: &Client) -> Result<(u64, u64), String> {
    client
        .mds_stats()
        .map(|stats| (stats.changes, stats.commits))
        .map_err(|err| format!("MdsStats: {err}"))
}

/// One pass of every phase on `place` under `base`, each phase's outcomes handed to `record`
/// with the mds's counters over it. Returns whether every check passed.
fn run_pass(
    client: &Client,
    place: &Place,
    base: &str,
    (processes, dirs, files, tar_source): (usize, Dirs, usize, &tar::TarSource),
    workers: &mut crate::lockstep::Lockstep,
    mut record: impl FnMut(Phase, &[Outcome], Option<(u64, u64, f64)>),
) -> Result<bool, String> {
    let maker = Maker::of(&place.target, client);
    let dirs_of = case_dirs(base, processes, dirs);
    maker.mkdir(base)?;
    for dir in &dirs_of {
        maker.mkdir(dir)?;
    }
    let mut verified = true;
    for phase in Phase::PASS {
        let steps: Vec<Step> = dirs_of
            .iter()
            .map(|dir| Step {
                target: place.target.clone(),
                phase,
                dir: dir.clone(),
                items: files,
                tar: (phase == Phase::TarX).then(|| tar_source.clone()),
            })
            .collect();
        let counted = place.method.tessera() && phase.changes();
        let before: MdsCounts = counted.then(|| mds_counts(client)).transpose()?;
        let outcomes = workers.step::<_, Outcome>(&steps)?;
        let after: MdsCounts = counted.then(|| mds_counts(client)).transpose()?;
        verified &= report_problems(place.method, phase, &outcomes);
        let seconds = outcomes.iter().map(|o| o.seconds).fold(0.0, f64::max);
        let mds = before
            .zip(after)
            .map(|((changes0, commits0), (changes1, commits1))| {
                (changes1 - changes0, commits1 - commits0, seconds)
            });
        record(phase, &outcomes, mds);
    }
    let mut unique: Vec<&String> = dirs_of.iter().collect();
    unique.dedup();
    for dir in unique {
        maker.rmdir(dir)?;
    }
    maker.rmdir(base)?;
    Ok(verified)
}

/// Prints what the checks found wrong; whether all passed.
fn report_problems(method: Method, phase: Phase, outcomes: &[Outcome]) -> bool {
    let mut all = true;
    for (rank, outcome) in outcomes.iter().enumerate() {
        if !outcome.verified {
            eprintln!(
                "bench meta: {} {}, process {rank}: {}",
                method.name(),
                phase.name(),
                outcome.problem
            );
            all = false;
        }
    }
    all
}

fn add(row: &mut Samples, outcomes: &[Outcome], mds: Option<(u64, u64, f64)>) {
    let ops: u64 = outcomes.iter().map(|o| o.ops).sum();
    let seconds = outcomes.iter().map(|o| o.seconds).fold(0.0, f64::max);
    row.ops = ops;
    row.ops_s.push(ops as f64 / seconds.max(1e-9));
    for outcome in outcomes {
        row.latencies_us.extend(&outcome.latencies_us);
    }
    if let Some((changes, commits, seconds)) = mds {
        row.changes += changes;
        row.commits += commits;
        row.commits_s.push(commits as f64 / seconds.max(1e-9));
    }
}

fn rows(samples: &SampleMap, places: &[Place], repetitions: usize) -> Result<Vec<MetaRow>, String> {
    let mut rows = Vec::new();
    for (&(processes, dirs_index, place, phase), row) in samples {
        let method = if place == usize::MAX {
            Method::Floor
        } else {
            places[place].method
        };
        let ops_s = Spread::of(&row.ops_s)
            .map_err(|err| format!("bench meta: {phase} {}: {err}", method.name()))?;
        let mut sorted = row.latencies_us.clone();
        sorted.sort_by(f32::total_cmp);
        rows.push(MetaRow {
            phase,
            processes,
            dirs: Dirs::BOTH[dirs_index],
            method: method.name(),
            ops_s: ops_s.median,
            ops_s_min: ops_s.min,
            ops_s_max: ops_s.max,
            p50_us: crate::lockstep::percentile(&sorted, 0.5),
            p99_us: crate::lockstep::percentile(&sorted, 0.99),
            ops: row.ops,
            vs_local_disk: None,
            vs_tmpfs: None,
            p50_vs_floor: None,
            mds_commits_s: Spread::of(&row.commits_s).ok().map(|spread| spread.median),
            changes_per_commit: (row.commits > 0).then(|| row.changes as f64 / row.commits as f64),
            repetitions,
        });
    }
    // The ratios, once every row is there.
    let find = |rows: &[MetaRow], phase: &str, processes, dirs, method: Method| {
        rows.iter()
            .find(|row| {
                row.phase == phase
                    && row.processes == processes
                    && row.dirs == dirs
                    && row.method == method.name()
            })
            .map(|row| (row.ops_s, row.p50_us))
    };
    let ratios: Vec<_> = rows
        .iter()
        .map(|row| {
            let local = find(&rows, row.phase, row.processes, row.dirs, Method::LocalDisk);
            let tmpfs = find(&rows, row.phase, row.processes, row.dirs, Method::Tmpfs);
            let floor = find(&rows, "ping", row.processes, Dirs::Unique, Method::Floor);
            (
                local.map(|(ops_s, _)| row.ops_s / ops_s),
                tmpfs.map(|(ops_s, _)| row.ops_s / ops_s),
                floor.map(|(_, p50)| row.p50_us / p50),
            )
        })
        .collect();
    for (row, (local, tmpfs, floor)) in rows.iter_mut().zip(ratios) {
        if row.method != Method::Floor.name() {
            row.vs_local_disk = local;
            row.vs_tmpfs = tmpfs;
            row.p50_vs_floor = floor;
        }
    }
    Ok(rows)
}

/// The table: per case, each phase's ops/s by method and the ratios the targets name.
fn text(report: &Report<MetaRow>) -> Result<String, String> {
    let mut out = String::new();
    for &processes in &PROCESS_COUNTS {
        let floor = report.row(&case("ping", processes, Dirs::Unique), Method::Floor.name())?;
        for dirs in Dirs::BOTH {
            let mut table = report::table([
                "phase",
                "native op/s",
                "mount op/s",
                "local op/s",
                "tmpfs op/s",
                "native/local",
                "mount/local",
                "native p50 us",
                "p50/floor",
                "changes/commit",
            ]);
            for phase in Phase::PASS {
                let key = case(phase.name(), processes, dirs);
                let native = report.row(&key, Method::Native.name())?;
                let local = report.row(&key, Method::LocalDisk.name())?;
                let tmpfs = report.row(&key, Method::Tmpfs.name())?;
                let mount = report.row(&key, Method::Mount.name()).ok();
                table.add_row([
                    phase.name().to_owned(),
                    report::cell(native.ops_s, 0),
                    mount.map_or_else(|| "-".to_owned(), |m| report::cell(m.ops_s, 0)),
                    report::cell(local.ops_s, 0),
                    report::cell(tmpfs.ops_s, 0),
                    report::ratio(native.ops_s, local.ops_s),
                    mount.map_or_else(|| "-".to_owned(), |m| report::ratio(m.ops_s, local.ops_s)),
                    report::cell(native.p50_us, 1),
                    report::ratio(native.p50_us, floor.p50_us),
                    native
                        .changes_per_commit
                        .map_or_else(|| "-".to_owned(), |c| report::cell(c, 2)),
                ]);
            }
            let _ = write!(
                out,
                "meta: {processes} process(es), {} directories, {} items per process (median of {} repetitions; floor: ping p50 {:.1} us, {:.0} op/s)\n{table}\n",
                dirs.name(),
                report.rows.iter().find(|r| r.phase == "create" && r.processes == processes).map_or(0, |r| r.ops / processes as u64),
                report.meta.repetitions,
                floor.p50_us,
                floor.ops_s,
            );
        }
    }
    let _ = writeln!(out, "verified: {}", report.verified);
    Ok(out)
}

/// Ops/s per phase, one line per method, one panel per process count (own directories).
fn figure(report: &Report<MetaRow>) -> Figure {
    let mut panels = Vec::new();
    for &processes in &PROCESS_COUNTS {
        let mut panel = Panel::categorical(
            &format!("{processes} process(es), own directories"),
            ("phase", Phase::PASS.iter().map(|phase| phase.name())),
            ("op/s (all processes)", Scale::Log10),
        );
        for method in [
            Method::Native,
            Method::Mount,
            Method::LocalDisk,
            Method::Tmpfs,
        ] {
            let points: Vec<Point> = Phase::PASS
                .iter()
                .enumerate()
                .filter_map(|(x, phase)| {
                    let key = case(phase.name(), processes, Dirs::Unique);
                    let row = report.row(&key, method.name()).ok()?;
                    Some(Point {
                        x: x as f64,
                        y: Spread {
                            min: row.ops_s_min,
                            median: row.ops_s,
                            max: row.ops_s_max,
                        },
                    })
                })
                .collect();
            if !points.is_empty() {
                panel.lines.push(Line {
                    name: method.name().to_owned(),
                    points,
                });
            }
        }
        panels.push(panel);
    }
    Figure {
        stem: "meta".to_owned(),
        title: format!(
            "meta: mdtest phases, native / mount / local disk / tmpfs (median, min-max of {} runs)",
            report.meta.repetitions
        ),
        panels,
    }
}
