//! Tessera's datatype engine: MPI-style type trees, walked lazily.
//!
//! A [`Datatype`] describes where the bytes of a *data stream* lie, the way an MPI derived
//! datatype does: byte `i` of the stream of `count` instances of a type tiled from
//! displacement `d` (instance `k` at `d + k * extent`) lives at some offset, and consecutive
//! stream bytes form (offset, length) *runs*. File views, datatype I/O, memory types and the
//! pattern layouts of files are all described this way, so this crate is the foundation the
//! rest stands on.
//!
//! Types are immutable trees of five node kinds — a run of bytes, a (byte-strided) vector,
//! an indexed list of blocks, a struct of different children, and a resized node — shared
//! through `Arc`. Every MPI constructor lowers onto them ([`Datatype::subarray`] and
//! [`Datatype::darray`] in [`build`]), keeping size, extent and true bounds at each node and
//! marking *dense* subtrees (one contiguous run) so a walk never descends into them.
//!
//! - [`Datatype::runs`] iterates the merged runs of any byte range of the stream, seeking in
//!   O(depth · log blocks) and holding one frame per tree level: bounded memory, whatever
//!   the size of the pattern.
//! - [`pair`] pairs a memory stream with a file stream into transfer lists.
//! - [`wire`] encodes a type compactly (each shared node once) and decodes untrusted bytes
//!   under the limits below, so a hostile tree is refused before it can cost memory or time.
//! - [`reference`] is the naive flattener that the property tests hold the engine to.
//!
//! All arithmetic on bounds is done in `i128` and checked against [`DATATYPE_BYTES_MAX`], so
//! no constructor or decoder can overflow.

use std::sync::Arc;

pub mod build;
pub mod iter;
pub mod pair;
pub mod reference;
pub mod wire;

pub use build::{Distribution, Order};
pub use iter::{Run, Runs};
pub use pair::{pair, Transfer};

/// Most distinct nodes in one datatype (its encoding holds each shared node once).
pub const DATATYPE_NODES_MAX: usize = 4096;
/// Deepest nesting of one datatype (root at depth 1).
pub const DATATYPE_DEPTH_MAX: u32 = 64;
/// Most blocks in one indexed or struct node, and in all nodes of one encoded type.
pub const DATATYPE_BLOCKS_MAX: usize = 1 << 16;
/// Largest count, block length or element count given to a constructor.
pub const DATATYPE_COUNT_MAX: u64 = 1 << 48;
/// Largest size of a type and largest magnitude of any of its bounds, in bytes.
pub const DATATYPE_BYTES_MAX: u64 = 1 << 62;
/// Most dimensions of a subarray or darray.
pub const DATATYPE_DIMS_MAX: usize = 16;
/// Largest encoded datatype, in bytes.
pub const DATATYPE_ENCODED_BYTES_MAX: usize = 3 << 19;

// The largest type the limits allow (20 bytes a struct block, at most 33 bytes a node besides
// its blocks) must fit the encoding limit, which leaves room in a 2 MiB message body.
const _: () =
    assert!(DATATYPE_BLOCKS_MAX * 20 + DATATYPE_NODES_MAX * 33 + 5 <= DATATYPE_ENCODED_BYTES_MAX);
// Products of a count and a byte bound stay far inside i128.
const _: () = assert!((DATATYPE_COUNT_MAX as u128) * (DATATYPE_BYTES_MAX as u128) < (1u128 << 126));

/// Why a datatype could not be built, decoded or walked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatatypeError {
    /// A value is over one of the named limits.
    #[error("datatype {what}: {value} is over {limit} ({max})")]
    LimitExceeded {
        /// What was being built.
        what: &'static str,
        /// The limit's name.
        limit: &'static str,
        /// The value given.
        value: u128,
        /// The limit.
        max: u128,
    },
    /// Arguments that do not describe a type.
    #[error("datatype {what}: {detail}")]
    Invalid {
        /// What was being built.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// Encoded bytes that are not a datatype.
    #[error("encoded datatype is malformed at byte {at}: {detail}")]
    Malformed {
        /// Byte offset of the problem.
        at: usize,
        /// What is wrong.
        detail: String,
    },
}

