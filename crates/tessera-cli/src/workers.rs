//! Client processes for the demo and the benchmarks, driven in lock step by a parent.
//!
//! The parent starts N `tessera worker` processes and speaks JSON lines with them over their
//! standard input and output. A step is two messages: `prepare` (the worker opens the file and
//! builds its buffers, then answers `ready`) and `go` (every worker starts at once, runs the
//! timed I/O, verifies what it read outside the timed part, and answers with its figures).
//! The prepare/go split is the barrier: no process starts its I/O before all are ready.
//!
//! A [`Pattern::Matrix`] step (seed 002 §4) takes its file pieces from the flattening of the
//! process's `darray` file type and its memory from one contiguous buffer; its method is
//! `list` (one list call) or `view` (the type declared as a view in `prepare`, then one
//! `write_at`/`read_at` of the whole share). Its `prepare` also makes one untimed list call
//! of the same access, so every method starts its timed calls on open connections.

use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tessera_client::dtype::{Distribution, Order};
use tessera_client::plan::Plan;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, Datatype, File, IoReport, Layout, OpenMode, Piece,
    TransferMode, View,
};
use tessera_proto::{DeclareView, FileType, Wire};

/// Arguments of the hidden `tessera worker` command.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Rank of this process among the workers.
    #[arg(long)]
    rank: usize,
}

/// What one worker does in one step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    /// Cluster file.
    pub cluster: PathBuf,
    /// File in Tessera.
    pub path: String,
    /// Write or read (and verify).
    pub write: bool,
    /// Transfer mode name.
    pub method: String,
    /// Calls to time (the same access repeated).
    pub iterations: u32,
    /// Tag mixed into the data so each write is told apart from the previous ones.
    pub generation: u64,
    /// The access.
    pub pattern: Pattern,
}

/// The noncontiguous accesses the demo and benchmarks make.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Pattern {
    /// `pieces` file pieces of `piece_bytes` interleaved over `processes` (piece `i` of rank
    /// `r` at `(i * processes + r) * piece_bytes`), from memory pieces separated by gaps of
    /// the same size (seed 000 Fig. 4).
    Interleaved {
        /// Rank of the process.
        rank: usize,
        /// Processes sharing the file.
        processes: usize,
        /// Pieces per process.
        pieces: usize,
        /// Bytes per piece.
        piece_bytes: usize,
    },
    /// The share of process `rank` of an `n` x `n` matrix of bytes, dealt over four
    /// processes by `distribution` (seed 002 §4); memory is one contiguous buffer. Methods:
    /// `list` or `view`.
    Matrix {
        /// Rank of the process (row-major in the process grid).
        rank: usize,
        /// Rows and columns of the matrix.
        n: u64,
        /// How the matrix is dealt.
        distribution: MatrixDistribution,
    },
    /// One block of a `rows` x `columns` array of `element_bytes` elements in a block-block
    /// distribution over a `grid_rows` x `grid_columns` process grid; in memory the block sits
    /// inside a local array with a one-element halo, so both sides are noncontiguous.
    Block2d {
        /// Rank of the process (row-major in the grid).
        rank: usize,
        /// Rows of the global array.
        rows: usize,
        /// Columns of the global array.
        columns: usize,
        /// Bytes per element.
        element_bytes: usize,
        /// Process-grid rows.
        grid_rows: usize,
        /// Process-grid columns.
        grid_columns: usize,
    },
}

/// Processes sharing a [`Pattern::Matrix`].
pub const MATRIX_PROCESSES: usize = 4;

/// Bytes of access description a list request carries per file piece (offset and length).
pub const LIST_OFFSET_BYTES_PER_PIECE: u64 = 16;

/// Bytes of access description a view request carries: its stream range (start, end).
pub const VIEW_OFFSET_BYTES_PER_REQUEST: u64 = 16;

