//! `tessera down` and `tessera restart`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tessera_client::ClusterConfig;

use crate::error::ClusterError;
use crate::names::STARTUP_TIMEOUT;
use crate::owned;
use crate::server::{
    log_tail, pid_files, run_dir, saved_command, spawn_server, stop_all, stop_one,
    wait_until_answering,
};

/// The pause before a server whose port was still held (a stopped server's, in TIME_WAIT) is
/// started again.
const PORT_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Arguments of `tessera down`.
#[derive(Debug, clap::Args)]
pub struct DownArgs {
    /// Cluster directory given to `tessera up`.
    #[arg(long)]
    dir: PathBuf,
}

/// Stops a cluster.
pub fn down(args: &DownArgs) -> Result<(), ClusterError> {
    if !args.dir.join("cluster.toml").exists() && pid_files(&args.dir).is_empty() {
        return Err(ClusterError::NoCluster {
            dir: args.dir.clone(),
        });
    }
    let stopped = stop_all(&args.dir);
    crate::outln!(
        "tessera: stopped {stopped} server processes in {}",
        args.dir.display()
    );
    Ok(())
}

/// Arguments of `tessera restart`.
#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// Which server: `mds`, `iod` (with its index) or `agent` (with its line among a
    /// hostfile's agent lines, if more than one).
    role: String,
    /// The iod's index (or the agent's line).
    index: Option<u16>,
    /// Cluster directory given to `tessera up`.
    #[arg(long)]
    dir: PathBuf,
}

/// Stops one server of a cluster (SIGTERM, then SIGKILL after the shutdown timeout) and
/// starts it again with the command `up` saved, at the same address. The other servers keep
/// running; clients reconnect to it by themselves.
pub fn restart(args: &RestartArgs) -> Result<(), ClusterError> {
    let name = match (args.role.as_str(), args.index) {
        ("mds", None) => "mds".to_owned(),
        ("iod", Some(index)) => format!("iod-{index}"),
        ("agent", None) if saved_command(&args.dir, "agent").is_some() => "agent".to_owned(),
        ("agent", line) => format!("agent-{}", line.unwrap_or(0)),
        ("iod", None) => return Err(ClusterError::RestartWithoutIndex),
        (role, _) => {
            return Err(ClusterError::RestartRole {
                role: role.to_owned(),
            })
        }
    };
    owned::check_cluster_dir(&args.dir)?;
    let command = saved_command(&args.dir, &name).ok_or_else(|| ClusterError::NoSavedCommand {
        name: name.clone(),
        run: run_dir(&args.dir),
    })?;
    let config = ClusterConfig::load(&args.dir.join("cluster.toml"))?;
    let pid_file = run_dir(&args.dir).join(format!("{name}.pid"));
    let was_running = stop_one(&args.dir, &pid_file);
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    // The old process may still hold its port for a moment (a remote server hangs up after
    // its ssh is gone): a start that finds the port taken is tried again until the deadline.
    let server = loop {
        let mut server = spawn_server(&args.dir, &name, command.clone())?;
        match wait_until_answering(&config, std::slice::from_mut(&mut server), deadline) {
            Ok(()) => break server,
            Err(err) => {
                let exited = matches!(server.child.try_wait(), Ok(Some(_)));
                // A port held by something that cannot prove the key will not come free
                // by waiting (the server's log says "squatting").
                let tail = log_tail(&server.log_file);
                if exited
                    && tail.contains("Address already in use")
                    && !tail.contains("squatting")
                    && Instant::now() < deadline
                {
                    std::thread::sleep(PORT_RETRY_PAUSE);
                    continue;
                }
                stop_one(&args.dir, &pid_file);
                return Err(err);
            }
        }
    };
    crate::outln!(
        "tessera: {} {name} (pid {}){}",
        if was_running { "restarted" } else { "started" },
        server.child.id(),
        server
            .command
            .value_of("--listen")
            .map(|address| format!(" at {address}"))
            .unwrap_or_default()
    );
    Ok(())
}
