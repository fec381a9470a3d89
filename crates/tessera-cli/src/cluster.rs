//! `tessera up`, `down` and `status`: a local cluster as background processes.
//!
//! Layout of a cluster directory `D`:
//! `D/cluster.toml` (what clients read), `D/key` (the cluster key, mode 0600, made at the
//! first `up`), `D/mds/meta.redb` (the namespace), `D/iod-N/objects/` (each server's data),
//! `D/run/*.pid` and `D/run/*.addr` (live processes and their bound addresses),
//! `D/run/*.sock` (the iods' and the agent's Unix sockets, open to every local user),
//! `D/log/*.log` (server logs). The data directories, the key and the logs are the owner's
//! alone; the cluster file and the sockets are for everyone. Ports are chosen by the kernel
//! at every `up`, and the data and namespace survive `down` + `up`.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tessera_client::config::{AuthEntry, IodEntry, MdsEntry, OfiEntry};
use tessera_client::{Client, ClientOptions, ClusterConfig};
use tessera_proto::limits::{SERVERS_MAX, STRIPE_UNIT_BYTES_DEFAULT};
use tessera_proto::{STORE_FAILED, STORE_NO_SPACE, STORE_OK};

/// How long `up` waits for every server to answer.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `down` waits for a server to exit after SIGTERM before SIGKILL.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `tessera up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Number of I/O servers.
    #[arg(long, default_value_t = 4)]
    servers: u16,
    /// Cluster directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Default stripe unit of new files, in bytes.
    #[arg(long, default_value_t = STRIPE_UNIT_BYTES_DEFAULT)]
    stripe_unit: u64,
    /// Have the iods serve one-sided transfers over this libfabric provider ("tcp;ofi_rxm"
    /// bound to 127.0.0.1, or "shm"); the cluster file names it for clients.
    #[arg(long)]
    ofi_provider: Option<String>,
    /// Start the mds with root squash: callers with uid 0 are treated as nobody (65534).
    #[arg(long)]
    root_squash: bool,
    /// How long the capabilities the mds signs are accepted, in seconds (default one hour);
    /// clients renew theirs before they expire.
    #[arg(long)]
    capability_seconds: Option<u64>,
}

/// Arguments of `tessera down`.
#[derive(Debug, clap::Args)]
pub struct DownArgs {
    /// Cluster directory given to `tessera up`.
    #[arg(long)]
    dir: PathBuf,
}

/// Arguments of `tessera status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Cluster directory given to `tessera up` (else the cluster file is used).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also show every iod's storage counters (requests, pieces, storage calls, bytes
    /// wanted vs. moved, and the plans its cost model chose) and its cost model.
    #[arg(long)]
    servers: bool,
    #[command(flatten)]
    cluster: crate::ClusterArg,
}

fn run_dir(dir: &Path) -> PathBuf {
    dir.join("run")
}

/// The command line of `pid`, one string per argument (empty for a zombie or a dead pid).
fn command_line(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|&byte| byte == 0)
                .filter(|argument| !argument.is_empty())
                .map(|argument| String::from_utf8_lossy(argument).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `command` (an argument list) is the server that `up` started in `dir` under the
/// pid file `pid_file`: `…/tessera ROLE … --key DIR/key` as [`spawn_server`] runs it, with ROLE
/// the pid file's name (`mds`, `agent`, or `iod` and `--index N` for `iod-N.pid`).
fn is_our_server(dir: &Path, pid_file: &Path, command: &[String]) -> bool {
    let Some(stem) = pid_file.file_stem().and_then(|stem| stem.to_str()) else {
        return false;
    };
    let (role, index) = match stem.split_once('-') {
        Some(("iod", index)) => ("iod", Some(index)),
        None if stem == "mds" || stem == "agent" => (stem, None),
        _ => return false,
    };
    let value_of = |flag: &str| {
        command
            .windows(2)
            .find(|pair| pair[0] == flag)
            .map(|pair| pair[1].as_str())
    };
    let key = absolute(&dir.join(KEY_FILE));
    let same_key = value_of("--key").is_some_and(|given| {
        Path::new(given) == key
            || fs::canonicalize(given)
                .is_ok_and(|given| fs::canonicalize(&key).is_ok_and(|key| key == given))
    });
    let tessera = command.first().is_some_and(|program| {
        Path::new(program)
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("tessera"))
    });
    tessera
        && command.get(1).is_some_and(|argument| argument == role)
        && same_key
        && index.is_none_or(|index| value_of("--index") == Some(index))
}

