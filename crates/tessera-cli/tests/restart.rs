//! `tessera up` on a cluster with servers alive starts only the missing ones, at their old
//! addresses; `tessera restart iod N` and `tessera restart mds` replace one server while the
//! others and an open client keep going.

mod common;

use common::{bytes, tessera, Cluster};
use tessera_client::OpenMode;

fn ok(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn put(cluster: &Cluster, path: &str, data: &[u8]) {
    let local = cluster.path().join("input");
    std::fs::write(&local, data).unwrap();
    let file = cluster.file();
    ok(&tessera(&[
        "put",
        local.to_str().unwrap(),
        path,
        "--cluster",
        file.to_str().unwrap(),
    ]));
}

fn get(cluster: &Cluster, path: &str) -> Vec<u8> {
    let local = cluster.path().join("output");
    let file = cluster.file();
    ok(&tessera(&[
        "get",
        path,
        local.to_str().unwrap(),
        "--cluster",
        file.to_str().unwrap(),
    ]));
    std::fs::read(local).unwrap()
}

#[test]
fn up_starts_only_the_missing_iod_at_its_old_port() {
    let cluster = Cluster::start(3);
    let data = bytes(17, (3 << 20) + 99);
    put(&cluster, "/kept", &data);
    let addresses: Vec<String> = (0..3).map(|index| cluster.iod_address(index)).collect();
    let pids: Vec<i32> = ["mds", "iod-0", "iod-2", "agent"]
        .iter()
        .map(|name| cluster.pid(name))
        .collect();

    cluster.kill_iod(1);
    // Without --servers: the running cluster's size.
    let dir = cluster.path().to_str().unwrap().to_owned();
    let stdout = ok(&tessera(&["up", "--dir", &dir]));
    assert!(stdout.contains("; started iod-1\n"), "{stdout}");
    let after: Vec<i32> = ["mds", "iod-0", "iod-2", "agent"]
        .iter()
        .map(|name| cluster.pid(name))
        .collect();
    assert_eq!(pids, after, "the running servers were left alone");
    let now: Vec<String> = (0..3).map(|index| cluster.iod_address(index)).collect();
    assert_eq!(addresses, now, "iod 1 came back at its old address");
    assert_eq!(get(&cluster, "/kept"), data);

    // Another `up` with everything running starts nothing, and a different size is refused.
    let stdout = ok(&tessera(&["up", "--dir", &dir]));
    assert!(
        stdout.contains("every server was already running"),
        "{stdout}"
    );
    let refused = tessera(&["up", "--dir", &dir, "--servers", "4"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("a cluster of 3 iods is running"),
        "{stderr}"
    );

    // Down + up keeps every address too.
    let mds = tessera_client::ClusterConfig::load(&cluster.file())
        .unwrap()
        .mds
        .address;
    cluster.down();
    ok(&tessera(&["up", "--dir", &dir]));
    let config = tessera_client::ClusterConfig::load(&cluster.file()).unwrap();
    assert_eq!(config.mds.address, mds);
    assert_eq!(
        config
            .iods
            .iter()
            .map(|iod| iod.address.clone())
            .collect::<Vec<_>>(),
        addresses
    );
    assert_eq!(get(&cluster, "/kept"), data);
}

#[test]
fn restart_of_an_iod_and_the_mds_keeps_an_open_client_working() {
    let cluster = Cluster::start(2);
    let data = bytes(23, (1 << 20) + 4321);
    put(&cluster, "/open", &data);
    // A TCP client, so its reads go over the connections the restart breaks.
    let client = cluster.tcp_client();
    let file = client.open("/open", OpenMode::ReadOnly).unwrap();
    let mut first = vec![0; data.len()];
    assert_eq!(
        file.read_at(0, &mut first).unwrap().bytes,
        data.len() as u64
    );
    assert_eq!(first, data);

    let dir = cluster.path().to_str().unwrap().to_owned();
    let (old_iod, old_other) = (cluster.pid("iod-1"), cluster.pid("iod-0"));
    let address = cluster.iod_address(1);
    let stdout = ok(&tessera(&["restart", "iod", "1", "--dir", &dir]));
    assert!(
        stdout.contains(&format!("restarted iod-1 (pid {})", cluster.pid("iod-1"))),
        "{stdout}"
    );
    assert_ne!(cluster.pid("iod-1"), old_iod, "a new process");
    assert_eq!(
        cluster.pid("iod-0"),
        old_other,
        "the other iod kept running"
    );
    assert_eq!(cluster.iod_address(1), address);
    let mut again = vec![0; data.len()];
    assert_eq!(
        file.read_at(0, &mut again).unwrap().bytes,
        data.len() as u64
    );
    assert_eq!(
        again, data,
        "the open client reads through the restarted iod"
    );

    let old_mds = cluster.pid("mds");
    ok(&tessera(&["restart", "mds", "--dir", &dir]));
    assert_ne!(cluster.pid("mds"), old_mds);
    assert_eq!(client.stat("/open").unwrap().size, data.len() as u64);
    let mut third = vec![0; data.len()];
    assert_eq!(
        file.read_at(0, &mut third).unwrap().bytes,
        data.len() as u64
    );
    assert_eq!(third, data);

    // A dead iod is started by restart too, and bad requests name what is wrong.
    cluster.kill_iod(0);
    let stdout = ok(&tessera(&["restart", "iod", "0", "--dir", &dir]));
    assert!(stdout.contains("started iod-0"), "{stdout}");
    assert_eq!(get(&cluster, "/open"), data);
    for (args, expected) in [
        (vec!["restart", "iod", "--dir", &dir], "give its index"),
        (
            vec!["restart", "iod", "7", "--dir", &dir],
            "no saved command for iod-7",
        ),
        (
            vec!["restart", "disk", "--dir", &dir],
            "expected `mds`, `iod N`",
        ),
    ] {
        let output = tessera(&args);
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn keygen_prints_the_cluster_id_that_up_writes_for_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let stdout = ok(&tessera(&["keygen", key.to_str().unwrap()]));
    let line = stdout
        .lines()
        .find(|line| line.starts_with("cluster_id = "))
        .unwrap_or_else(|| panic!("no cluster_id line: {stdout}"))
        .to_owned();
    let cluster = Cluster { dir };
    cluster.up(1);
    let written = std::fs::read_to_string(cluster.file()).unwrap();
    assert!(
        written.lines().any(|l| l == line),
        "{line} not in {written}"
    );
    cluster.down();
}

/// A port free on loopback a moment ago (a hostfile needs fixed ports).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `tessera ARGS` with `path_prefix` first on PATH (where the fake `ssh` is).
fn tessera_with_path(path_prefix: &std::path::Path, args: &[&str]) -> std::process::Output {
    let path = format!(
        "{}:{}",
        path_prefix.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::process::Command::new(common::TESSERA)
        .args(args)
        .env("PATH", path)
        .env_remove("TESSERA_CLUSTER")
        .output()
        .expect("tessera runs")
}

/// Stands in for `ssh -tt -o BatchMode=yes HOST COMMAND…` (this machine has no sshd): runs
/// the words after the host through `sh -c`, as sshd hands them to the remote shell, and
/// turns its own SIGTERM into the SIGHUP a remote server gets when its terminal hangs up.
const FAKE_SSH: &str = r#"#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -tt) shift ;;
    -o) shift 2 ;;
    *) shift; break ;;
  esac
done
sh -c "exec $*" &
child=$!
trap 'kill -HUP $child; wait $child; exit 0' TERM
wait $child
"#;

#[test]
fn a_hostfile_starts_restarts_and_stops_servers_through_their_launchers() {
    use std::os::unix::fs::PermissionsExt;

    // A path that the remote shell must see quoted; dropping the cluster runs `down` on it,
    // so no server outlives a failed test.
    let cluster = Cluster {
        dir: tempfile::Builder::new()
            .prefix("tsr hosts ")
            .tempdir()
            .unwrap(),
    };
    let bin = cluster.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("ssh"), FAKE_SSH).unwrap();
    std::fs::set_permissions(bin.join("ssh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cluster_dir = cluster.path().to_path_buf();
    let ports = [free_port(), free_port(), free_port()];
    let hosts = cluster.path().join("hosts.in");
    std::fs::write(
        &hosts,
        format!(
            "# two servers over (fake) ssh, one local\n\
             mds 127.0.0.1:{} ssh node-a\n\
             iod 0 127.0.0.1:{} ssh node-b\n\
             iod 1 127.0.0.1:{}\n\
             agent localhost\n",
            ports[0], ports[1], ports[2]
        ),
    )
    .unwrap();
    let dir_arg = cluster_dir.to_str().unwrap();
    let stdout = ok(&tessera_with_path(
        &bin,
        &["up", "--hosts", hosts.to_str().unwrap(), "--dir", dir_arg],
    ));
    assert!(
        stdout.contains("started iod-0, iod-1, mds, agent-0"),
        "{stdout}"
    );
    let config = tessera_client::ClusterConfig::load(&cluster.file()).unwrap();
    assert_eq!(config.mds.address, format!("127.0.0.1:{}", ports[0]));
    assert_eq!(config.iods[0].address, format!("127.0.0.1:{}", ports[1]));
    assert!(config.iods[0].local.is_none(), "no Unix socket over ssh");
    assert!(
        config.iods[1].local.is_some(),
        "a local iod offers its socket"
    );
    let data = bytes(31, (2 << 20) + 7);
    put(&cluster, "/over-ssh", &data);

    // The pid file of an ssh-launched server holds the ssh, whose command line names it.
    let ssh_pid = std::fs::read_to_string(cluster_dir.join("run/iod-0.pid")).unwrap();
    let line = std::fs::read(format!("/proc/{}/cmdline", ssh_pid.trim())).unwrap();
    let line = String::from_utf8_lossy(&line).replace('\0', " ");
    assert!(
        line.contains("bin/ssh -tt -o BatchMode=yes -o ConnectTimeout=10 node-b"),
        "{line}"
    );
    assert!(line.contains('\''), "paths with a space are quoted: {line}");

    for args in [["restart", "iod", "0"], ["restart", "mds", ""]] {
        let mut args: Vec<&str> = args.iter().copied().filter(|a| !a.is_empty()).collect();
        args.extend(["--dir", dir_arg]);
        let stdout = ok(&tessera_with_path(&bin, &args));
        assert!(stdout.contains("restarted"), "{stdout}");
        assert_eq!(get(&cluster, "/over-ssh"), data);
    }

    // The hangup stopped the old servers cleanly (a SIGHUP left at its default would have
    // killed them before they log this).
    assert!(
        cluster.log("iod-0").contains("iod 0: stopped"),
        "{}",
        cluster.log("iod-0")
    );
    assert!(
        cluster.log("mds").contains("mds: stopped"),
        "{}",
        cluster.log("mds")
    );

    // down ends every server, the remote ones by hanging up their ssh.
    ok(&tessera_with_path(&bin, &["down", "--dir", dir_arg]));
    for port in ports {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} still answers after down"
        );
    }
    // A later `up` without --hosts uses the kept hostfile and the same addresses.
    let stdout = ok(&tessera_with_path(&bin, &["up", "--dir", dir_arg]));
    assert!(
        stdout.contains("started iod-0, iod-1, mds, agent-0"),
        "{stdout}"
    );
    assert_eq!(get(&cluster, "/over-ssh"), data);
    let refused = tessera_with_path(&bin, &["up", "--dir", dir_arg, "--servers", "2"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("was started from a hostfile"), "{stderr}");
    ok(&tessera_with_path(&bin, &["down", "--dir", dir_arg]));

    // A hostfile is refused on a directory whose local cluster runs.
    let local = Cluster::start(1);
    let mixed = tessera_with_path(
        &bin,
        &[
            "up",
            "--hosts",
            hosts.to_str().unwrap(),
            "--dir",
            local.path().to_str().unwrap(),
        ],
    );
    assert!(!mixed.status.success());
    let stderr = String::from_utf8_lossy(&mixed.stderr);
    assert!(
        stderr.contains("run from another hostfile or a local `up`"),
        "{stderr}"
    );
}
