//! Every storage plan against a plain local file as the model.
//!
//! Random piece lists (unsorted, overlapping, empty pieces, pieces past the end) are written
//! and read through an `ObjectStore` under each plan — per-piece, batched, sieve and the cost
//! model's choice — and the same writes are applied to a plain file with one `pwrite` per
//! piece in list order. After every step the object and the plain file must hold the same
//! bytes, and every read must return what the plain file holds (zeros past its end).

use std::fs::File;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;
use tessera_iod::cost::CostModel;
use tessera_iod::ObjectStore;
use tessera_proto::{Piece, StoragePlan};

const HANDLE: u64 = 7;

/// The plain-file model: pwrite per piece, in list order; reads zero-fill past the end.
struct Model {
    file: File,
}

impl Model {
    fn write(&self, pieces: &[Piece], data: &[u8]) {
        let mut at = 0usize;
        for piece in pieces {
            let length = usize::try_from(piece.length).unwrap();
            self.file
                .write_all_at(&data[at..at + length], piece.offset)
                .unwrap();
            at += length;
        }
    }

    fn read(&self, pieces: &[Piece]) -> Vec<u8> {
        let size = self.file.metadata().unwrap().len();
        let mut out = Vec::new();
        for piece in pieces {
            let mut buffer = vec![0u8; usize::try_from(piece.length).unwrap()];
            let available = size.saturating_sub(piece.offset).min(piece.length);
            if available > 0 {
                self.file
                    .read_exact_at(
                        &mut buffer[..usize::try_from(available).unwrap()],
                        piece.offset,
                    )
                    .unwrap();
            }
            out.extend_from_slice(&buffer);
        }
        out
    }
}

fn plan() -> impl Strategy<Value = StoragePlan> {
    prop::sample::select(StoragePlan::ALL.to_vec())
}

/// Pieces in a 64 KiB window, clustered so that sieving chunks form, some overlapping.
fn pieces() -> impl Strategy<Value = Vec<Piece>> {
    prop::collection::vec((0u64..65_536, 0u64..700), 1..120).prop_map(|raw| {
        raw.into_iter()
            .map(|(offset, length)| Piece::new(offset, length))
            .collect()
    })
}

#[derive(Debug, Clone)]
enum Step {
    Write(Vec<Piece>, StoragePlan, u8),
    Read(Vec<Piece>, StoragePlan),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (pieces(), plan(), any::<u8>())
            .prop_map(|(pieces, plan, seed)| Step::Write(pieces, plan, seed)),
        (pieces(), plan()).prop_map(|(pieces, plan)| Step::Read(pieces, plan)),
    ]
}

fn data_for(pieces: &[Piece], seed: u8) -> Vec<u8> {
    let total: u64 = pieces.iter().map(|piece| piece.length).sum();
    (0..total)
        .map(|index| {
            u8::try_from(index % 256)
                .unwrap()
                .wrapping_mul(31)
                .wrapping_add(seed)
                | 1
        })
        .collect()
}

/// A model that makes sieving cheap, so that `Auto` sieves often in these small windows.
fn sieving_model() -> CostModel {
    CostModel {
        write_op_us: 50.0,
        read_op_us: 20.0,
        ..CostModel::default()
    }
}

fn check(steps: &[Step], model: CostModel) -> Result<(), TestCaseError> {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open_with(directory.path(), model).unwrap();
    store.create(HANDLE, 0).unwrap();
    let plain = Model {
        file: tempfile::tempfile().unwrap(),
    };
    for step in steps {
        match step {
            Step::Write(pieces, plan, seed) => {
                let data = data_for(pieces, *seed);
                let outcome = store.write(HANDLE, pieces, &data, *plan).unwrap();
                plain.write(pieces, &data);
                prop_assert!(
                    outcome.storage_bytes >= data.len() as u64
                        || outcome.plan != StoragePlan::Sieve
                );
                if *plan != StoragePlan::Auto && outcome.plan != *plan {
                    // A plan not offered for this request falls back to per-piece.
                    prop_assert_eq!(outcome.plan, StoragePlan::PerPiece);
                }
            }
            Step::Read(pieces, plan) => {
                let total: u64 = pieces.iter().map(|piece| piece.length).sum();
                let mut buffer = vec![0xEEu8; usize::try_from(total).unwrap()];
                store.read(HANDLE, pieces, &mut buffer, *plan).unwrap();
                prop_assert_eq!(buffer, plain.read(pieces), "read by {:?}", plan);
            }
        }
        let (size, _) = store.stat(HANDLE).unwrap();
        prop_assert_eq!(size, plain.file.metadata().unwrap().len(), "object size");
    }
    let size = plain.file.metadata().unwrap().len();
    let whole = [Piece::new(0, size)];
    let mut buffer = vec![0u8; usize::try_from(size).unwrap()];
    store
        .read(HANDLE, &whole, &mut buffer, StoragePlan::PerPiece)
        .unwrap();
    prop_assert_eq!(buffer, plain.read(&whole));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_plan_matches_a_plain_file(steps in prop::collection::vec(step(), 1..8)) {
        check(&steps, CostModel::default())?;
    }

    #[test]
    fn sieving_heavy_model_matches_a_plain_file(steps in prop::collection::vec(step(), 1..8)) {
        check(&steps, sieving_model())?;
    }
}

