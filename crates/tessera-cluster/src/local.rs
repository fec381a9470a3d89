//! Starting a local cluster: the iods, the mds and the agent of `up --servers N` (and of the
//! benches' private clusters) as children of this process, on loopback.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tessera_client::config::{AuthEntry, IodEntry, MdsEntry, OfiEntry};
use tessera_client::ClusterConfig;
use tessera_proto::limits::SERVERS_MAX;

use crate::directory::{cluster_key, kept_client_entry, prepare, share_cost_model};
use crate::error::ClusterError;
use crate::names::{AGENT_SOCKET, STARTUP_TIMEOUT, UNIX_SOCKET_PATH_BYTES_MAX};
use crate::server::{
    absolute, local_socket, previous_address, run_dir, save_cluster_file, spawn_server,
    stop_started, tessera_program, wait_for_address, wait_until_answering, ServerCommand,
};

/// What every server of a local cluster is started with.
struct Local<'a> {
    dir: &'a Path,
    program: String,
    key: PathBuf,
    ofi: Option<&'a OfiEntry>,
    iod_metrics: &'a [String],
    iod_flags: &'a [String],
}

/// [`start`](crate::start), with the iods serving one-sided transfers over the fabric `ofi`
/// names, `mds_flags` given to the mds (`--root-squash`, `--capability-seconds N`), iod i
/// serving its metrics on `iod_metrics[i]` (none when the list is shorter) and `iod_flags`
/// given to every iod (`--serve MODE`, `--cache-bytes N`: [`serve_flags`](crate::serve_flags)).
/// Servers of `dir` that are running are kept; the others start at the address they had
/// before (the kernel picks one at the first start). Returns the cluster and the names of the
/// servers started.
pub fn start_local(
    dir: &Path,
    servers: u16,
    stripe_unit: u64,
    ofi: Option<&OfiEntry>,
    mds_flags: &[String],
    iod_metrics: &[String],
    iod_flags: &[String],
) -> Result<(ClusterConfig, Vec<String>), ClusterError> {
    if servers == 0 || usize::from(servers) > SERVERS_MAX {
        return Err(ClusterError::ServersOutOfRange {
            servers,
            max: SERVERS_MAX,
        });
    }
    let alive = prepare(dir)?;
    let missing_iods = missing_iods(dir, servers, &alive)?;
    let all: Vec<u16> = (0..servers).collect();
    share_cost_model(dir, &all)?;
    let (key, cluster_id) = cluster_key(dir)?;
    let local = Local {
        dir,
        program: tessera_program()?,
        key,
        ofi,
        iod_metrics,
        iod_flags,
    };
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut started = Vec::new();
    let result = (|| {
        let mut starting = Vec::new();
        for &index in &missing_iods {
            let name = format!("iod-{index}");
            starting.push((index, spawn_server(dir, &name, local.iod_command(index))?));
            started.push(name);
        }
        let mut iod_addresses = Vec::new();
        for index in 0..servers {
            let address = match starting.iter_mut().find(|(at, _)| *at == index) {
                Some((_, server)) => wait_for_address(dir, server, deadline)?,
                None => running_address(dir, &format!("iod-{index}"))?,
            };
            iod_addresses.push(address);
        }
        let mds_address = if alive.contains("mds") {
            running_address(dir, "mds")?
        } else {
            let command = local.mds_command(stripe_unit, &iod_addresses, mds_flags);
            let mut mds = spawn_server(dir, "mds", command)?;
            started.push("mds".to_owned());
            wait_for_address(dir, &mut mds, deadline)?
        };
        let agent = local.agent_socket();
        if let Some(socket) = agent.as_deref().filter(|_| !alive.contains("agent")) {
            let mut agent = spawn_server(dir, "agent", local.agent_command(socket))?;
            started.push("agent".to_owned());
            wait_for_address(dir, &mut agent, deadline)?;
        }
        let config = local.config(mds_address, iod_addresses, agent, cluster_id);
        save_cluster_file(dir, &config)?;
        wait_until_answering(&config, &mut [], deadline)?;
        Ok::<_, ClusterError>(config)
    })();
    match result {
        Ok(config) => Ok((config, started)),
        Err(err) => {
            // Leave nothing half-started behind; what ran before keeps running.
            stop_started(dir, &started);
            Err(err)
        }
    }
}

/// The iods of a cluster of `servers` in `dir` that are not running (`alive` names those
/// that are), once it is known they can be started: a running cluster keeps its number of
/// iods, and a running mds knows every iod by address, so an iod it knows no address of
/// cannot join it.
fn missing_iods(
    dir: &Path,
    servers: u16,
    alive: &BTreeSet<String>,
) -> Result<Vec<u16>, ClusterError> {
    if !alive.is_empty() {
        let running = ClusterConfig::load(&dir.join("cluster.toml"))
            .map(|config| config.iods.len())
            .unwrap_or_default();
        if running != usize::from(servers) {
            return Err(ClusterError::RunningOtherSize {
                dir: dir.to_owned(),
                running,
                names: alive.iter().cloned().collect(),
                servers,
            });
        }
    }
    let missing_iods: Vec<u16> = (0..servers)
        .filter(|index| !alive.contains(&format!("iod-{index}")))
        .collect();
    if alive.contains("mds") {
        // The running mds knows every iod by address: a new address would be unknown to it.
        if let Some(index) = missing_iods
            .iter()
            .find(|index| previous_address(dir, &format!("iod-{index}")).is_none())
        {
            return Err(ClusterError::NoEarlierAddress {
                index: *index,
                dir: dir.to_owned(),
                run: run_dir(dir),
            });
        }
    }
    Ok(missing_iods)
}

