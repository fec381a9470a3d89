//! Unit tests of the object store: plans, cached and mapped reads, kept mappings, the sweep.

use std::io::IoSlice;

use super::*;
use crate::plan::Residency;

/// Reads `pieces` of object 7 through `read_mapped`, back to back.
fn read_mapped(store: &ObjectStore, pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    let outcome = store
        .read_mapped(7, pieces, |slices, _| {
            for slice in slices {
                out.extend_from_slice(slice);
            }
            Ok(())
        })
        .unwrap();
    assert!(outcome.is_some(), "served from a mapping");
    out
}

/// Writes object bytes to the device and drops them from the page cache; false where the
/// kernel keeps them (tmpfs).
fn evict(store: &ObjectStore, handle: u64) -> bool {
    use std::os::fd::AsRawFd;
    let object = store.object(handle).unwrap();
    object.file.sync_data().unwrap();
    // SAFETY: advice about an open descriptor.
    let status =
        unsafe { libc::posix_fadvise(object.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(status, 0);
    let size = object.file.metadata().unwrap().len();
    store.residency(&object, 0, size) == Residency::Cold
}

#[test]
fn reads_of_cold_data_are_priced_cold_and_sieve_only_small_spans() {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(directory.path()).unwrap();
    store.create(7, 0).unwrap();
    let data: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 251) as u8).collect();
    store
        .write(
            7,
            &[Piece::new(0, data.len() as u64)],
            &data,
            StoragePlan::PerPiece,
        )
        .unwrap();
    let object = store.object(7).unwrap();
    assert_eq!(store.residency(&object, 0, 1 << 20), Residency::Cached);
    // Past the end of the object there is nothing to read from the device.
    assert_eq!(
        store.residency(&object, 4 << 20, 5 << 20),
        Residency::Cached
    );
    if !evict(&store, 7) {
        crate::not_run::ignored_at_run_time(&format!(
            "the file system of {} keeps the object's pages cached (tmpfs?)",
            directory.path().display()
        ));
        return;
    }
    // Block columns: 512-byte pieces every 2 KiB over 1 MiB, and 128-byte pieces every
    // 512 bytes over 64 KiB.
    let columns = |count: u64, bytes: u64| -> Vec<Piece> {
        (0..count)
            .map(|i| Piece::new(i * 4 * bytes, bytes))
            .collect()
    };
    let check = |pieces: &[Piece], expected: StoragePlan| {
        let wanted: u64 = pieces.iter().map(|p| p.length).sum();
        let mut buffer = vec![0u8; usize::try_from(wanted).unwrap()];
        let outcome = store
            .read(7, pieces, &mut buffer, StoragePlan::Auto)
            .unwrap();
        assert_eq!(outcome.plan, expected, "{} pieces", pieces.len());
        let mut at = 0;
        for piece in pieces {
            let offset = usize::try_from(piece.offset).unwrap();
            let length = usize::try_from(piece.length).unwrap();
            assert_eq!(&buffer[at..at + length], &data[offset..offset + length]);
            at += length;
        }
    };
    check(&columns(512, 512), StoragePlan::PerPiece);
    // The same request again finds the pages cached: sieving pays there.
    assert_eq!(store.residency(&object, 0, 1 << 20), Residency::Cached);
    check(&columns(512, 512), StoragePlan::Sieve);
    assert!(evict(&store, 7));
    check(&columns(128, 128), StoragePlan::Sieve);
}

/// A store in `directory` with object 7 holding 1 MiB of a pattern, written just now (so
/// cached), and that pattern.
fn store_of_one_mib(directory: &Path) -> (ObjectStore, Vec<u8>) {
    let store = ObjectStore::open(directory).unwrap();
    store.create(7, 0).unwrap();
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    store
        .write(
            7,
            &[Piece::new(0, data.len() as u64)],
            &data,
            StoragePlan::PerPiece,
        )
        .unwrap();
    (store, data)
}

