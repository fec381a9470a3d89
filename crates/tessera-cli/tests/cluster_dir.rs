//! `tessera up` and the servers trust only what their user owns (issue 35, hole 3). Another
//! user who makes a cluster directory first (the README's example is under `/tmp`), or who
//! can put something in one, must not get root's `up` to use their key, write through their
//! link or leave them a `run/` they may write; and a program squatting a server's port is
//! named as such. Each case is refused naming the path (or port) and the uid or mode, and
//! nothing is written through what was planted. Chowning to another uid needs root; elsewhere
//! the tests are ignored at run time.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{tessera, Cluster, TESSERA};

/// The other user, who planted things.
const OTHER: u32 = 2001;
/// How long a server that should refuse to start is given before it counts as started.
const SERVER_REFUSAL_WAIT: Duration = Duration::from_secs(20);

/// Whether this test may run: root, which can chown to another uid.
fn as_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "planting files of another uid needs root, and this test runs as uid {euid}"
        ));
    }
    euid == 0
}

/// Gives `path` (not following a link) to the other user.
fn give_away(path: &Path) {
    std::os::unix::fs::lchown(path, Some(OTHER), Some(OTHER))
        .unwrap_or_else(|err| panic!("lchown {}: {err}", path.display()));
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A cluster directory under a scratch directory of root's; `down` when dropped, so a
/// test that fails (or code that starts what it should refuse) leaves nothing running.
struct Scratch {
    root: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Self {
            root: tempfile::tempdir().unwrap(),
        }
    }

    fn dir(&self) -> PathBuf {
        self.root.path().join("cluster")
    }

    fn up(&self) -> Output {
        tessera(&[
            "up",
            "--servers",
            "1",
            "--dir",
            self.dir().to_str().unwrap(),
        ])
    }

    /// Runs `up`, asserts it failed, and returns its standard error.
    fn refused(&self) -> String {
        let output = self.up();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            !output.status.success(),
            "up succeeded: {}{stderr}",
            String::from_utf8_lossy(&output.stdout)
        );
        stderr
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = tessera(&["down", "--dir", self.dir().to_str().unwrap()]);
    }
}

#[test]
fn a_cluster_directory_another_user_made_first_is_refused() {
    if !as_root() {
        return;
    }
    for mode in [0o755, 0o777] {
        let scratch = Scratch::new();
        let dir = scratch.dir();
        std::fs::create_dir(&dir).unwrap();
        set_mode(&dir, mode);
        give_away(&dir);
        let stderr = scratch.refused();
        assert!(
            stderr.contains(&format!(
                "{}: owned by uid {OTHER}, not by uid 0 who runs the cluster",
                dir.display()
            )),
            "{stderr}"
        );
        // Nothing was made in it: no key for the other user to read, no run/ or log/.
        assert!(names(&dir).is_empty(), "{:?}", names(&dir));
    }
}

#[test]
fn a_run_or_log_directory_others_own_or_may_write_is_refused() {
    if !as_root() {
        return;
    }
    // (part, mode, owner given away, what the message says)
    let cases = [
        (
            "run",
            0o777,
            false,
            "mode 0777 lets group and others write it",
        ),
        ("run", 0o775, false, "mode 0775 lets group write it"),
        ("run", 0o755, true, "owned by uid 2001, not by uid 0"),
        ("log", 0o700, true, "owned by uid 2001, not by uid 0"),
        (
            "log",
            0o733,
            false,
            "mode 0733 lets group and others write it",
        ),
    ];
    for (part, mode, given, why) in cases {
        let scratch = Scratch::new();
        let dir = scratch.dir();
        let path = dir.join(part);
        std::fs::create_dir_all(&path).unwrap();
        set_mode(&dir, 0o755);
        set_mode(&path, mode);
        if given {
            give_away(&path);
        }
        let stderr = scratch.refused();
        assert!(
            stderr.contains(&format!("{}: {why}", path.display())),
            "{part} {mode:o}: {stderr}"
        );
        // Refused before anything was made: no key, nothing in the planted directory.
        assert_eq!(names(&dir), [part], "{part} {mode:o}");
        assert!(
            names(&path).is_empty(),
            "{part} {mode:o}: {:?}",
            names(&path)
        );
        assert_eq!(mode_of(&path), mode, "{part}: left as found");
    }
}

