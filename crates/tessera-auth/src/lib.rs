//! Who may talk to a Tessera cluster, and what they may touch.
//!
//! One secret, the **cluster key** ([`ClusterKey`], a file of mode 0600 that every server and
//! every host's agent holds), anchors everything:
//! - a **credential** ([`tessera_proto::Credentials`]) names a uid, its groups, the host and
//!   an expiry, signed with the key by the agent of the caller's host ([`agent`]), which learns
//!   the caller from the kernel (`SO_PEERCRED`), never from the caller's word;
//! - every connection starts with a **handshake** ([`handshake`]): the server sends a fresh
//!   nonce, the client answers with its credential and a proof over the nonce that only a key
//!   holder (the agent, or a process that reads the key) can make, and the server proves the
//!   same back;
//! - the mds answers an open with a **capability** ([`capability`]): handle, rights, uid and
//!   expiry signed with the key, which every data request to an iod carries and the iod checks
//!   before it touches storage.
//!
//! The tags are HMAC-SHA-256 (`hmac` + `sha2`); nothing here is home-made cryptography.

pub mod agent;
pub mod authenticator;
pub mod capability;
pub mod handshake;
pub mod key;

pub use authenticator::{AgentClient, Answer, Authenticator, KeySigner, NoAuthenticator};
pub use capability::{CapabilityCache, Grant, Rights};
pub use handshake::ServerAuth;
pub use key::ClusterKey;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a credential signed by the agent (or by a key holder for itself) is accepted.
pub const CREDENTIAL_LIFETIME: Duration = Duration::from_hours(1);

/// How long a capability the mds signs is accepted, unless the mds is told otherwise
/// (`tessera mds --capability-seconds`).
pub const CAPABILITY_LIFETIME: Duration = Duration::from_hours(1);

/// A client renews a credential or a capability once less than this share of its lifetime
/// is left (a quarter), so a request never leaves with one about to expire.
pub const RENEW_FRACTION: u32 = 4;

/// How long a server waits for a new connection's `Hello`, and a client for the challenge
/// and the welcome.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a credential, capability, handshake or key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The key file is missing, unreadable, malformed or readable by others.
    #[error("cluster key {path}: {detail}")]
    Key {
        /// The key file.
        path: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A tag does not verify: signed with another key, or a field was changed.
    #[error("{what} is not signed with this cluster's key")]
    BadSignature {
        /// "the credential", "the capability", "the handshake proof".
        what: &'static str,
    },
    /// Past its expiry.
    #[error("{what} expired {ago_s} s ago")]
    Expired {
        /// "the credential", "the capability".
        what: &'static str,
        /// Seconds since it expired.
        ago_s: u64,
    },
    /// Well signed, but not for this use.
    #[error("{0}")]
    Refused(String),
    /// The agent could not be reached or answered with an error.
    #[error("agent at {socket}: {detail}")]
    Agent {
        /// The agent's socket.
        socket: String,
        /// What happened.
        detail: String,
    },
}

/// Seconds since the Unix epoch, now.
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Whether something expiring at `expires_s` after being issued for `lifetime` should be
/// renewed now.
pub fn due_for_renewal(expires_s: u64, lifetime: Duration) -> bool {
    let margin = lifetime.as_secs() / u64::from(RENEW_FRACTION);
    now_s().saturating_add(margin) >= expires_s
}

/// Checks an expiry.
fn check_expiry(what: &'static str, expires_s: u64) -> Result<(), AuthError> {
    let now = now_s();
    if now >= expires_s {
        return Err(AuthError::Expired {
            what,
            ago_s: now - expires_s,
        });
    }
    Ok(())
}

/// This host's name, as credentials carry it.
pub fn host_name() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most `buffer.len()` bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if rc != 0 {
        return "unknown".to_owned();
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    let name = String::from_utf8_lossy(&buffer[..end]).into_owned();
    name.chars()
        .take(tessera_proto::limits::HOST_NAME_BYTES_MAX / 4)
        .collect()
}
