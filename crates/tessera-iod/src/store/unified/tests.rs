//! Unit tests of the unified cache's serve paths.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test offsets and sizes are below 1 MiB"
)]

use super::*;
use crate::cache::CacheConfig;
use crate::cost::CostModel;
use crate::files::FileStorage;
use proptest::prelude::*;
use tessera_proto::StoragePlan;

const KIB: usize = 1024;

/// A unified store in a fresh directory: a 64 KiB budget of 4 KiB units (16 units, 2 a
/// grant), so requests go in batches and units are evicted all the time.
fn small_store() -> (tempfile::TempDir, ObjectStore<FileStorage>) {
    let directory = tempfile::tempdir().unwrap();
    let config = CacheConfig {
        default_unit_bytes: 4 * KIB,
        ..CacheConfig::new(64 * KIB)
    };
    let store = ObjectStore::with_storage(
        FileStorage::open(directory.path()).unwrap(),
        CostModel::default(),
    )
    .unwrap()
    .with_serve(ServeMode::Unified, Some(config))
    .unwrap();
    store.create(7, 0).unwrap();
    (directory, store)
}

#[derive(Debug, Clone)]
enum Op {
    Write(Vec<(u64, u64)>, u8),
    /// A write received into a landing (sorted, disjoint pieces).
    Landed(Vec<(u64, u64)>, u8),
    Read(Vec<(u64, u64)>),
    Truncate(u64),
    Flush,
    Sync,
    Stat,
}

fn pieces_strategy() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..200_000, 0u64..20_000), 1..6)
}

/// Sorted, disjoint pieces: gaps and lengths from an offset.
fn disjoint_pieces_strategy() -> impl Strategy<Value = Vec<(u64, u64)>> {
    (
        0u64..20_000,
        prop::collection::vec((0u64..10_000, 1u64..30_000), 1..6),
    )
        .prop_map(|(start, steps)| {
            let mut at = start;
            steps
                .into_iter()
                .map(|(gap, len)| {
                    at += gap;
                    let piece = (at, len);
                    at += len;
                    piece
                })
                .collect()
        })
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (pieces_strategy(), any::<u8>()).prop_map(|(p, seed)| Op::Write(p, seed)),
        3 => (disjoint_pieces_strategy(), any::<u8>()).prop_map(|(p, seed)| Op::Landed(p, seed)),
        4 => pieces_strategy().prop_map(Op::Read),
        1 => (0u64..220_000).prop_map(Op::Truncate),
        1 => Just(Op::Flush),
        1 => Just(Op::Sync),
        1 => Just(Op::Stat),
    ]
}

fn to_pieces(ranges: &[(u64, u64)]) -> Vec<Piece> {
    ranges
        .iter()
        .map(|&(offset, length)| piece(offset, length))
        .collect()
}

