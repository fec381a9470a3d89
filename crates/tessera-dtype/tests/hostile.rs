//! Regression inputs the datatype fuzz target found (`fuzz/fuzz_targets/datatype.rs`): each
//! decodes, or is refused, and every walk of its stream stays within `i64` without wrapping.

use tessera_dtype::{reference, wire, Datatype};

/// A vector whose children's bounds lie far below zero, with a stride near `i64::MIN`: the
/// walk added the child's offset to the frame's base with `+` (a panic in debug builds, a
/// wrapped file offset in release builds).
const OFFSETS_NEAR_I64_MIN: &str = "0105000000010800000000000000020000000004000000000200000000000000000000e8fdffffffffffff010480000000000000040300000002000000000000000000010000000000000000000000000008ffffffffffffefff00000000000000010000002800000000000000000001000000000004030000000100000000000000000000000100000000000000010000004000000000000000010000000000000003000000c0ffffffffffffff0300000000000000";

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap())
        .collect()
}

/// Walks what the fuzz target walks: up to three instances (64 KiB at most), split anywhere.
fn walk_like_the_fuzzer(datatype: &Datatype) {
    let several = datatype.size().saturating_mul(3).min(64 << 10);
    let end = if datatype.runs(0, 0, several).is_ok() {
        several
    } else {
        datatype.size().min(64 << 10)
    };
    for start in [0, end / 3, end / 2, end.saturating_sub(1)] {
        if let Ok(runs) = datatype.runs(0, start, end) {
            let bytes: u64 = runs.map(|run| run.length).sum();
            assert_eq!(bytes, end - start);
        }
    }
    // Small types: the very runs the naive reference flattener gives.
    if datatype.size() <= 1024 {
        let runs: Vec<(i64, u64)> = datatype
            .runs(0, 0, end)
            .unwrap()
            .map(|run| (run.offset, run.length))
            .collect();
        let flat = reference::flatten(datatype, end.div_ceil(datatype.size()));
        assert_eq!(runs, reference::merge(&reference::slice(&flat, 0, end)));
    }
}

#[test]
fn offsets_near_i64_min_are_refused_or_walked_without_wrapping() {
    let datatype = wire::decode(&unhex(OFFSETS_NEAR_I64_MIN)).expect("a valid type");
    walk_like_the_fuzzer(&datatype);
}