#[test]
fn reads_of_cached_bytes_are_served_now_and_the_rest_left_to_a_blocking_thread() {
    let directory = tempfile::tempdir().unwrap();
    let (store, data) = store_of_one_mib(directory.path());
    let pieces = [Piece::new(1000, 300_000), Piece::new(600_000, 200_000)];
    let mut now = vec![0xEEu8; 500_000];
    let outcome = store
        .read_now(7, &pieces, &mut now)
        .expect("every byte is cached")
        .unwrap();
    assert_eq!((outcome.calls, outcome.storage_bytes), (2, 500_000));
    let expected = [&data[1000..301_000], &data[600_000..800_000]].concat();
    assert!(now == expected, "the bytes read now are the file's");
    let mut buffer = vec![0u8; 4096];
    // An object not open, a read past the end (the blocking read zero-fills it), too many
    // runs, or an extent a write holds: not now.
    assert!(store
        .read_now(8, &[Piece::new(0, 10)], &mut buffer[..10])
        .is_none());
    let past = [Piece::new(data.len() as u64 - 10, 100)];
    assert!(store.read_now(7, &past, &mut buffer[..100]).is_none());
    let many: Vec<Piece> = (0..=READ_NOW_RUNS_MAX as u64)
        .map(|k| Piece::new(k * 100, 10))
        .collect();
    assert!(store
        .read_now(7, &many, &mut buffer[..many.len() * 10])
        .is_none());
    {
        let object = store.object(7).unwrap();
        let _writing = object.extents.lock(0, 4096, true);
        assert!(store
            .read_now(7, &[Piece::new(100, 100)], &mut buffer[..100])
            .is_none());
    }
    assert!(store
        .read_now(7, &[Piece::new(100, 100)], &mut buffer[..100])
        .is_some());
    // Bytes not in the page cache are not waited for (the kernel drops clean pages at
    // DONTNEED here, as the residency test above relies on too).
    assert!(evict(&store, 7), "the pages could not be evicted");
    assert!(store
        .read_now(7, &[Piece::new(0, 4096)], &mut buffer)
        .is_none());
}

