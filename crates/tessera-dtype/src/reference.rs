//! The naive reference the property tests hold the engine to.
//!
//! Everything here follows the MPI definitions as literally as possible and shares no code
//! with the engine's walk ([`crate::iter`]), its bound arithmetic or its lowering of the array
//! constructors ([`crate::build`]):
//!
//! - [`flatten`] lists every run of bytes of a stream by plain recursion over the type tree
//!   (the crate-private node kinds), one run per basic `bytes(n)` leaf, unmerged, in stream
//!   order, instance `k` at `k * extent`. [`merge`], [`slice`] and [`byte_offsets`] turn that
//!   list into what the engine returns for a byte range.
//! - [`bounds`] derives size, lower/upper bound and true bounds of a type from the
//!   definitions — a bound is the minimum or maximum over the elements of a node — computed
//!   again from the leaves, never read from the engine's cached attributes.
//! - [`subarray_elements`] and [`darray_elements`] enumerate the elements of the array
//!   constructors one by one, straight from the MPI standard's description, without building
//!   a type at all.
//!
//! The output is a flat list, so every function is bounded by [`REFERENCE_BYTES_MAX`] and
//! panics with a clear message above it: this is test code, kept public so the tests of other
//! crates can use it too.

use std::collections::HashMap;

use crate::build::{Distribution, Order};
use crate::{Datatype, Kind, Node};

/// Most data bytes (or array elements) one call may list.
pub const REFERENCE_BYTES_MAX: u64 = 1 << 22;

fn check_budget(what: &str, value: u128) {
    assert!(
        value <= u128::from(REFERENCE_BYTES_MAX),
        "reference {what}: {value} is over reference_bytes_max ({REFERENCE_BYTES_MAX}); \
         the naive reference lists every byte, so keep test types small"
    );
}

/// Size and bounds of a type, from the MPI definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Data bytes in one instance.
    pub size: u64,
    /// Lowest element bound (0 when there are no elements).
    pub lb: i64,
    /// Highest element bound (0 when there are no elements).
    pub ub: i64,
    /// Lowest byte holding data (0 when there is none).
    pub true_lb: i64,
    /// One past the highest byte holding data (0 when there is none).
    pub true_ub: i64,
}

impl Bounds {
    /// `ub - lb`.
    pub fn extent(&self) -> i64 {
        self.ub - self.lb
    }
}

/// Bounds being gathered over the elements of one node, in i128.
#[derive(Default)]
struct Gather {
    size: u128,
    /// (lb, ub) over the elements seen.
    outer: Option<(i128, i128)>,
    /// (true_lb, true_ub) over the elements holding data.
    data: Option<(i128, i128)>,
}

impl Gather {
    /// One element: `child` placed at byte displacement `at`.
    fn element(&mut self, at: i128, child: &Bounds) {
        let (lb, ub) = (at + i128::from(child.lb), at + i128::from(child.ub));
        self.outer = Some(self.outer.map_or((lb, ub), |(l, u)| (l.min(lb), u.max(ub))));
        if child.size > 0 {
            let (lb, ub) = (
                at + i128::from(child.true_lb),
                at + i128::from(child.true_ub),
            );
            self.data = Some(self.data.map_or((lb, ub), |(l, u)| (l.min(lb), u.max(ub))));
        }
    }

    /// `blocklen` elements of `child` from byte displacement `at`, one child extent apart.
    /// The bounds of evenly spaced elements are reached by the first and the last, so only
    /// those two are placed; the size counts all of them.
    fn block(&mut self, at: i128, blocklen: u64, child: &Bounds) {
        if blocklen == 0 {
            return;
        }
        self.element(at, child);
        self.element(
            at + i128::from(child.extent()) * i128::from(blocklen - 1),
            child,
        );
        self.size += u128::from(blocklen) * u128::from(child.size);
    }

    fn finish(self) -> Bounds {
        let narrow = |value: i128| i64::try_from(value).expect("reference bound fits i64");
        let (lb, ub) = self.outer.unwrap_or((0, 0));
        let (true_lb, true_ub) = match self.data {
            Some(data) if self.size > 0 => data,
            _ => (0, 0),
        };
        Bounds {
            size: u64::try_from(self.size).expect("reference size fits u64"),
            lb: narrow(lb),
            ub: narrow(ub),
            true_lb: narrow(true_lb),
            true_ub: narrow(true_ub),
        }
    }
}

/// Bounds of every node of a tree, each computed once (trees share subtrees).
#[derive(Default)]
struct BoundsCache(HashMap<*const Node, Bounds>);