/// The object file on disk equals the model, size and bytes.
fn check_disk(store: &ObjectStore<FileStorage>, model: &[u8]) {
    let disk = std::fs::read(store.object_path(7)).unwrap();
    assert_eq!(disk.len(), model.len(), "size on disk");
    assert!(disk == model, "bytes on disk differ from the model");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every path of a unified store against a byte model: reads see every write at
    /// once, and after a flush or sync the file on disk (written with O_DIRECT where
    /// the directory allows) is the model, size included.
    #[test]
    fn a_unified_store_matches_a_byte_model(ops in prop::collection::vec(op_strategy(), 1..40)) {
        let (_directory, store) = small_store();
        let mut model: Vec<u8> = Vec::new();
        for op in ops {
            match &op {
                Op::Write(ranges, seed) | Op::Landed(ranges, seed) => {
                    let landed = matches!(op, Op::Landed(..));
                    let pieces = to_pieces(ranges);
                    let total: u64 = pieces.iter().map(|p| p.length).sum();
                    let data: Vec<u8> = (0..total).map(|i| seed.wrapping_add((i % 251) as u8) | 1).collect();
                    let whole_unit = pieces.iter().any(|p| p.offset.next_multiple_of(4096) + 4096 <= p.offset + p.length);
                    if let Some(mut landing) = store.land(7, &pieces).filter(|_| landed) {
                        let mut at = 0;
                        for slice in &mut landing.slices() {
                            let len = slice.len();
                            slice.copy_from_slice(&data[at..at + len]);
                            at += len;
                        }
                        store.write_landed(&pieces, landing).unwrap();
                    } else {
                        prop_assert!(!(landed && whole_unit), "no landing for {:?}", ranges);
                        store.write(7, &pieces, &data, StoragePlan::Auto).unwrap();
                    }
                    let mut at = 0usize;
                    for p in &pieces {
                        let (start, len) = (p.offset as usize, p.length as usize);
                        if len > 0 && model.len() < start + len {
                            model.resize(start + len, 0);
                        }
                        model[start..start + len].copy_from_slice(&data[at..at + len]);
                        at += len;
                    }
                }
                Op::Read(ranges) => {
                    let pieces = to_pieces(ranges);
                    let total: u64 = pieces.iter().map(|p| p.length).sum();
                    let mut got = vec![0xEE; total as usize];
                    store.read(7, &pieces, &mut got, StoragePlan::Auto).unwrap();
                    let mut expected = Vec::new();
                    for p in &pieces {
                        for i in p.offset..p.offset + p.length {
                            expected.push(model.get(i as usize).copied().unwrap_or(0));
                        }
                    }
                    prop_assert!(got == expected, "read {:?}", ranges);
                    let pinned = store.read_pinned(7, &pieces).unwrap();
                    let sent: Vec<u8> = pinned.slices(7, &pieces).unwrap().iter().flat_map(|s| s.iter().copied()).collect();
                    prop_assert!(sent == expected, "pinned read {:?}", ranges);
                }
                Op::Truncate(size) => {
                    store.truncate(7, *size).unwrap();
                    model.resize(*size as usize, 0);
                }
                Op::Flush => {
                    store.flush(None, u64::MAX).unwrap();
                    check_disk(&store, &model);
                }
                Op::Sync => {
                    store.sync(7).unwrap();
                    check_disk(&store, &model);
                }
                Op::Stat => prop_assert_eq!(store.stat(7).unwrap().0, model.len() as u64),
            }
            store.cache().unwrap().check_consistency();
        }
        store.sync(7).unwrap();
        check_disk(&store, &model);
    }
}

#[test]
fn a_write_during_a_pinned_reply_goes_to_a_copy() {
    let (_directory, store) = small_store();
    let pieces = [piece(0, 8 * KIB as u64)];
    store
        .write(7, &pieces, &[1; 8 * KIB], StoragePlan::Auto)
        .unwrap();
    let pinned = store.read_pinned(7, &pieces).unwrap();
    // The write does not wait for the pinned reply, and does not change it.
    store
        .write(7, &pieces, &[2; 8 * KIB], StoragePlan::Auto)
        .unwrap();
    let sent: Vec<u8> = pinned
        .slices(7, &pieces)
        .unwrap()
        .iter()
        .flat_map(|s| s.iter().copied())
        .collect();
    assert!(sent.iter().all(|&b| b == 1));
    let mut now = vec![0; 8 * KIB];
    store.read(7, &pieces, &mut now, StoragePlan::Auto).unwrap();
    assert!(now.iter().all(|&b| b == 2));
    // A removed object's units go, dirty or not; a new object of another handle is empty.
    store.remove(7).unwrap();
    assert_eq!(store.cache_stats().unwrap().dirty_bytes, 0);
    store.create(8, 0).unwrap();
    store.read(8, &pieces, &mut now, StoragePlan::Auto).unwrap();
    assert!(now.iter().all(|&b| b == 0));
}

fn piece(offset: u64, length: u64) -> Piece {
    Piece { offset, length }
}

/// A unified store of 64 KiB default units (a 1 MiB budget) over `directory`.
fn default_unit_store(directory: &std::path::Path) -> ObjectStore<FileStorage> {
    ObjectStore::with_storage(FileStorage::open(directory).unwrap(), CostModel::default())
        .unwrap()
        .with_serve(ServeMode::Unified, Some(CacheConfig::new(1 << 20)))
        .unwrap()
}

