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

use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tessera_client::dtype::{Distribution, Order};
use tessera_client::plan::Plan;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, Datatype, File, IoReport, Layout, OpenMode, Piece,
    SieveOptions, TransferPolicy, View,
};
use tessera_proto::access::{server_share, MatchedView};
use tessera_proto::limits::MESSAGE_BULK_BYTES_MAX;
use tessera_proto::{DeclareView, FileType, StoragePlan, Wire};

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
    /// The share of process `rank` of a global array (seed 001 §3.4), described by its MPI
    /// file type; memory is one contiguous buffer in the order of the type's stream.
    /// Methods: the [`ArrayMethod`] names.
    Array {
        /// Rank of the process.
        rank: usize,
        /// The array and how it is dealt.
        share: ArrayShare,
    },
}

/// Bytes of one element of NAS BT's solution array: 5 doubles.
pub const BTIO_POINT_BYTES: u64 = 5 * 8;

/// A global array dealt over processes, each share an MPI file type (seed 001 §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArrayShare {
    /// 1-D block-column distribution (seed 001 Fig. 3.5): an `n` x `n` array of
    /// `element_bytes` elements in C order; process r owns columns [r*n/p, (r+1)*n/p), so
    /// its share is `n` file pieces of n/p elements, one per row.
    BlockColumn {
        /// Rows and columns.
        n: u64,
        /// Bytes per element.
        element_bytes: u64,
        /// Processes p sharing the columns.
        processes: u64,
    },
    /// mpi-tile-io (seed 001 §3.4.3): a `grid_rows` x `grid_columns` grid of tiles of
    /// `tile_rows` x `tile_columns` elements, in C order; process r owns tile r (row-major),
    /// so its share is `tile_rows` file pieces of one tile row each.
    Tile {
        /// Element rows of a tile.
        tile_rows: u64,
        /// Element columns of a tile.
        tile_columns: u64,
        /// Bytes per element.
        element_bytes: u64,
        /// Tile rows of the grid.
        grid_rows: u64,
        /// Tile columns of the grid.
        grid_columns: u64,
    },
    /// Output step `step` of NAS BT-IO (seed 001 §3.4.4): a `points`^3 grid of
    /// [`BTIO_POINT_BYTES`] per point in Fortran order, appended at `step` times its size.
    /// BT's multi-partition over `processes` (a square P) cuts the grid into sqrt(P)^3 cells
    /// and gives each process sqrt(P) of them, one per z layer, moving diagonally in x and y
    /// from layer to layer (NPB `make_set`); its file type is a struct of one subarray per
    /// cell, as BT-IO's `full_mpiio` builds it.
    Btio {
        /// Points per side.
        points: u64,
        /// Processes, a square.
        processes: u64,
        /// Output step (0-based).
        step: u64,
    },
}

impl ArrayShare {
    /// Processes the array is dealt over.
    pub fn processes(self) -> u64 {
        match self {
            Self::BlockColumn { processes, .. } | Self::Btio { processes, .. } => processes,
            Self::Tile {
                grid_rows,
                grid_columns,
                ..
            } => grid_rows * grid_columns,
        }
    }

    /// Bytes of the whole array (of one output step, for BT-IO).
    pub fn array_bytes(self) -> u64 {
        match self {
            Self::BlockColumn {
                n, element_bytes, ..
            } => n * n * element_bytes,
            Self::Tile {
                tile_rows,
                tile_columns,
                element_bytes,
                grid_rows,
                grid_columns,
            } => tile_rows * grid_rows * tile_columns * grid_columns * element_bytes,
            Self::Btio { points, .. } => points * points * points * BTIO_POINT_BYTES,
        }
    }

    /// File offset the file type is tiled from.
    pub fn displacement(self) -> u64 {
        match self {
            Self::Btio { step, .. } => step * self.array_bytes(),
            Self::BlockColumn { .. } | Self::Tile { .. } => 0,
        }
    }

