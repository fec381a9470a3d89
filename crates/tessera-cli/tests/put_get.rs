//! `put` and `get` that lose nothing, and the CLI's hygiene (issue 17, items 6 and 8), against
//! real clusters started with `tessera up`: a put never damages its target, concurrent puts
//! leave one whole input, `-` and pipes work, a closed stdout ends a command quietly, `down`
//! leaves a stranger with a reused pid alone, control characters in names are refused, logs
//! are plain, and connection warnings are rate-limited.

mod common;

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bytes, tessera, Cluster, TESSERA};

/// Runs `tessera ARGS --cluster FILE`; returns (success, stdout, stderr).
fn run(cluster: &Cluster, args: &[&str]) -> (bool, Vec<u8>, String) {
    let file = cluster.file();
    let mut all = args.to_vec();
    all.extend(["--cluster", file.to_str().unwrap()]);
    let output = tessera(&all);
    (
        output.status.success(),
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn ok(cluster: &Cluster, args: &[&str]) -> Vec<u8> {
    let (success, stdout, stderr) = run(cluster, args);
    assert!(success, "tessera {args:?} failed: {stderr}");
    stdout
}

/// The bytes of `path` in Tessera, through `tessera get PATH -`.
fn contents(cluster: &Cluster, path: &str) -> Vec<u8> {
    ok(cluster, &["get", path, "-"])
}

/// Names in `/` that are a put's temporary files.
fn temporaries(cluster: &Cluster) -> Vec<String> {
    cluster
        .client()
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|entry| entry.name)
        .filter(|name| name.contains(".put-"))
        .collect()
}

#[test]
fn put_never_damages_its_target_and_concurrent_puts_leave_one_input() {
    let cluster = Cluster::start(3);
    let scratch = tempfile::tempdir().unwrap();
    let local = |name: &str| scratch.path().join(name).display().to_string();
    let original = bytes(1, (1 << 20) + 17);
    std::fs::write(local("original"), &original).unwrap();
    ok(&cluster, &["put", &local("original"), "/victim"]);

    // A directory, a missing file and an unreadable target path: refused before the target
    // is touched, with the reason.
    let (success, _, stderr) = run(&cluster, &["put", "/tmp", "/victim"]);
    assert!(!success);
    assert!(stderr.contains("/tmp is a directory"), "{stderr}");
    let (success, _, stderr) = run(&cluster, &["put", &local("missing"), "/victim"]);
    assert!(!success);
    assert!(stderr.contains(&local("missing")), "{stderr}");
    assert!(contents(&cluster, "/victim") == original, "/victim changed");
    ok(&cluster, &["mkdir", "/dir"]);
    let (success, _, stderr) = run(&cluster, &["put", &local("original"), "/dir"]);
    assert!(!success);
    assert!(stderr.contains("/dir: is a directory"), "{stderr}");

    // Two puts of different 4 MiB inputs at once, three times: the path holds exactly one of
    // them, and no temporary file is left.
    let inputs = [bytes(2, 4 << 20), bytes(3, 4 << 20)];
    std::fs::write(local("a"), &inputs[0]).unwrap();
    std::fs::write(local("b"), &inputs[1]).unwrap();
    let file = cluster.file();
    for round in 0..3 {
        let children: Vec<_> = [local("a"), local("b")]
            .iter()
            .map(|source| {
                Command::new(TESSERA)
                    .args(["put", source, "/race", "--cluster"])
                    .arg(&file)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let got = contents(&cluster, "/race");
        assert!(
            got == inputs[0] || got == inputs[1],
            "round {round}: /race holds a mix of the inputs ({} bytes)",
            got.len()
        );
        assert_eq!(temporaries(&cluster), Vec::<String>::new(), "round {round}");
    }

    // The default mode is the replaced file's; --mode sets another.
    ok(&cluster, &["chmod", "600", "/victim"]);
    ok(&cluster, &["put", &local("a"), "/victim"]);
    assert_eq!(cluster.client().stat("/victim").unwrap().mode, 0o600);
    ok(&cluster, &["put", "--mode", "640", &local("a"), "/victim"]);
    assert_eq!(cluster.client().stat("/victim").unwrap().mode, 0o640);

    // A put whose write fails (an iod is down) leaves the target as it was and removes its
    // temporary file.
    ok(&cluster, &["put", &local("original"), "/kept"]);
    let pid = cluster.pid("iod-1");
    // SAFETY: stopping a server process of this test's cluster; no memory is involved.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let (success, _, stderr) = run(&cluster, &["put", &local("b"), "/kept"]);
    assert!(!success, "put with an iod down succeeded");
    assert!(stderr.contains("put /kept"), "{stderr}");
    assert_eq!(temporaries(&cluster), Vec::<String>::new());
    assert!(
        cluster
            .client()
            .readdir("/")
            .unwrap()
            .iter()
            .any(|e| e.name == "kept"),
        "/kept is gone"
    );
}

#[test]
fn get_and_put_use_pipes_and_a_closed_stdout_ends_quietly() {
    let cluster = Cluster::start(2);
    let data = bytes(4, (3 << 20) + 5);
    let file = cluster.file();

    // put from stdin (`-`), get to stdout (`-`), a pipe both ways.
    let mut child = Command::new(TESSERA)
        .args(["put", "-", "/piped", "--cluster"])
        .arg(&file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&data).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("put stdin -> /piped"));
    assert!(
        contents(&cluster, "/piped") == data,
        "bytes differ through pipes"
    );

    // get to /dev/null (no fsync of a device).
    let stdout = ok(&cluster, &["get", "/piped", "/dev/null"]);
    assert!(String::from_utf8_lossy(&stdout).contains(&format!("{} bytes", data.len())));

    // `tessera get /piped - | head -c1`: one byte out, and nothing on stderr.
    let pipeline = format!(
        "{TESSERA} get /piped - --cluster {} | head -c1",
        file.display()
    );
    let output = Command::new("sh").args(["-c", &pipeline]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(output.stdout, data[..1]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");

    // Every printing command, with a stdout whose reader is already gone: ended by SIGPIPE
    // as a C tool would be, silently, never a panic.
    let local = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(local.path(), b"small").unwrap();
    let status = ["status", "--cluster", file.to_str().unwrap()];
    let commands: [&[&str]; 6] = [
        &["ls", "/"],
        &["ls", "-l", "/"],
        &["stat", "/piped"],
        &["get", "/piped", "-"],
        &["put", local.path().to_str().unwrap(), "/small"],
        &status,
    ];
    for args in commands {
        let (signal, stderr) = with_closed_stdout(&cluster, args);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
        assert_eq!(signal, Some(libc::SIGPIPE), "{args:?}");
    }

    // `tessera sync`.
    let stdout = ok(&cluster, &["sync", "/piped"]);
    assert_eq!(
        String::from_utf8_lossy(&stdout).trim(),
        "sync /piped: flushed on 2 servers"
    );
    let (success, _, stderr) = run(&cluster, &["sync", "/nothing"]);
    assert!(!success);
    assert!(stderr.contains("sync /nothing"), "{stderr}");
    let stdout = ok(
        &cluster,
        &["put", "--no-sync", local.path().to_str().unwrap(), "/ns"],
    );
    assert!(String::from_utf8_lossy(&stdout).contains("(not synced)"));
    assert_eq!(contents(&cluster, "/ns"), b"small");
}

/// Runs `tessera ARGS` (adding `--cluster` unless given) with a stdout pipe whose read end
/// is closed; returns the signal that ended it and its stderr.
fn with_closed_stdout(cluster: &Cluster, args: &[&str]) -> (Option<i32>, String) {
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`, which we own.
    let made = unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(made, 0, "pipe2 failed");
    // SAFETY: both descriptors were just made by pipe2 and are owned by nobody else.
    let (reader, writer) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(reader);
    let mut command = Command::new(TESSERA);
    command.args(args);
    if !args.contains(&"--cluster") {
        command.arg("--cluster").arg(cluster.file());
    }
    let child = command
        .env_remove("TESSERA_CLUSTER")
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.signal(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn down_leaves_a_reused_pid_alone() {
    // The directory's name holds "tessera", as the old check looked for.
    let dir = tempfile::Builder::new()
        .prefix("tessera-down-")
        .tempdir()
        .unwrap();
    let cluster = Cluster { dir };
    cluster.up(2);
    let other = Cluster::start(1);
    let run_dir = cluster.path().join("run");

    // The agent, iod-1 and the mds exit; their pids are "reused" by strangers: a sleep, a
    // `tail -f` of this cluster's log, and the mds of another cluster.
    for server in ["agent", "iod-1", "mds"] {
        let pid = cluster.pid(server);
        // SAFETY: stopping a server of this test's cluster; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        common::wait_gone(pid, "the server");
    }
    let mut sleep = Command::new("sleep").arg("60").spawn().unwrap();
    let mut tail = Command::new("tail")
        .arg("-f")
        .arg(cluster.path().join("log").join("mds.log"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(run_dir.join("agent.pid"), sleep.id().to_string()).unwrap();
    std::fs::write(run_dir.join("iod-1.pid"), tail.id().to_string()).unwrap();
    std::fs::write(run_dir.join("mds.pid"), other.pid("mds").to_string()).unwrap();

    let output = tessera(&["down", "--dir", cluster.path().to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!(
            "tessera: stopped 1 server processes in {}",
            cluster.path().display()
        )
    );
    for (name, child) in [("sleep", &mut sleep), ("tail", &mut tail)] {
        assert!(
            child.try_wait().unwrap().is_none(),
            "down signalled the {name}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // The other cluster's mds still serves.
    assert!(
        other.client().stat("/").is_ok(),
        "the other cluster's mds was stopped"
    );
}

#[test]
fn control_characters_logs_and_rate_limited_warnings() {
    let cluster = Cluster::start(1);
    let local = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(local.path(), b"x").unwrap();
    for (args, name) in [
        (vec!["mkdir", "/a\nb"], "a\\nb"),
        (
            vec!["put", local.path().to_str().unwrap(), "/red\u{1b}[31m"],
            "red\\u{1b}[31m",
        ),
    ] {
        let (success, _, stderr) = run(&cluster, &args);
        assert!(!success, "{args:?}");
        assert!(stderr.contains("invalid argument"), "{stderr}");
        assert!(stderr.contains(name), "{stderr}");
        assert!(
            !stderr.contains('\u{1b}') && stderr.trim().lines().count() == 1,
            "{stderr:?}"
        );
    }
    assert!(cluster.client().readdir("/").unwrap().is_empty());

    // 300 connections that fail the handshake: at most 10 warning lines a second.
    let address = cluster.iod_address(0);
    let started = Instant::now();
    for _ in 0..300 {
        if let Ok(mut stream) = std::net::TcpStream::connect(&address) {
            let _ = stream.write_all(&[0xff; 64]);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let refusals = || cluster.log("iod-0").matches("refusing").count();
    while refusals() < 10 {
        assert!(Instant::now() < deadline, "no refusal logged");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1100));
    let seconds = started.elapsed().as_secs() + 1;
    let logged = refusals();
    assert!(
        logged <= 10 * usize::try_from(seconds).unwrap(),
        "{logged} refusals logged in {seconds} s"
    );
    // One more bad connection in a new second reports how many were suppressed.
    let _ = std::net::TcpStream::connect(&address).map(|mut s| s.write_all(&[0xff; 64]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster
        .log("iod-0")
        .contains("connection warnings suppressed")
    {
        assert!(Instant::now() < deadline, "{}", cluster.log("iod-0"));
        std::thread::sleep(Duration::from_millis(20));
    }

    // Log files hold no ANSI escape codes.
    for server in ["mds", "iod-0", "agent"] {
        let log = cluster.log(server);
        assert!(!log.is_empty(), "{server} logged nothing");
        assert!(!log.contains('\u{1b}'), "{server}'s log holds escape codes");
    }

    // RUST_LOG works; TESSERA_LOG wins over it. The agent logs one INFO line as it starts.
    let scratch = tempfile::tempdir().unwrap();
    let agent_log = |vars: &[(&str, &str)]| {
        let socket = scratch.path().join("agent.sock");
        let _ = std::fs::remove_file(&socket);
        let mut command = Command::new(TESSERA);
        command
            .arg("agent")
            .arg("--key")
            .arg(cluster.path().join("key"))
            .arg("--socket")
            .arg(&socket)
            .env_remove("TESSERA_LOG")
            .env_remove("RUST_LOG")
            .stderr(Stdio::piped());
        for (name, value) in vars {
            command.env(name, value);
        }
        let child = command.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the agent did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: stopping the agent this test started; no memory is involved.
        unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM) };
        let output = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let started_line = "agent: signing credentials";
    let plain = agent_log(&[]);
    assert!(plain.contains(started_line), "{plain}");
    assert!(!plain.contains('\u{1b}'), "escape codes in {plain:?}");
    assert!(!agent_log(&[("RUST_LOG", "warn")]).contains(started_line));
    assert!(!agent_log(&[("TESSERA_LOG", "warn")]).contains(started_line));
    assert!(agent_log(&[("RUST_LOG", "warn"), ("TESSERA_LOG", "info")]).contains(started_line));
    assert!(!agent_log(&[("RUST_LOG", "info"), ("TESSERA_LOG", "warn")]).contains(started_line));
    assert!(agent_log(&[("RUST_LOG", "=[")]).contains("ignoring RUST_LOG"));
}

/// `tessera put - PATH` with standard input closed (`<&-`) fails as `cat <&-` does and
/// leaves PATH as it was, where `/dev/null` still makes an empty file; a target ending in
/// `/` makes no file, through `put` or a rename; a stripe unit of 0 is refused rather than
/// read as the default, and sizes are read as the tools print them (`1MiB`).
#[test]
fn closed_stdin_trailing_slashes_and_zero_stripe_units_are_refused() {
    let cluster = Cluster::start(1);
    let file = cluster.file();
    let local = tempfile::NamedTempFile::new().unwrap();
    let data = bytes(9, 100_000);
    std::fs::write(local.path(), &data).unwrap();
    let local = local.path().to_str().unwrap();
    ok(&cluster, &["put", local, "/kept"]);

    let mut command = Command::new(TESSERA);
    command
        .args(["put", "-", "/kept", "--cluster"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only `close`, which is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            libc::close(libc::STDIN_FILENO);
            Ok(())
        });
    }
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "put from a closed stdin succeeded"
    );
    assert!(
        stderr.contains("stdin") && stderr.contains("Bad file descriptor"),
        "{stderr}"
    );
    assert!(contents(&cluster, "/kept") == data, "/kept changed");

    let output = Command::new(TESSERA)
        .args(["put", "-", "/empty", "--cluster"])
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(contents(&cluster, "/empty").is_empty());

    let (success, _, stderr) = run(&cluster, &["put", local, "/nodir/x.dat"]);
    assert!(
        !success && stderr.contains("no such directory: /nodir/"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(".put-"),
        "the temporary file is named: {stderr}"
    );
    let (success, _, stderr) = run(&cluster, &["put", local, "/newdir/"]);
    assert!(!success && stderr.contains("not a directory"), "{stderr}");
    let (success, _, stderr) = run(&cluster, &["mv", "/kept", "/moved/"]);
    assert!(!success, "mv to a trailing slash succeeded");
    assert!(stderr.contains("names a directory"), "{stderr}");
    let names: Vec<String> = cluster
        .client()
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    assert!(
        !names.iter().any(|name| name == "newdir" || name == "moved"),
        "{names:?}"
    );
    assert!(temporaries(&cluster).is_empty());

    let (success, _, stderr) = run(&cluster, &["put", local, "/zero", "--stripe-unit", "0"]);
    assert!(!success && stderr.contains("stripe unit of 0"), "{stderr}");
    let (success, _, stderr) = run(&cluster, &["create", "/zero", "--layout", "stripe:0"]);
    assert!(!success && stderr.contains("stripe unit of 0"), "{stderr}");
    ok(&cluster, &["put", local, "/mib", "--stripe-unit", "1MiB"]);
    assert!(contents(&cluster, "/mib") == data);
}

/// A `put` ended by SIGTERM or SIGINT (a job's time limit, Ctrl-C) removes its temporary file,
/// leaves the target as it was, and dies of the signal; its message names the target, never
/// the temporary file.
#[test]
fn an_interrupted_put_leaves_no_temporary_file() {
    let cluster = Cluster::start(1);
    let file = cluster.file();
    let data = bytes(5, 1 << 20);
    let output = Command::new(TESSERA)
        .args(["put", "-", "/target", "--cluster"])
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut child = Command::new(TESSERA)
            .args(["put", "-", "/target", "--cluster"])
            .arg(&file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        // More than one copy chunk (8 MiB), so the temporary file exists and holds data; the
        // pipe then stays open and the put waits for more.
        for _ in 0..12 {
            input.write_all(&data).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while temporaries(&cluster).is_empty() {
            assert!(Instant::now() < deadline, "no temporary file appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid, signal) };
        let output = child.wait_with_output().unwrap();
        drop(input);
        assert_eq!(output.status.signal(), Some(signal), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("put /target: interrupted"), "{stderr}");
        assert!(
            !stderr.contains(".put-"),
            "the temporary file is named: {stderr}"
        );
        assert!(
            temporaries(&cluster).is_empty(),
            "{:?}",
            temporaries(&cluster)
        );
        assert!(
            contents(&cluster, "/target").is_empty(),
            "the target changed"
        );
    }
}
