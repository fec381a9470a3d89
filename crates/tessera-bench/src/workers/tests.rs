//! The pieces of every pattern tile the file exactly once; the methods choose their path.

use std::path::PathBuf;

use tessera_client::{Layout, Piece, TransferPolicy};
use tessera_proto::StoragePlan;

use super::pattern::{ArrayMethod, ArrayShare, MatrixDistribution, Pattern, MATRIX_PROCESSES};
use super::worker::{via, warm_up_access, Via};
use super::Task;

/// Counts each byte of `pieces` in `seen` (indexed by file offset).
fn mark(seen: &mut [u8], pieces: &[Piece]) {
    for piece in pieces {
        for offset in piece.offset..piece.offset + piece.length {
            seen[usize::try_from(offset).unwrap()] += 1;
        }
    }
}

#[test]
fn block2d_pieces_tile_the_array_exactly_once() {
    let mut seen = [0u8; 16 * 12];
    for rank in 0..4 {
        let access = Pattern::Block2d {
            rank,
            rows: 16,
            columns: 12,
            element_bytes: 1,
            grid_rows: 2,
            grid_columns: 2,
        }
        .access();
        assert_eq!(access.memory.len(), 8);
        mark(&mut seen, &access.file);
    }
    assert!(seen.iter().all(|&count| count == 1));
}

#[test]
fn matrix_shares_tile_the_matrix_exactly_once() {
    const N: u64 = 64;
    for distribution in [
        MatrixDistribution::BlockBlock,
        MatrixDistribution::StarBlock,
        MatrixDistribution::CyclicCyclic { block_bytes: 8 },
    ] {
        let mut seen = vec![0u8; usize::try_from(N * N).unwrap()];
        for rank in 0..MATRIX_PROCESSES {
            let access = Pattern::Matrix {
                rank,
                n: N,
                distribution,
            }
            .try_access()
            .unwrap();
            assert_eq!(access.buffer_bytes as u64, N * N / 4, "{distribution:?}");
            assert_eq!(access.memory, [(0, access.buffer_bytes)]);
            mark(&mut seen, &access.file);
        }
        assert!(seen.iter().all(|&count| count == 1), "{distribution:?}");
    }
    // (CYCLIC(8),CYCLIC(8)): rank 3 (grid row 1, column 1) starts at row 8, column 8.
    let access = Pattern::Matrix {
        rank: 3,
        n: N,
        distribution: MatrixDistribution::CyclicCyclic { block_bytes: 8 },
    }
    .access();
    assert_eq!(access.file[0], Piece::new(8 * N + 8, 8));
    assert_eq!(access.file.len() as u64, (N / 2) * (N / 16));
}

#[test]
fn warm_up_touches_each_server_of_the_access_once() {
    let layout = Layout::Stripe(tessera_client::StripeLayout::new(64, vec![0, 1, 2, 3]).unwrap());
    let access = Pattern::Matrix {
        rank: 1,
        n: 64,
        distribution: MatrixDistribution::StarBlock,
    }
    .access();
    let warm_up = warm_up_access(&layout, &access);
    // Rank 1 holds columns 16..32; rows of 64 bytes fall on servers 0, 1, 2, 3 in turn.
    assert_eq!(
        warm_up.file,
        [16, 80, 144, 208].map(|offset| Piece::new(offset, 1))
    );
    assert_eq!(warm_up.memory, [(0, 1), (16, 1), (32, 1), (48, 1)]);
}

#[test]
fn block_column_shares_are_one_piece_per_row_and_tile_the_array_once() {
    const N: u64 = 32;
    let mut seen = vec![0u8; usize::try_from(N * N * 4).unwrap()];
    for rank in 0..4 {
        let share = ArrayShare::BlockColumn {
            n: N,
            element_bytes: 4,
            processes: 4,
        };
        let access = Pattern::Array { rank, share }.access();
        assert_eq!(access.file.len() as u64, N, "rank {rank}");
        assert_eq!(access.file[1], Piece::new(N * 4 + rank as u64 * N, N));
        assert_eq!(access.memory, [(0, usize::try_from(N * N).unwrap())]);
        mark(&mut seen, &access.file);
    }
    assert!(seen.iter().all(|&count| count == 1));
}

#[test]
fn array_methods_choose_their_path_and_storage_plan() {
    let task = |method: &str| Task {
        cluster: PathBuf::new(),
        path: String::new(),
        write: true,
        method: method.to_owned(),
        iterations: 1,
        generation: 0,
        sync: false,
        cache: None,
        pattern: Pattern::Array {
            rank: 0,
            share: ArrayShare::BlockColumn {
                n: 8,
                element_bytes: 4,
                processes: 4,
            },
        },
    };
    for method in ArrayMethod::ALL {
        assert_eq!(ArrayMethod::from_name(method.name()), Some(method));
    }
    assert_eq!(
        via(&task("multiple")).unwrap(),
        (Via::Multiple, StoragePlan::PerPiece)
    );
    assert_eq!(
        via(&task("sieve")).unwrap(),
        (Via::Sieve, StoragePlan::PerPiece)
    );
    assert_eq!(
        via(&task("list")).unwrap(),
        (Via::List(TransferPolicy::Auto), StoragePlan::PerPiece)
    );
    assert_eq!(
        via(&task("list+ads")).unwrap(),
        (Via::List(TransferPolicy::Auto), StoragePlan::Auto)
    );
    assert!(via(&task("view")).is_err());
    assert!(via(&task("gather")).is_err());
}

#[test]
fn interleaved_pieces_do_not_overlap_across_ranks() {
    let a = Pattern::Interleaved {
        rank: 0,
        processes: 4,
        pieces: 3,
        piece_bytes: 128,
    }
    .access();
    let b = Pattern::Interleaved {
        rank: 1,
        processes: 4,
        pieces: 3,
        piece_bytes: 128,
    }
    .access();
    assert_eq!(a.file[1], Piece::new(512, 128));
    assert_eq!(b.file[0], Piece::new(128, 128));
    assert_eq!(a.memory[1], (256, 128));
}