impl BoundsCache {
    fn of(&mut self, node: &Node) -> Bounds {
        let key = std::ptr::from_ref(node);
        if let Some(&known) = self.0.get(&key) {
            return known;
        }
        let mut gather = Gather::default();
        let bounds = match &node.kind {
            Kind::Bytes(n) => {
                let n = i64::try_from(*n).expect("byte count fits i64");
                Bounds {
                    size: n.unsigned_abs(),
                    lb: 0,
                    ub: n,
                    true_lb: 0,
                    true_ub: n,
                }
            }
            Kind::Vector {
                count,
                blocklen,
                stride,
                child,
            } => {
                let child = self.of(&child.0);
                if *count > 0 {
                    // Blocks at j * stride are evenly spaced too: the first and last bound them.
                    gather.block(0, *blocklen, &child);
                    let last = i128::from(*stride) * i128::from(*count - 1);
                    gather.block(last, *blocklen, &child);
                    gather.size =
                        u128::from(*count) * u128::from(*blocklen) * u128::from(child.size);
                }
                gather.finish()
            }
            Kind::Indexed { blocks, child, .. } => {
                let child = self.of(&child.0);
                for &(displacement, blocklen) in blocks {
                    gather.block(i128::from(displacement), blocklen, &child);
                }
                gather.finish()
            }
            Kind::Struct { fields, .. } => {
                for (displacement, blocklen, child) in fields {
                    let child = self.of(&child.0);
                    gather.block(i128::from(*displacement), *blocklen, &child);
                }
                gather.finish()
            }
            Kind::Resized { lb, extent, child } => {
                let child = self.of(&child.0);
                let extent = i64::try_from(*extent).expect("extent fits i64");
                let (true_lb, true_ub) = if child.size > 0 {
                    (child.true_lb, child.true_ub)
                } else {
                    (0, 0)
                };
                Bounds {
                    size: child.size,
                    lb: *lb,
                    ub: lb + extent,
                    true_lb,
                    true_ub,
                }
            }
        };
        self.0.insert(key, bounds);
        bounds
    }
}

/// Size and bounds of `datatype` from the definitions: the bounds of a composite are the
/// minimum and maximum over its elements (a block of length 0 has none), its true bounds the
/// same over the elements holding data, a resized node sets lb and extent, and a type without
/// elements (or data) has bounds (or true bounds) 0, 0.
pub fn bounds(datatype: &Datatype) -> Bounds {
    BoundsCache::default().of(&datatype.0)
}

/// Every run of bytes of `count` instances of `datatype` tiled from displacement 0 (instance
/// `k` at `k * extent`), unmerged, in stream order: one run per basic leaf.
pub fn flatten(datatype: &Datatype, count: u64) -> Vec<(i64, u64)> {
    flatten_at(datatype, 0, count)
}

/// As [`flatten`], tiled from `displacement` (instance `k` at `displacement + k * extent`).
pub fn flatten_at(datatype: &Datatype, displacement: i64, count: u64) -> Vec<(i64, u64)> {
    let mut cache = BoundsCache::default();
    let root = cache.of(&datatype.0);
    check_budget("flatten", u128::from(root.size) * u128::from(count));
    let mut walk = Walk {
        cache,
        out: Vec::new(),
    };
    for k in 0..count {
        let base = i128::from(displacement) + i128::from(root.extent()) * i128::from(k);
        walk.node(&datatype.0, base);
    }
    walk.out
}

struct Walk {
    cache: BoundsCache,
    out: Vec<(i64, u64)>,
}

impl Walk {
    /// Lists the runs of one instance of `node` placed at `base`.
    fn node(&mut self, node: &Node, base: i128) {
        // Subtrees without data list nothing; skipping them keeps the work bounded by the
        // bytes listed times the blocks of the type (blocks of length 0 are still visited).
        if self.cache.of(node).size == 0 {
            return;
        }
        match &node.kind {
            Kind::Bytes(n) => {
                self.out
                    .push((i64::try_from(base).expect("run offset fits i64"), *n));
            }
            Kind::Vector {
                count,
                blocklen,
                stride,
                child,
            } => {
                for j in 0..*count {
                    let at = base + i128::from(*stride) * i128::from(j);
                    self.block(at, *blocklen, &child.0);
                }
            }
            Kind::Indexed { blocks, child, .. } => {
                for &(displacement, blocklen) in blocks {
                    self.block(base + i128::from(displacement), blocklen, &child.0);
                }
            }
            Kind::Struct { fields, .. } => {
                for (displacement, blocklen, child) in fields {
                    self.block(base + i128::from(*displacement), *blocklen, &child.0);
                }
            }
            Kind::Resized { child, .. } => self.node(&child.0, base),
        }
    }

    /// `blocklen` instances of `child` from `at`, one extent of `child` apart.
    fn block(&mut self, at: i128, blocklen: u64, child: &Node) {
        let child_bounds = self.cache.of(child);
        if child_bounds.size == 0 {
            return;
        }
        for k in 0..blocklen {
            self.node(
                child,
                at + i128::from(child_bounds.extent()) * i128::from(k),
            );
        }
    }
}

