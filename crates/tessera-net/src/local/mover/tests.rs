//! The mover against real processes: a forked child connects to a listening socket (so the
//! kernel records it as the peer), and the mover copies its memory with its credentials, sees
//! it execute another program, and gives up on a copy that waits on a userfaultfd page no one
//! serves. The children run raw system calls only (this test binary has other threads).

// Raw system calls take C's integer types.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use super::*;

use tessera_testing as not_run;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array we own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the descriptors were just made for us and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn root() -> bool {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        not_run::ignored_at_run_time(&format!(
            "the mover's credential switch needs root; this test runs as uid {euid}"
        ));
    }
    euid == 0
}

/// What a child does after it connected, before it waits for `go` and then for the end.
#[derive(Clone, Copy)]
enum Then {
    /// Writes `b"child!!!"` into the shared address first (its own copy of the page).
    Mark,
    /// Registers a fresh page with a userfaultfd that it never serves and reports its
    /// address on `report`.
    StallPage,
}

/// A child of this process, connected to a listener as uid `uid`; it does `then`, waits until
/// `go` closes, then executes `/bin/sleep 30` when `exec` (else exits).
struct Child {
    pid: libc::pid_t,
    peer: PeerProcess,
    go: Option<OwnedFd>,
    report: OwnedFd,
}

impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: ends and reaps the child forked by `Child::start`.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The kernel's userfaultfd ABI (linux/userfaultfd.h).
const UFFD_API: u64 = 0xAA;
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;

impl Child {
    fn start(uid: u32, mark: *mut u8, then: Then, exec: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path).unwrap();
        // Reachable by the child once it is another user.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        listener.set_nonblocking(true).unwrap();
        // SAFETY: a zeroed sockaddr_un is a valid value; it is filled below.
        let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        address.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (slot, byte) in address
            .sun_path
            .iter_mut()
            .zip(path.as_os_str().as_encoded_bytes())
        {
            *slot = *byte as libc::c_char;
        }
        let (go_read, go_write) = pipe();
        let (report_read, report_write) = pipe();
        let program = c"/bin/sleep";
        let arguments = [program.as_ptr(), c"30".as_ptr(), std::ptr::null()];
        // SAFETY: the child runs raw system calls only and leaves with exec or _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: raw system calls on the child's own resources; it never returns.
            unsafe {
                // The stalling page is registered while the child is still root (an
                // unprivileged userfaultfd does not serve the kernel's faults, those of a copy).
                let stall = matches!(then, Then::StallPage).then(|| {
                    let uffd = libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) as i32;
                    let mut api = [UFFD_API, 0, 0];
                    let page = libc::mmap(
                        std::ptr::null_mut(),
                        4096,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    );
                    let mut register = [page as u64, 4096, UFFDIO_REGISTER_MODE_MISSING, 0];
                    if uffd < 0
                        || libc::ioctl(uffd, UFFDIO_API, api.as_mut_ptr()) != 0
                        || libc::ioctl(uffd, UFFDIO_REGISTER, register.as_mut_ptr()) != 0
                    {
                        libc::_exit(12);
                    }
                    page as u64
                });
                // Dumpable as a program its user started (this test process may not be: a
                // thread that copied changed its file-system ids).
                if (uid != 0
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(uid) != 0
                        || libc::setuid(uid) != 0))
                    || libc::prctl(libc::PR_SET_DUMPABLE, 1) != 0
                {
                    libc::_exit(10);
                }
                let socket = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let length = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
                if libc::connect(socket, (&raw const address).cast(), length) != 0 {
                    libc::_exit(11);
                }
                match then {
                    Then::Mark => {
                        std::ptr::copy_nonoverlapping(b"child!!!".as_ptr(), mark, 8);
                    }
                    Then::StallPage => {
                        let address = stall.unwrap_or(0).to_le_bytes();
                        libc::write(report_write.as_raw_fd(), address.as_ptr().cast(), 8);
                    }
                }
                // Its copy of the write end would keep the pipe from ending.
                libc::close(go_write.as_raw_fd());
                let mut byte = 0u8;
                libc::read(go_read.as_raw_fd(), (&raw mut byte).cast(), 1);
                if exec {
                    libc::execv(program.as_ptr(), arguments.as_ptr());
                }
                libc::_exit(0);
            }
        }
        drop((go_read, report_write));
        let deadline = Instant::now() + Duration::from_secs(10);
        let accepted = loop {
            match listener.accept() {
                Ok((accepted, _)) => break accepted,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "the child never connected");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(err) => panic!("accept: {err}"),
            }
        };
        let peer = PeerProcess::of_socket(accepted.as_fd()).unwrap();
        assert_eq!((peer.pid, peer.uid), (pid as u32, uid));
        Self {
            pid,
            peer,
            go: Some(go_write),
            report: report_read,
        }
    }

    /// Lets the child go on (exec or exit).
    fn go(&mut self) {
        self.go = None;
    }

    /// The address the child reported.
    fn reported(&self) -> u64 {
        let mut bytes = [0u8; 8];
        // SAFETY: reads 8 bytes into memory we own.
        let got = unsafe { libc::read(self.report.as_raw_fd(), bytes.as_mut_ptr().cast(), 8) };
        assert_eq!(got, 8, "the child reported its page");
        u64::from_le_bytes(bytes)
    }
}

