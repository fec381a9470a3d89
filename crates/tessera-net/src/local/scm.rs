//! Descriptors passed over a Unix stream socket with `SCM_RIGHTS`.
//!
//! A client hands a server its shared regions ([`super::region`]) as descriptors: one
//! `sendmsg` carries a whole `ShareRegion` frame (header and body) with the region's memfd as
//! ancillary data, so the descriptor arrives attached to the frame's first byte. The server
//! reads every frame header with one or more `recvmsg` calls that take at most a few
//! descriptors ([`recv_with_descriptors`]); the kernel never joins the bytes of two
//! `sendmsg` calls into one `recvmsg` past the one that carries descriptors, and the server
//! never asks for more than the rest of the header, so a descriptor is only ever seen with
//! the frame it came with. The kernel closes descriptors that do not fit the buffer and
//! says so (`MSG_CTRUNC`); those that do fit are returned owned, so dropping them closes
//! them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Descriptors one `recvmsg` has room for. A frame may carry one; room for a second lets
/// the server see (and refuse, closing both) a frame that carries two, where a buffer for
/// exactly one would hold two anyway on 64-bit hosts (`CMSG_SPACE` pads 4 bytes to 8).
const DESCRIPTORS_PER_RECV_MAX: usize = 2;

/// Bytes of the control buffer for [`DESCRIPTORS_PER_RECV_MAX`] descriptors, in `u64`s (for
/// `cmsghdr` alignment).
const CONTROL_WORDS: usize = 8;

const fn control_bytes() -> usize {
    #[allow(clippy::cast_possible_truncation)] // 8 bytes
    let payload = (DESCRIPTORS_PER_RECV_MAX * size_of::<RawFd>()) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    unsafe { libc::CMSG_SPACE(payload) as usize }
}

/// Bytes of one descriptor in an `SCM_RIGHTS` payload.
const FD_BYTES: usize = size_of::<RawFd>();
const _: () = assert!(control_bytes() <= CONTROL_WORDS * 8);