/// The address of server `name`, which runs: the one it had.
fn running_address(dir: &Path, name: &str) -> Result<String, ClusterError> {
    previous_address(dir, name).ok_or_else(|| ClusterError::AddressUnknown {
        name: if name == "mds" {
            "the mds".to_owned()
        } else {
            name.to_owned()
        },
        run: run_dir(dir),
    })
}

impl Local<'_> {
    /// How iod `index` is started.
    fn iod_command(&self, index: u16) -> ServerCommand {
        let dir = self.dir;
        let name = format!("iod-{index}");
        let data = dir.join(&name);
        let listen = previous_address(dir, &name).unwrap_or_else(|| "127.0.0.1:0".into());
        let mut args = vec![
            self.program.clone(),
            "iod".into(),
            "--index".into(),
            index.to_string(),
            "--data".into(),
            data.display().to_string(),
            "--key".into(),
            self.key.display().to_string(),
            "--listen".into(),
            listen,
        ];
        if let Some(socket) = local_socket(dir, index) {
            args.extend(["--local-socket".into(), socket.display().to_string()]);
        }
        // The mds may start after the iods, on a port not known yet: each iod reads its
        // address from the file the mds writes, then sweeps its orphans.
        args.extend([
            "--mds-address-file".into(),
            absolute(&run_dir(dir).join("mds.addr"))
                .display()
                .to_string(),
        ]);
        if let Some(ofi) = self.ofi {
            args.extend(["--ofi-provider".into(), ofi.provider.clone()]);
            if let Some(node) = &ofi.node {
                args.extend(["--ofi-node".into(), node.clone()]);
            }
        }
        if let Some(address) = self.iod_metrics.get(usize::from(index)) {
            args.extend(["--metrics".into(), address.clone()]);
        }
        args.extend(self.iod_flags.iter().cloned());
        ServerCommand {
            launcher: Vec::new(),
            program: args,
            address_here: true,
        }
    }

    /// How the mds is started, knowing the iods at `iod_addresses`.
    fn mds_command(
        &self,
        stripe_unit: u64,
        iod_addresses: &[String],
        mds_flags: &[String],
    ) -> ServerCommand {
        let dir = self.dir;
        let mut mds_args = vec![
            self.program.clone(),
            "mds".to_owned(),
            "--db".to_owned(),
            dir.join("mds").join("meta.redb").display().to_string(),
            "--stripe-unit".to_owned(),
            stripe_unit.to_string(),
            "--key".to_owned(),
            self.key.display().to_string(),
            "--listen".to_owned(),
            previous_address(dir, "mds").unwrap_or_else(|| "127.0.0.1:0".into()),
        ];
        for address in iod_addresses {
            mds_args.push("--iod".to_owned());
            mds_args.push(address.clone());
        }
        mds_args.extend(mds_flags.iter().cloned());
        ServerCommand {
            launcher: Vec::new(),
            program: mds_args,
            address_here: true,
        }
    }

    /// The agent's socket, unless its path is too long for the kernel: that leaves the host
    /// without an agent, and only processes that can read the key can then use the cluster.
    fn agent_socket(&self) -> Option<PathBuf> {
        let agent_socket = absolute(&run_dir(self.dir).join(AGENT_SOCKET));
        if agent_socket.as_os_str().len() <= UNIX_SOCKET_PATH_BYTES_MAX {
            Some(agent_socket)
        } else {
            tracing::warn!(
                "{} is too long for a Unix socket; no agent runs for this cluster",
                agent_socket.display()
            );
            None
        }
    }

    /// How the agent is started, on `socket`.
    fn agent_command(&self, socket: &Path) -> ServerCommand {
        ServerCommand {
            launcher: Vec::new(),
            program: vec![
                self.program.clone(),
                "agent".to_owned(),
                "--key".to_owned(),
                self.key.display().to_string(),
                "--socket".to_owned(),
                socket.display().to_string(),
            ],
            address_here: true,
        }
    }

    /// The cluster file of the servers at these addresses.
    fn config(
        &self,
        mds_address: String,
        iod_addresses: Vec<String>,
        agent: Option<PathBuf>,
        cluster_id: u64,
    ) -> ClusterConfig {
        let dir = self.dir;
        ClusterConfig {
            mds: MdsEntry {
                address: mds_address,
            },
            iods: iod_addresses
                .into_iter()
                .zip(0u16..)
                .map(|(address, index)| IodEntry {
                    index,
                    address,
                    local: local_socket(dir, index).map(|path| absolute(&path)),
                })
                .collect(),
            ofi: self.ofi.cloned(),
            auth: AuthEntry {
                key: Some(self.key.clone()),
                agent,
            },
            cluster_id: Some(cluster_id),
            client: kept_client_entry(dir),
        }
    }
}
