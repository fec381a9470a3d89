//! A degraded cluster stays usable (issue 17, item 7): `rm` of a file whose iod is down or
//! whose object is missing removes the name and names what it left; `ls -l` lists every
//! entry with `?` for a size it cannot compute; each iod removes its orphan objects at start,
//! asking the mds (as a server only) which handles live.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bytes, tessera, Cluster};
use tessera_auth::{Authenticator, KeySigner};
use tessera_client::ErrorCode;
use tessera_net::{Identity, NetError, Peer, Pool};
use tessera_proto::HandlesLive;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `tessera put` of `data` to `path`.
fn put(cluster: &Cluster, path: &str, data: &[u8]) {
    let local = cluster
        .path()
        .join(format!("local-{}", path.replace('/', "_")));
    std::fs::write(&local, data).unwrap();
    let file = cluster.file();
    let output = tessera(&[
        "put",
        local.to_str().unwrap(),
        path,
        "--cluster",
        file.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "put {path}: {}",
        text(&output.stderr)
    );
}

fn run(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    let file = cluster.file();
    let mut all = args.to_vec();
    all.extend(["--cluster", file.to_str().unwrap()]);
    tessera(&all)
}

fn handle_of(cluster: &Cluster, path: &str) -> u64 {
    cluster.client().lookup(path).expect("lookup").handle
}

fn assert_gone(cluster: &Cluster, path: &str) {
    let error = cluster.client().lookup(path).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotFound), "{path}: {error}");
}

#[test]
fn rm_removes_the_name_when_an_object_is_missing_or_its_iod_is_down() {
    let cluster = Cluster::start(2);
    // Two stripe units at the default 64 KiB: an object with data on each iod.
    let data = bytes(11, 200 << 10);
    for path in ["/missing", "/down", "/kept"] {
        put(&cluster, path, &data);
    }

    // An object deleted behind the mds's back, every iod up.
    let missing = handle_of(&cluster, "/missing");
    std::fs::remove_file(cluster.object_file(0, missing)).unwrap();
    let output = run(&cluster, &["rm", "/missing"]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "rm /missing failed: {stderr}");
    assert_gone(&cluster, "/missing");
    assert!(stderr.contains("warning: rm /missing: iod 0"), "{stderr}");
    assert!(stderr.contains("already missing"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "only iod 0 is named: {stderr}");
    assert!(
        !cluster.object_file(1, missing).exists(),
        "iod 1's object went"
    );

    // An iod down: the name goes, its object stays behind and is named.
    let down = handle_of(&cluster, "/down");
    cluster.kill_iod(1);
    let output = run(&cluster, &["rm", "/down"]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "rm /down failed: {stderr}");
    assert_gone(&cluster, "/down");
    assert!(
        stderr.contains("warning: rm /down: object left behind on iod 1"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "only iod 1 is named: {stderr}");
    assert!(
        !cluster.object_file(0, down).exists(),
        "iod 0's object went"
    );
    assert!(
        cluster.object_file(1, down).exists(),
        "iod 1's object is left"
    );

    // The library reports the same, entry by entry.
    let left = cluster.client().unlink_reporting("/kept").unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].server, 1);
    assert_eq!(left[0].error.code, ErrorCode::Unavailable, "{left:?}");
    assert_gone(&cluster, "/kept");
}

#[test]
fn ls_long_lists_every_entry_with_unknown_sizes_while_an_iod_is_down() {
    let cluster = Cluster::start(2);
    let names = ["a", "b", "c"];
    for (seed, name) in names.iter().enumerate() {
        put(
            &cluster,
            &format!("/{name}"),
            &bytes(seed as u64, 100 << 10),
        );
    }
    let mkdir = run(&cluster, &["mkdir", "/dir"]);
    assert!(mkdir.status.success(), "{}", text(&mkdir.stderr));

    let healthy = run(&cluster, &["ls", "-l", "/"]);
    assert!(healthy.status.success(), "{}", text(&healthy.stderr));
    assert_eq!(text(&healthy.stdout).matches(" 100 KiB ").count(), 3);

    cluster.kill_iod(0);
    let output = run(&cluster, &["ls", "-l", "/"]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "ls -l failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "every entry listed: {stdout}");
    for (line, name) in lines.iter().zip(names) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[3..], ["?", name], "{line}");
    }
    let fields: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(
        fields[3..],
        ["0", "B", "dir/"],
        "a directory's size needs no iod"
    );
    assert_eq!(
        stderr.matches("size unknown").count(),
        3,
        "one warning per file: {stderr}"
    );
    assert!(
        stderr.contains("iod 0"),
        "the warning names the iod: {stderr}"
    );
}

