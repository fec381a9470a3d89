//! `tessera bench listio` (seed 000 Fig. 4, seed 001 Fig. 3.4).
//!
//! Four client processes share a file striped over four servers. Each writes, then reads back,
//! 128 pieces of one size (128 B .. 8 KiB): file pieces interleaved with the other processes,
//! memory pieces separated by gaps of the same size. The same list call runs with each
//! transfer mode — `multiple` (one message per piece), `pack` (one copy into one buffer) and
//! `gather` (`writev`/`readv` from the pieces) — interleaved within each repetition so the
//! machine's noise falls on all of them alike. Every read is verified byte by byte. The
//! report has one [`ListioRow`] per (direction, piece size, method): the median over the
//! repetitions and its range.

use serde::Serialize;
use serde_json::json;
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions};

use super::inproc::InProcessCluster;
use super::CommonArgs;
use crate::report::{
    self, Direction, Figure, Line, Measure, Meta, Outcome, Panel, Progress, Report, Spread,
};
use crate::workers::{Pattern, Task, Workers};

const PROCESSES: usize = 4;
const SERVERS: u16 = 4;
const PIECES: usize = 128;
const PIECE_SIZES: [usize; 7] = [128, 256, 512, 1024, 2048, 4096, 8192];

/// The compared methods: the mechanisms over the `local` backend (the servers move the data
/// one-sidedly), the transfer model's choice (`hybrid`), and the framed modes over TCP.
/// A worker reads a `tcp:` prefix as "reach the servers by TCP".
/// `eager` goes through each connection's eager buffer while a request fits it (64 KiB: here
/// up to 2 KiB pieces, 32 to a server) and packs above that.
const METHODS: [&str; 8] = [
    "multiple",
    "pack",
    "gather",
    "eager",
    "hybrid",
    "tcp:multiple",
    "tcp:pack",
    "tcp:gather",
];

/// One timed step: every worker makes `iterations` list calls of 128 pieces of
/// `piece_bytes` with `method`.
struct Step<'a> {
    cluster: &'a std::path::Path,
    path: &'a str,
    write: bool,
    method: &'a str,
    iterations: u32,
    generation: u64,
    piece_bytes: usize,
}

/// Per call, over all workers: requests, storage calls, bytes and messages.
type Counts = (u64, u64, u64, u64);

impl Step<'_> {
    /// Seconds per call (the slowest worker's), the per-call requests, storage calls, bytes
    /// and messages of all workers, and whether every read was right.
    fn run(&self, workers: &mut Workers) -> Result<(f64, Counts, bool), String> {
        let tasks = (0..PROCESSES)
            .map(|rank| Task {
                cluster: self.cluster.to_path_buf(),
                path: self.path.to_owned(),
                write: self.write,
                method: self.method.to_owned(),
                iterations: self.iterations,
                generation: self.generation,
                sync: false,
                cache: None,
                pattern: Pattern::Interleaved {
                    rank,
                    processes: PROCESSES,
                    pieces: PIECES,
                    piece_bytes: self.piece_bytes,
                },
            })
            .collect();
        let (results, _) = workers.step(tasks)?;
        let verified = results.iter().all(|result| result.verified);
        let seconds = results
            .iter()
            .map(|result| result.seconds)
            .fold(0.0, f64::max);
        let per_call = |total: u64| total / u64::from(self.iterations);
        let counts = (
            per_call(results.iter().map(|r| r.requests).sum()),
            per_call(results.iter().map(|r| r.storage_pieces).sum()),
            per_call(results.iter().map(|r| r.bytes).sum()),
            per_call(results.iter().map(|r| r.messages).sum()),
        );
        Ok((seconds / f64::from(self.iterations), counts, verified))
    }
}

/// Piece sizes of the checks comparison (128 B is the acceptance figure: the smallest
/// pieces make the most requests per byte).
const CHECKS_PIECE_SIZES: [usize; 2] = [128, 2048];

/// The methods of the checks comparison.
const CHECKS_METHODS: [&str; 2] = ["gather, checked", "gather, unchecked"];

/// Which servers a row ran against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Servers {
    /// The bench's cluster of server processes.
    Cluster,
    /// Servers run inside the bench process (the checks comparison).
    InProcess,
}

