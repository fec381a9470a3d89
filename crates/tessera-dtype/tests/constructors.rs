//! Hand-checked examples of every constructor: runs, size, extent, bounds.

use tessera_dtype::{Datatype, Distribution, Order, Run};

fn runs(datatype: &Datatype, displacement: i64, start: u64, end: u64) -> Vec<(i64, u64)> {
    datatype
        .runs(displacement, start, end)
        .unwrap()
        .map(|Run { offset, length }| (offset, length))
        .collect()
}

#[test]
fn vector_runs_sizes_and_seek() {
    let byte = Datatype::byte();
    let vector = Datatype::vector(3, 2, 5, &byte).unwrap();
    assert_eq!(vector.size(), 6);
    assert_eq!(vector.extent(), 12);
    assert_eq!(runs(&vector, 0, 0, 6), vec![(0, 2), (5, 2), (10, 2)]);
    // Tiled: the second instance starts at 112, right after the first one's last byte.
    assert_eq!(runs(&vector, 100, 5, 9), vec![(111, 3), (117, 1)]);
    let contiguous = Datatype::contiguous(4, &vector).unwrap();
    assert_eq!(contiguous.size(), 24);
    assert_eq!(contiguous.extent(), 48);
    // The last block of one vector (10..12) meets the first of the next (12..14): merged.
    assert_eq!(runs(&contiguous, 0, 4, 10), vec![(10, 4), (17, 2)]);
}

#[test]
fn indexed_struct_resized() {
    let int = Datatype::bytes(4).unwrap();
    let indexed = Datatype::indexed(&[2, 0, 1], &[3, 0, 0], &int).unwrap();
    assert_eq!(indexed.size(), 12);
    assert_eq!((indexed.lb(), indexed.ub()), (0, 20));
    assert_eq!(runs(&indexed, 0, 0, 12), vec![(12, 8), (0, 4)]);
    let resized = Datatype::resized(-4, 32, &indexed).unwrap();
    assert_eq!((resized.lb(), resized.extent()), (-4, 32));
    assert_eq!(runs(&resized, 0, 8, 20), vec![(0, 4), (44, 8)]);
    let structure = Datatype::structure(
        &[1, 2],
        &[0, 8],
        &[Datatype::bytes(3).unwrap(), int.clone()],
    )
    .unwrap();
    assert_eq!(structure.size(), 11);
    assert_eq!(runs(&structure, 0, 1, 11), vec![(1, 2), (8, 8)]);
    assert!(!structure.is_dense());
    let dense = Datatype::structure(&[1, 2], &[0, 3], &[Datatype::bytes(3).unwrap(), int]).unwrap();
    assert!(dense.is_dense());
}

#[test]
fn subarray_c_and_fortran() {
    let byte = Datatype::byte();
    // 4x6 array, 2x3 block at (1, 2).
    let c = Datatype::subarray(&[4, 6], &[2, 3], &[1, 2], Order::C, &byte).unwrap();
    assert_eq!((c.size(), c.extent(), c.lb()), (6, 24, 0));
    assert_eq!(runs(&c, 0, 0, 6), vec![(8, 3), (14, 3)]);
    let fortran = Datatype::subarray(&[4, 6], &[2, 3], &[1, 2], Order::Fortran, &byte).unwrap();
    // Column-major: column j holds rows at j*4; columns 2..5, rows 1..3.
    assert_eq!(runs(&fortran, 0, 0, 6), vec![(9, 2), (13, 2), (17, 2)]);
}

#[test]
fn darray_block_and_cyclic() {
    let byte = Datatype::byte();
    // 1-D, 10 elements, cyclic(3) over 2 processes: rank 1 has 3..6 and 9..10.
    let cyclic = Datatype::darray(
        2,
        1,
        &[10],
        &[Distribution::Cyclic(Some(3))],
        &[2],
        Order::C,
        &byte,
    )
    .unwrap();
    assert_eq!(runs(&cyclic, 0, 0, cyclic.size()), vec![(3, 3), (9, 1)]);
    assert_eq!(cyclic.extent(), 10);
    // 2-D (BLOCK, BLOCK) over 2x2, 4x4 array: rank 3 holds rows 2..4, columns 2..4.
    let block = Datatype::darray(
        4,
        3,
        &[4, 4],
        &[Distribution::Block(None), Distribution::Block(None)],
        &[2, 2],
        Order::C,
        &byte,
    )
    .unwrap();
    assert_eq!(runs(&block, 0, 0, 4), vec![(10, 2), (14, 2)]);
}

#[test]
fn a_million_blocks_stream_in_bounded_memory() {
    let vector = Datatype::vector(1 << 20, 1, 2, &Datatype::byte()).unwrap();
    let mut runs = vector.runs(0, 0, 1 << 20).unwrap();
    assert_eq!(
        runs.next(),
        Some(Run {
            offset: 0,
            length: 1
        })
    );
    assert_eq!(runs.by_ref().count(), (1 << 20) - 1);
}

/// A type whose instances follow each other without gaps (a predefined type, a contiguous
/// type, a vector whose blocks touch) is one run over any range, produced in one step of the
/// walk: a 4 MiB access of bytes, or of 4-byte integers, is never walked element by element.
#[test]
fn tiling_types_are_one_unmerged_run_over_any_range() {
    let int = Datatype::bytes(4).unwrap();
    let touching = Datatype::vector(8, 2, 2, &int).unwrap();
    let padded = Datatype::resized(0, 8, &int).unwrap();
    for (datatype, start) in [
        (Datatype::byte(), 3i64),
        (int.clone(), 6),
        (Datatype::contiguous(1000, &int).unwrap(), 4001),
        (touching, 13),
    ] {
        let start_byte = u64::try_from(start).unwrap();
        let mut walk = datatype
            .runs(100, start_byte, start_byte + (4 << 20))
            .unwrap();
        let first = walk.next_unmerged().map(|run| (run.offset, run.length));
        assert_eq!(first, Some((100 + start, 4 << 20)));
        assert_eq!(walk.next_unmerged(), None);
    }
    // Instances with gaps between them stay separate runs.
    let mut walk = padded.runs(0, 0, 12).unwrap();
    let unmerged: Vec<_> = std::iter::from_fn(|| walk.next_unmerged())
        .map(|run| (run.offset, run.length))
        .collect();
    assert_eq!(unmerged, vec![(0, 4), (8, 4), (16, 4)]);
}