/// How [`MATRIX_PROCESSES`] processes deal a square byte matrix (HPF distributions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MatrixDistribution {
    /// (BLOCK,BLOCK) over a 2 x 2 grid: an n/2 x n/2 block each.
    BlockBlock,
    /// (*,BLOCK) over a 1 x 4 grid: n/4 whole columns each.
    StarBlock,
    /// (CYCLIC(k),CYCLIC(k)) over a 2 x 2 grid: k x k tiles dealt round-robin both ways.
    CyclicCyclic {
        /// k, in bytes (= elements).
        block_bytes: u64,
    },
}

impl MatrixDistribution {
    /// The name the paper uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::BlockBlock => "(BLOCK,BLOCK)",
            Self::StarBlock => "(*,BLOCK)",
            Self::CyclicCyclic { .. } => "(CYCLIC,CYCLIC)",
        }
    }

    /// The file type of process `rank` over an `n` x `n` byte matrix (C order): an
    /// MPI darray, lower bound 0 and extent n*n.
    pub fn filetype(self, n: u64, rank: usize) -> Result<Datatype, String> {
        let (distributions, grid) = match self {
            Self::BlockBlock => ([Distribution::Block(None); 2], [2, 2]),
            Self::StarBlock => ([Distribution::None, Distribution::Block(None)], [1, 4]),
            Self::CyclicCyclic { block_bytes } => {
                ([Distribution::Cyclic(Some(block_bytes)); 2], [2, 2])
            }
        };
        Datatype::darray(
            MATRIX_PROCESSES as u64,
            rank as u64,
            &[n, n],
            &distributions,
            &grid,
            Order::C,
            &Datatype::byte(),
        )
        .map_err(|err| format!("{} n={n} rank {rank}: {err}", self.name()))
    }
}

/// The pieces of an access: memory (offset into the process buffer, length) and file pieces.
pub struct Access {
    /// Bytes of the process's memory buffer.
    pub buffer_bytes: usize,
    /// Memory pieces.
    pub memory: Vec<(usize, usize)>,
    /// File pieces.
    pub file: Vec<Piece>,
}

impl Pattern {
    /// The file type of a [`Pattern::Matrix`] access (none for the list-only patterns).
    pub fn filetype(&self) -> Result<Option<Datatype>, String> {
        match *self {
            Self::Matrix {
                rank,
                n,
                distribution,
            } => distribution.filetype(n, rank).map(Some),
            Self::Interleaved { .. } | Self::Block2d { .. } => Ok(None),
        }
    }

    /// The memory and file pieces of this access, or why they cannot be built.
    pub fn try_access(&self) -> Result<Access, String> {
        let Some(filetype) = self.filetype()? else {
            return Ok(self.access());
        };
        let total = filetype.size();
        let file = filetype
            .runs(0, 0, total)
            .map_err(|err| format!("flattening the file type: {err}"))?
            .map(|run| {
                Piece::new(
                    u64::try_from(run.offset).expect("a darray starts at byte 0"),
                    run.length,
                )
            })
            .collect();
        let buffer_bytes =
            usize::try_from(total).map_err(|_| format!("a share of {total} bytes"))?;
        Ok(Access {
            buffer_bytes,
            memory: vec![(0, buffer_bytes)],
            file,
        })
    }