impl DatatypeError {
    pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            detail: detail.into(),
        }
    }

    pub(crate) fn over(what: &'static str, limit: &'static str, value: u128, max: u128) -> Self {
        Self::LimitExceeded {
            what,
            limit,
            value,
            max,
        }
    }
}

/// An immutable datatype; clones share the tree.
#[derive(Clone)]
pub struct Datatype(pub(crate) Arc<Node>);

/// One node of a type tree with its derived attributes.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    /// Data bytes in one instance.
    pub(crate) size: u64,
    /// Lower and upper bound (the extent is `ub - lb`, never negative).
    pub(crate) lb: i64,
    pub(crate) ub: i64,
    /// Bounds of the bytes actually holding data (0, 0 when there are none).
    pub(crate) true_lb: i64,
    pub(crate) true_ub: i64,
    /// Levels below and including this node.
    pub(crate) depth: u32,
    /// The data is one run `[true_lb, true_lb + size)` in stream order.
    pub(crate) dense: bool,
}

/// The node kinds every constructor lowers onto.
#[derive(Debug)]
pub(crate) enum Kind {
    /// `n` contiguous bytes: the only basic type.
    Bytes(u64),
    /// `count` blocks of `blocklen` children, block `j` at `j * stride` bytes; child `k` of a
    /// block at `k * child.extent` within it. Contiguous is one block.
    Vector {
        count: u64,
        blocklen: u64,
        stride: i64,
        child: Datatype,
    },
    /// Blocks of children at byte displacements; `prefix[j]` is the data bytes before block j.
    Indexed {
        blocks: Box<[(i64, u64)]>,
        child: Datatype,
        prefix: Box<[u64]>,
    },
    /// Blocks of different children at byte displacements; `prefix` as for `Indexed`.
    Struct {
        fields: Box<[(i64, u64, Datatype)]>,
        prefix: Box<[u64]>,
    },
    /// The child with its lower bound and extent set.
    Resized {
        lb: i64,
        extent: u64,
        child: Datatype,
    },
}

impl Node {
    pub(crate) fn extent(&self) -> i64 {
        self.ub - self.lb
    }

    /// Data of a block of children is one run: the child is dense and tiles without gaps.
    pub(crate) fn tiles(&self) -> bool {
        self.dense && self.extent() == i64::try_from(self.size).unwrap_or(-1)
    }

    pub(crate) fn block_count(&self) -> usize {
        match &self.kind {
            Kind::Bytes(_) => 0,
            Kind::Vector { count, .. } => usize::try_from(*count).unwrap_or(usize::MAX),
            Kind::Indexed { blocks, .. } => blocks.len(),
            Kind::Struct { fields, .. } => fields.len(),
            Kind::Resized { .. } => 1,
        }
    }

    /// Block `j`: byte displacement, children in it, the child.
    #[inline]
    pub(crate) fn block(&self, j: usize) -> (i64, u64, &Node) {
        match &self.kind {
            Kind::Bytes(_) => unreachable!("a byte run has no blocks"),
            Kind::Vector {
                blocklen,
                stride,
                child,
                ..
            } => {
                #[allow(clippy::cast_possible_wrap)] // j < count ≤ DATATYPE_COUNT_MAX
                let displacement = (j as i64).wrapping_mul(*stride);
                (displacement, *blocklen, &child.0)
            }
            Kind::Indexed { blocks, child, .. } => (blocks[j].0, blocks[j].1, &child.0),
            Kind::Struct { fields, .. } => (fields[j].0, fields[j].1, &fields[j].2 .0),
            Kind::Resized { child, .. } => (0, 1, &child.0),
        }
    }

    /// Block `j` holds no data: the next block that does (`block_count` if none), found in
    /// O(log blocks) so that a walk never steps over empty blocks one at a time.
    pub(crate) fn skip_empty(&self, j: usize) -> usize {
        match &self.kind {
            Kind::Indexed { prefix, .. } | Kind::Struct { prefix, .. } => {
                if prefix[j] >= self.size {
                    self.block_count()
                } else {
                    self.block_at(prefix[j]).0
                }
            }
            _ => j + 1,
        }
    }