#[test]
fn counters_record_every_decision() {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open_with(directory.path(), sieving_model()).unwrap();
    store.create(HANDLE, 0).unwrap();
    // 100 pieces of 16 bytes every 64 bytes: the sieving model reads and writes one chunk.
    let pieces: Vec<Piece> = (0..100).map(|i| Piece::new(i * 64, 16)).collect();
    let data = data_for(&pieces, 3);
    let outcome = store
        .write(HANDLE, &pieces, &data, StoragePlan::Auto)
        .unwrap();
    assert_eq!(outcome.plan, StoragePlan::Sieve);
    assert_eq!(outcome.calls, 2, "one read and one write of the chunk");
    assert_eq!(outcome.storage_bytes, 2 * (99 * 64 + 16));
    let per_piece = store
        .write(HANDLE, &pieces, &data, StoragePlan::PerPiece)
        .unwrap();
    assert_eq!((per_piece.calls, per_piece.storage_bytes), (100, 1600));
    let mut buffer = vec![0u8; 1600];
    let read = store
        .read(HANDLE, &pieces, &mut buffer, StoragePlan::Sieve)
        .unwrap();
    assert_eq!((read.plan, read.calls), (StoragePlan::Sieve, 1));
    assert_eq!(buffer, data);
    let stats = store.stats();
    assert_eq!(stats.writes.requests, 2);
    assert_eq!(stats.writes.pieces, 200);
    assert_eq!(stats.writes.calls, 102);
    assert_eq!(stats.writes.bytes_wanted, 3200);
    assert_eq!(stats.writes.bytes_storage, 2 * (99 * 64 + 16) + 1600);
    assert_eq!(
        (
            stats.writes.sieve,
            stats.writes.per_piece,
            stats.writes.batched
        ),
        (1, 1, 0)
    );
    assert_eq!(
        (stats.reads.requests, stats.reads.sieve, stats.reads.calls),
        (1, 1, 1)
    );
    assert!(stats.model.contains("write_op_us=50.00"), "{}", stats.model);
}

#[test]
fn concurrent_sieving_writers_on_one_server_lose_no_bytes() {
    // Eight threads write interleaved 8-byte pieces of one region through forced sieving:
    // each request's read-modify-write covers the others' pieces, so without the extent lock
    // they would overwrite each other with stale bytes.
    let directory = tempfile::tempdir().unwrap();
    let store =
        std::sync::Arc::new(ObjectStore::open_with(directory.path(), sieving_model()).unwrap());
    store.create(HANDLE, 0).unwrap();
    let writers = 8u64;
    let blocks = 2048u64;
    std::thread::scope(|scope| {
        for writer in 0..writers {
            let store = store.clone();
            scope.spawn(move || {
                for round in 0..4u64 {
                    let pieces: Vec<Piece> = (0..blocks / writers / 4)
                        .map(|i| {
                            let block = (round * (blocks / writers / 4) + i) * writers + writer;
                            Piece::new(block * 8, 8)
                        })
                        .collect();
                    let data = vec![u8::try_from(writer + 1).unwrap(); pieces.len() * 8];
                    let outcome = store
                        .write(HANDLE, &pieces, &data, StoragePlan::Sieve)
                        .unwrap();
                    assert_eq!(outcome.plan, StoragePlan::Sieve);
                }
            });
        }
    });
    let mut whole = vec![0u8; usize::try_from(blocks * 8).unwrap()];
    store
        .read(
            HANDLE,
            &[Piece::new(0, blocks * 8)],
            &mut whole,
            StoragePlan::PerPiece,
        )
        .unwrap();
    for (block, bytes) in whole.chunks(8).enumerate() {
        let owner = u8::try_from(block as u64 % writers + 1).unwrap();
        assert!(
            bytes.iter().all(|&byte| byte == owner),
            "block {block} holds {bytes:?}, not writer {owner}'s bytes"
        );
    }
}