#[test]
fn a_planted_key_is_refused_by_up_and_by_servers_started_by_hand() {
    if !as_root() {
        return;
    }
    let scratch = Scratch::new();
    let dir = scratch.dir();
    std::fs::create_dir(&dir).unwrap();
    let key = dir.join("key");
    tessera_auth::ClusterKey::create(&key).unwrap();
    give_away(&key);
    let planted = std::fs::read(&key).unwrap();
    let stderr = scratch.refused();
    assert!(
        stderr.contains(&format!(
            "{}: owned by uid {OTHER}, not by uid 0 who runs the cluster",
            key.display()
        )),
        "{stderr}"
    );
    // Nothing signed with it, nothing started: the directory holds the key alone.
    assert_eq!(names(&dir), ["key"]);
    assert_eq!(std::fs::read(&key).unwrap(), planted);
    assert_eq!(std::fs::metadata(&key).unwrap().uid(), OTHER);

    // Each server refuses it too, when started by hand with `--key`.
    let data = scratch.root.path().join("by-hand");
    let key_arg = key.to_str().unwrap();
    let socket = scratch.root.path().join("agent.sock");
    let servers: [(&str, Vec<String>); 3] = [
        (
            "iod 0",
            ["iod", "--index", "0", "--listen", "127.0.0.1:0", "--data"]
                .iter()
                .map(|word| (*word).to_owned())
                .chain([data.join("iod-0").display().to_string()])
                .collect(),
        ),
        (
            "mds",
            [
                "mds",
                "--listen",
                "127.0.0.1:0",
                "--iod",
                "127.0.0.1:9",
                "--db",
            ]
            .iter()
            .map(|word| (*word).to_owned())
            .chain([data.join("mds/meta.redb").display().to_string()])
            .collect(),
        ),
        (
            "agent",
            vec![
                "agent".to_owned(),
                "--socket".to_owned(),
                socket.display().to_string(),
            ],
        ),
    ];
    for (name, mut args) in servers {
        args.extend(["--key".to_owned(), key_arg.to_owned()]);
        let (refused, stderr) = server_refuses(&args);
        assert!(
            refused,
            "{name} started with a key of uid {OTHER}: {stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "{key_arg}: owned by uid {OTHER}, not by uid 0 who runs this server"
            )),
            "{name}: {stderr}"
        );
    }
    assert!(!socket.exists(), "the agent bound its socket");
}