/// One (direction, piece size, method) of listio.
#[derive(Debug, Clone, Serialize)]
pub struct ListioRow {
    /// Writes or reads.
    pub direction: Direction,
    /// Bytes of each of the 128 pieces per process.
    pub piece_bytes: usize,
    /// The transfer method (a `tcp:` prefix: over TCP).
    pub method: String,
    /// Which servers.
    pub servers: Servers,
    /// MiB/s and seconds, median over the repetitions, and the MiB/s range.
    #[serde(flatten)]
    pub measure: Measure,
    /// Client-to-server requests per call, all processes.
    pub requests: u64,
    /// File pieces per call, all processes.
    pub pieces: u64,
    /// Useful bytes per call, all processes.
    pub bytes: u64,
    /// Messages per call, all processes.
    pub messages: u64,
    /// Storage calls the servers made per call.
    pub storage_calls: u64,
    /// List calls per process in each repetition.
    pub iterations: u32,
    /// Repetitions measured.
    pub repetitions: usize,
    /// `gather, checked`: the median over the repetitions of its speed over `gather,
    /// unchecked` in the same repetition (the two run in turn within each).
    pub paired_vs_unchecked: Option<f64>,
}

impl report::Row for ListioRow {
    fn key(&self) -> (String, &str) {
        (case(self.direction, self.piece_bytes), &self.method)
    }
}

/// The case label of a row.
fn case(direction: Direction, piece_bytes: usize) -> String {
    format!("{direction} {piece_bytes} B")
}

/// List calls per process in one timed step of `piece_bytes` pieces.
fn iterations(common: &CommonArgs, piece_bytes: usize) -> u32 {
    let call_bytes = PIECES * piece_bytes;
    let budget = if common.quick { 2 << 20 } else { 16 << 20 };
    u32::try_from((budget / call_bytes).clamp(4, 256)).expect("at most 256")
}