#[test]
fn cached_reads_are_sent_from_the_mapping_in_request_order_under_their_extent() {
    let directory = tempfile::tempdir().unwrap();
    let (store, data) = store_of_one_mib(directory.path());
    let whole = [Piece::new(0, data.len() as u64)];
    let concat = |slices: &[IoSlice<'_>]| -> Vec<u8> {
        slices
            .iter()
            .flat_map(|slice| slice.iter().copied())
            .collect()
    };
    let send = |outcome: &Outcome, slices: &[IoSlice<'_>]| (*outcome, concat(slices));
    // Bytes not in the page cache are not waited for; read back in, they are sent.
    assert!(evict(&store, 7), "the pages could not be evicted");
    assert!(store
        .read_mapped_now(7, &[Piece::new(0, 4096)], send)
        .is_none());
    let mut buffer = vec![0u8; data.len()];
    store
        .read(7, &whole, &mut buffer, StoragePlan::PerPiece)
        .unwrap();
    // In request order, not file order; the extent is held shared while they are sent.
    let pieces = [Piece::new(600_000, 200_000), Piece::new(1000, 300_000)];
    let object = store.object(7).unwrap();
    let (outcome, sent) = store
        .read_mapped_now(7, &pieces, |outcome, slices| {
            assert!(
                object.extents.try_lock(1000, 2000, true).is_none(),
                "a write waits"
            );
            assert!(object.extents.try_lock(1000, 2000, false).is_some());
            send(outcome, slices)
        })
        .expect("every byte is cached");
    assert_eq!((outcome.calls, outcome.storage_bytes), (0, 500_000));
    assert_eq!(store.stats().reads.mapped, 1, "counted as mapped");
    let expected = [&data[600_000..800_000], &data[1000..301_000]].concat();
    assert!(sent == expected, "the bytes sent are the file's");
    assert!(
        object.extents.try_lock(0, 1 << 20, true).is_some(),
        "let go"
    );
    // An object not open, a read past the end (the buffered read zero-fills it), or an
    // extent a write holds: not from the mapping.
    assert!(store
        .read_mapped_now(8, &[Piece::new(0, 10)], send)
        .is_none());
    let past = [Piece::new(data.len() as u64 - 10, 100)];
    assert!(store.read_mapped_now(7, &past, send).is_none());
    // Many short runs, as a strided read: sent from the mapping all the same.
    let many: Vec<Piece> = (0..2000u64).map(|k| Piece::new(k * 500, 10)).collect();
    let (outcome, sent) = store.read_mapped_now(7, &many, send).expect("all cached");
    let expected: Vec<u8> = (0..2000usize)
        .flat_map(|k| data[k * 500..k * 500 + 10].to_vec())
        .collect();
    assert!(sent == expected && outcome.storage_bytes == 20_000);
    {
        let _writing = object.extents.lock(0, 4096, true);
        assert!(store
            .read_mapped_now(7, &[Piece::new(100, 100)], send)
            .is_none());
    }
    assert!(store
        .read_mapped_now(7, &[Piece::new(100, 100)], send)
        .is_some());
    // Only in the mmap serve mode.
    let normal = ObjectStore::open(directory.path())
        .unwrap()
        .with_serve(ServeMode::Normal, None)
        .unwrap();
    let mut buffer = [0u8; 100];
    normal
        .read(
            7,
            &[Piece::new(100, 100)],
            &mut buffer,
            StoragePlan::PerPiece,
        )
        .unwrap();
    assert!(normal
        .read_mapped_now(7, &[Piece::new(100, 100)], send)
        .is_none());
}

#[test]
fn kept_mappings_follow_truncates_growth_and_removal() {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(directory.path()).unwrap();
    store.create(7, 0).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let whole = [Piece::new(0, data.len() as u64)];
    store
        .write(7, &whole, &data, StoragePlan::PerPiece)
        .unwrap();
    assert_eq!(
        read_mapped(&store, &[Piece::new(1000, 5000)]),
        data[1000..6000]
    );
    assert_eq!(store.kept_mapping_bytes(), KEPT_MAPPING_STEP);
    // Served by the same mapping: none made, none given back.
    assert_eq!(read_mapped(&store, &whole), data);
    assert_eq!(store.kept_mapping_bytes(), KEPT_MAPPING_STEP);

    // Shrunk: what lies past the new end reads as zeros (and touching it would be fatal).
    store.truncate(7, 3000).unwrap();
    let expected = [&data[1000..3000], &[0u8; 3000][..]].concat();
    assert_eq!(read_mapped(&store, &[Piece::new(1000, 5000)]), expected);

    // Grown past the kept mapping by a write far out: the mapping grows to cover it.
    let far = KEPT_MAPPING_STEP + 10;
    store
        .write(7, &[Piece::new(far, 4)], b"tail", StoragePlan::PerPiece)
        .unwrap();
    let got = read_mapped(&store, &[Piece::new(far, 4), Piece::new(2990, 20)]);
    let expected = [&b"tail"[..], &data[2990..3000], &[0u8; 10][..]].concat();
    assert_eq!(got, expected);
    assert_eq!(
        store.kept_mapping_bytes(),
        2 * KEPT_MAPPING_STEP,
        "the old one given back"
    );

    // Beyond the kept range, a read maps its own span.
    let beyond = KEPT_MAPPING_BYTES_MAX + 100;
    store
        .write(7, &[Piece::new(beyond, 3)], b"end", StoragePlan::PerPiece)
        .unwrap();
    assert_eq!(read_mapped(&store, &[Piece::new(beyond, 3)]), b"end");
    assert_eq!(store.kept_mapping_bytes(), 2 * KEPT_MAPPING_STEP);

    // Removing the object closes it and gives its mapping back.
    store.remove(7).unwrap();
    assert_eq!(store.kept_mapping_bytes(), 0);
}

#[test]
fn merges_adjacent_pieces_and_applies_overlaps_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    store.create(5, 0).unwrap();
    let pieces = [
        Piece::new(0, 4),
        Piece::new(4, 4),
        Piece::new(2, 2),
        Piece::new(100, 0),
    ];
    let outcome = store
        .write(5, &pieces, b"aaaabbbbcc", StoragePlan::PerPiece)
        .unwrap();
    assert_eq!(
        outcome.calls, 2,
        "the first two pieces are one storage call; the empty one is none"
    );
    let mut buffer = [0u8; 10];
    let reads = store
        .read(
            5,
            &[Piece::new(0, 8), Piece::new(8, 2)],
            &mut buffer,
            StoragePlan::Auto,
        )
        .unwrap();
    assert_eq!(reads.calls, 1);
    assert_eq!(
        &buffer, b"aaccbbbb\0\0",
        "later piece wins; past the end reads zeros"
    );
    assert_eq!(store.stat(5).unwrap().0, 8);
    assert_eq!(store.object_count(), 1);
}

