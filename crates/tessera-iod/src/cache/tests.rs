//! Tests of the cache core: limits, sharing and conflicts, eviction order, the budget, dirty
//! tracking and invalidation; a property test against a model cache; a multi-threaded test.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use proptest::prelude::*;

use super::*;

const KIB: usize = 1024;

fn small_cache(budget_bytes: usize, unit_bytes: usize, wait_ms: u64) -> Cache {
    let config = CacheConfig {
        budget_bytes,
        default_unit_bytes: unit_bytes,
        grant_wait: Duration::from_millis(wait_ms),
        ready_bytes: 0,
    };
    let cache = Cache::new(config).expect("valid test configuration");
    cache.check_consistency();
    cache
}

/// Fill a unit from a storage image: its bytes where the image has them, zeros past its end.
fn fill_from(storage: &[u8], index: u64, buffer: &mut [u8]) {
    let start = usize::try_from(index).unwrap() * buffer.len();
    buffer.fill(0);
    if start < storage.len() {
        let n = buffer.len().min(storage.len() - start);
        buffer[..n].copy_from_slice(&storage[start..start + n]);
    }
}

fn read(cache: &Cache, storage: &[u8], handle: u64, offset: u64, len: usize) -> Vec<u8> {
    read_filling(cache, handle, offset, len, |index, buffer| {
        fill_from(storage, index, buffer);
    })
}

/// Read under a grant, filling its misses with `fill(unit index, unit buffer)`.
fn read_filling(
    cache: &Cache,
    handle: u64,
    offset: u64,
    len: usize,
    mut fill: impl FnMut(u64, &mut [u8]),
) -> Vec<u8> {
    let mut grant = cache.grant_read(handle, offset, len).unwrap();
    grant
        .fill_missing(|index, buffer| {
            fill(index, buffer);
            Ok::<(), Infallible>(())
        })
        .unwrap();
    let mut out = vec![0; len];
    grant.copy_to(&mut out).unwrap();
    out
}

fn write(cache: &Cache, storage: &[u8], handle: u64, offset: u64, data: &[u8]) {
    write_filling(cache, handle, offset, data, |index, buffer| {
        fill_from(storage, index, buffer);
    });
}

/// Write under a grant, filling the units it covers in part with `fill`.
fn write_filling(
    cache: &Cache,
    handle: u64,
    offset: u64,
    data: &[u8],
    mut fill: impl FnMut(u64, &mut [u8]),
) {
    let mut grant = cache.grant_write(handle, offset, data.len()).unwrap();
    grant
        .fill_missing(|index, buffer| {
            fill(index, buffer);
            Ok::<(), Infallible>(())
        })
        .unwrap();
    grant.copy_from(data).unwrap();
}

#[test]
fn configuration_limits_name_the_bad_value() {
    for unit_bytes in [0, 2048, 5000, 128 * KIB] {
        let config = CacheConfig {
            default_unit_bytes: unit_bytes,
            ..CacheConfig::new(1 << 20)
        };
        let error = Cache::new(config).err().unwrap();
        assert_eq!(error, CacheError::UnitBytes { unit_bytes });
        assert!(
            error.to_string().contains(&unit_bytes.to_string()),
            "{error}"
        );
    }
    let error = Cache::new(CacheConfig::new(UNIT_BYTES_MAX - 1))
        .err()
        .unwrap();
    assert_eq!(
        error,
        CacheError::BudgetTooSmall {
            budget_bytes: UNIT_BYTES_MAX - 1
        }
    );
    let config = CacheConfig {
        grant_wait: GRANT_WAIT_MAX + Duration::from_millis(1),
        ..CacheConfig::new(1 << 20)
    };
    assert!(matches!(
        Cache::new(config),
        Err(CacheError::GrantWaitTooLong { .. })
    ));
    let cache = Cache::new(CacheConfig::new(1 << 20)).unwrap();
    assert_eq!(cache.unit_bytes(7), UNIT_BYTES_DEFAULT);
    assert_eq!(
        cache.set_unit_bytes(7, 3000),
        Err(CacheError::UnitBytes { unit_bytes: 3000 })
    );
}

#[test]
fn unit_size_is_fixed_at_first_use() {
    let cache = small_cache(64 * KIB, 4 * KIB, 50);
    cache.set_unit_bytes(1, 8 * KIB).unwrap();
    cache.set_unit_bytes(1, 8 * KIB).unwrap();
    drop(cache.grant_read(2, 0, 1).unwrap());
    assert_eq!(
        cache.set_unit_bytes(2, 16 * KIB),
        Err(CacheError::UnitBytesFixed {
            handle: 2,
            unit_bytes: 4 * KIB,
            requested: 16 * KIB
        })
    );
    let grant = cache.grant_read(1, 8191, 2).unwrap();
    let units: Vec<_> = grant.units().collect();
    assert_eq!(units.len(), 2);
    assert_eq!(
        units[0],
        GrantedUnit {
            index: 0,
            unit_bytes: 8 * KIB,
            range: 8191..8192,
            filled: false
        }
    );
    assert_eq!(
        units[1],
        GrantedUnit {
            index: 1,
            unit_bytes: 8 * KIB,
            range: 0..1,
            filled: false
        }
    );
}

