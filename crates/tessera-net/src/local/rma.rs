//! One-sided copies between this process and another one on the host, with
//! `process_vm_readv` (pull) and `process_vm_writev` (push).
//!
//! The remote side is a list of segments in the other process's address space; the local
//! side is one contiguous buffer of this process, or a list of slices ([`pull_vectored`],
//! [`push_vectored`]: a server pushing straight from a mapping of its file). Each system call
//! moves at most
//! [`IOV_PIECES_MAX`] segments (the kernel's `UIO_MAXIOV`), fewer when the request asks for
//! fewer (`segments_per_call = 1` is the multiple-message mechanism). The kernel moves whole
//! segments until one fails, so a short count points at the segment that is not mapped; that
//! becomes [`RmaError::BadSegment`] naming it. A refused access (`EPERM`, `ESRCH`, `ENOSYS`)
//! is [`RmaError::Refused`], on which the client falls back to a transfer in messages.

use std::io::{self, IoSlice, IoSliceMut};

use tessera_proto::limits::IOV_PIECES_MAX;
use tessera_proto::{ErrorCode, RemoteError, RemoteSegment};

/// A one-sided copy that failed.
#[derive(Debug, thiserror::Error)]
pub enum RmaError {
    /// The kernel refused to reach the process at all.
    #[error("process_vm access to pid {pid} refused: {source}")]
    Refused {
        /// The other process.
        pid: u32,
        /// The kernel's answer.
        source: io::Error,
    },
    /// A segment of the other process's memory is not mapped (or not all of it).
    #[error(
        "segment {index} of the client's memory ({length} bytes at {address:#x}) is not mapped: \
         moved {moved} of {length} bytes"
    )]
    BadSegment {
        /// Index in the descriptor's segment list.
        index: usize,
        /// Its address in the other process.
        address: u64,
        /// Its length.
        length: u64,
        /// Bytes of it that did move.
        moved: u64,
    },
    /// The descriptor does not add up to the local buffer.
    #[error("the client's segments hold {described} bytes, the request {expected}")]
    Mismatch {
        /// Bytes the segments describe.
        described: u64,
        /// Bytes the request moves.
        expected: u64,
    },
    /// The process behind the connection is no longer the one that connected (it exited, or
    /// executed another program), or its connection's copies were retired: no one-sided
    /// transfer reaches it again.
    #[error("pid {pid}: {reason}; no one-sided transfer reaches it on this connection again")]
    Gone {
        /// The process that connected.
        pid: u32,
        /// What happened.
        reason: String,
    },
    /// A copy did not end within `REMOTE_COPY_TIMEOUT_MS`.
    #[error(
        "a one-sided copy with pid {pid} did not end within {timeout_ms} ms \
         (remote_copy_timeout_ms): the client's memory waits on something (a mapping of a FUSE \
         file, userfaultfd, a slow disk); the connection is closed"
    )]
    Stalled {
        /// The client process.
        pid: u32,
        /// The deadline it missed.
        timeout_ms: u64,
    },
}

impl RmaError {
    /// The error reply for the client.
    pub fn to_remote(&self) -> RemoteError {
        let code = match self {
            Self::Refused { .. } | Self::Gone { .. } | Self::Stalled { .. } => {
                ErrorCode::RemoteAccessRefused
            }
            Self::BadSegment { .. } => ErrorCode::BadAddress,
            Self::Mismatch { .. } => ErrorCode::Protocol,
        };
        RemoteError::new(code, self.to_string())
    }
}

/// What a transfer cost: system calls made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RmaCounts {
    /// `process_vm_*` calls.
    pub calls: u64,
}

/// Which way a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// From the other process into this one.
    Pull,
    /// From this process into the other one.
    Push,
}

/// Copies the segments of process `pid`, in order, into `local` (which they must fill).
pub fn pull(
    pid: u32,
    remote: &[RemoteSegment],
    segments_per_call: u16,
    local: &mut [u8],
) -> Result<RmaCounts, RmaError> {
    pull_vectored(
        pid,
        remote,
        segments_per_call,
        &mut [IoSliceMut::new(local)],
    )
}

