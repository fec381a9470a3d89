//! An iod never waits on itself through the mount (issue 35, hole 5), against a real cluster
//! mounted with `tessera mount`: a user maps its own file through the mount and names pages of
//! that mapping no one has touched in one-sided requests. Each copy faults a page in; the
//! mount asks the same iod for it. Before, that stopped the iod for everyone for minutes (the
//! copy ran on a worker the mount's request needed). Now copies run on the connection's
//! mover, so the mount's request is served at once; where the copy holds the extent the mount
//! needs (a pipelined write of the mapped file into itself), it gives it back at its deadline.
//! All along, another user's reads finish within a second, and the iod and the mount serve on.
//! This file holds one test, so no other test thread runs when it forks.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::mount::Mounted;
use tessera_auth::Rights;
use tessera_client::{ClusterConfig, CreateOptions, OpenMode};
use tessera_proto::limits::REMOTE_COPY_TIMEOUT_MS;

/// The user who maps its file.
const USER: u32 = 2101;
/// Bytes of the mapped file: a pipelined write (more than one 1 MiB unit).
const MAPPED_BYTES: usize = 4 << 20;
/// What another user's read may take meanwhile (it takes ~0.01 s alone).
const CALL_BOUND: Duration = Duration::from_secs(1);

fn exit(status: i32) -> ! {
    // SAFETY: ends the forked child without running the parent's destructors or harness.
    unsafe { libc::_exit(status) }
}

/// A fresh shared mapping of `path` (through the mount), none of its pages touched.
fn map(path: &std::path::Path, length: usize) -> Option<u64> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ok()?;
    // SAFETY: a new shared mapping of a file we opened; only its address is used (by the
    // iod's copies), never a reference into it.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    (address != libc::MAP_FAILED).then_some(address as u64)
}

/// The user's requests; returns how each ended (0: ok, 1: refused, 2: connection closed).
fn as_user(
    mounted: &Mounted,
    config: &ClusterConfig,
    files: &[(u64, tessera_proto::Capability); 2],
) -> Result<[u8; 3], i32> {
    if !common::become_user(USER) {
        return Err(10);
    }
    let socket = config.iods[0].local.clone().expect("a local socket");
    let agent = tessera_auth::AgentClient::new(
        config.auth.agent.clone().expect("an agent"),
        Duration::from_secs(10),
    );
    let connect = || -> Result<std::os::unix::net::UnixStream, i32> {
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).map_err(|_| 11)?;
        stream
            .set_read_timeout(Some(Duration::from_mins(1)))
            .map_err(|_| 11)?;
        common::authenticate(&mut stream, &agent).map_err(|_| 12)?;
        let token = Box::new(0x5e7u64);
        match common::probe(&mut stream, std::ptr::from_ref(&*token) as u64, 2) {
            Ok(0x5e7) => Ok(stream),
            _ => Err(13),
        }
    };
    let ended = |result: Result<(), Option<tessera_proto::RemoteError>>| match result {
        Ok(()) => 0,
        Err(Some(error)) => {
            eprintln!("user: refused: {error:?}");
            1
        }
        Err(None) => 2,
    };
    let mapped = map(&mounted.path("/u/f"), MAPPED_BYTES).ok_or(14)?;
    let [f, g] = files;
    // 1. A small write of g whose data is an untouched page of the mapping of f.
    let one = {
        let mut stream = connect()?;
        let memory = common::process_memory(mapped + (1 << 20), 64 << 10);
        ended(common::one_sided(&mut stream, true, g.clone(), &memory, 3))
    };
    // 2. A read of g pushed into untouched pages of the mapping of f.
    let two = {
        let mut stream = connect()?;
        let memory = common::process_memory(mapped + (2 << 20), 64 << 10);
        ended(common::one_sided(&mut stream, false, g.clone(), &memory, 3))
    };
    // 3. A pipelined write of f whose data is the mapping of f itself: the write holds f's
    // extent while the mount, faulting the pages in, needs to read f.
    let remapped = map(&mounted.path("/u/f"), MAPPED_BYTES).ok_or(14)?;
    let three = {
        let mut stream = connect()?;
        let memory = common::process_memory(remapped, MAPPED_BYTES as u64);
        ended(common::one_sided(&mut stream, true, f.clone(), &memory, 3))
    };
    Ok([one, two, three])
}

