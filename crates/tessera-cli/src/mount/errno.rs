//! Client errors as the errno a FUSE reply carries: the one place they are mapped.
//!
//! A refusal by a server maps by its `ErrorCode`; a server that cannot be reached or timed
//! out is `EIO` (the call may be retried: the client reconnects on the next one). The mount
//! daemon logs the full message (naming the path and server) at debug level, since the
//! kernel passes only the number on.

use fuser::Errno;
use tessera_client::{ClientError, ErrorCode};

/// What the failed call was, where POSIX gives the same refusal different numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A call whose refusal for want of rights is `EACCES` (open, create, lookup, unlink...).
    Access,
    /// chmod and chown: a caller who is not the owner gets `EPERM`.
    Owner,
}

/// The errno for `error` from a call of kind `call`.
pub fn errno(error: &ClientError, call: Call) -> Errno {
    let Some(code) = error.code() else {
        return Errno::EIO;
    };
    match code {
        ErrorCode::NotFound => Errno::ENOENT,
        ErrorCode::Exists => Errno::EEXIST,
        ErrorCode::NotDirectory => Errno::ENOTDIR,
        ErrorCode::IsDirectory => Errno::EISDIR,
        ErrorCode::NotEmpty => Errno::ENOTEMPTY,
        ErrorCode::InvalidArgument => Errno::EINVAL,
        ErrorCode::LimitExceeded => Errno::EFBIG,
        ErrorCode::UnknownHandle => Errno::ESTALE,
        ErrorCode::PermissionDenied => match call {
            Call::Access => Errno::EACCES,
            Call::Owner => Errno::EPERM,
        },
        ErrorCode::Busy => Errno::EAGAIN,
        ErrorCode::NoSpace => Errno::ENOSPC,
        ErrorCode::Protocol => Errno::EPROTO,
        ErrorCode::Io
        | ErrorCode::Unavailable
        | ErrorCode::Internal
        | ErrorCode::UnknownView
        | ErrorCode::RemoteAccessRefused
        | ErrorCode::BadAddress
        | ErrorCode::UnknownRegion => Errno::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: ErrorCode) -> ClientError {
        ClientError::Server {
            code,
            message: "/f".to_owned(),
        }
    }

    #[test]
    fn refusals_map_to_their_errno() {
        let cases = [
            (ErrorCode::NotFound, Errno::ENOENT),
            (ErrorCode::Exists, Errno::EEXIST),
            (ErrorCode::NotEmpty, Errno::ENOTEMPTY),
            (ErrorCode::PermissionDenied, Errno::EACCES),
            (ErrorCode::NoSpace, Errno::ENOSPC),
            (ErrorCode::Unavailable, Errno::EIO),
        ];
        for (code, expected) in cases {
            assert_eq!(errno(&refused(code), Call::Access), expected, "{code:?}");
        }
        assert_eq!(
            errno(&refused(ErrorCode::PermissionDenied), Call::Owner),
            Errno::EPERM
        );
        let config = ClientError::Config {
            path: "c".to_owned(),
            detail: "d".to_owned(),
        };
        assert_eq!(errno(&config, Call::Access), Errno::EIO);
    }
}
