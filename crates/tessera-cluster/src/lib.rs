//! Cluster supervision: `tessera up`, `down` and `restart`, a cluster as background processes.
//!
//! A library so that both binaries use it: `tessera` (the user's commands) and `tessera-bench`
//! (which starts a private cluster when it is given none).
//!
//! Layout of a cluster directory `D`:
//! `D/cluster.toml` (what clients read), `D/key` (the cluster key, mode 0600, made at the
//! first `up`), `D/hosts` (the hostfile of `up --hosts`, if any), `D/mds/meta.redb` (the
//! namespace), `D/iod-N/objects/` (each server's data), `D/run/NAME.pid` (live processes),
//! `D/run/NAME.cmd` (how each server was started: launcher, program, `--listen` address),
//! `D/run/NAME.addr` (the address it bound), `D/run/*.sock` (the iods' and the agent's Unix
//! sockets, open to every local user), `D/log/NAME.log` (server logs). The data
//! directories, the key, the saved commands and the logs are the owner's alone; the cluster
//! file and the sockets are for everyone. `up` and `restart` first check that every part of
//! `D` that exists is this user's and that nobody else may change it (`owned.rs`).
//!
//! A local cluster's ports are chosen by the kernel at its first `up`; each server's command
//! is then saved with the address it got, so `down` + `up`, an `up` that finds some servers
//! running (it starts only the missing ones), and `restart` of one server all put every
//! server back at its old address, and clients that hold the cluster file keep working. A
//! hostfile fixes every address and how each server is started (`hosts.rs`).
//!
//! The modules follow the commands: `up.rs` (`up` and `start`), `local.rs` and `hosted.rs`
//! (starting a local cluster, and the servers of a hostfile), `control.rs` (`down` and
//! `restart`), over `directory.rs` (claiming and preparing the cluster directory, its key and
//! the shared cost model) and `server.rs` (one server process: its command, pid file,
//! start, wait and stop). Their failures are [`ClusterError`] (`error.rs`); the directory's
//! names and the waits are `names.rs`, a leaf every module uses.

mod control;
mod directory;
mod error;
mod hosted;
mod hosts;
pub mod human;
mod local;
pub mod logs;
mod names;
pub mod output;
pub mod owned;
pub mod progress;
mod server;
mod up;

pub use control::{down, restart, DownArgs, RestartArgs};
pub use error::ClusterError;
pub use local::start_local;
pub use names::{HOSTS_FILE, KEY_FILE, LOCAL_SOCKET_MODE};
pub use owned::{private_dir, PRIVATE_DIRECTORY_MODE, PRIVATE_FILE_MODE};
pub use server::{stop_all, tessera_program};
pub use tessera_policy::ServeMode;
pub use up::{serve_flags, start, up, UpArgs};

use std::path::{Path, PathBuf};

/// Binds the Unix socket at `path`, open to every local user ([`LOCAL_SOCKET_MODE`]). Its
/// directory must be root's or this user's and, if others may write it, sticky
/// ([`owned::check_socket_parent`]); a stale socket of this user's is replaced, while a
/// symbolic link, another kind of file or another user's socket there is refused
/// ([`owned::clear_socket_path`]).
pub fn bind_local(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let parent = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    owned::check_socket_parent(parent)?;
    owned::clear_socket_path(path)?;
    // bind() makes the socket file itself and fails on any name already there (a link
    // included), and nobody else can replace it in a directory checked above.
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(LOCAL_SOCKET_MODE))?;
    Ok(listener)
}

/// Where client commands find the cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArg {
    /// Cluster file written by `tessera up` (default: $TESSERA_CLUSTER).
    #[arg(long, env = "TESSERA_CLUSTER")]
    pub cluster: Option<PathBuf>,
}
