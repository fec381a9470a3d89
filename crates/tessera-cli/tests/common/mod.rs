//! A real local cluster for integration tests: `tessera up` in a temporary directory, real
//! server processes on loopback, `tessera down` when the test ends.

#![allow(dead_code, clippy::cast_possible_truncation)]

pub use tessera_testing as not_run;

pub mod mount;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use tessera_client::{Client, ClientOptions, ClusterConfig};

pub const TESSERA: &str = env!("CARGO_BIN_EXE_tessera");

pub fn tessera(args: &[&str]) -> Output {
    Command::new(TESSERA)
        .args(args)
        .env_remove("TESSERA_CLUSTER")
        .output()
        .expect("tessera runs")
}

/// [`tessera`] with the child's umask set to `umask` (what modes a command chooses itself).
pub fn tessera_with_umask(args: &[&str], umask: libc::mode_t) -> Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(TESSERA);
    command.args(args).env_remove("TESSERA_CLUSTER");
    // SAFETY: the closure runs in the forked child before exec and calls umask only, which is
    // async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(move || {
            libc::umask(umask);
            Ok(())
        });
    }
    command.output().expect("tessera runs")
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
}

impl Cluster {
    pub fn start(servers: u16) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let cluster = Self { dir };
        cluster.up(servers);
        cluster
    }

    /// A cluster started with `extra` arguments to `tessera up` (`--precreate 0` for a test
    /// that counts objects or foresees handles).
    pub fn start_with(servers: u16, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let cluster = Self { dir };
        cluster.up_with(servers, extra);
        cluster
    }

    pub fn up(&self, servers: u16) {
        self.up_with(servers, &[]);
    }

    pub fn up_with(&self, servers: u16, extra: &[&str]) {
        let mut args = vec![
            "up",
            "--servers",
            &servers.to_string(),
            "--dir",
            self.path().to_str().unwrap(),
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = tessera(&args);
        assert!(
            output.status.success(),
            "tessera up failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn down(&self) {
        let output = tessera(&["down", "--dir", self.path().to_str().unwrap()]);
        assert!(
            output.status.success(),
            "tessera down failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(&self) -> PathBuf {
        self.path().join("cluster.toml")
    }

    pub fn client(&self) -> Client {
        self.client_with_timeout(Duration::from_secs(30))
    }

    pub fn client_with_timeout(&self, timeout: Duration) -> Client {
        let config = ClusterConfig::load(&self.file()).expect("cluster file");
        Client::new(
            &config,
            &ClientOptions {
                timeout,
                ..ClientOptions::default()
            },
        )
    }

    /// A client that reaches every server by TCP (data in messages), whatever the host.
    pub fn tcp_client(&self) -> Client {
        let config = ClusterConfig::load(&self.file()).expect("cluster file");
        Client::new(
            &config,
            &ClientOptions {
                timeout: Duration::from_secs(30),
                local: false,
                ..ClientOptions::default()
            },
        )
    }

    pub fn pid(&self, server: &str) -> i32 {
        std::fs::read_to_string(self.path().join("run").join(format!("{server}.pid")))
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }

    /// Waits until iod `index` has logged `count` finished orphan sweeps; returns the last.
    #[allow(dead_code, reason = "for the tests of the orphan sweep")]
    pub fn sweeps_done(&self, index: usize, count: usize) -> String {
        let name = format!("iod-{index}");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let log = self.log(&name);
            let done: Vec<&str> = log
                .lines()
                .filter(|line| line.contains("orphan sweep done"))
                .collect();
            if done.len() >= count {
                return done[count - 1].to_owned();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} logged {} finished sweeps, not {count}:\n{log}",
                done.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self, server: &str) -> String {
        std::fs::read_to_string(self.path().join("log").join(format!("{server}.log")))
            .unwrap_or_default()
    }

    /// The cluster key `tessera up` made.
    pub fn key(&self) -> tessera_auth::ClusterKey {
        tessera_auth::ClusterKey::load(&self.path().join("key")).expect("cluster key")
    }

    /// Signs for this process with the cluster key (as a client run by root does).
    pub fn signer(&self) -> tessera_auth::KeySigner {
        tessera_auth::KeySigner::process(self.key())
    }

    /// A capability signed with the cluster key, as the mds would make it.
    pub fn capability(
        &self,
        handle: u64,
        rights: tessera_auth::Rights,
        uid: u32,
        expires_s: u64,
    ) -> tessera_proto::Capability {
        tessera_auth::Grant {
            handle,
            rights,
            uid,
            expires_s,
            epoch: 1,
        }
        .sign(&self.key())
    }

    pub fn iod_address(&self, index: usize) -> String {
        ClusterConfig::load(&self.file()).unwrap().iods[index]
            .address
            .clone()
    }

    /// Kills iod `index` (SIGKILL) and waits until it is gone: the iod is down, its objects
    /// stay on disk.
    pub fn kill_iod(&self, index: usize) {
        let name = format!("iod-{index}");
        let pid = self.pid(&name);
        // SAFETY: signalling a server process of this test's cluster; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        wait_gone(pid, &name);
    }

    /// The file of the object of `handle` on iod `index`.
    pub fn object_file(&self, index: usize, handle: u64) -> PathBuf {
        self.path()
            .join(format!("iod-{index}"))
            .join("objects")
            .join(format!("{handle:016x}"))
    }

    /// Restarts iod `index` in place: stops its process (SIGTERM, as `tessera down` does),
    /// then starts a new one on the same address and data directory, so a client that keeps
    /// the old address reaches the new process. Its memory (open objects, declared views) is
    /// gone; its objects are files and stay.
    pub fn restart_iod(&self, index: usize) {
        self.restart_iod_with(index, &[]);
    }

    /// [`Cluster::restart_iod`], with `extra` arguments for the new process (`--metrics`).
    pub fn restart_iod_with(&self, index: usize, extra: &[&str]) {
        let mds = ClusterConfig::load(&self.file()).unwrap().mds.address;
        self.restart_iod_swept_by(index, &mds, extra);
    }

    /// [`Cluster::restart_iod_with`], the new process's orphan sweep asking the mds at
    /// `mds` (the cluster's own, or another).
    pub fn restart_iod_swept_by(&self, index: usize, mds: &str, extra: &[&str]) {
        use std::os::unix::process::CommandExt;

        let name = format!("iod-{index}");
        let pid = self.pid(&name);
        // SAFETY: signalling a server process of this test's cluster; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // Gone, or a zombie (empty command line) waiting for its parent to reap it.
        // Gone or a zombie: the kernel closes a dying process's files (its listening sockets)
        // after it drops its memory (when `cmdline` turns empty) and before it is a zombie.
        let running = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            })
        };
        while running() {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} (pid {pid}) ignored SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let address = self.iod_address(index);
        let run = self.path().join("run");
        let address_file = run.join(format!("{name}.addr"));
        let log_path = self.path().join("log").join(format!("{name}.log"));
        loop {
            let _ = std::fs::remove_file(&address_file);
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .expect("iod log");
            let mut child = Command::new(TESSERA)
                .args(["iod", "--index", &index.to_string(), "--data"])
                .arg(self.path().join(&name))
                .args(["--listen", &address, "--address-file"])
                .arg(&address_file)
                .arg("--local-socket")
                .arg(run.join(format!("{name}.sock")))
                .arg("--key")
                .arg(self.path().join("key"))
                // As `tessera up` starts it: the orphan sweep runs once the mds answers.
                .args(["--mds", mds])
                .args(extra)
                .stdin(std::process::Stdio::null())
                .stdout(log.try_clone().expect("iod log"))
                .stderr(log)
                .process_group(0)
                .spawn()
                .expect("tessera iod starts");
            std::fs::write(run.join(format!("{name}.pid")), child.id().to_string())
                .expect("pid file");
            // Wait for the address; if the old port is not free yet, the child exits: retry.
            let exited = loop {
                if address_file.exists() {
                    break false;
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break true;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{name} did not restart on {address}:\n{}",
                    self.log(&name)
                );
                std::thread::sleep(Duration::from_millis(10));
            };
            if !exited {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Restarts every iod in place ([`Cluster::restart_iod`]).
    pub fn restart_iods(&self) {
        self.restart_iods_with(&[]);
    }

    /// Restarts every iod in place with `extra` arguments ([`Cluster::restart_iod_with`]),
    /// e.g. `--serve unified`.
    pub fn restart_iods_with(&self, extra: &[&str]) {
        let count = ClusterConfig::load(&self.file()).unwrap().iods.len();
        for index in 0..count {
            self.restart_iod_with(index, extra);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = tessera(&["down", "--dir", self.path().to_str().unwrap()]);
    }
}

/// The address a server logged for its metrics ("metrics at http://ADDR/metrics"), the
/// latest when it was restarted.
pub fn metrics_address(cluster: &Cluster, server: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = cluster.log(server);
        if let Some(address) = log
            .rsplit_once("metrics at http://")
            .and_then(|(_, rest)| rest.split("/metrics").next())
        {
            return address.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{server} logged no metrics address:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One plain HTTP/1.1 GET of `/metrics`; the body.
pub fn scrape(address: &str) -> String {
    let mut stream = std::net::TcpStream::connect(address).expect("metrics endpoint answers");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The value of the sample of `name` whose labels include every one of `labels` (0 when
/// the metric has not been recorded yet).
pub fn sample(body: &str, name: &str, labels: &[&str]) -> f64 {
    body.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .map(|line| {
            line.rsplit(' ')
                .next()
                .and_then(|value| value.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no value in {line:?}"))
        })
        .sum()
}

/// Deterministic pseudo-random bytes.
/// Applies a write of `data` at `offset` to `model`, a file's bytes (grown with zeros).
pub fn model_write(model: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if model.len() < offset + data.len() {
        model.resize(offset + data.len(), 0);
    }
    model[offset..offset + data.len()].copy_from_slice(data);
}

/// What a read of `length` bytes at `offset` returns from `model` (zeros past its end).
pub fn model_read(model: &[u8], offset: usize, length: usize) -> Vec<u8> {
    (offset..offset + length)
        .map(|at| model.get(at).copied().unwrap_or(0))
        .collect()
}

pub fn bytes(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Runs the client's side of the handshake on a raw stream, signing with `signer`; returns
/// the server's error if it refuses.
pub fn authenticate(
    stream: &mut (impl std::io::Read + std::io::Write),
    signer: &dyn tessera_auth::Authenticator,
) -> Result<(), tessera_proto::RemoteError> {
    use tessera_proto::{Challenge, Header, Opcode, Welcome, Wire};
    let (challenge_header, body) = read_frame(stream);
    assert_eq!(challenge_header.opcode, Opcode::Hello as u8);
    let challenge = Challenge::from_body(&body).unwrap();
    let (hello, welcome) = signer.hello(&challenge).unwrap();
    let hello = hello.to_body();
    let header = Header {
        opcode: Opcode::Hello as u8,
        flags: 0,
        request_id: 1,
        body_bytes: u32::try_from(hello.len()).unwrap(),
        bulk_bytes: 0,
    };
    stream.write_all(&header.encode()).unwrap();
    stream.write_all(&hello).unwrap();
    let (reply, body) = read_frame(stream);
    if reply.is_error() {
        return Err(tessera_proto::RemoteError::from_body(&body).unwrap());
    }
    assert_eq!(Welcome::from_body(&body).unwrap().proof, welcome);
    Ok(())
}

/// Reads one frame's header and body.
pub fn read_frame(stream: &mut impl std::io::Read) -> (tessera_proto::Header, Vec<u8>) {
    let mut header = [0u8; tessera_proto::limits::HEADER_BYTES];
    stream.read_exact(&mut header).unwrap();
    let header = tessera_proto::Header::decode(&header).unwrap();
    let mut body = vec![0u8; header.body_bytes as usize];
    stream.read_exact(&mut body).unwrap();
    (header, body)
}

/// Sends, over a raw same-host connection (authenticated), a one-sided `Write` of `length`
/// bytes at offset 0 of `handle` whose data `memory` describes, and returns the error the
/// server answers with (panicking if it answers otherwise).
pub fn refused_write(
    stream: &mut std::os::unix::net::UnixStream,
    (handle, capability): (u64, tessera_proto::Capability),
    length: u64,
    memory: &tessera_proto::RemoteMemory,
    request_id: u64,
) -> tessera_proto::RemoteError {
    use std::io::{Read, Write};
    use tessera_proto::{Header, Opcode, Wire};
    let write = tessera_proto::Write {
        handle,
        capability,
        mode: tessera_proto::TransferMode::Remote,
        storage: tessera_proto::StoragePlan::Auto,
        pieces: vec![tessera_client::Piece::new(0, length)],
    };
    let body = write.to_body();
    let descriptor = memory.to_body();
    let header = Header {
        opcode: Opcode::Write as u8,
        flags: 0,
        request_id,
        body_bytes: u32::try_from(body.len()).unwrap(),
        bulk_bytes: u32::try_from(descriptor.len()).unwrap(),
    };
    stream.write_all(&header.encode()).unwrap();
    stream.write_all(&body).unwrap();
    stream.write_all(&descriptor).unwrap();
    let mut reply = [0u8; tessera_proto::limits::HEADER_BYTES];
    stream.read_exact(&mut reply).unwrap();
    let reply = Header::decode(&reply).unwrap();
    assert!(reply.is_error(), "{reply:?}");
    let mut body = vec![0u8; reply.body_bytes as usize];
    stream.read_exact(&mut body).unwrap();
    tessera_proto::RemoteError::from_body(&body).unwrap()
}

/// Sends, over a raw same-host connection, a `ShareRegion` of `key` declaring `bytes` bytes
/// with `descriptors` attached (one `sendmsg`), and returns the server's answer.
pub fn share_region(
    stream: &mut std::os::unix::net::UnixStream,
    key: u64,
    bytes: u64,
    descriptors: &[std::os::fd::BorrowedFd<'_>],
    request_id: u64,
) -> Result<(), tessera_proto::RemoteError> {
    use std::io::Read;
    use std::os::fd::AsFd;
    use tessera_proto::{Header, Opcode, Wire};
    let body = tessera_proto::ShareRegion { key, bytes }.to_body();
    let mut frame = Header {
        opcode: Opcode::ShareRegion as u8,
        flags: 0,
        request_id,
        body_bytes: u32::try_from(body.len()).unwrap(),
        bulk_bytes: 0,
    }
    .encode()
    .to_vec();
    frame.extend_from_slice(&body);
    let sent = tessera_net::local::scm::send_with_descriptors(stream.as_fd(), &frame, descriptors)
        .unwrap();
    assert_eq!(sent, frame.len());
    let mut reply = [0u8; tessera_proto::limits::HEADER_BYTES];
    stream.read_exact(&mut reply).unwrap();
    let reply = Header::decode(&reply).unwrap();
    assert_eq!(reply.request_id, request_id);
    let mut body = vec![0u8; reply.body_bytes as usize];
    stream.read_exact(&mut body).unwrap();
    if reply.is_error() {
        Err(tessera_proto::RemoteError::from_body(&body).unwrap())
    } else {
        Ok(())
    }
}

/// A process-memory descriptor of `length` bytes at `address` (one segment).
pub fn process_memory(address: u64, length: u64) -> tessera_proto::RemoteMemory {
    tessera_proto::RemoteMemory {
        access: tessera_proto::RemoteAccess::Process,
        endpoint: tessera_proto::RemoteEndpoint::default(),
        segments_per_call: 0,
        segments: vec![tessera_proto::RemoteSegment {
            address,
            length,
            key: 0,
        }],
    }
}

/// Sends one request frame (header, body, bulk) on a raw same-host connection and reads the
/// answer: `Ok(body)` for a reply, `Err(Some(error))` for an error reply, `Err(None)` when the
/// server closed the connection instead.
pub fn exchange(
    stream: &mut std::os::unix::net::UnixStream,
    opcode: tessera_proto::Opcode,
    request_id: u64,
    body: &[u8],
    bulk: &[u8],
) -> Result<Vec<u8>, Option<tessera_proto::RemoteError>> {
    use std::io::Read;
    use tessera_proto::{Header, Wire};
    let header = Header {
        opcode: opcode as u8,
        flags: 0,
        request_id,
        body_bytes: u32::try_from(body.len()).unwrap(),
        bulk_bytes: u32::try_from(bulk.len()).unwrap(),
    };
    let sent = stream
        .write_all(&[header.encode().as_slice(), body, bulk].concat())
        .is_ok();
    let mut reply = [0u8; tessera_proto::limits::HEADER_BYTES];
    if !sent || stream.read_exact(&mut reply).is_err() {
        return Err(None);
    }
    let reply = Header::decode(&reply).unwrap();
    let mut body = vec![0u8; reply.body_bytes as usize];
    stream.read_exact(&mut body).map_err(|_| None)?;
    let mut bulk = vec![0u8; reply.bulk_bytes as usize];
    stream.read_exact(&mut bulk).map_err(|_| None)?;
    if reply.is_error() {
        return Err(Some(tessera_proto::RemoteError::from_body(&body).unwrap()));
    }
    Ok(body)
}

/// Asks the iod to pull 8 bytes at `address` of this process (a `RemoteProbe`): whether the
/// connection may move data one-sidedly.
pub fn probe(
    stream: &mut std::os::unix::net::UnixStream,
    address: u64,
    request_id: u64,
) -> Result<u64, Option<tessera_proto::RemoteError>> {
    use tessera_proto::Wire;
    let body = tessera_proto::RemoteProbe {}.to_body();
    let reply = exchange(
        stream,
        tessera_proto::Opcode::RemoteProbe,
        request_id,
        &body,
        &process_memory(address, 8).to_body(),
    )?;
    Ok(tessera_proto::RemoteProbeReply::from_body(&reply)
        .unwrap()
        .token)
}

/// A one-sided `Write` (the iod pulls `memory`) or `Read` (it pushes into `memory`) of
/// `length` bytes at offset 0 of `handle`, on a raw same-host connection.
pub fn one_sided(
    stream: &mut std::os::unix::net::UnixStream,
    write: bool,
    (handle, capability): (u64, tessera_proto::Capability),
    memory: &tessera_proto::RemoteMemory,
    request_id: u64,
) -> Result<(), Option<tessera_proto::RemoteError>> {
    use tessera_proto::Wire;
    let length = memory.segments.iter().map(|segment| segment.length).sum();
    let pieces = vec![tessera_client::Piece::new(0, length)];
    let (opcode, body) = if write {
        let request = tessera_proto::Write {
            handle,
            capability,
            mode: tessera_proto::TransferMode::Remote,
            storage: tessera_proto::StoragePlan::Auto,
            pieces,
        };
        (tessera_proto::Opcode::Write, request.to_body())
    } else {
        let request = tessera_proto::Read {
            handle,
            capability,
            mode: tessera_proto::TransferMode::Remote,
            storage: tessera_proto::StoragePlan::Auto,
            pieces,
        };
        (tessera_proto::Opcode::Read, request.to_body())
    };
    exchange(stream, opcode, request_id, &body, &memory.to_body()).map(drop)
}

/// Gives up root for `uid` (its own group, no supplementary groups) in this process, and
/// makes the process dumpable again, as a program the user starts is.
pub fn become_user(uid: u32) -> bool {
    // SAFETY: plain system calls on this process's own credentials; results are checked.
    unsafe {
        libc::setgroups(0, std::ptr::null()) == 0
            && libc::setgid(uid) == 0
            && libc::setuid(uid) == 0
            && libc::geteuid() == uid
            && libc::prctl(libc::PR_SET_DUMPABLE, 1) == 0
    }
}

/// In a forked child: gives up root for `uid` ([`become_user`]), connects to the iod's
/// same-host `socket` and authenticates through `agent`, with a 20 s read timeout. On failure,
/// the exit status the child should leave with: 10 (the user), 11 (connect), 12 (handshake).
pub fn connect_as_user(
    uid: u32,
    socket: &Path,
    agent: &tessera_auth::AgentClient,
) -> Result<std::os::unix::net::UnixStream, i32> {
    if !become_user(uid) {
        return Err(10);
    }
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(|_| 11)?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    authenticate(&mut stream, agent).map_err(|_| 12)?;
    Ok(stream)
}

/// Waits (at most 10 s) until process `pid` (`name` in the failure) is gone or a zombie: the
/// kernel closes a dying process's files (its listening sockets) after it drops its memory
/// (when `/proc/PID/cmdline` turns empty) and before it becomes a zombie.
pub fn wait_gone(pid: i32, name: &str) {
    let running = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while running() {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} (pid {pid}) did not exit within 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