    /// The memory and file pieces of this access.
    ///
    /// # Panics
    ///
    /// For a [`Pattern::Matrix`] whose type cannot be built (use [`Pattern::try_access`]).
    pub fn access(&self) -> Access {
        match *self {
            Self::Matrix { .. } => self.try_access().expect("a valid matrix distribution"),
            Self::Interleaved {
                rank,
                processes,
                pieces,
                piece_bytes,
            } => Access {
                buffer_bytes: pieces * piece_bytes * 2,
                memory: (0..pieces)
                    .map(|i| (i * piece_bytes * 2, piece_bytes))
                    .collect(),
                file: (0..pieces)
                    .map(|i| {
                        Piece::new(
                            ((i * processes + rank) * piece_bytes) as u64,
                            piece_bytes as u64,
                        )
                    })
                    .collect(),
            },
            Self::Block2d {
                rank,
                rows,
                columns,
                element_bytes,
                grid_rows,
                grid_columns,
            } => {
                let (block_rows, block_columns) = (rows / grid_rows, columns / grid_columns);
                let (grid_row, grid_column) = (rank / grid_columns, rank % grid_columns);
                let local_row_bytes = (block_columns + 2) * element_bytes;
                let row_bytes = block_columns * element_bytes;
                Access {
                    buffer_bytes: (block_rows + 2) * local_row_bytes,
                    memory: (0..block_rows)
                        .map(|r| ((r + 1) * local_row_bytes + element_bytes, row_bytes))
                        .collect(),
                    file: (0..block_rows)
                        .map(|r| {
                            let global_row = grid_row * block_rows + r;
                            let offset = (global_row * columns + grid_column * block_columns)
                                * element_bytes;
                            Piece::new(offset as u64, row_bytes as u64)
                        })
                        .collect(),
                }
            }
        }
    }
}

/// The byte at file offset `offset` written by generation `generation`.
pub fn expected_byte(offset: u64, generation: u64) -> u8 {
    let mixed = (offset ^ generation.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 56) as u8
}

/// What a worker reports for one step.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepResult {
    /// Seconds of the timed calls.
    pub seconds: f64,
    /// Requests sent, over all timed calls.
    pub requests: u64,
    /// Frames sent.
    pub messages: u64,
    /// Storage pieces the servers touched.
    pub storage_pieces: u64,
    /// Bytes moved, over all timed calls.
    pub bytes: u64,
    /// Memory and file pieces of one call.
    pub memory_pieces: u64,
    /// File pieces of one call.
    pub file_pieces: u64,
    /// Every byte read back was as expected (always true for writes).
    pub verified: bool,
    /// Bytes of access description sent per call: 16 per file piece of every list request,
    /// 16 (the stream range) per view request.
    #[serde(default)]
    pub offset_bytes: u64,
    /// Cluster indices of the servers one call reached.
    #[serde(default)]
    pub servers: Vec<u16>,
    /// Bytes of the view declaration messages (views only; sent once, before timing).
    #[serde(default)]
    pub declare_bytes: u64,
    /// Seconds `set_view` took (views only; before timing).
    #[serde(default)]
    pub declare_seconds: f64,
    /// Why the step failed, if it did.
    pub error: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
enum Message {
    Prepare(Box<Task>),
    Ready,
    Go,
    Done(StepResult),
    /// After every worker is done: check what was read (matrix steps) and release the view.
    Check,
    Checked(bool),
    Failed(String),
}

struct Prepared {
    task: Task,
    file: File,
    buffer: Vec<u8>,
    access: Access,
    /// The declared view of a `view` step.
    view: Option<View>,
    /// Offset bytes and servers (cluster indices) of one list call of a matrix access.
    list_plan: Option<(u64, Vec<u16>)>,
    declare_bytes: u64,
    declare_seconds: f64,
}

/// How a step moves its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    List(TransferMode),
    View,
}

fn via(task: &Task) -> Result<Via, String> {
    let matrix = matches!(task.pattern, Pattern::Matrix { .. });
    match task.method.as_str() {
        "list" if matrix => Ok(Via::List(TransferMode::Gather)),
        "view" if matrix => Ok(Via::View),
        name => TransferMode::from_name(name)
            .map(Via::List)
            .ok_or_else(|| format!("unknown method {name}")),
    }
}

/// Bytes of the `DeclareView` frames of `view` (header and body, one per server).
fn declare_bytes(file: &File, view: &View, filetype: &Datatype) -> u64 {
    view.positions()
        .iter()
        .map(|&position| {
            let declare = DeclareView {
                handle: file.handle(),
                view_id: view.id(),
                file: FileType {
                    layout: file.layout().clone(),
                    position: u16::try_from(position).expect("positions are below servers_max"),
                    filetype: filetype.clone(),
                    displacement: 0,
                },
            };
            (tessera_proto::limits::HEADER_BYTES + declare.to_body().len()) as u64
        })
        .sum()
}

