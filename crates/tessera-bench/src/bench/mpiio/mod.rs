//! `tessera bench mpiio`: plain MPI-IO bandwidth, IOR-style, through the MPI-IO library on
//! Tessera, beside the same accesses through `tessera-client` natively and beside the MPI's
//! own MPI-IO on a local file (issue 15).
//!
//! The cases are independent `write_at`/`read_at` and collective `write_at_all`/`read_at_all`,
//! contiguous (IOR's segments: call `s` of rank `r` moves `T` bytes at `(s * P + r) * T`) and
//! strided (a vector file view whose blocks of `B` bytes interleave the ranks; call `s` moves
//! `T` bytes at view offset `s * T`), for each transfer size `T` and 1, 2 and 4 processes. Each
//! case is run by three columns, each a group of processes kept up for the whole sweep of one
//! process count and driven one case at a time:
//!
//! - `tessera-mpiio`: `mpiio/bench/mpiio.c` (built by `make mpiio` with the MPI's `mpicc` as
//!   `target/mpiio/<mpi>/mpiio-bench`, beside the shim), launched with `libtessera_mpiio.so`
//!   preloaded, on a file of a private 4-server cluster (or `--cluster`);
//! - `native`: `tessera mpiio-worker` processes making the same calls with `tessera-client`
//!   (`File::write_at`/`read_at` for contiguous independent, `ViewedFile` with the same view
//!   for strided, `ViewedFile::write_all`/`read_all` over a [`SocketCommunicator`] for the
//!   collective forms) on another file of the same cluster;
//! - `local-mpiio`: the same MPI program without the library, on a file in a temporary
//!   directory (the MPI's own MPI-IO, ROMIO or OMPIO).
//!
//! Each group reads one command line per case (the MPI ranks from FIFOs, so an idle group
//! waits in the kernel and takes no CPU from the group being measured; the workers from their
//! standard input), runs it (truncate, barrier, timed writes, barrier, barrier, timed reads,
//! barrier, then every word read checked against a formula of file offset, writing rank and
//! generation), and its rank 0 answers one JSON line. The columns take turns on every case,
//! in an order that rotates from case to case and repetition to repetition; a row
//! ([`MpiioRow`]) is the median over the repetitions, with the minimum and maximum kept.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read as _, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use tessera_client::collective::SOCKET_WAIT_DEFAULT;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CollectiveOptions, Communicator, CreateOptions, Datatype,
    IoReport, OpenMode, SocketCommunicator, ViewedFile,
};

use super::blockcol::open_cluster;
use super::btio_mpi::{on_path, Mpi, SHIM};
use super::CommonArgs;
use crate::report::{
    self, Direction, Figure, Line, Measure, Meta, Outcome as Finished, Panel, Report, Scale, Spread,
};

/// The program `make mpiio` builds beside the shim (from `mpiio/bench/mpiio.c`).
const PROGRAM: &str = "mpiio-bench";
/// I/O servers of a private cluster (`open_cluster`).
const SERVERS: u16 = 4;
const PROCESS_COUNTS: [u32; 3] = [1, 2, 4];
/// `--quick` transfer sizes. 16 MiB is left to the full run: the MPI-IO library moves
/// 20-100 MB/s before issue 15's fix, and 16 MiB x 4 processes x 4 cases x 3 columns x 3
/// repetitions x 2 MPIs alone would take minutes.
const QUICK_TRANSFERS: [u64; 3] = [64 << 10, 1 << 20, 4 << 20];
/// Full transfer sizes: 4 KiB to 16 MiB by powers of 4.
const FULL_TRANSFERS: [u64; 7] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];
/// Each process moves at least this much per case (more calls of small transfers).
const QUICK_PROCESS_BYTES: u64 = 4 << 20;
const FULL_PROCESS_BYTES: u64 = 16 << 20;
const QUICK_REPETITIONS: usize = 3;
const FULL_REPETITIONS: usize = 5;
/// The strided view's block: the transfer, or this if the transfer is larger.
const STRIDED_BLOCK_BYTES_MAX: u64 = 64 << 10;
/// The longest one case of one column may take (startup of the group included).
const CASE_SECONDS_MAX: u64 = 600;
/// The longest a group may take to quit.
const QUIT_SECONDS_MAX: u64 = 60;
/// The most lines of a group's standard output kept waiting to be read.
const OUTPUT_LINES_MAX: usize = 1 << 16;
/// The longest command or result line read.
const LINE_BYTES_MAX: usize = 4096;
/// The most cases one worker runs (as the program's `CASES_MAX`).
const CASES_MAX: usize = 100_000;
/// Generations are mixed into the data in 16 bits (the program's limit).
const GENERATIONS: u64 = 1 << 16;
/// The most bytes one worker process moves in one case (the program's `PROCESS_BYTES_MAX`).
const PROCESS_BYTES_MAX: u64 = 256 << 20;
/// A layout check reads the file in chunks of this many bytes.
const CHECK_CHUNK_BYTES: u64 = 4 << 20;
/// The acceptance of issue 15: tessera-mpiio / native at transfers of at least 1 MiB.
const ACCEPTANCE_RATIO: f64 = 0.8;
const ACCEPTANCE_TRANSFER_MIN: u64 = 1 << 20;

/// The three columns, in the order of the table.
const METHODS: [&str; 3] = ["tessera-mpiio", "native", "local-mpiio"];

/// Which MPIs to run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MpiChoice {
    /// MPICH only.
    Mpich,
    /// Open MPI only.
    Openmpi,
    /// Both (the default when both are installed).
    Both,
}

/// Arguments of `tessera bench mpiio`.
#[derive(Debug, Clone, clap::Args)]
pub struct MpiioArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The MPIs to run under (default: both if both are installed, else the one that is).
    #[arg(long, value_enum)]
    pub mpi: Option<MpiChoice>,
}

/// Arguments of the hidden `tessera mpiio-worker` command.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Rank among the workers.
    #[arg(long)]
    rank: usize,
    /// Workers in the group.
    #[arg(long)]
    processes: usize,
    /// The cluster file.
    #[arg(long)]
    cluster: PathBuf,
    /// The Tessera file (made by the parent).
    #[arg(long)]
    path: String,
    /// Where the workers' sockets meet.
    #[arg(long)]
    meeting: PathBuf,
}

/// One case: what every process of a column is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Case {
    collective: bool,
    strided: bool,
    transfer: u64,
    processes: u32,
}

impl Case {
    fn access(self) -> &'static str {
        if self.collective {
            "collective"
        } else {
            "independent"
        }
    }

    fn pattern(self) -> &'static str {
        if self.strided {
            "strided"
        } else {
            "contiguous"
        }
    }

    fn block(self) -> u64 {
        self.transfer.min(STRIDED_BLOCK_BYTES_MAX)
    }

    /// The case label of its rows of `direction` under `mpi`.
    fn name(self, direction: Direction, mpi: &str) -> String {
        case_name(
            direction,
            self.access(),
            self.pattern(),
            self.transfer,
            self.processes,
            mpi,
        )
    }
}

/// A parsed command line (the program's grammar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    collective: bool,
    strided: bool,
    transfer: u64,
    segments: u64,
    block: u64,
    generation: u64,
    check: bool,
}

