//! List I/O against a plain local file: random piece lists, stripe units and 1-8 servers.
//!
//! Every case creates a file over a random number of servers with a random stripe unit,
//! applies random `write_list` calls (memory cut at other points than the file pieces,
//! overlapping and zero-length pieces included) to Tessera and to a local model in list
//! order — the later piece wins (docs/SEMANTICS.md) — then reads random lists back and
//! compares every byte, and checks the size `stat` reports.

// Test sizes and offsets are small; their casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use std::io::{IoSlice, IoSliceMut};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tessera_client::{CreateOptions, Piece, TransferMode};

#[derive(Debug, Clone)]
struct Case {
    servers: u16,
    stripe_unit_bytes: u64,
    mode: TransferMode,
    writes: Vec<(Vec<Piece>, Vec<usize>)>,
    reads: Vec<Vec<Piece>>,
}

fn pieces() -> impl Strategy<Value = Vec<Piece>> {
    prop::collection::vec(
        (0u64..40_000, 0u64..3_000).prop_map(|(offset, length)| Piece::new(offset, length)),
        1..24,
    )
}

fn case() -> impl Strategy<Value = Case> {
    (
        1u16..=8,
        prop_oneof![64u64..512, 512u64..8192],
        prop::sample::select(TransferMode::FRAMED.to_vec()),
        prop::collection::vec(
            (pieces(), prop::collection::vec(0usize..100_000, 0..8)),
            1..4,
        ),
        prop::collection::vec(pieces(), 1..3),
    )
        .prop_map(|(servers, stripe_unit_bytes, mode, writes, reads)| Case {
            servers,
            stripe_unit_bytes,
            mode,
            writes,
            reads,
        })
}

/// Cuts `0..total` into memory pieces at the given points.
fn memory_cuts(total: usize, points: &[usize]) -> Vec<(usize, usize)> {
    let mut cuts: Vec<usize> = points
        .iter()
        .map(|&p| if total == 0 { 0 } else { p % (total + 1) })
        .collect();
    cuts.push(0);
    cuts.push(total);
    cuts.sort_unstable();
    cuts.windows(2).map(|w| (w[0], w[1] - w[0])).collect()
}

#[test]
fn list_io_matches_a_local_file() {
    let cluster = common::Cluster::start(8);
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
            let counter = counter.get();
            let path = format!("/model-{counter}");
            let options = CreateOptions {
                stripe_unit_bytes: case.stripe_unit_bytes,
                server_count: case.servers,
                exclusive: true,
                ..CreateOptions::default()
            };
            let mut file = client.create(&path, &options).unwrap();
            file.set_transfer_mode(case.mode);
            let mut model: Vec<u8> = Vec::new();
            for (round, (file_pieces, points)) in case.writes.iter().enumerate() {
                let total: usize = file_pieces.iter().map(|p| p.length as usize).sum();
                let data = common::bytes(counter * 100 + round as u64, total);
                let memory: Vec<IoSlice<'_>> = memory_cuts(total, points)
                    .into_iter()
                    .map(|(start, length)| IoSlice::new(&data[start..start + length]))
                    .collect();
                let report = file.write_list(&memory, file_pieces).unwrap();
                prop_assert_eq!(report.bytes, total as u64);
                prop_assert!(report.requests <= u64::from(case.servers) || total > (16 << 20));
                let mut cursor = 0;
                for piece in file_pieces {
                    let (start, length) = (piece.offset as usize, piece.length as usize);
                    if length == 0 {
                        continue; // an empty piece writes nothing, wherever it points
                    }
                    if model.len() < start + length {
                        model.resize(start + length, 0);
                    }
                    model[start..start + length].copy_from_slice(&data[cursor..cursor + length]);
                    cursor += length;
                }
            }
            prop_assert_eq!(file.stat().unwrap().size, model.len() as u64);
            for read_pieces in &case.reads {
                let total: usize = read_pieces.iter().map(|p| p.length as usize).sum();
                let mut buffer = vec![0xEEu8; total];
                let cuts = memory_cuts(total, &[total / 3, total / 2]);
                let mut memory: Vec<IoSliceMut<'_>> = Vec::new();
                let mut rest: &mut [u8] = &mut buffer;
                for (_, length) in cuts {
                    let (head, tail) = std::mem::take(&mut rest).split_at_mut(length);
                    memory.push(IoSliceMut::new(head));
                    rest = tail;
                }
                file.read_list(&mut memory, read_pieces).unwrap();
                let mut expected = Vec::with_capacity(total);
                for piece in read_pieces {
                    for offset in piece.offset..piece.offset + piece.length {
                        expected.push(model.get(offset as usize).copied().unwrap_or(0));
                    }
                }
                prop_assert!(
                    buffer == expected,
                    "read of {:?} differs from the model",
                    read_pieces
                );
            }
            client.unlink(&path).unwrap();
            Ok(())
        })
        .unwrap();
}
