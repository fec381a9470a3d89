//! A process forked from a client gets connections of its own (issue 16, the same-host
//! path): an iod moves the memory of the process that connected (its pid from
//! `SO_PEERCRED`), so a child speaking on its parent's connection had its writes filled from
//! the parent's memory. This file holds one test, so no other test thread runs in the process
//! when it forks.

mod common;

use common::Cluster;
use tessera_client::{CreateOptions, OpenMode};

/// Bytes of each write: over the 64 KiB eager buffer, so the iod pulls them one-sidedly
/// from the writer's memory.
const LENGTH: usize = 256 << 10;

#[test]
fn a_forked_child_writes_its_own_memory_and_leaves_its_parent_connected() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let file = client.create("/forked", &CreateOptions::default()).unwrap();
    let mut buffer = vec![b'P'; LENGTH];
    // The parent's connections, one-sided, are open before the fork.
    let first = file.write_at(0, &buffer).unwrap();
    assert!(
        first.one_sided > 0 && first.one_sided == first.requests,
        "the test needs the one-sided path: {first:?}"
    );

    // SAFETY: the child only fills its copy of `buffer`, writes it through the inherited
    // client and leaves with _exit; this test binary runs no other test thread.
    let child = unsafe { libc::fork() };
    assert!(
        child >= 0,
        "fork failed: {}",
        std::io::Error::last_os_error()
    );
    if child == 0 {
        buffer.fill(b'C');
        let status = match file.write_at(0, &buffer) {
            Ok(_) => 0,
            Err(error) => {
                eprintln!("child: {error}");
                1
            }
        };
        // SAFETY: ends the child without running the parent's destructors or test harness.
        unsafe { libc::_exit(status) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(child, &raw mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's write failed (status {status:#x})"
    );

    // The child's bytes, not the parent's memory at the same addresses.
    let mut back = vec![0u8; LENGTH];
    file.read_at(0, &mut back).unwrap();
    #[allow(clippy::naive_bytecount)] // a test over 256 KiB
    let parents = back.iter().filter(|&&byte| byte == b'P').count();
    assert_eq!(parents, 0, "{parents} bytes came from the parent's memory");
    assert!(back.iter().all(|&byte| byte == b'C'));

    // The parent's own connections still work, one-sidedly.
    buffer.fill(b'Q');
    let last = file.write_at(LENGTH as u64, &buffer).unwrap();
    assert_eq!(last.one_sided, last.requests, "{last:?}");
    let reopened = cluster
        .client()
        .open("/forked", OpenMode::ReadWrite)
        .unwrap();
    reopened.read_at(LENGTH as u64, &mut back).unwrap();
    assert!(back.iter().all(|&byte| byte == b'Q'));
}