/// Copies `local` into the segments of process `pid`, in order (they must hold it exactly).
pub fn push(
    pid: u32,
    local: &[u8],
    remote: &[RemoteSegment],
    segments_per_call: u16,
) -> Result<RmaCounts, RmaError> {
    push_vectored(pid, &[IoSlice::new(local)], remote, segments_per_call)
}

/// Copies the segments of process `pid`, in order, into the slices `local`, in order (the
/// two lists must hold the same bytes). A call takes at most `segments_per_call` remote
/// segments and [`IOV_PIECES_MAX`] local slices.
pub fn pull_vectored(
    pid: u32,
    remote: &[RemoteSegment],
    segments_per_call: u16,
    local: &mut [IoSliceMut<'_>],
) -> Result<RmaCounts, RmaError> {
    let local: Vec<libc::iovec> = local
        .iter_mut()
        .map(|slice| libc::iovec {
            iov_base: slice.as_mut_ptr().cast(),
            iov_len: slice.len(),
        })
        .collect();
    copy(pid, remote, segments_per_call, &local, Direction::Pull)
}

/// Copies the slices `local`, in order, into the segments of process `pid`, in order (the
/// two lists must hold the same bytes): the gather-to-scatter form of [`push`], for a
/// source that is not one buffer (a server pushing straight from a mapping of its file).
pub fn push_vectored(
    pid: u32,
    local: &[IoSlice<'_>],
    remote: &[RemoteSegment],
    segments_per_call: u16,
) -> Result<RmaCounts, RmaError> {
    let local: Vec<libc::iovec> = local
        .iter()
        .map(|slice| libc::iovec {
            // process_vm_writev only reads through the local iovecs.
            iov_base: slice.as_ptr().cast_mut().cast(),
            iov_len: slice.len(),
        })
        .collect();
    copy(pid, remote, segments_per_call, &local, Direction::Push)
}

/// A list of iovecs with the stream position each starts at, cut into windows per call.
struct Stream {
    iovs: Vec<libc::iovec>,
    starts: Vec<usize>,
}

impl Stream {
    fn new(iovs: Vec<libc::iovec>) -> Self {
        let mut position = 0usize;
        let starts = iovs
            .iter()
            .map(|iov| {
                let start = position;
                position += iov.iov_len;
                start
            })
            .collect();
        Self { iovs, starts }
    }

    /// Puts into `out` (emptied first) the iovecs holding stream bytes `[from, from + len)`,
    /// at most `max` of them; returns the bytes they cover (less than `len` when `max` cut the
    /// window short). Allocates nothing when `out` has room for `max`.
    fn window_into(
        &self,
        from: usize,
        len: usize,
        max: usize,
        out: &mut Vec<libc::iovec>,
    ) -> usize {
        out.clear();
        let mut index = match self.starts.binary_search(&from) {
            Ok(index) => index,
            Err(index) => index.saturating_sub(1),
        };
        let mut covered = 0usize;
        while covered < len && index < self.iovs.len() && out.len() < max {
            let iov = self.iovs[index];
            let skip = (from + covered).saturating_sub(self.starts[index]);
            let take = iov.iov_len.saturating_sub(skip).min(len - covered);
            if take > 0 {
                out.push(libc::iovec {
                    iov_base: (iov.iov_base as usize + skip) as *mut libc::c_void,
                    iov_len: take,
                });
                covered += take;
            }
            index += 1;
        }
        covered
    }
}

/// Moves the bytes of `local` to or from the segments `remote` of process `pid`, at most
/// `segments_per_call` remote segments a call. The caller guarantees that `local` names
/// memory of this process that is valid (and, for a pull, not otherwise used) for the call.
pub(crate) fn copy(
    pid: u32,
    remote: &[RemoteSegment],
    segments_per_call: u16,
    local: &[libc::iovec],
    direction: Direction,
) -> Result<RmaCounts, RmaError> {
    plan(pid, remote, segments_per_call, local, direction)?.run()
}

/// A copy checked and laid out, with room for every window it will take: [`Plan::run`]
/// allocates nothing, so it may run in a task that can be killed at any instruction (the
/// mover's task of another user's ids) without ever leaving a lock of the allocator held.
pub(crate) struct Plan<'a> {
    pid: u32,
    pid_t: libc::pid_t,
    remote: &'a [RemoteSegment],
    per_call: usize,
    direction: Direction,
    remote_stream: Stream,
    local_stream: Stream,
    remote_window: Vec<libc::iovec>,
    local_window: Vec<libc::iovec>,
}

/// Checks and lays out a [`copy`] (see there) without moving a byte.
pub(crate) fn plan<'a>(
    pid: u32,
    remote: &'a [RemoteSegment],
    segments_per_call: u16,
    local: &[libc::iovec],
    direction: Direction,
) -> Result<Plan<'a>, RmaError> {
    let described: u64 = remote.iter().map(|segment| segment.length).sum();
    let local_len: usize = local.iter().map(|iov| iov.iov_len).sum();
    if described != local_len as u64 {
        return Err(RmaError::Mismatch {
            described,
            expected: local_len as u64,
        });
    }
    let per_call = match segments_per_call {
        0 => IOV_PIECES_MAX,
        n => usize::from(n).min(IOV_PIECES_MAX),
    };
    let pid_t = libc::pid_t::try_from(pid).map_err(|_| RmaError::Refused {
        pid,
        source: io::Error::from_raw_os_error(libc::ESRCH),
    })?;
    let mut remote_iovs = Vec::with_capacity(remote.len());
    for (index, segment) in remote.iter().enumerate() {
        let (Ok(address), Ok(length)) = (
            usize::try_from(segment.address),
            usize::try_from(segment.length),
        ) else {
            return Err(RmaError::BadSegment {
                index,
                address: segment.address,
                length: segment.length,
                moved: 0,
            });
        };
        remote_iovs.push(libc::iovec {
            iov_base: address as *mut libc::c_void,
            iov_len: length,
        });
    }
    Ok(Plan {
        pid,
        pid_t,
        remote,
        per_call,
        direction,
        remote_stream: Stream::new(remote_iovs),
        local_stream: Stream::new(local.to_vec()),
        remote_window: Vec::with_capacity(per_call),
        local_window: Vec::with_capacity(IOV_PIECES_MAX),
    })
}

