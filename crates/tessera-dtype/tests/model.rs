//! Property tests: the datatype engine against the naive reference in
//! `tessera_dtype::reference`.
//!
//! Random type trees are drawn as a [`Spec`] — a plain description that shrinks well and
//! prints readably — from every public constructor (bytes, contiguous, vector and hvector
//! with negative and zero strides, indexed, hindexed, indexed and hindexed block, struct,
//! subarray and darray in both orders, resized with negative lower bounds and extents smaller
//! and larger than the data), nested a few levels deep and kept to a few KiB of data so each
//! case runs in well under a millisecond. Each property then compares what the engine
//! streams with what the reference lists byte by byte:
//!
//! - (a) the merged runs of whole streams, and size and bounds;
//! - (b) arbitrary byte ranges from arbitrary displacements, starting and ending mid-run and
//!   spanning instances, near the origin and a million instances out;
//! - (c) the bytes each server of a random stripe distribution receives;
//! - (d) the wire encoding's round trip;
//! - (e) subarray and darray against the MPI standard's element-by-element definitions;
//! - (f) pairing a memory stream with a file stream.
//!
//! Hostile encodings (absurd depths, counts and block counts, forward references, truncation)
//! must be refused with the right error and without large allocations, which a counting
//! allocator measures per thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use proptest::sample::Index;
use tessera_dtype::reference::{self, REFERENCE_BYTES_MAX};
use tessera_dtype::{
    pair, wire, Datatype, DatatypeError, Distribution, Order, Run, Transfer, DATATYPE_BLOCKS_MAX,
    DATATYPE_DEPTH_MAX, DATATYPE_ENCODED_BYTES_MAX, DATATYPE_NODES_MAX,
};

/// Most data bytes in one instance of a generated type.
const CASE_TYPE_BYTES_MAX: u64 = 2048;
/// Most instances streamed in one case.
const CASE_INSTANCES_MAX: u64 = 4;
/// Most levels of generated constructors (each may lower to a few engine nodes).
const CASE_LEVELS_MAX: u32 = 4;
const _: () = assert!(CASE_TYPE_BYTES_MAX * CASE_INSTANCES_MAX <= REFERENCE_BYTES_MAX);

// ---------------------------------------------------------------------------------------------
// Random types.

/// A type tree as the constructor calls that build it.
#[derive(Debug, Clone)]
enum Spec {
    Bytes(u64),
    /// `contiguous(count, bytes(0))` with a huge count: no data, many elements to skip.
    EmptyMany(u64),
    Contiguous(u64, Box<Spec>),
    Vector {
        count: u64,
        blocklen: u64,
        stride: i64,
        child: Box<Spec>,
    },
    Hvector {
        count: u64,
        blocklen: u64,
        stride_bytes: i64,
        child: Box<Spec>,
    },
    Indexed {
        blocklens: Vec<u64>,
        displacements: Vec<i64>,
        child: Box<Spec>,
    },
    Hindexed {
        blocklens: Vec<u64>,
        displacements: Vec<i64>,
        child: Box<Spec>,
    },
    IndexedBlock {
        blocklen: u64,
        displacements: Vec<i64>,
        child: Box<Spec>,
    },
    HindexedBlock {
        blocklen: u64,
        displacements: Vec<i64>,
        child: Box<Spec>,
    },
    Struct(Vec<(u64, i64, Spec)>),
    Subarray {
        array: SubarraySpec,
        child: Box<Spec>,
    },
    Darray {
        array: DarraySpec,
        child: Box<Spec>,
    },
    Resized {
        lb: i64,
        extent: i64,
        child: Box<Spec>,
    },
}

#[derive(Debug, Clone)]
struct SubarraySpec {
    sizes: Vec<u64>,
    subsizes: Vec<u64>,
    starts: Vec<u64>,
    order: Order,
}

#[derive(Debug, Clone)]
struct DarraySpec {
    size: u64,
    rank: u64,
    gsizes: Vec<u64>,
    distributions: Vec<Distribution>,
    psizes: Vec<u64>,
    order: Order,
}

impl SubarraySpec {
    fn build(&self, element: &Datatype) -> Result<Datatype, DatatypeError> {
        Datatype::subarray(
            &self.sizes,
            &self.subsizes,
            &self.starts,
            self.order,
            element,
        )
    }

    fn elements(&self) -> Vec<u64> {
        reference::subarray_elements(&self.sizes, &self.subsizes, &self.starts, self.order)
    }
}

impl DarraySpec {
    fn build(&self, element: &Datatype) -> Result<Datatype, DatatypeError> {
        Datatype::darray(
            self.size,
            self.rank,
            &self.gsizes,
            &self.distributions,
            &self.psizes,
            self.order,
            element,
        )
    }

    fn elements(&self) -> Vec<u64> {
        reference::darray_elements(
            self.size,
            self.rank,
            &self.gsizes,
            &self.distributions,
            &self.psizes,
            self.order,
        )
    }
}