/// Drops empty runs and joins each run to the one before when it starts where that one ends.
pub fn merge(runs: &[(i64, u64)]) -> Vec<(i64, u64)> {
    let mut out: Vec<(i64, u64)> = Vec::with_capacity(runs.len());
    for &(offset, length) in runs {
        if length == 0 {
            continue;
        }
        match out.last_mut() {
            Some((last_offset, last_length))
                if i128::from(*last_offset) + i128::from(*last_length) == i128::from(offset) =>
            {
                *last_length += length;
            }
            _ => out.push((offset, length)),
        }
    }
    out
}

/// Stream bytes `[start, end)` of `runs`, cut at both ends (unmerged).
pub fn slice(runs: &[(i64, u64)], start: u64, end: u64) -> Vec<(i64, u64)> {
    let mut out = Vec::new();
    let mut position = 0u64;
    for &(offset, length) in runs {
        let (run_start, run_end) = (position, position + length);
        position = run_end;
        let (from, to) = (run_start.max(start), run_end.min(end));
        if from < to {
            let skip = i64::try_from(from - run_start).expect("run length fits i64");
            out.push((offset + skip, to - from));
        }
    }
    out
}

/// The offset of every stream byte of `runs`, in stream order.
pub fn byte_offsets(runs: &[(i64, u64)]) -> Vec<i64> {
    let total: u128 = runs.iter().map(|&(_, length)| u128::from(length)).sum();
    check_budget("byte_offsets", total);
    let mut out = Vec::with_capacity(usize::try_from(total).expect("bounded above"));
    for &(offset, length) in runs {
        let length = i64::try_from(length).expect("bounded above");
        out.extend(offset..offset + length);
    }
    out
}

/// Linear index of a multi-index in an array of `sizes` stored in `order`.
fn linear_index(index: &[u64], sizes: &[u64], order: Order) -> u64 {
    let dims: Vec<usize> = match order {
        // The last dimension varies fastest.
        Order::C => (0..sizes.len()).collect(),
        Order::Fortran => (0..sizes.len()).rev().collect(),
    };
    dims.into_iter()
        .fold(0, |linear, d| linear * sizes[d] + index[d])
}

/// Every multi-index of an array of `sizes` in storage order (the fastest dimension last in
/// C order, first in Fortran order).
fn all_indices(sizes: &[u64], order: Order) -> Vec<Vec<u64>> {
    let total: u128 = sizes.iter().map(|&size| u128::from(size)).product();
    check_budget("array elements", total);
    let mut out = Vec::new();
    if total == 0 {
        return out;
    }
    let fastest_first: Vec<usize> = match order {
        Order::C => (0..sizes.len()).rev().collect(),
        Order::Fortran => (0..sizes.len()).collect(),
    };
    let mut index = vec![0u64; sizes.len()];
    'all: loop {
        out.push(index.clone());
        for &d in &fastest_first {
            index[d] += 1;
            if index[d] < sizes[d] {
                continue 'all;
            }
            index[d] = 0;
        }
        return out;
    }
}

/// The elements of a subarray (MPI_Type_create_subarray) in stream order, as linear indices
/// into the whole array: every element whose index lies in `[starts[d], starts[d] +
/// subsizes[d])` in each dimension `d`, in the array's storage order.
pub fn subarray_elements(
    sizes: &[u64],
    subsizes: &[u64],
    starts: &[u64],
    order: Order,
) -> Vec<u64> {
    assert!(
        sizes.len() == subsizes.len() && sizes.len() == starts.len(),
        "reference subarray: argument arrays of different lengths"
    );
    all_indices(sizes, order)
        .into_iter()
        .filter(|index| {
            (0..sizes.len()).all(|d| index[d] >= starts[d] && index[d] < starts[d] + subsizes[d])
        })
        .map(|index| linear_index(&index, sizes, order))
        .collect()
}

