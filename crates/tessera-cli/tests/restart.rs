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
