//! Datatype and view I/O against a plain in-memory file, through real servers.
//!
//! The property test creates files over random layouts — stripes of random units over 1-6
//! servers, and pattern layouts that deal a random partition of a small period to the
//! servers — and applies random datatype writes (`write_type`, and `write_at`/`write_typed`
//! through views) with random file types (vectors with negative and zero strides, hindexed,
//! subarray, cyclic darray, resized with gaps, structs of two, nested), random displacements,
//! contiguous and strided memory types and every transfer mode. The same writes go to a byte
//! model in stream order (where runs overlap, the later stream byte wins), then everything is
//! read back through the same routes, through views at random ranges, and as the plain
//! file, and compared with the model. The test's idea of each type (its byte offsets in
//! stream order and its bounds) is computed here by the MPI rules, never by the engine.
//!
//! The deterministic tests pin down the request counts of view I/O, the errors for bad input
//! and bad patterns, views surviving a restart of every iod, and what `File::close` does to
//! views.

#![allow(
    clippy::too_many_lines,
    reason = "tests have no length budget (make tidy counts production code only)"
)]
// Test sizes and offsets are small; their casts cannot truncate or wrap.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::Cluster;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tessera_client::dtype::{Distribution, Order};
use tessera_client::{
    Client, ClientError, CreateOptions, Datatype, ErrorCode, File, IoReport, OpenMode,
    TransferMode, View,
};
use tessera_proto::limits::STREAM_RANGES_MAX;
use tessera_proto::{DeclareView, FileType, Piece, ReadType, ReleaseView, StoragePlan};

/// Largest file offset a case may reach (keeps the whole-file comparison quick).
const FILE_CAP_BYTES: u64 = 1 << 20;

// ---------------------------------------------------------------------------------------
// The model of a datatype: byte offsets of one instance in stream order, and MPI bounds.

#[derive(Debug, Clone)]
struct Flat {
    offsets: Vec<i64>,
    lb: i64,
    ub: i64,
}

impl Flat {
    fn bytes(n: u64) -> Self {
        Self {
            offsets: (0..n as i64).collect(),
            lb: 0,
            ub: n as i64,
        }
    }

    /// Copies of `child` at each displacement, in order; the bounds by the MPI rule (the
    /// lowest lower bound and the highest upper bound of the copies).
    fn placed(displacements: impl IntoIterator<Item = i64>, child: &Flat) -> Self {
        let mut flat = Self {
            offsets: Vec::new(),
            lb: i64::MAX,
            ub: i64::MIN,
        };
        flat.add(displacements, child);
        flat
    }

    fn add(&mut self, displacements: impl IntoIterator<Item = i64>, child: &Flat) {
        for displacement in displacements {
            self.offsets
                .extend(child.offsets.iter().map(|offset| displacement + offset));
            self.lb = self.lb.min(displacement + child.lb);
            self.ub = self.ub.max(displacement + child.ub);
        }
    }

    fn size(&self) -> u64 {
        self.offsets.len() as u64
    }

    fn extent(&self) -> i64 {
        self.ub - self.lb
    }

    fn lowest(&self) -> i64 {
        self.offsets.iter().copied().min().unwrap_or(0)
    }

    fn highest(&self) -> i64 {
        self.offsets.iter().copied().max().unwrap_or(0)
    }

    /// Offset of stream byte `index` of instances tiled from `displacement`.
    fn at(&self, displacement: i64, index: u64) -> i64 {
        let size = self.size();
        displacement + (index / size) as i64 * self.extent() + self.offsets[(index % size) as usize]
    }

    /// One past the highest offset stream bytes `[0, end)` reach.
    fn reach(&self, displacement: i64, end: u64) -> i64 {
        if end == 0 {
            return displacement;
        }
        let instances = end.div_ceil(self.size()) as i64;
        displacement + (instances - 1) * self.extent() + self.highest() + 1
    }
}

// ---------------------------------------------------------------------------------------
// File types: a description that builds both the engine's type and the model.

#[derive(Debug, Clone)]
enum TypeSpec {
    Bytes(u64),
    /// A block of a 2-D C-order array of `element`-byte elements.
    Subarray {
        sizes: [u64; 2],
        subsizes: [u64; 2],
        starts: [u64; 2],
        element: u64,
    },
    /// The share of `rank` of a 2-D C-order array: rows cyclic in blocks of `row_block`,
    /// columns cyclic in blocks of `column_block` (0: the default block distribution).
    Darray {
        gsizes: [u64; 2],
        psizes: [u64; 2],
        rank: u64,
        row_block: u64,
        column_block: u64,
        element: u64,
    },
    /// `vector(count, blocklen, stride, child)`: the stride counts extents of the child.
    Vector {
        count: u64,
        blocklen: u64,
        stride: i64,
        child: Box<TypeSpec>,
    },
    /// `hindexed` of (block length, byte displacement) blocks.
    Hindexed {
        blocks: Vec<(u64, i64)>,
        child: Box<TypeSpec>,
    },
    /// The child with its lower bound moved `below` bytes down and its upper bound `gap`
    /// bytes up (a negative gap makes instances overlap, never a negative extent).
    Resized {
        below: i64,
        gap: i64,
        child: Box<TypeSpec>,
    },
    /// A struct of (block length, byte displacement, type) fields.
    Struct {
        fields: Vec<(u64, i64, TypeSpec)>,
    },
}

impl TypeSpec {
    fn resized_bounds(below: i64, gap: i64, child: &Flat) -> (i64, i64) {
        let lb = child.lb - below;
        (lb, (child.ub + gap).max(lb + 1))
    }

    fn darray_distributions(row_block: u64, column_block: u64) -> [Distribution; 2] {
        [
            Distribution::Cyclic(Some(row_block)),
            if column_block == 0 {
                Distribution::Block(None)
            } else {
                Distribution::Cyclic(Some(column_block))
            },
        ]
    }

    fn flat(&self) -> Flat {
        match self {
            Self::Bytes(n) => Flat::bytes(*n),
            Self::Subarray {
                sizes,
                subsizes,
                starts,
                element,
            } => {
                let mut offsets = Vec::new();
                for i in 0..subsizes[0] {
                    for j in 0..subsizes[1] {
                        let index = (starts[0] + i) * sizes[1] + starts[1] + j;
                        offsets.extend((0..*element).map(|b| (index * element + b) as i64));
                    }
                }
                Flat {
                    offsets,
                    lb: 0,
                    ub: (sizes[0] * sizes[1] * element) as i64,
                }
            }
            Self::Darray {
                gsizes,
                psizes,
                rank,
                row_block,
                column_block,
                element,
            } => {
                let coords = [rank / psizes[1], rank % psizes[1]];
                let owns = |d: usize, i: u64| match (d, column_block) {
                    (1, 0) => i / gsizes[1].div_ceil(psizes[1]) == coords[1],
                    (1, block) => (i / block) % psizes[1] == coords[1],
                    _ => (i / row_block) % psizes[0] == coords[0],
                };
                let mut offsets = Vec::new();
                for i in (0..gsizes[0]).filter(|&i| owns(0, i)) {
                    for j in (0..gsizes[1]).filter(|&j| owns(1, j)) {
                        let index = i * gsizes[1] + j;
                        offsets.extend((0..*element).map(|b| (index * element + b) as i64));
                    }
                }
                Flat {
                    offsets,
                    lb: 0,
                    ub: (gsizes[0] * gsizes[1] * element) as i64,
                }
            }
            Self::Vector {
                count,
                blocklen,
                stride,
                child,
            } => {
                let child = child.flat();
                let extent = child.extent();
                let (blocklen, stride) = (*blocklen as i64, *stride);
                Flat::placed(
                    (0..*count as i64)
                        .flat_map(|j| (0..blocklen).map(move |k| j * stride * extent + k * extent)),
                    &child,
                )
            }
            Self::Hindexed { blocks, child } => {
                let child = child.flat();
                let extent = child.extent();
                Flat::placed(
                    blocks.iter().flat_map(|&(length, displacement)| {
                        (0..length as i64).map(move |k| displacement + k * extent)
                    }),
                    &child,
                )
            }
            Self::Resized { below, gap, child } => {
                let child = child.flat();
                let (lb, ub) = Self::resized_bounds(*below, *gap, &child);
                Flat {
                    offsets: child.offsets,
                    lb,
                    ub,
                }
            }
            Self::Struct { fields } => {
                let mut flat = Flat {
                    offsets: Vec::new(),
                    lb: i64::MAX,
                    ub: i64::MIN,
                };
                for (length, displacement, spec) in fields {
                    let child = spec.flat();
                    let extent = child.extent();
                    flat.add(
                        (0..*length as i64).map(|k| displacement + k * extent),
                        &child,
                    );
                }
                flat
            }
        }
    }

