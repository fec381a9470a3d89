//! A connection never reaches a program its process executed (issue 35, hole 1b), against a
//! real iod run as root: an unprivileged process authenticates and passes the iod's one-sided
//! probe, forks, and executes a setuid-root program; its child, speaking on the inherited
//! connection, names the setuid program's stack. Before, the iod pushed a file into that
//! stack and pulled it out into a file (with root's ptrace rights, for the connection's whole
//! life). Now the iod copies with the client's own credentials and pins the address space the
//! client had when it connected: both requests are refused, the connection is closed, and
//! neither the program nor the file changes. This file holds one test, so no other test thread
//! runs when it forks.

mod common;

use std::io::{Read as _, Write as _};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::Cluster;
use tessera_auth::Rights;
use tessera_client::{ClusterConfig, CreateOptions};
use tessera_proto::ErrorCode;

/// The unprivileged user.
const USER: u32 = 2001;
/// Bytes named in the setuid program's stack.
const LENGTH: usize = 64;

/// The child's verdict, written to the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Verdict {
    Refused = 0,
    PushedIntoSetuid = 1,
    PulledFromSetuid = 2,
    NoAddress = 3,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array we own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the descriptors were just made for us and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn exit(status: i32) -> ! {
    // SAFETY: ends a forked process without running the parent's destructors or harness.
    unsafe { libc::_exit(status) }
}

/// The forked attacker's child: waits for its parent's exec, then names the setuid
/// program's stack on the inherited connection.
fn child(
    mut stream: std::os::unix::net::UnixStream,
    exec_read: OwnedFd,
    address_read: OwnedFd,
    verdict_write: OwnedFd,
    file: (u64, tessera_proto::Capability),
) -> ! {
    // End of file: the parent's copy of the write end closed at its exec.
    let mut exec = std::fs::File::from(exec_read);
    let _ = exec.read_to_end(&mut Vec::new());
    let mut address = [0u8; 8];
    let verdict = if std::fs::File::from(address_read)
        .read_exact(&mut address)
        .is_err()
    {
        Verdict::NoAddress
    } else {
        let memory = common::process_memory(u64::from_le_bytes(address), LENGTH as u64);
        let pushed = common::one_sided(&mut stream, false, file.clone(), &memory, 3);
        let pulled = common::one_sided(&mut stream, true, file, &memory, 4);
        eprintln!("child: push {pushed:?}, pull {pulled:?}");
        match (pushed, pulled) {
            (Ok(()), _) => Verdict::PushedIntoSetuid,
            (_, Ok(())) => Verdict::PulledFromSetuid,
            (Err(Some(error)), Err(_)) if error.code == ErrorCode::RemoteAccessRefused => {
                Verdict::Refused
            }
            (Err(None), Err(None)) => Verdict::Refused,
            other => panic!("unexpected answers {other:?}"),
        }
    };
    let _ = std::fs::File::from(verdict_write).write_all(&[verdict as u8]);
    exit(0);
}

#[test]
fn a_connection_never_reaches_a_setuid_program_its_process_executed() {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "a setuid-root program and switching users need root; this test runs as uid {euid}"
        ));
        return;
    }
    let cluster = Cluster::start(1);
    std::fs::set_permissions(cluster.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = cluster.client();
    let untouched = vec![b'u'; LENGTH];
    let loot = root.create("/loot", &CreateOptions::default()).unwrap();
    loot.write_at(0, &untouched).unwrap();
    let capability = cluster.capability(
        loot.handle(),
        Rights::READ_WRITE,
        USER,
        tessera_auth::now_s() + 3600,
    );
    let file = (loot.handle(), capability);
    // A setuid-root program that stays alive: a copy of sleep.
    let setuid = cluster.path().join("setuid-sleep");
    std::fs::copy("/bin/sleep", &setuid).unwrap();
    std::fs::set_permissions(&setuid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let program = std::ffi::CString::new(setuid.to_str().unwrap()).unwrap();
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let socket = config.iods[0].local.clone().expect("a local socket");
    let agent = tessera_auth::AgentClient::new(
        config.auth.agent.clone().expect("an agent"),
        Duration::from_secs(10),
    );
    let (exec_read, exec_write) = pipe();
    let (address_read, address_write) = pipe();
    let (verdict_read, verdict_write) = pipe();
    let token = Box::new(0x5e7u64);

    // SAFETY: the attacker runs the code below and leaves with exec or _exit; this test
    // binary runs no other test thread.
    let attacker = unsafe { libc::fork() };
    assert!(attacker >= 0, "{}", std::io::Error::last_os_error());
    if attacker == 0 {
        let mut stream = match common::connect_as_user(USER, &socket, &agent) {
            Ok(stream) => stream,
            Err(status) => exit(status),
        };
        // The one-sided path is open to its own memory.
        match common::probe(&mut stream, std::ptr::from_ref(&*token) as u64, 2) {
            Ok(0x5e7) => {}
            other => {
                eprintln!("attacker: probe {other:?}");
                exit(13);
            }
        }
        // SAFETY: the child runs `child` and leaves with _exit.
        let forked = unsafe { libc::fork() };
        if forked == 0 {
            drop(exec_write);
            child(stream, exec_read, address_read, verdict_write, file);
        }
        let arguments = [program.as_ptr(), c"30".as_ptr(), std::ptr::null()];
        // SAFETY: a NUL-terminated argument list of C strings that outlive the call.
        unsafe { libc::execv(program.as_ptr(), arguments.as_ptr()) };
        exit(14);
    }
    drop((exec_read, exec_write, address_read, verdict_write));

    // Root finds the setuid program's stack once the attacker has become it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let stack = loop {
        if std::fs::read_link(format!("/proc/{attacker}/exe")).is_ok_and(|exe| exe == setuid) {
            let maps = std::fs::read_to_string(format!("/proc/{attacker}/maps")).unwrap();
            let line = maps
                .lines()
                .find(|line| line.ends_with("[stack]"))
                .expect("a stack");
            let end = line.split(['-', ' ']).nth(1).unwrap();
            break u64::from_str_radix(end, 16).unwrap() - 4096;
        }
        let mut status = 0;
        // SAFETY: polls the attacker forked above.
        let waited = unsafe { libc::waitpid(attacker, &raw mut status, libc::WNOHANG) };
        assert_eq!(
            waited,
            0,
            "the attacker ended before its exec with status {}",
            libc::WEXITSTATUS(status)
        );
        assert!(
            Instant::now() < deadline,
            "the attacker never executed the setuid program"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    std::fs::File::from(address_write)
        .write_all(&stack.to_le_bytes())
        .unwrap();
    let mut verdict = [0xFFu8];
    std::fs::File::from(verdict_read)
        .read_exact(&mut verdict)
        .unwrap();
    // SAFETY: ends the setuid program this test started (root may signal it).
    unsafe { libc::kill(attacker, libc::SIGKILL) };
    // SAFETY: reaps it.
    unsafe { libc::waitpid(attacker, std::ptr::null_mut(), 0) };

    assert_eq!(
        verdict[0],
        Verdict::Refused as u8,
        "the setuid program's memory was reached (verdict {}: 1 pushed into it, 2 pulled from it)",
        verdict[0]
    );
    let mut back = vec![0u8; LENGTH];
    loot.read_at(0, &mut back).unwrap();
    assert_eq!(
        back, untouched,
        "the file holds bytes of the setuid program"
    );
    // The iod logs why it closed the connection.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.log("iod-0").contains("executed another program") {
        assert!(
            Instant::now() < deadline,
            "the iod did not log the refusal: {}",
            cluster.log("iod-0")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
