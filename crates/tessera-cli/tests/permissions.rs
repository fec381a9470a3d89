//! Permission bits and owners through the CLI against a real cluster: `mkdir --mode`,
//! `create --mode`, `put --mode`, `chmod`, `chown` and `stat`, then the same store under
//! `tessera up --root-squash`, where root is nobody. (Checks as an unprivileged user need a
//! verified credential and are in the end-to-end security tests.)

mod common;

use common::{tessera, Cluster};

/// Runs `tessera ARGS --cluster FILE`; returns (success, stdout, stderr).
fn run(cluster: &Cluster, args: &[&str]) -> (bool, String, String) {
    let file = cluster.file();
    let mut all = args.to_vec();
    all.extend(["--cluster", file.to_str().unwrap()]);
    let output = tessera(&all);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn ok(cluster: &Cluster, args: &[&str]) -> String {
    let (success, stdout, stderr) = run(cluster, args);
    assert!(success, "tessera {args:?} failed: {stderr}");
    stdout
}

fn refused(cluster: &Cluster, args: &[&str]) -> String {
    let (success, stdout, stderr) = run(cluster, args);
    assert!(!success, "tessera {args:?} succeeded: {stdout}");
    stderr
}

/// The `mode:` and `owner:` lines of `tessera stat PATH`.
fn mode_and_owner(cluster: &Cluster, path: &str) -> (String, String) {
    let stat = ok(cluster, &["stat", path]);
    let field = |name: &str| {
        stat.lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {stat}"))
            .trim()
            .to_owned()
    };
    (field("mode:"), field("owner:"))
}

fn up(cluster: &Cluster, extra: &[&str]) {
    let mut args = vec![
        "up",
        "--servers",
        "2",
        "--dir",
        cluster.path().to_str().unwrap(),
    ];
    args.extend(extra);
    let output = tessera(&args);
    assert!(
        output.status.success(),
        "tessera up {extra:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn chmod_chown_and_modes_through_the_cli_and_root_squash() {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "chown of the owner needs root, and this test runs as uid {euid}"
        ));
        return;
    }
    let cluster = Cluster {
        dir: tempfile::tempdir().unwrap(),
    };
    up(&cluster, &[]);
    let local = cluster.path().join("input");
    std::fs::write(&local, b"secret bytes").unwrap();

    // New entries take the requested bits as given (no umask) and the caller's ids.
    ok(&cluster, &["mkdir", "--mode", "0750", "/d"]);
    assert_eq!(
        mode_and_owner(&cluster, "/d"),
        ("0750".into(), "0:0".into())
    );
    ok(
        &cluster,
        &["put", "--mode", "600", local.to_str().unwrap(), "/d/f"],
    );
    assert_eq!(mode_and_owner(&cluster, "/d/f").0, "0600");
    ok(&cluster, &["create", "--mode", "0604", "/d/g"]);
    assert_eq!(mode_and_owner(&cluster, "/d/g").0, "0604");
    // put onto an existing file replaces it with a file of the same bits, unless --mode
    // names others.
    ok(&cluster, &["put", local.to_str().unwrap(), "/d/f"]);
    assert_eq!(mode_and_owner(&cluster, "/d/f").0, "0600");
    ok(
        &cluster,
        &["put", "--mode", "666", local.to_str().unwrap(), "/d/f"],
    );
    assert_eq!(mode_and_owner(&cluster, "/d/f").0, "0666");
    ok(&cluster, &["chmod", "600", "/d/f"]);

    // chmod, with the sticky bit; chown of both ids, the group alone, the owner alone.
    ok(&cluster, &["chmod", "1777", "/d"]);
    assert_eq!(mode_and_owner(&cluster, "/d").0, "1777");
    ok(&cluster, &["chmod", "0640", "/d/f"]);
    ok(&cluster, &["chown", "1000:100", "/d/f"]);
    assert_eq!(
        mode_and_owner(&cluster, "/d/f"),
        ("0640".into(), "1000:100".into())
    );
    ok(&cluster, &["chown", ":200", "/d/f"]);
    assert_eq!(mode_and_owner(&cluster, "/d/f").1, "1000:200");
    ok(&cluster, &["chown", "2000", "/d/f"]);
    assert_eq!(mode_and_owner(&cluster, "/d/f").1, "2000:200");
    let attr = cluster.client().stat("/d/f").unwrap();
    assert_eq!(
        (attr.mode, attr.uid, attr.gid, attr.size),
        (0o640, 2000, 200, 12)
    );
    let attr = cluster.client().chmod("/d/g", 0o2644).unwrap();
    assert_eq!(attr.mode, 0o2644);
    let attr = cluster.client().chown("/d/g", None, Some(7)).unwrap();
    assert_eq!((attr.uid, attr.gid), (0, 7));

    // Bad input is named.
    let error = refused(&cluster, &["chmod", "9", "/d/f"]);
    assert!(error.contains("mode \"9\""), "{error}");
    let error = refused(&cluster, &["chown", "alice", "/d/f"]);
    assert!(error.contains("\"alice\""), "{error}");
    let error = refused(&cluster, &["chmod", "600", "/nope"]);
    assert!(error.contains("/nope"), "{error}");
    let error = refused(&cluster, &["mkdir", "--mode", "rwx", "/m"]);
    assert!(error.contains("mode \"rwx\""), "{error}");

    // The same store with root squash: root is nobody (65534) and gets the "other" bits.
    cluster.down();
    up(&cluster, &["--root-squash"]);
    assert!(
        cluster.log("mds").contains("root squashed"),
        "{}",
        cluster.log("mds")
    );
    let error = refused(&cluster, &["chmod", "777", "/d/f"]);
    assert!(error.contains("permission denied: /d/f"), "{error}");
    let error = refused(&cluster, &["mkdir", "/top"]);
    assert!(
        error.contains("permission denied: /top (needs write on /)"),
        "{error}"
    );
    let error = refused(&cluster, &["rm", "/d/f"]);
    assert!(error.contains("/d is sticky"), "{error}");
    ok(&cluster, &["mkdir", "/d/nobodys"]);
    assert_eq!(
        mode_and_owner(&cluster, "/d/nobodys"),
        ("0755".into(), "65534:65534".into())
    );
    // Nothing refused changed.
    assert_eq!(
        mode_and_owner(&cluster, "/d/f"),
        ("0640".into(), "2000:200".into())
    );
    assert!(ok(&cluster, &["ls", "/"]).lines().eq(["d/"]));
}