    fn datatype(&self) -> Datatype {
        match self {
            Self::Bytes(n) => Datatype::bytes(*n),
            Self::Subarray {
                sizes,
                subsizes,
                starts,
                element,
            } => Datatype::subarray(
                sizes,
                subsizes,
                starts,
                Order::C,
                &Datatype::bytes(*element).unwrap(),
            ),
            Self::Darray {
                gsizes,
                psizes,
                rank,
                row_block,
                column_block,
                element,
            } => Datatype::darray(
                psizes[0] * psizes[1],
                *rank,
                gsizes,
                &Self::darray_distributions(*row_block, *column_block),
                psizes,
                Order::C,
                &Datatype::bytes(*element).unwrap(),
            ),
            Self::Vector {
                count,
                blocklen,
                stride,
                child,
            } => Datatype::vector(*count, *blocklen, *stride, &child.datatype()),
            Self::Hindexed { blocks, child } => {
                let (lengths, displacements): (Vec<u64>, Vec<i64>) = blocks.iter().copied().unzip();
                Datatype::hindexed(&lengths, &displacements, &child.datatype())
            }
            Self::Resized { below, gap, child } => {
                let (lb, ub) = Self::resized_bounds(*below, *gap, &child.flat());
                Datatype::resized(lb, ub - lb, &child.datatype())
            }
            Self::Struct { fields } => {
                let lengths: Vec<u64> = fields.iter().map(|field| field.0).collect();
                let displacements: Vec<i64> = fields.iter().map(|field| field.1).collect();
                let types: Vec<Datatype> = fields.iter().map(|field| field.2.datatype()).collect();
                Datatype::structure(&lengths, &displacements, &types)
            }
        }
        .unwrap_or_else(|err| panic!("{self:?} is a valid type: {err}"))
    }
}

fn leaf_type() -> impl Strategy<Value = TypeSpec> {
    prop_oneof![
        (1u64..8).prop_map(TypeSpec::Bytes),
        (1u64..=6, 1u64..=10, any::<[u64; 4]>(), 1u64..=4).prop_map(|(s0, s1, raw, element)| {
            let subsizes = [1 + raw[0] % s0, 1 + raw[1] % s1];
            TypeSpec::Subarray {
                sizes: [s0, s1],
                subsizes,
                starts: [
                    raw[2] % (s0 - subsizes[0] + 1),
                    raw[3] % (s1 - subsizes[1] + 1),
                ],
                element,
            }
        }),
        (
            [1u64..=8, 1u64..=8],
            [1u64..=3, 1u64..=3],
            any::<u64>(),
            1u64..=3,
            0u64..=2,
            1u64..=3,
        )
            .prop_map(|(gsizes, psizes, rank, row_block, column_block, element)| {
                TypeSpec::Darray {
                    gsizes,
                    psizes,
                    rank: rank % (psizes[0] * psizes[1]),
                    row_block,
                    column_block,
                    element,
                }
            }),
    ]
}

fn file_type() -> impl Strategy<Value = TypeSpec> {
    leaf_type()
        .prop_recursive(2, 12, 3, |inner| {
            prop_oneof![
                (1u64..=4, 1u64..=3, -4i64..=6, inner.clone()).prop_map(
                    |(count, blocklen, stride, child)| TypeSpec::Vector {
                        count,
                        blocklen,
                        stride,
                        child: Box::new(child),
                    }
                ),
                (
                    prop::collection::vec((1u64..=3, -16i64..=64), 1..=4),
                    inner.clone()
                )
                    .prop_map(|(blocks, child)| TypeSpec::Hindexed {
                        blocks,
                        child: Box::new(child),
                    }),
                (0i64..=8, -4i64..=24, inner.clone()).prop_map(|(below, gap, child)| {
                    TypeSpec::Resized {
                        below,
                        gap,
                        child: Box::new(child),
                    }
                }),
                prop::collection::vec((1u64..=2, -8i64..=64, inner), 2..=2)
                    .prop_map(|fields| TypeSpec::Struct { fields }),
            ]
        })
        .prop_filter("a small, non-empty type", |spec| {
            let flat = spec.flat();
            (1..=2048).contains(&flat.size())
                && flat.extent() <= 8192
                && flat.lowest().abs() <= 8192
        })
}

// ---------------------------------------------------------------------------------------
// Memory types.

#[derive(Debug, Clone, Copy)]
enum MemSpec {
    /// `count` elements of `element` bytes, back to back.
    Contiguous { element: u64, count: u64 },
    /// `count` instances of `blocks` blocks of `blocklen` bytes, `blocklen + gap` apart,
    /// each instance `tail` bytes longer than its data reaches.
    Strided {
        count: u64,
        blocks: u64,
        blocklen: u64,
        gap: u64,
        tail: u64,
    },
}

impl MemSpec {
    fn count(self) -> u64 {
        match self {
            Self::Contiguous { count, .. } | Self::Strided { count, .. } => count,
        }
    }

    fn with_count(self, new: u64) -> Self {
        match self {
            Self::Contiguous { element, .. } => Self::Contiguous {
                element,
                count: new,
            },
            Self::Strided {
                blocks,
                blocklen,
                gap,
                tail,
                ..
            } => Self::Strided {
                count: new,
                blocks,
                blocklen,
                gap,
                tail,
            },
        }
    }

    fn datatype(self) -> Datatype {
        match self {
            Self::Contiguous { element, .. } => Datatype::bytes(element).unwrap(),
            Self::Strided {
                blocks,
                blocklen,
                gap,
                tail,
                ..
            } => {
                let step = (blocklen + gap) as i64;
                let reach = (blocks as i64 - 1) * step + blocklen as i64;
                Datatype::resized(
                    0,
                    reach + tail as i64,
                    &Datatype::hvector(blocks, blocklen, step, &Datatype::byte()).unwrap(),
                )
                .unwrap()
            }
        }
    }

    fn flat(self) -> Flat {
        match self {
            Self::Contiguous { element, .. } => Flat::bytes(element),
            Self::Strided {
                blocks,
                blocklen,
                gap,
                tail,
                ..
            } => {
                let step = (blocklen + gap) as i64;
                let mut flat =
                    Flat::placed((0..blocks as i64).map(|j| j * step), &Flat::bytes(blocklen));
                flat.ub += tail as i64;
                flat
            }
        }
    }
}

