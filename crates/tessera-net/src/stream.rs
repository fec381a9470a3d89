//! The byte streams a connection runs over: TCP to any host, a Unix socket on the same host.
//!
//! Frames are the same on both; what differs is what the stream can tell about its peer. A
//! Unix socket gives the server the client's process id from the kernel (`SO_PEERCRED`),
//! which is what lets the server move bulk data one-sidedly between the two address spaces
//! (the `local` backend, [`crate::local`]); a TCP peer has no such identity.
//!
//! A [`Connection`](crate::Connection) is generic over its stream through [`ByteStream`]: the
//! real one is [`Stream`] (the default type parameter, so callers name neither), and tests put
//! a scripted stream in its place (the `testing` module) to inject resets, short transfers and
//! timeouts. Each connection is monomorphised for its stream, so the seam adds no dynamic
//! dispatch to the hot path.

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The blocking byte stream a client connection runs over.
///
/// Reads and writes follow `std::io`, with the socket's timeout semantics: a read or write
/// that waits past the timeout set with [`ByteStream::set_read_timeout`] (or at connect)
/// fails with `WouldBlock` or `TimedOut`, and a read of 0 bytes is the end of the stream.
/// Either may move fewer bytes than asked; the connection loops.
pub trait ByteStream: Read + Write + Send + fmt::Debug {
    /// Changes the receive timeout (`None`: wait forever).
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;

    /// Whether the peer has closed its end (or sent bytes nobody asked for) while the
    /// connection sat unused; must neither wait nor consume.
    fn closed_by_peer(&self) -> bool;

    /// Stops sending; the peer sees the end of the stream once it has read what was sent.
    fn shutdown_write(&self) -> io::Result<()>;

    /// The socket to pass descriptors over (`SCM_RIGHTS`): a same-host Unix socket only.
    fn descriptor_socket(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Waits up to `budget` on the CPU for bytes to arrive: whether they did.
    fn spin_until_readable(&self, _budget: Duration) -> bool {
        false
    }
}

/// Whether the socket `fd` is closed by its peer or has unasked bytes: a one-byte peek
/// that neither waits nor consumes.
fn peer_closed(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a local byte on a socket the caller owns.
    let got = unsafe {
        libc::recv(
            fd,
            std::ptr::from_mut(&mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match got {
        0 => true,
        n if n > 0 => true,
        _ => io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock,
    }
}

impl ByteStream for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
    fn closed_by_peer(&self) -> bool {
        peer_closed(self.as_raw_fd())
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

impl ByteStream for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
    fn closed_by_peer(&self) -> bool {
        peer_closed(self.as_raw_fd())
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
    fn descriptor_socket(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }
}

/// The client side of a connection: blocking, either transport.
#[derive(Debug)]
pub enum Stream {
    /// TCP with `TCP_NODELAY`.
    Tcp(TcpStream),
    /// A Unix stream socket (same host).
    Unix(UnixStream),
}

impl Stream {
    /// Connects to the Unix socket at `path`, with `timeout` on every later send and receive.
    pub fn connect_unix(path: &Path, timeout: Duration) -> io::Result<Self> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Self::Unix(stream))
    }

    /// True on a Unix socket, whose server can reach this process's memory.
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Unix(_))
    }
}

impl ByteStream for Stream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Tcp(stream) => ByteStream::set_read_timeout(stream, timeout),
            Self::Unix(stream) => ByteStream::set_read_timeout(stream, timeout),
        }
    }
    fn closed_by_peer(&self) -> bool {
        match self {
            Self::Tcp(stream) => stream.closed_by_peer(),
            Self::Unix(stream) => stream.closed_by_peer(),
        }
    }
    fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Self::Tcp(stream) => stream.shutdown_write(),
            Self::Unix(stream) => stream.shutdown_write(),
        }
    }
    fn descriptor_socket(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Self::Tcp(_) => None,
            Self::Unix(stream) => stream.descriptor_socket(),
        }
    }
    fn spin_until_readable(&self, budget: Duration) -> bool {
        let fd = match self {
            Self::Tcp(stream) => stream.as_raw_fd(),
            Self::Unix(stream) => stream.as_raw_fd(),
        };
        let started = std::time::Instant::now();
        loop {
            let mut byte = 0u8;
            // SAFETY: a one-byte peek into a local byte, on a descriptor this stream owns.
            let got = unsafe {
                libc::recv(
                    fd,
                    (&raw mut byte).cast(),
                    1,
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            // Bytes, the end of the stream, or an error other than "nothing yet": the
            // blocking read that follows sees it at once.
            if got != -1 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                return true;
            }
            if started.elapsed() >= budget {
                return false;
            }
            // Another thread ready on this CPU (the server itself, on a busy host) runs
            // first; with none, this CPU stays awake for the reply.
            // SAFETY: sched_yield takes no arguments and cannot fail on Linux.
            unsafe { libc::sched_yield() };
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(stream) => stream.read(buf),
            Self::Unix(stream) => stream.read(buf),
        }
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(stream) => stream.read_vectored(bufs),
            Self::Unix(stream) => stream.read_vectored(bufs),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(stream) => stream.write(buf),
            Self::Unix(stream) => stream.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(stream) => stream.write_vectored(bufs),
            Self::Unix(stream) => stream.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spin_sees_bytes_that_came_and_gives_up_after_its_budget_when_none_do() {
        let (client, mut server) = UnixStream::pair().unwrap();
        let stream = Stream::Unix(client);
        let started = std::time::Instant::now();
        assert!(!stream.spin_until_readable(Duration::from_millis(20)));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(20), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        server.write_all(b"x").unwrap();
        assert!(stream.spin_until_readable(Duration::from_secs(5)));
        // It only peeked: the byte is still there to read.
        let mut stream = stream;
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
        // The end of the stream ends the spin at once too.
        drop(server);
        let started = std::time::Instant::now();
        assert!(stream.spin_until_readable(Duration::from_secs(5)));
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
