//! The same-host path for an unprivileged program (issue 16): a process that gave up root
//! gets its credential from the agent, reaches the iods over their world-connectable sockets,
//! and still gets the one-sided path (the iods, running as root, can reach its memory); a
//! child it forks writes its own memory, never its parent's; root's private file stays out of
//! its reach. This file holds one test, so no other test thread runs when it forks.

mod common;

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;

use common::Cluster;
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode, OpenMode};

/// The unprivileged user.
const USER: u32 = 2001;
/// Bytes of each write: over the 64 KiB eager buffer, so the iods pull them one-sidedly.
const LENGTH: usize = 256 << 10;

/// Why the child failed, as its exit status.
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
enum Failure {
    SwitchUser = 10,
    Create = 11,
    NotOneSided = 12,
    ReadBack = 13,
    Fork = 14,
    GrandchildWrite = 15,
    ParentMemory = 16,
    RootFileOpened = 17,
    TmpfsRegionAccepted = 18,
}

fn exit(status: i32) -> ! {
    // SAFETY: ends the forked child without running the parent's destructors or harness.
    unsafe { libc::_exit(status) }
}

/// The child's work, as uid `USER`; returns the failure, if any.
fn as_user(config: &ClusterConfig) -> Result<(), Failure> {
    // SAFETY: plain system calls on this process's own credentials; results are checked.
    let switched = unsafe {
        libc::setgroups(0, std::ptr::null()) == 0
            && libc::setgid(USER) == 0
            && libc::setuid(USER) == 0
            && libc::geteuid() == USER
    };
    if !switched {
        return Err(Failure::SwitchUser);
    }
    // A process that gave up root without an exec is not dumpable (the kernel's rule, so that
    // what it held as root does not leak): its own user could not reach its memory, so
    // neither may the iod, which acts with the user's rights. A program the user starts (an
    // exec) is dumpable; this child becomes like one.
    // SAFETY: a plain prctl on this process.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) } != 0 {
        return Err(Failure::SwitchUser);
    }
    let client = Client::new(config, &ClientOptions::default());
    let file = client
        .create("/shared/mine", &CreateOptions::default())
        .map_err(|error| {
            eprintln!("child: create: {error}");
            Failure::Create
        })?;
    let mut buffer = vec![b'U'; LENGTH];
    let report = file.write_at(0, &buffer).map_err(|error| {
        eprintln!("child: write: {error}");
        Failure::Create
    })?;
    if report.one_sided == 0 || report.one_sided != report.requests {
        eprintln!("child: not one-sided: {report:?}");
        return Err(Failure::NotOneSided);
    }
    let mut back = vec![0u8; LENGTH];
    file.read_at(0, &mut back).map_err(|_| Failure::ReadBack)?;
    if back != buffer {
        return Err(Failure::ReadBack);
    }
    // A grandchild writes through the connections it inherited: its own memory must land.
    // SAFETY: the grandchild fills its copy of `buffer`, writes it and leaves with _exit.
    let grandchild = unsafe { libc::fork() };
    if grandchild < 0 {
        return Err(Failure::Fork);
    }
    if grandchild == 0 {
        buffer.fill(b'G');
        exit(i32::from(file.write_at(0, &buffer).is_err()));
    }
    let mut status = 0;
    // SAFETY: waits for the grandchild just forked.
    unsafe { libc::waitpid(grandchild, &raw mut status, 0) };
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(Failure::GrandchildWrite);
    }
    file.read_at(0, &mut back).map_err(|_| Failure::ReadBack)?;
    if back.iter().any(|&byte| byte != b'G') {
        return Err(Failure::ParentMemory);
    }
    // Root's private file: the open is refused by the mds.
    match client.open("/private", OpenMode::ReadOnly) {
        Err(error) if error.code() == Some(ErrorCode::PermissionDenied) => {}
        other => {
            eprintln!("child: opened root's file: {other:?}");
            return Err(Failure::RootFileOpened);
        }
    }
    // A tmpfs file of its own, offered as a shared region, is refused: only a sealed memfd
    // is mapped by the iod.
    let socket = config.iods[0].local.clone().expect("a local socket");
    let mut stream =
        std::os::unix::net::UnixStream::connect(socket).map_err(|_| Failure::Create)?;
    let agent = tessera_auth::AgentClient::new(
        config.auth.agent.clone().expect("an agent"),
        std::time::Duration::from_secs(10),
    );
    common::authenticate(&mut stream, &agent).map_err(|_| Failure::Create)?;
    let shm = tempfile::tempfile_in("/dev/shm").map_err(|_| Failure::Create)?;
    shm.set_len(4096).map_err(|_| Failure::Create)?;
    match common::share_region(&mut stream, 0x77, 4096, &[shm.as_fd()], 2) {
        Err(error) if error.code == ErrorCode::RemoteAccessRefused => Ok(()),
        other => {
            eprintln!("child: a tmpfs region was not refused: {other:?}");
            Err(Failure::TmpfsRegionAccepted)
        }
    }
}

#[test]
fn an_unprivileged_program_moves_its_own_memory_one_sidedly() {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "switching users needs root, and this test runs as uid {euid}"
        ));
        return;
    }
    let cluster = Cluster::start(2);
    std::fs::set_permissions(cluster.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = cluster.client();
    root.mkdir("/shared", 0o1777).unwrap();
    let private = root
        .create(
            "/private",
            &CreateOptions {
                mode: 0o600,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    private.write_at(0, b"root only").unwrap();
    let config = ClusterConfig::load(&cluster.file()).unwrap();

    // SAFETY: the child only runs `as_user` and leaves with _exit; this test binary runs no
    // other test thread.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "{}", std::io::Error::last_os_error());
    if child == 0 {
        exit(match as_user(&config) {
            Ok(()) => 0,
            Err(failure) => failure as i32,
        });
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(child, &raw mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the unprivileged child failed with status {} (see the Failure codes)",
        libc::WEXITSTATUS(status)
    );
    // Root sees the user's file, owned by the user, holding the grandchild's bytes.
    let attr = root.stat("/shared/mine").unwrap();
    assert_eq!((attr.uid, attr.gid), (USER, USER));
    let mine = root.open("/shared/mine", OpenMode::ReadOnly).unwrap();
    let mut back = vec![0u8; LENGTH];
    mine.read_at(0, &mut back).unwrap();
    assert!(back.iter().all(|&byte| byte == b'G'));
    let mut secret = [0u8; 9];
    private.read_at(0, &mut secret).unwrap();
    assert_eq!(&secret, b"root only");
}