#[test]
fn bad_ranges_are_refused() {
    let cache = small_cache(64 * KIB, 4 * KIB, 50);
    assert!(matches!(
        cache.grant_read(1, u64::MAX, 2),
        Err(CacheError::RangeOverflow { .. })
    ));
    let error = cache.grant_write(1, 1, 64 * KIB).err().unwrap();
    assert_eq!(
        error,
        CacheError::GrantTooLarge {
            handle: 1,
            offset: 1,
            len: 64 * KIB,
            needed_bytes: 68 * KIB,
            budget_bytes: 64 * KIB
        }
    );
    assert!(cache.grant_read(1, 5, 0).unwrap().is_empty());
    let mut grant = cache.grant_write(1, 0, 10).unwrap();
    assert_eq!(
        grant.copy_from(&[1; 9]),
        Err(CacheError::LengthMismatch {
            grant_len: 10,
            buffer_len: 9
        })
    );
    assert_eq!(
        grant.copy_from(&[1; 10]),
        Err(CacheError::Unfilled {
            handle: 1,
            unit_index: 0
        })
    );
    assert!(matches!(
        grant.bytes_mut(1),
        Err(CacheError::NoSuchUnit {
            position: 1,
            count: 1
        })
    ));
    drop(grant);
    cache.check_consistency();
    assert_eq!(
        cache.stats().units_in_use,
        0,
        "an unfilled released unit is dropped"
    );
}

#[test]
fn a_miss_is_filled_once_then_hits_and_readers_share() {
    let cache = small_cache(64 * KIB, 4 * KIB, 50);
    let storage: Vec<u8> = (0..10_000u32)
        .map(|i| u8::try_from(i % 251).unwrap())
        .collect();
    let mut grant = cache.grant_read(3, 100, 5000).unwrap();
    assert_eq!(grant.len(), 2);
    assert!(!grant.all_filled());
    assert!(matches!(
        grant.bytes(0),
        Err(CacheError::Unfilled {
            handle: 3,
            unit_index: 0
        })
    ));
    let mut filled = Vec::new();
    grant
        .fill_missing(|index, buffer| {
            filled.push(index);
            fill_from(&storage, index, buffer);
            Ok::<(), Infallible>(())
        })
        .unwrap();
    assert_eq!(filled, vec![0, 1]);
    let mut out = vec![0; 5000];
    grant.copy_to(&mut out).unwrap();
    assert_eq!(out, storage[100..5100]);
    drop(grant);
    let first = cache.grant_read(3, 0, 10).unwrap();
    let second = cache.grant_read(3, 4000, 200).unwrap();
    assert!(first.all_filled() && second.all_filled());
    assert_eq!(first.bytes(0).unwrap(), &storage[..10]);
    assert_eq!(second.bytes(1).unwrap(), &storage[4096..4200]);
    let stats = cache.stats();
    assert_eq!((stats.misses, stats.hits, stats.grant_waits), (2, 3, 0));
    cache.check_consistency();
}

#[test]
fn a_write_waits_for_readers_and_is_woken_by_their_release() {
    let cache = small_cache(64 * KIB, 4 * KIB, 5000);
    write(&cache, &[], 1, 0, &[7; 4096]);
    let reader = cache.grant_read(1, 0, 4096).unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let writer = {
        let (cache, released) = (cache.clone(), Arc::clone(&released));
        thread::spawn(move || {
            let mut grant = cache.grant_write(1, 10, 10).unwrap();
            assert!(
                released.load(Ordering::SeqCst),
                "the write was granted beside a reader"
            );
            grant.copy_from(&[9; 10]).unwrap();
        })
    };
    while cache.stats().grant_waits == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(reader.bytes(0).unwrap()[10..20], [7; 10]);
    released.store(true, Ordering::SeqCst);
    drop(reader);
    writer.join().unwrap();
    assert_eq!(
        read(&cache, &[], 1, 8, 14),
        [7, 7, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 7, 7]
    );
    assert_eq!(cache.stats().grant_waits, 1);
    cache.check_consistency();
}

