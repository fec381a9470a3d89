//! The noncontiguous accesses the demo and benchmarks make ([`Pattern`]) and, for each rank,
//! the file pieces and memory pieces of its share ([`Access`]): interleaved pieces, 2-D
//! blocks, `darray` matrix shares, and the [`ArrayShare`]s of block columns, tiles and BT-IO
//! cells, with the [`ArrayMethod`] that moves them.

use serde::{Deserialize, Serialize};
use tessera_client::dtype::{Distribution, Order};
use tessera_client::{Datatype, Piece};
use tessera_proto::StoragePlan;

use super::expected_byte;

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
    pub(super) fn storage_plan(self) -> StoragePlan {
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

    pub(super) fn typed(&self) -> bool {
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
