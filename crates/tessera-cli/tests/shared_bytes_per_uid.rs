//! Shared regions are charged to the client, per uid (issue 35, hole 6), against a real iod
//! run as root and two real users. Uid 2001 offers the iod the sparse 64 MiB memfds of the
//! report: they are refused for their holes and the iod's shared memory does not grow (it
//! grew by 512 MiB before, its `MAP_POPULATE` allocating every page). It then shares one
//! memfd it allocated itself, over several connections, until `SHARED_BYTES_PER_UID_MAX` is
//! mapped: the next share is refused naming the uid, the bytes and the limit, while the iod's
//! shared memory still does not grow (a mapping is never touched until data moves);
//! eviction and replacement make room at once, a closed connection gives its bytes back, and
//! uid 2001's own client falls back to moving data without its eager buffer. Meanwhile uid
//! 2002 shares its eager buffer and moves data one-sidedly. This file holds one test, so no
//! other test thread runs when it forks.

#![allow(
    clippy::too_many_lines,
    reason = "tests have no length budget (make tidy counts production code only)"
)]
#![allow(clippy::cast_possible_truncation)] // small counts and sizes

mod common;

use std::ffi::CString;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::Cluster;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode, Mechanism, Piece,
    TransferPolicy,
};
use tessera_proto::limits::{SHARED_BYTES_PER_UID_MAX, SHARED_REGIONS_PER_CONNECTION_MAX};
use tessera_proto::SHARED_KEY_ARENA;

/// The user who shares as much as it may.
const SHARER: u32 = 2001;
/// The user who shares its eager buffer meanwhile.
const NEIGHBOUR: u32 = 2002;
/// Bytes of each sparse memfd of the report (8 of them: 512 MiB offered).
const SPARSE_BYTES: u64 = 64 << 20;
/// Bytes of the memfd the sharer allocates itself and shares under many keys.
const REGION_BYTES: u64 = 256 << 20;
/// The most the iod's resident shared memory may grow while all that is offered.
const SHMEM_GROWTH_MAX: u64 = 8 << 20;
/// Bytes of an eager write (within the 64 KiB buffer) and of a larger one-sided write.
const EAGER_LENGTH: usize = 48 << 10;
const PULLED_LENGTH: usize = 256 << 10;

/// Why a child failed, as its exit status.
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
enum Failure {
    SwitchUser = 10,
    Connect = 11,
    ShmemGrew = 12,
    SparseAllocated = 13,
    SparseAccepted = 14,
    UnderCapRefused = 15,
    OverCapAccepted = 16,
    EvictionRefused = 17,
    FallbackFailed = 18,
    Parent = 19,
    CloseNotReleased = 20,
    NeighbourOneSided = 21,
    NeighbourData = 22,
}

fn exit(status: i32) -> ! {
    // SAFETY: ends the forked child without running the parent's destructors or harness.
    unsafe { libc::_exit(status) }
}

/// Resident shared memory of process `pid` (`RssShmem` in `/proc/PID/status`): the shmem
/// pages its page tables map.
fn shmem_bytes(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("RssShmem:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .expect("RssShmem in /proc/PID/status");
    kib << 10
}

/// A sealed memfd of `bytes` bytes, its pages allocated by this process (`fallocate`) when
/// `allocate`, else left sparse.
fn memfd(bytes: u64, allocate: bool) -> OwnedFd {
    let name = CString::new("region").unwrap();
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(raw >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a descriptor just made and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    std::fs::File::from(fd.try_clone().unwrap())
        .set_len(bytes)
        .unwrap();
    if allocate {
        let length = libc::off_t::try_from(bytes).unwrap();
        // SAFETY: fallocate on a descriptor owned here, inside its size.
        let allocated = unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, length) };
        assert_eq!(allocated, 0, "{}", std::io::Error::last_os_error());
    }
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor owned here.
    let sealed = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    assert_eq!(sealed, 0);
    fd
}

/// Bytes of `fd`'s file that are allocated.
fn allocated(fd: &OwnedFd) -> u64 {
    let metadata = std::fs::File::from(fd.try_clone().unwrap())
        .metadata()
        .unwrap();
    std::os::unix::fs::MetadataExt::blocks(&metadata) * 512
}