fn list_call(
    file: &File,
    buffer: &mut [u8],
    access: &Access,
    write: bool,
) -> Result<IoReport, String> {
    if write {
        let memory: Vec<IoSlice<'_>> = access
            .memory
            .iter()
            .map(|&(start, length)| IoSlice::new(&buffer[start..start + length]))
            .collect();
        file.write_list(&memory, &access.file)
    } else {
        let mut memory: Vec<IoSliceMut<'_>> = Vec::with_capacity(access.memory.len());
        let mut rest: &mut [u8] = buffer;
        let mut consumed = 0;
        for &(start, length) in &access.memory {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
            let (piece, tail) = tail.split_at_mut(length);
            memory.push(IoSliceMut::new(piece));
            rest = tail;
            consumed = start + length;
        }
        file.read_list(&mut memory, &access.file)
    }
    .map_err(|err| err.to_string())
}

/// One byte of a matrix access on every server the access reaches: a list call of these
/// opens the connections the timed calls will use, at a cost independent of the access size.
/// (The memory of a matrix access is one buffer in stream order.)
fn warm_up_access(layout: &Layout, access: &Access) -> Access {
    debug_assert_eq!(access.memory, [(0, access.buffer_bytes)]);
    let mut seen = vec![false; layout.servers().len()];
    let mut warm_up = Access {
        buffer_bytes: access.buffer_bytes,
        memory: Vec::new(),
        file: Vec::new(),
    };
    let mut stream = 0u64;
    for piece in &access.file {
        for segment in layout.map(piece.offset, piece.length) {
            if !std::mem::replace(&mut seen[segment.server_position], true) {
                let at = stream + (segment.logical_offset - piece.offset);
                warm_up
                    .memory
                    .push((usize::try_from(at).expect("inside the buffer"), 1));
                warm_up.file.push(Piece::new(segment.logical_offset, 1));
            }
        }
        stream += piece.length;
        if seen.iter().all(|&seen| seen) {
            break;
        }
    }
    warm_up
}

fn prepare(task: Task) -> Result<Prepared, String> {
    let config = ClusterConfig::load(&task.cluster).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    let mode = if task.write {
        OpenMode::WriteOnly
    } else {
        OpenMode::ReadOnly
    };
    let mut file = client
        .open(&task.path, mode)
        .map_err(|err| err.to_string())?;
    let via = via(&task)?;
    if let Via::List(method) = via {
        file.set_transfer_mode(method);
    }
    let access = task.pattern.try_access()?;
    // Gaps hold a sentinel so a read that writes outside its pieces is caught.
    let mut buffer = vec![0xA5u8; access.buffer_bytes];
    if task.write {
        let mut stream = access
            .memory
            .iter()
            .flat_map(|&(start, length)| start..start + length);
        for piece in &access.file {
            for offset in piece.offset..piece.offset + piece.length {
                let index = stream.next().expect("memory and file totals match");
                buffer[index] = expected_byte(offset, task.generation);
            }
        }
    }
    let mut prepared = Prepared {
        task,
        file,
        buffer,
        access,
        view: None,
        list_plan: None,
        declare_bytes: 0,
        declare_seconds: 0.0,
    };
    if let Some(filetype) = prepared.task.pattern.filetype()? {
        prepare_matrix(&mut prepared, via, &filetype)?;
    }
    Ok(prepared)
}

