//! Client errors as the errno a FUSE reply carries: the one place the mount maps them.
//!
//! The number is the client's (`ClientError::errno`, over the one table of
//! `ErrorCode::errno`, docs/PROTOCOL.md §4.9), with two adjustments of the mount's own: a
//! failure that never got a server's answer (a server that cannot be reached, timed out or
//! sent nonsense, a bad cluster file, a broken collective) is `EIO`, as on an NFS soft mount,
//! since callers of a file system expect no socket errno (the call may be retried: the client
//! reconnects on the next one); and chmod or chown refused for want of rights is `EPERM`. The
//! mount daemon logs the full message (naming the path and server) at debug level, since the
//! kernel passes only the number on.

use fuser::Errno;
use tessera_client::{ClientError, ErrorCode};
use tessera_net::NetError;

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
    let number = match error {
        ClientError::Net(net)
            if net.remote().is_none() && !matches!(net, NetError::Auth { .. }) =>
        {
            libc::EIO
        }
        ClientError::Config { .. } | ClientError::Collective(_) => libc::EIO,
        _ if call == Call::Owner && error.code() == Some(ErrorCode::PermissionDenied) => {
            libc::EPERM
        }
        _ => error.errno(),
    };
    Errno::from_i32(number)
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
            (ErrorCode::Busy, Errno::EBUSY),
            (ErrorCode::LimitExceeded, Errno::EFBIG),
        ];
        for (code, expected) in cases {
            assert_eq!(errno(&refused(code), Call::Access), expected, "{code:?}");
        }
        // Every other refusal is the one table's errno.
        for code in (0..=u16::MAX).filter_map(|value| ErrorCode::from_u16(value).ok()) {
            assert_eq!(errno(&refused(code), Call::Access).code(), code.errno());
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
        let unreachable = ClientError::Net(NetError::TimedOut {
            peer: "iod 0".to_owned(),
            timeout_ms: 1,
        });
        assert_eq!(errno(&unreachable, Call::Access), Errno::EIO);
        let refused = ClientError::Net(NetError::Auth {
            peer: "mds".to_owned(),
            detail: "d".to_owned(),
        });
        assert_eq!(errno(&refused, Call::Access), Errno::EACCES);
    }
}