fn segment(address: u64, length: u64) -> Vec<RemoteSegment> {
    vec![RemoteSegment {
        address,
        length,
        key: 0,
    }]
}

/// The peer of `child`, taken (the child keeps a stand-in).
fn peer_of(child: &mut Child) -> PeerProcess {
    std::mem::replace(
        &mut child.peer,
        PeerProcess {
            pid: 0,
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            pidfd: None,
        },
    )
}

#[test]
fn a_mover_copies_as_the_client_and_never_reaches_the_program_it_executed() {
    if !root() {
        return;
    }
    let mut mark = Box::new(*b"parent!!");
    let mut child = Child::start(2001, mark.as_mut_ptr(), Then::Mark, true);
    let address = mark.as_ptr() as u64;
    let mover = Mover::start(peer_of(&mut child)).unwrap();
    assert_eq!(mover.uid(), 2001);
    // The child's own bytes, at the address the parent's copy has too.
    let mut pulled = [0u8; 8];
    mover.pull(&segment(address, 8), 0, &mut pulled).unwrap();
    assert_eq!(&pulled, b"child!!!");
    mover.push(b"pushed!!", &segment(address, 8), 0).unwrap();
    mover.pull(&segment(address, 8), 0, &mut pulled).unwrap();
    assert_eq!(&pulled, b"pushed!!");
    assert_eq!(&*mark, b"parent!!", "the parent's memory is untouched");
    // The copies ran in a task of their own as uid 2001: this thread is still root's (a
    // signal of uid 2001 cannot reach it) and copies for a root client as root.
    let (mut real, mut effective, mut saved) = (u32::MAX, u32::MAX, u32::MAX);
    // SAFETY: getresuid writes three ids into memory we own.
    unsafe { libc::getresuid(&raw mut real, &raw mut effective, &raw mut saved) };
    assert_eq!((real, effective, saved), (0, 0, 0));
    let own = Mover::start(PeerProcess {
        pid: std::process::id(),
        uid: 0,
        gid: 0,
        groups: Vec::new(),
        pidfd: pidfd_open(std::process::id()),
    })
    .unwrap();
    own.pull(&segment(address, 8), 0, &mut pulled).unwrap();
    assert_eq!(
        &pulled, b"parent!!",
        "the thread copies as root again for a root client"
    );
    // It executes another program: no copy reaches it again.
    child.go();
    let deadline = Instant::now() + Duration::from_secs(10);
    // Its name (world-readable: this thread no longer reads its exe link).
    while std::fs::read_to_string(format!("/proc/{}/comm", child.pid)).unwrap() != "sleep\n" {
        assert!(Instant::now() < deadline, "the child did not exec");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    let err = mover
        .pull(&segment(address, 8), 0, &mut pulled)
        .unwrap_err();
    assert!(
        matches!(&err, RmaError::Gone { reason, .. } if reason.contains("executed another program")),
        "{err}"
    );
    assert!(mover.retired().is_some());
    let again = mover
        .pull(&segment(address, 8), 0, &mut pulled)
        .unwrap_err();
    assert!(matches!(again, RmaError::Gone { .. }), "{again}");
}

#[test]
fn the_kernel_refuses_a_mover_the_memory_its_user_cannot_reach() {
    if !root() {
        return;
    }
    // A peer that claims this (root) process with another user's credentials: the kernel's
    // ptrace check, made with them, refuses.
    let pid = std::process::id();
    let forged = PeerProcess {
        pid,
        uid: 2001,
        gid: 2001,
        groups: Vec::new(),
        pidfd: pidfd_open(pid),
    };
    let err = Mover::start(forged).unwrap_err();
    assert!(
        matches!(&err, RmaError::Refused { source, .. }
            if source.to_string().contains("the kernel refuses uid 2001")),
        "{err}"
    );
    assert_eq!(
        err.to_remote().code,
        tessera_proto::ErrorCode::RemoteAccessRefused
    );
}

#[test]
fn a_copy_that_stalls_is_declared_so_at_its_deadline_and_its_hook_runs() {
    if !root() {
        return;
    }
    let timeout = Duration::from_millis(300);
    let runtime = runtime();
    let stalled_before = stalled_copies(0);
    let mut child = Child::start(0, std::ptr::null_mut(), Then::StallPage, false);
    let page = child.reported();
    let mover = Mover::start_with(peer_of(&mut child), timeout).unwrap();
    let released = std::sync::Arc::new(AtomicBool::new(false));
    let hook = {
        let released = std::sync::Arc::clone(&released);
        Box::new(move || released.store(true, Ordering::SeqCst)) as OnStall
    };
    let source = [7u8; 8];
    std::thread::scope(|scope| {
        let pushing = scope.spawn(|| {
            mover.push_slices(&[IoSlice::new(&source)], &segment(page, 8), 0, Some(hook))
        });
        // The connection's watch declares it stalled at the deadline, and runs the hook.
        let started = Instant::now();
        runtime.block_on(mover.retired_wait());
        assert!(started.elapsed() >= timeout / 2);
        assert!(released.load(Ordering::SeqCst), "the hook did not run");
        assert!(mover
            .retired()
            .is_some_and(|reason| reason.contains("did not end")));
        assert_eq!(stalled_copies(0), stalled_before + 1);
        assert!(
            !pushing.is_finished(),
            "the copy cannot end while the page is not served"
        );
        // Served no more.
        let mut pulled = [0u8; 8];
        assert!(matches!(
            mover.pull(&segment(page, 8), 0, &mut pulled),
            Err(RmaError::Gone { .. })
        ));
        // The stall ends when the page can be faulted in (the child exits).
        child.go();
        let err = pushing.join().unwrap().unwrap_err();
        assert!(matches!(err, RmaError::Stalled { .. }), "{err}");
    });
    assert_eq!(stalled_copies(0), stalled_before);
}
/// The pid of a live process of `uid` whose parent is this process, other than those in
/// `except`.
fn child_task_of(uid: u32, except: &[libc::pid_t]) -> Option<libc::pid_t> {
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if except.contains(&pid) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next().map(str::to_owned))
        };
        if field("PPid:").as_deref() == Some(me.as_str())
            && field("Uid:") == Some(uid.to_string())
            && !field("State:").is_some_and(|state| state.starts_with(['Z', 'X']))
        {
            return Some(pid);
        }
    }
    None
}

