//! Errors of the wire layer and the error codes servers send back.
//!
//! [`WireError`] says why received bytes could not be decoded; a server that gets one drops
//! the connection. [`ErrorCode`] travels in an error reply, with a message naming the path,
//! handle, server or limit involved; clients map it into their own error type once.

use thiserror::Error;

/// Why bytes received from a peer are not a valid frame or message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The body ended before a field was complete.
    #[error("message truncated: needed {needed} bytes, {available} left")]
    Truncated {
        /// Bytes the field needed.
        needed: usize,
        /// Bytes left in the body.
        available: usize,
    },
    /// The body had bytes left after the message.
    #[error("{count} trailing bytes after the message")]
    TrailingBytes {
        /// Unread bytes.
        count: usize,
    },
    /// A count or length exceeded its named limit.
    #[error("{limit} is {value}, over the limit of {max}")]
    OverLimit {
        /// Name of the limit (as in `limits.rs`).
        limit: &'static str,
        /// Value received.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// A field held a value outside its domain.
    #[error("bad value {value} for {field}")]
    BadValue {
        /// Field name.
        field: &'static str,
        /// Value received.
        value: u64,
    },
    /// A string field was not UTF-8.
    #[error("{field} is not valid UTF-8")]
    BadUtf8 {
        /// Field name.
        field: &'static str,
    },
    /// The frame did not start with the Tessera magic.
    #[error("bad magic {found:#010x}: not a Tessera peer")]
    BadMagic {
        /// The four bytes found.
        found: u32,
    },
    /// The peer speaks another protocol version.
    #[error("protocol version {found} (this build speaks {expected})")]
    BadVersion {
        /// Version received.
        found: u8,
        /// Version of this build.
        expected: u8,
    },
    /// An encoded datatype was refused (malformed, or over a datatype limit).
    #[error("datatype refused: {0}")]
    Datatype(String),
    /// An opcode this server does not serve.
    #[error("unknown opcode {opcode:#04x}")]
    UnknownOpcode {
        /// The opcode received.
        opcode: u8,
    },
}

/// The code of an error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    /// A path or name does not exist.
    NotFound = 1,
    /// The name already exists.
    Exists = 2,
    /// A path component is not a directory.
    NotDirectory = 3,
    /// The operation needs a file but found a directory.
    IsDirectory = 4,
    /// The directory is not empty.
    NotEmpty = 5,
    /// An argument is malformed (bad path, mode, layout, ...).
    InvalidArgument = 6,
    /// A count or size is over a named limit.
    LimitExceeded = 7,
    /// The file handle is not known to this server.
    UnknownHandle = 8,
    /// The server's storage failed.
    Io = 9,
    /// The request broke the protocol.
    Protocol = 10,
    /// The operation is not allowed (mode, open mode, capability).
    PermissionDenied = 11,
    /// The server is short of a resource; retry later.
    Busy = 12,
    /// A peer server the request needed did not answer.
    Unavailable = 13,
    /// An invariant broke inside the server.
    Internal = 14,
    /// The view id is not declared on this server (never, or lost in a restart or eviction):
    /// declare it again.
    UnknownView = 15,
    /// The server may not reach the client's memory one-sidedly (the kernel or fabric refused
    /// it): the client falls back to a transfer in messages.
    RemoteAccessRefused = 16,
    /// A memory segment the client described for a one-sided transfer is not mapped, or
    /// shorter than described: the message names the segment.
    BadAddress = 17,
    /// A one-sided request names a shared region (`RemoteAccess::Shared`) that was not
    /// shared on this connection, or was unmapped since (least recently used past
    /// `SHARED_REGIONS_PER_CONNECTION_MAX`): share it again (`ShareRegion`) and retry.
    UnknownRegion = 18,
    /// The server's disk is full: nothing was changed. The request may succeed once space
    /// is freed there (the message names the store's path).
    NoSpace = 19,
}

impl ErrorCode {
    /// Decodes a code received on the wire.
    pub fn from_u16(value: u16) -> Result<Self, WireError> {
        Ok(match value {
            1 => Self::NotFound,
            2 => Self::Exists,
            3 => Self::NotDirectory,
            4 => Self::IsDirectory,
            5 => Self::NotEmpty,
            6 => Self::InvalidArgument,
            7 => Self::LimitExceeded,
            8 => Self::UnknownHandle,
            9 => Self::Io,
            10 => Self::Protocol,
            11 => Self::PermissionDenied,
            12 => Self::Busy,
            13 => Self::Unavailable,
            14 => Self::Internal,
            15 => Self::UnknownView,
            16 => Self::RemoteAccessRefused,
            17 => Self::BadAddress,
            18 => Self::UnknownRegion,
            19 => Self::NoSpace,
            other => {
                return Err(WireError::BadValue {
                    field: "error code",
                    value: u64::from(other),
                })
            }
        })
    }