    /// The block holding stream byte `within` (< size) and the data bytes before it.
    pub(crate) fn block_at(&self, within: u64) -> (usize, u64) {
        match &self.kind {
            Kind::Bytes(_) => unreachable!("a byte run has no blocks"),
            Kind::Vector {
                blocklen, child, ..
            } => {
                let block_bytes = blocklen * child.0.size;
                let j = within / block_bytes;
                (
                    usize::try_from(j).expect("block index below count"),
                    j * block_bytes,
                )
            }
            Kind::Indexed { prefix, .. } | Kind::Struct { prefix, .. } => {
                let j = prefix.partition_point(|&before| before <= within) - 1;
                (j, prefix[j])
            }
            Kind::Resized { .. } => (0, 0),
        }
    }
}

/// Bounds being accumulated over the elements of a node, in i128.
struct Bounds {
    lb: Option<i128>,
    ub: i128,
    true_lb: Option<i128>,
    true_ub: i128,
    size: u128,
}

impl Bounds {
    fn new() -> Self {
        Self {
            lb: None,
            ub: 0,
            true_lb: None,
            true_ub: 0,
            size: 0,
        }
    }

    /// Includes elements spanning `[lb, ub)`, with data in `[true_lb, true_ub)` when `size`
    /// (their total data bytes) is not zero.
    fn include(&mut self, lb: i128, ub: i128, true_lb: i128, true_ub: i128, size: u128) {
        self.ub = if self.lb.is_none() {
            ub
        } else {
            self.ub.max(ub)
        };
        self.lb = Some(self.lb.map_or(lb, |old| old.min(lb)));
        if size > 0 {
            self.true_ub = if self.true_lb.is_none() {
                true_ub
            } else {
                self.true_ub.max(true_ub)
            };
            self.true_lb = Some(self.true_lb.map_or(true_lb, |old| old.min(true_lb)));
            self.size += size;
        }
    }

    /// Includes `count` elements of `child` at displacements `first + k * step`.
    fn add(&mut self, first: i128, step: i128, count: u64, child: &Node) {
        if count == 0 {
            return;
        }
        let last = first + step * i128::from(count - 1);
        let (low, high) = (first.min(last), first.max(last));
        self.include(
            low + i128::from(child.lb),
            high + i128::from(child.ub),
            low + i128::from(child.true_lb),
            high + i128::from(child.true_ub),
            u128::from(count) * u128::from(child.size),
        );
    }
}

impl Bounds {
    /// Includes one block of an indexed or struct node (`blocklen` copies of `old` at byte
    /// `displacement`), after recording in `prefix` the data bytes before it.
    fn add_block(
        &mut self,
        what: &'static str,
        prefix: &mut Vec<u64>,
        displacement: i64,
        blocklen: u64,
        old: &Datatype,
    ) -> Result<(), DatatypeError> {
        checked_count(what, blocklen)?;
        checked_bound(what, i128::from(displacement))?;
        prefix.push(u64::try_from(self.size).unwrap_or(u64::MAX));
        self.add(
            i128::from(displacement),
            i128::from(old.extent()),
            blocklen,
            &old.0,
        );
        Ok(())
    }
}

fn checked_count(what: &'static str, value: u64) -> Result<u64, DatatypeError> {
    if value > DATATYPE_COUNT_MAX {
        return Err(DatatypeError::over(
            what,
            "datatype_count_max",
            u128::from(value),
            u128::from(DATATYPE_COUNT_MAX),
        ));
    }
    Ok(value)
}

fn checked_bound(what: &'static str, value: i128) -> Result<i64, DatatypeError> {
    if value.unsigned_abs() > u128::from(DATATYPE_BYTES_MAX) {
        return Err(DatatypeError::over(
            what,
            "datatype_bytes_max",
            value.unsigned_abs(),
            u128::from(DATATYPE_BYTES_MAX),
        ));
    }
    Ok(i64::try_from(value).expect("bounded by datatype_bytes_max"))
}

