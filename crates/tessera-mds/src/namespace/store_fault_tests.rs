//! The store's full-disk and reopen paths (`store.rs`) seen through the namespace, on the
//! in-memory and fault-injecting stores of `crate::testing`: no root, no tmpfs. (The real file
//! on a full tmpfs is `tessera-cli/tests/enospc.rs`, as root.) Each test fails the storage
//! under a change, checks the error the client gets and that nothing of the change is
//! visible, heals the storage, and checks that the next change succeeds on the reopened store
//! with everything from before intact, then again after a restart over the same bytes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::store::STORE_REOPEN_INTERVAL_MS;
use crate::testing::{FaultPlan, FaultyStore, MemoryStore, Op};

/// Longest a test waits for threads to line up.
const LINE_UP_MAX: Duration = Duration::from_secs(10);

struct Fixture {
    memory: MemoryStore,
    plan: Arc<FaultPlan>,
    namespace: Namespace,
}

/// A namespace of 2 servers on a fault-injecting store over memory, with no fault yet.
fn open() -> Fixture {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(memory.clone());
    let plan = faulty.plan();
    let namespace = Namespace::open_on(Box::new(faulty), 2, 65536).unwrap();
    Fixture {
        memory,
        plan,
        namespace,
    }
}

fn create(namespace: &Namespace, path: &str) -> Result<u64, RemoteError> {
    let request = Create {
        path: path.to_owned(),
        mode: 0o644,
        exclusive: true,
        ..Create::default()
    };
    match namespace.plan_create(&Caller::root(), &request)? {
        CreatePlan::New(handle, inode) => Ok(namespace
            .commit_create(&Caller::root(), path, handle, &inode, true)?
            .0),
        CreatePlan::Existing(..) => panic!("{path} exists"),
    }
}

fn names(namespace: &Namespace, directory: &str) -> Vec<String> {
    namespace
        .readdir(&Caller::root(), directory, "")
        .unwrap()
        .entries
        .into_iter()
        .map(|entry| entry.name)
        .collect()
}

/// Heals the storage and waits until the store may be opened again (a reopen that failed
/// while the fault lasted is retried after `STORE_REOPEN_INTERVAL_MS`).
fn heal(plan: &FaultPlan) {
    plan.heal();
    std::thread::sleep(Duration::from_millis(STORE_REOPEN_INTERVAL_MS + 20));
}

/// The namespace opened again over the same bytes, with no fault: a restart of the mds.
fn restart(fixture: Fixture) -> Namespace {
    drop(fixture.namespace);
    Namespace::open_on(Box::new(fixture.memory), 2, 65536).unwrap()
}

#[test]
fn a_disk_that_fills_mid_commit_fails_the_create_with_no_space_and_recovers_after_healing() {
    let fixture = open();
    let namespace = &fixture.namespace;
    namespace.mkdir(&Caller::root(), "/d", 0o755).unwrap();
    let kept = [
        create(namespace, "/d/a").unwrap(),
        create(namespace, "/d/b").unwrap(),
    ];
    let before = namespace.snapshot();
    let stats = namespace.commit_stats();
    let writes = fixture.plan.calls(Op::Write);

    // One page more fits; the commit's next write finds the disk full.
    fixture.plan.fail_writes_after_bytes(4096, libc::ENOSPC);
    let error = create(namespace, "/d/c").unwrap_err();
    // `NoSpace` (code 19): ENOSPC at the POSIX edges, TESSERA_ERR_NO_SPACE in the C API.
    assert_eq!(error.code, ErrorCode::NoSpace, "{}", error.message);
    assert!(
        error
            .message
            .contains("no space left on the metadata server's disk (memory store)"),
        "{}",
        error.message
    );
    assert_eq!(namespace.store_health(), StoreHealth::NoSpace);
    let failed = fixture.plan.injected();
    assert!(failed >= 1);
    // Mid-commit: writes of the failing commit went through before the one that failed.
    assert!(fixture.plan.calls(Op::Write) - writes > failed);
    // Still full: the next change fails the same way.
    let error = namespace.mkdir(&Caller::root(), "/e", 0o755).unwrap_err();
    assert_eq!(error.code, ErrorCode::NoSpace, "{}", error.message);

    heal(&fixture.plan);
    // Nothing of either refused change is visible, everything before is.
    assert_eq!(namespace.snapshot(), before);
    let made = create(namespace, "/d/c").unwrap();
    assert!(!kept.contains(&made));
    assert_eq!(namespace.store_health(), StoreHealth::Ok);
    assert_eq!(names(namespace, "/d"), ["a", "b", "c"]);
    let now = namespace.commit_stats();
    assert_eq!(
        now.changes,
        stats.changes + 1,
        "only the create after healing"
    );

    let namespace = restart(fixture);
    assert_eq!(names(&namespace, "/d"), ["a", "b", "c"]);
    assert_eq!(
        namespace.lookup(&Caller::root(), "/d/a").unwrap().0,
        kept[0]
    );
    assert_eq!(namespace.lookup(&Caller::root(), "/d/c").unwrap().0, made);
    assert_eq!(
        namespace.lookup(&Caller::root(), "/e").unwrap_err().code,
        ErrorCode::NotFound
    );
}

