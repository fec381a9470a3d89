//! Client processes for the demo and the benchmarks, driven in lock step by a parent.
//!
//! The parent starts N `tessera worker` processes and speaks JSON lines with them over their
//! standard input and output. A step is two messages: `prepare` (the worker opens the file and
//! builds its buffers, then answers `ready`) and `go` (every worker starts at once, runs the
//! timed I/O, verifies what it read outside the timed part, and answers with its figures).
//! The prepare/go split is the barrier: no process starts its I/O before all are ready.

use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tessera_client::{
    Client, ClientOptions, ClusterConfig, File, IoReport, OpenMode, Piece, TransferMode,
};

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
    /// The memory and file pieces of this access.
    pub fn access(&self) -> Access {
        match *self {
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
    /// Why the step failed, if it did.
    pub error: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
enum Message {
    Prepare(Box<Task>),
    Ready,
    Go,
    Done(StepResult),
    Failed(String),
}

struct Prepared {
    task: Task,
    file: File,
    buffer: Vec<u8>,
    access: Access,
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
    let method = TransferMode::from_name(&task.method)
        .ok_or_else(|| format!("unknown method {}", task.method))?;
    file.set_transfer_mode(method);
    let access = task.pattern.access();
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
    Ok(Prepared {
        task,
        file,
        buffer,
        access,
    })
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
    for _ in 0..prepared.task.iterations {
        let report = if prepared.task.write {
            let memory: Vec<IoSlice<'_>> = prepared
                .access
                .memory
                .iter()
                .map(|&(start, length)| IoSlice::new(&prepared.buffer[start..start + length]))
                .collect();
            prepared.file.write_list(&memory, &prepared.access.file)
        } else {
            let mut memory: Vec<IoSliceMut<'_>> = Vec::with_capacity(prepared.access.memory.len());
            let mut rest: &mut [u8] = &mut prepared.buffer;
            let mut consumed = 0;
            for &(start, length) in &prepared.access.memory {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
                let (piece, tail) = tail.split_at_mut(length);
                memory.push(IoSliceMut::new(piece));
                rest = tail;
                consumed = start + length;
            }
            prepared.file.read_list(&mut memory, &prepared.access.file)
        }
        .map_err(|err| err.to_string())?;
        total += report;
    }
    let seconds = started.elapsed().as_secs_f64();
    let verified = prepared.task.write || verify(prepared);
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
    })
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