impl Spec {
    fn build(&self) -> Result<Datatype, DatatypeError> {
        Ok(match self {
            Spec::Bytes(n) => Datatype::bytes(*n)?,
            Spec::EmptyMany(count) => Datatype::contiguous(*count, &Datatype::bytes(0)?)?,
            Spec::Contiguous(count, child) => Datatype::contiguous(*count, &child.build()?)?,
            Spec::Vector {
                count,
                blocklen,
                stride,
                child,
            } => Datatype::vector(*count, *blocklen, *stride, &child.build()?)?,
            Spec::Hvector {
                count,
                blocklen,
                stride_bytes,
                child,
            } => Datatype::hvector(*count, *blocklen, *stride_bytes, &child.build()?)?,
            Spec::Indexed {
                blocklens,
                displacements,
                child,
            } => Datatype::indexed(blocklens, displacements, &child.build()?)?,
            Spec::Hindexed {
                blocklens,
                displacements,
                child,
            } => Datatype::hindexed(blocklens, displacements, &child.build()?)?,
            Spec::IndexedBlock {
                blocklen,
                displacements,
                child,
            } => Datatype::indexed_block(*blocklen, displacements, &child.build()?)?,
            Spec::HindexedBlock {
                blocklen,
                displacements,
                child,
            } => Datatype::hindexed_block(*blocklen, displacements, &child.build()?)?,
            Spec::Struct(fields) => {
                let blocklens: Vec<u64> = fields.iter().map(|field| field.0).collect();
                let displacements: Vec<i64> = fields.iter().map(|field| field.1).collect();
                let types = fields
                    .iter()
                    .map(|field| field.2.build())
                    .collect::<Result<Vec<_>, _>>()?;
                Datatype::structure(&blocklens, &displacements, &types)?
            }
            Spec::Subarray { array, child } => array.build(&child.build()?)?,
            Spec::Darray { array, child } => array.build(&child.build()?)?,
            Spec::Resized { lb, extent, child } => {
                Datatype::resized(*lb, *extent, &child.build()?)?
            }
        })
    }
}

/// A count or block length in `0..=max`, rarely 0 (zeros empty whole subtrees).
fn count(max: u64) -> impl Strategy<Value = u64> + Clone {
    prop_oneof![1 => Just(0), 15 => 1..=max]
}

/// 0 to `max` items, rarely none.
fn some<T: Strategy + Clone>(item: T, max: usize) -> impl Strategy<Value = Vec<T::Value>> {
    prop_oneof![
        1 => prop::collection::vec(item.clone(), 0..=0),
        15 => prop::collection::vec(item, 1..=max),
    ]
}

fn order() -> impl Strategy<Value = Order> {
    prop_oneof![Just(Order::C), Just(Order::Fortran)]
}

/// 1 to 3 dimensions of 1 to 4 elements, any sub-block (rarely empty).
fn subarray_spec() -> impl Strategy<Value = SubarraySpec> {
    (
        prop::collection::vec(
            (
                1..=4u64,
                any::<Index>(),
                any::<Index>(),
                prop::bool::weighted(0.05),
            ),
            1..=3,
        ),
        order(),
    )
        .prop_map(|(dims, order)| {
            let mut array = SubarraySpec {
                sizes: Vec::new(),
                subsizes: Vec::new(),
                starts: Vec::new(),
                order,
            };
            for (size, start, subsize, empty) in dims {
                let start = start.index(usize::try_from(size).unwrap()) as u64;
                let subsize = if empty {
                    0
                } else {
                    1 + subsize.index(usize::try_from(size - start).unwrap()) as u64
                };
                array.sizes.push(size);
                array.starts.push(start);
                array.subsizes.push(subsize);
            }
            array
        })
}

/// One dimension of a darray: global size, processes, distribution.
fn darray_dimension() -> impl Strategy<Value = (u64, u64, Distribution)> {
    (1..=6u64, 1..=3u64, 0..5u8, 0..=2u64).prop_map(|(global, processes, kind, extra)| match kind {
        0 => (global, 1, Distribution::None),
        1 => (global, processes, Distribution::Block(None)),
        2 => {
            let block = global.div_ceil(processes) + extra;
            (global, processes, Distribution::Block(Some(block)))
        }
        3 => (global, processes, Distribution::Cyclic(None)),
        _ => (global, processes, Distribution::Cyclic(Some(extra + 1))),
    })
}

/// 1 to 3 dimensions, any rank of the grid.
fn darray_spec() -> impl Strategy<Value = DarraySpec> {
    (
        prop::collection::vec(darray_dimension(), 1..=3),
        any::<Index>(),
        order(),
    )
        .prop_map(|(dims, rank, order)| {
            let psizes: Vec<u64> = dims.iter().map(|dim| dim.1).collect();
            let size = psizes.iter().product();
            DarraySpec {
                size,
                rank: rank.index(usize::try_from(size).unwrap()) as u64,
                gsizes: dims.iter().map(|dim| dim.0).collect(),
                distributions: dims.iter().map(|dim| dim.2).collect(),
                psizes,
                order,
            }
        })
}

fn leaf() -> impl Strategy<Value = Spec> {
    prop_oneof![
        24 => (1..=8u64).prop_map(Spec::Bytes),
        1 => Just(Spec::Bytes(0)),
        1 => (1u64 << 30..=1u64 << 40).prop_map(Spec::EmptyMany),
    ]
}

/// Displacements of 0 to 4 blocks, within `scale` of 0 (in extents or bytes).
fn displacements(scale: i64) -> impl Strategy<Value = Vec<i64>> {
    some(-scale..=scale, 4)
}