impl Datatype {
    fn from_parts(what: &'static str, kind: Kind, bounds: &Bounds) -> Result<Self, DatatypeError> {
        if bounds.size > u128::from(DATATYPE_BYTES_MAX) {
            return Err(DatatypeError::over(
                what,
                "datatype_bytes_max",
                bounds.size,
                u128::from(DATATYPE_BYTES_MAX),
            ));
        }
        let depth = 1 + match &kind {
            Kind::Bytes(_) => 0,
            Kind::Vector { child, .. }
            | Kind::Indexed { child, .. }
            | Kind::Resized { child, .. } => child.0.depth,
            Kind::Struct { fields, .. } => fields
                .iter()
                .map(|field| field.2 .0.depth)
                .max()
                .unwrap_or(0),
        };
        if depth > DATATYPE_DEPTH_MAX {
            return Err(DatatypeError::over(
                what,
                "datatype_depth_max",
                u128::from(depth),
                u128::from(DATATYPE_DEPTH_MAX),
            ));
        }
        let size = u64::try_from(bounds.size).expect("checked above");
        let (true_lb, true_ub) = match bounds.true_lb {
            Some(true_lb) if size > 0 => (
                checked_bound(what, true_lb)?,
                checked_bound(what, bounds.true_ub)?,
            ),
            _ => (0, 0),
        };
        let mut node = Node {
            kind,
            size,
            lb: checked_bound(what, bounds.lb.unwrap_or(0))?,
            ub: checked_bound(what, bounds.ub)?,
            true_lb,
            true_ub,
            depth,
            dense: false,
        };
        if let Kind::Resized { lb, extent, .. } = node.kind {
            node.lb = lb;
            node.ub = checked_bound(what, i128::from(lb) + i128::from(extent))?;
        }
        node.dense = node.compute_dense();
        Ok(Self(Arc::new(node)))
    }

    /// `n` contiguous bytes: the basic type (MPI_BYTE is `bytes(1)`; any named type of
    /// `n` bytes is `bytes(n)`).
    pub fn bytes(n: u64) -> Result<Self, DatatypeError> {
        checked_count("bytes", n)?;
        let mut bounds = Bounds::new();
        bounds.lb = Some(0);
        bounds.ub = i128::from(n);
        bounds.true_lb = Some(0);
        bounds.true_ub = i128::from(n);
        bounds.size = u128::from(n);
        Self::from_parts("bytes", Kind::Bytes(n), &bounds)
    }

    /// One byte (MPI_BYTE).
    pub fn byte() -> Self {
        Self::bytes(1).expect("one byte is a valid type")
    }

    /// `count` copies of `old`, back to back (MPI_Type_contiguous).
    pub fn contiguous(count: u64, old: &Self) -> Result<Self, DatatypeError> {
        Self::make_vector("contiguous", 1, checked_count("contiguous", count)?, 0, old)
    }

    /// `count` blocks of `blocklen` copies of `old`, block starts `stride` extents of `old`
    /// apart (MPI_Type_vector).
    pub fn vector(
        count: u64,
        blocklen: u64,
        stride: i64,
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        let stride_bytes = checked_bound(
            "vector stride",
            i128::from(stride) * i128::from(old.extent()),
        )?;
        Self::hvector(count, blocklen, stride_bytes, old)
    }

    /// As [`Datatype::vector`] with the stride in bytes (MPI_Type_create_hvector).
    pub fn hvector(
        count: u64,
        blocklen: u64,
        stride_bytes: i64,
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        checked_bound("hvector stride", i128::from(stride_bytes))?;
        Self::make_vector(
            "hvector",
            checked_count("hvector", count)?,
            checked_count("hvector block length", blocklen)?,
            stride_bytes,
            old,
        )
    }

    fn make_vector(
        what: &'static str,
        count: u64,
        blocklen: u64,
        stride: i64,
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        let child = &old.0;
        let mut bounds = Bounds::new();
        if blocklen > 0 && count > 0 {
            let elements = u128::from(count) * u128::from(blocklen);
            if elements > u128::from(DATATYPE_COUNT_MAX) {
                return Err(DatatypeError::over(
                    what,
                    "datatype_count_max",
                    elements,
                    u128::from(DATATYPE_COUNT_MAX),
                ));
            }
            // Blocks at j * stride; block j spans children at k * extent for k < blocklen.
            let last = i128::from(stride) * i128::from(count - 1);
            let (low, high) = (last.min(0), last.max(0));
            let reach = i128::from(child.extent()) * i128::from(blocklen - 1);
            bounds.include(
                low + i128::from(child.lb),
                high + reach + i128::from(child.ub),
                low + i128::from(child.true_lb),
                high + reach + i128::from(child.true_ub),
                elements * u128::from(child.size),
            );
        }
        Self::from_parts(
            what,
            Kind::Vector {
                count,
                blocklen,
                stride,
                child: old.clone(),
            },
            &bounds,
        )
    }