/// A raw connection to the iod's socket that passed the handshake with the agent's
/// credential for this process's user.
fn connect(config: &ClusterConfig) -> Result<UnixStream, Failure> {
    let socket = config.iods[0].local.clone().expect("a local socket");
    let mut stream = UnixStream::connect(socket).map_err(|_| Failure::Connect)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|_| Failure::Connect)?;
    let agent = tessera_auth::AgentClient::new(
        config.auth.agent.clone().expect("an agent"),
        Duration::from_secs(10),
    );
    common::authenticate(&mut stream, &agent).map_err(|error| {
        eprintln!("handshake refused: {error:?}");
        Failure::Connect
    })?;
    Ok(stream)
}

/// Keys of arenas the sharer names (any it likes: keys are per connection on the iod).
fn arena_key(serial: u64) -> u64 {
    SHARED_KEY_ARENA | serial
}

/// The sharer's work as uid 2001: offers sparse memfds, then fills its share, and holds it
/// until the parent (after the neighbour's turn) writes a byte to `resume`.
fn sharer(
    config: &ClusterConfig,
    iod: i32,
    ready: &mut std::fs::File,
    resume: &mut std::fs::File,
) -> Result<(), Failure> {
    if !common::become_user(SHARER) {
        return Err(Failure::SwitchUser);
    }
    let before = shmem_bytes(iod);
    // The report: 8 sparse 64 MiB memfds on one connection.
    let mut first = connect(config)?;
    let sparse: Vec<OwnedFd> = (0..SHARED_REGIONS_PER_CONNECTION_MAX)
        .map(|_| memfd(SPARSE_BYTES, false))
        .collect();
    let mut request_id = 10;
    let answers: Vec<_> = sparse
        .iter()
        .enumerate()
        .map(|(index, fd)| {
            request_id += 1;
            let key = arena_key(index as u64 + 1);
            common::share_region(&mut first, key, SPARSE_BYTES, &[fd.as_fd()], request_id)
        })
        .collect();
    let grown = shmem_bytes(iod).saturating_sub(before);
    eprintln!(
        "sharer: the iod's shared memory grew by {grown} bytes for {} sparse bytes offered",
        SPARSE_BYTES * sparse.len() as u64
    );
    if grown >= SHMEM_GROWTH_MAX {
        return Err(Failure::ShmemGrew);
    }
    if let Some(fd) = sparse.iter().find(|fd| allocated(fd) != 0) {
        eprintln!(
            "sharer: {} bytes of a sparse memfd were allocated",
            allocated(fd)
        );
        return Err(Failure::SparseAllocated);
    }
    for answer in &answers {
        match answer {
            Err(error)
                if error.code == ErrorCode::RemoteAccessRefused
                    && error.message.contains("holes") => {}
            other => {
                eprintln!("sharer: a sparse memfd was not refused for its holes: {other:?}");
                return Err(Failure::SparseAccepted);
            }
        }
    }

    // One memfd the sharer allocated itself (charged to it), shared under as many keys as
    // the per-uid limit allows, 8 a connection.
    let region = memfd(REGION_BYTES, true);
    let fits = (SHARED_BYTES_PER_UID_MAX / REGION_BYTES) as usize;
    let mut connections = vec![first];
    let mut serial = 100;
    for shared in 0..fits {
        if shared % SHARED_REGIONS_PER_CONNECTION_MAX == 0 && shared > 0 {
            connections.push(connect(config)?);
        }
        serial += 1;
        let stream = connections.last_mut().expect("a connection");
        if let Err(error) = common::share_region(
            stream,
            arena_key(serial),
            REGION_BYTES,
            &[region.as_fd()],
            serial,
        ) {
            eprintln!("sharer: share {shared} of {fits} refused: {error:?}");
            return Err(Failure::UnderCapRefused);
        }
    }
    // One more, on a connection of its own, passes the limit.
    let mut extra = connect(config)?;
    serial += 1;
    match common::share_region(
        &mut extra,
        arena_key(serial),
        REGION_BYTES,
        &[region.as_fd()],
        serial,
    ) {
        Err(error)
            if error.code == ErrorCode::RemoteAccessRefused
                && [
                    format!("uid {SHARER}"),
                    format!("has {SHARED_BYTES_PER_UID_MAX} bytes"),
                    format!("{REGION_BYTES} more"),
                    format!("shared_bytes_per_uid_max ({SHARED_BYTES_PER_UID_MAX} bytes)"),
                ]
                .iter()
                .all(|part| error.message.contains(part.as_str())) => {}
        other => {
            eprintln!("sharer: a share past the limit was not refused by name: {other:?}");
            return Err(Failure::OverCapAccepted);
        }
    }
    let grown = shmem_bytes(iod).saturating_sub(before);
    eprintln!(
        "sharer: the iod's shared memory grew by {grown} bytes with {SHARED_BYTES_PER_UID_MAX} \
         bytes mapped and none moved"
    );
    if grown >= SHMEM_GROWTH_MAX {
        return Err(Failure::ShmemGrew);
    }
    // At the limit, a full connection's new region evicts its least recently used, and a
    // region shared again replaces itself: both make their own room.
    serial += 1;
    let evicting = common::share_region(
        &mut connections[0],
        arena_key(serial),
        REGION_BYTES,
        &[region.as_fd()],
        serial,
    );
    serial += 1;
    let replacing = common::share_region(
        &mut connections[1],
        arena_key(101 + SHARED_REGIONS_PER_CONNECTION_MAX as u64),
        REGION_BYTES,
        &[region.as_fd()],
        serial,
    );
    if evicting.is_err() || replacing.is_err() {
        eprintln!("sharer: at the limit, eviction {evicting:?}, replacement {replacing:?}");
        return Err(Failure::EvictionRefused);
    }
    // The sharer's own client, at its limit: its eager buffer is refused, and it moves its
    // data another way.
    let client = Client::new(config, &ClientOptions::default());
    let data = common::bytes(7, EAGER_LENGTH);
    let moved = (|| {
        let mut file = client.create("/shared/sharer", &CreateOptions::default())?;
        file.set_transfer_policy(TransferPolicy::Force(Mechanism::Eager));
        file.write_list(
            &[IoSlice::new(&data)],
            &[Piece::new(0, EAGER_LENGTH as u64)],
        )?;
        let mut back = vec![0u8; EAGER_LENGTH];
        file.read_list(
            &mut [IoSliceMut::new(&mut back)],
            &[Piece::new(0, EAGER_LENGTH as u64)],
        )?;
        Ok::<_, tessera_client::ClientError>(back)
    })();
    match moved {
        Ok(back) if back == data => {}
        other => {
            eprintln!(
                "sharer: its own client failed at the limit: {:?}",
                other.err()
            );
            return Err(Failure::FallbackFailed);
        }
    }
    drop(client);

    // Hold the share while the neighbour works.
    ready.write_all(b"F").map_err(|_| Failure::Parent)?;
    let mut byte = [0u8; 1];
    resume.read_exact(&mut byte).map_err(|_| Failure::Parent)?;

    // A closed connection gives its bytes back (once the iod has seen it close).
    drop(connections.remove(0));
    let mut released = false;
    for _ in 0..400 {
        serial += 1;
        if common::share_region(
            &mut extra,
            arena_key(serial),
            REGION_BYTES,
            &[region.as_fd()],
            serial,
        )
        .is_ok()
        {
            released = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    if !released {
        eprintln!("sharer: a closed connection's regions stayed on its account");
        return Err(Failure::CloseNotReleased);
    }
    Ok(())
}

/// The neighbour's work as uid 2002, while the sharer holds its whole share: an eager write
/// and read through its own shared buffer, and a larger one-sided write and read.
fn neighbour(config: &ClusterConfig) -> Result<(), Failure> {
    if !common::become_user(NEIGHBOUR) {
        return Err(Failure::SwitchUser);
    }
    let client = Client::new(config, &ClientOptions::default());
    let small = common::bytes(1, EAGER_LENGTH);
    let large = common::bytes(2, PULLED_LENGTH);
    let moved = (|| {
        let mut file = client.create("/shared/neighbour", &CreateOptions::default())?;
        file.set_transfer_policy(TransferPolicy::Force(Mechanism::Eager));
        let target = [Piece::new(0, EAGER_LENGTH as u64)];
        let written = file.write_list(&[IoSlice::new(&small)], &target)?;
        let mut back = vec![0u8; EAGER_LENGTH];
        let read = file.read_list(&mut [IoSliceMut::new(&mut back)], &target)?;
        file.set_transfer_policy(TransferPolicy::Auto);
        let pulled = file.write_at(0, &large)?;
        let mut large_back = vec![0u8; PULLED_LENGTH];
        let pushed = file.read_at(0, &mut large_back)?;
        Ok::<_, tessera_client::ClientError>(([written, read, pulled, pushed], back, large_back))
    })();
    let (reports, back, large_back) = moved.map_err(|error| {
        eprintln!("neighbour: {error}");
        Failure::NeighbourData
    })?;
    if let Some(report) = reports
        .iter()
        .find(|report| report.one_sided == 0 || report.one_sided != report.requests)
    {
        eprintln!("neighbour: not one-sided: {report:?}");
        return Err(Failure::NeighbourOneSided);
    }
    if back != small || large_back != large {
        return Err(Failure::NeighbourData);
    }
    Ok(())
}

/// Forks a child that runs `work` and leaves with its result as exit status.
fn fork(work: impl FnOnce() -> Result<(), Failure>) -> libc::pid_t {
    // SAFETY: the child only runs `work` and leaves with _exit; this test binary runs no
    // other test thread.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "{}", std::io::Error::last_os_error());
    if child == 0 {
        exit(match work() {
            Ok(()) => 0,
            Err(failure) => failure as i32,
        });
    }
    child
}

/// Waits for `child` and checks it succeeded.
fn wait(child: libc::pid_t, who: &str) {
    let mut status = 0;
    // SAFETY: waits for a child this test forked.
    let waited = unsafe { libc::waitpid(child, &raw mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the {who} failed with status {} (see the Failure codes)",
        libc::WEXITSTATUS(status)
    );
}

/// A pipe: its read end and write end.
fn pipe() -> (std::fs::File, std::fs::File) {
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`; the result is checked.
    let made = unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(made, 0);
    // SAFETY: two descriptors just made and owned by nothing else.
    unsafe {
        (
            std::fs::File::from_raw_fd(ends[0]),
            std::fs::File::from_raw_fd(ends[1]),
        )
    }
}

#[test]
fn a_users_shared_regions_are_its_own_memory_and_capped_per_uid() {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "switching users needs root, and this test runs as uid {euid}"
        ));
        return;
    }
    let cluster = Cluster::start(1);
    cluster.restart_iod_with(0, &["--metrics", "127.0.0.1:0"]);
    std::fs::set_permissions(cluster.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    cluster.client().mkdir("/shared", 0o1777).unwrap();
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let iod = cluster.pid("iod-0");
    let metrics = common::metrics_address(&cluster, "iod-0");

    let (mut ready_read, mut ready_write) = pipe();
    let (mut resume_read, mut resume_write) = pipe();
    let parent_ends = [ready_read.as_raw_fd(), resume_write.as_raw_fd()];
    let sharer_pid = fork(|| {
        for fd in parent_ends {
            // SAFETY: the child's copies of the parent's ends, which it never uses: closed
            // so that each pipe ends when the process that writes it does.
            unsafe { libc::close(fd) };
        }
        sharer(&config, iod, &mut ready_write, &mut resume_read)
    });
    drop(ready_write);
    drop(resume_read);
    let mut byte = [0u8; 1];
    if ready_read.read_exact(&mut byte).is_err() {
        // The sharer failed before its share was full: its status says why.
        wait(sharer_pid, "sharer (uid 2001)");
        panic!("the sharer closed its pipe and succeeded");
    }

    // The sharer holds its whole share: the neighbour shares its eager buffer and moves
    // data one-sidedly all the same.
    let before = common::scrape(&metrics);
    let neighbour_pid = fork(|| neighbour(&config));
    wait(neighbour_pid, "neighbour (uid 2002)");
    let after = common::scrape(&metrics);
    let delta = |name: &str, labels: &[&str]| {
        common::sample(&after, name, labels) - common::sample(&before, name, labels)
    };
    assert!(
        delta("tessera_regions_shared_total", &[]) >= 1.0,
        "the neighbour's eager buffer was not shared"
    );
    assert!(
        delta("tessera_region_lookups_total", &["result=\"hit\""]) >= 2.0,
        "the neighbour's eager write and read did not go through its shared buffer"
    );

    resume_write.write_all(b"D").unwrap();
    wait(sharer_pid, "sharer (uid 2001)");
    let root = cluster.client();
    let mut back = vec![0u8; PULLED_LENGTH];
    root.open("/shared/neighbour", tessera_client::OpenMode::ReadOnly)
        .unwrap()
        .read_at(0, &mut back)
        .unwrap();
    assert!(back == common::bytes(2, PULLED_LENGTH));
}