fn memory_type() -> impl Strategy<Value = MemSpec> {
    prop_oneof![
        (prop::sample::select(vec![1u64, 3, 8, 64]), 1u64..=120)
            .prop_map(|(element, count)| MemSpec::Contiguous { element, count }),
        (1u64..=6, 1u64..=6, 1u64..=16, 0u64..=8, 0u64..=8).prop_map(
            |(count, blocks, blocklen, gap, tail)| MemSpec::Strided {
                count,
                blocks,
                blocklen,
                gap,
                tail,
            }
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Layouts.

#[derive(Debug, Clone)]
enum LayoutSpec {
    Stripe {
        servers: u16,
        unit: u64,
    },
    /// Runs (offset, length, server position) covering one period in order.
    Pattern {
        period: u64,
        servers: usize,
        runs: Vec<(u64, u64, usize)>,
    },
}

/// A tiny xorshift generator for the derived parts of a pattern.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn shuffle<T>(items: &mut [T], state: &mut u64) {
    for i in (1..items.len()).rev() {
        items.swap(i, (next(state) % (i as u64 + 1)) as usize);
    }
}

impl LayoutSpec {
    /// A random partition of a period into runs dealt to `servers`, each getting at least
    /// one; or, for `column_block`, one run per server in server order (a (*,BLOCK)
    /// distribution of uneven column blocks).
    fn pattern(
        servers: usize,
        extra_runs: usize,
        extra_bytes: u64,
        column_block: bool,
        seed: u64,
    ) -> Self {
        let mut state = seed | 1;
        let count = if column_block {
            servers
        } else {
            servers + extra_runs
        };
        let period = count as u64 + extra_bytes;
        let mut points: Vec<u64> = (1..period).collect();
        shuffle(&mut points, &mut state);
        let mut cuts: Vec<u64> = points[..count - 1].to_vec();
        cuts.push(0);
        cuts.push(period);
        cuts.sort_unstable();
        let mut owners: Vec<usize> = (0..count).map(|i| i % servers).collect();
        if !column_block {
            shuffle(&mut owners, &mut state);
        }
        let runs = cuts
            .windows(2)
            .zip(owners)
            .map(|(cut, owner)| (cut[0], cut[1] - cut[0], owner))
            .collect();
        Self::Pattern {
            period,
            servers,
            runs,
        }
    }

    fn options(&self) -> CreateOptions {
        match self {
            Self::Stripe { servers, unit } => CreateOptions {
                stripe_unit_bytes: *unit,
                server_count: *servers,
                exclusive: true,
                ..CreateOptions::default()
            },
            Self::Pattern {
                period,
                servers,
                runs,
            } => CreateOptions {
                pattern: (0..*servers)
                    .map(|position| {
                        let (lengths, displacements): (Vec<u64>, Vec<i64>) = runs
                            .iter()
                            .filter(|run| run.2 == position)
                            .map(|run| (run.1, run.0 as i64))
                            .unzip();
                        Datatype::resized(
                            0,
                            *period as i64,
                            &Datatype::hindexed(&lengths, &displacements, &Datatype::byte())
                                .unwrap(),
                        )
                        .unwrap()
                    })
                    .collect(),
                exclusive: true,
                ..CreateOptions::default()
            },
        }
    }

    /// Position of the server holding file byte `offset`.
    fn position(&self, offset: u64) -> usize {
        match self {
            Self::Stripe { servers, unit } => ((offset / unit) % u64::from(*servers)) as usize,
            Self::Pattern { period, runs, .. } => {
                let within = offset % period;
                runs.iter()
                    .find(|run| run.0 <= within && within < run.0 + run.1)
                    .expect("the runs cover the period")
                    .2
            }
        }
    }
}

fn layout() -> impl Strategy<Value = LayoutSpec> {
    prop_oneof![
        (1u16..=6, 64u64..=300).prop_map(|(servers, unit)| LayoutSpec::Stripe { servers, unit }),
        (
            1usize..=6,
            0usize..=8,
            0u64..=90,
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(|(servers, extra_runs, extra_bytes, column_block, seed)| {
                LayoutSpec::pattern(servers, extra_runs, extra_bytes, column_block, seed)
            }),
    ]
}

// ---------------------------------------------------------------------------------------
// Cases.

/// The route of one access.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// `File::write_type` / `read_type` with the memory type.
    Type,
    /// `View::write_at` / `read_at` at this view offset, contiguous memory.
    ViewAt(u64),
    /// `View::write_typed` / `read_typed` at this view offset with the memory type.
    ViewTyped(u64),
}

#[derive(Debug, Clone)]
struct Access {
    file: TypeSpec,
    displacement: u64,
    memory: MemSpec,
    route: Route,
}

#[derive(Debug, Clone)]
struct Case {
    layout: LayoutSpec,
    mode: TransferMode,
    writes: Vec<Access>,
    /// View reads: (which write's view, view offset, length).
    reads: Vec<(usize, u64, u64)>,
    /// Memory types of a second `read_type` of each write's file type.
    retypes: Vec<MemSpec>,
}

fn case() -> impl Strategy<Value = Case> {
    let access = (
        file_type(),
        0u64..300,
        memory_type(),
        prop_oneof![
            Just(Route::Type),
            (0u64..400).prop_map(Route::ViewAt),
            (0u64..400).prop_map(Route::ViewTyped),
        ],
    )
        .prop_map(|(file, displacement, memory, route)| Access {
            file,
            displacement,
            memory,
            route,
        });
    (
        layout(),
        prop::sample::select(TransferMode::FRAMED.to_vec()),
        prop::collection::vec(access, 1..=5),
        prop::collection::vec((any::<usize>(), 0u64..800, 0u64..700), 1..=3),
        prop::collection::vec(memory_type(), 1..=3),
    )
        .prop_map(|(layout, mode, writes, reads, retypes)| Case {
            layout,
            mode,
            writes,
            reads,
            retypes,
        })
}

/// One access made concrete: the engine's types, the model's, and where its stream lands.
struct Prepared {
    filetype: Datatype,
    flat: Flat,
    displacement: u64,
    memory: MemSpec,
    memtype: Datatype,
    memflat: Flat,
    /// Bytes of the caller's buffer (the memory type's reach, and some slack).
    buffer_bytes: usize,
    /// Stream bytes moved.
    total: u64,
    /// View offset of the stream (0 for `write_type`).
    start: u64,
}

impl Prepared {
    /// The access's file type from its displacement, the stream from view offset `start`
    /// (0 for `write_type`) held in `memory`.
    fn new(access: &Access, memory: MemSpec, start: u64) -> Self {
        let flat = access.file.flat();
        // Move the displacement up so that no byte lies before the start of the file.
        let displacement = access.displacement + (-flat.lowest()).max(0) as u64;
        // Fewer memory instances when the stream would reach too far into the file.
        let mut memory = memory;
        while memory.count() > 1 {
            let total = memory.flat().size() * memory.count();
            let reach = flat.reach(displacement as i64, start + total);
            if reach as u64 <= FILE_CAP_BYTES {
                break;
            }
            memory = memory.with_count(memory.count() / 2);
        }
        let memflat = memory.flat();
        let total = memflat.size() * memory.count();
        let buffer_bytes = (memflat.reach(0, total) + 5) as usize;
        Self {
            filetype: access.file.datatype(),
            flat,
            displacement,
            memory,
            memtype: memory.datatype(),
            memflat,
            buffer_bytes,
            total,
            start,
        }
    }

    /// The file offset of each stream byte `[start, start + length)`.
    fn targets(&self, start: u64, length: u64) -> impl Iterator<Item = u64> + '_ {
        (start..start + length).map(|index| {
            let offset = self.flat.at(self.displacement as i64, index);
            u64::try_from(offset).expect("displacement keeps the type inside the file")
        })
    }

    /// The buffer offset of each stream byte of the memory type.
    fn memory_offsets(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.total).map(|index| self.memflat.at(0, index) as usize)
    }
}

