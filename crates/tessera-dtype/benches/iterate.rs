//! Criterion benchmarks of the engine's hot loop: walking the runs of a type.
//!
//! Each benchmark walks a whole stream and reports its throughput in runs (criterion's
//! "elements"), so the time per element criterion prints *is* the time per run:
//!
//! - a vector of 2^20 blocks, one byte each and eight bytes each (the acceptance:
//!   at most 20 ns per run);
//! - a 1024 x 1024 sub-block and a single column of a 4096 x 4096 array of doubles;
//! - streaming against flattening: the same vector walked lazily in constant memory, and
//!   collected into the flat list of runs an engine without lazy iteration would build. The
//!   heap each way takes is measured once with a counting allocator and printed.
//!
//! Run with `cargo bench -p tessera-dtype --bench iterate` (add `-- --quick` for a short run).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tessera_dtype::{Datatype, Order, Run, Runs};

/// Blocks in the vector benchmarks.
const VECTOR_BLOCKS: u64 = 1 << 20;
/// Side of the square array of doubles, and of its sub-block.
const ARRAY_SIDE: u64 = 4096;
const SUBARRAY_SIDE: u64 = 1024;
const DOUBLE_BYTES: u64 = 8;

/// Counts heap bytes: the total allocated, and the most live at once since the last reset.
struct CountingAllocator;

static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK_BYTES: AtomicU64 = AtomicU64::new(0);

fn grew(bytes: usize) {
    let live = LIVE_BYTES.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
    PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    LIVE_BYTES.fetch_sub(bytes as u64, Ordering::Relaxed);
}

// SAFETY: every method forwards its arguments unchanged to the system allocator, so the
// caller's obligations carry over; the counters are atomics, which neither allocate nor panic.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded unchanged; the caller meets `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: forwarded unchanged; `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        shrank(layout.size());
        // SAFETY: forwarded unchanged; `ptr` came from `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `work` and returns its result with the most heap bytes it held at once.
fn peak_heap_bytes<T>(work: impl FnOnce() -> T) -> (T, u64) {
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    PEAK_BYTES.store(before, Ordering::Relaxed);
    let result = work();
    (result, PEAK_BYTES.load(Ordering::Relaxed) - before)
}

/// Walks every run, touching each so that nothing is optimised away.
fn walk(runs: Runs<'_>) -> u64 {
    runs.fold(0u64, |sum, run| {
        sum.wrapping_add(run.length)
            .wrapping_add(black_box(run.offset).unsigned_abs())
    })
}

fn run_count(datatype: &Datatype) -> u64 {
    datatype.all_runs(1).expect("a small stream").count() as u64
}

fn vectors(c: &mut Criterion) {
    let byte = Datatype::byte();
    let mut group = c.benchmark_group("vector of 2^20 blocks (time per element = ns per run)");
    for (name, blocklen, stride) in [("1-byte blocks", 1, 2), ("8-byte blocks", 8, 16)] {
        let vector = Datatype::vector(VECTOR_BLOCKS, blocklen, stride, &byte).expect("vector");
        let runs = run_count(&vector);
        assert_eq!(runs, VECTOR_BLOCKS, "every block is one run");
        group.throughput(Throughput::Elements(runs));
        group.bench_function(BenchmarkId::new("runs", name), |b| {
            b.iter(|| walk(black_box(&vector).all_runs(1).expect("a small stream")));
        });
    }
    group.finish();
}

fn subarrays(c: &mut Criterion) {
    let double = Datatype::bytes(DOUBLE_BYTES).expect("8 bytes");
    let sizes = [ARRAY_SIDE, ARRAY_SIDE];
    let middle = (ARRAY_SIDE - SUBARRAY_SIDE) / 2;
    let cases = [
        (
            "1024x1024 block",
            [SUBARRAY_SIDE, SUBARRAY_SIDE],
            [middle, middle],
        ),
        ("one column", [ARRAY_SIDE, 1], [0, middle]),
    ];
    let mut group =
        c.benchmark_group("subarray of 4096x4096 doubles (time per element = ns per run)");
    for (name, subsizes, starts) in cases {
        let subarray =
            Datatype::subarray(&sizes, &subsizes, &starts, Order::C, &double).expect("subarray");
        group.throughput(Throughput::Elements(run_count(&subarray)));
        group.bench_function(BenchmarkId::new("runs", name), |b| {
            b.iter(|| walk(black_box(&subarray).all_runs(1).expect("a small stream")));
        });
    }
    group.finish();
}

fn streaming_against_flattening(c: &mut Criterion) {
    let vector = Datatype::vector(VECTOR_BLOCKS, 1, 2, &Datatype::byte()).expect("vector");
    let runs = run_count(&vector);

    let (_, streaming_bytes) = peak_heap_bytes(|| walk(vector.all_runs(1).expect("stream")));
    let (flat, flattening_bytes) =
        peak_heap_bytes(|| vector.all_runs(1).expect("stream").collect::<Vec<Run>>());
    eprintln!(
        "memory for {runs} runs: streaming holds {} B of iterator ({} B inline + {streaming_bytes} B \
         of frame stack, depth {}); flattening holds {flattening_bytes} B of heap ({} runs x {} B, \
         plus growth), {:.0}x more",
        std::mem::size_of::<Runs>() as u64 + streaming_bytes,
        std::mem::size_of::<Runs>(),
        vector.depth(),
        flat.len(),
        std::mem::size_of::<Run>(),
        flattening_bytes as f64 / (std::mem::size_of::<Runs>() as u64 + streaming_bytes) as f64,
    );
    drop(flat);

    let mut group =
        c.benchmark_group("streaming vs flattening 2^20 runs (time per element = ns per run)");
    group.throughput(Throughput::Elements(runs));
    group.bench_function("stream lazily", |b| {
        b.iter(|| walk(black_box(&vector).all_runs(1).expect("stream")));
    });
    group.bench_function("flatten to a Vec, then walk it", |b| {
        b.iter(|| {
            let flat: Vec<Run> = black_box(&vector).all_runs(1).expect("stream").collect();
            flat.iter().fold(0u64, |sum, run| {
                sum.wrapping_add(run.length)
                    .wrapping_add(black_box(run.offset).unsigned_abs())
            })
        });
    });
    group.finish();
}

criterion_group!(benches, vectors, subarrays, streaming_against_flattening);
criterion_main!(benches);
