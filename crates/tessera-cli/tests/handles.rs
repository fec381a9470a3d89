//! Calls that name a file by handle, against a real cluster, as two users other than the
//! cluster's owner (issue 35, holes 4 and 7): a handle is a small sequential number anyone can
//! guess, so it carries no authority. `Renew`, `StatHandle` and the range locks need a
//! capability an open by path issued to the caller; a stranger learns nothing of a handle,
//! not even whether it exists; a renewal checks again, as of now, what an open of the file's
//! path checks; a range lock is released only by the uid that took it, and one uid holds at
//! most its share of the mds's lock table.
//!
//! The users' credentials are signed with the cluster key for their uids (what the agent
//! signs for a process of that uid), so the servers see exactly what they would see from
//! those users' processes.

#![allow(
    clippy::too_many_lines,
    reason = "tests have no length budget (make tidy counts production code only)"
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Cluster;
use tessera_auth::{Grant, KeySigner, Rights};
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, OpenMode};
use tessera_net::Connection;
use tessera_proto::limits::RANGE_LOCKS_PER_UID_MAX;
use tessera_proto::{
    Capability, ErrorCode, LockRange, Opened, RemoteError, Renew, StatHandle, UnlockRange,
};

const TIMEOUT: Duration = Duration::from_secs(10);
/// Two users who own nothing in the cluster's root.
const ALICE: u32 = 2001;
const BOB: u32 = 2002;

fn signer(cluster: &Cluster, uid: u32) -> KeySigner {
    KeySigner::user(cluster.key(), (uid, uid, Vec::new()))
}

/// A client of the library for `uid`.
fn client_as(cluster: &Cluster, uid: u32) -> Client {
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    Client::with_authenticator(
        &config,
        &ClientOptions::default(),
        Arc::new(signer(cluster, uid)),
    )
}

/// A raw connection to the mds for `uid`, to send what the library would not.
fn mds_as(cluster: &Cluster, uid: u32) -> Connection {
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    Connection::connect(
        "mds",
        &config.mds.address,
        TIMEOUT,
        &signer(cluster, uid),
        None,
    )
    .unwrap()
}

fn refusal<T: std::fmt::Debug>(result: Result<T, tessera_net::NetError>) -> RemoteError {
    let error = result.expect_err("refused");
    error
        .remote()
        .expect("a refusal, not a broken connection")
        .clone()
}

fn renew(
    mds: &mut Connection,
    uid: u32,
    cluster: &Cluster,
    (handle, capability): (u64, Capability),
    rights: Rights,
) -> Result<Opened, RemoteError> {
    let credentials = tessera_auth::Authenticator::credentials(&signer(cluster, uid)).unwrap();
    mds.call(&Renew {
        credentials,
        handle,
        capability,
        read: rights.read,
        write: rights.write,
    })
    .map_err(|error| error.remote().expect("a refusal").clone())
}

fn signed(cluster: &Cluster, handle: u64, rights: Rights, uid: u32, expires_s: u64) -> Capability {
    Grant {
        handle,
        rights,
        uid,
        expires_s,
        epoch: 1,
    }
    .sign(&cluster.key())
}

fn assert_denied(error: &RemoteError, words: &str) {
    assert_eq!(error.code, ErrorCode::PermissionDenied, "{}", error.message);
    assert!(
        error.message.contains(words),
        "{:?} does not say {words:?}",
        error.message
    );
}

/// Every by-handle request a stranger can make for `handle` with `capability` (which is not
/// for it): each refusal, with the handle's spelling replaced, so two handles compare.
fn stranger_refusals(
    mds: &mut Connection,
    cluster: &Cluster,
    handle: u64,
    capability: &Capability,
) -> Vec<String> {
    let credentials = tessera_auth::Authenticator::credentials(&signer(cluster, BOB)).unwrap();
    let mut refusals = Vec::new();
    for shown in [Capability::default(), capability.clone()] {
        for rights in [Rights::ANY, Rights::READ, Rights::READ_WRITE] {
            refusals.push(refusal(mds.call(&Renew {
                credentials: credentials.clone(),
                handle,
                capability: shown.clone(),
                read: rights.read,
                write: rights.write,
            })));
        }
        refusals.push(refusal(mds.call(&StatHandle {
            credentials: credentials.clone(),
            handle,
            capability: shown.clone(),
        })));
        for exclusive in [false, true] {
            refusals.push(refusal(mds.call(&LockRange {
                handle,
                capability: shown.clone(),
                start: 0,
                end: 1,
                exclusive,
                wait_ms: 0,
                lease_ms: 1000,
            })));
        }
    }
    refusals
        .into_iter()
        .map(|error| {
            assert_eq!(error.code, ErrorCode::PermissionDenied, "{}", error.message);
            error.message.replace(&format!("{handle:#x}"), "HANDLE")
        })
        .collect()
}

