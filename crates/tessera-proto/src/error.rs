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
