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