/// Whether the pid in `pid_file` is alive and still the server `up` started there. A pid
/// file can outlive its process and the pid be reused by anyone (a `tail -f` of this
/// cluster's log included): only the exact server counts, so `down` never signals another.
fn server_alive(dir: &Path, pid_file: &Path, pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists; no memory is involved.
    is_our_server(dir, pid_file, &command_line(pid)) && unsafe { libc::kill(pid, 0) == 0 }
}

fn read_pid(path: &Path) -> Option<i32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The pid files of a cluster directory: the mds first, then the iods.
fn pid_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(run_dir(dir))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .collect()
        })
        .unwrap_or_default();
    files.retain(|path| path.extension().is_some_and(|ext| ext == "pid"));
    files.sort_by_key(|path| (!path.ends_with("mds.pid"), path.clone()));
    files
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(3)..].join("\n")
}

/// A server process being started.
struct Starting {
    name: String,
    child: std::process::Child,
    address_file: PathBuf,
    log_file: PathBuf,
}

/// Mode of the servers' data directories (`mds`, `iod-N`) and of `log`: the owner's alone.
pub const PRIVATE_DIRECTORY_MODE: u32 = 0o700;
/// Mode of the log files.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Creates `path` if missing and makes it owner-only (also when an older version made it).
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    fs::create_dir_all(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(PRIVATE_DIRECTORY_MODE))
}

fn spawn_server(dir: &Path, name: &str, args: &[String]) -> Result<Starting, String> {
    let exe =
        std::env::current_exe().map_err(|err| format!("cannot find the tessera binary: {err}"))?;
    let log_file = dir.join("log").join(format!("{name}.log"));
    let address_file = run_dir(dir).join(format!("{name}.addr"));
    let _ = fs::remove_file(&address_file);
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE_FILE_MODE)
        .open(&log_file)
        .and_then(|log| {
            log.set_permissions(fs::Permissions::from_mode(PRIVATE_FILE_MODE))?;
            Ok(log)
        })
        .map_err(|err| format!("cannot open {}: {err}", log_file.display()))?;
    let log_err = log.try_clone().map_err(|err| err.to_string())?;
    let child = Command::new(exe)
        .args(args)
        .arg("--address-file")
        .arg(&address_file)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .spawn()
        .map_err(|err| format!("cannot start {name}: {err}"))?;
    let pid_file = run_dir(dir).join(format!("{name}.pid"));
    fs::write(&pid_file, child.id().to_string())
        .map_err(|err| format!("cannot write {}: {err}", pid_file.display()))?;
    Ok(Starting {
        name: name.to_owned(),
        child,
        address_file,
        log_file,
    })
}