    /// A short, stable name (used in messages and logs).
    pub fn name(self) -> &'static str {
        match self {
            Self::NotFound => "not found",
            Self::Exists => "already exists",
            Self::NotDirectory => "not a directory",
            Self::IsDirectory => "is a directory",
            Self::NotEmpty => "directory not empty",
            Self::InvalidArgument => "invalid argument",
            Self::LimitExceeded => "limit exceeded",
            Self::UnknownHandle => "unknown file handle",
            Self::Io => "storage error",
            Self::Protocol => "protocol error",
            Self::PermissionDenied => "permission denied",
            Self::Busy => "busy",
            Self::Unavailable => "server unavailable",
            Self::Internal => "internal error",
            Self::UnknownView => "unknown view",
            Self::RemoteAccessRefused => "one-sided access refused",
            Self::BadAddress => "bad remote address",
            Self::UnknownRegion => "unknown shared region",
            Self::NoSpace => "no space left",
        }
    }
}

impl ErrorCode {
    /// The errno a POSIX caller expects for this code: the one table every edge uses (the
    /// mount, the C API and through it the MPI-IO library, Python). docs/PROTOCOL.md §4.9
    /// lists it ("Error codes and errno"), and a test keeps the two equal.
    ///
    /// Where the edges once disagreed, the reason for the choice is given beside the code.
    pub fn errno(self) -> i32 {
        match self {
            Self::NotFound => libc::ENOENT,
            Self::Exists => libc::EEXIST,
            Self::NotDirectory => libc::ENOTDIR,
            Self::IsDirectory => libc::EISDIR,
            Self::NotEmpty => libc::ENOTEMPTY,
            Self::InvalidArgument => libc::EINVAL,
            // Not E2BIG (exec's argument list): the limit a POSIX caller meets is a file's
            // size (`FILE_BYTES_MAX`), for which write and truncate give EFBIG.
            Self::LimitExceeded => libc::EFBIG,
            // Not ENOENT: the name may still exist; the object behind an open file is gone,
            // which is NFS's "stale file handle".
            Self::UnknownHandle => libc::ESTALE,
            // Not EIO: the peer broke the protocol, the storage did not fail.
            Self::Protocol => libc::EPROTO,
            Self::PermissionDenied => libc::EACCES,
            // Not EAGAIN: the calls are blocking, and EAGAIN reads as "would block" (Python
            // raises BlockingIOError); a lock or server that is busy is EBUSY.
            Self::Busy => libc::EBUSY,
            Self::Io
            | Self::Internal
            // Not EHOSTUNREACH (a socket's error, and the route may be fine): a server the
            // call needed is down, which a file system's callers know as EIO.
            | Self::Unavailable
            // The client handles these three itself (declares the view again, moves the
            // data in messages, shares the region again); one that reaches a caller is EIO.
            | Self::UnknownView
            | Self::RemoteAccessRefused
            | Self::UnknownRegion => libc::EIO,
            // Not EIO: the caller's memory segment is not mapped, POSIX's EFAULT.
            Self::BadAddress => libc::EFAULT,
            Self::NoSpace => libc::ENOSPC,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// "CODE: MESSAGE", without repeating the code when the message already starts with it
/// ("permission denied: /a (needs read on /a)").
pub fn describe(code: ErrorCode, message: &str) -> String {
    let name = code.name();
    if message.starts_with(name) {
        message.to_owned()
    } else {
        format!("{name}: {message}")
    }
}

/// An error a server sends back: a code and a message naming what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}", describe(*code, message))]
pub struct RemoteError {
    /// What kind of failure.
    pub code: ErrorCode,
    /// Names the path, handle, server or limit involved.
    pub message: String,
}

impl RemoteError {
    /// A new error reply.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A [`ErrorCode::LimitExceeded`] error naming the limit.
    pub fn over_limit(limit: &str, value: u64, max: u64) -> Self {
        Self::new(
            ErrorCode::LimitExceeded,
            format!("{limit} is {value}, over the limit of {max}"),
        )
    }
}

impl From<WireError> for RemoteError {
    fn from(err: WireError) -> Self {
        let code = match err {
            WireError::OverLimit { .. } => ErrorCode::LimitExceeded,
            _ => ErrorCode::Protocol,
        };
        Self::new(code, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code, found by decoding every u16 (a new variant is found once `from_u16`
    /// knows it).
    fn every_code() -> Vec<ErrorCode> {
        (0..=u16::MAX)
            .filter_map(|value| ErrorCode::from_u16(value).ok())
            .collect()
    }

    /// The errno each code is documented to map to, by name.
    const DOCUMENTED: [(ErrorCode, &str); 19] = [
        (ErrorCode::NotFound, "ENOENT"),
        (ErrorCode::Exists, "EEXIST"),
        (ErrorCode::NotDirectory, "ENOTDIR"),
        (ErrorCode::IsDirectory, "EISDIR"),
        (ErrorCode::NotEmpty, "ENOTEMPTY"),
        (ErrorCode::InvalidArgument, "EINVAL"),
        (ErrorCode::LimitExceeded, "EFBIG"),
        (ErrorCode::UnknownHandle, "ESTALE"),
        (ErrorCode::Io, "EIO"),
        (ErrorCode::Protocol, "EPROTO"),
        (ErrorCode::PermissionDenied, "EACCES"),
        (ErrorCode::Busy, "EBUSY"),
        (ErrorCode::Unavailable, "EIO"),
        (ErrorCode::Internal, "EIO"),
        (ErrorCode::UnknownView, "EIO"),
        (ErrorCode::RemoteAccessRefused, "EIO"),
        (ErrorCode::BadAddress, "EFAULT"),
        (ErrorCode::UnknownRegion, "EIO"),
        (ErrorCode::NoSpace, "ENOSPC"),
    ];

    fn documented(code: ErrorCode) -> &'static str {
        DOCUMENTED
            .iter()
            .find(|(known, _)| *known == code)
            .map_or("none", |(_, name)| name)
    }

    /// The value of an errno name the table uses.
    fn errno_value(name: &str) -> Option<i32> {
        Some(match name {
            "ENOENT" => libc::ENOENT,
            "EEXIST" => libc::EEXIST,
            "ENOTDIR" => libc::ENOTDIR,
            "EISDIR" => libc::EISDIR,
            "ENOTEMPTY" => libc::ENOTEMPTY,
            "EINVAL" => libc::EINVAL,
            "EFBIG" => libc::EFBIG,
            "ESTALE" => libc::ESTALE,
            "EIO" => libc::EIO,
            "EPROTO" => libc::EPROTO,
            "EACCES" => libc::EACCES,
            "EBUSY" => libc::EBUSY,
            "EFAULT" => libc::EFAULT,
            "ENOSPC" => libc::ENOSPC,
            _ => return None,
        })
    }

    #[test]
    fn every_code_has_its_documented_nonzero_errno() {
        let codes = every_code();
        assert_eq!(codes.len(), 19, "codes 1-19");
        for code in codes {
            assert_eq!(ErrorCode::from_u16(code as u16), Ok(code));
            assert_ne!(code.errno(), 0, "{code:?}");
            assert_eq!(
                Some(code.errno()),
                errno_value(documented(code)),
                "{code:?} maps to {}",
                code.errno()
            );
        }
    }

    #[test]
    fn the_protocol_doc_table_matches_errno() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/PROTOCOL.md");
        let doc = std::fs::read_to_string(path).expect("docs/PROTOCOL.md is readable");
        let table = doc
            .split("#### Error codes and errno")
            .nth(1)
            .expect("docs/PROTOCOL.md has the table \"Error codes and errno\"");
        // Rows after the header and its rule, up to the first line that is not a row.
        let rows: Vec<Vec<&str>> = table
            .lines()
            .skip_while(|line| !line.starts_with('|'))
            .take_while(|line| line.starts_with('|'))
            .skip(2)
            .map(|line| line.trim_matches('|').split('|').map(str::trim).collect())
            .collect();
        let codes = every_code();
        assert_eq!(rows.len(), codes.len(), "one row per code");
        for (row, code) in rows.iter().zip(codes) {
            assert_eq!(row[0], (code as u16).to_string(), "row {row:?}");
            assert_eq!(row[1], format!("`{code:?}`"), "row {row:?}");
            let name = row[2].trim_matches('`');
            assert_eq!(name, documented(code), "row {row:?}");
            assert_eq!(errno_value(name), Some(code.errno()), "row {row:?}");
        }
    }
}
