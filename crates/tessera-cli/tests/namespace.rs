//! One namespace per cluster, and no object emptied by a stranger (issue 35, hole 8), against
//! real servers. Every server holds the cluster key, so the key alone let a second mds, started
//! with it on a fresh store (`--db`), hand out the cluster's handles again: its `ObjectCreate`
//! emptied `/victim1`'s objects and the put it accepted then showed through `/victim1`; with
//! two iods swapped in its list, the refusal came only after `ObjectCreate` and the rollback's
//! `ObjectRemove` had run on the other iods, and `/victim1` was gone. Now each iod obeys the
//! one namespace it recorded at its first contact, a create never empties an object, and the
//! mds checks every iod a call involves before it changes anything on any of them.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Cluster;
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, OpenMode};

/// Bytes of `/victim1`: one stripe unit on each of two iods.
const VICTIM_BYTES: usize = 128 << 10;

/// A second metadata server, stopped when dropped.
struct Mds {
    child: Child,
    address: String,
}

impl Drop for Mds {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `tessera mds` on the store `db` with the cluster's key and the iods at `iods`, in
/// that order, and waits until it listens.
fn start_mds(cluster: &Cluster, db: &Path, iods: &[String]) -> Mds {
    // Handles one by one, as the tests below foresee them: no objects made ahead.
    start_mds_with(cluster, db, iods, &["--precreate", "0"])
}

/// [`start_mds`] with `extra` arguments.
fn start_mds_with(cluster: &Cluster, db: &Path, iods: &[String], extra: &[&str]) -> Mds {
    let address_file = db.with_extension("addr");
    let mut command = Command::new(common::TESSERA);
    command
        .args(["mds", "--db"])
        .arg(db)
        .arg("--key")
        .arg(cluster.path().join("key"))
        .args(["--listen", "127.0.0.1:0", "--address-file"])
        .arg(&address_file)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(db.with_extension("log")).unwrap());
    for iod in iods {
        command.args(["--iod", iod]);
    }
    let mut child = command.spawn().expect("tessera mds starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !address_file.exists() {
        assert!(child.try_wait().unwrap().is_none(), "the second mds exited");
        assert!(Instant::now() < deadline, "the second mds did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let address = std::fs::read_to_string(&address_file).unwrap();
    Mds { child, address }
}

/// A client of the cluster's iods whose namespace calls go to `mds`.
fn client_through(cluster: &Cluster, mds: &Mds) -> Client {
    let mut config = ClusterConfig::load(&cluster.file()).unwrap();
    config.mds.address.clone_from(&mds.address);
    Client::new(&config, &ClientOptions::default())
}

fn iod_addresses(cluster: &Cluster) -> Vec<String> {
    ClusterConfig::load(&cluster.file())
        .unwrap()
        .iods
        .iter()
        .map(|iod| iod.address.clone())
        .collect()
}

/// The namespace id iod `index` recorded.
fn recorded(cluster: &Cluster, index: usize) -> String {
    let text = std::fs::read_to_string(cluster.path().join(format!("iod-{index}/namespace")))
        .expect("the iod recorded its namespace");
    text.trim().to_owned()
}

/// Makes `/victim1`, the first file of the cluster (so the handle a fresh store hands out
/// first), and fills it.
fn victim(cluster: &Cluster) -> (u64, Vec<u8>) {
    let client = cluster.client();
    let file = client
        .create("/victim1", &CreateOptions::default())
        .unwrap();
    let data = common::bytes(1, VICTIM_BYTES);
    file.write_at(0, &data).unwrap();
    (file.handle(), data)
}

/// `/victim1` reads back `data`, whole, through the cluster's own mds.
fn assert_intact(cluster: &Cluster, handle: u64, data: &[u8]) {
    let client = cluster.client();
    let file = client.open("/victim1", OpenMode::ReadOnly).unwrap();
    assert_eq!(file.handle(), handle);
    assert_eq!(file.stat().unwrap().size, data.len() as u64);
    let mut back = vec![0u8; data.len()];
    file.read_at(0, &mut back).unwrap();
    assert!(back == data, "/victim1 changed");
}

/// Waits until `log` holds `words`, and returns the first line that does.
fn logged(cluster: &Cluster, log: &str, words: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(line) = cluster.log(log).lines().find(|line| line.contains(words)) {
            return line.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "{log} never said {words:?}:\n{}",
            cluster.log(log)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A second mds with the cluster's key and a fresh store, pointed at the same iods (in the
/// same order, then swapped), is refused at its first create, naming both namespaces; an iod
/// whose orphan sweep asks it removes nothing; `/victim1` reads back whole.
#[test]
fn a_second_mds_with_the_key_and_a_fresh_store_is_refused_and_changes_nothing() {
    // Handles one by one, so the second mds's first handle is /victim1's.
    let cluster = Cluster::start_with(2, &["--precreate", "0"]);
    let (handle, data) = victim(&cluster);
    let scratch = tempfile::tempdir().unwrap();
    let iods = iod_addresses(&cluster);
    let swapped = vec![iods[1].clone(), iods[0].clone()];

    for (name, order) in [("same", &iods), ("swapped", &swapped)] {
        let rogue = start_mds(
            &cluster,
            &scratch.path().join(format!("{name}.redb")),
            order,
        );
        let through = client_through(&cluster, &rogue);
        let error = through
            .create("/other", &CreateOptions::default())
            .unwrap_err()
            .to_string();
        // Read after the attempt, so that a build without records fails on what matters.
        let own = recorded(&cluster, 0);
        assert_eq!(recorded(&cluster, 1), own, "one namespace for both iods");
        if name == "same" {
            // Its first handle is /victim1's; the iod refuses before it touches the object.
            for words in [
                &format!("refusing ObjectCreate of handle {handle:#x} from an mds of namespace"),
                &format!("this iod belongs to namespace {own}"),
            ] {
                assert!(error.contains(words.as_str()), "{words}: {error}");
            }
        } else {
            assert!(
                error.contains("expected iod 0, found iod 1")
                    || error.contains("expected iod 1, found iod 0"),
                "{error}"
            );
        }
        assert!(through.lookup("/other").is_err(), "no name was made");
        assert_intact(&cluster, handle, &data);
        if name == "same" {
            // An iod whose sweep asks this mds (which knows none of its objects) removes
            // nothing and does not ask again.
            cluster.restart_iod_swept_by(0, &rogue.address, &[]);
            let line = logged(&cluster, "iod-0", "orphan sweep refused, nothing removed");
            assert!(
                line.contains(&format!("belongs to namespace {own}")),
                "{line}"
            );
            assert!(cluster.object_file(0, handle).exists());
            assert_eq!(recorded(&cluster, 0), own);
            cluster.restart_iod(0);
            assert_intact(&cluster, handle, &data);
        }
    }
    // The cluster's own mds goes on creating on its iods.
    let file = cluster
        .client()
        .create("/after", &CreateOptions::default())
        .unwrap();
    file.write_at(0, b"still served").unwrap();
    assert_ne!(file.handle(), handle);
    assert_intact(&cluster, handle, &data);
}

/// A second mds with the key and a fresh store makes no objects ahead on iods of another
/// namespace: each iod refuses its `ObjectCreateMany`, and no object appears.
#[test]
fn a_second_mds_makes_no_objects_ahead_on_the_iods_of_another_namespace() {
    let cluster = Cluster::start_with(2, &["--precreate", "0"]);
    let (handle, data) = victim(&cluster);
    let objects = |index: usize| {
        std::fs::read_dir(cluster.path().join(format!("iod-{index}")).join("objects"))
            .unwrap()
            .count()
    };
    let before = [objects(0), objects(1)];
    let scratch = tempfile::tempdir().unwrap();
    let rogue = start_mds_with(
        &cluster,
        &scratch.path().join("rogue.redb"),
        &iod_addresses(&cluster),
        &["--precreate", "64"],
    );
    // The rogue tried, and says why it made nothing.
    let log = scratch.path().join("rogue.log");
    let deadline = Instant::now() + Duration::from_secs(20);
    let line = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .find(|line| line.contains("objects not made ahead"))
        {
            break line.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "the second mds never tried:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        line.contains("refusing ObjectCreateMany from an mds of namespace")
            && line.contains("this iod belongs to namespace"),
        "{line}"
    );
    drop(rogue);
    assert_eq!([objects(0), objects(1)], before, "objects were made");
    assert_intact(&cluster, handle, &data);
}

/// The `ObjectCreate`, `ObjectRemove` and `ObjectTruncate` requests each of `iods` served.
fn object_requests(addresses: &[String]) -> Vec<[f64; 3]> {
    addresses
        .iter()
        .map(|address| {
            let body = common::scrape(address);
            ["object_create", "object_remove", "object_truncate"].map(|kind| {
                common::sample(
                    &body,
                    "tessera_requests_total",
                    &[&format!("kind=\"{kind}\"")],
                )
            })
        })
        .collect()
}

/// An mds of this very namespace (a copy of its store, as a restored backup would be) with
/// two iods swapped in its list refuses creates, an unlink and a truncate before it sends any
/// object request to any iod; `/victim1` reads back whole.
#[test]
fn swapped_iods_are_refused_before_any_object_changes() {
    // The object requests counted are the copy's: the cluster's own mds makes none ahead.
    let cluster = Cluster::start_with(4, &["--precreate", "0"]);
    let (handle, data) = victim(&cluster);
    cluster.restart_iods_with(&["--metrics", "127.0.0.1:0"]);
    let metrics: Vec<String> = (0..4)
        .map(|index| common::metrics_address(&cluster, &format!("iod-{index}")))
        .collect();
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("copy.redb");
    std::fs::copy(cluster.path().join("mds/meta.redb"), &copy).unwrap();
    let mut iods = iod_addresses(&cluster);
    iods.swap(2, 3);
    let copied = start_mds(&cluster, &copy, &iods);
    let through = client_through(&cluster, &copied);
    let before = object_requests(&metrics);

    // Four creates, so that some layout starts before the swapped pair (a layout is four
    // consecutive iods from `handle % 4`).
    for index in 0..4 {
        let error = through
            .create(&format!("/new{index}"), &CreateOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("expected iod 2, found iod 3")
                || error.contains("expected iod 3, found iod 2"),
            "{error}"
        );
    }
    let error = through.truncate("/victim1", 0).unwrap_err().to_string();
    assert!(error.contains("found iod"), "{error}");
    // The unlink removes the name from the copy, and no object from any iod.
    let left = through.unlink_reporting("/victim1").unwrap();
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(left
        .iter()
        .all(|object| object.error.message.contains("found iod")));

    assert_eq!(
        object_requests(&metrics),
        before,
        "an iod served an object request"
    );
    for index in 0..4 {
        assert!(cluster.object_file(index, handle).exists());
    }
    assert_intact(&cluster, handle, &data);
}

/// An object left by a create the mds never committed (it crashed in between, and hands the
/// handle out again after its restart) is neither emptied nor taken over: the create takes a
/// new handle, removes only the object it made itself, and the iod's next sweep removes the
/// orphan.
#[test]
fn an_orphan_of_an_unfinished_create_is_skipped_never_emptied() {
    use std::os::unix::fs::OpenOptionsExt;

    // Handles come one by one, as this test foresees them: no objects made ahead.
    let cluster = Cluster::start_with(2, &["--precreate", "0"]);
    // The sweep of iod 0's first start must be over before an orphan appears.
    cluster.sweeps_done(0, 1);
    let (handle, data) = victim(&cluster);
    // The next handle's layout is [1, 0]: its orphan sits on iod 0, the second server.
    let orphan = handle + 1;
    assert_eq!(orphan % 2, 1);
    let planted = cluster.object_file(0, orphan);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&planted)
        .unwrap();
    std::io::Write::write_all(&mut file, b"an orphan's bytes").unwrap();
    drop(file);

    let made = cluster
        .client()
        .create("/next", &CreateOptions::default())
        .unwrap();
    assert_eq!(made.handle(), orphan + 1, "the create took a new handle");
    made.write_at(0, b"the new file").unwrap();
    assert_eq!(std::fs::read(&planted).unwrap(), b"an orphan's bytes");
    assert!(
        !cluster.object_file(1, orphan).exists(),
        "the object the create made on iod 1 was removed"
    );
    let line = logged(&cluster, "mds", "already holds an object of handle");
    assert!(line.contains(&format!("{orphan:#x}")), "{line}");

    // The orphan goes at iod 0's next start; the files stay.
    cluster.restart_iod(0);
    let line = cluster.sweeps_done(0, 2);
    assert!(
        line.contains(&format!("1 orphans removed [{orphan:#x}]")),
        "{line}"
    );
    assert!(!planted.exists());
    let mut back = [0u8; 12];
    made.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"the new file");
    assert_intact(&cluster, handle, &data);
}