impl Plan<'_> {
    /// Moves the bytes; allocates nothing.
    pub(crate) fn run(&mut self) -> Result<RmaCounts, RmaError> {
        self.run_with(|direction, pid, local, remote| {
            let (local_count, remote_count) =
                (local.len() as libc::c_ulong, remote.len() as libc::c_ulong);
            let moved = match direction {
                // SAFETY: the local iovecs cover bytes of the caller's slices, lent mutably
                // (pull) for this call; the remote iovecs name memory of another process,
                // which the kernel checks, so no memory of this process outside the local
                // iovecs is touched.
                Direction::Pull => unsafe {
                    libc::process_vm_readv(
                        pid,
                        local.as_ptr(),
                        local_count,
                        remote.as_ptr(),
                        remote_count,
                        0,
                    )
                },
                // SAFETY: as above; process_vm_writev only reads the local iovecs.
                Direction::Push => unsafe {
                    libc::process_vm_writev(
                        pid,
                        local.as_ptr(),
                        local_count,
                        remote.as_ptr(),
                        remote_count,
                        0,
                    )
                },
            };
            usize::try_from(moved).map_err(|_| {
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO)
            })
        })
    }

    /// [`Plan::run`] with `call` making each `process_vm_readv`/`writev` (direction, pid,
    /// local iovecs, remote iovecs): the bytes moved, or the errno. Allocates nothing, and
    /// touches no thread-local state of its own: with a `call` that does not either, it runs
    /// in a task that has no thread-local storage of its own (`mover/helper.rs`).
    pub(crate) fn run_with(
        &mut self,
        call: impl Fn(Direction, libc::pid_t, &[libc::iovec], &[libc::iovec]) -> Result<usize, i32>,
    ) -> Result<RmaCounts, RmaError> {
        let (pid, pid_t, remote, per_call) = (self.pid, self.pid_t, self.remote, self.per_call);
        let mut counts = RmaCounts::default();
        let mut position = 0usize;
        // Each call moves (at most) one chunk of `per_call` remote segments; a chunk whose
        // local side needs more than IOV_PIECES_MAX slices, or that the kernel moved only in
        // part, takes more calls, each going on from where the last stopped: a short move then
        // starts at the segment that cannot be reached, which the error names.
        let segments = self.remote_stream.iovs.len();
        for first in (0..segments).step_by(per_call) {
            let last = (first + per_call).min(segments) - 1;
            let chunk_end = self.remote_stream.starts[last] + self.remote_stream.iovs[last].iov_len;
            while position < chunk_end {
                let covered = self.local_stream.window_into(
                    position,
                    chunk_end - position,
                    IOV_PIECES_MAX,
                    &mut self.local_window,
                );
                self.remote_stream.window_into(
                    position,
                    covered,
                    per_call,
                    &mut self.remote_window,
                );
                let moved = call(
                    self.direction,
                    pid_t,
                    &self.local_window,
                    &self.remote_window,
                );
                counts.calls += 1;
                match moved {
                    // Nothing moved, or an address the process has not mapped.
                    Ok(0) | Err(libc::EFAULT) => return Err(bad_segment(remote, 0, position)),
                    Ok(moved) => position += moved,
                    Err(libc::EINTR) => {}
                    Err(errno) => {
                        return Err(RmaError::Refused {
                            pid,
                            source: io::Error::from_raw_os_error(errno),
                        })
                    }
                }
            }
        }
        Ok(counts)
    }
}

