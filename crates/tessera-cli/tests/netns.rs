//! The cluster across network stacks: the mds, 4 iods and the client each in a Linux network
//! namespace of their own, joined by veth pairs to a bridge that lives in a namespace too,
//! with one address each from the documentation range 192.0.2.0/24 and no default route, so
//! no packet leaves the machine. `tessera up --hosts` starts every server through an
//! `exec "ip netns exec NS"` launcher; from the client's namespace the test runs put/get of
//! 64 MiB, list I/O (`tessera demo`), datatype I/O and views, and a server-directed
//! collective, all checked byte for byte; then it kills an iod, brings it back with
//! `tessera restart iod N`, and reads everything back. Needs root and `ip`; where namespaces
//! cannot be made the test is ignored at run time, and fails under `CI=true`.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{bytes, TESSERA};
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CollectiveMethod, CollectiveOptions, CreateOptions,
    Datatype, Method, OpenMode, ThreadCommunicator, ViewedFile,
};

/// Addresses on the test bridge: the mds, iods 0-3, then the client.
const MDS_ADDRESS: &str = "192.0.2.10";
const IOD_ADDRESSES: [&str; 4] = ["192.0.2.11", "192.0.2.12", "192.0.2.13", "192.0.2.14"];
const CLIENT_ADDRESS: &str = "192.0.2.15";
const BIG_BYTES: usize = 64 << 20;

/// Runs `ip ARGS`, returning its error output on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|err| format!("cannot run ip: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The namespaces and the cluster directory; dropping it stops every server and deletes
/// every namespace (their veth ends and the bridge go with them), also after a failure.
struct Network {
    /// Namespaces made so far, the bridge's first.
    namespaces: Vec<String>,
    dir: tempfile::TempDir,
}

/// The namespace of `role` for this test process (the pid keeps parallel runs apart).
fn namespace(role: &str) -> String {
    format!("tsr-{}-{role}", std::process::id())
}

impl Network {
    /// Makes the namespaces, the bridge and one veth pair per node.
    fn build() -> Result<Self, String> {
        let mut network = Self {
            namespaces: Vec::new(),
            dir: tempfile::tempdir().map_err(|err| err.to_string())?,
        };
        let bridge = namespace("br");
        ip(&["netns", "add", &bridge])?;
        network.namespaces.push(bridge.clone());
        ip(&["-n", &bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &bridge, "link", "set", "br0", "up"])?;
        let mut nodes = vec![("mds".to_owned(), MDS_ADDRESS)];
        nodes.extend((0..4).map(|index| (format!("iod{index}"), IOD_ADDRESSES[index])));
        nodes.push(("client".to_owned(), CLIENT_ADDRESS));
        for (port, (role, address)) in nodes.iter().enumerate() {
            let namespace = namespace(role);
            ip(&["netns", "add", &namespace])?;
            network.namespaces.push(namespace.clone());
            let bridge_end = format!("v{port}");
            ip(&[
                "-n",
                &bridge,
                "link",
                "add",
                &bridge_end,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &namespace,
            ])?;
            ip(&["-n", &bridge, "link", "set", &bridge_end, "master", "br0"])?;
            ip(&["-n", &bridge, "link", "set", &bridge_end, "up"])?;
            let with_prefix = format!("{address}/24");
            ip(&["-n", &namespace, "addr", "add", &with_prefix, "dev", "eth0"])?;
            ip(&["-n", &namespace, "link", "set", "eth0", "up"])?;
            ip(&["-n", &namespace, "link", "set", "lo", "up"])?;
        }
        Ok(network)
    }

    fn cluster_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = Command::new(TESSERA)
            .args(["down", "--dir"])
            .arg(self.dir.path())
            .output();
        for namespace in self.namespaces.iter().rev() {
            if let Err(err) = ip(&["netns", "del", namespace]) {
                eprintln!("netns test teardown: {err}");
            }
        }
    }
}