/// Before, `Renew` needed no capability and checked only the file's own bits: a user read a
/// 0644 file inside root's 0700 directory, wrote a 0666 one there, and learned owner, mode and
/// layout of any handle. Now a stranger's every by-handle request is refused the same way
/// whether the handle exists or not, an old capability of a file whose directory has closed
/// since is not renewed, and a renewal sees chmods of the file's directories as of now.
#[test]
fn a_handle_tells_a_stranger_nothing_and_a_renewal_checks_the_path_as_of_now() {
    let cluster = Cluster::start(2);
    let root = cluster.client();
    let create = |path: &str, mode: u32, data: &[u8]| {
        let options = CreateOptions {
            mode,
            ..CreateOptions::default()
        };
        let file = root.create(path, &options).unwrap();
        file.write_at(0, data).unwrap();
        file.handle()
    };
    root.mkdir("/private", 0o700).unwrap();
    let readable = create("/private/readable", 0o644, b"root's readable bytes");
    let writable = create("/private/writable", 0o666, b"root's writable bytes");
    root.mkdir("/pub", 0o755).unwrap();
    let shared = create("/pub/shared", 0o644, b"everyone may read this");

    let bob = client_as(&cluster, BOB);
    let opened = bob.open("/pub/shared", OpenMode::ReadOnly).unwrap();
    let bobs = opened.capability().unwrap();
    let mut mds = mds_as(&cluster, BOB);

    // A stranger: every by-handle call on root's files is refused, word for word as on a
    // handle no file has.
    let absent = writable + 1000;
    let on_absent = stranger_refusals(&mut mds, &cluster, absent, &bobs);
    for handle in [readable, writable] {
        assert_eq!(
            stranger_refusals(&mut mds, &cluster, handle, &bobs),
            on_absent,
            "the refusals for handle {handle:#x} differ from those for an absent handle"
        );
    }
    for message in &on_absent {
        for leak in ["0o6", "uid 0", "mode", "layout", "stripe"] {
            assert!(!message.contains(leak), "{message:?} tells {leak:?}");
        }
    }
    // A capability for those handles, signed for bob as if an open had issued it while
    // /private was open (expired or not), is not renewed: bob may not search /private now.
    for (handle, rights) in [(readable, Rights::READ), (writable, Rights::READ_WRITE)] {
        for expires_s in [tessera_auth::now_s() - 60, tessera_auth::now_s() + 60] {
            let old = signed(&cluster, handle, rights, BOB, expires_s);
            let error = renew(&mut mds, BOB, &cluster, (handle, old), rights).unwrap_err();
            assert_denied(&error, "needs search on directory");
        }
    }
    // Root's own capability is not bob's.
    let roots = root.open("/pub/shared", OpenMode::ReadOnly).unwrap();
    let error = renew(
        &mut mds,
        BOB,
        &cluster,
        (shared, roots.capability().unwrap()),
        Rights::READ,
    )
    .unwrap_err();
    assert_denied(&error, "this connection speaks for uid 2002");

    // Bob's own capability renews, for no more than it grants, while the path lets him in.
    let renewed = renew(
        &mut mds,
        BOB,
        &cluster,
        (shared, bobs.clone()),
        Rights::READ,
    )
    .unwrap();
    assert_eq!((renewed.attr.handle, renewed.attr.mode), (shared, 0o644));
    let grant = Grant::parse(&renewed.capability).unwrap();
    assert_eq!(
        (grant.handle, grant.uid, grant.rights),
        (shared, BOB, Rights::READ)
    );
    let error = renew(
        &mut mds,
        BOB,
        &cluster,
        (shared, bobs.clone()),
        Rights::READ_WRITE,
    )
    .unwrap_err();
    assert_denied(&error, "grants read access");
    // An expired capability of his renews too: it proves he opened the file.
    let expired = signed(
        &cluster,
        shared,
        Rights::READ,
        BOB,
        tessera_auth::now_s() - 3600,
    );
    let fresh = renew(&mut mds, BOB, &cluster, (shared, expired), Rights::READ).unwrap();
    assert!(Grant::parse(&fresh.capability).unwrap().expires_s > tessera_auth::now_s());
    // Root closes /pub: the renewal is refused as an open would be; opened again, granted.
    root.chmod("/pub", 0o700).unwrap();
    let error = renew(
        &mut mds,
        BOB,
        &cluster,
        (shared, bobs.clone()),
        Rights::READ,
    )
    .unwrap_err();
    assert_denied(&error, "needs search on directory");
    assert_eq!(
        bob.open("/pub/shared", OpenMode::ReadOnly)
            .unwrap_err()
            .code(),
        Some(ErrorCode::PermissionDenied)
    );
    root.chmod("/pub", 0o755).unwrap();
    renew(
        &mut mds,
        BOB,
        &cluster,
        (shared, bobs.clone()),
        Rights::READ,
    )
    .unwrap();
    // And the file's own bits, as of now.
    root.chmod("/pub/shared", 0o600).unwrap();
    let error = renew(&mut mds, BOB, &cluster, (shared, bobs), Rights::READ).unwrap_err();
    assert_denied(&error, "needs read");

    // Nothing of root's changed, and the connection still serves bob.
    let mut back = [0u8; 21];
    let file = root.open("/private/readable", OpenMode::ReadOnly).unwrap();
    file.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"root's readable bytes");
    let file = root.open("/private/writable", OpenMode::ReadOnly).unwrap();
    file.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"root's writable bytes");
    assert_eq!(file.stat().unwrap().size, 21);
    let mut back = [0u8; 22];
    opened.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"everyone may read this");
}

