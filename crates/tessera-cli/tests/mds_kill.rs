//! Group commit keeps "acknowledged means durable" (issue 36): four clients create files as
//! fast as they can while the mds is killed with SIGKILL at three moments of the storm; after
//! each restart every create that was answered is there, as a file, listed in its directory.
//! A change the mds committed but had not made durable may be there or not; one it answered
//! must be.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{tessera, Cluster};
use tessera_client::{CreateOptions, FileKind};

const CLIENTS: usize = 4;
/// Creates each client makes at most in one round.
const CREATES_MAX: usize = 2_000;
/// Answered creates (all clients) after which the mds is killed, per round.
const KILL_AFTER: [usize; 3] = [20, 120, 300];
/// Longest a round may take before the kill (a slow machine still gets there).
const ROUND_LIMIT: Duration = Duration::from_mins(1);

/// The names each client had answered when its storm ended.
fn storm(
    cluster: &Cluster,
    round: usize,
    acknowledged: &Arc<AtomicUsize>,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<String>>> {
    (0..CLIENTS)
        .map(|client_index| {
            let client = cluster.client_with_timeout(Duration::from_secs(3));
            let (acknowledged, stop) = (acknowledged.clone(), stop.clone());
            let dir = format!("/storm/r{round}c{client_index}");
            client.mkdir(&dir, 0o755).unwrap();
            std::thread::spawn(move || {
                let mut answered = Vec::new();
                for item in 0..CREATES_MAX {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let path = format!("{dir}/f{item}");
                    let options = CreateOptions {
                        exclusive: true,
                        ..CreateOptions::default()
                    };
                    match client.create(&path, &options) {
                        Ok(_) => {
                            answered.push(path);
                            acknowledged.fetch_add(1, Ordering::SeqCst);
                        }
                        // The mds is gone: the storm is over for this client.
                        Err(_) => break,
                    }
                }
                answered
            })
        })
        .collect()
}

#[test]
fn a_killed_mds_loses_no_answered_create_under_a_storm_from_four_clients() {
    let cluster = Cluster::start(2);
    cluster.client().mkdir("/storm", 0o755).unwrap();
    let mut answered_in_all = Vec::new();
    for (round, &kill_after) in KILL_AFTER.iter().enumerate() {
        let acknowledged = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let clients = storm(&cluster, round, &acknowledged, &stop);
        let started = Instant::now();
        while acknowledged.load(Ordering::SeqCst) < kill_after {
            assert!(
                started.elapsed() < ROUND_LIMIT,
                "round {round}: only {} creates answered in {ROUND_LIMIT:?}",
                acknowledged.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let pid = cluster.pid("mds");
        // SAFETY: killing the mds process of this test's cluster; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        common::wait_gone(pid, "mds");
        stop.store(true, Ordering::SeqCst);
        let answered: Vec<String> = clients
            .into_iter()
            .flat_map(|client| client.join().unwrap())
            .collect();
        assert!(
            answered.len() >= kill_after,
            "round {round}: {}",
            answered.len()
        );
        let output = tessera(&["restart", "--dir", cluster.path().to_str().unwrap(), "mds"]);
        assert!(
            output.status.success(),
            "round {round}: restart of the mds failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        answered_in_all.extend(answered);
        // Every create answered in this round and the ones before is there.
        let client = cluster.client();
        for path in &answered_in_all {
            let attr = client
                .stat(path)
                .unwrap_or_else(|err| panic!("round {round}: answered {path} is lost: {err}"));
            assert_eq!(attr.kind, FileKind::File, "{path}");
            assert_eq!(attr.size, 0, "{path}");
        }
        for client_index in 0..CLIENTS {
            let dir = format!("/storm/r{round}c{client_index}");
            let listed: Vec<String> = client
                .readdir(&dir)
                .unwrap()
                .into_iter()
                .map(|entry| format!("{dir}/{}", entry.name))
                .collect();
            for path in answered_in_all
                .iter()
                .filter(|path| path.starts_with(&format!("{dir}/")))
            {
                assert!(
                    listed.contains(path),
                    "round {round}: {path} is not listed in {dir}"
                );
            }
        }
    }
    // The mds made them durable in groups: it counts every answered change and its commits.
    let stats = cluster.client().mds_stats().unwrap();
    assert!(stats.commits <= stats.changes, "{stats:?}");
    assert!(stats.inodes >= answered_in_all.len() as u64, "{stats:?}");
}