#[test]
fn a_copy_for_another_user_runs_in_a_task_that_user_may_kill_and_only_that_copy_fails() {
    if !root() {
        return;
    }
    // A uid no other test here uses: the task found below is this test's.
    let uid = 2002;
    let mut child = Child::start(uid, std::ptr::null_mut(), Then::StallPage, false);
    let page = child.reported();
    let mover = Mover::start(peer_of(&mut child)).unwrap();
    let source = [7u8; 8];
    std::thread::scope(|scope| {
        let pushing =
            scope.spawn(|| mover.push_slices(&[IoSlice::new(&source)], &segment(page, 8), 0, None));
        // The copy waits on the page in a task of uid 2002, a child of this process but not
        // one of its threads.
        let find = |except: &[libc::pid_t]| {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(task) = child_task_of(uid, except) {
                    break task;
                }
                assert!(Instant::now() < deadline, "no task of uid {uid} copies");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let task = find(&[child.pid]);
        let own_tasks = std::fs::read_dir("/proc/self/task").unwrap().count();
        assert!(
            std::fs::metadata(format!("/proc/self/task/{task}")).is_err(),
            "the copying task {task} is a thread of the server ({own_tasks} threads)"
        );
        // A signal with a handler in the server (SIGTERM stops a server) stays blocked in
        // the task: it runs no handler there and does not end it.
        // SAFETY: as uid 2002 could: a signal to the task found above.
        assert_eq!(unsafe { libc::kill(task, libc::SIGTERM) }, 0);
        std::thread::sleep(Duration::from_millis(100));
        let state = std::fs::read_to_string(format!("/proc/{task}/stat")).unwrap();
        assert!(
            !state
                .rsplit_once(')')
                .unwrap()
                .1
                .trim_start()
                .starts_with(['Z', 'X']),
            "SIGTERM ended the copying task: {state}"
        );
        assert!(!pushing.is_finished(), "SIGTERM ended the copy");
        // Its user may kill it (a user's signal reaches a task of its own uid): the copy is
        // made once more in a new task (a task also ends with the thread that made it), and
        // when the user kills that one too, that copy alone fails and this process goes on.
        // SAFETY: as uid 2002 could: a signal to the task found above.
        assert_eq!(unsafe { libc::kill(task, libc::SIGKILL) }, 0);
        let again = find(&[child.pid, task]);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(again, libc::SIGKILL) }, 0);
        let err = pushing.join().unwrap().unwrap_err();
        assert!(
            matches!(&err, RmaError::Refused { source, .. }
                if source.to_string().contains("ended by a signal")),
            "{err}"
        );
    });
    // The client is still there and was not stalled: its mover is not retired.
    assert_eq!(mover.retired(), None);
    child.go();
}

