//! A connection never reaches the process that took its client's pid (issue 35, hole 1a),
//! against a real iod run as root: an unprivileged process authenticates, passes the iod's
//! one-sided probe, hands its socket to another process and exits; then a root process holding
//! a secret is started with the old pid (`/proc/sys/kernel/ns_last_pid`, so the recycling is
//! certain and quick). Speaking on the handed-over connection, the holder asks the iod to pull
//! the secret into a file. Before, the iod did (it copied from whatever process had that pid,
//! with root's rights). Now the request is refused (the connection's pidfd says its process
//! exited, and its copies run with the client's uid, which cannot reach a root process), the
//! connection is closed and the file is unchanged. This file holds one test, so no other test
//! thread runs when it forks.

mod common;

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::Cluster;
use tessera_auth::Rights;
use tessera_client::{ClusterConfig, CreateOptions};
use tessera_proto::ErrorCode;

/// The unprivileged user.
const USER: u32 = 2001;

/// Tries to start a root process with pid `wanted` before other processes of the host take
/// it; gives up after this many tries.
const RECYCLE_TRIES: usize = 200;

fn exit(status: i32) -> ! {
    // SAFETY: ends a forked process without running the parent's destructors or harness.
    unsafe { libc::_exit(status) }
}

/// A root process with pid `wanted` that waits until it is killed, or `None` if the host
/// took that pid first every time.
fn root_process_with_pid(wanted: libc::pid_t) -> Option<libc::pid_t> {
    for _ in 0..RECYCLE_TRIES {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (wanted - 1).to_string()).ok()?;
        // SAFETY: the child only blocks in read and leaves with _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "{}", std::io::Error::last_os_error());
        if child == 0 {
            loop {
                // SAFETY: waits for a signal; the test kills this process.
                unsafe { libc::pause() };
            }
        }
        if child == wanted {
            return Some(child);
        }
        // SAFETY: ends and reaps the child that got another pid.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
    }
    None
}

#[test]
fn a_connection_never_reaches_the_process_that_took_its_clients_pid() {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "recycling a pid (ns_last_pid) and switching users need root; this test runs as \
             uid {euid}"
        ));
        return;
    }
    let cluster = Cluster::start(1);
    std::fs::set_permissions(cluster.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = cluster.client();
    let untouched = vec![b'u'; 64];
    let loot = root.create("/loot", &CreateOptions::default()).unwrap();
    loot.write_at(0, &untouched).unwrap();
    let capability = cluster.capability(
        loot.handle(),
        Rights::READ_WRITE,
        USER,
        tessera_auth::now_s() + 3600,
    );
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let socket = config.iods[0].local.clone().expect("a local socket");
    let agent = tessera_auth::AgentClient::new(
        config.auth.agent.clone().expect("an agent"),
        Duration::from_secs(10),
    );
    // What the root process will hold, at the same address in every process forked from
    // this one.
    let secret: Vec<u8> =
        b"root's secret, which no user may read through the iod ........".to_vec();
    let token = Box::new(0x5e7u64);
    let (handover, handed) = UnixStream::pair().unwrap();

    // SAFETY: the client runs the code below and leaves with _exit; this test binary runs
    // no other test thread.
    let client = unsafe { libc::fork() };
    assert!(client >= 0, "{}", std::io::Error::last_os_error());
    if client == 0 {
        let mut stream = match common::connect_as_user(USER, &socket, &agent) {
            Ok(stream) => stream,
            Err(status) => exit(status),
        };
        if common::probe(&mut stream, std::ptr::from_ref(&*token) as u64, 2) != Ok(0x5e7) {
            exit(13);
        }
        let sent = tessera_net::local::scm::send_with_descriptors(
            handover.as_fd(),
            b"s",
            &[stream.as_fd()],
        );
        exit(if sent.is_ok_and(|sent| sent == 1) {
            0
        } else {
            14
        });
    }
    drop(handover);
    let mut status = 0;
    // SAFETY: reaps the client: its pid is free from here on.
    assert_eq!(unsafe { libc::waitpid(client, &raw mut status, 0) }, client);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the client failed with status {}",
        libc::WEXITSTATUS(status)
    );
    // The socket came before the client exited (the call does not wait).
    let mut received = tessera_net::local::scm::Received::default();
    let mut byte = [0u8; 1];
    let got = tessera_net::local::scm::recv_with_descriptors(
        handed.as_raw_fd(),
        &mut byte,
        &mut received,
    );
    assert_eq!(got.unwrap(), 1);
    let mut stream = UnixStream::from(received.descriptors.pop().expect("the client's socket"));
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();

    let Some(holder) = root_process_with_pid(client) else {
        common::not_run::ignored_at_run_time(&format!(
            "the host took pid {client} before this test could, {RECYCLE_TRIES} times"
        ));
        return;
    };
    let memory = common::process_memory(secret.as_ptr() as u64, secret.len() as u64);
    let pulled = common::one_sided(&mut stream, true, (loot.handle(), capability), &memory, 3);
    // SAFETY: ends and reaps the root process.
    unsafe {
        libc::kill(holder, libc::SIGKILL);
        libc::waitpid(holder, std::ptr::null_mut(), 0);
    }

    match pulled {
        Err(Some(error)) => {
            assert_eq!(error.code, ErrorCode::RemoteAccessRefused, "{error:?}");
            assert!(error.message.contains("exited"), "{error:?}");
        }
        Err(None) => {}
        Ok(()) => panic!(
            "the iod pulled pid {client}'s memory for a connection of a process that had exited"
        ),
    }
    // The connection is closed: nothing more is served on it.
    assert_eq!(
        common::probe(&mut stream, std::ptr::from_ref(&*token) as u64, 4),
        Err(None)
    );
    let mut back = vec![0u8; 64];
    loot.read_at(0, &mut back).unwrap();
    assert_eq!(back, untouched, "the file holds the root process's secret");
}