/// The file as the test sees it: bytes never written are zeros; the size is one past the
/// highest byte written.
#[derive(Default)]
struct Model {
    bytes: Vec<u8>,
}

impl Model {
    fn write(&mut self, targets: impl Iterator<Item = u64>, data: &[u8]) {
        for (target, &byte) in targets.zip(data) {
            let target = target as usize;
            if self.bytes.len() <= target {
                self.bytes.resize(target + 1, 0);
            }
            self.bytes[target] = byte;
        }
    }

    fn get(&self, offset: u64) -> u8 {
        self.bytes.get(offset as usize).copied().unwrap_or(0)
    }
}

fn fail(what: &str, error: &ClientError) -> TestCaseError {
    TestCaseError::fail(format!("{what}: {error}"))
}

/// Checks the report of a call that moved `targets`: one request per server touched.
fn check_report(
    report: &IoReport,
    layout: &LayoutSpec,
    targets: impl Iterator<Item = u64>,
    what: &str,
) -> Result<(), TestCaseError> {
    let mut bytes = 0u64;
    let positions: BTreeSet<usize> = targets
        .inspect(|_| bytes += 1)
        .map(|target| layout.position(target))
        .collect();
    prop_assert_eq!(report.bytes, bytes, "{}: bytes", what);
    prop_assert_eq!(
        report.requests,
        positions.len() as u64,
        "{}: one request per server touched {:?}",
        what,
        positions
    );
    prop_assert_eq!(report.servers, positions.len() as u64, "{}: servers", what);
    Ok(())
}

/// A view is declared on every server an access through it touches (otherwise each access
/// would pay for an `UnknownView` and a declaration).
fn check_declared(
    view: &View,
    layout: &LayoutSpec,
    targets: impl Iterator<Item = u64>,
) -> Result<(), TestCaseError> {
    let touched: BTreeSet<usize> = targets.map(|target| layout.position(target)).collect();
    let declared: BTreeSet<usize> = view.positions().iter().copied().collect();
    prop_assert!(
        touched.is_subset(&declared),
        "the view touches servers {:?} but was declared on {:?}",
        touched,
        declared
    );
    Ok(())
}

fn run_case(client: &Client, case: &Case, number: u64) -> Result<(), TestCaseError> {
    let path = format!("/typed-model-{number}");
    let mut file = client
        .create(&path, &case.layout.options())
        .map_err(|error| fail("create", &error))?;
    file.set_transfer_mode(case.mode);
    let mut model = Model::default();
    let mut accesses: Vec<(Prepared, Route, View)> = Vec::new();

    for (round, access) in case.writes.iter().enumerate() {
        let what = format!("write {round} ({:?})", access.route);
        let start = match access.route {
            Route::Type => 0,
            Route::ViewAt(offset) | Route::ViewTyped(offset) => offset,
        };
        let prepared = Prepared::new(access, access.memory, start);
        let view = file
            .set_view(prepared.displacement, &prepared.filetype)
            .map_err(|error| fail("set_view", &error))?;
        let buffer = common::bytes(number * 100 + round as u64, prepared.buffer_bytes);
        let typed_stream: Vec<u8> = prepared.memory_offsets().map(|at| buffer[at]).collect();
        let (report, stream) = match access.route {
            Route::Type => (
                file.write_type(
                    &buffer,
                    &prepared.memtype,
                    prepared.memory.count(),
                    &prepared.filetype,
                    prepared.displacement,
                ),
                typed_stream,
            ),
            Route::ViewAt(offset) => {
                let data = common::bytes(number * 100 + 50 + round as u64, prepared.total as usize);
                (view.write_at(offset, &data), data)
            }
            Route::ViewTyped(offset) => (
                view.write_typed(offset, &buffer, &prepared.memtype, prepared.memory.count()),
                typed_stream,
            ),
        };
        let report = report.map_err(|error| fail(&what, &error))?;
        check_report(
            &report,
            &case.layout,
            prepared.targets(prepared.start, prepared.total),
            &what,
        )?;
        model.write(prepared.targets(prepared.start, prepared.total), &stream);
        check_declared(
            &view,
            &case.layout,
            prepared.targets(prepared.start, prepared.total),
        )?;
        accesses.push((prepared, access.route, view));
    }

    let size = file.stat().map_err(|error| fail("stat", &error))?.size;
    prop_assert_eq!(size, model.bytes.len() as u64, "stat size");

    // Every write read back by its own route.
    for (round, (prepared, route, view)) in accesses.iter().enumerate() {
        let what = format!("read {round} ({route:?})");
        let targets: Vec<u64> = prepared.targets(prepared.start, prepared.total).collect();
        let (report, buffer, expected) = if let Route::ViewAt(offset) = route {
            let mut buffer = vec![0xEEu8; prepared.total as usize];
            let report = view.read_at(*offset, &mut buffer);
            let expected: Vec<u8> = targets.iter().map(|&target| model.get(target)).collect();
            (report, buffer, expected)
        } else {
            let mut buffer = vec![0xEEu8; prepared.buffer_bytes];
            let report = match route {
                Route::ViewTyped(offset) => view.read_typed(
                    *offset,
                    &mut buffer,
                    &prepared.memtype,
                    prepared.memory.count(),
                ),
                _ => file.read_type(
                    &mut buffer,
                    &prepared.memtype,
                    prepared.memory.count(),
                    &prepared.filetype,
                    prepared.displacement,
                ),
            };
            let mut expected = vec![0xEEu8; prepared.buffer_bytes];
            for (at, &target) in prepared.memory_offsets().zip(&targets) {
                expected[at] = model.get(target);
            }
            (report, buffer, expected)
        };
        let report = report.map_err(|error| fail(&what, &error))?;
        check_report(&report, &case.layout, targets.into_iter(), &what)?;
        prop_assert!(buffer == expected, "{} differs from the model", what);
    }

    // Every write's file type read again into another memory type.
    for (round, access) in case.writes.iter().enumerate() {
        let prepared = Prepared::new(access, case.retypes[round % case.retypes.len()], 0);
        let what = format!("read_type {round} into {:?}", prepared.memory);
        let mut buffer = vec![0xEEu8; prepared.buffer_bytes];
        let report = file
            .read_type(
                &mut buffer,
                &prepared.memtype,
                prepared.memory.count(),
                &prepared.filetype,
                prepared.displacement,
            )
            .map_err(|error| fail(&what, &error))?;
        check_report(
            &report,
            &case.layout,
            prepared.targets(0, prepared.total),
            &what,
        )?;
        let mut expected = vec![0xEEu8; prepared.buffer_bytes];
        for (at, target) in prepared
            .memory_offsets()
            .zip(prepared.targets(0, prepared.total))
        {
            expected[at] = model.get(target);
        }
        prop_assert!(buffer == expected, "{} differs from the model", what);
    }

    // Views read at random ranges.
    for &(which, offset, length) in &case.reads {
        let (prepared, _, view) = &accesses[which % accesses.len()];
        let what = format!("view read of {length} bytes at {offset}");
        let mut buffer = vec![0xEEu8; length as usize];
        let report = view
            .read_at(offset, &mut buffer)
            .map_err(|error| fail(&what, &error))?;
        check_report(
            &report,
            &case.layout,
            prepared.targets(offset, length),
            &what,
        )?;
        check_declared(view, &case.layout, prepared.targets(offset, length))?;
        let expected: Vec<u8> = prepared
            .targets(offset, length)
            .map(|target| model.get(target))
            .collect();
        prop_assert!(buffer == expected, "{} differs from the model", what);
    }

    // The plain file, and some zeros past its end.
    let mut whole = vec![0xEEu8; model.bytes.len() + 64];
    file.read_at(0, &mut whole)
        .map_err(|error| fail("whole-file read", &error))?;
    prop_assert!(
        whole[..model.bytes.len()] == model.bytes[..],
        "the file differs from the model"
    );
    prop_assert!(whole[model.bytes.len()..].iter().all(|&byte| byte == 0));

    // Release one view early, the rest at close.
    let (_, _, first) = accesses.swap_remove(0);
    first.release().map_err(|error| fail("release", &error))?;
    drop(accesses);
    file.close().map_err(|error| fail("close", &error))?;
    client
        .unlink(&path)
        .map_err(|error| fail("unlink", &error))?;
    Ok(())
}