fn wait_for_address(server: &mut Starting, deadline: Instant) -> Result<String, String> {
    loop {
        if let Ok(address) = fs::read_to_string(&server.address_file) {
            return Ok(address.trim().to_owned());
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!(
                "{} exited ({status}) while starting; its log {} ends:\n{}",
                server.name,
                server.log_file.display(),
                log_tail(&server.log_file)
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} did not start within {STARTUP_TIMEOUT:?}; see {}",
                server.name,
                server.log_file.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts a cluster.
pub fn up(args: &UpArgs) -> Result<(), String> {
    let ofi = args.ofi_provider.as_ref().map(|provider| OfiEntry {
        provider: provider.clone(),
        // tcp binds to loopback, where the servers listen.
        node: provider.starts_with("tcp").then(|| "127.0.0.1".to_owned()),
    });
    let mut mds_flags = Vec::new();
    if args.root_squash {
        mds_flags.push("--root-squash".to_owned());
    }
    if let Some(seconds) = args.capability_seconds {
        mds_flags.extend(["--capability-seconds".to_owned(), seconds.to_string()]);
    }
    let config = start_with(
        &args.dir,
        args.servers,
        args.stripe_unit,
        ofi.as_ref(),
        &mds_flags,
    )?;
    println!(
        "tessera: cluster up in {}: mds at {}, {} I/O servers",
        args.dir.display(),
        config.mds.address,
        config.iods.len()
    );
    println!(
        "export TESSERA_CLUSTER={}",
        args.dir.join("cluster.toml").display()
    );
    Ok(())
}

/// Measures the storage cost model once, in `iod-0`'s data directory, and gives every iod
/// without a model of its own a copy: the data directories of a local cluster share one
/// file system, and iods calibrating all at once on a small machine would measure each
/// other rather than the storage.
fn share_cost_model(dir: &Path, servers: u16) -> Result<(), String> {
    let first = dir.join("iod-0");
    private_dir(&first).map_err(|err| format!("cannot create {}: {err}", first.display()))?;
    tessera_iod::cost::load_or_calibrate(&first, false, None)
        .map_err(|err| format!("iod 0: cost model: {err}"))?;
    let measured = first.join(tessera_iod::cost::COST_MODEL_FILE);
    for index in 1..servers {
        let data = dir.join(format!("iod-{index}"));
        let kept = data.join(tessera_iod::cost::COST_MODEL_FILE);
        if !kept.exists() {
            private_dir(&data)
                .and_then(|()| fs::copy(&measured, &kept).map(drop))
                .map_err(|err| {
                    format!("cannot copy the cost model to {}: {err}", kept.display())
                })?;
        }
    }
    Ok(())
}

/// The cluster key in a cluster directory.
pub const KEY_FILE: &str = "key";
/// The agent's socket in the cluster directory's `run/`.
const AGENT_SOCKET: &str = "agent.sock";

/// Longest Unix socket path the kernel takes (`sun_path` holds 108 bytes with the NUL).
const UNIX_SOCKET_PATH_BYTES_MAX: usize = 107;

/// Where iod `index` of the cluster in `dir` listens for same-host clients, unless the path
/// is too long for a Unix socket (then that iod is reached by TCP only).
fn local_socket(dir: &Path, index: u16) -> Option<std::path::PathBuf> {
    let path = absolute(&dir.join("run").join(format!("iod-{index}.sock")));
    if path.as_os_str().len() <= UNIX_SOCKET_PATH_BYTES_MAX {
        Some(path)
    } else {
        tracing::warn!(
            "iod {index}: {} is too long for a Unix socket; clients use tcp",
            path.display()
        );
        None
    }
}

fn absolute(path: &Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Starts a cluster of `servers` iods in `dir`, writes `dir/cluster.toml` and returns once
/// every server answers. On failure nothing is left running.
pub fn start(dir: &Path, servers: u16, stripe_unit: u64) -> Result<ClusterConfig, String> {
    start_with(dir, servers, stripe_unit, None, &[])
}

/// [`start`], with the iods serving one-sided transfers over the fabric `ofi` names, and
/// `mds_flags` given to the mds (`--root-squash`, `--capability-seconds N`).
pub fn start_with(
    dir: &Path,
    servers: u16,
    stripe_unit: u64,
    ofi: Option<&OfiEntry>,
    mds_flags: &[String],
) -> Result<ClusterConfig, String> {
    if servers == 0 || usize::from(servers) > SERVERS_MAX {
        return Err(format!("--servers {servers} is outside 1..={SERVERS_MAX}"));
    }
    fs::create_dir_all(dir.join("run"))
        .map_err(|err| format!("cannot create {}: {err}", dir.join("run").display()))?;
    for sub in ["log", "mds"] {
        private_dir(&dir.join(sub))
            .map_err(|err| format!("cannot create {}: {err}", dir.join(sub).display()))?;
    }
    for pid_file in pid_files(dir) {
        if let Some(pid) = read_pid(&pid_file).filter(|&pid| server_alive(dir, &pid_file, pid)) {
            return Err(format!(
                "a cluster is already running in {} ({} is pid {pid}); run `tessera down --dir {}` first",
                dir.display(),
                pid_file.display(),
                dir.display()
            ));
        }
        let _ = fs::remove_file(pid_file);
    }
    share_cost_model(dir, servers)?;
    let key = absolute(&dir.join(KEY_FILE));
    let cluster_id = if key.exists() {
        tessera_auth::ClusterKey::load(&key)
    } else {
        tessera_auth::ClusterKey::create(&key)
    }
    .map_err(|err| err.to_string())?
    .cluster_id();
    let agent_socket = absolute(&run_dir(dir).join(AGENT_SOCKET));
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let result = (|| {
        let mut iods = Vec::new();
        for index in 0..servers {
            let data = dir.join(format!("iod-{index}"));
            let mut args = vec![
                "iod".into(),
                "--index".into(),
                index.to_string(),
                "--data".into(),
                data.display().to_string(),
                "--key".into(),
                key.display().to_string(),
            ];
            if let Some(socket) = local_socket(dir, index) {
                args.extend(["--local-socket".into(), socket.display().to_string()]);
            }
            // The mds starts after the iods, on a port not known yet: each iod reads its
            // address from the file the mds writes, then sweeps its orphans.
            args.extend([
                "--mds-address-file".into(),
                absolute(&run_dir(dir).join("mds.addr"))
                    .display()
                    .to_string(),
            ]);
            if let Some(ofi) = ofi {
                args.extend(["--ofi-provider".into(), ofi.provider.clone()]);
                if let Some(node) = &ofi.node {
                    args.extend(["--ofi-node".into(), node.clone()]);
                }
            }
            let server = spawn_server(dir, &format!("iod-{index}"), &args)?;
            iods.push(server);
        }
        let mut iod_addresses = Vec::new();
        for server in &mut iods {
            iod_addresses.push(wait_for_address(server, deadline)?);
        }
        let mut mds_args = vec![
            "mds".to_owned(),
            "--db".to_owned(),
            dir.join("mds").join("meta.redb").display().to_string(),
            "--stripe-unit".to_owned(),
            stripe_unit.to_string(),
            "--key".to_owned(),
            key.display().to_string(),
        ];
        for address in &iod_addresses {
            mds_args.push("--iod".to_owned());
            mds_args.push(address.clone());
        }
        mds_args.extend(mds_flags.iter().cloned());
        let mut mds = spawn_server(dir, "mds", &mds_args)?;
        let agent_args = [
            "agent".to_owned(),
            "--key".to_owned(),
            key.display().to_string(),
            "--socket".to_owned(),
            agent_socket.display().to_string(),
        ];
        // An agent socket path too long for the kernel leaves the host without an agent:
        // only processes that can read the key can then use the cluster.
        let agent_fits = agent_socket.as_os_str().len() <= UNIX_SOCKET_PATH_BYTES_MAX;
        let mut agent = if agent_fits {
            Some(spawn_server(dir, "agent", &agent_args)?)
        } else {
            tracing::warn!(
                "{} is too long for a Unix socket; no agent runs for this cluster",
                agent_socket.display()
            );
            None
        };
        let mds_address = wait_for_address(&mut mds, deadline)?;
        if let Some(agent) = &mut agent {
            wait_for_address(agent, deadline)?;
        }
        let config = ClusterConfig {
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
            ofi: ofi.cloned(),
            auth: AuthEntry {
                key: Some(key.clone()),
                agent: agent_fits.then(|| agent_socket.clone()),
            },
            cluster_id: Some(cluster_id),
        };
        let cluster_file = dir.join("cluster.toml");
        config
            .save(&cluster_file)
            .map_err(|err| format!("cannot write {}: {err}", cluster_file.display()))?;
        wait_until_answering(&config, deadline)?;
        Ok::<_, String>(config)
    })();
    if result.is_err() {
        // Leave nothing half-started behind.
        stop_all(dir);
    }
    result
}

fn wait_until_answering(config: &ClusterConfig, deadline: Instant) -> Result<(), String> {
    let options = ClientOptions {
        timeout: Duration::from_secs(2),
        ..ClientOptions::default()
    };
    loop {
        let client = Client::new(config, &options);
        let failures: Vec<String> = client
            .ping_all()
            .into_iter()
            .filter_map(|(name, reply)| reply.err().map(|err| format!("{name}: {err}")))
            .collect();
        if failures.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("servers did not answer: {}", failures.join("; ")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops every process of `dir`; returns how many were stopped.
pub fn stop_all(dir: &Path) -> usize {
    let mut stopped = 0;
    for pid_file in pid_files(dir) {
        let name = pid_file
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        let alive = |pid| server_alive(dir, &pid_file, pid);
        if let Some(pid) = read_pid(&pid_file).filter(|&pid| alive(pid)) {
            // SAFETY: sending a signal to a pid touches no memory of ours.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
            while alive(pid) && Instant::now() < deadline {
                reap(pid);
                std::thread::sleep(Duration::from_millis(10));
            }
            if alive(pid) {
                eprintln!("tessera: {name} (pid {pid}) ignored SIGTERM for {SHUTDOWN_TIMEOUT:?}; killing it");
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                reap(pid);
            }
            stopped += 1;
        }
        let _ = fs::remove_file(&pid_file);
        let _ = fs::remove_file(pid_file.with_extension("addr"));
    }
    stopped
}

/// Collects the exit status of `pid` if it is our child (so it does not linger as a zombie).
fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid writes only to `status`, a local we own; WNOHANG never blocks.
    unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
}

/// Stops a cluster.
pub fn down(args: &DownArgs) -> Result<(), String> {
    if !args.dir.join("cluster.toml").exists() && pid_files(&args.dir).is_empty() {
        return Err(format!(
            "no cluster in {} (no cluster.toml, no pid files)",
            args.dir.display()
        ));
    }
    let stopped = stop_all(&args.dir);
    println!(
        "tessera: stopped {stopped} server processes in {}",
        args.dir.display()
    );
    Ok(())
}

/// Reports every server of a cluster.
pub fn status(args: &StatusArgs) -> Result<(), String> {
    let config = match (&args.dir, &args.cluster.cluster) {
        (Some(dir), _) => ClusterConfig::load(&dir.join("cluster.toml")),
        (None, Some(file)) => ClusterConfig::load(file),
        (None, None) => ClusterConfig::from_env(),
    }
    .map_err(|err| err.to_string())?;
    let client = Client::new(
        &config,
        &ClientOptions {
            timeout: Duration::from_secs(2),
            ..ClientOptions::default()
        },
    );
    let mut down = 0;
    let mut degraded = 0;
    println!(
        "{:<28} {:<8} {:<8} {:>10}",
        "server", "state", "pid", "objects"
    );
    for (name, reply) in client.ping_all() {
        match reply {
            Ok(ping) if ping.store_state == STORE_OK => println!(
                "{name:<28} {:<8} {:<8} {:>10}",
                "up", ping.pid, ping.objects
            ),
            Ok(ping) => {
                degraded += 1;
                println!(
                    "{name:<28} {:<8} {:<8} {:>10}   {}",
                    "degraded",
                    ping.pid,
                    ping.objects,
                    store_condition(ping.store_state)
                );
            }
            Err(err) => {
                down += 1;
                println!("{name:<28} {:<8} {:<8} {:>10}   {err}", "down", "-", "-");
            }
        }
    }
    if args.servers {
        print_storage_counters(&client);
    }
    match (down, degraded) {
        (0, 0) => Ok(()),
        (0, _) => Err(format!("{degraded} server(s) degraded")),
        (_, 0) => Err(format!("{down} server(s) not answering")),
        _ => Err(format!(
            "{down} server(s) not answering, {degraded} degraded"
        )),
    }
}

/// What `status` prints for a server whose `PingReply::store_state` is not `STORE_OK`.
fn store_condition(store_state: u8) -> String {
    match store_state {
        STORE_NO_SPACE => {
            "store degraded: no space left on its disk (changes fail until space is freed)"
                .to_owned()
        }
        STORE_FAILED => "store degraded: I/O error (the server reopens its store)".to_owned(),
        other => format!("store degraded: unknown state {other}"),
    }
}

/// The `--servers` table: one line per iod and direction, then each cost model.
fn print_storage_counters(client: &Client) {
    println!();
    println!(
        "{:<6} {:<5} {:>9} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "iod",
        "op",
        "requests",
        "pieces",
        "calls",
        "wanted",
        "moved",
        "per-piece",
        "batched",
        "sieve",
        "mapped",
        "io_uring"
    );
    let mut models = Vec::new();
    for index in 0..client.server_count() {
        match client.server_stats(index) {
            Ok(stats) => {
                for (op, counters) in [("read", &stats.reads), ("write", &stats.writes)] {
                    println!(
                        "{index:<6} {op:<5} {:>9} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
                        counters.requests,
                        counters.pieces,
                        counters.calls,
                        counters.bytes_wanted,
                        counters.bytes_storage,
                        counters.per_piece,
                        counters.batched,
                        counters.sieve,
                        counters.mapped,
                        if stats.io_uring { "yes" } else { "no" },
                    );
                }
                models.push(format!("iod {index}: {}", stats.model));
            }
            Err(err) => println!("{index:<6} -     {err}"),
        }
    }
    println!();
    for model in models {
        println!("{model}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn only_the_exact_server_matches_its_pid_file() {
        let dir = Path::new("/clusters/one");
        let run = dir.join("run");
        let (mds, iod, agent) = (
            run.join("mds.pid"),
            run.join("iod-2.pid"),
            run.join("agent.pid"),
        );
        let key = "/clusters/one/key";
        let mds_line = words(&format!(
            "/bin/tessera mds --db /clusters/one/mds/meta.redb --key {key} --iod 127.0.0.1:9"
        ));
        let iod_line = words(&format!(
            "/bin/tessera iod --index 2 --data /clusters/one/iod-2 --key {key}"
        ));
        let agent_line = words(&format!("tessera agent --key {key} --socket /x.sock"));
        assert!(is_our_server(dir, &mds, &mds_line));
        assert!(is_our_server(dir, &iod, &iod_line));
        assert!(is_our_server(dir, &agent, &agent_line));
        // The wrong role, index or cluster.
        assert!(!is_our_server(dir, &iod, &mds_line));
        assert!(!is_our_server(dir, &mds, &agent_line));
        assert!(!is_our_server(dir, &run.join("iod-3.pid"), &iod_line));
        assert!(!is_our_server(Path::new("/clusters/two"), &mds, &mds_line));
        // Strangers that name the cluster or the role somewhere.
        for stranger in [
            "tail -f /clusters/one/log/mds.log",
            "sleep 1000",
            "/bin/tessera mds --db /clusters/one/mds/meta.redb",
            "less mds --key /clusters/one/key",
            "",
        ] {
            let line = if stranger.is_empty() {
                Vec::new()
            } else {
                words(stranger)
            };
            assert!(!is_our_server(dir, &mds, &line), "{stranger}");
        }
        assert!(!is_our_server(dir, &run.join("other.pid"), &mds_line));
    }
}