impl Step {
    fn line(&self) -> String {
        format!(
            "run {} {} {} {} {} {} {}\n",
            if self.collective {
                "collective"
            } else {
                "independent"
            },
            if self.strided {
                "strided"
            } else {
                "contiguous"
            },
            self.transfer,
            self.segments,
            self.block,
            self.generation,
            u8::from(self.check)
        )
    }

    /// Parses a line: `Ok(None)` for `quit`.
    fn parse(line: &str) -> Result<Option<Self>, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"quit") {
            return Ok(None);
        }
        let bad = || {
            format!("bad command {line:?}: expected `run ACCESS PATTERN TRANSFER SEGMENTS BLOCK GENERATION CHECK` or `quit`")
        };
        if words.len() != 8 || words[0] != "run" {
            return Err(bad());
        }
        let number = |word: &str| word.parse::<u64>().map_err(|_| bad());
        let command = Self {
            collective: match words[1] {
                "independent" => false,
                "collective" => true,
                _ => return Err(bad()),
            },
            strided: match words[2] {
                "contiguous" => false,
                "strided" => true,
                _ => return Err(bad()),
            },
            transfer: number(words[3])?,
            segments: number(words[4])?,
            block: number(words[5])?,
            generation: number(words[6])?,
            check: number(words[7])? != 0,
        };
        let process_bytes = command.transfer.checked_mul(command.segments);
        if command.transfer == 0
            || !command.transfer.is_multiple_of(8)
            || command.segments == 0
            || process_bytes.is_none_or(|bytes| bytes > PROCESS_BYTES_MAX)
            || command.generation >= GENERATIONS
            || (command.strided
                && (command.block == 0
                    || !command.block.is_multiple_of(8)
                    || !command.transfer.is_multiple_of(command.block)))
        {
            return Err(format!(
                "{}: transfer must be a multiple of 8, transfer x segments at most {PROCESS_BYTES_MAX} (PROCESS_BYTES_MAX), the block a multiple of 8 dividing the transfer, the generation below {GENERATIONS}",
                bad()
            ));
        }
        Ok(Some(command))
    }

    fn process_bytes(&self) -> u64 {
        self.transfer * self.segments
    }

    /// The file offset of byte `position` of rank `rank`'s stream.
    fn file_offset(&self, processes: u64, rank: u64, position: u64) -> u64 {
        let unit = if self.strided {
            self.block
        } else {
            self.transfer
        };
        (position / unit * processes + rank) * unit + position % unit
    }

    /// The rank whose data lies at file offset `offset`.
    fn owner(&self, processes: u64, offset: u64) -> u64 {
        let unit = if self.strided {
            self.block
        } else {
            self.transfer
        };
        offset / unit % processes
    }

    /// The offset a call `segment` passes (file bytes for contiguous, view bytes for strided).
    fn call_offset(&self, processes: u64, rank: u64, segment: u64) -> u64 {
        if self.strided {
            segment * self.transfer
        } else {
            (segment * processes + rank) * self.transfer
        }
    }
}

/// The word at file offset `offset` written by `writer` in `generation` (as `value` in
/// mpiio.c).
fn value(offset: u64, writer: u64, generation: u64) -> u64 {
    ((offset >> 3) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ((writer + 1) << 56)
        ^ (generation << 40)
}

/// What rank 0 of a column answers for one case (the program's line; the workers add the
/// client's figures).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Outcome {
    access: String,
    pattern: String,
    transfer_bytes: u64,
    segments: u64,
    block_bytes: u64,
    processes: u32,
    generation: u64,
    /// Bytes every process together moved in one phase.
    bytes: u64,
    write_seconds: f64,
    read_seconds: f64,
    /// One barrier alone (each timed phase ends with one).
    barrier_seconds: f64,
    layout_checked: bool,
    errors: u64,
    verified: bool,
    #[serde(default)]
    tessera_method: String,
    #[serde(default)]
    tessera_coll: String,
    #[serde(default)]
    romio_cb_write: String,
    #[serde(default)]
    romio_ds_write: String,
    /// The client's figures of every process's writes and reads (workers only).
    #[serde(default)]
    write_report: Option<Figures>,
    #[serde(default)]
    read_report: Option<Figures>,
}

/// The figures of [`IoReport`] the rows keep, summed over the processes and calls.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Figures {
    requests: u64,
    storage_pieces: u64,
    one_sided: u64,
    bytes_copied: u64,
}

impl Figures {
    fn of(report: &IoReport) -> Self {
        Self {
            requests: report.requests,
            storage_pieces: report.storage_pieces,
            one_sided: report.one_sided,
            bytes_copied: report.bytes_copied,
        }
    }

    fn to_bytes(self) -> Vec<u8> {
        [
            self.requests,
            self.storage_pieces,
            self.one_sided,
            self.bytes_copied,
        ]
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        let word = |index: usize| {
            u64::from_le_bytes(bytes[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
        };
        Self {
            requests: word(0),
            storage_pieces: word(1),
            one_sided: word(2),
            bytes_copied: word(3),
        }
    }

    fn add(&mut self, other: Self) {
        self.requests += other.requests;
        self.storage_pieces += other.storage_pieces;
        self.one_sided += other.one_sided;
        self.bytes_copied += other.bytes_copied;
    }
}

fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}MiB", bytes >> 20)
    } else if bytes.is_multiple_of(1024) {
        format!("{}KiB", bytes >> 10)
    } else {
        format!("{bytes}B")
    }
}

// ---------------------------------------------------------------------------------------
// The native worker.

#[allow(clippy::needless_pass_by_value)] // used as `map_err(fail)`
fn fail(err: tessera_client::ClientError) -> String {
    err.to_string()
}

/// Runs one native worker: joins the group, opens the file, then runs the cases its standard
/// input names until `quit` or the end of the input.
pub fn run_worker(args: &WorkerArgs) -> Result<(), String> {
    let group = SocketCommunicator::join(
        &args.meeting,
        args.rank,
        args.processes,
        SOCKET_WAIT_DEFAULT,
    )
    .map_err(fail)?;
    let config = ClusterConfig::load(&args.cluster).map_err(fail)?;
    let client = Client::new(&config, &ClientOptions::default());
    let file = client
        .open(&args.path, OpenMode::ReadWrite)
        .map_err(|err| format!("open {}: {err}", args.path))?;
    let mut viewed = ViewedFile::new(file);
    let mut input = std::io::stdin().lock();
    let mut buffers = (Vec::new(), Vec::new());
    for _ in 0..CASES_MAX {
        let mut line = String::new();
        (&mut input)
            .take(LINE_BYTES_MAX as u64)
            .read_line(&mut line)
            .map_err(|err| format!("mpiio worker {}: {err}", args.rank))?;
        if line.is_empty() {
            break;
        }
        // Every rank must be told the same (as the program checks).
        let lines = group.allgather(line.as_bytes()).map_err(fail)?;
        if lines.iter().any(|other| other != line.as_bytes()) {
            return Err(format!(
                "mpiio worker {}: the workers were given different commands",
                args.rank
            ));
        }
        let Some(command) = Step::parse(&line)? else {
            break;
        };
        let outcome = run_case(args, &client, &group, &mut viewed, &command, &mut buffers)?;
        if let Some(outcome) = outcome {
            let mut stdout = std::io::stdout().lock();
            writeln!(
                stdout,
                "{}",
                serde_json::to_string(&outcome).map_err(|err| err.to_string())?
            )
            .and_then(|()| stdout.flush())
            .map_err(|err| format!("mpiio worker 0: {err}"))?;
        }
    }
    viewed.close().map_err(fail)
}