#[test]
fn datatype_and_view_io_match_a_byte_model() {
    let cluster = Cluster::start(6);
    let client = cluster.client();
    let mut runner = TestRunner::new(Config {
        cases: 40,
        failure_persistence: None,
        ..Config::default()
    });
    let counter = std::cell::Cell::new(0u64);
    runner
        .run(&case(), |case| {
            counter.set(counter.get() + 1);
            run_case(&client, &case, counter.get())
        })
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// Deterministic tests.

fn four_bytes() -> [u8; 4] {
    [0; 4]
}

fn byte() -> Datatype {
    Datatype::byte()
}

/// The code and message of an error.
fn error<T: std::fmt::Debug>(result: Result<T, ClientError>) -> (ErrorCode, String) {
    let error = result.expect_err("the call must fail");
    (error.code().expect("an error code"), error.to_string())
}

/// The runs (offset, length) of each server in a pattern of period 48 over three servers.
const THREE_SERVER_RUNS: [&[(i64, u64)]; 3] =
    [&[(0, 5), (20, 10)], &[(5, 15), (40, 8)], &[(30, 10)]];

/// The pattern of [`THREE_SERVER_RUNS`]: one resized hindexed type per server.
fn three_server_pattern() -> Vec<Datatype> {
    THREE_SERVER_RUNS
        .iter()
        .map(|runs| {
            let (displacements, lengths): (Vec<i64>, Vec<u64>) = runs.iter().copied().unzip();
            Datatype::resized(
                0,
                48,
                &Datatype::hindexed(&lengths, &displacements, &byte()).unwrap(),
            )
            .unwrap()
        })
        .collect()
}

/// A file of 64-byte rows over 4 servers of 64-byte units (row r on server r mod 4), and the
/// type of columns 0..16 of its 64 rows.
fn columns_of_rows(
    client: &tessera_client::Client,
    path: &str,
) -> (tessera_client::File, Datatype) {
    let file = client
        .create(
            path,
            &CreateOptions {
                stripe_unit_bytes: 64,
                server_count: 4,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    (file, Datatype::vector(64, 16, 64, &byte()).unwrap())
}

#[test]
fn view_io_sends_one_request_per_server_and_a_matching_pattern_view_one_piece() {
    let cluster = Cluster::start(4);
    let client = cluster.client();

    // Columns 0..16 of 64-byte rows over 4 servers of 64-byte units: row r is on server
    // r mod 4.
    let (file, columns) = columns_of_rows(&client, "/rows");
    for mode in TransferMode::FRAMED {
        let mut file = file.clone();
        file.set_transfer_mode(mode);
        // One storage call per piece, so the counts do not depend on the cost model.
        file.set_storage_plan(tessera_proto::StoragePlan::PerPiece);
        let view = file.set_view(0, &columns).unwrap();
        assert!(!view.matches_layout());
        let data = common::bytes(7, 1024);
        let report = view.write_at(0, &data).unwrap();
        assert_eq!((report.requests, report.servers), (4, 4), "{mode:?}");
        assert_eq!(report.storage_pieces, 64, "one piece per row ({mode:?})");
        for (offset, length, servers) in [(0, 16, 1), (16, 32, 2), (8, 40, 3), (0, 640, 4)] {
            let mut part = vec![0u8; length];
            let report = view.read_at(offset, &mut part).unwrap();
            assert_eq!(
                report.requests, servers,
                "read of {length} at {offset} ({mode:?})"
            );
            assert_eq!(&part[..], &data[offset as usize..offset as usize + length]);
        }
        // A strided memory type: the call still sends one request per server.
        let memtype = Datatype::hvector(32, 16, 32, &byte()).unwrap();
        let mut memory = vec![0u8; 1024];
        let report = view.read_typed(0, &mut memory, &memtype, 1).unwrap();
        assert_eq!(report.requests, 4);
        for block in 0..32 {
            assert_eq!(
                &memory[block * 32..block * 32 + 16],
                &data[block * 16..block * 16 + 16]
            );
            assert!(memory[block * 32 + 16..block * 32 + 32]
                .iter()
                .all(|&b| b == 0));
        }
        view.release().unwrap();
    }

    // A pattern layout, and views that match one server's share: one server, one piece.
    let patterned = client
        .create(
            "/dealt",
            &CreateOptions {
                pattern: three_server_pattern(),
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let mut model = vec![0u8; 48 * 10];
    for (position, datatype) in three_server_pattern().iter().enumerate() {
        let view = patterned.set_view(0, datatype).unwrap();
        assert_eq!(view.positions(), &[position]);
        assert!(view.matches_layout());
        let data = common::bytes(position as u64, datatype.size() as usize * 10);
        let report = view.write_at(0, &data).unwrap();
        assert_eq!(
            (report.requests, report.storage_pieces),
            (1, 1),
            "server {position}"
        );
        let mut part = vec![0u8; 17];
        let report = view.read_at(3, &mut part).unwrap();
        // One storage call, or none when the iod sends the cached bytes from its mapping.
        assert_eq!(report.requests, 1);
        assert!(report.storage_pieces <= 1, "{report:?}");
        assert_eq!(&part[..], &data[3..20]);
        let mut stream = 0usize;
        for period in 0..10 {
            for &(offset, length) in THREE_SERVER_RUNS[position] {
                let start = period * 48 + offset as usize;
                let length = length as usize;
                model[start..start + length].copy_from_slice(&data[stream..stream + length]);
                stream += length;
            }
        }
        // The same share one period later is still one server and one piece.
        let later = patterned.set_view(48, datatype).unwrap();
        assert_eq!(later.positions(), &[position]);
        assert!(later.matches_layout());
        let mut back = vec![0u8; data.len() - datatype.size() as usize];
        let report = later.read_at(0, &mut back).unwrap();
        assert_eq!(report.requests, 1);
        assert!(report.storage_pieces <= 1, "{report:?}");
        assert_eq!(&back[..], &data[datatype.size() as usize..]);
    }
    let mut whole = vec![0u8; model.len()];
    patterned.read_at(0, &mut whole).unwrap();
    assert_eq!(whole, model);
    assert_eq!(patterned.stat().unwrap().size, 480);
}

/// A view keeps the plan of its last call, and each server the share of the view's last
/// request: calls that repeat a range, change only its end or only its start, and come from
/// clones on two threads at once each put their bytes where the view says (checked through
/// the view and through plain file reads, which no kept plan or share touches).
#[test]
fn a_view_reuses_the_plan_of_a_repeated_range_and_never_that_of_another() {
    let cluster = Cluster::start(4);
    let client = cluster.client();
    let (file, columns) = columns_of_rows(&client, "/kept");
    let view = file.set_view(0, &columns).unwrap();
    let mut model = vec![0u8; 1024];
    let check_file = |model: &[u8], what: &str| {
        let mut rows = vec![0u8; 4096];
        file.read_at(0, &mut rows).unwrap();
        for (row, expected) in model.chunks(16).enumerate() {
            assert_eq!(&rows[row * 64..row * 64 + 16], expected, "row {row} {what}");
        }
    };
    let calls = [
        (0, 640),
        (0, 640),
        (0, 320),
        (16, 320),
        (0, 640),
        (16, 320),
        (16, 320),
    ];
    for (round, &(offset, length)) in calls.iter().enumerate() {
        let data = common::bytes(round as u64 + 1, length);
        view.write_at(offset as u64, &data).unwrap();
        model[offset..offset + length].copy_from_slice(&data);
        let mut back = vec![0u8; length];
        view.read_at(offset as u64, &mut back).unwrap();
        assert_eq!(back, model[offset..offset + length], "call {round}");
        check_file(&model, &format!("after call {round}"));
    }
    // Clones share the kept plan; each thread repeats its own range.
    std::thread::scope(|scope| {
        for (thread, offset) in [(0u64, 0usize), (1, 512)] {
            let view = view.clone();
            scope.spawn(move || {
                for round in 0..20 {
                    let data = common::bytes(100 + thread * 20 + round, 512);
                    view.write_at(offset as u64, &data).unwrap();
                    let mut back = vec![0u8; 512];
                    view.read_at(offset as u64, &mut back).unwrap();
                    assert_eq!(back, data, "thread {thread} round {round}");
                }
            });
        }
    });
    model[..512].copy_from_slice(&common::bytes(119, 512));
    model[512..].copy_from_slice(&common::bytes(139, 512));
    let mut whole = vec![0u8; 1024];
    view.read_at(0, &mut whole).unwrap();
    assert_eq!(whole, model);
    check_file(&model, "after the threads");
}

#[test]
fn bad_input_gets_clear_errors() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let file = client.create("/bad", &CreateOptions::default()).unwrap();
    file.write_at(0, &[1u8; 100]).unwrap();

    // A memory type reaching past the end of the buffer, or before its start.
    let (code, message) =
        error(file.write_type(&[0u8; 10], &Datatype::bytes(20).unwrap(), 1, &byte(), 0));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(
        message.contains("outside the buffer of 10 bytes"),
        "{message}"
    );
    let before = Datatype::hindexed(&[4], &[-4], &byte()).unwrap();
    let (code, message) = error(file.write_type(&[0u8; 10], &before, 1, &byte(), 0));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("outside the buffer"), "{message}");
    let mut buffer = [0u8; 10];
    let (code, message) = error(file.read_type(&mut buffer, &byte(), 11, &byte(), 0));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("outside the buffer"), "{message}");

    // A read memory type that selects a byte twice.
    let twice = Datatype::hindexed(&[4, 4], &[0, 2], &byte()).unwrap();
    let (code, message) = error(file.read_type(&mut buffer, &twice, 1, &byte(), 0));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(
        message.contains("selects byte 2") && message.contains("twice"),
        "{message}"
    );
    // Writing from it is fine: the byte is sent twice.
    file.write_type(&[5u8; 10], &twice, 1, &byte(), 0).unwrap();
    // So is a view read into it.
    let view = file.set_view(0, &byte()).unwrap();
    let (code, message) = error(view.read_typed(0, &mut buffer, &twice, 1));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("twice"), "{message}");

    // A file type that reaches before byte 0: a negative stride from displacement 0.
    let backwards = Datatype::vector(3, 1, -4, &byte()).unwrap();
    let (code, message) = error(file.write_type(&[0u8; 3], &byte(), 3, &backwards, 0));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(
        message.contains("write of /bad")
            && message.contains("byte -8")
            && message.contains("before the start of the file"),
        "{message}"
    );
    let (code, message) = error(file.read_type(&mut buffer[..3], &byte(), 3, &backwards, 0));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(
        message.contains("before the start of the file"),
        "{message}"
    );
    let (code, message) = error(file.set_view(0, &backwards));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(
        message.contains("before the start of the file"),
        "{message}"
    );
    // From displacement 8 the same type is fine.
    file.write_type(&[7u8; 3], &byte(), 3, &backwards, 8)
        .unwrap();
    let mut three = [0u8; 3];
    file.set_view(8, &backwards)
        .unwrap()
        .read_at(0, &mut three)
        .unwrap();
    assert_eq!(three, [7u8; 3]);

    // A view of a type that selects nothing.
    let empty = Datatype::contiguous(0, &byte()).unwrap();
    let (code, message) = error(file.set_view(0, &empty));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(
        message.contains("/bad") && message.contains("selects no bytes"),
        "{message}"
    );
    // A datatype write of some bytes into such a type has nowhere to put them.
    let (code, message) = error(file.write_type(&[0u8; 4], &byte(), 4, &empty, 0));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("selects no bytes"), "{message}");

    // Counts past the limits.
    let (code, message) = error(file.write_type(
        &[0u8; 4],
        &Datatype::bytes(1 << 40).unwrap(),
        1 << 40,
        &byte(),
        0,
    ));
    assert_eq!(code, ErrorCode::LimitExceeded);
    assert!(message.contains("file_bytes_max"), "{message}");

    // Empty accesses do nothing and send nothing.
    let report = file.write_type(&[], &byte(), 0, &backwards, 0).unwrap();
    assert_eq!((report.requests, report.bytes), (0, 0));
    let view = file
        .set_view(0, &Datatype::resized(0, 8, &byte()).unwrap())
        .unwrap();
    assert_eq!(view.write_at(1 << 40, &[]).unwrap().requests, 0);
    assert_eq!(view.read_at(7, &mut []).unwrap().requests, 0);

    // Ranges past what a file can hold: the same limit error as for a list call.
    let (code, message) = error(view.read_at(u64::MAX, &mut four_bytes()));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("overflows"), "{message}");
    let (list_code, list_message) = error(file.read_at(1 << 62, &mut four_bytes()));
    assert_eq!(list_code, ErrorCode::LimitExceeded);
    for (code, message) in [
        error(view.read_at(1 << 60, &mut four_bytes())),
        error(view.write_at(1 << 60, &four_bytes())),
        error(file.write_type(&[0; 4], &byte(), 4, &byte(), 1 << 62)),
        error(file.read_type(&mut four_bytes(), &byte(), 4, &byte(), 1 << 62)),
        error(file.set_view(1 << 62, &byte())),
        error(file.set_view(u64::MAX, &byte())),
    ] {
        assert_eq!(code, list_code, "{message}");
        assert!(
            message.contains("/bad") && message.contains("file_bytes_max"),
            "{message} (a list call says: {list_message})"
        );
    }

    // Writes on a file opened for reading only, reads on one opened for writing only.
    let reader = client.open("/bad", OpenMode::ReadOnly).unwrap();
    let (code, message) = error(reader.write_type(&[0u8; 4], &byte(), 4, &byte(), 0));
    assert_eq!(code, ErrorCode::PermissionDenied);
    assert!(
        message.contains("/bad") && message.contains("reading only") && message.contains("write"),
        "{message}"
    );
    let reader_view = reader.set_view(0, &byte()).unwrap();
    let (code, message) = error(reader_view.write_at(0, &[0u8; 4]));
    assert_eq!(code, ErrorCode::PermissionDenied);
    assert!(message.contains("reading only"), "{message}");
    let (code, _) = error(reader_view.write_typed(0, &[0u8; 4], &byte(), 4));
    assert_eq!(code, ErrorCode::PermissionDenied);
    let mut four = [0u8; 4];
    reader_view.read_at(10, &mut four).unwrap();
    assert_eq!(four, [1u8; 4]);
    let writer = client.open("/bad", OpenMode::WriteOnly).unwrap();
    let (code, message) = error(writer.read_type(&mut four, &byte(), 4, &byte(), 0));
    assert_eq!(code, ErrorCode::PermissionDenied);
    assert!(
        message.contains("writing only") && message.contains("read"),
        "{message}"
    );
    let (code, _) = error(writer.set_view(0, &byte()).unwrap().read_at(0, &mut four));
    assert_eq!(code, ErrorCode::PermissionDenied);
    reader.close().unwrap();
    writer.close().unwrap();
    file.close().unwrap();
}