/// `mkdir`, `create` and `put` without `--mode` apply the caller's umask to 0777 (a
/// directory) and 0666 (a file), as `mkdir` and `touch` do; with `--mode` the bits are taken
/// as given, as `mkdir -m` takes them; a `put` over an existing file keeps its mode.
#[test]
fn new_entries_take_the_callers_umask_unless_a_mode_is_given() {
    let cluster = Cluster::start(2);
    let local = cluster.path().join("input");
    std::fs::write(&local, b"bytes").unwrap();
    let local = local.to_str().unwrap();
    let file = cluster.file();
    let file = file.to_str().unwrap();
    let as_umask = |umask: libc::mode_t, args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--cluster", file]);
        let output = common::tessera_with_umask(&all, umask);
        assert!(
            output.status.success(),
            "umask {umask:03o}: tessera {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let mode = |path: &str| mode_and_owner(&cluster, path).0;
    // (umask, directory, file) modes expected.
    for (umask, directory, created) in [(0o077, "0700", "0600"), (0o022, "0755", "0644")] {
        let at = |name: &str| format!("/u{umask:03o}-{name}");
        as_umask(umask, &["mkdir", &at("dir")]);
        as_umask(umask, &["create", &at("created")]);
        as_umask(umask, &["put", local, &at("put")]);
        assert_eq!(
            [mode(&at("dir")), mode(&at("created")), mode(&at("put"))],
            [directory, created, created],
            "umask {umask:03o}"
        );
        // Given bits are kept whole, past the umask.
        as_umask(umask, &["mkdir", "--mode", "0775", &at("given-dir")]);
        as_umask(umask, &["create", "--mode", "0664", &at("given-file")]);
        as_umask(umask, &["put", "--mode", "0666", local, &at("given-put")]);
        assert_eq!(
            [
                mode(&at("given-dir")),
                mode(&at("given-file")),
                mode(&at("given-put"))
            ],
            ["0775", "0664", "0666"],
            "umask {umask:03o}"
        );
    }
    // A put over an existing file keeps that file's mode, whatever the umask.
    as_umask(0o077, &["put", local, "/u022-created"]);
    assert_eq!(mode("/u022-created"), "0644");
}