/// Sends `bytes` on the Unix stream socket `socket` with `descriptors` attached
/// (`SCM_RIGHTS`); returns the bytes sent (the descriptors go with the first of them; the
/// caller writes any rest plainly). Never raises `SIGPIPE`.
pub fn send_with_descriptors(
    socket: BorrowedFd<'_>,
    bytes: &[u8],
    descriptors: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    let fd_bytes = std::mem::size_of_val(descriptors);
    let fd_bytes_u32 = u32::try_from(fd_bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors"))?;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes_u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    if !descriptors.is_empty() {
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = space as _;
        // SAFETY: the control buffer holds `space` bytes, room for one cmsghdr with
        // `fd_bytes` of data; CMSG_FIRSTHDR and CMSG_DATA stay inside it.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&raw const message);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(fd_bytes_u32) as _;
            let data = libc::CMSG_DATA(header);
            for (index, descriptor) in descriptors.iter().enumerate() {
                let raw = descriptor.as_raw_fd().to_ne_bytes();
                std::ptr::copy_nonoverlapping(raw.as_ptr(), data.add(index * FD_BYTES), FD_BYTES);
            }
        }
    }
    loop {
        // SAFETY: the message points at `bytes` (only read) and at the control buffer, both
        // alive for the call.
        let sent =
            unsafe { libc::sendmsg(socket.as_raw_fd(), &raw const message, libc::MSG_NOSIGNAL) };
        if let Ok(sent) = usize::try_from(sent) {
            return Ok(sent);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// What one [`recv_with_descriptors`] call found besides bytes.
#[derive(Debug, Default)]
pub struct Received {
    /// Descriptors that came, owned (closed on drop), close-on-exec.
    pub descriptors: Vec<OwnedFd>,
    /// More descriptors (or other ancillary data) came than fit: the kernel closed the rest.
    pub truncated: bool,
    /// Ancillary data other than `SCM_RIGHTS` came (its level and type).
    pub unexpected: Option<(i32, i32)>,
}

/// Receives into `buffer` from the Unix stream socket `socket` with one non-blocking
/// `recvmsg` (`MSG_CMSG_CLOEXEC`), adding any descriptors that came to `received`. Returns
/// the bytes read (0 at the end of the stream); `WouldBlock` when nothing is there yet.
pub fn recv_with_descriptors(
    socket: RawFd,
    buffer: &mut [u8],
    received: &mut Received,
) -> io::Result<usize> {
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = control_bytes() as _;
    // SAFETY: the message points at `buffer` (written up to its length) and at the control
    // buffer (written up to `msg_controllen`), both alive for the call.
    let got = unsafe {
        libc::recvmsg(
            socket,
            &raw mut message,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT,
        )
    };
    let Ok(got) = usize::try_from(got) else {
        return Err(io::Error::last_os_error());
    };
    if message.msg_flags & libc::MSG_CTRUNC != 0 {
        received.truncated = true;
    }
    // SAFETY: the kernel filled `msg_controllen` bytes of the control buffer with cmsghdrs;
    // CMSG_FIRSTHDR/CMSG_NXTHDR walk them and stop at its end; each SCM_RIGHTS payload holds
    // `(cmsg_len - CMSG_LEN(0)) / 4` descriptors just installed in this process, owned by
    // nothing else.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&raw const message);
        while !header.is_null() {
            let level = (*header).cmsg_level;
            let kind = (*header).cmsg_type;
            if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
                let payload = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header);
                for index in 0..payload / FD_BYTES {
                    let mut raw = [0u8; FD_BYTES];
                    std::ptr::copy_nonoverlapping(
                        data.add(index * FD_BYTES),
                        raw.as_mut_ptr(),
                        FD_BYTES,
                    );
                    received
                        .descriptors
                        .push(OwnedFd::from_raw_fd(RawFd::from_ne_bytes(raw)));
                }
            } else {
                received.unexpected = Some((level, kind));
            }
            header = libc::CMSG_NXTHDR(&raw const message, header);
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    fn recv_all(socket: &UnixStream, len: usize) -> (Vec<u8>, Received) {
        let mut bytes = vec![0u8; len];
        let mut received = Received::default();
        let mut filled = 0;
        while filled < len {
            let got =
                recv_with_descriptors(socket.as_raw_fd(), &mut bytes[filled..], &mut received)
                    .unwrap();
            assert!(got > 0);
            filled += got;
        }
        (bytes, received)
    }

    #[test]
    fn a_descriptor_arrives_with_its_bytes_only() {
        let (client, server) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        (&client).write_all(b"plain").unwrap();
        let sent = send_with_descriptors(client.as_fd(), b"carried", &[file.as_fd()]).unwrap();
        assert_eq!(sent, 7);
        (&client).write_all(b"after").unwrap();
        // The plain bytes before come alone, even when more is asked for than they hold.
        let mut first = [0u8; 5];
        let mut received = Received::default();
        assert_eq!(
            recv_with_descriptors(server.as_raw_fd(), &mut first, &mut received).unwrap(),
            5
        );
        assert!(received.descriptors.is_empty());
        let (bytes, received) = recv_all(&server, 7);
        assert_eq!(bytes, b"carried");
        assert_eq!(received.descriptors.len(), 1);
        assert!(!received.truncated);
        // The descriptor names the same file, and is close-on-exec.
        let descriptor = &received.descriptors[0];
        // SAFETY: fcntl on a descriptor owned by `received`.
        let flags = unsafe { libc::fcntl(descriptor.as_raw_fd(), libc::F_GETFD) };
        assert!(flags & libc::FD_CLOEXEC != 0);
        let (bytes, received) = recv_all(&server, 5);
        assert_eq!(bytes, b"after");
        assert!(received.descriptors.is_empty());
    }

    #[test]
    fn more_descriptors_than_fit_are_closed_and_flagged() {
        let (client, server) = UnixStream::pair().unwrap();
        let files: Vec<_> = (0..3).map(|_| tempfile::tempfile().unwrap()).collect();
        let fds: Vec<_> = files.iter().map(AsFd::as_fd).collect();
        send_with_descriptors(client.as_fd(), b"three", &fds).unwrap();
        let (_, received) = recv_all(&server, 5);
        assert_eq!(received.descriptors.len(), DESCRIPTORS_PER_RECV_MAX);
        assert!(received.truncated);
        send_with_descriptors(client.as_fd(), b"two", &fds[..2]).unwrap();
        let (_, received) = recv_all(&server, 3);
        assert_eq!(received.descriptors.len(), 2);
    }
}