    /// Blocks of copies of `old` at displacements counted in extents of `old`
    /// (MPI_Type_indexed).
    pub fn indexed(
        blocklens: &[u64],
        displacements: &[i64],
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        let bytes = Self::scale_displacements("indexed", displacements, old)?;
        Self::hindexed(blocklens, &bytes, old)
    }

    /// Blocks of `blocklen` copies of `old` at displacements counted in extents of `old`
    /// (MPI_Type_create_indexed_block).
    pub fn indexed_block(
        blocklen: u64,
        displacements: &[i64],
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        let bytes = Self::scale_displacements("indexed block", displacements, old)?;
        Self::hindexed(&vec![blocklen; bytes.len()], &bytes, old)
    }

    /// Blocks of `blocklen` copies of `old` at byte displacements
    /// (MPI_Type_create_hindexed_block).
    pub fn hindexed_block(
        blocklen: u64,
        displacements: &[i64],
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        Self::check_blocks("hindexed block", displacements.len())?;
        Self::hindexed(&vec![blocklen; displacements.len()], displacements, old)
    }

    fn scale_displacements(
        what: &'static str,
        displacements: &[i64],
        old: &Self,
    ) -> Result<Vec<i64>, DatatypeError> {
        Self::check_blocks(what, displacements.len())?;
        displacements
            .iter()
            .map(|&d| checked_bound(what, i128::from(d) * i128::from(old.extent())))
            .collect()
    }

    fn check_blocks(what: &'static str, count: usize) -> Result<(), DatatypeError> {
        if count > DATATYPE_BLOCKS_MAX {
            return Err(DatatypeError::over(
                what,
                "datatype_blocks_max",
                count as u128,
                DATATYPE_BLOCKS_MAX as u128,
            ));
        }
        Ok(())
    }

    /// Blocks of copies of `old` at byte displacements (MPI_Type_create_hindexed).
    pub fn hindexed(
        blocklens: &[u64],
        displacements: &[i64],
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        const WHAT: &str = "hindexed";
        Self::check_blocks(WHAT, blocklens.len())?;
        if blocklens.len() != displacements.len() {
            return Err(DatatypeError::invalid(
                WHAT,
                format!(
                    "{} block lengths but {} displacements",
                    blocklens.len(),
                    displacements.len()
                ),
            ));
        }
        let mut bounds = Bounds::new();
        let mut prefix = Vec::with_capacity(blocklens.len());
        let mut blocks = Vec::with_capacity(blocklens.len());
        for (&blocklen, &displacement) in blocklens.iter().zip(displacements) {
            bounds.add_block(WHAT, &mut prefix, displacement, blocklen, old)?;
            blocks.push((displacement, blocklen));
        }
        Self::from_parts(
            WHAT,
            Kind::Indexed {
                blocks: blocks.into(),
                child: old.clone(),
                prefix: prefix.into(),
            },
            &bounds,
        )
    }

    /// Blocks of different types at byte displacements (MPI_Type_create_struct). No
    /// alignment padding is added: give the MPI extent with [`Datatype::resized`].
    pub fn structure(
        blocklens: &[u64],
        displacements: &[i64],
        types: &[Self],
    ) -> Result<Self, DatatypeError> {
        const WHAT: &str = "struct";
        Self::check_blocks(WHAT, blocklens.len())?;
        if blocklens.len() != displacements.len() || blocklens.len() != types.len() {
            return Err(DatatypeError::invalid(
                WHAT,
                format!(
                    "{} block lengths, {} displacements and {} types; they must be equal",
                    blocklens.len(),
                    displacements.len(),
                    types.len()
                ),
            ));
        }
        let mut bounds = Bounds::new();
        let mut prefix = Vec::with_capacity(blocklens.len());
        let mut fields = Vec::with_capacity(blocklens.len());
        for ((&blocklen, &displacement), old) in blocklens.iter().zip(displacements).zip(types) {
            bounds.add_block(WHAT, &mut prefix, displacement, blocklen, old)?;
            fields.push((displacement, blocklen, old.clone()));
        }
        Self::from_parts(
            WHAT,
            Kind::Struct {
                fields: fields.into(),
                prefix: prefix.into(),
            },
            &bounds,
        )
    }

