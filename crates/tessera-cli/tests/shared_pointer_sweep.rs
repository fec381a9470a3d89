//! Shared-pointer leftovers against a real cluster: a side file no process holds is removed
//! by a sweep of its prefix; a held one, and one of another prefix, are not; a pointer
//! whose side file was swept under it reports the loss instead of counting on; opens that
//! race sweeps (another job opening the same file) all get one pointer.

mod common;

use common::Cluster;
use tessera_client::shared_pointer::{SHARED_POINTER_DIR, SHARED_POINTER_OPEN_TRIES_MAX};
use tessera_client::{CreateOptions, SharedPointer};

fn names(client: &tessera_client::Client) -> Vec<String> {
    client
        .readdir(SHARED_POINTER_DIR)
        .unwrap()
        .into_iter()
        .map(|entry| entry.name)
        .collect()
}

#[test]
fn a_sweep_removes_only_side_files_nobody_holds() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    // No side file yet: nothing to sweep, and no directory is not an error.
    assert_eq!(SharedPointer::sweep(&client, "00aa-").unwrap(), 0);

    let held = SharedPointer::open(&client, "00aa-held").unwrap();
    held.fetch_add(5).unwrap();
    // Leftovers: side files whose holders are gone (made here without a hold).
    let bare = CreateOptions {
        server_count: 1,
        ..CreateOptions::default()
    };
    for name in ["00aa-dead1", "00aa-dead2", "00ab-dead"] {
        client
            .create(&format!("{SHARED_POINTER_DIR}/{name}"), &bare)
            .unwrap();
    }
    assert_eq!(SharedPointer::sweep(&client, "00aa-").unwrap(), 2);
    assert_eq!(names(&client), ["00aa-held", "00ab-dead"]);
    // The held pointer is untouched and still counts.
    assert_eq!(held.fetch_add(1).unwrap(), 5);
    assert_eq!(held.load().unwrap(), 6);

    // A second holder of the same name keeps it alive after the first lets go.
    let second = SharedPointer::open(&client, "00aa-held").unwrap();
    drop(held);
    assert_eq!(SharedPointer::sweep(&client, "00aa-").unwrap(), 0);
    assert_eq!(second.load().unwrap(), 6);
    drop(second);
    // Nobody holds it now.
    assert_eq!(SharedPointer::sweep(&client, "00aa-").unwrap(), 1);
    assert_eq!(names(&client), ["00ab-dead"]);

    assert!(SharedPointer::sweep(&client, "").is_err());
    assert!(SharedPointer::sweep(&client, "a/b").is_err());
}

#[test]
fn a_pointer_swept_from_under_it_reports_the_loss() {
    let cluster = Cluster::start(1);
    let client = cluster.client();
    let pointer = SharedPointer::open(&client, "0001-x").unwrap();
    pointer.fetch_add(3).unwrap();
    // Someone removes the side file outright (as a sweep would after a lapsed hold).
    SharedPointer::remove(&client, "0001-x").unwrap();
    // A counter update fails at once (its lock names a handle that is gone)...
    assert!(pointer.fetch_add(1).is_err());
    // ...and so does a plain load; once the next renewal has noticed, the refusal names the
    // lost hold.
    let deadline =
        std::time::Instant::now() + tessera_client::shared_pointer::SHARED_POINTER_HOLD_RENEW * 3;
    loop {
        match pointer.load() {
            Err(error) if error.to_string().contains("hold lapsed") => break,
            // Before the renewal notices, the servers refuse the gone handle themselves.
            other => {
                assert!(other.is_err(), "a load of a removed side file succeeded");
                assert!(
                    std::time::Instant::now() < deadline,
                    "the loss was not noticed"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// Opens racing sweeps, as when jobs open one file at once: every round, three holders (each
/// with its own client, as separate processes) open one new name and count on it while a
/// sweeper sweeps the name's prefix over and over, fewer times than an open tries. No holder
/// may fail, and the pointer must count every holder's add once (a sweep that removed a held
/// side file would restart the count or fail an add).
#[test]
fn opens_racing_sweeps_keep_one_pointer_that_counts_every_add() {
    const ROUNDS: usize = 100;
    const HOLDERS: usize = 3;
    // Each sweep removes a name at most once; an open gives up after its tries.
    const SWEEPS_PER_ROUND: usize = SHARED_POINTER_OPEN_TRIES_MAX / 2;
    let cluster = Cluster::start(2);
    let sweeping = cluster.client();
    let holding: Vec<_> = (0..HOLDERS).map(|_| cluster.client()).collect();
    let mut swept_under_opens = 0;
    for round in 0..ROUNDS {
        let prefix = format!("{round:04x}-");
        let name = format!("{prefix}live");
        let (removed, held) = std::thread::scope(|scope| {
            let sweeper = scope.spawn(|| {
                (0..SWEEPS_PER_ROUND)
                    .map(|_| SharedPointer::sweep(&sweeping, &prefix).expect("sweep"))
                    .sum::<usize>()
            });
            // Each holder hands its pointer back, so that all hold at once until every one
            // has counted, as the processes of one open do until close.
            let holders: Vec<_> = holding
                .iter()
                .map(|client| {
                    scope.spawn(|| {
                        let pointer = SharedPointer::open(client, &name)?;
                        let before = pointer.fetch_add(1)?;
                        Ok::<_, tessera_client::ClientError>((pointer, before))
                    })
                })
                .collect();
            let held: Vec<_> = holders
                .into_iter()
                .map(|holder| holder.join().expect("holder"))
                .collect();
            (sweeper.join().expect("sweeper"), held)
        });
        let mut before: Vec<u64> = held
            .into_iter()
            .map(|outcome| {
                outcome
                    .unwrap_or_else(|error| panic!("round {round}: {error}"))
                    .1
            })
            .collect();
        before.sort_unstable();
        let expected: Vec<u64> = (0..HOLDERS as u64).collect();
        assert_eq!(before, expected, "round {round}: the adds of the holders");
        swept_under_opens += removed;
    }
    eprintln!("{swept_under_opens} side files swept while being opened, over {ROUNDS} rounds");
}