fn spec() -> impl Strategy<Value = Spec> {
    leaf().prop_recursive(CASE_LEVELS_MAX, 24, 3, |inner| {
        let boxed = inner.clone().prop_map(Box::new);
        prop_oneof![
            (count(4), boxed.clone()).prop_map(|(count, child)| Spec::Contiguous(count, child)),
            (count(4), count(3), -3..=3i64, boxed.clone()).prop_map(
                |(count, blocklen, stride, child)| {
                    Spec::Vector {
                        count,
                        blocklen,
                        stride,
                        child,
                    }
                }
            ),
            (count(4), count(3), -24..=24i64, boxed.clone()).prop_map(
                |(count, blocklen, stride_bytes, child)| Spec::Hvector {
                    count,
                    blocklen,
                    stride_bytes,
                    child,
                }
            ),
            (some((count(3), -4..=4i64), 4), boxed.clone()).prop_map(|(blocks, child)| {
                Spec::Indexed {
                    blocklens: blocks.iter().map(|block| block.0).collect(),
                    displacements: blocks.iter().map(|block| block.1).collect(),
                    child,
                }
            }),
            (some((count(3), -24..=24i64), 4), boxed.clone()).prop_map(|(blocks, child)| {
                Spec::Hindexed {
                    blocklens: blocks.iter().map(|block| block.0).collect(),
                    displacements: blocks.iter().map(|block| block.1).collect(),
                    child,
                }
            }),
            // Long stretches of empty blocks, which the walk skips by binary search.
            (
                prop::collection::vec(
                    (prop_oneof![4 => Just(0), 1 => 1..=2u64], -24..=24i64),
                    1..=40
                ),
                boxed.clone()
            )
                .prop_map(|(blocks, child)| Spec::Hindexed {
                    blocklens: blocks.iter().map(|block| block.0).collect(),
                    displacements: blocks.iter().map(|block| block.1).collect(),
                    child,
                }),
            (count(3), displacements(4), boxed.clone()).prop_map(
                |(blocklen, displacements, child)| {
                    Spec::IndexedBlock {
                        blocklen,
                        displacements,
                        child,
                    }
                }
            ),
            (count(3), displacements(24), boxed.clone()).prop_map(
                |(blocklen, displacements, child)| {
                    Spec::HindexedBlock {
                        blocklen,
                        displacements,
                        child,
                    }
                }
            ),
            some((count(3), -24..=24i64, inner), 3).prop_map(Spec::Struct),
            (subarray_spec(), boxed.clone())
                .prop_map(|(array, child)| Spec::Subarray { array, child }),
            (darray_spec(), boxed.clone()).prop_map(|(array, child)| Spec::Darray { array, child }),
            // Extents from 0 (instances on top of each other) past the data (gaps between them).
            (-16..=16i64, 0..=40i64, boxed).prop_map(|(lb, extent, child)| Spec::Resized {
                lb,
                extent,
                child,
            }),
        ]
    })
}

/// A random type small enough for the reference, with the spec it was built from.
fn small_type() -> impl Strategy<Value = (Spec, Datatype)> {
    spec().prop_filter_map("over the case size budget", |spec| {
        let datatype = spec
            .build()
            .unwrap_or_else(|err| panic!("valid spec {spec:?} was refused: {err}"));
        (datatype.size() <= CASE_TYPE_BYTES_MAX).then_some((spec, datatype))
    })
}

