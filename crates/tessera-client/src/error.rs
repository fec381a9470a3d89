//! The client's error type: every failure a caller can see, each naming what was wrong.

use tessera_net::NetError;
use tessera_proto::ErrorCode;
use thiserror::Error;

/// A failed client call.
#[derive(Debug, Error)]
pub enum ClientError {
    /// A server refused the request; the message names the server and the path or handle.
    #[error("{}", tessera_proto::error::describe(*code, message))]
    Server {
        /// What kind of failure.
        code: ErrorCode,
        /// Details from the server.
        message: String,
    },
    /// A server could not be reached, timed out, or broke the protocol.
    #[error(transparent)]
    Net(NetError),
    /// A list or piece over a named limit.
    #[error("{what}: {limit} is {value}, over the limit of {max}")]
    LimitExceeded {
        /// The call and file.
        what: String,
        /// Name of the limit.
        limit: &'static str,
        /// What was asked for.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// A malformed argument (list totals that differ, a bad offset, ...).
    #[error("{0}")]
    InvalidArgument(String),
    /// The file is not open for this operation.
    #[error("{path} is open for {mode}, not for {operation}")]
    BadMode {
        /// The file.
        path: String,
        /// How it is open.
        mode: &'static str,
        /// What was attempted.
        operation: &'static str,
    },
    /// A range lock's lease ended before the work it guarded was done, so another writer may
    /// have changed the locked bytes meanwhile: the outcome of that work is unknown.
    #[error("{path}: the lock on bytes [{start}, {end}) outlived its lease of {lease_ms} ms before the write under it finished; a concurrent writer may have changed those bytes")]
    LeaseExpired {
        /// The file.
        path: String,
        /// First locked byte.
        start: u64,
        /// One past the last locked byte.
        end: u64,
        /// The lease asked for.
        lease_ms: u64,
    },
    /// A collective operation failed among its participants: the communicator broke (a
    /// process left, a message over its limit, a timeout), or the participants disagree.
    #[error("collective: {0}")]
    Collective(String),
    /// The cluster file is missing or malformed.
    #[error("cluster file {path}: {detail}")]
    Config {
        /// The cluster file.
        path: String,
        /// What is wrong with it.
        detail: String,
    },
}

impl ClientError {
    /// The server's error code, for a refused request.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Server { code, .. } => Some(*code),
            Self::LimitExceeded { .. } => Some(ErrorCode::LimitExceeded),
            Self::InvalidArgument(_) => Some(ErrorCode::InvalidArgument),
            Self::BadMode { .. } | Self::Net(NetError::Auth { .. }) => {
                Some(ErrorCode::PermissionDenied)
            }
            Self::Net(NetError::Remote { error, .. }) => Some(error.code),
            Self::Net(_) | Self::Collective(_) => Some(ErrorCode::Unavailable),
            Self::LeaseExpired { .. } => Some(ErrorCode::Busy),
            Self::Config { .. } => None,
        }
    }

    /// The errno of this failure, for every edge that hands failures to POSIX callers
    /// (Python, the C API, the MPI-IO library's POSIX calls through it; the mount turns the
    /// failures that never reached a server into `EIO`).
    ///
    /// A server's refusal, and a failure the client found itself, is its code's errno
    /// ([`ErrorCode::errno`], the one table); a failure of the transport has the socket's
    /// errno, a bad cluster file `EINVAL`, a broken collective `ECOMM`.
    pub fn errno(&self) -> i32 {
        match self {
            Self::Net(NetError::TimedOut { .. }) => libc::ETIMEDOUT,
            Self::Net(NetError::Connect { .. } | NetError::NotAsked { .. }) => libc::ECONNREFUSED,
            Self::Net(NetError::Io { .. }) => libc::ECONNRESET,
            Self::Net(NetError::Protocol { .. } | NetError::WrongServer { .. }) => libc::EPROTO,
            Self::Config { .. } => libc::EINVAL,
            Self::Collective(_) => libc::ECOMM,
            _ => self.code().map_or(libc::EIO, ErrorCode::errno),
        }
    }
}

impl From<NetError> for ClientError {
    fn from(error: NetError) -> Self {
        match error {
            NetError::Remote { peer, error } => Self::Server {
                code: error.code,
                message: format!("{} (from {peer})", error.message),
            },
            other => Self::Net(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_take_the_table_and_transport_failures_their_own_errno() {
        let refused = ClientError::Server {
            code: ErrorCode::Busy,
            message: "/f".to_owned(),
        };
        assert_eq!(refused.errno(), ErrorCode::Busy.errno());
        let timed_out = ClientError::Net(NetError::TimedOut {
            peer: "iod 0".to_owned(),
            timeout_ms: 1,
        });
        assert_eq!(timed_out.errno(), libc::ETIMEDOUT);
        let lease = ClientError::LeaseExpired {
            path: "/f".to_owned(),
            start: 0,
            end: 1,
            lease_ms: 1,
        };
        assert_eq!(lease.errno(), libc::EBUSY);
        let config = ClientError::Config {
            path: "c".to_owned(),
            detail: "d".to_owned(),
        };
        assert_eq!(config.errno(), libc::EINVAL);
        assert_eq!(
            ClientError::InvalidArgument("x".to_owned()).errno(),
            libc::EINVAL
        );
    }
}