/// Waits until `done` holds, at most `limit`.
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_iod_removes_its_orphans_at_start_and_keeps_live_objects() {
    // The sweep's count is this test's orphan alone: no objects made ahead, whose refill an
    // iod killed midway would leave orphans of its own (tests/precreate.rs covers those).
    let cluster = Cluster::start_with(2, &["--precreate", "0"]);
    // Every iod swept at `up` (nothing to remove yet).
    for index in 0..2 {
        let name = format!("iod-{index}");
        wait_for(Duration::from_secs(30), "the sweep at up", || {
            cluster.log(&name).contains("orphan sweep done")
        });
        assert!(
            cluster.log(&name).contains("0 orphans removed"),
            "{}",
            cluster.log(&name)
        );
    }
    let keep = bytes(5, 300 << 10);
    put(&cluster, "/keep", &keep);
    put(&cluster, "/orphan", &bytes(6, 300 << 10));
    let kept = handle_of(&cluster, "/keep");
    let orphan = handle_of(&cluster, "/orphan");

    cluster.kill_iod(1);
    let output = run(&cluster, &["rm", "/orphan"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        cluster.object_file(1, orphan).exists(),
        "left behind on iod 1"
    );
    // A file the iod does not own by name stays too.
    let foreign = cluster.path().join("iod-1").join("objects").join("notes");
    std::fs::write(&foreign, b"not an object").unwrap();

    cluster.restart_iod(1);
    wait_for(Duration::from_secs(30), "iod 1's sweep", || {
        !cluster.object_file(1, orphan).exists()
    });
    wait_for(Duration::from_secs(10), "the sweep's log line", || {
        cluster
            .log("iod-1")
            .contains(&format!("1 orphans removed [{orphan:#x}]"))
    });
    assert!(cluster.object_file(1, kept).exists());
    assert!(cluster.object_file(0, kept).exists());
    assert!(foreign.exists(), "foreign files are left alone");
    let back = cluster.path().join("back");
    let file = cluster.file();
    let output = tessera(&[
        "get",
        "/keep",
        back.to_str().unwrap(),
        "--cluster",
        file.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        std::fs::read(&back).unwrap(),
        keep,
        "the live file is intact"
    );
}

/// `HandlesLive` over a connection authenticated by `signer`.
fn handles_live(
    cluster: &Cluster,
    signer: &Arc<dyn Authenticator>,
    handles: Vec<u64>,
) -> Result<Vec<u64>, NetError> {
    let address = tessera_client::ClusterConfig::load(&cluster.file())
        .unwrap()
        .mds
        .address;
    let pool = Pool::new(
        vec![Peer::tcp("mds", address, Identity::MDS)],
        Duration::from_secs(10),
        signer.clone(),
    );
    let request = HandlesLive {
        credentials: signer.credentials().unwrap(),
        handles,
    };
    pool.with(0, |connection| connection.call(&request))
        .map(|reply| reply.live)
}

#[test]
fn handles_live_answers_servers_only() {
    let cluster = Cluster::start(1);
    put(&cluster, "/live", b"live");
    put(&cluster, "/dead", b"dead");
    let live = handle_of(&cluster, "/live");
    let dead = handle_of(&cluster, "/dead");
    cluster.client().unlink("/dead").unwrap();

    let server: Arc<dyn Authenticator> = Arc::new(KeySigner::server(cluster.key()));
    let answer = handles_live(&cluster, &server, vec![dead, 1, live, 1 << 40]).unwrap();
    assert_eq!(
        answer,
        vec![1, live],
        "the root and the live file, in the order asked"
    );

    // A user's process, even one holding the key, is refused.
    let user: Arc<dyn Authenticator> = Arc::new(cluster.signer());
    match handles_live(&cluster, &user, vec![live]) {
        Err(NetError::Remote { error, .. }) => {
            assert_eq!(error.code, ErrorCode::PermissionDenied, "{error}");
            assert!(error.message.contains("servers only"), "{error}");
        }
        other => panic!("a user's HandlesLive was not refused: {other:?}"),
    }

    // Over the limit: refused by the decoder, naming the limit.
    let many = vec![live; tessera_proto::limits::HANDLES_LIVE_MAX + 1];
    let error = handles_live(&cluster, &server, many).unwrap_err();
    assert!(error.to_string().contains("handles_live_max"), "{error}");
}