/// One case on one worker; rank 0 returns the group's outcome.
fn run_case(
    args: &WorkerArgs,
    client: &Client,
    group: &SocketCommunicator,
    viewed: &mut ViewedFile,
    command: &Step,
    buffers: &mut (Vec<u8>, Vec<u8>),
) -> Result<Option<Outcome>, String> {
    let processes = args.processes as u64;
    let rank = args.rank as u64;
    let mine = command.process_bytes();
    let length = usize::try_from(mine).map_err(|err| err.to_string())?;
    let transfer = usize::try_from(command.transfer).map_err(|err| err.to_string())?;
    let (data, back) = buffers;
    data.resize(length, 0);
    back.resize(length, 0);
    for (index, word) in data.chunks_exact_mut(8).enumerate() {
        let offset = command.file_offset(processes, rank, index as u64 * 8);
        word.copy_from_slice(&value(offset, rank, command.generation).to_le_bytes());
    }
    let byte = Datatype::byte();
    if command.strided {
        let filetype = Datatype::vector(
            mine / command.block,
            command.block,
            i64::try_from(command.block * processes).map_err(|err| err.to_string())?,
            &byte,
        )
        .map_err(|err| err.to_string())?;
        viewed
            .set_view(rank * command.block, &filetype)
            .map_err(fail)?;
    } else {
        viewed.set_view(0, &byte).map_err(fail)?;
    }
    if rank == 0 {
        client.truncate(&args.path, 0).map_err(fail)?;
    }
    let options = CollectiveOptions::default();
    group.barrier().map_err(fail)?;
    let started = Instant::now();
    group.barrier().map_err(fail)?;
    let barrier_seconds = started.elapsed().as_secs_f64();
    let mut written = Figures::default();
    group.barrier().map_err(fail)?;
    let started = Instant::now();
    for segment in 0..command.segments {
        let offset = command.call_offset(processes, rank, segment);
        let at = usize::try_from(segment).map_err(|err| err.to_string())? * transfer;
        let memory = &data[at..at + transfer];
        let report = match (command.collective, command.strided) {
            (true, _) => viewed.write_all(group, &options, offset, memory, &byte, command.transfer),
            (false, true) => viewed.write(offset, memory, &byte, command.transfer),
            (false, false) => viewed.file().write_at(offset, memory),
        }
        .map_err(fail)?;
        written.add(Figures::of(&report));
    }
    group.barrier().map_err(fail)?;
    let write_seconds = started.elapsed().as_secs_f64();

    back.fill(0);
    let mut read = Figures::default();
    group.barrier().map_err(fail)?;
    let started = Instant::now();
    for segment in 0..command.segments {
        let offset = command.call_offset(processes, rank, segment);
        let at = usize::try_from(segment).map_err(|err| err.to_string())? * transfer;
        let memory = &mut back[at..at + transfer];
        let report = match (command.collective, command.strided) {
            (true, _) => viewed.read_all(group, &options, offset, memory, &byte, command.transfer),
            (false, true) => viewed.read(offset, memory, &byte, command.transfer),
            (false, false) => viewed.file().read_at(offset, memory),
        }
        .map_err(fail)?;
        read.add(Figures::of(&report));
    }
    group.barrier().map_err(fail)?;
    let read_seconds = started.elapsed().as_secs_f64();

    // Outside the timing: every word, the size, and (CHECK) which rank's data lies where.
    let mut wrong = 0u64;
    for (index, (got, expected)) in back.chunks_exact(8).zip(data.chunks_exact(8)).enumerate() {
        if got != expected {
            if wrong < 5 {
                eprintln!(
                    "mpiio worker {rank}: read {:02x?} at file byte {}, expected {:02x?}",
                    got,
                    command.file_offset(processes, rank, index as u64 * 8),
                    expected
                );
            }
            wrong += 1;
        }
    }
    let total = mine * processes;
    if rank == 0 {
        let size = viewed.file().stat().map_err(fail)?.size;
        if size != total {
            eprintln!("mpiio worker 0: the file holds {size} bytes, {total} expected");
            wrong += 1;
        }
    }
    if command.check {
        wrong += check_layout(viewed, command, processes, rank, total)?;
    }
    let mut mine_figures = Vec::with_capacity(96);
    mine_figures.extend_from_slice(&write_seconds.to_le_bytes());
    mine_figures.extend_from_slice(&read_seconds.to_le_bytes());
    mine_figures.extend_from_slice(&wrong.to_le_bytes());
    mine_figures.extend_from_slice(&written.to_bytes());
    mine_figures.extend_from_slice(&read.to_bytes());
    mine_figures.extend_from_slice(&barrier_seconds.to_le_bytes());
    let all = group.allgather(&mine_figures).map_err(fail)?;
    if rank != 0 {
        return Ok(None);
    }
    let float = |bytes: &[u8], at: usize| {
        f64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    };
    let (mut write_total, mut read_total) = (Figures::default(), Figures::default());
    let mut errors = 0;
    for one in &all {
        errors += u64::from_le_bytes(one[16..24].try_into().expect("8 bytes"));
        write_total.add(Figures::from_bytes(&one[24..56]));
        read_total.add(Figures::from_bytes(&one[56..88]));
    }
    Ok(Some(Outcome {
        access: if command.collective {
            "collective"
        } else {
            "independent"
        }
        .to_owned(),
        pattern: if command.strided {
            "strided"
        } else {
            "contiguous"
        }
        .to_owned(),
        transfer_bytes: command.transfer,
        segments: command.segments,
        block_bytes: if command.strided {
            command.block
        } else {
            command.transfer
        },
        processes: u32::try_from(processes).map_err(|err| err.to_string())?,
        generation: command.generation,
        bytes: total,
        write_seconds: all.iter().map(|one| float(one, 0)).fold(0.0, f64::max),
        read_seconds: all.iter().map(|one| float(one, 8)).fold(0.0, f64::max),
        barrier_seconds: all.iter().map(|one| float(one, 88)).fold(0.0, f64::max),
        layout_checked: command.check,
        errors,
        verified: errors == 0,
        tessera_method: viewed.effective_method().name().to_owned(),
        tessera_coll: options.method.name().to_owned(),
        romio_cb_write: String::new(),
        romio_ds_write: String::new(),
        write_report: Some(write_total),
        read_report: Some(read_total),
    }))
}

/// Reads this rank's share of the whole file plainly and checks the owner of every word.
fn check_layout(
    viewed: &ViewedFile,
    command: &Step,
    processes: u64,
    rank: u64,
    total: u64,
) -> Result<u64, String> {
    let words = total / 8;
    let (first, last) = (
        words * rank / processes * 8,
        words * (rank + 1) / processes * 8,
    );
    let mut chunk = vec![0u8; usize::try_from(CHECK_CHUNK_BYTES).expect("small")];
    let mut wrong = 0;
    let mut from = first;
    while from < last {
        let length = (last - from).min(CHECK_CHUNK_BYTES);
        let part = &mut chunk[..usize::try_from(length).expect("small")];
        viewed.file().read_at(from, part).map_err(fail)?;
        for (index, got) in part.chunks_exact(8).enumerate() {
            let offset = from + index as u64 * 8;
            let owner = command.owner(processes, offset);
            if got != value(offset, owner, command.generation).to_le_bytes() {
                if wrong < 5 {
                    eprintln!(
                        "mpiio worker {rank}: layout check: file byte {offset} is not rank {owner}'s"
                    );
                }
                wrong += 1;
            }
        }
        from += length;
    }
    Ok(wrong)
}