/// Warms the connections with one untimed list call of the access, plans the list call's
/// offset bytes, and declares the view of a `view` step (timed on its own).
fn prepare_matrix(prepared: &mut Prepared, via: Via, filetype: &Datatype) -> Result<(), String> {
    let write = prepared.task.write;
    let warm_up = warm_up_access(prepared.file.layout(), &prepared.access);
    list_call(&prepared.file, &mut prepared.buffer, &warm_up, write)
        .map_err(|err| format!("warm-up call: {err}"))?;
    if !write {
        prepared.buffer.fill(0xA5);
    }
    let layout = prepared.file.layout();
    let plan = Plan::new(layout, &prepared.access.file);
    let offset_bytes = plan
        .requests
        .iter()
        .map(|request| request.pieces.len() as u64 * LIST_OFFSET_BYTES_PER_PIECE)
        .sum();
    let servers = plan
        .server_positions()
        .into_iter()
        .map(|position| layout.servers()[position])
        .collect();
    prepared.list_plan = Some((offset_bytes, servers));
    if via == Via::View {
        let started = Instant::now();
        let view = prepared
            .file
            .set_view(0, filetype)
            .map_err(|err| format!("set_view: {err}"))?;
        prepared.declare_seconds = started.elapsed().as_secs_f64();
        prepared.declare_bytes = declare_bytes(&prepared.file, &view, filetype);
        prepared.view = Some(view);
    }
    Ok(())
}

fn verify(prepared: &Prepared) -> bool {
    let mut in_piece = vec![false; prepared.buffer.len()];
    let mut stream = prepared
        .access
        .memory
        .iter()
        .flat_map(|&(start, length)| start..start + length);
    for piece in &prepared.access.file {
        for offset in piece.offset..piece.offset + piece.length {
            let index = stream.next().expect("memory and file totals match");
            in_piece[index] = true;
            if prepared.buffer[index] != expected_byte(offset, prepared.task.generation) {
                return false;
            }
        }
    }
    prepared
        .buffer
        .iter()
        .zip(&in_piece)
        .all(|(&byte, &inside)| inside || byte == 0xA5)
}

fn run_step(prepared: &mut Prepared) -> Result<StepResult, String> {
    let mut total = IoReport::default();
    let started = Instant::now();
    let write = prepared.task.write;
    for _ in 0..prepared.task.iterations {
        total += match &prepared.view {
            Some(view) if write => view
                .write_at(0, &prepared.buffer)
                .map_err(|err| err.to_string())?,
            Some(view) => view
                .read_at(0, &mut prepared.buffer)
                .map_err(|err| err.to_string())?,
            None => list_call(
                &prepared.file,
                &mut prepared.buffer,
                &prepared.access,
                write,
            )?,
        };
    }
    let seconds = started.elapsed().as_secs_f64();
    // A matrix step checks its data only at `Check`, once every process is done, so no
    // process verifies on a core another one still needs for its timed calls.
    let deferred = matches!(prepared.task.pattern, Pattern::Matrix { .. });
    let verified = prepared.task.write || (!deferred && verify(prepared));
    let calls = u64::from(prepared.task.iterations.max(1));
    // A view call over the whole share reaches the servers its list call would.
    let (list_offset_bytes, servers) = prepared.list_plan.clone().unwrap_or_default();
    let offset_bytes = if prepared.view.is_some() {
        total.requests / calls * VIEW_OFFSET_BYTES_PER_REQUEST
    } else {
        list_offset_bytes
    };
    Ok(StepResult {
        seconds,
        requests: total.requests,
        messages: total.messages_sent,
        storage_pieces: total.storage_pieces,
        bytes: total.bytes,
        memory_pieces: prepared.access.memory.len() as u64,
        file_pieces: prepared.access.file.len() as u64,
        verified,
        error: None,
        offset_bytes,
        servers,
        declare_bytes: prepared.declare_bytes,
        declare_seconds: prepared.declare_seconds,
    })
}

/// The untimed end of a step: verifies a read and releases the view.
fn check(prepared: &mut Prepared) -> Result<bool, String> {
    let verified = prepared.task.write || verify(prepared);
    if let Some(view) = prepared.view.take() {
        view.release()
            .map_err(|err| format!("releasing the view: {err}"))?;
    }
    Ok(verified)
}

fn send(out: &mut impl Write, message: &Message) -> Result<(), String> {
    let line = serde_json::to_string(message).map_err(|err| err.to_string())?;
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|err| format!("worker pipe: {err}"))
}