/// Before, a user with only a read capability released another user's exclusive lock by its
/// id (ids count from 1), and a second writer was then granted it; and one user filled the
/// whole table of 65 536 locks so that nobody else could lock.
#[test]
fn a_range_lock_is_released_only_by_its_holder_and_one_uid_holds_its_share() {
    let cluster = Cluster::start(1);
    let root = cluster.client();
    let options = CreateOptions {
        mode: 0o666,
        ..CreateOptions::default()
    };
    root.create("/locked", &options).unwrap();
    let alice = client_as(&cluster, ALICE);
    let bob = client_as(&cluster, BOB);
    let alices = alice.open("/locked", OpenMode::ReadWrite).unwrap();
    let bobs_reader = bob.open("/locked", OpenMode::ReadOnly).unwrap();
    let bobs_writer = bob.open("/locked", OpenMode::ReadWrite).unwrap();
    let handle = alices.handle();
    let now = |file: &tessera_client::File, exclusive| {
        file.lock_range_with(
            0,
            100,
            exclusive,
            &tessera_client::LockOptions {
                wait: Duration::ZERO,
                lease: Duration::from_mins(1),
            },
        )
    };

    // An exclusive lock needs a write capability, end to end.
    let error = now(&bobs_reader, true).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::PermissionDenied), "{error}");
    assert!(error.to_string().contains("grants read access"), "{error}");

    let held = now(&alices, true).unwrap();
    // Bob names alice's lock with his read capability: nothing is released...
    let mut bobs_mds = mds_as(&cluster, BOB);
    bobs_mds
        .call(&UnlockRange {
            handle,
            capability: bobs_reader.capability().unwrap(),
            lock_id: held.lock_id(),
        })
        .unwrap();
    // ...so his writer is still refused, naming the lock that holds the bytes.
    let error = now(&bobs_writer, true).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::Busy), "{error}");
    assert!(
        error
            .to_string()
            .contains("a lock holds bytes [0, 100) exclusive"),
        "{error}"
    );
    // Alice releases it; then he is granted.
    held.release().unwrap();
    let bobs_lock = now(&bobs_writer, true).unwrap();
    bobs_lock.release().unwrap();

    // Alice takes her whole share of the table; one more is refused, naming the limit and
    // her uid; bob still locks.
    let mut alices_mds = mds_as(&cluster, ALICE);
    let capability = alices.capability().unwrap();
    let lock = |mds: &mut Connection, capability: &Capability, start: u64| {
        mds.call(&LockRange {
            handle,
            capability: capability.clone(),
            start,
            end: start + 1,
            exclusive: false,
            wait_ms: 0,
            lease_ms: 600_000,
        })
    };
    let mut ids = Vec::new();
    for start in 0..RANGE_LOCKS_PER_UID_MAX as u64 {
        ids.push(lock(&mut alices_mds, &capability, start).unwrap().lock_id);
    }
    let error = refusal(lock(&mut alices_mds, &capability, 1 << 30));
    assert_eq!(error.code, ErrorCode::LimitExceeded, "{}", error.message);
    for words in [
        "uid 2001",
        "range_locks_per_uid_max 4096",
        &format!("{handle:#x}"),
    ] {
        assert!(error.message.contains(words), "{words}: {}", error.message);
    }
    let bobs_capability = bobs_writer.capability().unwrap();
    let bobs_id = lock(&mut bobs_mds, &bobs_capability, 1 << 30)
        .unwrap()
        .lock_id;
    assert!(!ids.contains(&bobs_id));
    // Bob cannot free alice's room by naming her ids; she can.
    for &id in &ids[..16] {
        bobs_mds
            .call(&UnlockRange {
                handle,
                capability: bobs_capability.clone(),
                lock_id: id,
            })
            .unwrap();
    }
    assert_eq!(
        refusal(lock(&mut alices_mds, &capability, 1 << 31)).code,
        ErrorCode::LimitExceeded
    );
    for &id in &ids[..16] {
        alices_mds
            .call(&UnlockRange {
                handle,
                capability: capability.clone(),
                lock_id: id,
            })
            .unwrap();
    }
    for start in 0..16 {
        lock(&mut alices_mds, &capability, (1 << 31) + start).unwrap();
    }
    assert_eq!(
        refusal(lock(&mut alices_mds, &capability, 1 << 32)).code,
        ErrorCode::LimitExceeded
    );
}