// ---------------------------------------------------------------------------------------
// Groups: one column's processes for one process count.

/// One column's processes, driven a case at a time.
struct Group {
    label: String,
    children: Vec<Child>,
    /// Where each rank reads its commands (FIFOs or the workers' standard inputs).
    inputs: Vec<Box<dyn Write + Send>>,
    /// Rank 0's standard output, line by line.
    lines: Receiver<String>,
}

/// Forwards `source`'s lines to a channel (at most [`OUTPUT_LINES_MAX`] waiting).
fn line_reader(source: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(OUTPUT_LINES_MAX);
    std::thread::spawn(move || {
        for line in BufReader::new(source).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

impl Group {
    /// The MPI program under `mpi`: with the shim (`preload` = shim, cluster file) on a
    /// Tessera file, or without it on a local file.
    fn mpi(
        mpi: Mpi,
        processes: u32,
        program: &Path,
        file: &str,
        control: &Path,
        preload: Option<(&Path, &Path)>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(control)
            .map_err(|err| format!("cannot create {}: {err}", control.display()))?;
        let mut inputs: Vec<Box<dyn Write + Send>> = Vec::new();
        for rank in 0..processes {
            let fifo = control.join(format!("rank-{rank}"));
            let _ = std::fs::remove_file(&fifo);
            let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes())
                .map_err(|err| err.to_string())?;
            // SAFETY: mkfifo reads the NUL-terminated path `name` owns for the whole call.
            if unsafe { libc::mkfifo(name.as_ptr(), 0o600) } != 0 {
                return Err(format!(
                    "mkfifo {}: {}",
                    fifo.display(),
                    std::io::Error::last_os_error()
                ));
            }
            // Read and write: on Linux the open does not wait for the reader, and the rank's
            // open does not wait for us.
            let writer = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&fifo)
                .map_err(|err| format!("cannot open {}: {err}", fifo.display()))?;
            inputs.push(Box::new(writer));
        }
        let mut command = Command::new(mpi.launcher());
        let count = processes.to_string();
        match mpi {
            Mpi::Mpich => {
                command.args(["-n", &count]);
                if let Some((shim, cluster)) = preload {
                    command
                        .args(["-genv", "LD_PRELOAD"])
                        .arg(shim)
                        .args(["-genv", "TESSERA_CLUSTER"])
                        .arg(cluster);
                }
            }
            Mpi::Openmpi => {
                command.args(["--allow-run-as-root", "--oversubscribe", "-n", &count]);
                if let Some((shim, cluster)) = preload {
                    command
                        .arg("-x")
                        .arg(format!("LD_PRELOAD={}", shim.display()))
                        .arg("-x")
                        .arg(format!("TESSERA_CLUSTER={}", cluster.display()));
                }
            }
        }
        let mut child = command
            .arg(program)
            .arg(file)
            .arg(control)
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|err| format!("cannot start {}: {err}", mpi.launcher()))?;
        let lines = line_reader(child.stdout.take().expect("piped"));
        Ok(Self {
            label: format!(
                "{} {} p{processes}",
                if preload.is_some() {
                    METHODS[0]
                } else {
                    METHODS[2]
                },
                mpi.name()
            ),
            children: vec![child],
            inputs,
            lines,
        })
    }

    /// `processes` native workers on the Tessera file `path`.
    fn native(
        processes: u32,
        cluster: &Path,
        path: &str,
        meeting: &Path,
        mpi: &str,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(meeting)
            .map_err(|err| format!("cannot create {}: {err}", meeting.display()))?;
        let mut group = Self {
            label: format!("{} {mpi} p{processes}", METHODS[1]),
            children: Vec::new(),
            inputs: Vec::new(),
            lines: std::sync::mpsc::sync_channel(1).1,
        };
        for rank in 0..processes {
            let mut child = super::spawn_worker(
                super::worker_command()?
                    .arg("mpiio-worker")
                    .args(["--rank", &rank.to_string()])
                    .args(["--processes", &processes.to_string()])
                    .arg("--cluster")
                    .arg(cluster)
                    .args(["--path", path])
                    .arg("--meeting")
                    .arg(meeting)
                    .stdin(Stdio::piped()),
                "mpiio",
                rank as usize,
            )?;
            group
                .inputs
                .push(Box::new(child.stdin.take().expect("piped")));
            if rank == 0 {
                group.lines = line_reader(child.stdout.take().expect("piped"));
            }
            group.children.push(child);
        }
        Ok(group)
    }

    fn send(&mut self, line: &str) -> Result<(), String> {
        for input in &mut self.inputs {
            input
                .write_all(line.as_bytes())
                .and_then(|()| input.flush())
                .map_err(|err| format!("{}: cannot send a command: {err}", self.label))?;
        }
        Ok(())
    }

    /// Runs one case; its outcome, checked against the command.
    fn run(&mut self, command: &Step, processes: u32) -> Result<Outcome, String> {
        self.send(&command.line())?;
        let deadline = Instant::now() + Duration::from_secs(CASE_SECONDS_MAX);
        let line = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with('{') => break line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{}: no answer to `{}` within {CASE_SECONDS_MAX} s (CASE_SECONDS_MAX)",
                        self.label,
                        command.line().trim_end()
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "{}: exited during `{}`",
                        self.label,
                        command.line().trim_end()
                    ))
                }
            }
        };
        let outcome: Outcome = serde_json::from_str(&line)
            .map_err(|err| format!("{}: said {line:?}: {err}", self.label))?;
        let expected = (
            if command.collective {
                "collective"
            } else {
                "independent"
            },
            if command.strided {
                "strided"
            } else {
                "contiguous"
            },
            command.transfer,
            command.segments,
            processes,
            command.generation,
            command.process_bytes() * u64::from(processes),
        );
        let got = (
            outcome.access.as_str(),
            outcome.pattern.as_str(),
            outcome.transfer_bytes,
            outcome.segments,
            outcome.processes,
            outcome.generation,
            outcome.bytes,
        );
        if got != expected {
            return Err(format!(
                "{}: answered {got:?} to a command for {expected:?}",
                self.label
            ));
        }
        Ok(outcome)
    }

    /// Tells every rank to quit and waits (bounded) for the processes to exit successfully.
    fn finish(mut self) -> Result<(), String> {
        let _ = self.send("quit\n");
        self.inputs.clear();
        let deadline = Instant::now() + Duration::from_secs(QUIT_SECONDS_MAX);
        let mut failures = Vec::new();
        for child in &mut self.children {
            let status = loop {
                if let Some(status) = child.try_wait().map_err(|err| err.to_string())? {
                    break Some(status);
                }
                if Instant::now() > deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            match status {
                Some(status) if status.success() => {}
                Some(status) => failures.push(format!("{}: exited with {status}", self.label)),
                None => failures.push(format!(
                    "{}: did not quit within {QUIT_SECONDS_MAX} s (QUIT_SECONDS_MAX)",
                    self.label
                )),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.inputs.clear();
        for child in &mut self.children {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent.

/// What the bench measured of one (mpi, case, column).
#[derive(Debug, Default)]
struct Samples {
    write: Vec<f64>,
    read: Vec<f64>,
    barrier: Vec<f64>,
    last: Option<Outcome>,
    verified: bool,
}

/// Why a column of one MPI is not run, if it is not.
#[derive(Debug, Clone, Default)]
struct Plan {
    mpi: Option<Mpi>,
    mpi_name: String,
    program: Option<PathBuf>,
    shim: Option<PathBuf>,
    skip_mpi: Option<String>,
}

fn mpis(choice: Option<MpiChoice>) -> Vec<Mpi> {
    let installed = |mpi: Mpi| on_path(mpi.launcher());
    match choice {
        Some(MpiChoice::Mpich) => vec![Mpi::Mpich],
        Some(MpiChoice::Openmpi) => vec![Mpi::Openmpi],
        Some(MpiChoice::Both) => vec![Mpi::Mpich, Mpi::Openmpi],
        None => {
            let found: Vec<Mpi> = [Mpi::Mpich, Mpi::Openmpi]
                .into_iter()
                .filter(|&mpi| installed(mpi))
                .collect();
            if found.is_empty() {
                vec![Mpi::Mpich, Mpi::Openmpi]
            } else {
                found
            }
        }
    }
}

/// The plan of `mpi`: its columns skipped if its launcher is not installed, else its program
/// and shim, which `make mpiio` must have built (an error otherwise).
fn plan_of(mpi: Mpi) -> Result<Plan, String> {
    let mut plan = Plan {
        mpi: Some(mpi),
        mpi_name: mpi.name().to_owned(),
        ..Plan::default()
    };
    if !on_path(mpi.launcher()) {
        plan.skip_mpi = Some(format!(
            "{} is not installed: install {} (make deps)",
            mpi.launcher(),
            mpi.package()
        ));
        return Ok(plan);
    }
    plan.program = Some(mpi.built("mpiio", PROGRAM)?);
    plan.shim = Some(mpi.built("mpiio", SHIM)?);
    Ok(plan)
}

/// Settings of one run.
struct Sweep {
    transfers: Vec<u64>,
    process_bytes: u64,
    repetitions: usize,
}

impl Sweep {
    fn cases(&self, processes: u32) -> Vec<Case> {
        let mut cases = Vec::new();
        for collective in [false, true] {
            for strided in [false, true] {
                for &transfer in &self.transfers {
                    cases.push(Case {
                        collective,
                        strided,
                        transfer,
                        processes,
                    });
                }
            }
        }
        cases
    }

    fn segments(&self, transfer: u64) -> u64 {
        (self.process_bytes / transfer).max(1)
    }
}

/// Runs the experiment and writes its report.
pub fn run(args: &MpiioArgs) -> Result<Finished, String> {
    let common = &args.common;
    let sweep = if common.quick {
        Sweep {
            transfers: QUICK_TRANSFERS.to_vec(),
            process_bytes: QUICK_PROCESS_BYTES,
            repetitions: QUICK_REPETITIONS,
        }
    } else {
        Sweep {
            transfers: FULL_TRANSFERS.to_vec(),
            process_bytes: FULL_PROCESS_BYTES,
            repetitions: FULL_REPETITIONS,
        }
    };
    let work = std::env::temp_dir().join(format!("tessera-mpiio-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)
        .map_err(|err| format!("cannot create {}: {err}", work.display()))?;
    let started = Instant::now();
    let result = measure(args, &sweep, &work);
    let _ = std::fs::remove_dir_all(&work);
    let (plans, samples) = result?;
    let report = report(
        common,
        &sweep,
        &plans,
        &samples,
        started.elapsed().as_secs_f64(),
    )?;
    report.finish(
        common,
        &text(&report, &plans, &sweep)?,
        &[figure(&report, &plans)?],
    )
}

type SampleMap = BTreeMap<(String, Case, &'static str), Samples>;

fn measure(args: &MpiioArgs, sweep: &Sweep, work: &Path) -> Result<(Vec<Plan>, SampleMap), String> {
    let mut plans = Vec::new();
    for mpi in mpis(args.mpi) {
        plans.push(plan_of(mpi)?);
    }
    let (cluster, client) = open_cluster(&args.common)?;
    let cluster_file = std::fs::canonicalize(&cluster.file)
        .map_err(|err| format!("{}: {err}", cluster.file.display()))?;
    let mut samples = SampleMap::new();
    let mut generation = 0u64;
    let pid = std::process::id();
    for plan in &plans {
        for processes in PROCESS_COUNTS {
            let tag = format!("{}-p{processes}", plan.mpi_name);
            let mut groups: Vec<(&'static str, Group)> = Vec::new();
            let native_path = format!("/bench/mpiio-{pid}-native-{tag}");
            client
                .create(&native_path, &CreateOptions::default())
                .map_err(|err| format!("create {native_path}: {err}"))?;
            let tessera_path = format!("tessera:/bench/mpiio-{pid}-{tag}");
            let started = (|| -> Result<(), String> {
                if let (Some(mpi), Some(program)) = (plan.mpi, &plan.program) {
                    if let Some(shim) = &plan.shim {
                        groups.push((
                            METHODS[0],
                            Group::mpi(
                                mpi,
                                processes,
                                program,
                                &tessera_path,
                                &work.join(format!("control-tessera-{tag}")),
                                Some((shim, &cluster_file)),
                            )?,
                        ));
                    }
                    groups.push((
                        METHODS[2],
                        Group::mpi(
                            mpi,
                            processes,
                            program,
                            &work.join(format!("local-{tag}")).display().to_string(),
                            &work.join(format!("control-local-{tag}")),
                            None,
                        )?,
                    ));
                }
                groups.push((
                    METHODS[1],
                    Group::native(
                        processes,
                        &cluster_file,
                        &native_path,
                        &work.join(format!("meeting-{tag}")),
                        &plan.mpi_name,
                    )?,
                ));
                Ok(())
            })();
            let result = started.and_then(|()| {
                sweep_groups(
                    &mut groups,
                    sweep,
                    processes,
                    &plan.mpi_name,
                    &mut generation,
                    &mut samples,
                )
            });
            let finished: Vec<Result<(), String>> = groups
                .into_iter()
                .map(|(_, group)| group.finish())
                .collect();
            let _ = client.unlink(&native_path);
            let _ = client.unlink(tessera_path.trim_start_matches("tessera:"));
            result?;
            for outcome in finished {
                outcome?;
            }
        }
    }
    drop(cluster);
    Ok((plans, samples))
}

/// Every case of one process count on every group, interleaved, `repetitions` times.
fn sweep_groups(
    groups: &mut [(&'static str, Group)],
    sweep: &Sweep,
    processes: u32,
    mpi: &str,
    generation: &mut u64,
    samples: &mut SampleMap,
) -> Result<(), String> {
    let cases = sweep.cases(processes);
    for repetition in 0..sweep.repetitions {
        eprintln!(
            "bench mpiio: {mpi}, {processes} process(es), repetition {} of {}",
            repetition + 1,
            sweep.repetitions
        );
        for (index, &case) in cases.iter().enumerate() {
            for turn in 0..groups.len() {
                let (method, group) = &mut groups[(turn + index + repetition) % groups.len()];
                *generation = *generation % (GENERATIONS - 1) + 1;
                let command = Step {
                    collective: case.collective,
                    strided: case.strided,
                    transfer: case.transfer,
                    segments: sweep.segments(case.transfer),
                    block: case.block(),
                    generation: *generation,
                    check: repetition == 0,
                };
                let outcome = group.run(&command, processes)?;
                let entry = samples
                    .entry((mpi.to_owned(), case, *method))
                    .or_insert_with(|| Samples {
                        verified: true,
                        ..Samples::default()
                    });
                entry.write.push(outcome.write_seconds);
                entry.read.push(outcome.read_seconds);
                entry.barrier.push(outcome.barrier_seconds);
                entry.verified &= outcome.verified && outcome.errors == 0;
                entry.last = Some(outcome);
            }
        }
    }
    Ok(())
}

/// One (MPI, direction, access, pattern, transfer, processes, column) of mpiio: the median
/// over the repetitions and its range; a column that could not run has `skipped` and no
/// figures.
#[derive(Debug, Clone, Serialize)]
pub struct MpiioRow {
    /// The MPI of the MPI columns (the native column runs beside them).
    pub mpi: String,
    /// Writes or reads.
    pub direction: Direction,
    /// `independent` (write_at/read_at) or `collective` (write_at_all/read_at_all).
    pub access: &'static str,
    /// `contiguous` (IOR segments) or `strided` (a vector file view).
    pub pattern: &'static str,
    /// Bytes per call.
    pub transfer_bytes: u64,
    /// Processes.
    pub processes: u32,
    /// Calls per process per phase.
    pub segments: u64,
    /// The strided view's block (the transfer when contiguous).
    pub block_bytes: u64,
    /// The column: `tessera-mpiio`, `native` or `local-mpiio`.
    pub method: &'static str,
    /// Bytes all processes moved in one phase.
    pub bytes: u64,
    /// MiB/s and seconds of the phase (the slowest process), medians over the repetitions;
    /// `null` for a column that did not run.
    #[serde(flatten)]
    pub measure: Measure,
    /// GB/s (10^9 bytes), median.
    pub gb_s: Option<f64>,
    /// One barrier alone, median (each timed phase includes one).
    pub barrier_seconds: Option<f64>,
    /// Native's median seconds over this column's: above 1, this column is faster.
    pub ratio_vs_native: Option<f64>,
    /// local-mpiio's median seconds over this column's.
    pub ratio_vs_local_mpiio: Option<f64>,
    /// Client requests, all processes and calls (native only: the MPI columns count none).
    pub requests: Option<u64>,
    /// Server storage pieces (native only).
    pub storage_pieces: Option<u64>,
    /// Requests whose data moved one-sidedly (native only).
    pub one_sided_requests: Option<u64>,
    /// Bytes the client copied (native only).
    pub bytes_copied: Option<u64>,
    /// The library's `tessera_method` in effect (tessera-mpiio).
    pub tessera_method: Option<String>,
    /// The library's `tessera_coll` in effect (tessera-mpiio).
    pub tessera_coll: Option<String>,
    /// ROMIO's `romio_cb_write` in effect (the MPI columns under ROMIO).
    pub romio_cb_write: Option<String>,
    /// ROMIO's `romio_ds_write` in effect.
    pub romio_ds_write: Option<String>,
    /// Every word read back was right in every repetition.
    pub verified: Option<bool>,
    /// Repetitions measured.
    pub repetitions: usize,
    /// Why this column was not measured.
    pub skipped: Option<String>,
}

impl report::Row for MpiioRow {
    fn key(&self) -> (String, &str) {
        (
            case_name(
                self.direction,
                self.access,
                self.pattern,
                self.transfer_bytes,
                self.processes,
                &self.mpi,
            ),
            self.method,
        )
    }
}

/// The case label of a row.
fn case_name(
    direction: Direction,
    access: &str,
    pattern: &str,
    transfer: u64,
    processes: u32,
    mpi: &str,
) -> String {
    format!(
        "{direction} {access} {pattern} {} p{processes} {mpi}",
        size_name(transfer)
    )
}

/// An empty hint (the program prints "" for a hint not in effect) is none.
fn hint(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// A row of `case` and `method` without figures yet.
fn empty_row(
    plan: &Plan,
    sweep: &Sweep,
    case: Case,
    direction: Direction,
    method: &'static str,
) -> MpiioRow {
    MpiioRow {
        mpi: plan.mpi_name.clone(),
        direction,
        access: case.access(),
        pattern: case.pattern(),
        transfer_bytes: case.transfer,
        processes: case.processes,
        segments: sweep.segments(case.transfer),
        block_bytes: if case.strided {
            case.block()
        } else {
            case.transfer
        },
        method,
        bytes: sweep.segments(case.transfer) * case.transfer * u64::from(case.processes),
        measure: Measure::none(),
        gb_s: None,
        barrier_seconds: None,
        ratio_vs_native: None,
        ratio_vs_local_mpiio: None,
        requests: None,
        storage_pieces: None,
        one_sided_requests: None,
        bytes_copied: None,
        tessera_method: None,
        tessera_coll: None,
        romio_cb_write: None,
        romio_ds_write: None,
        verified: None,
        repetitions: 0,
        skipped: None,
    }
}

fn report(
    common: &CommonArgs,
    sweep: &Sweep,
    plans: &[Plan],
    samples: &SampleMap,
    elapsed: f64,
) -> Result<Report<MpiioRow>, String> {
    let mut rows = Vec::new();
    let mut verified = true;
    for plan in plans {
        for processes in PROCESS_COUNTS {
            for case in sweep.cases(processes) {
                for direction in Direction::BOTH {
                    let name = case.name(direction, &plan.mpi_name);
                    let mut medians: BTreeMap<&str, Spread> = BTreeMap::new();
                    for method in METHODS {
                        if let Some(found) = samples.get(&(plan.mpi_name.clone(), case, method)) {
                            let seconds = match direction {
                                Direction::Write => &found.write,
                                Direction::Read => &found.read,
                            };
                            let spread = Spread::of(seconds).map_err(|err| {
                                format!("bench mpiio: case \"{name}\", method \"{method}\": {err}")
                            })?;
                            medians.insert(method, spread);
                        }
                    }
                    for method in METHODS {
                        let mut row = empty_row(plan, sweep, case, direction, method);
                        let skipped = match method {
                            "tessera-mpiio" | "local-mpiio" => plan.skip_mpi.clone(),
                            _ => None,
                        };
                        if let Some(reason) = skipped {
                            row.skipped = Some(reason);
                            rows.push(row);
                            continue;
                        }
                        let (Some(found), Some(seconds)) = (
                            samples.get(&(plan.mpi_name.clone(), case, method)),
                            medians.get(method),
                        ) else {
                            return Err(format!(
                                "bench mpiio: case \"{name}\", method \"{method}\" was not measured"
                            ));
                        };
                        verified &= found.verified;
                        let ratio = |other: &str| {
                            medians
                                .get(other)
                                .map(|theirs| theirs.median / seconds.median)
                        };
                        let last = found.last.as_ref();
                        let figures = last.and_then(|outcome| match direction {
                            Direction::Write => outcome.write_report,
                            Direction::Read => outcome.read_report,
                        });
                        let barrier = Spread::of(&found.barrier).map_err(|err| {
                            format!(
                                "bench mpiio: case \"{name}\", method \"{method}\": barrier: {err}"
                            )
                        })?;
                        row.measure = Measure::of_seconds(*seconds, row.bytes);
                        row.gb_s = Some(row.bytes as f64 / seconds.median / 1e9);
                        row.barrier_seconds = Some(barrier.median);
                        row.ratio_vs_native = ratio("native");
                        row.ratio_vs_local_mpiio = ratio("local-mpiio");
                        row.requests = figures.map(|f| f.requests);
                        row.storage_pieces = figures.map(|f| f.storage_pieces);
                        row.one_sided_requests = figures.map(|f| f.one_sided);
                        row.bytes_copied = figures.map(|f| f.bytes_copied);
                        row.tessera_method = last.and_then(|o| hint(&o.tessera_method));
                        row.tessera_coll = last.and_then(|o| hint(&o.tessera_coll));
                        row.romio_cb_write = last.and_then(|o| hint(&o.romio_cb_write));
                        row.romio_ds_write = last.and_then(|o| hint(&o.romio_ds_write));
                        row.verified = Some(found.verified);
                        row.repetitions = found.write.len();
                        rows.push(row);
                    }
                }
            }
        }
    }
    Ok(Report {
        bench: "mpiio",
        quick: common.quick,
        meta: Meta::now(sweep.repetitions),
        config: json!({
            "servers": SERVERS,
            "clients": PROCESS_COUNTS,
            "transport": "the client's default: the local one-sided backend on the servers' host",
            "mpis": plans.iter().map(|plan| plan.mpi_name.clone()).collect::<Vec<_>>(),
            "programs": plans.iter().map(|plan| plan.program.as_ref().map(|p| p.display().to_string())).collect::<Vec<_>>(),
            "source": "mpiio/bench/mpiio.c",
            "shims": plans.iter().map(|plan| plan.shim.as_ref().map(|s| s.display().to_string())).collect::<Vec<_>>(),
            "transfers": sweep.transfers,
            "process_bytes_per_case": sweep.process_bytes,
            "segments": "max(1, process_bytes_per_case / transfer) calls per process per phase",
            "repetitions": sweep.repetitions,
            "strided_block_bytes_max": STRIDED_BLOCK_BYTES_MAX,
            "patterns": "contiguous: call s of rank r at file offset (s*P + r)*T through the default view (IOR segments, block = transfer); strided: MPI_Type_vector(S*T/B, B, P*B, MPI_BYTE) at displacement r*B, B = min(T, 64 KiB), call s at view offset s*T",
            "methods": {
                "tessera-mpiio": "mpiio.c with libtessera_mpiio.so preloaded, default hints (tessera_method auto, tessera_coll server_directed), on a file of the cluster",
                "native": "tessera mpiio-worker processes: File::write_at/read_at (contiguous independent), ViewedFile::write/read with the same view and MPI_BYTE-like memory (strided independent), ViewedFile::write_all/read_all with CollectiveOptions::default() over a SocketCommunicator (collective), on another file of the cluster",
                "local-mpiio": "mpiio.c without the library on a file in a temporary directory (the MPI's own MPI-IO)",
            },
            "timing": "each phase: truncate to 0 (untimed), barrier, the timed calls, barrier; the slowest process's time. barrier_seconds is one barrier alone: with 4 processes on 2 cores (oversubscribed, ranks polling) an MPICH barrier costs milliseconds, on both MPI columns; the native workers' socket barriers do not poll",
            "order": "one group of processes per column and process count, kept up for the sweep; every case runs on the three columns in turn, the order rotating by case and repetition; rows are medians over the repetitions (min/max kept)",
            "verify": "every 8-byte word read back equals a formula of its file offset, writing rank and a per-run generation; the file size is P*S*T; in the first repetition each process also reads its share of the whole file through the default view and checks whose data lies where",
            "requests_pieces": "client requests and server storage pieces are counted by the native workers only; the MPI columns' are null",
            "elapsed_seconds": elapsed,
        }),
        verified,
        rows,
    })
}

/// A rate for a table cell: "skip" for a column that did not run.
fn rate(row: &MpiioRow) -> String {
    row.measure
        .measured()
        .map_or_else(|| "skip".to_owned(), |mib_s| report::cell(mib_s, 1))
}

/// The table per MPI and the acceptance notes of issue 15.
fn text(report: &Report<MpiioRow>, plans: &[Plan], sweep: &Sweep) -> Result<String, String> {
    let mut out = format!(
        "mpiio: IOR-style MPI-IO through libtessera_mpiio.so on {SERVERS} servers vs tessera-client natively vs the MPI's own MPI-IO on a local file (MiB/s, median of {}; spread in the CSV/JSON)\n",
        sweep.repetitions
    );
    for plan in plans {
        let _ = writeln!(out, "-- {} --", plan.mpi_name);
        if let Some(reason) = &plan.skip_mpi {
            let _ = writeln!(out, "skipped columns: {reason}");
        }
        let mut table = report::table([
            "op", "access", "pattern", "T", "P", "tessera", "native", "local", "t/native",
            "t/local",
        ]);
        let mut worst: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        for processes in PROCESS_COUNTS {
            for case in sweep.cases(processes) {
                for direction in Direction::BOTH {
                    let name = case.name(direction, &plan.mpi_name);
                    let tessera = report.row(&name, METHODS[0])?;
                    let native = report.row(&name, METHODS[1])?;
                    let local = report.row(&name, METHODS[2])?;
                    let ratio = |other: &MpiioRow| {
                        Some(tessera.measure.measured()? / other.measure.measured()?)
                    };
                    let show = |value: Option<f64>| {
                        value.map_or_else(|| "-".to_owned(), |v| report::cell(v, 2))
                    };
                    if let Some(value) = ratio(native) {
                        if case.transfer >= ACCEPTANCE_TRANSFER_MIN && !case.strided {
                            let op = match direction {
                                Direction::Write => "write",
                                Direction::Read => "read",
                            };
                            let entry = worst.entry((op, case.access())).or_insert(f64::INFINITY);
                            *entry = entry.min(value);
                        }
                    }
                    table.add_row([
                        direction.to_string(),
                        case.access().to_owned(),
                        case.pattern().to_owned(),
                        size_name(case.transfer),
                        processes.to_string(),
                        rate(tessera),
                        rate(native),
                        rate(local),
                        show(ratio(native)),
                        show(ratio(local)),
                    ]);
                }
            }
        }
        let _ = writeln!(out, "{table}");
        let barriers: Vec<String> = METHODS
            .iter()
            .filter_map(|&method| {
                let seconds: Vec<f64> = report
                    .rows
                    .iter()
                    .filter(|row| {
                        row.method == method && row.mpi == plan.mpi_name && row.processes == 4
                    })
                    .filter_map(|row| row.barrier_seconds)
                    .collect();
                let spread = Spread::of(&seconds).ok()?;
                Some(format!("{method} {:.2} ms", spread.median * 1e3))
            })
            .collect();
        if !barriers.is_empty() {
            let _ = writeln!(
                out,
                "one barrier alone, 4 processes (each timed phase includes one): {}",
                barriers.join(", ")
            );
        }
        for ((op, access), ratio) in &worst {
            let _ = writeln!(out,
                "acceptance (issue 15): contiguous {access} {op}, T >= 1 MiB: lowest tessera-mpiio / native = {ratio:.2} ({} {ACCEPTANCE_RATIO})",
                if *ratio >= ACCEPTANCE_RATIO { "meets" } else { "below" }
            );
        }
        let four = Case {
            collective: false,
            strided: false,
            transfer: 4 << 20,
            processes: 4,
        };
        if sweep.transfers.contains(&four.transfer) {
            for direction in Direction::BOTH {
                let name = four.name(direction, &plan.mpi_name);
                let gb_s = |method: &str| -> Result<String, String> {
                    Ok(report
                        .row(&name, method)?
                        .gb_s
                        .map_or_else(|| "-".to_owned(), |gb_s| report::cell(gb_s, 3)))
                };
                let _ = writeln!(out,
                    "4 processes x 4 MiB contiguous independent {direction}: tessera-mpiio {} GB/s, native {} GB/s, local-mpiio {} GB/s (issue 15 asks >= {} GB/s through the library)",
                    gb_s(METHODS[0])?,
                    gb_s(METHODS[1])?,
                    gb_s(METHODS[2])?,
                    match direction {
                        Direction::Write => 1,
                        Direction::Read => 2,
                    }
                );
            }
        }
    }
    let _ = writeln!(out, "verified: {}", report.verified);
    Ok(out)
}

/// The first MPI's 4-process contiguous independent access: MiB/s against the transfer per
/// column, writes and reads side by side, bars spanning the repetitions.
fn figure(report: &Report<MpiioRow>, plans: &[Plan]) -> Result<Figure, String> {
    let mpi = plans
        .first()
        .map(|plan| plan.mpi_name.clone())
        .ok_or_else(|| "bench mpiio: no MPI to draw".to_owned())?;
    let mut panels = Vec::new();
    for direction in Direction::BOTH {
        let mut panel = Panel::new(
            &format!("{direction}_at, 4 processes, contiguous"),
            ("transfer (bytes per call)", Scale::Log2),
            ("MiB/s", Scale::Linear),
        );
        for method in METHODS {
            let rows: Vec<&MpiioRow> = report
                .rows
                .iter()
                .filter(|row| {
                    row.method == method
                        && row.mpi == mpi
                        && row.direction == direction
                        && row.access == "independent"
                        && row.pattern == "contiguous"
                        && row.processes == 4
                })
                .collect();
            if rows.is_empty() {
                return Err(format!(
                    "bench mpiio: no rows of {method}, {direction}, 4 processes, contiguous independent under {mpi}"
                ));
            }
            if rows.iter().any(|row| row.skipped.is_some()) {
                continue;
            }
            let mut points = Vec::new();
            for row in rows {
                if row.measure.measured().is_none() {
                    return Err(format!(
                        "bench mpiio: case \"{}\", method \"{method}\" has no rate",
                        report::Row::key(row).0
                    ));
                }
                points.push(row.measure.point(row.transfer_bytes as f64));
            }
            panel.lines.push(Line {
                name: method.to_owned(),
                points,
            });
        }
        panels.push(panel);
    }
    Ok(Figure {
        stem: "mpiio".to_owned(),
        title: format!("mpiio ({mpi}): IOR-style MPI-IO, bars: min-max of the repetitions"),
        panels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(strided: bool, transfer: u64, segments: u64, block: u64) -> Step {
        Step {
            collective: false,
            strided,
            transfer,
            segments,
            block,
            generation: 7,
            check: true,
        }
    }

    #[test]
    fn commands_round_trip_and_bad_ones_are_refused() {
        let one = Step {
            collective: true,
            ..command(true, 1 << 20, 4, 64 << 10)
        };
        assert_eq!(Step::parse(&one.line()).unwrap(), Some(one));
        assert_eq!(Step::parse("quit\n").unwrap(), None);
        for bad in [
            "run independent contiguous 12 1 12 1 0", // not a multiple of 8
            "run independent strided 65536 1 48 1 0", // block does not divide
            "run independent contiguous 268435456 2 8 1 0", // over PROCESS_BYTES_MAX
            "run sideways contiguous 4096 1 4096 1 0",
            "run independent contiguous 4096 1 4096 65536 0", // generation
            "write 4096",
        ] {
            assert!(Step::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn both_patterns_fill_the_file_exactly_once_and_agree_with_the_owner() {
        for (strided, transfer, segments, block) in
            [(false, 64, 3, 64), (true, 64, 3, 16), (true, 32, 2, 32)]
        {
            let command = command(strided, transfer, segments, block);
            let processes = 4u64;
            let total = transfer * segments * processes;
            let mut seen = vec![0u8; usize::try_from(total).unwrap()];
            for rank in 0..processes {
                for position in 0..command.process_bytes() {
                    let offset = command.file_offset(processes, rank, position);
                    seen[usize::try_from(offset).unwrap()] += 1;
                    assert_eq!(command.owner(processes, offset), rank);
                }
            }
            assert!(seen.iter().all(|&count| count == 1), "{command:?}");
        }
        // Contiguous call s of rank r starts at (s*P + r)*T, as in IOR.
        let contiguous = command(false, 4096, 2, 4096);
        assert_eq!(contiguous.call_offset(4, 1, 1), (4 + 1) * 4096);
        assert_eq!(contiguous.file_offset(4, 1, 4096), (4 + 1) * 4096);
        // Strided: view offsets; the second block of rank 1 lies a whole round later.
        let strided = command(true, 4096, 2, 1024);
        assert_eq!(strided.call_offset(4, 1, 1), 4096);
        assert_eq!(strided.file_offset(4, 1, 1024), (4 + 1) * 1024);
    }

    #[test]
    fn the_value_formula_is_the_programs() {
        let program = super::super::btio_mpi::tests::source("mpiio.c");
        assert!(program.contains("((offset >> 3) + 1) * 0x9E3779B97F4A7C15ULL"));
        assert!(program.contains("((uint64_t)(writer + 1) << 56)"));
        assert!(program.contains("(generation << 40)"));
        assert_ne!(value(8, 0, 1), value(8, 1, 1));
        assert_ne!(value(8, 0, 1), value(8, 0, 2));
        assert_ne!(value(8, 0, 1), value(16, 0, 1));
        // The program's limits are the worker's.
        assert!(program.contains("#define PROCESS_BYTES_MAX (256LL << 20)"));
        assert!(program.contains("#define CASES_MAX 100000"));
    }

    #[test]
    fn quick_sweep_is_small_and_every_case_fits_the_limits() {
        let sweep = Sweep {
            transfers: QUICK_TRANSFERS.to_vec(),
            process_bytes: QUICK_PROCESS_BYTES,
            repetitions: QUICK_REPETITIONS,
        };
        assert_eq!(sweep.cases(4).len(), 4 * QUICK_TRANSFERS.len());
        for transfer in FULL_TRANSFERS {
            let segments = (FULL_PROCESS_BYTES / transfer).max(1);
            assert!(transfer * segments <= PROCESS_BYTES_MAX);
            let block = transfer.min(STRIDED_BLOCK_BYTES_MAX);
            assert_eq!(transfer % block, 0);
        }
        assert_eq!(size_name(64 << 10), "64KiB");
        assert_eq!(size_name(16 << 20), "16MiB");
    }
}