#[test]
fn an_object_keeps_the_cache_unit_it_was_created_with_across_truncates_and_restarts() {
    let directory = tempfile::tempdir().unwrap();
    let store = default_unit_store(directory.path());
    store.create(3, 4096).unwrap();
    store.create(4, 0).unwrap();
    let data = vec![9u8; 64 * KIB];
    for handle in [3, 4] {
        store
            .write(
                handle,
                &[piece(0, 64 * KIB as u64)],
                &data,
                StoragePlan::Auto,
            )
            .unwrap();
    }
    // Bytes one 4 KiB read adds to the cache after a truncate dropped the object's
    // units: one unit of the object's size.
    let in_use_after_one_read = |store: &ObjectStore<FileStorage>, handle: u64| {
        store.truncate(handle, 64 * KIB as u64).unwrap();
        let before = store.cache_stats().unwrap().bytes_in_use;
        let mut read = vec![0u8; 4 * KIB];
        store
            .read(
                handle,
                &[piece(8 * KIB as u64, 4 * KIB as u64)],
                &mut read,
                StoragePlan::Auto,
            )
            .unwrap();
        assert!(read.iter().all(|&b| b == 9));
        store.cache_stats().unwrap().bytes_in_use - before
    };
    assert_eq!(in_use_after_one_read(&store, 3), 4 * KIB);
    assert_eq!(in_use_after_one_read(&store, 4), 64 * KIB);
    assert_eq!(store.cache_counters().bytes_in_use, (68 * KIB) as u64);
    store.flush(None, u64::MAX).unwrap();
    drop(store);
    // A restarted iod reads the unit from the object's record, also when the object's
    // first request is a write landed in units.
    let store = default_unit_store(directory.path());
    let whole = [piece(0, 64 * KIB as u64)];
    let mut landing = store.land(3, &whole).expect("a write of whole units lands");
    for slice in &mut landing.slices() {
        slice.fill(9);
    }
    store.write_landed(&whole, landing).unwrap();
    assert_eq!(store.cache().unwrap().unit_bytes(3), 4 * KIB);
    assert_eq!(store.cache_counters().units_landed, 16);
    assert_eq!(in_use_after_one_read(&store, 3), 4 * KIB);
    // A create of the existing object is refused and keeps its unit; removing it drops
    // the record, and a new object takes the new unit.
    assert_eq!(
        store.create(3, 16 * KIB as u32).unwrap_err().code,
        ErrorCode::Exists
    );
    assert_eq!(store.storage().cache_unit(3).unwrap(), 4 * KIB as u32);
    store.remove(3).unwrap();
    assert_eq!(store.storage().cache_unit(3).unwrap(), 0);
    store.create(3, 16 * KIB as u32).unwrap();
    assert_eq!(store.storage().cache_unit(3).unwrap(), 16 * KIB as u32);
}

#[test]
fn a_bad_cache_unit_is_refused_naming_the_value_and_the_range() {
    let directory = tempfile::tempdir().unwrap();
    let store = default_unit_store(directory.path());
    for bad in [2048, 12288, 131_072] {
        let error = store.create(5, bad).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        assert!(error.message.contains(&format!("{bad} bytes")), "{error:?}");
        assert!(error.message.contains("4096 to 65536"), "{error:?}");
    }
    assert_eq!(store.object_count(), 0);
}

#[test]
fn serve_modes_parse_by_name() {
    for mode in ServeMode::ALL {
        assert_eq!(mode.name().parse::<ServeMode>(), Ok(mode));
    }
    assert!("fast".parse::<ServeMode>().unwrap_err().contains("fast"));
}

#[test]
fn batches_cut_pieces_to_fit_a_grant_and_keep_data_positions() {
    // 4 units a grant, 8-byte units: a part is at most 2 units.
    let cut = batches(&[piece(0, 40), piece(100, 4), piece(200, 0)], 8, 4);
    let flat: Vec<Segment> = cut.iter().flatten().copied().collect();
    assert_eq!(
        flat,
        vec![
            Segment {
                offset: 0,
                len: 16,
                data: 0
            },
            Segment {
                offset: 16,
                len: 16,
                data: 16
            },
            Segment {
                offset: 32,
                len: 8,
                data: 32
            },
            Segment {
                offset: 100,
                len: 4,
                data: 40
            },
        ]
    );
    for batch in &cut {
        let units: u64 = batch
            .iter()
            .map(|s| (s.offset + s.len as u64 - 1) / 8 - s.offset / 8 + 1)
            .sum();
        assert!(units <= 4, "{batch:?}");
    }
    assert!(batches(&[], 8, 4).is_empty());
}