/// As [`small_type`], holding at least one byte.
fn small_type_with_data() -> impl Strategy<Value = (Spec, Datatype)> {
    small_type().prop_filter("holds no data", |(_, datatype)| datatype.size() > 0)
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn pairs(runs: impl Iterator<Item = Run>) -> Vec<(i64, u64)> {
    runs.map(|run| (run.offset, run.length)).collect()
}

/// The engine's runs of stream bytes `[start, end)` from `displacement`.
fn engine_runs(datatype: &Datatype, displacement: i64, start: u64, end: u64) -> Vec<(i64, u64)> {
    pairs(
        datatype
            .runs(displacement, start, end)
            .unwrap_or_else(|err| {
                panic!("runs({displacement}, {start}, {end}) of {datatype:?}: {err}")
            }),
    )
}

/// The reference's merged runs of stream bytes `[start, end)` from `displacement`.
fn reference_runs(datatype: &Datatype, displacement: i64, start: u64, end: u64) -> Vec<(i64, u64)> {
    let instances = if end == 0 {
        0
    } else {
        (end - 1) / datatype.size() + 1
    };
    let all = reference::flatten_at(datatype, displacement, instances);
    reference::merge(&reference::slice(&all, start, end))
}

/// A position in `0..=limit` picked by `index`.
fn pick(index: Index, limit: u64) -> u64 {
    index.index(usize::try_from(limit + 1).unwrap()) as u64
}

/// Splits runs at the stripe unit boundaries of `servers` servers with `unit_bytes` units
/// (offset `o` is on server `(o / unit) % servers`, rounding down for negative offsets), and
/// returns the pieces each server receives in stream order.
fn stripe(runs: &[(i64, u64)], unit_bytes: i64, servers: usize) -> Vec<Vec<(i64, u64)>> {
    let mut out = vec![Vec::new(); servers];
    let servers = i64::try_from(servers).unwrap();
    for &(offset, length) in runs {
        let end = offset + i64::try_from(length).unwrap();
        let mut at = offset;
        while at < end {
            let unit = at.div_euclid(unit_bytes);
            let piece_end = end.min((unit + 1) * unit_bytes);
            let server = usize::try_from(unit.rem_euclid(servers)).unwrap();
            out[server].push((at, u64::try_from(piece_end - at).unwrap()));
            at = piece_end;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Properties.

/// 1024 cases per property (a few seconds in debug), or `PROPTEST_CASES` for a longer hunt
/// (`PROPTEST_CASES=100000 cargo test --release -p tessera-dtype --test model`). About one
/// generated type in five holds no data and is rejected where data is needed, so the reject
/// limits grow with the cases.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(1024u32);
    ProptestConfig {
        cases,
        max_local_rejects: cases.saturating_mul(4).max(65_536),
        max_global_rejects: cases.saturating_mul(4).max(1024),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// (a) Whole streams, size and bounds.
    #[test]
    fn whole_streams_and_bounds_match_the_reference(
        (_spec, datatype) in small_type(),
        count in 0..=CASE_INSTANCES_MAX,
    ) {
        let expected = reference::bounds(&datatype);
        prop_assert_eq!(datatype.size(), expected.size);
        prop_assert_eq!(datatype.lb(), expected.lb);
        prop_assert_eq!(datatype.ub(), expected.ub);
        prop_assert_eq!(datatype.extent(), expected.extent());
        prop_assert!(datatype.extent() >= 0);
        prop_assert_eq!(datatype.true_lb(), expected.true_lb);
        prop_assert_eq!(datatype.true_ub(), expected.true_ub);
        prop_assert!(datatype.depth() <= DATATYPE_DEPTH_MAX);

        // True bounds are also the lowest and highest byte of the flattened data.
        let one = reference::flatten(&datatype, 1);
        if let (Some(low), Some(high)) = (
            one.iter().map(|run| run.0).min(),
            one.iter().map(|run| run.0 + i64::try_from(run.1).unwrap()).max(),
        ) {
            prop_assert_eq!((datatype.true_lb(), datatype.true_ub()), (low, high));
        } else {
            prop_assert_eq!((datatype.true_lb(), datatype.true_ub()), (0, 0));
        }
        // A dense type is one run per instance.
        if datatype.is_dense() && datatype.size() > 0 {
            prop_assert_eq!(
                reference::merge(&one),
                vec![(datatype.true_lb(), datatype.size())]
            );
        }

        let engine = pairs(datatype.all_runs(count).unwrap());
        prop_assert_eq!(&engine, &reference::merge(&reference::flatten(&datatype, count)));
        prop_assert!(engine.iter().all(|run| run.1 > 0), "an empty run was returned");
    }

    /// (b) Byte ranges from any displacement, cut mid-run and spanning instances; and the
    /// same ranges a million instances further on, which only the seek can reach.
    #[test]
    fn byte_ranges_match_the_reference(
        (_spec, datatype) in small_type_with_data(),
        displacement in -100_000..=100_000i64,
        instances in 1..=CASE_INSTANCES_MAX,
        first in any::<Index>(),
        second in any::<Index>(),
        far in 0..(1u64 << 20),
    ) {
        let total = instances * datatype.size();
        let (start, end) = {
            let (a, b) = (pick(first, total), pick(second, total));
            (a.min(b), a.max(b))
        };
        let engine = engine_runs(&datatype, displacement, start, end);
        prop_assert_eq!(&engine, &reference_runs(&datatype, displacement, start, end));
        prop_assert_eq!(engine.iter().map(|run| run.1).sum::<u64>(), end - start);

        // Every run lies inside the span the bounds promise.
        if let Some((low, high)) = datatype.span(displacement, start, end) {
            for &(offset, length) in &engine {
                prop_assert!(i128::from(offset) >= low);
                prop_assert!(i128::from(offset) + i128::from(length) <= high);
            }
        }

        // `remaining` counts down to zero as the runs are taken.
        let mut runs = datatype.runs(displacement, start, end).unwrap();
        let mut left = end - start;
        prop_assert_eq!(runs.remaining(), left);
        while let Some(run) = runs.next() {
            left -= run.length;
            prop_assert_eq!(runs.remaining(), left);
        }

        // Instance `far + k` sits `far` extents after instance `k`.
        let skip = far * datatype.size();
        let shift = i64::try_from(far).unwrap() * datatype.extent();
        let shifted: Vec<(i64, u64)> = engine.iter().map(|&(offset, length)| (offset + shift, length)).collect();
        prop_assert_eq!(engine_runs(&datatype, displacement, skip + start, skip + end), shifted);
    }

    /// (c) Intersecting the run stream with a stripe distribution gives every server the
    /// bytes the reference assigns it, in stream order.
    #[test]
    fn striped_runs_give_every_server_its_bytes(
        (_spec, datatype) in small_type_with_data(),
        displacement in -1000..=1000i64,
        unit_bytes in 1..=16i64,
        servers in 1..=5usize,
        instances in 1..=CASE_INSTANCES_MAX,
        first in any::<Index>(),
        second in any::<Index>(),
    ) {
        let total = instances * datatype.size();
        let (start, end) = {
            let (a, b) = (pick(first, total), pick(second, total));
            (a.min(b), a.max(b))
        };
        let engine = engine_runs(&datatype, displacement, start, end);
        let per_server = stripe(&engine, unit_bytes, servers);

        let instances_needed = if end == 0 { 0 } else { (end - 1) / datatype.size() + 1 };
        let all = reference::flatten_at(&datatype, displacement, instances_needed);
        let mut expected = vec![Vec::new(); servers];
        for offset in reference::byte_offsets(&reference::slice(&all, start, end)) {
            let server = offset.div_euclid(unit_bytes).rem_euclid(i64::try_from(servers).unwrap());
            expected[usize::try_from(server).unwrap()].push(offset);
        }
        for (server, pieces) in per_server.iter().enumerate() {
            prop_assert_eq!(&reference::byte_offsets(pieces), &expected[server], "server {}", server);
        }
    }

    /// (d) The wire encoding round-trips: the same pattern, the same runs, the same bytes.
    #[test]
    fn encodings_round_trip(
        (_spec, datatype) in small_type(),
        count in 0..=CASE_INSTANCES_MAX,
    ) {
        let encoded = wire::encode(&datatype).unwrap();
        prop_assert!(encoded.len() <= DATATYPE_ENCODED_BYTES_MAX);
        let decoded = wire::decode(&encoded).unwrap();
        prop_assert!(decoded.same_as(&datatype));
        prop_assert!(datatype.same_as(&decoded));
        prop_assert_eq!(wire::encode(&decoded).unwrap(), encoded);
        prop_assert_eq!(
            (decoded.size(), decoded.lb(), decoded.ub(), decoded.true_lb(), decoded.true_ub()),
            (datatype.size(), datatype.lb(), datatype.ub(), datatype.true_lb(), datatype.true_ub())
        );
        prop_assert_eq!(decoded.depth(), datatype.depth());
        prop_assert_eq!(pairs(decoded.all_runs(count).unwrap()), pairs(datatype.all_runs(count).unwrap()));
    }

    /// (e) Subarrays of 1- to 8-byte elements are the elements the MPI definition lists.
    #[test]
    fn subarrays_match_the_mpi_definition(
        array in subarray_spec(),
        element_bytes in 1..=8u64,
        count in 1..=3u64,
    ) {
        let element = Datatype::bytes(element_bytes).unwrap();
        let datatype = array.build(&element).unwrap();
        check_array(&datatype, &array.sizes, &array.elements(), &element, count)?;
    }

    /// (e) Darrays of 1- to 8-byte elements are the elements the MPI definition lists.
    #[test]
    fn darrays_match_the_mpi_definition(
        array in darray_spec(),
        element_bytes in 1..=8u64,
        count in 1..=3u64,
    ) {
        let element = Datatype::bytes(element_bytes).unwrap();
        let datatype = array.build(&element).unwrap();
        check_array(&datatype, &array.gsizes, &array.elements(), &element, count)?;
    }

    /// (e) The array constructors place any element type, gaps and resized bounds included,
    /// at its index times its extent.
    #[test]
    fn arrays_of_any_element_match_the_mpi_definition(
        subarray in subarray_spec(),
        darray in darray_spec(),
        (_spec, element) in small_type().prop_filter("too big to tile", |(_, element)| element.size() <= 64),
    ) {
        let datatype = subarray.build(&element).unwrap();
        check_array(&datatype, &subarray.sizes, &subarray.elements(), &element, 2)?;
        let datatype = darray.build(&element).unwrap();
        check_array(&datatype, &darray.gsizes, &darray.elements(), &element, 2)?;
    }

    /// (f) Pairing a memory stream with a file stream maps every byte as the two reference
    /// streams do, in maximal transfers.
    #[test]
    fn pairing_preserves_the_byte_mapping(
        (_memory_spec, memory) in small_type_with_data(),
        (_file_spec, file) in small_type_with_data(),
        memory_displacement in -1000..=1000i64,
        file_displacement in 0..=1000i64,
        length in any::<Index>(),
    ) {
        let most = memory.size().min(file.size()) * CASE_INSTANCES_MAX;
        let length = pick(length, most);
        let transfers: Vec<Transfer> = pair(
            memory.runs(memory_displacement, 0, length).unwrap(),
            file.runs(file_displacement, 0, length).unwrap(),
        )
        .collect();
        prop_assert!(transfers.iter().all(|transfer| transfer.length > 0));
        prop_assert_eq!(transfers.iter().map(|transfer| transfer.length).sum::<u64>(), length);

        let memory_bytes = reference::byte_offsets(&reference_runs(&memory, memory_displacement, 0, length));
        let file_bytes = reference::byte_offsets(&reference_runs(&file, file_displacement, 0, length));
        let memory_side: Vec<(i64, u64)> = transfers.iter().map(|t| (t.memory, t.length)).collect();
        let file_side: Vec<(i64, u64)> = transfers.iter().map(|t| (t.file, t.length)).collect();
        prop_assert_eq!(reference::byte_offsets(&memory_side), memory_bytes);
        prop_assert_eq!(reference::byte_offsets(&file_side), file_bytes);
        // Maximal: no transfer continues the one before on both sides.
        for window in transfers.windows(2) {
            let step = i64::try_from(window[0].length).unwrap();
            prop_assert!(
                window[1].memory != window[0].memory + step || window[1].file != window[0].file + step,
                "transfers {:?} could have been one",
                window
            );
        }
    }
}

/// The stream of `count` arrays is the reference's elements (linear indices), each a copy of
/// `element` at its index times the element's extent, array `k` one array extent further.
fn check_array(
    datatype: &Datatype,
    sizes: &[u64],
    elements: &[u64],
    element: &Datatype,
    count: u64,
) -> Result<(), TestCaseError> {
    let element_extent = element.extent();
    let array_extent = sizes.iter().fold(element_extent, |acc, &size| {
        acc * i64::try_from(size).unwrap()
    });
    prop_assert_eq!(datatype.lb(), 0);
    prop_assert_eq!(datatype.extent(), array_extent);
    prop_assert_eq!(datatype.size(), elements.len() as u64 * element.size());
    let mut expected = Vec::new();
    for k in 0..count {
        let array_base = i64::try_from(k).unwrap() * array_extent;
        for &index in elements {
            let at = array_base + i64::try_from(index).unwrap() * element_extent;
            expected.extend(reference::flatten_at(element, at, 1));
        }
    }
    prop_assert_eq!(
        pairs(datatype.all_runs(count).unwrap()),
        reference::merge(&expected)
    );
    // An element whose data is its whole extent from 0 is the plain scaled case: element
    // `index` is the bytes `[index * size, (index + 1) * size)`.
    let size = i64::try_from(element.size()).unwrap();
    if element.is_dense() && element.true_lb() == 0 && element.extent() == size {
        let scaled = reference::element_runs(elements, element.size());
        prop_assert_eq!(
            pairs(datatype.all_runs(1).unwrap()),
            reference::merge(&scaled)
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Hostile encodings.

/// Counts the bytes each thread allocates, so a test can bound what one call allocates.
struct CountingAllocator;

thread_local! {
    static THREAD_ALLOCATED_BYTES: Cell<u64> = const { Cell::new(0) };
}

fn count_allocation(bytes: usize) {
    // `try_with` fails only while the thread is being torn down; nothing is measured then.
    let _ = THREAD_ALLOCATED_BYTES.try_with(|total| total.set(total.get() + bytes as u64));
}

// SAFETY: every method forwards its arguments unchanged to the system allocator, so the
// caller's obligations carry over; counting touches only a const-initialised thread-local
// `Cell`, which neither allocates nor unwinds.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation(layout.size());
        // SAFETY: forwarded unchanged; the caller meets `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_allocation(layout.size());
        // SAFETY: forwarded unchanged; the caller meets `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation(new_size);
        // SAFETY: forwarded unchanged; `ptr` came from `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Most bytes decoding a hostile input may allocate beyond a small multiple of its length:
/// what the decoder allocates must be justified by bytes it has seen, never by a claim.
const HOSTILE_ALLOCATED_BYTES_MAX: u64 = 64 << 10;
/// Bytes the decoder may allocate per input byte (a 16-byte indexed block becomes a 16-byte
/// block, an 8-byte prefix sum and 16 bytes of argument arrays).
const ALLOCATED_PER_INPUT_BYTE_MAX: u64 = 4;

/// Decodes `bytes`, checking that the attempt allocates little, and returns the error.
fn refused(bytes: &[u8]) -> DatatypeError {
    let before = THREAD_ALLOCATED_BYTES.with(Cell::get);
    let result = wire::decode(bytes);
    let allocated = THREAD_ALLOCATED_BYTES.with(Cell::get) - before;
    let allowed = HOSTILE_ALLOCATED_BYTES_MAX + ALLOCATED_PER_INPUT_BYTE_MAX * bytes.len() as u64;
    assert!(
        allocated <= allowed,
        "decoding {} hostile bytes allocated {allocated} bytes (at most {allowed} allowed)",
        bytes.len()
    );
    match result {
        Ok(datatype) => panic!("hostile encoding decoded to {datatype:?}"),
        Err(err) => err,
    }
}

fn assert_limit(err: &DatatypeError, name: &str) {
    assert!(
        matches!(err, DatatypeError::LimitExceeded { limit, .. } if *limit == name),
        "expected {name} to be exceeded, got {err:?}"
    );
}

fn assert_malformed(err: &DatatypeError) {
    assert!(
        matches!(err, DatatypeError::Malformed { .. }),
        "expected a malformed encoding, got {err:?}"
    );
}

/// Encodings written by hand, byte for byte as the module docs of `wire.rs` lay them out.
struct Encoding(Vec<u8>);

impl Encoding {
    fn new(nodes: u32) -> Self {
        let mut bytes = vec![1];
        bytes.extend_from_slice(&nodes.to_le_bytes());
        Self(bytes)
    }

    fn bytes(mut self, n: u64) -> Self {
        self.0.push(1);
        self.0.extend_from_slice(&n.to_le_bytes());
        self
    }

    fn vector(mut self, child: u32, count: u64, blocklen: u64, stride: i64) -> Self {
        self.0.push(2);
        self.0.extend_from_slice(&child.to_le_bytes());
        self.0.extend_from_slice(&count.to_le_bytes());
        self.0.extend_from_slice(&blocklen.to_le_bytes());
        self.0.extend_from_slice(&stride.to_le_bytes());
        self
    }

    fn indexed(mut self, child: u32, claimed_blocks: u32, blocks: &[(i64, u64)]) -> Self {
        self.0.push(3);
        self.0.extend_from_slice(&child.to_le_bytes());
        self.0.extend_from_slice(&claimed_blocks.to_le_bytes());
        for (displacement, blocklen) in blocks {
            self.0.extend_from_slice(&displacement.to_le_bytes());
            self.0.extend_from_slice(&blocklen.to_le_bytes());
        }
        self
    }

    fn resized(mut self, child: u32, lb: i64, extent: u64) -> Self {
        self.0.push(5);
        self.0.extend_from_slice(&child.to_le_bytes());
        self.0.extend_from_slice(&lb.to_le_bytes());
        self.0.extend_from_slice(&extent.to_le_bytes());
        self
    }
}

#[test]
fn hand_written_encodings_decode() {
    // The builder above writes what the decoder reads: a 2-byte run, 3 blocks of it 8 apart.
    let good = Encoding::new(2).bytes(2).vector(0, 3, 1, 8).0;
    let datatype = wire::decode(&good).unwrap();
    assert_eq!(
        pairs(datatype.all_runs(1).unwrap()),
        vec![(0, 2), (8, 2), (16, 2)]
    );
    assert_eq!(wire::encode(&datatype).unwrap(), good);
}

#[test]
fn the_shortest_nodes_round_trip() {
    // A struct without fields is a 5-byte node, shorter than any other kind.
    let empty = Datatype::structure(&[], &[], &[]).unwrap();
    let encoded = wire::encode(&empty).unwrap();
    assert_eq!(encoded, vec![1, 1, 0, 0, 0, 4, 0, 0, 0, 0]);
    assert!(wire::decode(&encoded).unwrap().same_as(&empty));
    let fields = vec![empty; 3];
    let nested = Datatype::structure(&[1, 0, 2], &[0, 5, -5], &fields).unwrap();
    let encoded = wire::encode(&nested).unwrap();
    assert!(wire::decode(&encoded).unwrap().same_as(&nested));
}

#[test]
fn empty_blocks_are_skipped_in_any_number() {
    // The hostile shape: two 1-byte blocks with 65 534 empty blocks between them, tiled a
    // trillion times. Walking it steps over the empty blocks by binary search (it used to
    // step one block at a time, 2^31 steps for 64 KiB of stream).
    let mut blocklens = vec![0u64; DATATYPE_BLOCKS_MAX];
    let mut displacements = vec![0i64; DATATYPE_BLOCKS_MAX];
    blocklens[0] = 1;
    blocklens[DATATYPE_BLOCKS_MAX - 1] = 1;
    displacements[DATATYPE_BLOCKS_MAX - 1] = 2;
    let sparse = Datatype::hindexed(&blocklens, &displacements, &Datatype::byte()).unwrap();
    assert!(!sparse.is_dense());
    let tiled = Datatype::contiguous(1 << 40, &sparse).unwrap();
    // The last 64 KiB of the stream: instances 2^40 - 2^15 and on, 3 bytes apart, each with
    // bytes at 0 and 2; byte 2 of one instance meets byte 0 of the next.
    let start = (1u64 << 40) * 2 - 64 * 1024;
    let first = i64::try_from(start / 2 * 3).unwrap();
    let mut expected = vec![(first, 1)];
    expected.extend((0..32 * 1024 - 1).map(|k| (first + 3 * k + 2, 2)));
    expected.push((first + 3 * (32 * 1024 - 1) + 2, 1));
    assert_eq!(engine_runs(&tiled, 0, start, start + 64 * 1024), expected);
    // Fields without data in a struct, and blocks of length 0 mixed in.
    let empty = Datatype::contiguous(1 << 40, &Datatype::bytes(0).unwrap()).unwrap();
    let byte = Datatype::byte();
    let fields = [
        empty.clone(),
        byte.clone(),
        empty.clone(),
        empty,
        byte.clone(),
        byte,
    ];
    let structure =
        Datatype::structure(&[7, 1, 3, 0, 0, 2], &[0, 9, 1, 2, 3, -4], &fields).unwrap();
    assert_eq!(
        pairs(structure.all_runs(2).unwrap()),
        reference::merge(&reference::flatten(&structure, 2))
    );
}

#[test]
fn a_million_levels_are_refused() {
    const LEVELS: u32 = 1_000_000;
    // Only the header claims them.
    assert_limit(
        &refused(&Encoding::new(LEVELS).bytes(1).0),
        "datatype_nodes_max",
    );
    // All of them written out: a chain of resized nodes, each the child of the next.
    let mut chain = Encoding::new(LEVELS).bytes(1);
    for child in 0..LEVELS - 1 {
        chain = chain.resized(child, 0, 1);
    }
    assert!(chain.0.len() > DATATYPE_ENCODED_BYTES_MAX);
    assert_limit(&refused(&chain.0), "datatype_encoded_bytes_max");
    // As many as the node limit allows: refused at the depth limit, for both kinds of chain.
    let nodes = u32::try_from(DATATYPE_NODES_MAX).unwrap();
    let mut resized = Encoding::new(nodes).bytes(1);
    let mut vectors = Encoding::new(nodes).bytes(1);
    for child in 0..nodes - 1 {
        resized = resized.resized(child, -1, 3);
        vectors = vectors.vector(child, 1, 1, 0);
    }
    assert_limit(&refused(&resized.0), "datatype_depth_max");
    assert_limit(&refused(&vectors.0), "datatype_depth_max");
}

#[test]
fn absurd_counts_are_refused() {
    assert_limit(
        &refused(&Encoding::new(2).bytes(1).vector(0, 1 << 63, 1, 1).0),
        "datatype_count_max",
    );
    assert_limit(
        &refused(&Encoding::new(2).bytes(1).vector(0, 1 << 30, 1 << 30, 1).0),
        "datatype_count_max",
    );
    assert_limit(
        &refused(&Encoding::new(1).bytes(u64::MAX).0),
        "datatype_count_max",
    );
    // A count within the limits whose bounds are not.
    assert_limit(
        &refused(&Encoding::new(2).bytes(1).vector(0, 1 << 40, 1, 1 << 40).0),
        "datatype_bytes_max",
    );
    assert_limit(
        &refused(&Encoding::new(2).bytes(1).vector(0, 2, 1, i64::MAX).0),
        "datatype_bytes_max",
    );
    assert_limit(
        &refused(&Encoding::new(2).bytes(1).resized(0, i64::MIN, 1).0),
        "datatype_bytes_max",
    );
    assert!(matches!(
        refused(&Encoding::new(2).bytes(1).resized(0, 0, u64::MAX).0),
        DatatypeError::Invalid { .. }
    ));
    // Sizes multiply up past the byte limit over the levels.
    let mut deep = Encoding::new(6).bytes(1 << 40);
    for child in 0..5 {
        deep = deep.vector(child, 1 << 20, 1, 0);
    }
    assert_limit(&refused(&deep.0), "datatype_bytes_max");
}

#[test]
fn absurd_block_counts_are_refused() {
    // 2^32 - 1 blocks claimed in a few bytes: over the block limit, nothing reserved.
    let claimed = Encoding::new(2).bytes(1).indexed(0, u32::MAX, &[(0, 1)]).0;
    assert_limit(&refused(&claimed), "datatype_blocks_max");
    // Exactly the block limit claimed, but the bytes for them are not there.
    let blocks = u32::try_from(DATATYPE_BLOCKS_MAX).unwrap();
    assert_malformed(&refused(
        &Encoding::new(2).bytes(1).indexed(0, blocks, &[(0, 1)]).0,
    ));
    // Blocks over several nodes add up.
    let half = vec![(0i64, 1u64); DATATYPE_BLOCKS_MAX / 2 + 1];
    let two = Encoding::new(3)
        .bytes(1)
        .indexed(0, blocks / 2 + 1, &half)
        .indexed(0, blocks / 2 + 1, &half)
        .0;
    assert_limit(&refused(&two), "datatype_blocks_max");
}

#[test]
fn references_must_point_backwards() {
    // A node naming itself, a later node, and a node that does not exist.
    assert_malformed(&refused(&Encoding::new(2).bytes(1).vector(1, 1, 1, 0).0));
    assert_malformed(&refused(
        &Encoding::new(3).bytes(1).resized(2, 0, 1).bytes(1).0,
    ));
    assert_malformed(&refused(
        &Encoding::new(2).bytes(1).vector(u32::MAX, 1, 1, 0).0,
    ));
    // A cycle written as two nodes naming each other.
    assert_malformed(&refused(
        &Encoding::new(2).resized(1, 0, 1).resized(0, 0, 1).0,
    ));
}

#[test]
fn truncated_and_padded_encodings_are_refused() {
    let byte = Datatype::byte();
    let inner = Datatype::vector(3, 2, -4, &byte).unwrap();
    let shape = Datatype::structure(
        &[1, 2],
        &[0, 40],
        &[inner.clone(), Datatype::bytes(3).unwrap()],
    )
    .unwrap();
    let outer = Datatype::resized(
        -8,
        100,
        &Datatype::indexed(&[1, 3], &[5, -2], &shape).unwrap(),
    )
    .unwrap();
    let encoded = wire::encode(&outer).unwrap();
    assert!(wire::decode(&encoded).unwrap().same_as(&outer));
    for cut in 0..encoded.len() {
        assert_malformed(&refused(&encoded[..cut]));
    }
    let mut padded = encoded.clone();
    padded.push(0);
    assert_malformed(&refused(&padded));
    let mut version = encoded.clone();
    version[0] = 2;
    assert_malformed(&refused(&version));
    let mut tag = Encoding::new(1).bytes(1).0;
    tag[5] = 9;
    assert_malformed(&refused(&tag));
    assert_limit(&refused(&Encoding::new(0).0), "datatype_nodes_max");
    assert_limit(
        &refused(&vec![0; DATATYPE_ENCODED_BYTES_MAX + 1]),
        "datatype_encoded_bytes_max",
    );
}
