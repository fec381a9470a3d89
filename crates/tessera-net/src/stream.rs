//! The byte streams a connection runs over: TCP to any host, a Unix socket on the same host.
//!
//! Frames are the same on both; what differs is what the stream can tell about its peer. A
//! Unix socket gives the server the client's process id from the kernel (`SO_PEERCRED`),
//! which is what lets the server move bulk data one-sidedly between the two address spaces
//! (the `local` backend, [`crate::local`]); a TCP peer has no such identity.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

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

    /// Changes the receive timeout.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Tcp(stream) => stream.set_read_timeout(timeout),
            Self::Unix(stream) => stream.set_read_timeout(timeout),
        }
    }

    /// Whether the server has closed its end (or sent bytes nobody asked for) while the
    /// connection sat unused: a look at the socket that neither waits nor consumes.
    pub fn closed_by_peer(&self) -> bool {
        use std::os::fd::AsRawFd;
        let fd = match self {
            Self::Tcp(stream) => stream.as_raw_fd(),
            Self::Unix(stream) => stream.as_raw_fd(),
        };
        let mut byte = 0u8;
        // SAFETY: a one-byte peek into a local byte on a socket this value owns.
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

    /// Stops sending; the server sees the end of the stream once it has read what was sent.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Self::Tcp(stream) => stream.shutdown(std::net::Shutdown::Write),
            Self::Unix(stream) => stream.shutdown(std::net::Shutdown::Write),
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