#[test]
fn a_bad_pattern_is_refused_naming_the_problem() {
    let cluster = Cluster::start(3);
    let client = cluster.client();
    let share = |extent: i64, lengths: &[u64], displacements: &[i64]| {
        Datatype::resized(
            0,
            extent,
            &Datatype::hindexed(lengths, displacements, &byte()).unwrap(),
        )
        .unwrap()
    };
    let cases: [(&str, Vec<Datatype>, &str); 6] = [
        (
            "/overlap",
            vec![share(16, &[10], &[0]), share(16, &[8], &[8])],
            "the types overlap at byte 8",
        ),
        (
            "/gap",
            vec![share(16, &[4], &[0]), share(16, &[8], &[8])],
            "no type holds bytes 4..8",
        ),
        (
            "/short",
            vec![share(16, &[4], &[0]), share(16, &[8], &[4])],
            "no type holds bytes 12..16",
        ),
        (
            "/extents",
            vec![share(16, &[8], &[0]), share(32, &[8], &[8])],
            "extent 16",
        ),
        (
            "/backwards",
            vec![share(16, &[4, 4], &[8, 0]), share(16, &[4, 4], &[4, 12])],
            "runs must increase",
        ),
        (
            "/empty",
            vec![
                share(16, &[16], &[0]),
                Datatype::resized(0, 16, &Datatype::contiguous(0, &byte()).unwrap()).unwrap(),
            ],
            "type 1 selects no bytes",
        ),
    ];
    for (path, pattern, problem) in cases {
        let (code, message) = error(client.create(
            path,
            &CreateOptions {
                pattern,
                ..CreateOptions::default()
            },
        ));
        assert_eq!(code, ErrorCode::InvalidArgument, "{path}: {message}");
        assert!(
            message.contains(path) && message.contains(problem),
            "{path}: expected {problem:?} in {message}"
        );
        assert!(client.stat(path).is_err(), "{path} must not exist");
    }
    // More types than servers, and a server count that contradicts the pattern.
    let four: Vec<Datatype> = (0..4).map(|i| share(16, &[4], &[i * 4])).collect();
    let (code, message) = error(client.create(
        "/four",
        &CreateOptions {
            pattern: four.clone(),
            ..CreateOptions::default()
        },
    ));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("cluster has 3"), "{message}");
    let (code, message) = error(client.create(
        "/count",
        &CreateOptions {
            pattern: four[..2].to_vec(),
            server_count: 3,
            ..CreateOptions::default()
        },
    ));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("needs 2 servers"), "{message}");
}

