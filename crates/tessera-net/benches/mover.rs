//! What moving a one-sided copy to the connection's mover costs, side by side with the copy
//! made on the calling thread (what the iod did before the mover):
//! - `copy/8B`: one 8-byte segment (a probe): the hand-off and the pin checks alone;
//! - `copy/256KiB-in-256`: 256 segments of 1 KiB 2 KiB apart (a row-cyclic subarray,
//!   `bench subarray` n = 512);
//! - `copy/4MiB-in-1024`: 1024 segments of 4 KiB (n = 2048).
//!
//! Each case runs `direct` (`rma::pull` here) and `mover` (`Mover::pull`: the pin checks
//! around the copy, on the same thread) in one process, against this process's own memory.

use std::hint::black_box;
use std::os::fd::AsFd;
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
        group.finish();
    }
}

criterion_group!(benches, mover);
criterion_main!(benches);
