//! The command grammar, the two access patterns and the sweep's limits.

use super::command::{value, Step};
use super::{
    size_name, Sweep, FULL_PROCESS_BYTES, FULL_TRANSFERS, PROCESS_BYTES_MAX, QUICK_PROCESS_BYTES,
    QUICK_REPETITIONS, QUICK_TRANSFERS, STRIDED_BLOCK_BYTES_MAX,
};

fn command(strided: bool, transfer: u64, segments: u64, block: u64) -> Step {
    Step {
        collective: false,
        strided,
        transfer,
        segments,
        block,
        generation: 7,
        check: true,
    }
}

#[test]
fn commands_round_trip_and_bad_ones_are_refused() {
    let one = Step {
        collective: true,
        ..command(true, 1 << 20, 4, 64 << 10)
    };
    assert_eq!(Step::parse(&one.line()).unwrap(), Some(one));
    assert_eq!(Step::parse("quit\n").unwrap(), None);
    for bad in [
        "run independent contiguous 12 1 12 1 0", // not a multiple of 8
        "run independent strided 65536 1 48 1 0", // block does not divide
        "run independent contiguous 268435456 2 8 1 0", // over PROCESS_BYTES_MAX
        "run sideways contiguous 4096 1 4096 1 0",
        "run independent contiguous 4096 1 4096 65536 0", // generation
        "write 4096",
    ] {
        assert!(Step::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn both_patterns_fill_the_file_exactly_once_and_agree_with_the_owner() {
    for (strided, transfer, segments, block) in
        [(false, 64, 3, 64), (true, 64, 3, 16), (true, 32, 2, 32)]
    {
        let command = command(strided, transfer, segments, block);
        let processes = 4u64;
        let total = transfer * segments * processes;
        let mut seen = vec![0u8; usize::try_from(total).unwrap()];
        for rank in 0..processes {
            for position in 0..command.process_bytes() {
                let offset = command.file_offset(processes, rank, position);
                seen[usize::try_from(offset).unwrap()] += 1;
                assert_eq!(command.owner(processes, offset), rank);
            }
        }
        assert!(seen.iter().all(|&count| count == 1), "{command:?}");
    }
    // Contiguous call s of rank r starts at (s*P + r)*T, as in IOR.
    let contiguous = command(false, 4096, 2, 4096);
    assert_eq!(contiguous.call_offset(4, 1, 1), (4 + 1) * 4096);
    assert_eq!(contiguous.file_offset(4, 1, 4096), (4 + 1) * 4096);
    // Strided: view offsets; the second block of rank 1 lies a whole round later.
    let strided = command(true, 4096, 2, 1024);
    assert_eq!(strided.call_offset(4, 1, 1), 4096);
    assert_eq!(strided.file_offset(4, 1, 1024), (4 + 1) * 1024);
}

#[test]
fn the_value_formula_is_the_programs() {
    let program = crate::bench::btio_mpi::tests::source("mpiio.c");
    assert!(program.contains("((offset >> 3) + 1) * 0x9E3779B97F4A7C15ULL"));
    assert!(program.contains("((uint64_t)(writer + 1) << 56)"));
    assert!(program.contains("(generation << 40)"));
    assert_ne!(value(8, 0, 1), value(8, 1, 1));
    assert_ne!(value(8, 0, 1), value(8, 0, 2));
    assert_ne!(value(8, 0, 1), value(16, 0, 1));
    // The program's limits are the worker's.
    assert!(program.contains("#define PROCESS_BYTES_MAX (256LL << 20)"));
    assert!(program.contains("#define CASES_MAX 100000"));
}

#[test]
fn quick_sweep_is_small_and_every_case_fits_the_limits() {
    let sweep = Sweep {
        transfers: QUICK_TRANSFERS.to_vec(),
        process_bytes: QUICK_PROCESS_BYTES,
        repetitions: QUICK_REPETITIONS,
    };
    assert_eq!(sweep.cases(4).len(), 4 * QUICK_TRANSFERS.len());
    for transfer in FULL_TRANSFERS {
        let segments = (FULL_PROCESS_BYTES / transfer).max(1);
        assert!(transfer * segments <= PROCESS_BYTES_MAX);
        let block = transfer.min(STRIDED_BLOCK_BYTES_MAX);
        assert_eq!(transfer % block, 0);
    }
    assert_eq!(size_name(64 << 10), "64KiB");
    assert_eq!(size_name(16 << 20), "16MiB");
}