    /// `old` with its lower bound and extent set (MPI_Type_create_resized). The extent may
    /// not be negative.
    pub fn resized(lb: i64, extent: i64, old: &Self) -> Result<Self, DatatypeError> {
        const WHAT: &str = "resized";
        let extent = u64::try_from(extent)
            .map_err(|_| DatatypeError::invalid(WHAT, format!("extent {extent} is negative")))?;
        checked_bound(WHAT, i128::from(lb))?;
        checked_bound(WHAT, i128::from(extent))?;
        let mut bounds = Bounds::new();
        bounds.add(0, 0, 1, &old.0);
        Self::from_parts(
            WHAT,
            Kind::Resized {
                lb,
                extent,
                child: old.clone(),
            },
            &bounds,
        )
    }

    /// Data bytes in one instance.
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// Lower bound in bytes.
    pub fn lb(&self) -> i64 {
        self.0.lb
    }

    /// Upper bound in bytes.
    pub fn ub(&self) -> i64 {
        self.0.ub
    }

    /// Extent in bytes (`ub - lb`, never negative): the distance between tiled instances.
    pub fn extent(&self) -> i64 {
        self.0.extent()
    }

    /// Lowest byte holding data (0 for an empty type).
    pub fn true_lb(&self) -> i64 {
        self.0.true_lb
    }

    /// One past the highest byte holding data (0 for an empty type).
    pub fn true_ub(&self) -> i64 {
        self.0.true_ub
    }

    /// Levels in the tree.
    pub fn depth(&self) -> u32 {
        self.0.depth
    }

    /// The data of one instance is a single run `[true_lb, true_lb + size)`.
    pub fn is_dense(&self) -> bool {
        self.0.dense
    }

    /// The same pattern: equal encodings.
    pub fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || matches!((wire::encode(self), wire::encode(other)), (Ok(a), Ok(b)) if a == b)
    }
}

impl Node {
    /// Whether the data is one run in stream order. Conservative: false only costs speed.
    fn compute_dense(&self) -> bool {
        if self.size == 0 {
            return true;
        }
        match &self.kind {
            Kind::Bytes(_) => true,
            Kind::Resized { child, .. } => child.0.dense,
            Kind::Vector {
                count,
                blocklen,
                stride,
                child,
            } => {
                let child = &child.0;
                let block_is_run = child.tiles() || (*blocklen == 1 && child.dense);
                #[allow(clippy::cast_possible_wrap)] // sizes are below 2^62
                let block_bytes = (blocklen * child.size) as i64;
                block_is_run && (*count == 1 || *stride == block_bytes)
            }
            Kind::Indexed { .. } | Kind::Struct { .. } => {
                // Every block with data must be one run, each starting where the last ended.
                let mut next: Option<i64> = None;
                for j in 0..self.block_count() {
                    let (displacement, blocklen, child) = self.block(j);
                    if blocklen == 0 || child.size == 0 {
                        continue;
                    }
                    if !(child.tiles() || (blocklen == 1 && child.dense)) {
                        return false;
                    }
                    let start = displacement + child.true_lb;
                    if next.is_some_and(|end| end != start) {
                        return false;
                    }
                    #[allow(clippy::cast_possible_wrap)] // sizes are below 2^62
                    let length = (blocklen * child.size) as i64;
                    next = Some(start + length);
                }
                true
            }
        }
    }
}

impl std::fmt::Debug for Datatype {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Datatype")
            .field("size", &self.size())
            .field("lb", &self.lb())
            .field("extent", &self.extent())
            .field("true_lb", &self.true_lb())
            .field("true_ub", &self.true_ub())
            .field("depth", &self.depth())
            .field("tree", &self.0.kind)
            .finish()
    }
}

impl PartialEq for Datatype {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}

impl Eq for Datatype {}
