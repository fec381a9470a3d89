//! Errors of the client side of the transport; every one names the peer server.

use tessera_proto::{RemoteError, WireError};
use thiserror::Error;

/// A failed exchange with one server.
#[derive(Debug, Error)]
pub enum NetError {
    /// The server could not be reached.
    #[error("{peer} is unavailable: {source}")]
    Connect {
        /// The server, by role, index and address.
        peer: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The server did not answer within the timeout.
    #[error("{peer} did not answer within {timeout_ms} ms")]
    TimedOut {
        /// The server.
        peer: String,
        /// The timeout that expired.
        timeout_ms: u64,
    },
    /// The socket failed mid-exchange (the server closed it or crashed).
    #[error("connection to {peer} failed: {source}")]
    Io {
        /// The server.
        peer: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The server sent bytes that are not a valid reply.
    #[error("{peer} sent an invalid reply: {detail}")]
    Protocol {
        /// The server.
        peer: String,
        /// What was wrong.
        detail: String,
    },
    /// Memory for a one-sided transfer could not be registered.
    #[error("registering memory for a transfer with {peer} failed: {detail}")]
    Register {
        /// The server.
        peer: String,
        /// What the registrar said.
        detail: String,
    },
    /// The handshake failed: this process has no credential (no readable key, no agent), or
    /// the server did not prove it holds the cluster key.
    #[error("authenticating with {peer}: {detail}")]
    Auth {
        /// The server.
        peer: String,
        /// What failed.
        detail: String,
    },
    /// Another server than the one expected answered at the address.
    #[error("{peer} is not the server the cluster file names: {detail}; nothing was sent")]
    WrongServer {
        /// The server, by the name and address the client expected.
        peer: String,
        /// Who was expected, who answered.
        detail: String,
    },
    /// The server failed to answer a moment ago, and is not asked again yet
    /// (`Pool::with_retry_after`).
    #[error("{peer} did not answer a moment ago ({detail}); not asked again for {seconds} s")]
    NotAsked {
        /// The server.
        peer: String,
        /// What happened when it was last asked.
        detail: String,
        /// Seconds until it is asked again.
        seconds: u64,
    },
    /// The server refused the request.
    #[error("{peer}: {error}")]
    Remote {
        /// The server.
        peer: String,
        /// Its error reply.
        error: RemoteError,
    },
}

impl NetError {
    /// The error reply, if the server refused the request (the connection is still usable).
    pub fn remote(&self) -> Option<&RemoteError> {
        match self {
            Self::Remote { error, .. } => Some(error),
            _ => None,
        }
    }

    pub(crate) fn protocol(peer: &str, err: &WireError) -> Self {
        Self::Protocol {
            peer: peer.to_owned(),
            detail: err.to_string(),
        }
    }
}
