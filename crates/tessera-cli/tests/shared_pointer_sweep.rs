//! Shared-pointer leftovers against a real cluster: a side file no process holds is removed
//! by a sweep of its prefix; a held one, and one of another prefix, are not; a pointer
//! whose side file was swept under it reports the loss instead of counting on.

mod common;

use common::Cluster;
use tessera_client::shared_pointer::SHARED_POINTER_DIR;
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