/// Runs the server `tessera ARGS`, which should refuse to start. Returns whether it exited
/// with a failure within [`SERVER_REFUSAL_WAIT`], and its standard error; one still running
/// then is killed (and counts as started).
fn server_refuses(args: &[String]) -> (bool, String) {
    let errors = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(TESSERA)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(errors.reopen().unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + SERVER_REFUSAL_WAIT;
    let refused = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break !status.success();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (refused, std::fs::read_to_string(errors.path()).unwrap())
}

#[test]
fn a_planted_log_link_is_refused_and_nothing_is_written_through_it() {
    if !as_root() {
        return;
    }
    let scratch = Scratch::new();
    let dir = scratch.dir();
    let log = dir.join("log");
    std::fs::create_dir_all(&log).unwrap();
    set_mode(&log, 0o700);
    // A file of root's the other user would like to see written (and made 0600 theirs).
    let target = scratch.root.path().join("roots-file");
    std::fs::write(&target, b"root's bytes\n").unwrap();
    set_mode(&target, 0o640);
    let link = log.join("mds.log");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    give_away(&link);
    let stderr = scratch.refused();
    assert!(
        stderr.contains(&format!("{}: a symbolic link", link.display())),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"root's bytes\n");
    assert_eq!(mode_of(&target), 0o640);
    assert_eq!(std::fs::read_link(&link).unwrap(), target);
    assert_eq!(names(&log), ["mds.log"]);
}

/// What a fresh `up` makes, whatever the umask: `run/` and the cluster directory are the
/// owner's and 0755, the private parts 0700/0600, and the sockets (connecting needs the
/// write bit) are the only parts others may write.
#[test]
fn a_new_cluster_directory_has_no_part_others_may_write_but_its_sockets() {
    if !as_root() {
        return;
    }
    let scratch = Scratch::new();
    let dir = scratch.dir();
    // umask 0: every mode below is chosen by `up` and the servers, none left to the umask.
    let output =
        common::tessera_with_umask(&["up", "--servers", "2", "--dir", dir.to_str().unwrap()], 0);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut open_to_others = Vec::new();
    let mut seen = 0;
    let mut pending = vec![dir.clone()];
    // The directory holds a few dozen parts (and objects only once files are written).
    while let Some(path) = pending.pop() {
        seen += 1;
        assert!(seen < 1000, "more parts than a new cluster has");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(meta.uid(), 0, "{}", path.display());
        assert!(!meta.file_type().is_symlink(), "{}", path.display());
        if meta.mode() & 0o022 != 0 {
            open_to_others.push((
                path.strip_prefix(&dir).unwrap().display().to_string(),
                meta.mode() & 0o7777,
            ));
        }
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    open_to_others.sort();
    assert_eq!(
        open_to_others,
        [
            ("run/agent.sock".to_owned(), 0o666),
            ("run/iod-0.sock".to_owned(), 0o666),
            ("run/iod-1.sock".to_owned(), 0o666),
        ]
    );
    for (part, mode) in [
        ("", 0o755),
        ("run", 0o755),
        ("log", 0o700),
        ("mds", 0o700),
        ("iod-0", 0o700),
        ("key", 0o600),
        ("log/mds.log", 0o600),
        ("run/mds.cmd", 0o600),
        ("run/mds.pid", 0o644),
        ("run/iod-1.addr", 0o644),
        ("cluster.toml", 0o644),
    ] {
        assert_eq!(mode_of(&dir.join(part)), mode, "{part}");
    }
}

#[test]
fn a_squatted_port_is_named_and_a_running_server_recognised() {
    if !as_root() {
        return;
    }
    let cluster = Cluster::start(1);
    let address = cluster.iod_address(0);
    let scratch = tempfile::tempdir().unwrap();

    // The port held by iod 0 itself: a second iod 0 says so.
    let args: Vec<String> = ["iod", "--index", "0", "--listen", &address, "--data"]
        .iter()
        .map(|word| (*word).to_owned())
        .chain([
            scratch.path().join("iod-0").display().to_string(),
            "--key".to_owned(),
            cluster.path().join("key").display().to_string(),
        ])
        .collect();
    let (refused, stderr) = server_refuses(&args);
    assert!(refused, "a second iod 0 started: {stderr}");
    assert!(
        stderr.contains(&format!(
            "iod 0 of this cluster is already running at {address}"
        )),
        "{stderr}"
    );

    // The port held by a program that knows nothing of the key: `up` reports a squatter.
    cluster.down();
    let squatter = std::net::TcpListener::bind(&address).unwrap();
    let output = tessera(&["up", "--dir", cluster.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "up started beside a squatter");
    assert!(
        stderr.contains(&format!(
            "{address} is taken by something that is not iod 0 of this cluster (it did not \
             prove the cluster key"
        )) && stderr.contains("another program is squatting the port"),
        "{stderr}"
    );
    // Freed, the port is the iod's again, at the same address.
    drop(squatter);
    cluster.up(1);
    assert_eq!(cluster.iod_address(0), address);
    let client = cluster.client();
    client.mkdir("/after", 0o755).unwrap();
    assert_eq!(client.readdir("/").unwrap()[0].name, "after");
}
