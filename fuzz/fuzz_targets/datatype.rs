//! Arbitrary bytes as an encoded datatype, the way a server receives a file type or a memory
//! type from a client: decoded with `tessera_dtype::wire::decode`, which must refuse anything
//! malformed or over a limit with an error, never a panic, a long loop or a large allocation.
//!
//! A type that decodes must then hold together, checked within a bounded budget:
//!
//! * it re-encodes to exactly the input (the decoder accepts only canonical encodings), and
//!   that decodes to the same pattern;
//! * its size and bounds are what the naive reference derives from the definitions;
//! * the first [`WALK_BYTES_MAX`] bytes of its stream (across instances where the type is
//!   small) come out as non-empty runs adding up to the range, each inside the true bounds of
//!   the instances it belongs to, and maximally merged;
//! * a walk split at a point picked from the input, resumed by a fresh seek, gives the same
//!   bytes as the walk in one go;
//! * for small types, the runs are the reference flattener's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_dtype::reference;
use tessera_dtype::{wire, Datatype, DatatypeError, Run, DATATYPE_DEPTH_MAX};

/// Most stream bytes walked per input.
const WALK_BYTES_MAX: u64 = 64 << 10;
/// Instances walked at most (when the type is small enough for several to fit the budget).
const WALK_INSTANCES_MAX: u64 = 3;
/// Types compared with the reference flattener: data bytes and encoded bytes at most (its
/// work grows with both: every byte times the blocks on its way).
const REFERENCE_TYPE_BYTES_MAX: u64 = 1024;
const REFERENCE_ENCODED_BYTES_MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    match wire::decode(data) {
        Ok(datatype) => check(&datatype, data),
        Err(err) => assert!(!err.to_string().is_empty()),
    }
});

fn check(datatype: &Datatype, encoded: &[u8]) {
    // Canonical: one type, one encoding.
    let again = wire::encode(datatype).expect("a decoded type encodes");
    assert_eq!(
        again, encoded,
        "re-encoding gave other bytes than were decoded"
    );
    let decoded = wire::decode(&again).expect("a re-encoded type decodes");
    assert!(decoded.same_as(datatype));

    // Attributes: as the definitions give them, and within the limits.
    let expected = reference::bounds(datatype);
    assert_eq!(
        (datatype.size(), datatype.lb(), datatype.ub()),
        (expected.size, expected.lb, expected.ub),
        "size or bounds differ from the reference"
    );
    assert_eq!(
        (datatype.true_lb(), datatype.true_ub()),
        (expected.true_lb, expected.true_ub),
        "true bounds differ from the reference"
    );
    assert!(datatype.extent() >= 0);
    assert!(datatype.depth() >= 1 && datatype.depth() <= DATATYPE_DEPTH_MAX);
    if datatype.size() == 0 {
        assert!(datatype
            .all_runs(1)
            .expect("no bytes to walk")
            .next()
            .is_none());
        return;
    }

    // One instance can always be walked; several only if their bounds stay in range.
    let one = datatype.size().min(WALK_BYTES_MAX);
    let several = datatype
        .size()
        .saturating_mul(WALK_INSTANCES_MAX)
        .min(WALK_BYTES_MAX);
    let end = match datatype.runs(0, 0, several) {
        Ok(_) => several,
        Err(err) => {
            assert!(matches!(err, DatatypeError::LimitExceeded { .. }), "{err}");
            one
        }
    };
    let runs = walk(datatype, 0, end);

    // Split at a point the input picks; the two walks must join up to the same bytes.
    let split = fnv(encoded) % end;
    let mut joined = walk(datatype, 0, split);
    for run in walk(datatype, split, end) {
        match joined.last_mut() {
            Some(last) if last.end() == run.offset => last.length += run.length,
            _ => joined.push(run),
        }
    }
    assert_eq!(
        joined, runs,
        "a walk resumed at stream byte {split} differs"
    );

    if datatype.size() <= REFERENCE_TYPE_BYTES_MAX && encoded.len() <= REFERENCE_ENCODED_BYTES_MAX {
        let instances = end.div_ceil(datatype.size());
        let flat = reference::flatten(datatype, instances);
        let expected = reference::merge(&reference::slice(&flat, 0, end));
        let got: Vec<(i64, u64)> = runs.iter().map(|run| (run.offset, run.length)).collect();
        assert_eq!(got, expected, "runs differ from the reference flattening");
    }
}

/// The runs of stream bytes `[start, end)`, checked one by one.
fn walk(datatype: &Datatype, start: u64, end: u64) -> Vec<Run> {
    let size = datatype.size();
    let extent = i128::from(datatype.extent());
    let mut position = start;
    let mut out: Vec<Run> = Vec::new();
    for run in datatype
        .runs(0, start, end)
        .expect("range within checked bounds")
    {
        assert!(run.length > 0, "empty run at stream byte {position}");
        assert!(
            out.last().is_none_or(|last| last.end() != run.offset),
            "runs at stream byte {position} were not merged"
        );
        // The run starts in the instance of its first byte and ends in that of its last.
        let (first, last) = (position / size, (position + run.length - 1) / size);
        let low = extent * i128::from(first) + i128::from(datatype.true_lb());
        let high = extent * i128::from(last) + i128::from(datatype.true_ub());
        assert!(
            i128::from(run.offset) >= low && i128::from(run.end()) <= high,
            "run {run:?} at stream byte {position} is outside instances {first}..={last} ({low}..{high})"
        );
        position += run.length;
        assert!(position <= end, "runs go past stream byte {end}");
        out.push(run);
    }
    assert_eq!(
        position, end,
        "runs stop at stream byte {position}, not {end}"
    );
    out
}

/// FNV-1a of the input: a split point that follows the input without a separate byte.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
