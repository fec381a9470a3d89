//! Objects made ahead of their creates (`tessera mds --precreate`, issue 36): an ordinary
//! create takes a handle whose objects already exist on every iod; those objects hold the
//! file's data like any other; an iod's orphan sweep keeps the pool while the mds that made it
//! runs, and removes it once that mds is gone and another runs.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{bytes, tessera, Cluster};
use tessera_client::{CreateOptions, OpenMode};

/// The handles of the object files iod `index` holds.
fn objects(cluster: &Cluster, index: usize) -> HashSet<u64> {
    std::fs::read_dir(cluster.path().join(format!("iod-{index}")).join("objects"))
        .unwrap()
        .filter_map(|entry| {
            u64::from_str_radix(&entry.unwrap().file_name().to_string_lossy(), 16).ok()
        })
        .collect()
}

/// Waits until both iods hold at least `count` objects.
fn pooled(cluster: &Cluster, count: usize) -> [HashSet<u64>; 2] {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held = [objects(cluster, 0), objects(cluster, 1)];
        if held.iter().all(|set| set.len() >= count) {
            return held;
        }
        assert!(
            Instant::now() < deadline,
            "the iods hold {} and {} objects, not {count} each",
            held[0].len(),
            held[1].len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write_and_check(cluster: &Cluster, path: &str, seed: u64) {
    let data = bytes(seed, 200_000);
    let client = cluster.client();
    client
        .open(path, OpenMode::ReadWrite)
        .unwrap()
        .write_at(0, &data)
        .unwrap();
    let file = client.open(path, OpenMode::ReadOnly).unwrap();
    let mut back = vec![0u8; data.len()];
    file.read_at(0, &mut back).unwrap();
    assert!(back == data, "{path} reads back other bytes");
    assert_eq!(client.stat(path).unwrap().size, data.len() as u64);
}

#[test]
fn creates_take_objects_made_ahead_and_sweeps_keep_them_while_their_mds_runs() {
    let cluster = Cluster::start(2);
    // The mds's pool is full (1024, the default: no refill runs while the test restarts an
    // iod below, which would cut one short and leave its orphans).
    let deadline = Instant::now() + Duration::from_mins(1);
    while cluster.client().mds_stats().unwrap().precreated < 1024 {
        assert!(Instant::now() < deadline, "the mds made no objects ahead");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = pooled(&cluster, 64);
    let client = cluster.client();
    let mut files = Vec::new();
    for index in 0..10u64 {
        let path = format!("/ahead{index}");
        let file = client.create(&path, &CreateOptions::default()).unwrap();
        // Its objects were there before the create: it took a pooled handle.
        for (iod, held) in before.iter().enumerate() {
            assert!(
                held.contains(&file.handle()),
                "{path}'s object on iod {iod} was made by the create"
            );
        }
        write_and_check(&cluster, &path, index);
        files.push(path);
    }
    // A create with a hint of its own makes its objects as it always did.
    let hinted = CreateOptions {
        stripe_unit_bytes: 4096,
        ..CreateOptions::default()
    };
    let own = client.create("/own", &hinted).unwrap();
    assert!(
        !before[0].contains(&own.handle()),
        "a hinted create took a pooled handle"
    );
    write_and_check(&cluster, "/own", 99);

    // An iod restarted while the mds runs keeps the pool.
    let held = objects(&cluster, 0);
    cluster.restart_iod(0);
    let line = cluster.sweeps_done(0, 2);
    assert!(line.contains(" 0 orphans removed"), "{line}");
    assert!(objects(&cluster, 0).is_superset(&held));
    for (index, path) in files.iter().enumerate() {
        write_and_check(&cluster, path, index as u64 + 100);
    }

    // Killed, the mds leaves its pool behind; the next one makes a new one past it, and an
    // iod's next sweep removes the old one, never a file's object.
    let old_pool: HashSet<u64> = objects(&cluster, 1);
    let pid = cluster.pid("mds");
    // SAFETY: killing the mds process of this test's cluster; no memory is involved.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    common::wait_gone(pid, "mds");
    let output = tessera(&["restart", "--dir", cluster.path().to_str().unwrap(), "mds"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let made = cluster
        .client()
        .create("/after", &CreateOptions::default())
        .unwrap();
    assert!(
        !old_pool.contains(&made.handle()),
        "a handle of the dead mds's pool was handed out again"
    );
    cluster.restart_iod(1);
    let line = cluster.sweeps_done(1, 2);
    assert!(
        !line.contains(" 0 orphans removed"),
        "the old pool stayed: {line}"
    );
    for (index, path) in files.iter().enumerate() {
        write_and_check(&cluster, path, index as u64 + 200);
    }
    write_and_check(&cluster, "/after", 300);
}

#[test]
fn precreate_out_of_range_is_refused_naming_the_limit() {
    let output = tessera(&["mds", "--precreate", "4097", "--db", "/nonexistent/db"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--precreate") && stderr.contains("4096"),
        "{stderr}"
    );
}