#[test]
fn every_read_plan_overwrites_every_byte_of_a_reused_buffer() {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(directory.path()).unwrap();
    store.create(3, 0).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8 + 1).collect();
    store
        .write(3, &[Piece::new(0, 10_000)], &data, StoragePlan::PerPiece)
        .unwrap();
    // Scattered pieces, out of order, the last ones past the end of the object.
    let pieces = [
        Piece::new(9_000, 500),
        Piece::new(10, 90),
        Piece::new(200, 1_000),
        Piece::new(9_800, 400),
        Piece::new(12_000, 300),
    ];
    let mut expected = Vec::new();
    for piece in &pieces {
        for offset in piece.offset..piece.offset + piece.length {
            expected.push(
                data.get(usize::try_from(offset).unwrap())
                    .copied()
                    .unwrap_or(0),
            );
        }
    }
    for plan in [
        StoragePlan::Auto,
        StoragePlan::PerPiece,
        StoragePlan::Batched,
        StoragePlan::Sieve,
    ] {
        // A buffer an earlier request filled with its own bytes.
        let mut buffer = vec![0xEE; expected.len()];
        store.read(3, &pieces, &mut buffer, plan).unwrap();
        assert_eq!(buffer, expected, "{plan:?}");
    }
}

#[test]
fn unknown_handles_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let err = store
        .read(0xabc, &[Piece::new(0, 1)], &mut [0], StoragePlan::Auto)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::UnknownHandle);
    assert!(err.message.contains("0xabc"), "{}", err.message);
    assert_eq!(
        store.remove(0xabc).unwrap_err().code,
        ErrorCode::UnknownHandle
    );
}

#[test]
fn the_sweep_removes_dead_objects_and_keeps_live_ones_and_foreign_files() {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(directory.path()).unwrap();
    for handle in 2..12 {
        store.create(handle, 0).unwrap();
    }
    std::fs::write(directory.path().join("objects").join("notes.txt"), b"x").unwrap();
    let mut asked = Vec::new();
    let report = store
        .sweep_orphans(|handles| {
            asked.extend_from_slice(handles);
            Ok(handles.iter().copied().filter(|h| h % 2 == 0).collect())
        })
        .unwrap();
    asked.sort_unstable();
    assert_eq!(
        asked,
        (2..12).collect::<Vec<_>>(),
        "every object asked about once"
    );
    let mut removed = report.removed.clone();
    removed.sort_unstable();
    assert_eq!(removed, vec![3, 5, 7, 9, 11]);
    assert_eq!(
        (report.examined, report.foreign, report.kept_created),
        (10, 1, 0)
    );
    for handle in 2..12 {
        assert_eq!(
            store.object_path(handle).exists(),
            handle % 2 == 0,
            "{handle}"
        );
    }
    assert_eq!(store.object_count(), 5, "five objects left");
    assert!(directory.path().join("objects").join("notes.txt").exists());
}

#[test]
fn the_sweep_never_removes_an_object_created_while_it_runs() {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(directory.path()).unwrap();
    store.create(5, 0).unwrap();
    store.create(6, 0).unwrap();
    // The mds says neither is live; meanwhile object 5 is removed and made again (as by
    // an mds that restarted and handed the handle out anew): the new object must stay.
    let report = store
        .sweep_orphans(|_| {
            store.remove(5).unwrap();
            store.create(5, 0).unwrap();
            Ok(Vec::new())
        })
        .unwrap();
    assert_eq!(report.removed, vec![6]);
    assert_eq!(report.kept_created, 1);
    assert!(store.object_path(5).exists());
    assert!(!store.object_path(6).exists());
    // Once the sweep is over, creates are not remembered.
    assert!(store.sweep.lock().unwrap().is_none());
}