/// What a refused change left: either nothing (`before`) or all of it, never a part.
fn nothing_or_all_of(namespace: &Namespace, before: &Snapshot, path: &str, parent: u64) -> bool {
    let now = namespace.snapshot();
    if now == *before {
        return false;
    }
    let Ok((handle, inode)) = namespace.lookup(&Caller::root(), path) else {
        panic!("{path} is not there, yet the namespace changed: {now:?}");
    };
    assert!(!inode.is_directory() && inode.nlink == 1 && inode.parent == parent);
    // Besides the parent's times, the file's inode and entry are all that is new.
    assert_eq!(now.0.len(), before.0.len() + 1);
    assert_eq!(now.1.len(), before.1.len() + 1);
    assert!(now.0.iter().any(|(key, _)| *key == handle));
    true
}

#[test]
fn an_eio_on_sync_fails_the_create_with_io_and_leaves_all_of_it_or_nothing() {
    let fixture = open();
    let namespace = &fixture.namespace;
    namespace.mkdir(&Caller::root(), "/d", 0o755).unwrap();
    let kept = create(namespace, "/d/a").unwrap();
    let (parent, _) = namespace.lookup(&Caller::root(), "/d").unwrap();
    let before = namespace.snapshot();
    let stats = namespace.commit_stats();

    fixture.plan.fail_after_calls(Op::Sync, 0, libc::EIO);
    let error = create(namespace, "/d/b").unwrap_err();
    // `Io`: EIO at the POSIX edges, TESSERA_ERR_IO in the C API.
    assert_eq!(error.code, ErrorCode::Io, "{}", error.message);
    assert_eq!(namespace.store_health(), StoreHealth::Failed);
    assert!(fixture.plan.injected() >= 1);

    heal(&fixture.plan);
    // redb wrote the commit's header before the sync that failed, so the reopened store may
    // hold the refused create (SEMANTICS.md §7.1): whole, if at all. With redb 4.5 it does.
    let survived = nothing_or_all_of(namespace, &before, "/d/b", parent);
    create(namespace, "/d/c").unwrap();
    assert_eq!(namespace.store_health(), StoreHealth::Ok);
    let expected: &[&str] = if survived {
        &["a", "b", "c"]
    } else {
        &["a", "c"]
    };
    assert_eq!(names(namespace, "/d"), expected);
    assert_eq!(
        namespace.commit_stats().changes,
        stats.changes + 1,
        "only /d/c was answered"
    );

    let namespace = restart(fixture);
    assert_eq!(names(&namespace, "/d"), expected);
    assert_eq!(namespace.lookup(&Caller::root(), "/d/a").unwrap().0, kept);
}