fn receive(input: &mut impl BufRead) -> Result<Option<Message>, String> {
    let mut line = String::new();
    if input
        .read_line(&mut line)
        .map_err(|err| format!("worker pipe: {err}"))?
        == 0
    {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|err| format!("worker pipe: bad message {line:?}: {err}"))
}

/// The worker side: serve steps until the parent closes standard input.
pub fn run(args: &WorkerArgs) -> Result<(), String> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut output = std::io::stdout();
    let mut prepared = None;
    while let Some(message) = receive(&mut input)? {
        let reply = match message {
            Message::Prepare(task) => match prepare(*task) {
                Ok(ready) => {
                    prepared = Some(ready);
                    Message::Ready
                }
                Err(err) => Message::Failed(format!("worker {}: {err}", args.rank)),
            },
            Message::Go => match prepared.as_mut().map(run_step) {
                Some(Ok(result)) => Message::Done(result),
                Some(Err(err)) => Message::Failed(format!("worker {}: {err}", args.rank)),
                None => Message::Failed(format!("worker {}: go before prepare", args.rank)),
            },
            Message::Check => match prepared.as_mut().map(check) {
                Some(Ok(verified)) => Message::Checked(verified),
                Some(Err(err)) => Message::Failed(format!("worker {}: {err}", args.rank)),
                None => Message::Failed(format!("worker {}: check before prepare", args.rank)),
            },
            other => Message::Failed(format!("worker {}: unexpected {other:?}", args.rank)),
        };
        send(&mut output, &reply)?;
    }
    Ok(())
}

/// The parent side: a group of worker processes.
pub struct Workers {
    children: Vec<(Child, ChildStdin, BufReader<ChildStdout>)>,
}

