//! The names of a cluster directory's parts, the mode of its sockets and how long the
//! commands wait: a leaf that every module of this crate uses.

use std::time::Duration;

/// Mode of the servers' and the agent's Unix sockets: any local user may connect, since every
/// connection authenticates and every request carries a credential or a capability. The
/// sockets are the only parts of a cluster directory others may write (connecting needs it).
pub const LOCAL_SOCKET_MODE: u32 = 0o666;

/// How long `up` waits for every server to answer.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// How long `down` waits for a server to exit after SIGTERM before SIGKILL.
pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The copy of the hostfile `up --hosts` keeps in the cluster directory.
pub const HOSTS_FILE: &str = "hosts";

/// The cluster key in a cluster directory.
pub const KEY_FILE: &str = "key";

/// The agent's socket in the cluster directory's `run/`.
pub(crate) const AGENT_SOCKET: &str = "agent.sock";

/// Longest Unix socket path the kernel takes (`sun_path` holds 108 bytes with the NUL).
pub(crate) const UNIX_SOCKET_PATH_BYTES_MAX: usize = 107;
