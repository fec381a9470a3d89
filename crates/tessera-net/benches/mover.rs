//! What moving a one-sided copy to the connection's mover costs, side by side with the copy
//! made on the calling thread (what the iod did before the mover):
//! - `copy/8B`: one 8-byte segment (a probe): the hand-off and the pin checks alone;
//! - `copy/256KiB-in-256`: 256 segments of 1 KiB 2 KiB apart (a row-cyclic subarray,
//!   `bench subarray` n = 512);
//! - `copy/4MiB-in-1024`: 1024 segments of 4 KiB (n = 2048).
//!
//! Each case runs `direct` (`rma::pull` here) and `mover` (`Mover::pull`: the pin checks
//! around the copy, on the same thread) in one process, against this process's own memory;
//! run as root, also `direct, user` and `mover, user` against a child process of another
//! user (uid 65534) holding the same bytes at the same addresses: the mover's copy then runs
//! in a task of its own with that user's ids (`clone(CLONE_VM | CLONE_VFORK)`).

use std::hint::black_box;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};

use criterion::{criterion_group, criterion_main, Criterion};
use tessera_net::local::mover::{Mover, PeerProcess};
use tessera_net::local::rma;
use tessera_proto::RemoteSegment;

fn segments(source: &[u8], count: usize, length: usize, stride: usize) -> Vec<RemoteSegment> {
    (0..count)
        .map(|index| RemoteSegment {
            address: source[index * stride..].as_ptr() as u64,
            length: length as u64,
            key: 0,
        })
        .collect()
}

fn mover(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let listener = UnixListener::bind(&path).unwrap();
    let _client = UnixStream::connect(&path).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    let peer = PeerProcess::of_socket(accepted.as_fd()).unwrap();
    let mover = Mover::start(peer).unwrap();
    let pid = std::process::id();
    let source = vec![7u8; 8 << 20];
    let user = other_user(dir.path());
    for (name, count, length, stride) in [
        ("copy/8B", 1, 8, 8),
        ("copy/256KiB-in-256", 256, 1024, 2048),
        ("copy/4MiB-in-1024", 1024, 4096, 8192),
    ] {
        let remote = segments(&source, count, length, stride);
        let mut group = c.benchmark_group(name);
        let mut buffer = vec![0u8; count * length];
        group.bench_function("direct", |b| {
            b.iter(|| rma::pull(pid, black_box(&remote), 0, &mut buffer).unwrap());
        });
        group.bench_function("mover", |b| {
            b.iter(|| mover.pull(black_box(&remote), 0, &mut buffer).unwrap());
        });
        if let Some(user) = &user {
            group.bench_function("direct, user", |b| {
                b.iter(|| rma::pull(user.pid, black_box(&remote), 0, &mut buffer).unwrap());
            });
            group.bench_function("mover, user", |b| {
                b.iter(|| user.mover.pull(black_box(&remote), 0, &mut buffer).unwrap());
            });
        }
        group.finish();
    }
}

/// A child process of uid 65534 (forked from this one, so its memory holds the same bytes at
/// the same addresses) and a mover for it; killed when dropped.
struct OtherUser {
    pid: u32,
    mover: Mover,
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        let pid = libc::pid_t::try_from(self.pid).expect("a pid");
        // SAFETY: ends and reaps the child started by `other_user`.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}

/// As root, a child of uid 65534 connected to a socket in `dir`; `None` otherwise.
fn other_user(dir: &std::path::Path) -> Option<OtherUser> {
    const NOBODY: u32 = 65_534;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).ok()?;
    let path = dir.join("user");
    let listener = UnixListener::bind(&path).ok()?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).ok()?;
    // SAFETY: the child makes plain system calls only and never returns.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: the child's own credentials; it then waits to be killed.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
                || libc::prctl(libc::PR_SET_DUMPABLE, 1) != 0
            {
                libc::_exit(1);
            }
        }
        let stream = UnixStream::connect(&path);
        loop {
            // SAFETY: waits for the parent's SIGKILL.
            unsafe { libc::pause() };
            let _ = &stream;
        }
    }
    let (accepted, _) = listener.accept().ok()?;
    let peer = PeerProcess::of_socket(accepted.as_fd()).ok()?;
    assert_eq!(peer.uid, NOBODY);
    let pid = u32::try_from(child).ok()?;
    Some(OtherUser {
        pid,
        mover: Mover::start(peer).unwrap(),
    })
}

criterion_group!(benches, mover);
criterion_main!(benches);