/// The same gather list calls on servers with the checks of data requests on and off
/// ([`InProcessCluster`]), the two interleaved within each repetition: the rows
/// `gather, checked` and `gather, unchecked`.
fn checks_rows(
    common: &CommonArgs,
    workers: &mut Workers,
    generation: &mut u64,
    progress: &Progress,
) -> Result<(Vec<ListioRow>, bool), String> {
    let cluster = InProcessCluster::start(SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    let path = "/listio-checks";
    client
        .create(path, &CreateOptions::default())
        .map_err(|err| format!("create {path}: {err}"))?;
    let repetitions = checks_repetitions(common);
    let mut rows = Vec::new();
    let mut verified = true;
    for piece_bytes in CHECKS_PIECE_SIZES {
        let iterations = iterations(common, piece_bytes);
        let mut measured = Measured::new(CHECKS_METHODS.len());
        for repetition in 0..repetitions {
            for turn in 0..2 {
                let checked = (turn + repetition) % 2 == 0;
                cluster.check(checked);
                *generation += 1;
                for direction in Direction::BOTH {
                    let step = Step {
                        cluster: &cluster.file,
                        path,
                        write: direction == Direction::Write,
                        method: "gather",
                        iterations,
                        generation: *generation,
                        piece_bytes,
                    };
                    let (seconds, counts, ok) = step.run(workers)?;
                    verified &= ok;
                    measured.add(direction, usize::from(!checked), seconds, counts);
                }
            }
            progress.step(&format!("checks, {piece_bytes} B pieces"));
        }
        cluster.check(true);
        let mut measured_rows = measured.rows(
            piece_bytes,
            &CHECKS_METHODS,
            (iterations, repetitions),
            Servers::InProcess,
        )?;
        for row in &mut measured_rows {
            if row.method == CHECKS_METHODS[0] {
                let seconds = |method| &measured.seconds[measured.slot(row.direction, method)];
                row.paired_vs_unchecked = Some(report::paired_ratio(seconds(1), seconds(0)));
            }
        }
        rows.extend(measured_rows);
    }
    let _ = client.unlink(path);
    Ok((rows, verified))
}

/// The samples of one piece size: seconds per call of every repetition and the counts of
/// the last, per (direction, method), writes first.
struct Measured {
    methods: usize,
    seconds: Vec<Vec<f64>>,
    counts: Vec<Option<Counts>>,
}

impl Measured {
    fn new(methods: usize) -> Self {
        Self {
            methods,
            seconds: vec![Vec::new(); 2 * methods],
            counts: vec![None; 2 * methods],
        }
    }

    fn slot(&self, direction: Direction, method: usize) -> usize {
        usize::from(direction == Direction::Read) * self.methods + method
    }

    fn add(&mut self, direction: Direction, method: usize, seconds: f64, counts: Counts) {
        let slot = self.slot(direction, method);
        self.seconds[slot].push(seconds);
        self.counts[slot] = Some(counts);
    }

    /// One row per (direction, method): the median seconds per call over the repetitions,
    /// its range, and the counts of the last one.
    fn rows(
        &self,
        piece_bytes: usize,
        methods: &[&str],
        (iterations, repetitions): (u32, usize),
        servers: Servers,
    ) -> Result<Vec<ListioRow>, String> {
        let mut rows = Vec::new();
        for direction in Direction::BOTH {
            for (method_index, method) in methods.iter().enumerate() {
                let slot = self.slot(direction, method_index);
                let missing = || {
                    format!(
                        "bench listio: case \"{}\", method \"{method}\" was not measured",
                        case(direction, piece_bytes)
                    )
                };
                let seconds = Spread::of(&self.seconds[slot])
                    .map_err(|err| format!("{}: {err}", missing()))?;
                let (requests, storage_calls, bytes, messages) =
                    self.counts[slot].ok_or_else(missing)?;
                rows.push(ListioRow {
                    direction,
                    piece_bytes,
                    method: (*method).to_owned(),
                    servers,
                    measure: Measure::of_seconds(seconds, bytes),
                    requests,
                    // File pieces of the access; how the servers stored them is `storage_calls`.
                    pieces: (PIECES * PROCESSES) as u64,
                    bytes,
                    messages,
                    storage_calls,
                    iterations,
                    repetitions,
                    paired_vs_unchecked: None,
                });
            }
        }
        Ok(rows)
    }
}

fn repetitions(common: &CommonArgs) -> usize {
    if common.quick {
        5
    } else {
        7
    }
}

fn checks_repetitions(common: &CommonArgs) -> usize {
    if common.quick {
        9
    } else {
        15
    }
}

/// Runs the experiment and writes its report.
pub fn run(common: &CommonArgs) -> Result<Outcome, String> {
    let (cluster, client) = super::open_cluster(common, SERVERS)?;
    let path = format!("/bench/listio-{}", std::process::id());
    client
        .create(&path, &CreateOptions::default())
        .map_err(|err| format!("create {path}: {err}"))?;
    let repetitions = repetitions(common);
    let progress = Progress::new(
        "listio",
        (PIECE_SIZES.len() * repetitions + CHECKS_PIECE_SIZES.len() * checks_repetitions(common))
            as u64,
    );
    let mut workers = Workers::spawn(PROCESSES)?;
    let mut rows = Vec::new();
    let mut verified = true;
    let mut generation = 0u64;
    for piece_bytes in PIECE_SIZES {
        let iterations = iterations(common, piece_bytes);
        let mut measured = Measured::new(METHODS.len());
        for repetition in 0..repetitions {
            for turn in 0..METHODS.len() {
                let method_index = (turn + repetition) % METHODS.len();
                let method = METHODS[method_index];
                generation += 1;
                for direction in Direction::BOTH {
                    let step = Step {
                        cluster: &cluster.file,
                        path: &path,
                        write: direction == Direction::Write,
                        method,
                        iterations,
                        generation,
                        piece_bytes,
                    };
                    let (seconds, counts, ok) = step.run(&mut workers)?;
                    verified &= ok;
                    measured.add(direction, method_index, seconds, counts);
                }
            }
            progress.step(&format!("{piece_bytes} B pieces"));
        }
        rows.extend(measured.rows(
            piece_bytes,
            &METHODS,
            (iterations, repetitions),
            Servers::Cluster,
        )?);
    }
    let _ = client.unlink(&path);
    let (checks_rows, checks_verified) =
        checks_rows(common, &mut workers, &mut generation, &progress)?;
    drop(progress);
    rows.extend(checks_rows);
    verified &= checks_verified;
    let report = Report {
        bench: "listio",
        quick: common.quick,
        meta: Meta::now(repetitions),
        config: json!({
            "servers": SERVERS,
            "clients": PROCESSES,
            "transport": "local (tcp: rows over TCP)",
            "pieces_per_client": PIECES,
            "piece_bytes": PIECE_SIZES,
            "stripe_unit_bytes": tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
            "checks_rows": "gather on 4 iods run inside the bench process, the checks of data requests (capabilities; the one-sided path's credentials, pins and stall watch) on and off (a switch no server option reaches), interleaved per repetition",
            "checks_repetitions": checks_repetitions(common),
        }),
        verified,
        rows,
    };
    let text = text(&report)?;
    report.finish(common, &text, &[figure(&report)?])
}

/// The paper's table with our figures, and the capability comparison.
fn text(report: &Report<ListioRow>) -> Result<String, String> {
    let rate = |direction, piece_bytes, method| -> Result<f64, String> {
        Ok(report
            .row(&case(direction, piece_bytes), method)?
            .measure
            .mib_s)
    };
    let mut main = report::table([
        "op",
        "piece B",
        "multiple",
        "pack",
        "gather",
        "gather/mult",
        "gather/pack",
    ]);
    for direction in Direction::BOTH {
        for piece_bytes in PIECE_SIZES {
            let multiple = rate(direction, piece_bytes, "multiple")?;
            let pack = rate(direction, piece_bytes, "pack")?;
            let gather = rate(direction, piece_bytes, "gather")?;
            main.add_row([
                direction.to_string(),
                piece_bytes.to_string(),
                report::cell(multiple, 1),
                report::cell(pack, 1),
                report::cell(gather, 1),
                report::ratio(gather, multiple),
                report::ratio(gather, pack),
            ]);
        }
    }
    let mut capabilities = report::table([
        "op",
        "piece B",
        "gather checked",
        "gather unchecked",
        "checked/unchecked",
        "paired",
    ]);
    for piece_bytes in CHECKS_PIECE_SIZES {
        for direction in Direction::BOTH {
            let checked = rate(direction, piece_bytes, CHECKS_METHODS[0])?;
            let unchecked = rate(direction, piece_bytes, CHECKS_METHODS[1])?;
            let paired = report
                .row(&case(direction, piece_bytes), CHECKS_METHODS[0])?
                .paired_vs_unchecked
                .map_or_else(|| "-".to_owned(), |paired| format!("{paired:.3}x"));
            capabilities.add_row([
                direction.to_string(),
                piece_bytes.to_string(),
                report::cell(checked, 1),
                report::cell(unchecked, 1),
                report::ratio(checked, unchecked),
                paired,
            ]);
        }
    }
    Ok(format!(
        "listio: {PROCESSES} client processes x {SERVERS} I/O servers, {PIECES} pieces per process, local backend (MiB/s of all processes, median of {} repetitions; hybrid, eager and tcp: rows in the CSV and --json)\n{main}\n\
         checks of data requests (capabilities, one-sided credentials and pins), in-process servers (MiB/s):\n{capabilities}\n\
         paper (InfiniBand, 000 Fig. 4 / 001 Fig. 3.4): pack wins while a request is small (< 64 KiB), gather wins above it, by up to 1.5x; multiple message is the baseline both beat\n\
         verified: {}\n",
        report.meta.repetitions, report.verified
    ))
}

/// 000 Fig. 4: MiB/s against piece size, one line per method, writes and reads.
fn figure(report: &Report<ListioRow>) -> Result<Figure, String> {
    let mut panels = Vec::new();
    for direction in Direction::BOTH {
        let mut panel = Panel::of_direction(direction, "piece size (bytes)");
        for method in METHODS {
            let mut points = Vec::new();
            for piece_bytes in PIECE_SIZES {
                let row = report.row(&case(direction, piece_bytes), method)?;
                points.push(row.measure.point(piece_bytes as f64));
            }
            panel.lines.push(Line {
                name: method.to_owned(),
                points,
            });
        }
        panels.push(panel);
    }
    Ok(Figure {
        stem: "listio".to_owned(),
        title: format!(
            "listio: {PROCESSES} clients x {SERVERS} servers, {PIECES} pieces per client (median, min-max of {} runs)",
            report.meta.repetitions
        ),
        panels,
    })
}