    /// The (x, y, z) cell coordinates of the cells of process `rank` in BT's multi-partition
    /// over `cells` x `cells` processes: cell c lies in z layer c (NPB `make_set`).
    pub fn btio_cells(cells: u64, rank: u64) -> Vec<[u64; 3]> {
        let (x, y) = (rank % cells, rank / cells);
        (0..cells)
            .map(|c| [(x + c) % cells, (y + cells * c - c) % cells, c])
            .collect()
    }

    /// The file type of process `rank`: lower bound 0, extent the array.
    pub fn filetype(self, rank: usize) -> Result<Datatype, String> {
        let rank = rank as u64;
        let what =
            |err: tessera_client::dtype::DatatypeError| format!("{self:?} rank {rank}: {err}");
        if rank >= self.processes() {
            return Err(format!(
                "{self:?}: rank {rank} of {} processes",
                self.processes()
            ));
        }
        match self {
            Self::BlockColumn {
                n,
                element_bytes,
                processes,
            } => {
                if n % processes != 0 {
                    return Err(format!(
                        "{self:?}: {n} columns do not divide over {processes} processes"
                    ));
                }
                let columns = n / processes;
                let element = Datatype::bytes(element_bytes).map_err(what)?;
                Datatype::subarray(
                    &[n, n],
                    &[n, columns],
                    &[0, rank * columns],
                    Order::C,
                    &element,
                )
                .map_err(what)
            }
            Self::Tile {
                tile_rows,
                tile_columns,
                element_bytes,
                grid_rows,
                grid_columns,
            } => {
                let (row, column) = (rank / grid_columns, rank % grid_columns);
                let element = Datatype::bytes(element_bytes).map_err(what)?;
                Datatype::subarray(
                    &[grid_rows * tile_rows, grid_columns * tile_columns],
                    &[tile_rows, tile_columns],
                    &[row * tile_rows, column * tile_columns],
                    Order::C,
                    &element,
                )
                .map_err(what)
            }
            Self::Btio {
                points, processes, ..
            } => {
                let cells = (1..=processes)
                    .find(|cells| cells * cells >= processes)
                    .unwrap_or(0);
                if cells * cells != processes || points % cells != 0 {
                    return Err(format!(
                        "{self:?}: BT needs a square number of processes whose root divides the grid"
                    ));
                }
                let side = points / cells;
                let element =
                    Datatype::contiguous(BTIO_POINT_BYTES / 8, &Datatype::bytes(8).map_err(what)?)
                        .map_err(what)?;
                let subarrays = Self::btio_cells(cells, rank)
                    .into_iter()
                    .map(|cell| {
                        Datatype::subarray(
                            &[points; 3],
                            &[side; 3],
                            &cell.map(|coordinate| coordinate * side),
                            Order::Fortran,
                            &element,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(what)?;
                let count = subarrays.len();
                Datatype::structure(&vec![1; count], &vec![0; count], &subarrays).map_err(what)
            }
        }
    }
}

/// How a [`Pattern::Array`] step moves its pieces (seed 001 §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayMethod {
    /// One request per file piece ("Multiple I/O").
    Multiple,
    /// Client-side data sieving over large contiguous requests (ROMIO data sieving).
    Sieve,
    /// One list call; the servers make one storage call per merged piece.
    List,
    /// One list call; each server's cost model chooses (Active Data Sieving).
    ListAds,
}

impl ArrayMethod {
    /// Every method, in the order the tables list them.
    pub const ALL: [Self; 4] = [Self::Multiple, Self::Sieve, Self::List, Self::ListAds];

    /// The name in tasks and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Multiple => "multiple",
            Self::Sieve => "sieve",
            Self::List => "list",
            Self::ListAds => "list+ads",
        }
    }