/// Every server answers at once after a restart: a kept connection found dead is replaced
/// and the call repeated (docs/SEMANTICS.md), so the caller sees no failure.
fn reconnect(client: &Client) {
    for (name, reply) in client.ping_all() {
        reply.unwrap_or_else(|error| panic!("{name} after restart: {error}"));
    }
}

#[test]
fn views_survive_a_restart_of_every_iod() {
    let cluster = Cluster::start(4);
    let client = cluster.client_with_timeout(Duration::from_secs(10));
    let striped = client
        .create(
            "/striped",
            &CreateOptions {
                stripe_unit_bytes: 64,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let patterned = client
        .create(
            "/patterned",
            &CreateOptions {
                pattern: three_server_pattern(),
                ..CreateOptions::default()
            },
        )
        .unwrap();
    // Every other 24-byte block, from byte 40: runs that cross units and periods.
    let filetype = Datatype::resized(0, 48, &Datatype::bytes(24).unwrap()).unwrap();
    let mut views = Vec::new();
    for (file, mode) in [&striped, &patterned]
        .into_iter()
        .flat_map(|file| TransferMode::FRAMED.map(|mode| (file, mode)))
    {
        let mut file = file.clone();
        file.set_transfer_mode(mode);
        // Each mode its own region of 4800 bytes, from byte 40.
        let displacement = 40 + 4800 * (views.len() as u64 % 3);
        let view = file.set_view(displacement, &filetype).unwrap();
        let data = common::bytes(views.len() as u64, 2400);
        view.write_at(0, &data).unwrap();
        views.push((view, data, mode, displacement));
    }

    cluster.restart_iods();
    reconnect(&client);

    for (view, data, mode, _) in &mut views {
        let servers = view.file().layout().servers().to_vec();
        for &server in &servers {
            assert!(
                !declared(&cluster, view.file(), view.id(), usize::from(server)),
                "{mode:?}: iod {server} still holds the view after its restart"
            );
        }
        // First a read: every server answers UnknownView, the view declares itself again.
        let mut back = vec![0u8; data.len()];
        view.read_at(0, &mut back)
            .unwrap_or_else(|error| panic!("{mode:?} read after restart: {error}"));
        assert!(back == *data, "{mode:?}: data after restart");
        for &position in view.positions() {
            let server = usize::from(servers[position]);
            assert!(
                declared(&cluster, view.file(), view.id(), server),
                "{mode:?}: iod {server}"
            );
        }
        // Then new data through the same view, checked through another route.
        let new = common::bytes(99, 1200);
        view.write_at(600, &new).unwrap();
        data[600..1800].copy_from_slice(&new);
    }
    // The size survives too, and the mds replaces its dead connections to the iods itself.
    let size = striped.stat().unwrap().size;
    assert_eq!(size, 40 + 4800 * 2 + 99 * 48 + 24);

    cluster.restart_iods();
    // No ping this time: the first call meets the dead connections itself.
    for (view, data, mode, displacement) in &views {
        // This time a write first, in every transfer mode (the servers drop its data).
        view.write_at(0, &data[..100])
            .unwrap_or_else(|error| panic!("{mode:?} write after restart: {error}"));
        let mut back = vec![0u8; data.len()];
        view.file()
            .read_type(
                &mut back,
                &byte(),
                data.len() as u64,
                &filetype,
                *displacement,
            )
            .unwrap();
        assert!(back == *data, "{mode:?}: data after the second restart");
    }
    for file in [striped, patterned] {
        file.close().unwrap();
    }
}

/// A connection of this test's own to iod `index`, for requests the client never sends.
fn raw_connection(cluster: &Cluster, index: usize) -> tessera_net::Connection {
    tessera_net::Connection::connect(
        "raw test requests",
        &cluster.iod_address(index),
        Duration::from_secs(5),
        &cluster.signer(),
        None,
    )
    .unwrap()
}

/// Whether server `index` still holds view `view_id` of `file`: declaring the same id with
/// another type is refused while it does. A successful probe is released again.
fn declared(cluster: &Cluster, file: &File, view_id: u64, index: usize) -> bool {
    let mut connection = raw_connection(cluster, index);
    let capability = file.capability().unwrap();
    let probe = DeclareView {
        handle: file.handle(),
        capability: capability.clone(),
        view_id,
        file: FileType {
            layout: file.layout().clone(),
            position: 0,
            filetype: Datatype::bytes(7).unwrap(),
            displacement: 0,
        },
    };
    match connection.call(&probe) {
        Ok(_) => {
            connection
                .call(&ReleaseView {
                    handle: file.handle(),
                    capability,
                    view_id,
                })
                .unwrap();
            false
        }
        Err(error) => {
            let remote = error.remote().expect("a refusal, not a broken connection");
            assert_eq!(remote.code, ErrorCode::InvalidArgument, "{remote:?}");
            assert!(remote.message.contains("another file type"), "{remote:?}");
            true
        }
    }
}

#[test]
fn bad_stream_ranges_are_refused_by_the_server_and_the_connection_stays_usable() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let file = client
        .create(
            "/ranges",
            &CreateOptions {
                stripe_unit_bytes: 64,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    file.write_at(0, &[7u8; 1024]).unwrap();
    let mut connection = raw_connection(&cluster, 0);
    let capability = file.capability().unwrap();
    let read = |end: u64, ranges: Vec<Piece>| ReadType {
        handle: file.handle(),
        capability: capability.clone(),
        mode: TransferMode::Gather,
        storage: StoragePlan::Auto,
        file: FileType {
            layout: file.layout().clone(),
            position: 0,
            filetype: Datatype::vector(16, 16, 32, &byte()).unwrap(),
            displacement: 0,
        },
        start: 0,
        end,
        ranges,
    };
    let too_many = (0..=STREAM_RANGES_MAX as u64)
        .map(|k| Piece::new(k * 2, 1))
        .collect();
    for (request, code, words) in [
        (
            read(64, vec![Piece::new(32, 8), Piece::new(0, 8)]),
            ErrorCode::InvalidArgument,
            "stream range 0+8",
        ),
        (
            read(64, vec![Piece::new(60, 8)]),
            ErrorCode::InvalidArgument,
            "outside the request's 0..64",
        ),
        (
            read(64, vec![Piece::new(8, 0)]),
            ErrorCode::InvalidArgument,
            "empty",
        ),
        (
            read(8192, too_many),
            ErrorCode::LimitExceeded,
            "stream_ranges_max",
        ),
    ] {
        let error = connection.call(&request).unwrap_err();
        let remote = error
            .remote()
            .expect("an error reply, not a broken connection");
        assert_eq!(remote.code, code, "{remote:?}");
        assert!(remote.message.contains(words), "{remote:?}");
    }
    // Still in step: the next request is answered.
    connection
        .call(&ReleaseView {
            handle: file.handle(),
            capability,
            view_id: 1,
        })
        .unwrap();
}

#[test]
fn close_releases_views_and_a_later_access_declares_again() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let file = client
        .create(
            "/closing",
            &CreateOptions {
                stripe_unit_bytes: 64,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let filetype = Datatype::vector(8, 32, 48, &byte()).unwrap();
    let view = file.set_view(0, &filetype).unwrap();
    let other = file.clone().set_view(16, &filetype).unwrap();
    let data = common::bytes(3, 256);
    view.write_at(0, &data).unwrap();
    for index in 0..2 {
        assert!(declared(&cluster, &file, view.id(), index));
        assert!(declared(&cluster, &file, other.id(), index));
    }

    // Closing one clone releases the views declared through every clone.
    file.clone().close().unwrap();
    for index in 0..2 {
        assert!(!declared(&cluster, &file, view.id(), index), "iod {index}");
        assert!(!declared(&cluster, &file, other.id(), index), "iod {index}");
    }

    // The views still work: each declares itself again on first use.
    let mut back = vec![0u8; 256];
    view.read_at(0, &mut back).unwrap();
    assert_eq!(back, data);
    other.write_at(0, &[4u8; 16]).unwrap();
    assert!(declared(&cluster, &file, view.id(), 0));

    // A view declared again belongs to the file again: the next close releases it.
    file.clone().close().unwrap();
    for index in 0..2 {
        assert!(!declared(&cluster, &file, view.id(), index), "iod {index}");
        assert!(!declared(&cluster, &file, other.id(), index), "iod {index}");
    }
    let mut whole = vec![0u8; 16];
    other.file().read_at(16, &mut whole).unwrap();
    assert_eq!(whole, [4u8; 16]);
}

#[test]
fn a_view_evicted_from_a_full_table_declares_itself_again() {
    let cluster = Cluster::start(1);
    let client = cluster.client();
    let file = client
        .create(
            "/many-views",
            &CreateOptions {
                stripe_unit_bytes: 64,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let filetype = Datatype::resized(0, 8, &Datatype::bytes(4).unwrap()).unwrap();
    let oldest = file.set_view(0, &filetype).unwrap();
    oldest.write_at(0, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    // Fill the table past its limit: the oldest view is dropped.
    for displacement in 0..tessera_proto::limits::IOD_VIEWS_MAX as u64 {
        file.set_view(displacement, &filetype).unwrap();
    }
    assert!(!declared(&cluster, &file, oldest.id(), 0), "evicted");
    let mut back = [0u8; 8];
    oldest.read_at(0, &mut back).unwrap();
    assert_eq!(back, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(declared(&cluster, &file, oldest.id(), 0), "declared again");
    file.close().unwrap();
}

#[test]
fn shares_past_the_request_limits_split_into_rounds_both_sides_agree_on() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let file = client
        .create(
            "/split",
            &CreateOptions {
                stripe_unit_bytes: 64,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    // Every other byte: 32 local pieces in each 64-byte unit, so 70 000 stream bytes on
    // each server need two requests of at most request_pieces_max (65 536) pieces.
    let every_other = Datatype::resized(0, 2, &byte()).unwrap();
    let total = 140_000usize;
    for (region, mode) in TransferMode::FRAMED.into_iter().enumerate() {
        let mut file = file.clone();
        file.set_transfer_mode(mode);
        // One storage call per piece, so the counts do not depend on the cost model.
        file.set_storage_plan(tessera_proto::StoragePlan::PerPiece);
        let displacement = (region * 2 * total) as u64;
        let data = common::bytes(region as u64, total);
        let report = file
            .write_type(&data, &byte(), total as u64, &every_other, displacement)
            .unwrap();
        assert_eq!((report.requests, report.servers), (4, 2), "{mode:?}");
        assert_eq!(report.storage_pieces, total as u64, "{mode:?}");
        let mut back = vec![0u8; total];
        let report = file
            .read_type(&mut back, &byte(), total as u64, &every_other, displacement)
            .unwrap();
        assert_eq!(report.requests, 4, "{mode:?}");
        assert!(back == data, "{mode:?}: read_type");
        let view = file.set_view(displacement, &every_other).unwrap();
        let mut part = vec![0u8; 138_000];
        let report = view.read_at(1001, &mut part).unwrap();
        assert_eq!(report.requests, 4, "{mode:?}");
        assert!(part[..] == data[1001..139_001], "{mode:?}: view");
        let report = view.write_at(1001, &part).unwrap();
        assert_eq!(report.requests, 4, "{mode:?}");
        let mut whole = vec![0u8; 2 * total];
        file.read_at(displacement, &mut whole).unwrap();
        assert!(
            whole.iter().step_by(2).copied().eq(data.iter().copied())
                && whole.iter().skip(1).step_by(2).all(|&b| b == 0),
            "{mode:?}: the file"
        );
    }
    // A share past message_bulk_bytes_max (16 MiB) on one server: two requests.
    let big = client
        .create(
            "/big",
            &CreateOptions {
                server_count: 1,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let blocks = Datatype::resized(0, 1 << 20, &Datatype::bytes(1 << 19).unwrap()).unwrap();
    let data = common::bytes(5, 33 << 19);
    let view = big.set_view(0, &blocks).unwrap();
    let report = view.write_at(0, &data).unwrap();
    assert_eq!(report.requests, 2);
    let mut back = vec![0u8; data.len()];
    assert_eq!(view.read_at(0, &mut back).unwrap().requests, 2);
    assert!(back == data);
}
