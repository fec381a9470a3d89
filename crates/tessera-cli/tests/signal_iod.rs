//! A user cannot signal the iod that copies its memory: the iod's one-sided copies for an
//! unprivileged client run in a task of their own with the client's ids, never on a thread
//! of the iod that has taken them (the kernel lets a user signal any task whose real uid is
//! its own, and a `SIGKILL` to one thread ends the whole process). An unprivileged process
//! makes one-sided writes and reads through a real iod run as root and, after each, sends
//! `SIGKILL` to every thread of the iod. Before, the iod's copying threads kept the client's
//! real uid and the first sweep killed the iod; now every signal is refused, the iod serves
//! on and the data is the client's. The iod's copying task for that user, a process of the
//! user's that shares the iod's memory, is not the user's to read. This file holds one test, so no other test thread runs
//! when it forks.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::Cluster;
use tessera_auth::Rights;
use tessera_client::{ClusterConfig, CreateOptions};

/// The unprivileged user.
const USER: u32 = 2001;

/// One-sided requests the user makes, each followed by a sweep of signals.
const ROUNDS: u64 = 20;

fn exit(status: i32) -> ! {
    // SAFETY: ends a forked process without running the parent's destructors or harness.
    unsafe { libc::_exit(status) }
}

/// Sends `SIGKILL` to every thread of process `pid`; the number the kernel let through.
fn kill_every_thread(pid: i32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    let mut delivered = 0;
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|tid| tid.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: a signal to a thread of the iod; the kernel decides whether it may be sent.
        if unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGKILL) } == 0 {
            delivered += 1;
        }
    }
    delivered
}

/// An address that is mapped in every process forked from this one (the iod's memory is
/// another program's, but the kernel refuses before it looks at any address).
fn tasks_probe() -> u8 {
    0
}

/// The processes of `uid` whose parent is `parent`: the iod's copying tasks for that user.
fn copying_tasks(parent: i32, uid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent = parent.to_string();
    let uid = uid.to_string();
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(str::to_owned)
            };
            field("PPid:").as_deref() == Some(parent.as_str())
                && field("Uid:").as_deref() == Some(uid.as_str())
        })
        .collect()
}

#[test]
fn a_user_cannot_signal_the_iod_that_copies_its_memory() {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "an iod run as root and a client of another user need root; this test runs as \
             uid {euid}"
        ));
        return;
    }
    let cluster = Cluster::start(1);
    std::fs::set_permissions(cluster.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = cluster.client();
    let file = root.create("/users", &CreateOptions::default()).unwrap();
    let capability = cluster.capability(
        file.handle(),
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
    let iod = cluster.pid("iod-0");

    // SAFETY: the client runs the code below and leaves with _exit; this test binary runs
    // no other test thread.
    let client = unsafe { libc::fork() };
    assert!(client >= 0, "{}", std::io::Error::last_os_error());
    if client == 0 {
        let mut stream = match common::connect_as_user(USER, &socket, &agent) {
            Ok(stream) => stream,
            Err(status) => exit(status),
        };
        let mut delivered = 0;
        for round in 0..ROUNDS {
            let mut data = [b'a' + (round % 26) as u8; 4096];
            let memory = common::process_memory(data.as_mut_ptr() as u64, data.len() as u64);
            let write = round % 2 == 0;
            if common::one_sided(
                &mut stream,
                write,
                (file.handle(), capability.clone()),
                &memory,
                round,
            )
            .is_err()
            {
                // The iod is gone (or refused): the parent finds out which.
                exit(20);
            }
            delivered += kill_every_thread(iod);
        }
        // The copying task is this user's process, and shares the iod's memory: it must
        // still not be this user's to read (the iod is not dumpable). With the default
        // `fs.suid_dumpable` (0) the kernel's reset at the task's change of ids already does
        // it; with 1 only the task's own `PR_SET_DUMPABLE` does (checked by hand: without it,
        // this user opened the task's `/proc/PID/mem`).
        let tasks = copying_tasks(iod, USER);
        if tasks.is_empty() {
            exit(22);
        }
        for task in tasks {
            if std::fs::File::open(format!("/proc/{task}/mem")).is_ok() {
                exit(23);
            }
            let mut byte = [0u8; 1];
            let local = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            // Any address of the iod's: the stack of this process's own copy is as good.
            let remote = libc::iovec {
                iov_base: std::ptr::from_ref(&tasks_probe()).cast_mut().cast(),
                iov_len: 1,
            };
            // SAFETY: reads at most one byte into `byte`, if the kernel allows it at all.
            if unsafe { libc::process_vm_readv(task, &raw const local, 1, &raw const remote, 1, 0) }
                >= 0
            {
                exit(24);
            }
        }
        exit(if delivered == 0 { 0 } else { 21 });
    }
    let mut status = 0;
    // SAFETY: reaps the client.
    assert_eq!(unsafe { libc::waitpid(client, &raw mut status, 0) }, client);
    let alive = std::fs::read_to_string(format!("/proc/{iod}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    });
    assert!(alive, "user {USER} killed the iod (pid {iod})");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the client failed with status {} (10-12: setup; 20: a request failed; 21: a signal \
         reached a thread of the iod; 22: no copying task; 23, 24: the user read the copying \
         task's memory, the iod's)",
        libc::WEXITSTATUS(status)
    );
    // The iod serves on, and holds the last write of the user (rounds alternate write, read).
    let last_write = (ROUNDS - 2) % 26;
    let mut back = vec![0u8; 4096];
    file.read_at(0, &mut back).unwrap();
    assert_eq!(back, vec![b'a' + last_write as u8; 4096]);
}