/// The elements of process `rank`'s share of a distributed array (MPI_Type_create_darray) in
/// stream order, as linear indices into the whole array.
///
/// Every element of the global array, in storage order, is kept if in each dimension `d` its
/// index belongs to the process's grid coordinate (ranks count row-major over `psizes`):
/// `Block(b)` deals blocks of `b` (default `ceil(g / p)`) elements, block `i / b` to
/// coordinate `i / b`; `Cyclic(k)` deals blocks of `k` (default 1) round-robin, to coordinate
/// `(i / k) % p`; `None` keeps the whole dimension (its `p` must be 1).
pub fn darray_elements(
    size: u64,
    rank: u64,
    gsizes: &[u64],
    distributions: &[Distribution],
    psizes: &[u64],
    order: Order,
) -> Vec<u64> {
    let dims = gsizes.len();
    assert!(
        distributions.len() == dims && psizes.len() == dims,
        "reference darray: argument arrays of different lengths"
    );
    assert_eq!(
        psizes.iter().product::<u64>(),
        size,
        "reference darray: grid is not `size`"
    );
    assert!(
        rank < size,
        "reference darray: rank {rank} not below size {size}"
    );
    let mut coords = vec![0u64; dims];
    let mut rest = rank;
    for d in (0..dims).rev() {
        coords[d] = rest % psizes[d];
        rest /= psizes[d];
    }
    let owner = |d: usize, i: u64| -> u64 {
        let (global, processes) = (gsizes[d], psizes[d]);
        match distributions[d] {
            Distribution::Block(block) => i / block.unwrap_or_else(|| global.div_ceil(processes)),
            Distribution::Cyclic(block) => (i / block.unwrap_or(1)) % processes,
            Distribution::None => 0,
        }
    };
    all_indices(gsizes, order)
        .into_iter()
        .filter(|index| (0..dims).all(|d| owner(d, index[d]) == coords[d]))
        .map(|index| linear_index(&index, gsizes, order))
        .collect()
}

/// Runs of `element_bytes`-byte elements at the given element indices (unmerged).
pub fn element_runs(elements: &[u64], element_bytes: u64) -> Vec<(i64, u64)> {
    elements
        .iter()
        .map(|&element| {
            let offset = i64::try_from(element * element_bytes).expect("offset fits i64");
            (offset, element_bytes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattens_a_vector_by_definition() {
        let vector = Datatype::vector(3, 2, -4, &Datatype::bytes(2).unwrap()).unwrap();
        // Blocks at 0, -8, -16 (stride -4 elements of 2 bytes), two 2-byte elements each.
        assert_eq!(
            flatten(&vector, 1),
            vec![(0, 2), (2, 2), (-8, 2), (-6, 2), (-16, 2), (-14, 2)]
        );
        assert_eq!(merge(&flatten(&vector, 1)), vec![(0, 4), (-8, 4), (-16, 4)]);
        let expected = Bounds {
            size: 12,
            lb: -16,
            ub: 4,
            true_lb: -16,
            true_ub: 4,
        };
        assert_eq!(bounds(&vector), expected);
        // Instance 1 starts one extent (20) after instance 0.
        assert_eq!(flatten(&vector, 2)[6], (20, 2));
        assert_eq!(
            slice(&flatten(&vector, 2), 3, 14),
            vec![(3, 1), (-8, 2), (-6, 2), (-16, 2), (-14, 2), (20, 2)]
        );
        assert_eq!(byte_offsets(&[(5, 2), (-1, 1)]), vec![5, 6, -1]);
    }

    #[test]
    fn resized_and_empty_blocks_follow_the_definitions() {
        let byte = Datatype::byte();
        let empty = Datatype::contiguous(0, &byte).unwrap();
        let wide = Datatype::resized(-3, 10, &empty).unwrap();
        // A zero-length block adds no element; an element without data adds to lb/ub only.
        let structure =
            Datatype::structure(&[0, 1, 1], &[-100, 50, 2], &[byte.clone(), wide, byte]).unwrap();
        let expected = Bounds {
            size: 1,
            lb: 2,
            ub: 57,
            true_lb: 2,
            true_ub: 3,
        };
        assert_eq!(bounds(&structure), expected);
        assert_eq!(flatten(&structure, 2), vec![(2, 1), (57, 1)]);
    }

    #[test]
    fn array_models_list_elements_in_storage_order() {
        // 3x4 array, 2x2 block at (1, 1).
        assert_eq!(
            subarray_elements(&[3, 4], &[2, 2], &[1, 1], Order::C),
            vec![5, 6, 9, 10]
        );
        // Column-major: element (i, j) at j * 3 + i.
        assert_eq!(
            subarray_elements(&[3, 4], &[2, 2], &[1, 1], Order::Fortran),
            vec![4, 5, 7, 8]
        );
        // 7 elements cyclic(2) over 2 processes: rank 1 has 2, 3 and 6.
        let cyclic = [Distribution::Cyclic(Some(2))];
        assert_eq!(
            darray_elements(2, 1, &[7], &cyclic, &[2], Order::C),
            vec![2, 3, 6]
        );
        // 5 elements block over 2 processes: blocks of 3; rank 1 has 3 and 4.
        let block = [Distribution::Block(None)];
        assert_eq!(
            darray_elements(2, 1, &[5], &block, &[2], Order::C),
            vec![3, 4]
        );
        assert_eq!(element_runs(&[3, 4], 8), vec![(24, 8), (32, 8)]);
    }

    #[test]
    #[should_panic(expected = "reference_bytes_max")]
    fn refuses_to_list_too_much() {
        let big = Datatype::bytes(REFERENCE_BYTES_MAX + 1).unwrap();
        let _ = flatten(&big, 1);
    }
}