/// Before, a create of an existing handle emptied the object: a second mds that handed
/// out the same handle erased a file of this cluster.
#[test]
fn a_create_never_empties_an_existing_object() {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(directory.path()).unwrap();
    store.create(4, 0).unwrap();
    store
        .write(4, &[Piece::new(0, 5)], b"kept!", StoragePlan::PerPiece)
        .unwrap();
    let error = store.create(4, 4096).unwrap_err();
    assert_eq!(error.code, ErrorCode::Exists);
    assert!(
        error.message.contains("object 0x4 exists"),
        "{}",
        error.message
    );
    assert_eq!(store.stat(4).unwrap().0, 5);
    let mut back = [0u8; 5];
    store
        .read(4, &[Piece::new(0, 5)], &mut back, StoragePlan::PerPiece)
        .unwrap();
    assert_eq!(&back, b"kept!");
    assert_eq!(store.object_count(), 1);
    // An empty one is not taken over either.
    store.create(5, 0).unwrap();
    assert_eq!(store.create(5, 0).unwrap_err().code, ErrorCode::Exists);
    assert_eq!(store.object_count(), 2);
}

#[test]
fn a_failed_question_stops_the_sweep_and_removes_nothing() {
    let directory = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(directory.path()).unwrap();
    store.create(9, 0).unwrap();
    let error = store
        .sweep_orphans(|_| Err(RemoteError::new(ErrorCode::Unavailable, "mds down")))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Unavailable);
    assert!(store.object_path(9).exists());
    assert!(
        store.sweep.lock().unwrap().is_none(),
        "a later sweep may run"
    );
}

#[test]
fn memory_storage_serves_every_path_without_a_file() {
    use crate::testing::MemStorage;
    let store = ObjectStore::with_storage(MemStorage::new(), CostModel::default()).unwrap();
    assert!(!store.planner().batching(), "no batches without a file");
    store.create(7, 0).unwrap();
    let pieces = [Piece::new(0, 4), Piece::new(10, 4), Piece::new(20, 4)];
    let outcome = store
        .write(7, &pieces, b"aaaabbbbcccc", StoragePlan::Batched)
        .unwrap();
    assert_eq!((outcome.plan, outcome.calls), (StoragePlan::PerPiece, 3));
    let gathered = store
        .write_gathered(
            7,
            &pieces[1..],
            &[b"xy", b"zwvu", b"ts"],
            StoragePlan::PerPiece,
        )
        .unwrap();
    assert_eq!(
        (gathered.storage_bytes, gathered.calls),
        (8, 4),
        "one call per slice"
    );
    let mut buffer = [0u8; 12];
    let outcome = store
        .read(7, &pieces, &mut buffer, StoragePlan::Batched)
        .unwrap();
    assert_eq!(outcome.plan, StoragePlan::PerPiece);
    assert_eq!(&buffer, b"aaaaxyzwvuts");
    let mapped = store
        .read_mapped(7, &pieces, |_, _| unreachable!())
        .unwrap();
    assert_eq!(
        mapped, None,
        "no mapping without a file: the caller reads buffered"
    );
    // Pipelined units over memory.
    let outcome = store
        .serve_units(7, &pieces, false, StoragePlan::Auto, |units| {
            let mut first = [0u8; 4];
            units.read(&pieces[..1], &mut first)?;
            assert_eq!(&first, b"aaaa");
            Ok(())
        })
        .unwrap();
    assert_eq!(outcome.calls, 1);
    assert_eq!(store.stat(7).unwrap().0, 24);
    // The sweep lists memory too.
    store.create(8, 0).unwrap();
    let report = store.sweep_orphans(|_| Ok(vec![7])).unwrap();
    assert_eq!(report.removed, vec![8]);
    assert_eq!(store.storage().handles(), vec![7]);
}
