//! Starting the servers of a hostfile (`up --hosts`), each through its launcher at its fixed
//! address.

use std::fs;
use std::path::Path;
use std::time::Instant;

use tessera_client::config::{AuthEntry, IodEntry, MdsEntry};
use tessera_client::ClusterConfig;

use crate::directory::{cluster_key, kept_client_entry, prepare, share_cost_model};
use crate::error::ClusterError;
use crate::hosts;
use crate::names::{AGENT_SOCKET, HOSTS_FILE, STARTUP_TIMEOUT};
use crate::server::{
    absolute, local_socket, run_dir, save_cluster_file, spawn_server, stop_started,
    tessera_program, wait_until_answering, write_private, ServerCommand,
};

/// Starts the servers of the hostfile `hosts` that are not running (each through its
/// launcher, at its fixed address), keeps a copy of the hostfile in `dir/hosts`, and writes
/// the cluster file naming those addresses.
pub(crate) fn start_hosts(
    dir: &Path,
    hosts: &Path,
    stripe_unit: u64,
    mds_flags: &[String],
) -> Result<(ClusterConfig, Vec<String>), ClusterError> {
    let text = fs::read_to_string(hosts).map_err(|source| hosts::HostfileError::Read {
        path: hosts.to_owned(),
        source,
    })?;
    let hostfile = hosts::Hostfile::load(hosts)?;
    let alive = prepare(dir)?;
    let kept = dir.join(HOSTS_FILE);
    // Servers that run from another hostfile, or from a local `up` (no hostfile kept), would
    // be mixed with these.
    if !alive.is_empty() && fs::read_to_string(&kept).map_or(true, |old| old != text) {
        return Err(ClusterError::OtherServersRun {
            dir: dir.to_owned(),
            kept,
        });
    }
    if hosts != kept {
        write_private(&kept, &text)?;
    }
    let (key, cluster_id) = cluster_key(dir)?;
    let program = tessera_program()?;
    let here: Vec<u16> = hostfile
        .iods
        .iter()
        .zip(0u16..)
        .filter(|((_, launcher), _)| launcher.is_this_host())
        .map(|(_, index)| index)
        .collect();
    share_cost_model(dir, &here)?;
    let agent_socket = absolute(&run_dir(dir).join(AGENT_SOCKET));
    let servers = server_commands(
        dir,
        &hostfile,
        &Started {
            program: &program,
            key: &key,
            agent_socket: &agent_socket,
        },
        stripe_unit,
        mds_flags,
    );
    let config = hosts_config(dir, &hostfile, &key, &agent_socket, cluster_id);
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut started = Vec::new();
    let result = (|| {
        let mut starting = Vec::new();
        for (name, launcher, program) in servers {
            if alive.contains(&name) {
                continue;
            }
            let command = ServerCommand {
                launcher: launcher.prefix(),
                program,
                address_here: launcher.is_this_host(),
            };
            starting.push(spawn_server(dir, &name, command)?);
            started.push(name);
        }
        save_cluster_file(dir, &config)?;
        wait_until_answering(&config, &mut starting, deadline)?;
        Ok::<_, ClusterError>(())
    })();
    match result {
        Ok(()) => Ok((config, started)),
        Err(err) => {
            stop_started(dir, &started);
            Err(err)
        }
    }
}

/// What every server of a hostfile is started with.
struct Started<'a> {
    /// The tessera binary (at the same path on every host).
    program: &'a str,
    /// The cluster key.
    key: &'a Path,
    /// The agents' socket.
    agent_socket: &'a Path,
}

/// Each server of `hostfile`, mds after the iods and agents last: its name, launcher and
/// program words.
fn server_commands(
    dir: &Path,
    hostfile: &hosts::Hostfile,
    started: &Started<'_>,
    stripe_unit: u64,
    mds_flags: &[String],
) -> Vec<(String, hosts::Launcher, Vec<String>)> {
    let (mds_address, mds_launcher) = &hostfile.mds;
    let Started {
        program,
        key,
        agent_socket,
    } = *started;
    let mut servers: Vec<(String, hosts::Launcher, Vec<String>)> = Vec::new();
    for ((address, launcher), index) in hostfile.iods.iter().zip(0u16..) {
        let mut args = vec![
            program.to_owned(),
            "iod".into(),
            "--index".into(),
            index.to_string(),
            "--data".into(),
            absolute(&dir.join(format!("iod-{index}")))
                .display()
                .to_string(),
            "--key".into(),
            key.display().to_string(),
            "--listen".into(),
            address.clone(),
            "--mds".into(),
            mds_address.clone(),
        ];
        let socket = (*launcher == hosts::Launcher::Local)
            .then(|| local_socket(dir, index))
            .flatten();
        if let Some(socket) = socket {
            args.extend(["--local-socket".into(), socket.display().to_string()]);
        }
        servers.push((format!("iod-{index}"), launcher.clone(), args));
    }
    let mut mds_args = vec![
        program.to_owned(),
        "mds".to_owned(),
        "--db".to_owned(),
        absolute(&dir.join("mds").join("meta.redb"))
            .display()
            .to_string(),
        "--stripe-unit".to_owned(),
        stripe_unit.to_string(),
        "--key".to_owned(),
        key.display().to_string(),
        "--listen".to_owned(),
        mds_address.clone(),
    ];
    for (address, _) in &hostfile.iods {
        mds_args.extend(["--iod".to_owned(), address.clone()]);
    }
    mds_args.extend(mds_flags.iter().cloned());
    servers.push(("mds".to_owned(), mds_launcher.clone(), mds_args));
    for (line, (_, launcher)) in hostfile.agents.iter().enumerate() {
        let args = vec![
            program.to_owned(),
            "agent".to_owned(),
            "--key".to_owned(),
            key.display().to_string(),
            "--socket".to_owned(),
            agent_socket.display().to_string(),
        ];
        servers.push((format!("agent-{line}"), launcher.clone(), args));
    }
    servers
}

/// The cluster file naming the servers of `hostfile`.
fn hosts_config(
    dir: &Path,
    hostfile: &hosts::Hostfile,
    key: &Path,
    agent_socket: &Path,
    cluster_id: u64,
) -> ClusterConfig {
    ClusterConfig {
        mds: MdsEntry {
            address: hostfile.mds.0.clone(),
        },
        iods: hostfile
            .iods
            .iter()
            .zip(0u16..)
            .map(|((address, launcher), index)| IodEntry {
                index,
                address: address.clone(),
                local: (*launcher == hosts::Launcher::Local)
                    .then(|| local_socket(dir, index))
                    .flatten(),
            })
            .collect(),
        ofi: None,
        auth: AuthEntry {
            key: Some(key.to_owned()),
            agent: (!hostfile.agents.is_empty()).then(|| agent_socket.to_owned()),
        },
        cluster_id: Some(cluster_id),
        client: kept_client_entry(dir),
    }
}