/// Lines up `BATCH` creates in `/b` behind the held durable commit of a first create, fails
/// the storage with `fail` before it is released, and returns the errors of the batch: the
/// first create must succeed, each of the batch fail.
fn fail_a_batch(fixture: &Fixture, fail: impl FnOnce(&FaultPlan)) -> Vec<RemoteError> {
    let namespace = &fixture.namespace;
    let plan = &fixture.plan;
    plan.hold_next(Op::Sync);
    std::thread::scope(|scope| {
        // The first create's durable commit stops in its fsync, holding redb's write lock.
        let first = scope.spawn(|| create(namespace, "/b/0"));
        assert!(
            plan.wait_held(1, LINE_UP_MAX),
            "no durable commit reached its fsync"
        );
        // The batch: every change begun and queued behind it, to commit together once it ends.
        let batch: Vec<_> = (1..=BATCH)
            .map(|i| scope.spawn(move || create(namespace, &format!("/b/{i}"))))
            .collect();
        let deadline = Instant::now() + LINE_UP_MAX;
        while usize::try_from(namespace.store.changes_under_way()).unwrap_or(usize::MAX) < BATCH {
            assert!(Instant::now() < deadline, "the batch did not line up");
            std::thread::sleep(Duration::from_millis(1));
        }
        fail(plan);
        plan.release();
        assert!(
            first.join().unwrap().is_ok(),
            "the held commit was to succeed"
        );
        batch
            .into_iter()
            .map(|change| match change.join().unwrap() {
                Ok(handle) => panic!("a create of the batch was answered ({handle})"),
                Err(error) => error,
            })
            .collect()
    })
}

/// Creates of the batch in [`fail_a_batch`]. Small: each failed change but the last waits
/// `STORE_DRAIN_MS` in its reopen for the others, which hold the failed handle while they
/// wait for the lock that reopen holds.
const BATCH: usize = 4;

#[test]
fn a_group_commit_that_finds_the_disk_full_fails_every_change_of_its_batch() {
    let fixture = open();
    let namespace = &fixture.namespace;
    namespace.mkdir(&Caller::root(), "/b", 0o755).unwrap();
    let stats = namespace.commit_stats();

    // The held commit wrote its pages before its fsync; the batch's commit writes none.
    let refused = fail_a_batch(&fixture, |plan| {
        plan.fail_writes_after_bytes(0, libc::ENOSPC);
    });
    assert_eq!(refused.len(), BATCH);
    // A change that waited on the failed commit gets its `NoSpace`; one that came to the
    // handle after it failed (the leader gathers the batch for at most
    // `GROUP_COMMIT_GATHER_US`) gets redb's latched error, as `Io`.
    let mut waited = 0;
    for error in &refused {
        match error.code {
            ErrorCode::NoSpace => waited += 1,
            ErrorCode::Io if error.message.contains("Previous I/O error") => {}
            _ => panic!("{:?}: {}", error.code, error.message),
        }
    }
    assert!(waited >= 1, "no change waited on the failed commit");

    heal(&fixture.plan);
    // The answered create is there, none of the refused ones.
    assert_eq!(names(namespace, "/b"), ["0"]);
    let now = namespace.commit_stats();
    assert_eq!(now.changes, stats.changes + 1);
    assert_eq!(now.commits, stats.commits + 1);
    create(namespace, "/b/8").unwrap();

    let namespace = restart(fixture);
    assert_eq!(names(&namespace, "/b"), ["0", "8"]);
}

#[test]
fn a_group_commit_whose_sync_fails_fails_every_change_of_its_batch() {
    let fixture = open();
    let namespace = &fixture.namespace;
    namespace.mkdir(&Caller::root(), "/b", 0o755).unwrap();
    let stats = namespace.commit_stats();

    // The held fsync passes; every later one fails.
    let refused = fail_a_batch(&fixture, |plan| {
        plan.fail_after_calls(Op::Sync, 1, libc::EIO);
    });
    assert_eq!(refused.len(), BATCH);
    for error in &refused {
        assert_eq!(error.code, ErrorCode::Io, "{}", error.message);
    }

    heal(&fixture.plan);
    // The answered create is there; a refused one may be too (its commit's header was
    // written before the failed sync, SEMANTICS.md §7.1), each whole: an inode with its entry.
    let there = names(namespace, "/b");
    assert_eq!(there.first().map(String::as_str), Some("0"));
    for name in &there {
        let number: usize = name.parse().unwrap();
        assert!(number <= BATCH, "{name}");
        let (_, inode) = namespace
            .lookup(&Caller::root(), &format!("/b/{name}"))
            .unwrap();
        assert_eq!((inode.is_directory(), inode.nlink), (false, 1));
    }
    let now = namespace.commit_stats();
    assert_eq!(now.changes, stats.changes + 1, "only /b/0 was answered");
    assert_eq!(now.commits, stats.commits + 1);
    create(namespace, "/b/8").unwrap();

    let mut expected = there;
    expected.push("8".to_owned());
    let namespace = restart(fixture);
    assert_eq!(names(&namespace, "/b"), expected);
}