#[test]
fn a_conflicting_grant_times_out_with_a_clear_error() {
    let cache = small_cache(64 * KIB, 4 * KIB, 30);
    let writer = cache.grant_write(5, 4096, 4096).unwrap();
    let error = cache.grant_read(5, 0, 8192).err().unwrap();
    assert!(
        matches!(
            error,
            CacheError::WaitTimeout {
                handle: 5,
                unit_index: 1,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("object 5: unit 1"), "{error}");
    // The failed grant gave back unit 0, which it had taken first.
    let stats = cache.stats();
    assert_eq!(stats.units_in_use, 1);
    let error = cache.grant_write(5, 4096, 1).err().unwrap();
    assert!(matches!(error, CacheError::WaitTimeout { .. }));
    drop(writer);
    assert_eq!(cache.stats().units_in_use, 0);
    cache.check_consistency();
}

#[test]
fn eviction_takes_the_least_recently_used_clean_unit() {
    let cache = small_cache(64 * KIB, 4 * KIB, 30);
    let storage = vec![1u8; 128 * KIB];
    for unit in 0..16u64 {
        read(&cache, &storage, 1, unit * 4096, 1);
    }
    read(&cache, &storage, 1, 0, 1); // unit 0 is now the most recent
    let before = cache.stats();
    assert_eq!((before.misses, before.hits, before.evictions), (16, 1, 0));
    read(&cache, &storage, 1, 16 * 4096, 1); // evicts unit 1
    read(&cache, &storage, 1, 0, 1); // still cached
    let after = cache.stats();
    assert_eq!((after.misses, after.hits, after.evictions), (17, 2, 1));
    read(&cache, &storage, 1, 4096, 1); // gone: a miss, which evicts unit 2
    let last = cache.stats();
    assert_eq!(
        (last.misses, last.evictions, last.units_in_use),
        (18, 2, 16)
    );
    assert_eq!(last.bytes_in_use, 64 * KIB);
    cache.check_consistency();
}

#[test]
fn dirty_and_granted_units_are_never_evicted_and_a_full_budget_fails_clearly() {
    let cache = small_cache(64 * KIB, 16 * KIB, 20);
    write(&cache, &[], 1, 0, &vec![5; 48 * KIB]);
    let held = cache.grant_read(2, 0, 1).unwrap(); // the last unit, held (unfilled)
    let error = cache.grant_read(3, 0, 1).err().unwrap();
    assert_eq!(
        error,
        CacheError::CacheFull {
            budget_bytes: 64 * KIB,
            dirty_bytes: 48 * KIB,
            waited_ms: match error {
                CacheError::CacheFull { waited_ms, .. } => waited_ms,
                _ => unreachable!(),
            }
        }
    );
    assert!(error.to_string().contains("65536 bytes"), "{error}");
    drop(held);
    // Write back two of the three dirty units; then a new grant evicts a clean one.
    let dirty = cache.take_dirty(Some(1), 20 * KIB);
    assert_eq!((dirty.len(), dirty.dirty_bytes()), (2, 32 * KIB));
    dirty.mark_clean();
    assert_eq!(cache.dirty_bytes(), 16 * KIB);
    read(&cache, &[], 3, 0, 64 * KIB - 16 * KIB);
    let stats = cache.stats();
    assert_eq!(stats.evictions, 2);
    assert_eq!(
        read(&cache, &[], 1, 32 * 1024, 16 * KIB),
        vec![5; 16 * KIB],
        "the dirty unit stayed"
    );
    cache.check_consistency();
}

#[test]
fn dirty_spans_are_tracked_handed_back_and_cleaned() {
    let cache = small_cache(64 * KIB, 4 * KIB, 30);
    let storage = vec![0u8; 16 * KIB];
    write(&cache, &storage, 4, 5000, &[1; 100]);
    write(&cache, &storage, 4, 4200, &[2; 10]);
    write(&cache, &storage, 4, 100, &[3; 4]);
    write(&cache, &storage, 9, 0, &[4; 4]);
    // Unit 1 of object 4 holds one span from 4200 to 5100.
    assert_eq!(cache.dirty_bytes(), 900 + 4 + 4);
    let dirty = cache.take_dirty(Some(4), usize::MAX);
    let units: Vec<(u64, u64, usize)> = dirty
        .units()
        .map(|unit| (unit.index, unit.offset, unit.bytes.len()))
        .collect();
    assert_eq!(units, vec![(0, 100, 4), (1, 4200, 900)]);
    let span = dirty.units().nth(1).unwrap().bytes.to_vec();
    assert_eq!(span[..10], [2; 10]);
    assert_eq!(span[800..], [1; 100]);
    // Under write-back, reads share the unit and writes wait.
    assert_eq!(read(&cache, &storage, 4, 100, 4), [3; 4]);
    assert!(matches!(
        cache.grant_write(4, 0, 1),
        Err(CacheError::WaitTimeout { .. })
    ));
    dirty.mark_clean();
    assert_eq!(cache.dirty_bytes(), 4);
    let all = cache.take_dirty(None, 0);
    assert_eq!(
        all.units()
            .map(|unit| (unit.handle, unit.offset))
            .collect::<Vec<_>>(),
        vec![(9, 0)]
    );
    drop(all); // not written: stays dirty
    assert_eq!(cache.dirty_bytes(), 4);
    let writer = cache.grant_write(9, 0, 1).unwrap();
    assert!(
        cache.take_dirty(None, 0).is_empty(),
        "a unit under a write is skipped"
    );
    drop(writer);
    cache.check_consistency();
}

#[test]
fn invalidate_drops_dirty_units_after_the_grants_end() {
    let cache = small_cache(64 * KIB, 4 * KIB, 2000);
    let storage = vec![8u8; 16 * KIB];
    write(&cache, &storage, 6, 0, &[1; 9000]);
    read(&cache, &storage, 7, 0, 10);
    let reader = cache.grant_read(6, 0, 1).unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let invalidator = {
        let (cache, released) = (cache.clone(), Arc::clone(&released));
        thread::spawn(move || {
            let dropped = cache.invalidate(6).unwrap();
            assert!(released.load(Ordering::SeqCst), "invalidated under a grant");
            dropped
        })
    };
    thread::sleep(Duration::from_millis(20));
    released.store(true, Ordering::SeqCst);
    drop(reader);
    assert_eq!(invalidator.join().unwrap(), 3);
    let stats = cache.stats();
    assert_eq!((stats.dirty_bytes, stats.units_in_use), (0, 1));
    assert_eq!(
        read(&cache, &storage, 6, 0, 3),
        [8; 3],
        "storage again, not the dropped bytes"
    );
    let short = small_cache(64 * KIB, 4 * KIB, 20);
    let held = short.grant_write(1, 0, 1).unwrap();
    assert!(matches!(
        short.invalidate(1),
        Err(CacheError::WaitTimeout { handle: 1, .. })
    ));
    drop(held);
    assert_eq!(short.invalidate(1), Ok(0));
    cache.check_consistency();
}

/// One step of the model test.
#[derive(Clone, Debug)]
enum Step {
    Read {
        handle: u64,
        offset: u64,
        len: usize,
    },
    Write {
        handle: u64,
        offset: u64,
        len: usize,
        seed: u8,
    },
    Flush {
        handle: Option<u64>,
        limit_bytes: usize,
    },
    Invalidate {
        handle: u64,
    },
}

const MODEL_OBJECTS: u64 = 3;
const MODEL_OBJECT_BYTES: u64 = 96 * 1024;

fn step() -> impl Strategy<Value = Step> {
    let handle = 0..MODEL_OBJECTS;
    let offset = 0..MODEL_OBJECT_BYTES;
    let len = 1usize..12 * 1024;
    prop_oneof![
        4 => (handle.clone(), offset.clone(), len.clone())
            .prop_map(|(handle, offset, len)| Step::Read { handle, offset, len }),
        4 => (handle.clone(), offset, len, any::<u8>())
            .prop_map(|(handle, offset, len, seed)| Step::Write { handle, offset, len, seed }),
        1 => (proptest::option::of(handle.clone()), 0usize..32 * 1024)
            .prop_map(|(handle, limit_bytes)| Step::Flush { handle, limit_bytes }),
        1 => handle.prop_map(|handle| Step::Invalidate { handle }),
    ]
}

/// The model: each object's current bytes, and what storage holds.
struct Model {
    current: HashMap<u64, Vec<u8>>,
    storage: HashMap<u64, Vec<u8>>,
}

impl Model {
    fn bytes(map: &mut HashMap<u64, Vec<u8>>, handle: u64, end: usize) -> &mut Vec<u8> {
        let bytes = map.entry(handle).or_default();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes
    }

    fn flush(&mut self, cache: &Cache, handle: Option<u64>, limit_bytes: usize) -> usize {
        let dirty = cache.take_dirty(handle, limit_bytes);
        let flushed = dirty.dirty_bytes();
        for unit in dirty.units() {
            let start = usize::try_from(unit.offset).unwrap();
            let storage = Self::bytes(&mut self.storage, unit.handle, start + unit.bytes.len());
            storage[start..start + unit.bytes.len()].copy_from_slice(unit.bytes);
        }
        dirty.mark_clean();
        flushed
    }
}

fn run_model(steps: &[Step]) {
    let cache = small_cache(64 * KIB, 4 * KIB, 1);
    cache.set_unit_bytes(1, 8 * KIB).unwrap();
    let mut model = Model {
        current: HashMap::new(),
        storage: HashMap::new(),
    };
    for step in steps {
        match *step {
            Step::Read {
                handle,
                offset,
                len,
            } => {
                let start = usize::try_from(offset).unwrap();
                let grant = loop {
                    match cache.grant_read(handle, offset, len) {
                        Ok(grant) => break grant,
                        Err(CacheError::CacheFull { .. }) => {
                            assert!(cache.dirty_bytes() > 0, "full of nothing dirty");
                            model.flush(&cache, None, usize::MAX);
                        }
                        Err(error) => panic!("{error}"),
                    }
                };
                let mut grant = grant;
                let storage = model.storage.get(&handle).cloned().unwrap_or_default();
                grant
                    .fill_missing(|index, buffer| {
                        fill_from(&storage, index, buffer);
                        Ok::<(), Infallible>(())
                    })
                    .unwrap();
                let mut out = vec![0; len];
                grant.copy_to(&mut out).unwrap();
                let expected =
                    &Model::bytes(&mut model.current, handle, start + len)[start..start + len];
                assert_eq!(
                    out, expected,
                    "read of {len} bytes at {offset} of object {handle}"
                );
            }
            Step::Write {
                handle,
                offset,
                len,
                seed,
            } => {
                let start = usize::try_from(offset).unwrap();
                let data: Vec<u8> = (0..len)
                    .map(|i| seed.wrapping_add(u8::try_from(i % 253).unwrap()))
                    .collect();
                let mut grant = loop {
                    match cache.grant_write(handle, offset, len) {
                        Ok(grant) => break grant,
                        Err(CacheError::CacheFull { .. }) => {
                            assert!(cache.dirty_bytes() > 0, "full of nothing dirty");
                            model.flush(&cache, None, usize::MAX);
                        }
                        Err(error) => panic!("{error}"),
                    }
                };
                let storage = model.storage.get(&handle).cloned().unwrap_or_default();
                grant
                    .fill_missing(|index, buffer| {
                        fill_from(&storage, index, buffer);
                        Ok::<(), Infallible>(())
                    })
                    .unwrap();
                grant.copy_from(&data).unwrap();
                Model::bytes(&mut model.current, handle, start + len)[start..start + len]
                    .copy_from_slice(&data);
            }
            Step::Flush {
                handle,
                limit_bytes,
            } => {
                let before = cache.dirty_bytes();
                let flushed = model.flush(&cache, handle, limit_bytes);
                assert_eq!(cache.dirty_bytes(), before - flushed);
            }
            Step::Invalidate { handle } => {
                cache.invalidate(handle).unwrap();
                let storage = model.storage.get(&handle).cloned().unwrap_or_default();
                model.current.insert(handle, storage);
            }
        }
        cache.check_consistency();
    }
    model.flush(&cache, None, usize::MAX);
    assert_eq!(cache.dirty_bytes(), 0);
    for handle in 0..MODEL_OBJECTS {
        let mut current = model.current.remove(&handle).unwrap_or_default();
        let mut storage = model.storage.remove(&handle).unwrap_or_default();
        let end = current.len().max(storage.len());
        current.resize(end, 0);
        storage.resize(end, 0);
        assert!(
            current == storage,
            "object {handle}: storage differs from the model after a flush"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_cache_matches_a_model(steps in proptest::collection::vec(step(), 1..80)) {
        run_model(&steps);
    }
}

#[test]
fn threads_reading_and_writing_overlapping_units_see_their_own_writes() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 300;
    const STRIPE_BYTES: usize = 1000;
    // 96 000 bytes: 24 units of 4 KiB, each shared by several threads, over a budget of 16
    // units, so units are evicted and re-filled from storage.
    const STRIPES: usize = 96;
    let cache = small_cache(64 * KIB, 4 * KIB, 5000);
    let storage = Arc::new(Mutex::new(vec![0u8; STRIPES * STRIPE_BYTES]));
    let done = Arc::new(AtomicBool::new(false));
    // A stripe belongs to thread `stripe % THREADS`; its bytes are all (thread, version).
    let stamp = |thread: usize, version: usize| {
        // Version 0 is "never written": the zeros storage starts with.
        if version == 0 {
            0
        } else {
            u8::try_from((thread * 61 + version) % 255 + 1).unwrap()
        }
    };
    let flusher = {
        let (cache, storage, done) = (cache.clone(), Arc::clone(&storage), Arc::clone(&done));
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let dirty = cache.take_dirty(None, 8 * KIB);
                let mut image = storage.lock().unwrap();
                for unit in dirty.units() {
                    let start = usize::try_from(unit.offset).unwrap();
                    image[start..start + unit.bytes.len()].copy_from_slice(unit.bytes);
                }
                drop(image);
                dirty.mark_clean();
                thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|me| {
            let (cache, storage) = (cache.clone(), Arc::clone(&storage));
            thread::spawn(move || {
                let mut versions = vec![0usize; STRIPES];
                let mut seed = me as u64 + 1;
                for round in 0..ROUNDS {
                    seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let stripe =
                        (usize::try_from(seed >> 33).unwrap() % (STRIPES / THREADS)) * THREADS + me;
                    let offset = (stripe * STRIPE_BYTES) as u64;
                    // Fill misses from storage as it is when the unit is held: a unit is
                    // evicted only after its bytes reached storage.
                    let fill = |index: u64, buffer: &mut [u8]| {
                        fill_from(&storage.lock().unwrap(), index, buffer);
                    };
                    if round % 3 == 0 {
                        let got = read_filling(&cache, 1, offset, STRIPE_BYTES, fill);
                        let want = stamp(me, versions[stripe]);
                        assert!(
                            got.iter().all(|&b| b == want),
                            "thread {me} stripe {stripe}"
                        );
                        // A wider read over everyone's stripes: no stripe is torn.
                        let first = offset.saturating_sub(3000);
                        let wide = read_filling(&cache, 1, first, 6000, fill);
                        let first = usize::try_from(first).unwrap();
                        for (i, pair) in wide.windows(2).enumerate() {
                            if (first + i + 1) % STRIPE_BYTES != 0 {
                                assert_eq!(pair[0], pair[1], "a torn stripe at byte {}", first + i);
                            }
                        }
                    } else {
                        versions[stripe] += 1;
                        let data = vec![stamp(me, versions[stripe]); STRIPE_BYTES];
                        write_filling(&cache, 1, offset, &data, fill);
                    }
                }
                versions
            })
        })
        .collect();
    let versions: Vec<Vec<usize>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    done.store(true, Ordering::SeqCst);
    flusher.join().unwrap();
    loop {
        let dirty = cache.take_dirty(None, usize::MAX);
        if dirty.is_empty() {
            break;
        }
        let mut image = storage.lock().unwrap();
        for unit in dirty.units() {
            let start = usize::try_from(unit.offset).unwrap();
            image[start..start + unit.bytes.len()].copy_from_slice(unit.bytes);
        }
        drop(image);
        dirty.mark_clean();
    }
    let image = storage.lock().unwrap();
    for stripe in 0..STRIPES {
        let owner = stripe % THREADS;
        let expected = stamp(owner, versions[owner][stripe]);
        let bytes = &image[stripe * STRIPE_BYTES..(stripe + 1) * STRIPE_BYTES];
        assert!(
            bytes.iter().all(|&b| b == expected),
            "stripe {stripe} of thread {owner}"
        );
    }
    let stats = cache.stats();
    assert_eq!(stats.dirty_bytes, 0);
    assert!(
        stats.hits > 0 && stats.misses > 0 && stats.evictions > 0,
        "{stats:?}"
    );
    cache.check_consistency();
}

#[test]
fn units_take_ready_slots_first_and_give_them_back() {
    let config = CacheConfig {
        default_unit_bytes: 64 * KIB,
        ready_bytes: 128 * KIB,
        ..CacheConfig::new(256 * KIB)
    };
    let cache = Cache::new(config).unwrap();
    let stats = cache.stats();
    assert_eq!(
        (stats.ready_bytes, stats.ready_registrar.as_str()),
        (128 * KIB, "pin")
    );
    // Four units: two in Ready slots, two on the heap.
    let mut grant = cache.grant_write(1, 0, 256 * KIB).unwrap();
    grant.copy_from(&vec![7; 256 * KIB]).unwrap();
    drop(grant);
    let stats = cache.stats();
    assert_eq!((stats.ready_units_made, stats.raw_units_made), (2, 2));
    assert_eq!(stats.ready_slots_taken, 2);
    let mut back = vec![0; 256 * KIB];
    cache
        .grant_read(1, 0, 256 * KIB)
        .unwrap()
        .copy_to(&mut back)
        .unwrap();
    assert!(back.iter().all(|&b| b == 7));
    // Dropped units give their slots back; new units take them, zeroed.
    cache.invalidate(1).unwrap();
    assert_eq!(cache.stats().ready_slots_taken, 0);
    let mut grant = cache.grant_write(2, 0, 10).unwrap();
    grant.fill_missing(|_, _| Ok::<(), ()>(())).unwrap();
    assert!(grant.bytes(0).unwrap().iter().all(|&b| b == 0));
    drop(grant);
    assert_eq!(cache.stats().ready_units_made, 3);
    // A Ready part that is not whole slots, or larger than the budget, is refused.
    for ready_bytes in [100, 512 * KIB] {
        let config = CacheConfig {
            ready_bytes,
            ..CacheConfig::new(256 * KIB)
        };
        assert!(matches!(
            Cache::new(config),
            Err(CacheError::ReadyRefused { .. })
        ));
    }
}

/// Lay `data` into a landing's memory, back to back, as a receive does.
fn receive(landing: &mut Landing, data: &[u8]) {
    let mut at = 0;
    for slice in &mut landing.slices() {
        let len = slice.len();
        slice.copy_from_slice(&data[at..at + len]);
        at += len;
    }
    assert_eq!(at, data.len(), "the slices hold exactly the write's bytes");
}

#[test]
fn a_landed_write_becomes_its_units_and_a_pinned_reply_keeps_the_old_bytes() {
    let config = CacheConfig {
        default_unit_bytes: 16 * KIB,
        ready_bytes: 128 * KIB,
        ..CacheConfig::new(512 * KIB)
    };
    let cache = Cache::new(config).unwrap();
    let storage = vec![0x11u8; 64 * KIB];
    // Unit 0 cached (in a Ready slot) and pinned by a reply still being sent.
    let mut grant = cache.grant_read(1, 0, 16 * KIB).unwrap();
    grant
        .fill_missing(|index, buffer| {
            fill_from(&storage, index, buffer);
            Ok::<(), Infallible>(())
        })
        .unwrap();
    let pinned = grant.pin();
    // Units 0 and 1 covered whole; unit 2 in two parts.
    let pieces = [(0u64, 32 * 1024 + 100), (40 * 1024, 8 * 1024)];
    let mut landing = cache.land(1, pieces).unwrap().expect("two whole units");
    assert_eq!(landing.bytes(), 32 * 1024 + 100 + 8 * 1024);
    assert_eq!(landing.parts().len(), 4);
    assert_eq!(
        landing.slices().len(),
        3,
        "two units, then one run of partial parts"
    );
    let data: Vec<u8> = (0..landing.bytes())
        .map(|i| (i % 251) as u8 | 0x80)
        .collect();
    receive(&mut landing, &data);
    let ranges: Vec<(u64, usize)> = landing
        .parts()
        .iter()
        .map(|part| (part.offset, part.len))
        .collect();
    let mut grant = cache
        .grant_write_landed(&landing, &ranges, Duration::from_secs(1))
        .unwrap();
    grant
        .fill_missing(|index, buffer| {
            fill_from(&storage, index, buffer);
            Ok::<(), Infallible>(())
        })
        .unwrap();
    let installed = grant.install(&mut landing, 0..4);
    assert_eq!(installed, [true, true, false, false]);
    for (index, part) in landing.parts().iter().enumerate().skip(2) {
        grant
            .write_at(part.offset, landing.part_bytes(index))
            .unwrap();
    }
    drop(grant);
    let mut model = storage.clone();
    model[..32 * KIB + 100].copy_from_slice(&data[..32 * KIB + 100]);
    model[40 * KIB..48 * KIB].copy_from_slice(&data[32 * KIB + 100..]);
    assert!(read(&cache, &storage, 1, 0, 64 * KIB) == model);
    // The reply still sends the bytes it pinned.
    let mut sent = Vec::new();
    pinned
        .for_each_slice(0, 16 * 1024, |bytes: &[u8]| {
            sent.extend_from_slice(bytes);
            Ok::<(), CacheError>(())
        })
        .unwrap();
    assert!(sent.iter().all(|&b| b == 0x11));
    let stats = cache.stats();
    // Made: unit 0 (Ready), the two landed units (one Ready slot left, then the heap), and
    // units 2 and 3 for the partial part and the read (the heap): no unit twice.
    assert_eq!(stats.units_landed, 2);
    assert_eq!((stats.ready_units_made, stats.raw_units_made), (2, 3));
    // Dirty: units 0 and 1, and unit 2 as one span from its first to its last written byte.
    assert_eq!(stats.dirty_bytes, 48 * KIB);
    drop(pinned);
    assert_eq!(
        cache.stats().ready_slots_taken,
        1,
        "the pinned old unit 0 gave its slot back"
    );
    cache.check_consistency();
}

#[test]
fn a_landing_is_refused_where_it_would_change_the_write_or_gain_nothing() {
    let cache = small_cache(256 * KIB, 4 * KIB, 100);
    let cases: [&[(u64, u64)]; 4] = [
        &[(0, 8192), (4096, 8192)],   // overlapping: the later piece must win
        &[(8192, 4096), (0, 4096)],   // out of order
        &[(100, 4000), (5000, 3000)], // no unit covered whole
        &[],                          // nothing
    ];
    for pieces in cases {
        assert!(
            cache.land(1, pieces.iter().copied()).unwrap().is_none(),
            "{pieces:?}"
        );
    }
    let landing = cache.land(1, [(0, 16 * 1024 + 1)]).unwrap().unwrap();
    assert_eq!(landing.batches(2), [0..2, 2..4, 4..5]);
    assert_eq!(landing.batches(100).len(), 1);
    assert_eq!(landing.batches(100)[0], 0..5);
    assert!(matches!(
        cache.land(1, [(u64::MAX - 10, 100)]),
        Err(CacheError::RangeOverflow { .. })
    ));
}

#[test]
fn a_landed_grant_that_times_out_keeps_the_landing_for_a_retry() {
    let cache = small_cache(256 * KIB, 4 * KIB, 50);
    let storage = vec![0u8; 16 * KIB];
    // A reader holds unit 2; the landed write covers units 0–2 whole.
    let reader = cache.grant_read(1, 8 * 1024, 10).unwrap();
    let mut landing = cache.land(1, [(0, 12 * 1024)]).unwrap().unwrap();
    let data = vec![0x5A; 12 * KIB];
    receive(&mut landing, &data);
    let ranges = [(0, 12 * KIB)];
    let refused = cache.grant_write_landed(&landing, &ranges, Duration::from_millis(50));
    assert!(matches!(
        refused,
        Err(CacheError::WaitTimeout { unit_index: 2, .. })
    ));
    drop(reader);
    let mut grant = cache
        .grant_write_landed(&landing, &ranges, Duration::from_millis(50))
        .unwrap();
    assert_eq!(grant.install(&mut landing, 0..3), [true, true, true]);
    drop(grant);
    assert!(read(&cache, &storage, 1, 0, 12 * KIB) == data);
    cache.check_consistency();
}

#[test]
fn a_fabric_registers_the_ready_region_once_for_its_life() {
    let config = CacheConfig {
        default_unit_bytes: 64 * KIB,
        ready_bytes: 128 * KIB,
        ..CacheConfig::new(256 * KIB)
    };
    let cache = Cache::new(config).unwrap();
    let memory = cache.ready_memory().expect("a Ready region");
    assert_eq!(memory.bytes(), 128 * KIB);
    let registrar = Arc::new(tessera_reg::NoneRegistrar::new());
    let handle = memory
        .register(registrar.clone(), "none:test")
        .expect("registered");
    assert_eq!(handle.segment.length, 128 * KIB);
    assert_eq!(cache.stats().ready_registrar, "pin+none:test");
    // More registrations than READY_REGISTRATIONS_MAX are refused, naming the limit.
    for _ in 1..READY_REGISTRATIONS_MAX {
        memory.register(registrar.clone(), "none:more").unwrap();
    }
    let refused = memory.register(registrar.clone(), "none:last").unwrap_err();
    assert!(
        refused.to_string().contains("READY_REGISTRATIONS_MAX"),
        "{refused}"
    );

    // Four units: two in Ready slots, two on the heap. Only the first two are all Ready.
    let mut grant = cache.grant_write(1, 0, 256 * KIB).unwrap();
    grant.copy_from(&vec![7; 256 * KIB]).unwrap();
    drop(grant);
    assert!(cache.peek_ready(1, &[(0, 128 * KIB)]));
    assert!(cache.peek_cached(1, &[(0, 256 * KIB)]));
    assert!(!cache.peek_ready(1, &[(64 * 1024, 128 * KIB)]));
    assert!(!cache.peek_ready(1, &[(512 * 1024, 10)]), "not cached");
    let pinned = cache.grant_read(1, 0, 256 * KIB).unwrap().pin();
    let mut in_ready = Vec::new();
    pinned
        .for_each_slice(0, 256 * 1024, |slice| {
            in_ready.push(memory.contains(slice));
            Ok::<(), CacheError>(())
        })
        .unwrap();
    assert_eq!(in_ready, [true, true, false, false]);
    drop(pinned);

    // Registrations last while the region is mapped: while the cache or `memory` holds it.
    drop(cache);
    assert_eq!(registrar.deregisters(), 0);
    drop(memory);
    assert_eq!(
        (registrar.registers(), registrar.deregisters()),
        (
            READY_REGISTRATIONS_MAX as u64,
            READY_REGISTRATIONS_MAX as u64
        )
    );
}

/// A registrar that refuses everything, as a provider out of registrable memory would.
#[derive(Debug)]
struct Refusing;

impl tessera_reg::Registrar for Refusing {
    fn name(&self) -> &'static str {
        "refusing"
    }

    fn register(
        &self,
        segment: tessera_reg::Segment,
    ) -> Result<tessera_reg::RegHandle, tessera_reg::RegError> {
        Err(tessera_reg::RegError::Registrar {
            registrar: "refusing".to_owned(),
            operation: "register",
            segment,
            message: "no room".to_owned(),
        })
    }

    fn deregister(&self, _handle: tessera_reg::RegHandle) -> Result<(), tessera_reg::RegError> {
        Ok(())
    }

    fn cost(&self) -> tessera_reg::CostModel {
        tessera_reg::NoneRegistrar::new().cost()
    }
}

#[test]
fn a_refused_ready_registration_names_the_bytes_and_the_reason() {
    let config = CacheConfig {
        ready_bytes: 64 * KIB,
        ..CacheConfig::new(256 * KIB)
    };
    let cache = Cache::new(config).unwrap();
    let memory = cache.ready_memory().unwrap();
    let refused = memory
        .register(Arc::new(Refusing), "ofi:test")
        .unwrap_err()
        .to_string();
    for part in ["65536 bytes", "ofi:test registration", "no room"] {
        assert!(refused.contains(part), "{part} missing from: {refused}");
    }
    // Nothing was added: the stats name the backend's registrar alone.
    assert_eq!(cache.stats().ready_registrar, "pin");
}

/// A cached-only grant over units of which the first are cached and a later one is not (or is
/// being written) refuses at once and gives back the units it took, not deadlocking on its
/// own lock as it did (an iod's tcp read of a partly cached range hung there).
#[test]
fn a_cached_only_grant_gives_back_what_it_took_when_a_later_unit_is_missing() {
    let cache = small_cache(64 * KIB, 4 * KIB, 50);
    let storage = vec![5u8; 16 * KIB];
    assert_eq!(read(&cache, &storage, 3, 0, 8 * KIB), vec![5u8; 8 * KIB]);
    let (done, finished) = std::sync::mpsc::channel();
    let cache = Arc::new(cache);
    let asking = Arc::clone(&cache);
    thread::spawn(move || {
        let missing = asking.grant_cached(3, &[(0, 12 * KIB)]).map(drop);
        let written = {
            let _writer = asking.grant_write(3, 8 * KIB as u64, 4 * KIB).unwrap();
            asking.grant_cached(3, &[(0, 12 * KIB)]).map(drop)
        };
        done.send((missing, written)).unwrap();
    });
    let (missing, written) = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("the cached-only grants answered");
    for result in [missing, written] {
        assert!(
            matches!(
                result,
                Err(CacheError::NotCached {
                    handle: 3,
                    unit_index: 2
                })
            ),
            "{result:?}"
        );
    }
    // Units 0 and 1 were given back: a write takes them at once.
    drop(cache.grant_write(3, 0, 8 * KIB).unwrap());
    cache.check_consistency();
}

#[test]
fn demoted_units_go_in_clean_at_the_chosen_end_and_never_over_cached_ones() {
    let cache = small_cache(64 * KIB, 4 * KIB, 50);
    let storage = vec![0u8; 64 * KIB];
    // Unit 1 is cached (and dirty) already; a demote of units 0–3 inserts 0, 2 and 3 only,
    // and a demote's partial units at either end are skipped.
    write(&cache, &storage, 1, 4 * 1024, &[9; 4 * KIB]);
    let demoted = vec![7u8; 16 * KIB + 100];
    assert_eq!(
        cache.insert_clean(1, 0, &demoted, End::MostRecent).unwrap(),
        3
    );
    assert_eq!(
        cache
            .insert_clean(1, 16 * 1024 + 100, &[1; 8 * KIB], End::MostRecent)
            .unwrap(),
        1
    );
    let stats = cache.stats();
    assert_eq!(stats.units_demoted, 4);
    let mut expected = vec![7u8; 16 * KIB];
    expected[4 * KIB..8 * KIB].fill(9);
    expected[8 * KIB..12 * KIB].copy_from_slice(&[7; 4 * KIB]);
    assert!(read(&cache, &storage, 1, 0, 16 * KIB) == expected);
    assert_eq!(stats.dirty_bytes, 4 * KIB, "demoted units are clean");
    // Placed at the least recent end, unit 0 is the next victim: 17 units for 16.
    cache.place(1, &[(0, 4 * KIB)], End::LeastRecent);
    let evictions = cache.stats().evictions;
    for index in 0..12u64 {
        drop(read(&cache, &storage, 2, index * 4096, 4096));
    }
    assert_eq!(cache.stats().evictions, evictions + 1);
    assert!(!cache.peek_cached(1, &[(0, 4 * KIB)]));
    assert!(cache.peek_cached(1, &[(8 * 1024, 4 * KIB)]));
    cache.check_consistency();
}

/// A demote pulled straight into landed units: the whole units not cached go in clean (their
/// landed buffers become the units), a cached one keeps its bytes, partial units are dropped,
/// and no landed write is counted.
#[test]
fn landed_demotes_go_in_clean_and_never_over_cached_units() {
    let cache = small_cache(64 * KIB, 4 * KIB, 50);
    let storage = vec![0u8; 64 * KIB];
    write(&cache, &storage, 1, 4 * 1024, &[9; 4 * KIB]);
    let landed_before = cache.stats().units_landed;
    // Units 0-3 whole, then 100 bytes of unit 4.
    let mut landing = cache
        .land_demote(1, [(0u64, (16 * KIB + 100) as u64)])
        .unwrap()
        .expect("whole units to land");
    let mut filled = 0u8;
    for slice in &mut landing.slices() {
        filled += 1;
        slice.fill(filled);
    }
    assert_eq!(
        cache.insert_landed_clean(landing, End::MostRecent).unwrap(),
        3
    );
    let stats = cache.stats();
    assert_eq!(stats.units_demoted, 3);
    assert_eq!(
        stats.units_landed, landed_before,
        "a demote is not a landed write"
    );
    assert_eq!(stats.dirty_bytes, 4 * KIB, "demoted units are clean");
    let got = read(&cache, &storage, 1, 0, 16 * KIB);
    assert!(got[..4 * KIB].iter().all(|&byte| byte == 1));
    assert!(
        got[4 * KIB..8 * KIB].iter().all(|&byte| byte == 9),
        "the cached unit stays"
    );
    assert!(got[8 * KIB..12 * KIB].iter().all(|&byte| byte == 3));
    assert!(got[12 * KIB..].iter().all(|&byte| byte == 4));
    assert!(
        !cache.peek_cached(1, &[(16 * 1024, 100)]),
        "a partial unit is dropped"
    );
    cache.check_consistency();
}

/// DEMOTE's placement holds for blocks the cache has already: a client demoting (or offering)
/// a block it evicts leaves this copy as the only one, so it goes to the demote's end — not
/// left at the least recent end where sending it to the client put it.
#[test]
fn a_demoted_or_offered_block_already_cached_moves_to_the_demote_end() {
    let cache = small_cache(64 * KIB, 4 * KIB, 50);
    let storage = vec![5u8; 128 * KIB];
    for index in 0..16u64 {
        drop(read(&cache, &storage, 1, index * 4096, 4096));
    }
    // Units 0 and 1 sent to a caching client: least recent.
    cache.place(1, &[(0, 8 * KIB)], End::LeastRecent);
    assert_eq!(
        cache
            .insert_clean(1, 0, &[5; 4 * KIB], End::MostRecent)
            .unwrap(),
        0,
        "cached already: nothing inserted"
    );
    assert!(cache.refuse_cached(1, &[(4096, 4 * KIB)], End::MostRecent));
    assert!(!cache.refuse_cached(1, &[(64 * 1024, 4 * KIB)], End::MostRecent));
    // Two new units evict the two least recent: units 2 and 3, not 0 and 1.
    drop(read(&cache, &storage, 2, 0, 4096));
    drop(read(&cache, &storage, 2, 4096, 4096));
    assert!(cache.peek_cached(1, &[(0, 8 * KIB)]));
    assert!(!cache.peek_cached(1, &[(8 * 1024, 4 * KIB)]));
    assert!(!cache.peek_cached(1, &[(12 * 1024, 4 * KIB)]));
    cache.check_consistency();
}

/// Evicted units' heap buffers serve later landings (bounded): a landed demote after
/// evictions allocates no new unit.
#[test]
fn evicted_unit_buffers_are_reused_by_landings() {
    let cache = small_cache(64 * KIB, 4 * KIB, 50);
    let storage = vec![3u8; 256 * KIB];
    for index in 0..24u64 {
        drop(read(&cache, &storage, 1, index * 4096, 4096));
    }
    let made = cache.stats().raw_units_made;
    assert_eq!(made, 24);
    let mut landing = cache
        .land_demote(2, [(0u64, (8 * KIB) as u64)])
        .unwrap()
        .expect("whole units to land");
    for slice in &mut landing.slices() {
        slice.fill(8);
    }
    assert_eq!(
        cache.insert_landed_clean(landing, End::MostRecent).unwrap(),
        2
    );
    assert_eq!(
        cache.stats().raw_units_made,
        made,
        "spare buffers, no new ones"
    );
    assert!(read(&cache, &storage, 2, 0, 8 * KIB)
        .iter()
        .all(|&byte| byte == 8));
    cache.check_consistency();
}