#[test]
fn an_iod_never_waits_on_itself_through_the_mount() {
    // The raw requests below go to iod 0 with the file offsets the layouts of /u/f and /u/g
    // have there when handles come one by one, as here (no objects made ahead).
    let Some(mounted) = Mounted::start_with(&["--precreate", "0"]) else {
        return;
    };
    let cluster = &mounted.cluster;
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let root = cluster.client();
    root.mkdir("/u", 0o755).unwrap();
    root.chown("/u", Some(USER), Some(USER)).unwrap();
    let mut files = Vec::new();
    for name in ["/u/f", "/u/g"] {
        let file = root
            .create(
                name,
                &CreateOptions {
                    mode: 0o644,
                    ..CreateOptions::default()
                },
            )
            .unwrap();
        file.write_at(0, &common::bytes(5, MAPPED_BYTES)).unwrap();
        root.chown(name, Some(USER), Some(USER)).unwrap();
        let capability = cluster.capability(
            file.handle(),
            Rights::READ_WRITE,
            USER,
            tessera_auth::now_s() + 3600,
        );
        files.push((file.handle(), capability));
    }
    let files: [(u64, tessera_proto::Capability); 2] = files.try_into().unwrap();
    let other_data = common::bytes(6, 64 << 10);
    let other = root.create("/other", &CreateOptions::default()).unwrap();
    other.write_at(0, &other_data).unwrap();
    std::fs::set_permissions(mounted.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    let (verdict_read, verdict_write) = std::os::unix::net::UnixStream::pair().unwrap();
    // SAFETY: the child runs `as_user` and leaves with _exit; this test binary runs no other
    // test thread.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "{}", std::io::Error::last_os_error());
    if child == 0 {
        drop(verdict_read);
        let verdict = match as_user(&mounted, &config, &files) {
            Ok(ends) => ends.to_vec(),
            Err(status) => exit(status),
        };
        let _ = std::io::Write::write_all(&mut &verdict_write, &verdict);
        exit(0);
    }
    drop(verdict_write);

    // Another user's reads, each on a fresh client, while the user's requests run.
    let started = Instant::now();
    let bound = Duration::from_millis(3 * REMOTE_COPY_TIMEOUT_MS) + Duration::from_secs(20);
    let mut reads = 0;
    verdict_read.set_nonblocking(true).unwrap();
    let mut verdict = Vec::new();
    loop {
        let fresh = cluster.client_with_timeout(Duration::from_secs(30));
        let begin = Instant::now();
        let file = fresh.open("/other", OpenMode::ReadOnly).unwrap();
        let mut back = vec![0u8; other_data.len()];
        file.read_at(0, &mut back).unwrap();
        let took = begin.elapsed();
        assert!(took <= CALL_BOUND, "another user's read took {took:?}");
        assert!(back == other_data);
        reads += 1;
        let mut chunk = [0u8; 3];
        match std::io::Read::read(&mut &verdict_read, &mut chunk) {
            Ok(0) => break,
            Ok(got) => verdict.extend_from_slice(&chunk[..got]),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(err) => panic!("{err}"),
        }
        assert!(
            started.elapsed() < bound,
            "the user's requests did not end within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut status = 0;
    // SAFETY: reaps the child forked above.
    assert_eq!(unsafe { libc::waitpid(child, &raw mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the user's process failed with status {}",
        libc::WEXITSTATUS(status)
    );
    assert!(reads >= 1);
    // The copies into and out of the mapping were served (the mount answered the iod at
    // once); the pipelined write into f itself ended, one way or the other, by its deadline.
    assert_eq!(verdict.len(), 3, "{verdict:?}");
    assert_eq!(
        verdict[0], 0,
        "the small write from the mapping was not served"
    );
    assert_eq!(verdict[1], 0, "the read into the mapping was not served");
    // g holds f's bytes (what the mapping showed), f is whole.
    assert!(
        mounted.direct("/u/g")[..64 << 10]
            == common::bytes(5, MAPPED_BYTES)[1 << 20..(1 << 20) + (64 << 10)]
    );
    assert_eq!(mounted.direct("/u/f").len(), MAPPED_BYTES);
    // The iod and the mount serve on.
    assert_eq!(
        std::fs::read(mounted.path("/other")).unwrap(),
        other_data,
        "the mount no longer serves"
    );
}