/// The segment holding byte `done` of the chunk starting at segment `first`.
fn bad_segment(remote: &[RemoteSegment], first: usize, mut done: usize) -> RmaError {
    for (index, segment) in remote.iter().enumerate().skip(first) {
        let length = usize::try_from(segment.length).expect("segments add up to a buffer");
        if done < length {
            return RmaError::BadSegment {
                index,
                address: segment.address,
                length: segment.length,
                moved: done as u64,
            };
        }
        done -= length;
    }
    RmaError::Mismatch {
        described: remote.iter().map(|segment| segment.length).sum(),
        expected: 0,
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]
mod tests {
    use super::*;

    fn segments_of(buffer: &[u8], lengths: &[usize]) -> Vec<RemoteSegment> {
        let mut offset = 0;
        lengths
            .iter()
            .map(|&length| {
                let segment = RemoteSegment {
                    address: buffer[offset..].as_ptr() as u64,
                    length: length as u64,
                    key: 0,
                };
                // Leave a one-byte gap between segments so they are really scattered.
                offset += length + 1;
                segment
            })
            .collect()
    }

    #[test]
    fn pull_and_push_scatter_over_more_segments_than_one_call_takes() {
        let pid = std::process::id();
        let lengths: Vec<usize> = (0..2500).map(|i| 1 + i % 37).collect();
        let total: usize = lengths.iter().sum();
        let source: Vec<u8> = (0..total + lengths.len())
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let segments = segments_of(&source, &lengths);
        let mut expected = Vec::with_capacity(total);
        for segment in &segments {
            let start = usize::try_from(segment.address - source.as_ptr() as u64).unwrap();
            expected.extend_from_slice(&source[start..start + segment.length as usize]);
        }
        for per_call in [0u16, 1, 3] {
            let mut pulled = vec![0u8; total];
            let counts = pull(pid, &segments, per_call, &mut pulled).unwrap();
            assert_eq!(pulled, expected, "per_call {per_call}");
            let calls = match per_call {
                0 => lengths.len().div_ceil(IOV_PIECES_MAX),
                n => lengths.len().div_ceil(usize::from(n)),
            };
            assert_eq!(counts.calls, calls as u64, "per_call {per_call}");
        }
        let target = vec![0u8; source.len()];
        let target_segments = segments_of(&target, &lengths);
        push(pid, &expected, &target_segments, 0).unwrap();
        let mut back = vec![0u8; total];
        pull(pid, &target_segments, 0, &mut back).unwrap();
        assert_eq!(back, expected);
        // The gaps stayed untouched.
        let mut offset = 0;
        for &length in &lengths {
            offset += length;
            assert_eq!(target[offset], 0);
            offset += 1;
        }
    }

    #[test]
    fn vectored_copies_cut_both_sides_at_their_limits() {
        let pid = std::process::id();
        // 3000 remote segments of 1-37 bytes against 2100 local slices of other lengths: both
        // sides exceed one call's iovec limit and their boundaries never line up.
        let lengths: Vec<usize> = (0..3000).map(|i| 1 + i % 37).collect();
        let total: usize = lengths.iter().sum();
        let source: Vec<u8> = (0..total + lengths.len())
            .map(|i| (i * 13 % 251) as u8)
            .collect();
        let segments = segments_of(&source, &lengths);
        let mut expected = Vec::with_capacity(total);
        for segment in &segments {
            let start = usize::try_from(segment.address - source.as_ptr() as u64).unwrap();
            expected.extend_from_slice(&source[start..start + segment.length as usize]);
        }
        let local_lengths: Vec<usize> = {
            let mut left = total;
            let mut out = Vec::new();
            let mut i = 0;
            while left > 0 {
                let length = (1 + i * 7 % 50).min(left);
                out.push(length);
                left -= length;
                i += 1;
            }
            out
        };
        assert!(local_lengths.len() > IOV_PIECES_MAX);
        let mut local = vec![0u8; total];
        let counts = {
            let mut slices = Vec::new();
            let mut rest: &mut [u8] = &mut local;
            for &length in &local_lengths {
                let (head, tail) = rest.split_at_mut(length);
                slices.push(IoSliceMut::new(head));
                rest = tail;
            }
            pull_vectored(pid, &segments, 0, &mut slices).unwrap()
        };
        assert_eq!(local, expected);
        // Three remote chunks; the local side needs a few more calls than that.
        assert!(counts.calls >= 3 && counts.calls <= 3 + 4, "{counts:?}");
        let target = vec![0u8; source.len()];
        let target_segments = segments_of(&target, &lengths);
        let mut slices = Vec::new();
        let mut rest: &[u8] = &expected;
        for &length in &local_lengths {
            let (head, tail) = rest.split_at(length);
            slices.push(IoSlice::new(head));
            rest = tail;
        }
        push_vectored(pid, &slices, &target_segments, 7).unwrap();
        let mut back = vec![0u8; total];
        pull(pid, &target_segments, 0, &mut back).unwrap();
        assert_eq!(back, expected);
    }

    #[test]
    fn an_unmapped_segment_is_named() {
        let pid = std::process::id();
        let page = 4096usize;
        // SAFETY: a fresh anonymous mapping of three pages; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base as u64;
        // SAFETY: unmaps the middle page of the mapping made above; only addresses (never
        // references) into it are used below.
        let unmapped = unsafe { libc::munmap((base as usize + page) as *mut libc::c_void, page) };
        assert_eq!(unmapped, 0);
        let segments = [
            RemoteSegment {
                address: base,
                length: 100,
                key: 0,
            },
            RemoteSegment {
                address: base + 200,
                length: 100,
                key: 0,
            },
            RemoteSegment {
                address: base + page as u64 + 8,
                length: 64,
                key: 0,
            },
            RemoteSegment {
                address: base + 2 * page as u64,
                length: 64,
                key: 0,
            },
        ];
        let mut local = vec![0u8; 328];
        let err = pull(pid, &segments, 0, &mut local).unwrap_err();
        match err {
            RmaError::BadSegment { index, moved, .. } => {
                assert_eq!(index, 2, "{err}");
                assert_eq!(moved, 0);
            }
            other => panic!("expected a bad segment, got {other}"),
        }
        assert_eq!(err.to_remote().code, ErrorCode::BadAddress);
        assert!(err.to_string().contains("segment 2"), "{err}");
        // SAFETY: unmaps the rest of the mapping made above.
        unsafe {
            libc::munmap(base as usize as *mut libc::c_void, page);
            libc::munmap((base as usize + 2 * page) as *mut libc::c_void, page);
        }
    }

    #[test]
    fn a_missing_process_is_refused_and_a_short_descriptor_mismatched() {
        let source = [1u8; 16];
        let segments = [RemoteSegment {
            address: source.as_ptr() as u64,
            length: 16,
            key: 0,
        }];
        let mut local = [0u8; 16];
        // Pid 0x7fff_fff0 is above the kernel's pid_max, so no process has it.
        let err = pull(0x7fff_fff0, &segments, 0, &mut local).unwrap_err();
        assert!(matches!(err, RmaError::Refused { .. }), "{err}");
        assert_eq!(err.to_remote().code, ErrorCode::RemoteAccessRefused);
        let mut short = [0u8; 8];
        let err = pull(std::process::id(), &segments, 0, &mut short).unwrap_err();
        assert!(matches!(err, RmaError::Mismatch { .. }), "{err}");
    }
}