impl Workers {
    /// Starts `count` worker processes.
    pub fn spawn(count: usize) -> Result<Self, String> {
        let exe = std::env::current_exe()
            .map_err(|err| format!("cannot find the tessera binary: {err}"))?;
        let mut children = Vec::with_capacity(count);
        for rank in 0..count {
            let mut child = Command::new(&exe)
                .args(["worker", "--rank", &rank.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|err| format!("cannot start worker {rank}: {err}"))?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = BufReader::new(child.stdout.take().expect("piped"));
            children.push((child, stdin, stdout));
        }
        Ok(Self { children })
    }

    fn expect(&mut self, rank: usize) -> Result<Message, String> {
        match receive(&mut self.children[rank].2)? {
            Some(Message::Failed(err)) => Err(err),
            Some(message) => Ok(message),
            None => Err(format!("worker {rank} exited unexpectedly")),
        }
    }

    /// Runs one step: task `i` on worker `i`, all starting together. Returns each worker's
    /// result and the wall time from the common start to the last finish.
    pub fn step(&mut self, tasks: Vec<Task>) -> Result<(Vec<StepResult>, f64), String> {
        assert_eq!(tasks.len(), self.children.len(), "one task per worker");
        for ((_, stdin, _), task) in self.children.iter_mut().zip(tasks) {
            send(stdin, &Message::Prepare(Box::new(task)))?;
        }
        for rank in 0..self.children.len() {
            match self.expect(rank)? {
                Message::Ready => {}
                other => return Err(format!("worker {rank}: expected ready, got {other:?}")),
            }
        }
        let started = Instant::now();
        for (_, stdin, _) in &mut self.children {
            send(stdin, &Message::Go)?;
        }
        let mut results = Vec::with_capacity(self.children.len());
        for rank in 0..self.children.len() {
            match self.expect(rank)? {
                Message::Done(result) => results.push(result),
                other => return Err(format!("worker {rank}: expected done, got {other:?}")),
            }
        }
        Ok((results, started.elapsed().as_secs_f64()))
    }

    /// [`Workers::step`], then a second barrier at which every worker verifies what it read
    /// (outside the timed part of every process) and reports it in `verified`.
    pub fn step_checked(&mut self, tasks: Vec<Task>) -> Result<(Vec<StepResult>, f64), String> {
        let (mut results, wall_seconds) = self.step(tasks)?;
        for (_, stdin, _) in &mut self.children {
            send(stdin, &Message::Check)?;
        }
        for (rank, result) in results.iter_mut().enumerate() {
            match self.expect(rank)? {
                Message::Checked(verified) => result.verified = verified,
                other => return Err(format!("worker {rank}: expected checked, got {other:?}")),
            }
        }
        Ok((results, wall_seconds))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (mut child, stdin, _) in self.children.drain(..) {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block2d_pieces_tile_the_array_exactly_once() {
        let mut seen = [0u8; 16 * 12];
        for rank in 0..4 {
            let access = Pattern::Block2d {
                rank,
                rows: 16,
                columns: 12,
                element_bytes: 1,
                grid_rows: 2,
                grid_columns: 2,
            }
            .access();
            assert_eq!(access.memory.len(), 8);
            for piece in access.file {
                for offset in piece.offset..piece.offset + piece.length {
                    seen[usize::try_from(offset).unwrap()] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&count| count == 1));
    }

    #[test]
    fn matrix_shares_tile_the_matrix_exactly_once() {
        const N: u64 = 64;
        for distribution in [
            MatrixDistribution::BlockBlock,
            MatrixDistribution::StarBlock,
            MatrixDistribution::CyclicCyclic { block_bytes: 8 },
        ] {
            let mut seen = vec![0u8; usize::try_from(N * N).unwrap()];
            for rank in 0..MATRIX_PROCESSES {
                let access = Pattern::Matrix {
                    rank,
                    n: N,
                    distribution,
                }
                .try_access()
                .unwrap();
                assert_eq!(access.buffer_bytes as u64, N * N / 4, "{distribution:?}");
                assert_eq!(access.memory, [(0, access.buffer_bytes)]);
                for piece in access.file {
                    for offset in piece.offset..piece.offset + piece.length {
                        seen[usize::try_from(offset).unwrap()] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&count| count == 1), "{distribution:?}");
        }
        // (CYCLIC(8),CYCLIC(8)): rank 3 (grid row 1, column 1) starts at row 8, column 8.
        let access = Pattern::Matrix {
            rank: 3,
            n: N,
            distribution: MatrixDistribution::CyclicCyclic { block_bytes: 8 },
        }
        .access();
        assert_eq!(access.file[0], Piece::new(8 * N + 8, 8));
        assert_eq!(access.file.len() as u64, (N / 2) * (N / 16));
    }

    #[test]
    fn warm_up_touches_each_server_of_the_access_once() {
        let layout =
            Layout::Stripe(tessera_client::StripeLayout::new(64, vec![0, 1, 2, 3]).unwrap());
        let access = Pattern::Matrix {
            rank: 1,
            n: 64,
            distribution: MatrixDistribution::StarBlock,
        }
        .access();
        let warm_up = warm_up_access(&layout, &access);
        // Rank 1 holds columns 16..32; rows of 64 bytes fall on servers 0, 1, 2, 3 in turn.
        assert_eq!(
            warm_up.file,
            [16, 80, 144, 208].map(|offset| Piece::new(offset, 1))
        );
        assert_eq!(warm_up.memory, [(0, 1), (16, 1), (32, 1), (48, 1)]);
    }

    #[test]
    fn interleaved_pieces_do_not_overlap_across_ranks() {
        let a = Pattern::Interleaved {
            rank: 0,
            processes: 4,
            pieces: 3,
            piece_bytes: 128,
        }
        .access();
        let b = Pattern::Interleaved {
            rank: 1,
            processes: 4,
            pieces: 3,
            piece_bytes: 128,
        }
        .access();
        assert_eq!(a.file[1], Piece::new(512, 128));
        assert_eq!(b.file[0], Piece::new(128, 128));
        assert_eq!(a.memory[1], (256, 128));
    }
}