/// Moves the calling thread into the network namespace `name` (threads and processes it
/// starts afterwards are there too).
fn enter(name: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{name}");
    let file = std::fs::File::open(&path).map_err(|err| format!("{path}: {err}"))?;
    // SAFETY: setns takes a namespace descriptor we own and changes only this thread's
    // network namespace; no memory is involved.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } == 0 {
        Ok(())
    } else {
        Err(format!("setns {path}: {}", std::io::Error::last_os_error()))
    }
}

/// Runs `tessera ARGS` and returns its standard output; fails the test with its error output.
fn tessera_ok(args: &[&str]) -> String {
    let output = Command::new(TESSERA)
        .args(args)
        .env_remove("TESSERA_CLUSTER")
        .output()
        .expect("tessera runs");
    assert!(
        output.status.success(),
        "tessera {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn tcp_client(cluster_file: &Path) -> Client {
    let config = ClusterConfig::load(cluster_file).expect("cluster file");
    assert!(
        config.iods.iter().all(|iod| iod.local.is_none()),
        "servers behind a launcher are reached by TCP only"
    );
    Client::new(
        &config,
        &ClientOptions {
            timeout: Duration::from_secs(30),
            local: false,
            ..ClientOptions::default()
        },
    )
}

/// Writes a file with holes through a vector view, once by datatype I/O and once by view
/// I/O, and returns each file's expected bytes (by a byte model of the view).
fn datatype_and_view_io(client: &Client) -> Vec<(String, Vec<u8>)> {
    let int = Datatype::bytes(4).unwrap();
    // 2 ints of every 8, 4 times, then the pattern repeats every 128 bytes.
    let filetype = Datatype::resized(0, 128, &Datatype::vector(4, 2, 8, &int).unwrap()).unwrap();
    // Every other 3-byte group of memory: noncontiguous on both sides.
    let memtype = Datatype::resized(0, 6, &Datatype::bytes(3).unwrap()).unwrap();
    let mut files = Vec::new();
    for method in [Method::Datatype, Method::View] {
        let path = format!("/netns-{}", method.name());
        let options = CreateOptions {
            stripe_unit_bytes: 256,
            ..CreateOptions::default()
        };
        let mut viewed = ViewedFile::new(client.create(&path, &options).unwrap());
        viewed.set_method(method);
        let displacement = 20u64;
        viewed.set_view(displacement, &filetype).unwrap();
        assert_eq!(viewed.effective_method(), method);
        let count = 40_000u64;
        let memory: Vec<u8> = (0..count * 6)
            .map(|k| u8::try_from((k * 7 + 3) % 251).unwrap())
            .collect();
        let report = viewed.write(0, &memory, &memtype, count).unwrap();
        assert_eq!(report.bytes, count * 3, "{path}: bytes written");
        // The model: the memory type's bytes, in order, at the view's places.
        let sent: Vec<u8> = memory
            .chunks(6)
            .flat_map(|group| group[..3].to_vec())
            .collect();
        let mut model = BTreeMap::new();
        let places = filetype
            .runs(i64::try_from(displacement).unwrap(), 0, count * 3)
            .unwrap()
            .flat_map(|run| {
                let start = u64::try_from(run.offset).unwrap();
                start..start + run.length
            });
        for (place, byte) in places.zip(sent) {
            model.insert(place, byte);
        }
        let end = model.keys().next_back().unwrap() + 1;
        let expected: Vec<u8> = (0..end)
            .map(|place| model.get(&place).copied().unwrap_or(0))
            .collect();
        let mut back = vec![0xEE_u8; memory.len()];
        viewed.read(0, &mut back, &memtype, count).unwrap();
        for (k, (&got, &sent)) in back.iter().zip(&memory).enumerate() {
            let want = if k % 6 < 3 { sent } else { 0xEE };
            assert_eq!(got, want, "{path}: memory byte {k} read back");
        }
        viewed.close().unwrap();
        files.push((path, expected));
    }
    files
}

/// Process `rank`'s view of interleaved ints, `block` of every `block · processes`.
fn interleaved(rank: u64, processes: u64, block: u64) -> Datatype {
    let int = Datatype::bytes(4).unwrap();
    let mine =
        Datatype::hindexed(&[block], &[i64::try_from(rank * block * 4).unwrap()], &int).unwrap();
    Datatype::resized(0, i64::try_from(processes * block * 4).unwrap(), &mine).unwrap()
}

/// A server-directed collective write and read of interleaved ints by 4 processes (each
/// with a client of its own); returns the file's expected bytes.
fn collective(cluster_file: &Path) -> (String, Vec<u8>) {
    let path = "/netns-collective";
    let (processes, block, count) = (4u64, 3u64, 30_000u64);
    let value = |rank: u64, k: u64| u32::try_from(rank * 1_000_000 + k).unwrap().to_le_bytes();
    tcp_client(cluster_file)
        .create(
            path,
            &CreateOptions {
                stripe_unit_bytes: 4096,
                ..CreateOptions::default()
            },
        )
        .unwrap()
        .close()
        .unwrap();
    let options = CollectiveOptions {
        method: CollectiveMethod::ServerDirected,
        ..CollectiveOptions::default()
    };
    let group = ThreadCommunicator::group(4, Duration::from_mins(1));
    std::thread::scope(|scope| {
        let members: Vec<_> = group
            .into_iter()
            .map(|member| {
                let options = &options;
                scope.spawn(move || {
                    let rank = tessera_client::Communicator::rank(&member) as u64;
                    let client = tcp_client(cluster_file);
                    let mut viewed =
                        ViewedFile::new(client.open(path, OpenMode::ReadWrite).unwrap());
                    viewed
                        .set_view(0, &interleaved(rank, processes, block))
                        .unwrap();
                    let int = Datatype::bytes(4).unwrap();
                    let data: Vec<u8> = (0..count).flat_map(|k| value(rank, k)).collect();
                    viewed
                        .write_all(&member, options, 0, &data, &int, count)
                        .unwrap();
                    let mut back = vec![0u8; data.len()];
                    viewed
                        .read_all(&member, options, 0, &mut back, &int, count)
                        .unwrap();
                    assert!(back == data, "rank {rank}: collective read differs");
                })
            })
            .collect();
        for member in members {
            member.join().unwrap();
        }
    });
    let mut model = vec![0u8; usize::try_from(processes * count * 4).unwrap()];
    for rank in 0..processes {
        for k in 0..count {
            let int_index = (k / block) * block * processes + rank * block + k % block;
            let at = usize::try_from(int_index * 4).unwrap();
            model[at..at + 4].copy_from_slice(&value(rank, k));
        }
    }
    (path.to_owned(), model)
}

fn read_whole(client: &Client, path: &str) -> Vec<u8> {
    let file = client.open(path, OpenMode::ReadOnly).unwrap();
    let size = usize::try_from(file.stat().unwrap().size).unwrap();
    let mut data = vec![0u8; size];
    assert_eq!(
        file.read_at(0, &mut data).unwrap().bytes,
        size as u64,
        "{path}"
    );
    data
}

fn assert_same(path: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{path}: size");
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    assert_eq!(first, None, "{path}: first differing byte");
}

/// Everything the client does, inside the client's namespace.
fn client_work(network: &Network) {
    let dir = network.cluster_dir();
    let ns = |role: &str| format!("ip netns exec {}", namespace(role));
    let mut hostfile = format!("mds {MDS_ADDRESS}:7000 exec \"{}\"\n", ns("mds"));
    for (index, address) in IOD_ADDRESSES.iter().enumerate() {
        writeln!(
            hostfile,
            "iod {index} {address}:{} exec \"{}\"",
            7001 + index,
            ns(&format!("iod{index}"))
        )
        .unwrap();
    }
    writeln!(hostfile, "agent client exec \"{}\"", ns("client")).unwrap();
    let hosts = dir.join("hostfile");
    std::fs::write(&hosts, hostfile).unwrap();
    let dir_arg = dir.to_str().unwrap();
    let stdout = tessera_ok(&["up", "--hosts", hosts.to_str().unwrap(), "--dir", dir_arg]);
    assert!(
        stdout.contains(&format!("mds at {MDS_ADDRESS}:7000, 4 I/O servers")),
        "{stdout}"
    );
    let cluster_file = dir.join("cluster.toml");
    let cluster = cluster_file.to_str().unwrap();
    let config = ClusterConfig::load(&cluster_file).unwrap();
    assert_eq!(config.iods[2].address, format!("{}:7003", IOD_ADDRESSES[2]));
    tessera_ok(&["status", "--cluster", cluster]);

    // put/get of 64 MiB through the CLI.
    let big = bytes(64, BIG_BYTES + 12345);
    let local = dir.join("big.in");
    std::fs::write(&local, &big).unwrap();
    tessera_ok(&["put", local.to_str().unwrap(), "/big", "--cluster", cluster]);
    let back = dir.join("big.out");
    tessera_ok(&["get", "/big", back.to_str().unwrap(), "--cluster", cluster]);
    assert_same("/big", &std::fs::read(&back).unwrap(), &big);

    // List I/O: the demo's 4 worker processes write and verify a block-block array.
    let demo = tessera_ok(&["demo", "--size", "512", "--cluster", cluster]);
    assert!(
        demo.contains("verified: every byte read back matches"),
        "{demo}"
    );
    let client = tcp_client(&cluster_file);
    let demo_array = read_whole(&client, "/demo/array");
    assert_eq!(demo_array.len(), 512 * 512 * 8, "/demo/array size");

    let mut files = datatype_and_view_io(&client);
    files.push(collective(&cluster_file));
    for (path, expected) in &files {
        assert_same(path, &read_whole(&client, path), expected);
    }

    // Kill iod 2, bring it back with restart, and read everything back.
    let pid: i32 = std::fs::read_to_string(dir.join("run/iod-2.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signalling this test's own server; no memory is involved.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(
        tcp_client(&cluster_file).ping_all()[3].1.is_err(),
        "iod 2 is down"
    );
    let stdout = tessera_ok(&["restart", "iod", "2", "--dir", dir_arg]);
    assert!(
        stdout.contains("iod-2 (pid") && stdout.contains(&format!("at {}:7003", IOD_ADDRESSES[2])),
        "{stdout}"
    );
    tessera_ok(&["status", "--cluster", cluster]);
    // The client from before the restart reconnects by itself.
    assert_same("/big", &read_whole(&client, "/big"), &big);
    assert_same(
        "/demo/array",
        &read_whole(&client, "/demo/array"),
        &demo_array,
    );
    for (path, expected) in &files {
        assert_same(path, &read_whole(&client, path), expected);
    }
    std::fs::remove_file(&back).unwrap();
    tessera_ok(&["get", "/big", back.to_str().unwrap(), "--cluster", cluster]);
    assert_same("/big", &std::fs::read(&back).unwrap(), &big);
}

#[test]
fn a_cluster_across_network_namespaces_serves_and_survives_an_iod_restart() {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    let network = if euid == 0 {
        Network::build()
    } else {
        Err(format!(
            "network namespaces need root; this test runs as uid {euid}"
        ))
    };
    let network = match network {
        Ok(network) => network,
        Err(err) => {
            common::not_run::ignored_at_run_time(&format!(
                "cannot create network namespaces: {err}"
            ));
            return;
        }
    };
    let client_namespace = namespace("client");
    // Only this thread (and what it starts) moves into the client's namespace; the guard's
    // teardown runs here, in any case.
    let outcome = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                enter(&client_namespace).unwrap();
                client_work(&network);
            })
            .join()
    });
    if let Err(err) = outcome {
        eprintln!(
            "netns test failed; logs in {}:",
            network.cluster_dir().display()
        );
        for name in ["mds", "iod-0", "iod-1", "iod-2", "iod-3", "agent-0"] {
            let log =
                std::fs::read_to_string(network.cluster_dir().join(format!("log/{name}.log")))
                    .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            eprintln!(
                "--- {name}:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        drop(network);
        std::panic::resume_unwind(err);
    }
}
