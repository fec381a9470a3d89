//! The cluster as unprivileged users see it (issue 16): root starts a cluster, and processes
//! running as other uids (through `setpriv`, with no entry in /etc/passwd needed) get their
//! credentials from the agent and meet the mds's permission checks and the iods' capability
//! checks. Every refusal must name the path, say "permission denied", and leave the file as
//! it was.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::{Cluster, TESSERA};

/// A user with no other rights.
const ALICE: u32 = 2001;
/// Another user, also in group `STAFF`.
const BOB: u32 = 2002;
/// A group Bob is in, Alice is not.
const STAFF: u32 = 3000;

/// Runs `tessera ARGS --cluster FILE` as `uid` (gid = uid, supplementary `groups`); returns
/// (success, stdout, stderr).
fn run_as(cluster: &Cluster, uid: u32, groups: &[u32], args: &[&str]) -> (bool, String, String) {
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"));
    if groups.is_empty() {
        command.arg("--clear-groups");
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        command.arg(format!("--groups={}", list.join(",")));
    }
    let output = command
        .arg(TESSERA)
        .args(args)
        .arg("--cluster")
        .arg(cluster.file())
        .env_remove("TESSERA_CLUSTER")
        .env_remove("TESSERA_AGENT")
        .output()
        .expect("setpriv runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn ok_as(cluster: &Cluster, uid: u32, groups: &[u32], args: &[&str]) -> String {
    let (success, stdout, stderr) = run_as(cluster, uid, groups, args);
    assert!(success, "uid {uid}: tessera {args:?} failed: {stderr}");
    stdout
}

/// Asserts the command is refused with "permission denied" naming `path`.
fn denied_as(cluster: &Cluster, uid: u32, groups: &[u32], args: &[&str], path: &str) {
    let (success, stdout, stderr) = run_as(cluster, uid, groups, args);
    assert!(!success, "uid {uid}: tessera {args:?} succeeded: {stdout}");
    assert!(
        stderr.contains("permission denied") && stderr.contains(path),
        "uid {uid}: tessera {args:?} failed without naming {path}: {stderr}"
    );
}

fn root(cluster: &Cluster, args: &[&str]) -> String {
    let file = cluster.file();
    let mut all = args.to_vec();
    all.extend(["--cluster", file.to_str().unwrap()]);
    let output = common::tessera(&all);
    assert!(
        output.status.success(),
        "root: tessera {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The cluster directory must be reachable by the users (the cluster file and the sockets);
/// its data directories and key stay private.
fn start() -> Option<(Cluster, tempfile::TempDir)> {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "switching users needs root, and this test runs as uid {euid}"
        ));
        return None;
    }
    let cluster = Cluster::start(2);
    std::fs::set_permissions(cluster.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A local scratch directory every user may write (files to put, files got).
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    Some((cluster, scratch))
}

#[test]
fn other_users_cannot_touch_roots_private_file_and_keep_their_own() {
    let Some((cluster, scratch)) = start() else {
        return;
    };
    let local = |name: &str| scratch.path().join(name).display().to_string();
    std::fs::write(local("secret"), b"root's secret bytes").unwrap();
    std::fs::write(local("mine"), b"alice's own bytes").unwrap();
    std::fs::set_permissions(local("mine"), std::fs::Permissions::from_mode(0o644)).unwrap();
    root(
        &cluster,
        &["put", "--mode", "600", &local("secret"), "/secret"],
    );
    root(&cluster, &["mkdir", "--mode", "1777", "/tmp"]);

    // Root's 0600 file: no read, no write, no rename, no removal, no chmod.
    let got = local("got");
    denied_as(&cluster, ALICE, &[], &["get", "/secret", &got], "/secret");
    denied_as(
        &cluster,
        ALICE,
        &[],
        &["put", &local("mine"), "/secret"],
        "/secret",
    );
    denied_as(
        &cluster,
        ALICE,
        &[],
        &["mv", "/secret", "/tmp/stolen"],
        "/secret",
    );
    denied_as(&cluster, ALICE, &[], &["rm", "/secret"], "/secret");
    denied_as(
        &cluster,
        ALICE,
        &[],
        &["chmod", "666", "/secret"],
        "/secret",
    );
    // ... and it is unchanged.
    root(&cluster, &["get", "/secret", &local("back")]);
    assert_eq!(
        std::fs::read(local("back")).unwrap(),
        b"root's secret bytes"
    );
    assert!(root(&cluster, &["stat", "/secret"]).contains("0600"));

    // Her own file in a sticky, world-writable directory works, and is hers.
    ok_as(&cluster, ALICE, &[], &["put", &local("mine"), "/tmp/alice"]);
    let stat = ok_as(&cluster, ALICE, &[], &["stat", "/tmp/alice"]);
    assert!(stat.contains(&format!("{ALICE}:{ALICE}")), "{stat}");
    ok_as(
        &cluster,
        ALICE,
        &[],
        &["get", "/tmp/alice", &local("alice-back")],
    );
    assert_eq!(
        std::fs::read(local("alice-back")).unwrap(),
        b"alice's own bytes"
    );
    // Bob may read it (0644) but not remove it: the directory is sticky.
    ok_as(
        &cluster,
        BOB,
        &[],
        &["get", "/tmp/alice", &local("bob-read")],
    );
    denied_as(&cluster, BOB, &[], &["rm", "/tmp/alice"], "/tmp/alice");
    denied_as(
        &cluster,
        BOB,
        &[],
        &["mv", "/tmp/alice", "/tmp/bob"],
        "/tmp/alice",
    );
    // Alice makes it private: Bob may no longer read it.
    ok_as(&cluster, ALICE, &[], &["chmod", "600", "/tmp/alice"]);
    denied_as(
        &cluster,
        BOB,
        &[],
        &["get", "/tmp/alice", &local("bob-again")],
        "/tmp/alice",
    );
    ok_as(&cluster, ALICE, &[], &["rm", "/tmp/alice"]);
}

#[test]
fn group_bits_and_directory_search_are_honoured_for_other_users() {
    let Some((cluster, scratch)) = start() else {
        return;
    };
    let local = |name: &str| scratch.path().join(name).display().to_string();
    std::fs::write(local("staff"), b"for staff only").unwrap();
    root(
        &cluster,
        &["put", "--mode", "640", &local("staff"), "/staff"],
    );
    root(&cluster, &["chown", &format!("0:{STAFF}"), "/staff"]);
    // Bob is in the group through a supplementary group; Alice is other.
    ok_as(&cluster, BOB, &[STAFF], &["get", "/staff", &local("bob")]);
    assert_eq!(std::fs::read(local("bob")).unwrap(), b"for staff only");
    denied_as(
        &cluster,
        ALICE,
        &[],
        &["get", "/staff", &local("alice")],
        "/staff",
    );
    // The group may read, not write.
    denied_as(
        &cluster,
        BOB,
        &[STAFF],
        &["put", &local("staff"), "/staff"],
        "/staff",
    );

    // A directory without search permission hides what is in it, even a 0644 file.
    std::fs::write(local("open"), b"open file, closed directory").unwrap();
    root(&cluster, &["mkdir", "--mode", "700", "/closed"]);
    root(
        &cluster,
        &["put", "--mode", "644", &local("open"), "/closed/open"],
    );
    denied_as(
        &cluster,
        ALICE,
        &[],
        &["get", "/closed/open", &local("x")],
        "/closed",
    );
    denied_as(&cluster, ALICE, &[], &["ls", "/closed"], "/closed");
    // Root still reads it.
    root(&cluster, &["get", "/closed/open", &local("root")]);
    assert_eq!(
        std::fs::read(local("root")).unwrap(),
        b"open file, closed directory"
    );
}

/// An agent holding another cluster's key signs credentials the servers refuse, and the
/// client says so; the cluster's own agent goes on working.
#[test]
fn an_agent_with_a_wrong_key_is_refused() {
    let Some((cluster, scratch)) = start() else {
        return;
    };
    let key = scratch.path().join("other.key");
    tessera_auth::ClusterKey::create(&key).unwrap();
    let socket = scratch.path().join("other-agent.sock");
    let mut agent = Command::new(TESSERA)
        .args(["agent", "--key"])
        .arg(&key)
        .arg("--socket")
        .arg(&socket)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let output = Command::new("setpriv")
        .args([
            &format!("--reuid={ALICE}"),
            &format!("--regid={ALICE}"),
            "--clear-groups",
        ])
        .arg(TESSERA)
        .args(["ls", "/", "--cluster"])
        .arg(cluster.file())
        .env("TESSERA_AGENT", &socket)
        .output()
        .unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("not signed with this cluster's key"),
        "{stderr}"
    );
    ok_as(&cluster, ALICE, &[], &["ls", "/"]);
}