    /// Parses [`ArrayMethod::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|method| method.name() == name)
    }

    /// The storage plan the servers are asked for. Only `list+ads` lets the cost model
    /// choose; the others stand for servers without Active Data Sieving, as in the paper.
    fn storage_plan(self) -> StoragePlan {
        match self {
            Self::ListAds => StoragePlan::Auto,
            Self::Multiple | Self::Sieve | Self::List => StoragePlan::PerPiece,
        }
    }
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
    /// The file type of a [`Pattern::Matrix`] or [`Pattern::Array`] access (none for the
    /// list-only patterns).
    pub fn filetype(&self) -> Result<Option<Datatype>, String> {
        match *self {
            Self::Matrix {
                rank,
                n,
                distribution,
            } => distribution.filetype(n, rank).map(Some),
            Self::Array { rank, share } => share.filetype(rank).map(Some),
            Self::Interleaved { .. } | Self::Block2d { .. } => Ok(None),
        }
    }

    /// The file offset the file type is tiled from.
    fn displacement(&self) -> u64 {
        match *self {
            Self::Array { share, .. } => share.displacement(),
            Self::Matrix { .. } | Self::Interleaved { .. } | Self::Block2d { .. } => 0,
        }
    }

    /// A typed access: its data is checked at `Check`, once every process is done.
    /// The byte at file `offset` of what generation `generation` of this access writes:
    /// [`expected_byte`], but for a [`Pattern::Block2d`] of 8-byte elements, whose file is an
    /// array of doubles each holding its own row-major index (the demo's `/demo/array`, which
    /// the README's Python line reads), so a reader of the file sees numbers.
    pub fn byte_at(&self, offset: u64, generation: u64) -> u8 {
        match self {
            Self::Block2d {
                element_bytes: 8, ..
            } => {
                #[allow(clippy::cast_precision_loss)] // indices below 2^53
                let value = (offset / 8) as f64;
                value.to_le_bytes()[usize::try_from(offset % 8).expect("below 8")]
            }
            _ => expected_byte(offset, generation),
        }
    }

    fn typed(&self) -> bool {
        matches!(self, Self::Matrix { .. } | Self::Array { .. })
    }

    /// The memory and file pieces of this access, or why they cannot be built.
    pub fn try_access(&self) -> Result<Access, String> {
        let Some(filetype) = self.filetype()? else {
            return Ok(self.access());
        };
        let total = filetype.size();
        let displacement = i64::try_from(self.displacement())
            .map_err(|_| format!("displacement {}", self.displacement()))?;
        let file = filetype
            .runs(displacement, 0, total)
            .map_err(|err| format!("flattening the file type: {err}"))?
            .map(|run| {
                Piece::new(
                    u64::try_from(run.offset).expect("darrays and subarrays start at byte 0"),
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
    /// For a [`Pattern::Matrix`] or [`Pattern::Array`] whose type cannot be built (use
    /// [`Pattern::try_access`]).
    pub fn access(&self) -> Access {
        match *self {
            Self::Matrix { .. } | Self::Array { .. } => {
                self.try_access().expect("a valid typed access")
            }
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
    /// A worker's group of tasks ([`run_group`]).
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

struct Prepared {
    task: Task,
    client: Client,
    via: Via,
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
    List(TransferPolicy),
    View,
    /// One request per file piece.
    Multiple,
    /// Client-side data sieving.
    Sieve,
    /// `read_at` calls through the client cache ([`Task::cache`]).
    Cached,
}

/// How a step moves its data, and the storage plan it asks the servers for.
fn via(task: &Task) -> Result<(Via, StoragePlan), String> {
    let unknown = |name: &str| format!("unknown method {name} for {:?}", task.pattern);
    if task.cache.is_some() {
        return if task.write || task.pattern.typed() {
            Err("a cache step reads a region (an interleaved pattern of one piece)".to_owned())
        } else {
            Ok((Via::Cached, StoragePlan::Auto))
        };
    }
    match (&task.pattern, task.method.as_str()) {
        (Pattern::Matrix { .. }, "list") => {
            Ok((Via::List(TransferPolicy::Auto), StoragePlan::Auto))
        }
        (Pattern::Matrix { .. }, "view") => Ok((Via::View, StoragePlan::Auto)),
        (Pattern::Array { .. }, name) => {
            let method = ArrayMethod::from_name(name).ok_or_else(|| unknown(name))?;
            let via = match method {
                ArrayMethod::Multiple => Via::Multiple,
                ArrayMethod::Sieve => Via::Sieve,
                ArrayMethod::List | ArrayMethod::ListAds => Via::List(TransferPolicy::Auto),
            };
            Ok((via, method.storage_plan()))
        }
        (_, name) => TransferPolicy::from_name(name)
            .map(|policy| (Via::List(policy), StoragePlan::Auto))
            .ok_or_else(|| unknown(name)),
    }
}

/// Bytes of the `DeclareView` frames of `view` (header and body, one per server).
fn declare_bytes(file: &File, view: &View, filetype: &Datatype) -> u64 {
    view.positions()
        .iter()
        .map(|&position| {
            let declare = DeclareView {
                handle: file.handle(),
                capability: file.capability().unwrap_or_default(),
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
    io_call(
        file,
        buffer,
        access,
        write,
        Via::List(file.transfer_policy()),
    )
}

/// One call of `access` by `via` (a list call for [`Via::View`], whose calls are made on
/// the view).
fn io_call(
    file: &File,
    buffer: &mut [u8],
    access: &Access,
    write: bool,
    via: Via,
) -> Result<IoReport, String> {
    if write {
        let memory: Vec<IoSlice<'_>> = access
            .memory
            .iter()
            .map(|&(start, length)| IoSlice::new(&buffer[start..start + length]))
            .collect();
        match via {
            Via::Multiple => file.write_multiple(&memory, &access.file),
            Via::Sieve => file.write_sieve(&memory, &access.file, &SieveOptions::default()),
            Via::List(_) | Via::View | Via::Cached => file.write_list(&memory, &access.file),
        }
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
        match via {
            Via::Multiple => file.read_multiple(&mut memory, &access.file),
            Via::Sieve => file.read_sieve(&mut memory, &access.file, &SieveOptions::default()),
            Via::List(_) | Via::View | Via::Cached => file.read_list(&mut memory, &access.file),
        }
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
    // A `tcp:` method prefix reaches the servers by TCP even on their host.
    let (method, tcp) = match task.method.strip_prefix("tcp:") {
        Some(method) => (method.to_owned(), true),
        None => (task.method.clone(), false),
    };
    let mut options = ClientOptions::default();
    options.local &= !tcp;
    if let Some(cache) = &task.cache {
        options.cache_bytes = Some(cache.cache_bytes);
        options.demote = Some(cache.demote.parse()?);
    }
    let client = Client::new(&config, &options);
    let task = Task { method, ..task };
    let (via, storage_plan) = via(&task)?;
    let mode = match (task.write, via) {
        // A sieving write reads the chunks it modifies; a caching reader demotes only blocks
        // of files it may write.
        (true, Via::Sieve) | (false, Via::Cached) => OpenMode::ReadWrite,
        (true, _) => OpenMode::WriteOnly,
        (false, _) => OpenMode::ReadOnly,
    };
    let mut file = client
        .open(&task.path, mode)
        .map_err(|err| err.to_string())?;
    if let Via::List(method) = via {
        file.set_transfer_policy(method);
    }
    file.set_storage_plan(storage_plan);
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
                buffer[index] = task.pattern.byte_at(offset, task.generation);
            }
        }
    }
    let mut prepared = Prepared {
        task,
        client,
        via,
        file,
        buffer,
        access,
        view: None,
        list_plan: None,
        declare_bytes: 0,
        declare_seconds: 0.0,
    };
    if let Some(cache) = prepared.task.cache.clone() {
        for _ in 0..cache.warm_passes {
            cached_pass(
                &prepared.file,
                &mut prepared.buffer,
                &prepared.access,
                &cache,
            )?;
        }
    }
    // The client is new, so its connections are opened by its first call: one untimed call
    // opens those the timed calls will use (a view step's or not, so a bound measured with
    // list calls pays for no handshake the view does not).
    let one_buffer = prepared.access.memory == [(0, prepared.access.buffer_bytes)];
    if one_buffer && prepared.via != Via::Cached {
        let write = prepared.task.write;
        let warm_up = warm_up_access(prepared.file.layout(), &prepared.access);
        list_call(&prepared.file, &mut prepared.buffer, &warm_up, write)
            .map_err(|err| format!("warm-up call: {err}"))?;
        if !write {
            prepared.buffer.fill(0xA5);
        }
    }
    if let Some(filetype) = prepared.task.pattern.filetype()? {
        prepare_typed(&mut prepared, &filetype)?;
    }
    Ok(prepared)
}

/// Plans the list call's offset bytes, and declares the view of a `view` step (timed on its
/// own).
fn prepare_typed(prepared: &mut Prepared, filetype: &Datatype) -> Result<(), String> {
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
    if prepared.via == Via::View {
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
            if prepared.buffer[index]
                != prepared
                    .task
                    .pattern
                    .byte_at(offset, prepared.task.generation)
            {
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

/// One walk of a cache step: `read_at` calls of `call_bytes` over the access's file pieces,
/// each into its place in the buffer.
fn cached_pass(
    file: &File,
    buffer: &mut [u8],
    access: &Access,
    cache: &CacheTask,
) -> Result<IoReport, String> {
    let call = usize::try_from(cache.call_bytes.max(1)).map_err(|_| "call_bytes")?;
    let mut total = IoReport::default();
    for (piece, &(start, length)) in access.file.iter().zip(&access.memory) {
        for (index, chunk) in buffer[start..start + length].chunks_mut(call).enumerate() {
            let offset = piece.offset + (index * call) as u64;
            total += file
                .read_at(offset, chunk)
                .map_err(|err| format!("read at {offset}: {err}"))?;
        }
    }
    Ok(total)
}

/// One timed call of a step (with its `sync`).
fn call(prepared: &mut Prepared) -> Result<IoReport, String> {
    let write = prepared.task.write;
    let report = match &prepared.view {
        None if prepared.via == Via::Cached => {
            let cache = prepared.task.cache.as_ref().expect("a cache step");
            cached_pass(
                &prepared.file,
                &mut prepared.buffer,
                &prepared.access,
                cache,
            )?
        }
        Some(view) if write => view
            .write_at(0, &prepared.buffer)
            .map_err(|err| err.to_string())?,
        Some(view) => view
            .read_at(0, &mut prepared.buffer)
            .map_err(|err| err.to_string())?,
        None => io_call(
            &prepared.file,
            &mut prepared.buffer,
            &prepared.access,
            write,
            prepared.via,
        )?,
    };
    if write && prepared.task.sync {
        prepared.file.sync().map_err(|err| format!("sync: {err}"))?;
    }
    Ok(report)
}

/// Runs a worker's group: alone, its one task's calls back to back, timed as one block;
/// together, the members take turns call by call, in an order shuffled anew each round (the
/// same in every process, [`crate::report::turn_order`]), and each member's seconds are the sum of
/// its own calls. So every member meets the same moments of the machine, and a ratio
/// between two members is not a ratio between two moments.
fn run_group(group: &mut [Prepared]) -> Result<Vec<StepResult>, String> {
    let mut totals = vec![IoReport::default(); group.len()];
    let mut seconds = vec![0.0f64; group.len()];
    let counts_before: Vec<CacheCounts> = group
        .iter()
        .map(|prepared| CacheCounts::of(prepared.client.cache_stats()))
        .collect();
    if let [prepared] = group {
        let started = Instant::now();
        for _ in 0..prepared.task.iterations {
            totals[0] += call(prepared)?;
        }
        seconds[0] = started.elapsed().as_secs_f64();
    } else {
        let rounds = group
            .iter()
            .map(|prepared| prepared.task.iterations)
            .max()
            .unwrap_or(0);
        for round in 0..rounds {
            for member in crate::report::turn_order(round as usize, group.len()) {
                let prepared = &mut group[member];
                if round >= prepared.task.iterations {
                    continue;
                }
                let started = Instant::now();
                totals[member] += call(prepared)?;
                seconds[member] += started.elapsed().as_secs_f64();
            }
        }
    }
    group
        .iter()
        .zip(totals)
        .zip(seconds)
        .zip(counts_before)
        .map(|(((prepared, total), seconds), before)| step_result(prepared, total, seconds, before))
        .collect()
}

/// What a worker reports of `prepared`'s timed calls (`total` over them, in `seconds`).
fn step_result(
    prepared: &Prepared,
    total: IoReport,
    seconds: f64,
    counts_before: CacheCounts,
) -> Result<StepResult, String> {
    let (plan_seconds, server_walk_seconds) = match &prepared.view {
        Some(_) => view_phases(prepared)?,
        None => (0.0, 0.0),
    };
    let cache = prepared
        .task
        .cache
        .as_ref()
        .map(|_| CacheCounts::of(prepared.client.cache_stats()).since(counts_before));
    // A typed or cache step checks its data only at `Check`, once every process is done, so
    // no process verifies on a core another one still needs for its timed calls.
    let deferred = prepared.task.pattern.typed() || prepared.via == Via::Cached;
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
        storage_bytes: total.storage_bytes,
        sieved: total.sieved,
        locks: total.locks,
        bytes: total.bytes,
        one_sided: total.one_sided,
        bytes_copied: total.bytes_copied,
        memory_pieces: prepared.access.memory.len() as u64,
        file_pieces: prepared.access.file.len() as u64,
        access_bytes: prepared.access.file.iter().map(|piece| piece.length).sum(),
        verified,
        error: None,
        offset_bytes,
        servers,
        declare_bytes: prepared.declare_bytes,
        declare_seconds: prepared.declare_seconds,
        plan_seconds,
        server_walk_seconds,
        send_seconds: total.send_ns as f64 * 1e-9,
        reply_seconds: total.reply_ns as f64 * 1e-9,
        cache,
    })
}

/// Repetitions of each phase [`view_phases`] times (the fastest is kept).
const PHASE_REPETITIONS: usize = 3;

/// Times, outside the timed calls, two phases of one view call of the whole share: the
/// client's planning (the file type's runs over the layout) and each server's type walk of
/// its request (`server_share`, as the iod runs it); the slowest server's walk is kept, since
/// the servers walk at once. A view that matches a pattern layout is planned and shared
/// without a walk on either side (`MatchedView`), as the client and iod do; its match was
/// found once, when the view was declared. The rest of a call is transfer, storage and reply.
fn view_phases(prepared: &Prepared) -> Result<(f64, f64), String> {
    let Some(filetype) = prepared.task.pattern.filetype()? else {
        return Ok((0.0, 0.0));
    };
    let layout = prepared.file.layout();
    let total = filetype.size();
    let matched = MatchedView::of(layout, &filetype, 0);
    let bulk_max = u64::from(MESSAGE_BULK_BYTES_MAX);
    let mut plan_seconds = f64::INFINITY;
    let mut plan = None;
    for _ in 0..PHASE_REPETITIONS {
        let started = Instant::now();
        if let Some(matched) = matched {
            plan = Some(Plan::matched(matched, 0, total, bulk_max));
            plan_seconds = plan_seconds.min(started.elapsed().as_secs_f64());
            continue;
        }
        let runs = filetype
            .runs(0, 0, total)
            .map_err(|err| format!("view phases: {err}"))?
            .map(|run| {
                Piece::new(
                    u64::try_from(run.offset).expect("matrix types start at byte 0"),
                    run.length,
                )
            });
        // As a view call plans it when no piece travels in a frame of its own.
        let made = Plan::counted_from_runs(layout, 0, runs, bulk_max);
        plan_seconds = plan_seconds.min(started.elapsed().as_secs_f64());
        plan = Some(made);
    }
    let plan = plan.expect("at least one repetition");
    let mut walk_seconds = 0.0f64;
    for request in &plan.requests {
        let file = FileType {
            layout: layout.clone(),
            position: u16::try_from(request.server_position)
                .map_err(|_| "a server position over u16".to_owned())?,
            filetype: filetype.clone(),
            displacement: 0,
        };
        let mut best = f64::INFINITY;
        for _ in 0..PHASE_REPETITIONS {
            let started = Instant::now();
            let (start, end) = request.stream;
            let share = match matched {
                Some(matched) => matched.share(&file, start, end),
                None => server_share(&file, start, end, &request.stream_ranges()),
            }
            .map_err(|err| format!("view phases: {err}"))?;
            std::hint::black_box(&share);
            best = best.min(started.elapsed().as_secs_f64());
        }
        walk_seconds = walk_seconds.max(best);
    }
    Ok((plan_seconds, walk_seconds))
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
    let mut group: Vec<Prepared> = Vec::new();
    let failed = |err: String| Message::Failed(format!("worker {}: {err}", args.rank));
    while let Some(message) = receive(&mut input)? {
        let reply = match message {
            Message::Prepare(tasks) => {
                // The previous group's clients close their connections first.
                group.clear();
                match tasks.into_iter().map(prepare).collect() {
                    Ok(ready) => {
                        group = ready;
                        Message::Ready
                    }
                    Err(err) => failed(err),
                }
            }
            Message::Go if group.is_empty() => failed("go before prepare".to_owned()),
            Message::Go => run_group(&mut group).map_or_else(failed, Message::Done),
            Message::Check if group.is_empty() => failed("check before prepare".to_owned()),
            Message::Check => group
                .iter_mut()
                .map(check)
                .collect::<Result<_, _>>()
                .map_or_else(failed, Message::Checked),
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

    /// Sends `message` to every worker.
    fn broadcast(&mut self, message: &Message) -> Result<(), String> {
        for (_, stdin, _) in &mut self.children {
            send(stdin, message)?;
        }
        Ok(())
    }

    /// Every worker's next message in rank order, through `take`, which gives back any message
    /// but the `expected` reply (an error naming the worker).
    fn replies<T>(
        &mut self,
        expected: &str,
        take: impl Fn(Message) -> Result<T, Box<Message>>,
    ) -> Result<Vec<T>, String> {
        (0..self.children.len())
            .map(|rank| {
                take(self.expect(rank)?)
                    .map_err(|other| format!("worker {rank}: expected {expected}, got {other:?}"))
            })
            .collect()
    }

    /// Runs one step: task `i` on worker `i`, all starting together. Returns each worker's
    /// result and the wall time from the common start to the last finish.
    pub fn step(&mut self, tasks: Vec<Task>) -> Result<(Vec<StepResult>, f64), String> {
        Self::alone(self.run_step(Self::groups_of_one(tasks), false, || Ok(())))
    }

    /// [`Workers::step`], then a second barrier at which every worker verifies what it read
    /// (outside the timed part of every process) and reports it in `verified`.
    pub fn step_checked(&mut self, tasks: Vec<Task>) -> Result<(Vec<StepResult>, f64), String> {
        Self::alone(self.run_step(Self::groups_of_one(tasks), true, || Ok(())))
    }

    /// [`Workers::step_checked`], running `before_go` once every worker is ready and before
    /// any starts (outside every timing).
    pub fn step_checked_with(
        &mut self,
        tasks: Vec<Task>,
        before_go: impl FnOnce() -> Result<(), String>,
    ) -> Result<(Vec<StepResult>, f64), String> {
        Self::alone(self.run_step(Self::groups_of_one(tasks), true, before_go))
    }

    /// [`Workers::step_checked`] of a group of tasks per worker, whose calls take turns one by
    /// one ([`run_group`]): `results[rank][member]`.
    pub fn step_grouped(
        &mut self,
        groups: Vec<Vec<Task>>,
    ) -> Result<(Vec<Vec<StepResult>>, f64), String> {
        self.run_step(groups, true, || Ok(()))
    }

    fn groups_of_one(tasks: Vec<Task>) -> Vec<Vec<Task>> {
        tasks.into_iter().map(|task| vec![task]).collect()
    }

    fn alone(
        step: Result<(Vec<Vec<StepResult>>, f64), String>,
    ) -> Result<(Vec<StepResult>, f64), String> {
        let (results, wall_seconds) = step?;
        let results = results.into_iter().flatten().collect();
        Ok((results, wall_seconds))
    }

    /// One step (see [`Workers::step`]), `before_go` run between ready and go, and with
    /// `check` the verifying barrier of [`Workers::step_checked`].
    fn run_step(
        &mut self,
        groups: Vec<Vec<Task>>,
        check: bool,
        before_go: impl FnOnce() -> Result<(), String>,
    ) -> Result<(Vec<Vec<StepResult>>, f64), String> {
        assert_eq!(groups.len(), self.children.len(), "one group per worker");
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        assert!(sizes.iter().all(|&size| size > 0), "no empty group");
        for ((_, stdin, _), tasks) in self.children.iter_mut().zip(groups) {
            send(stdin, &Message::Prepare(tasks))?;
        }
        self.replies("ready", |message| match message {
            Message::Ready => Ok(()),
            other => Err(Box::new(other)),
        })?;
        before_go()?;
        let started = Instant::now();
        self.broadcast(&Message::Go)?;
        let mut results = self.replies("done", |message| match message {
            Message::Done(results) => Ok(results),
            other => Err(Box::new(other)),
        })?;
        let wall_seconds = started.elapsed().as_secs_f64();
        for (rank, (got, &size)) in results.iter().zip(&sizes).enumerate() {
            if got.len() != size {
                return Err(format!(
                    "worker {rank}: {} results for a group of {size}",
                    got.len()
                ));
            }
        }
        if check {
            self.broadcast(&Message::Check)?;
            let checked = self.replies("checked", |message| match message {
                Message::Checked(verified) => Ok(verified),
                other => Err(Box::new(other)),
            })?;
            for (group, verified) in results.iter_mut().zip(checked) {
                for (result, verified) in group.iter_mut().zip(verified) {
                    result.verified = verified;
                }
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

    /// Counts each byte of `pieces` in `seen` (indexed by file offset).
    fn mark(seen: &mut [u8], pieces: &[Piece]) {
        for piece in pieces {
            for offset in piece.offset..piece.offset + piece.length {
                seen[usize::try_from(offset).unwrap()] += 1;
            }
        }
    }

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
            mark(&mut seen, &access.file);
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
                mark(&mut seen, &access.file);
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
    fn block_column_shares_are_one_piece_per_row_and_tile_the_array_once() {
        const N: u64 = 32;
        let mut seen = vec![0u8; usize::try_from(N * N * 4).unwrap()];
        for rank in 0..4 {
            let share = ArrayShare::BlockColumn {
                n: N,
                element_bytes: 4,
                processes: 4,
            };
            let access = Pattern::Array { rank, share }.access();
            assert_eq!(access.file.len() as u64, N, "rank {rank}");
            assert_eq!(access.file[1], Piece::new(N * 4 + rank as u64 * N, N));
            assert_eq!(access.memory, [(0, usize::try_from(N * N).unwrap())]);
            mark(&mut seen, &access.file);
        }
        assert!(seen.iter().all(|&count| count == 1));
    }

    #[test]
    fn array_methods_choose_their_path_and_storage_plan() {
        let task = |method: &str| Task {
            cluster: PathBuf::new(),
            path: String::new(),
            write: true,
            method: method.to_owned(),
            iterations: 1,
            generation: 0,
            sync: false,
            cache: None,
            pattern: Pattern::Array {
                rank: 0,
                share: ArrayShare::BlockColumn {
                    n: 8,
                    element_bytes: 4,
                    processes: 4,
                },
            },
        };
        for method in ArrayMethod::ALL {
            assert_eq!(ArrayMethod::from_name(method.name()), Some(method));
        }
        assert_eq!(
            via(&task("multiple")).unwrap(),
            (Via::Multiple, StoragePlan::PerPiece)
        );
        assert_eq!(
            via(&task("sieve")).unwrap(),
            (Via::Sieve, StoragePlan::PerPiece)
        );
        assert_eq!(
            via(&task("list")).unwrap(),
            (Via::List(TransferPolicy::Auto), StoragePlan::PerPiece)
        );
        assert_eq!(
            via(&task("list+ads")).unwrap(),
            (Via::List(TransferPolicy::Auto), StoragePlan::Auto)
        );
        assert!(via(&task("view")).is_err());
        assert!(via(&task("gather")).is_err());
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