#[test]
fn a_stalled_copy_in_another_users_task_is_ended_at_its_deadline() {
    if !root() {
        return;
    }
    let timeout = Duration::from_millis(300);
    let runtime = runtime();
    // A uid no other test here uses.
    let uid = 2003;
    let mut child = Child::start(uid, std::ptr::null_mut(), Then::StallPage, false);
    let page = child.reported();
    let mover = Mover::start_with(peer_of(&mut child), timeout).unwrap();
    let source = [7u8; 8];
    std::thread::scope(|scope| {
        let pushing =
            scope.spawn(|| mover.push_slices(&[IoSlice::new(&source)], &segment(page, 8), 0, None));
        runtime.block_on(mover.retired_wait());
        // The watch ended the copying task: the copy fails now, not when the page is served,
        // and its thread is free again.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !pushing.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the stalled copy still holds its thread"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let err = pushing.join().unwrap().unwrap_err();
        assert!(matches!(err, RmaError::Stalled { .. }), "{err}");
    });
    assert_eq!(stalled_copies(uid), 0, "the stall ended with its copy");
    child.go();
}

#[test]
fn a_copying_task_ends_with_the_thread_that_made_it_and_the_next_copy_makes_another() {
    if !root() {
        return;
    }
    // A uid no other test here uses.
    let uid = 2004;
    let mut mark = Box::new(*b"parent!!");
    let mut child = Child::start(uid, mark.as_mut_ptr(), Then::Mark, false);
    let address = mark.as_ptr() as u64;
    let peer = peer_of(&mut child);
    // The mover, and so its task, is made on a thread that then ends.
    let mover = std::thread::spawn(move || Mover::start(peer).unwrap())
        .join()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child_task_of(uid, &[child.pid]).is_some() {
        assert!(
            Instant::now() < deadline,
            "the task outlived the thread that made it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut pulled = [0u8; 8];
    mover.pull(&segment(address, 8), 0, &mut pulled).unwrap();
    assert_eq!(&pulled, b"child!!!");
    assert!(child_task_of(uid, &[child.pid]).is_some(), "no new task");
}

#[test]
fn a_uid_at_its_cap_of_stalled_copies_gets_no_new_mover() {
    let uid = 4_000_321;
    for _ in 0..STALLED_COPIES_PER_UID_MAX {
        stall_begins(uid);
    }
    let pid = std::process::id();
    let peer = PeerProcess {
        pid,
        uid,
        gid: uid,
        groups: Vec::new(),
        pidfd: pidfd_open(pid),
    };
    let err = Mover::start(peer).unwrap_err();
    assert!(
        err.to_string().contains("stalled_copies_per_uid_max"),
        "{err}"
    );
    for _ in 0..STALLED_COPIES_PER_UID_MAX {
        stall_ends(uid);
    }
    assert_eq!(stalled_copies(uid), 0);
}
