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
//!
//! A [`Pattern::Array`] step (seed 001 §3.4) is built the same way from an [`ArrayShare`]'s
//! file type — a block-column share, an mpi-tile-io tile or the cells of one NAS BT-IO output
//! step — and runs one of the four [`ArrayMethod`]s: `multiple` (one request per file
//! piece), `sieve` (client-side data sieving), `list` (one list call, the servers making one
//! storage call per merged piece) or `list+ads` (one list call, each server's cost model
//! choosing: Active Data Sieving). With [`Task::sync`] every timed write is followed by
//! [`File::sync`] inside the timing. [`Workers::step_checked_with`] runs a hook between the
//! barrier and the start (the benchmarks drop the servers' page cache there).
//!
//! The parts: [`pattern`] (the accesses and the pieces each rank moves), [`worker`] (one
//! worker process: prepare, the timed calls, the check) and [`parent`] ([`Workers`], the
//! group of processes); the tasks, results and messages between them are here.

mod parent;
mod pattern;
#[cfg(test)]
mod tests;
mod worker;

use std::io::{BufRead, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use parent::Workers;
pub use pattern::{
    ArrayMethod, ArrayShare, MatrixDistribution, Pattern, BTIO_POINT_BYTES,
    LIST_OFFSET_BYTES_PER_PIECE, MATRIX_PROCESSES, VIEW_OFFSET_BYTES_PER_REQUEST,
};
pub use worker::run;

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
    /// After every timed write call, flush the file to stable storage ([`File::sync`]) inside
    /// the timing.
    #[serde(default)]
    pub sync: bool,
    /// Read through a client cache: each call a `read_at` of `call_bytes` walking the
    /// access's one file piece (`None`: the access moves by `method`).
    #[serde(default)]
    pub cache: Option<CacheTask>,
    /// The access.
    pub pattern: Pattern,
}

/// A read step through the client cache (`tessera bench demote`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheTask {
    /// The client cache's budget (0: no cache).
    pub cache_bytes: u64,
    /// The DEMOTE mode: `off`, `eager` or `buffered`.
    pub demote: String,
    /// Untimed walks over the region before the timed ones (the caches' steady state).
    pub warm_passes: u32,
    /// Bytes of each `read_at`.
    pub call_bytes: u64,
}

/// What the client cache counted over a step's timed calls.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct CacheCounts {
    /// Blocks found in the client cache.
    pub hits: u64,
    /// Blocks read from the iods.
    pub misses: u64,
    /// Misses found in the DEMOTE buffer.
    pub buffer_hits: u64,
    /// Blocks demoted to the iods.
    pub demotes_sent: u64,
    /// Evicted blocks not demoted (the iod had them, or the buffer was full).
    pub demotes_refused: u64,
    /// Evictions that waited for room in a full DEMOTE buffer.
    #[serde(default)]
    pub buffer_full_waits: u64,
}

impl CacheCounts {
    fn of(stats: Option<tessera_client::ClientCacheStats>) -> Self {
        stats.map_or_else(Self::default, |stats| Self {
            hits: stats.hits,
            misses: stats.misses,
            buffer_hits: stats.buffer_hits,
            demotes_sent: stats.demotes_sent,
            demotes_refused: stats.demotes_refused,
            buffer_full_waits: stats.buffer_full_waits,
        })
    }

    fn since(self, before: Self) -> Self {
        Self {
            hits: self.hits - before.hits,
            misses: self.misses - before.misses,
            buffer_hits: self.buffer_hits - before.buffer_hits,
            demotes_sent: self.demotes_sent - before.demotes_sent,
            demotes_refused: self.demotes_refused - before.demotes_refused,
            buffer_full_waits: self.buffer_full_waits - before.buffer_full_waits,
        }
    }

    /// The sum of two workers' counts.
    pub fn add(&mut self, other: &Self) {
        self.hits += other.hits;
        self.misses += other.misses;
        self.buffer_hits += other.buffer_hits;
        self.demotes_sent += other.demotes_sent;
        self.demotes_refused += other.demotes_refused;
        self.buffer_full_waits += other.buffer_full_waits;
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
    /// Bytes the servers moved to and from storage, over all timed calls (more than
    /// `bytes` where they sieved).
    #[serde(default)]
    pub storage_bytes: u64,
    /// Requests the servers served by sieving, over all timed calls.
    #[serde(default)]
    pub sieved: u64,
    /// Range locks taken on the mds, over all timed calls (client-side sieving writes).
    #[serde(default)]
    pub locks: u64,
    /// Bytes moved, over all timed calls.
    pub bytes: u64,
    /// Requests whose data the servers moved one-sidedly (the `local` backend).
    #[serde(default)]
    pub one_sided: u64,
    /// Bytes copied through pack buffers on the client.
    #[serde(default)]
    pub bytes_copied: u64,
    /// Memory and file pieces of one call.
    pub memory_pieces: u64,
    /// File pieces of one call.
    pub file_pieces: u64,
    /// Useful bytes of one call: the sum of its file pieces (`bytes` also counts the holes a
    /// sieving method moves).
    #[serde(default)]
    pub access_bytes: u64,
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
    /// Views only, measured after the timed calls: seconds the client's planning of one
    /// call takes (the type walk over the layout, `Plan::from_runs`).
    #[serde(default)]
    pub plan_seconds: f64,
    /// Seconds the timed calls spent sending requests (`IoReport::send_ns`).
    #[serde(default)]
    pub send_seconds: f64,
    /// Seconds the timed calls spent receiving replies after their sends
    /// (`IoReport::reply_ns`).
    #[serde(default)]
    pub reply_seconds: f64,
    /// Views only: seconds of the servers' type walk of one call (`server_share` of each
    /// request, run here with the code the iods run), the slowest server's.
    #[serde(default)]
    pub server_walk_seconds: f64,
    /// Why the step failed, if it did.
    pub error: Option<String>,
    /// The client cache's counts over the timed calls (cache steps only).
    #[serde(default)]
    pub cache: Option<CacheCounts>,
}

#[derive(Debug, Serialize, Deserialize)]
enum Message {
    /// A worker's group of tasks (`worker::run_group`).
    Prepare(Vec<Task>),
    Ready,
    Go,
    /// One result per member of the group.
    Done(Vec<StepResult>),
    /// After every worker is done: check what was read (matrix steps) and release the views.
    Check,
    Checked(Vec<bool>),
    Failed(String),
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
