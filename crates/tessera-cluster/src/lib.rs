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

// First, so that its `print!` and `println!` replace std's in everything below.
#[macro_use]
pub mod output;

mod hosts;
pub mod human;
pub mod logs;
pub mod owned;
pub mod progress;

pub use owned::{private_dir, PRIVATE_DIRECTORY_MODE, PRIVATE_FILE_MODE};

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tessera_client::config::{AuthEntry, IodEntry, MdsEntry, OfiEntry};
use tessera_client::{Client, ClientOptions, ClusterConfig};
use tessera_policy::cost::COST_MODEL_FILE;
pub use tessera_policy::ServeMode;
use tessera_proto::limits::{SERVERS_MAX, STRIPE_UNIT_BYTES_DEFAULT};

/// Mode of the servers' and the agent's Unix sockets: any local user may connect, since every
/// connection authenticates and every request carries a credential or a capability. The
/// sockets are the only parts of a cluster directory others may write (connecting needs it).
pub const LOCAL_SOCKET_MODE: u32 = 0o666;

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

/// How long `up` waits for every server to answer.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `down` waits for a server to exit after SIGTERM before SIGKILL.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Where client commands find the cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArg {
    /// Cluster file written by `tessera up` (default: $TESSERA_CLUSTER).
    #[arg(long, env = "TESSERA_CLUSTER")]
    pub cluster: Option<PathBuf>,
}

/// Arguments of `tessera up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Number of I/O servers of a local cluster (default: as many as it had, else 4).
    #[arg(long, conflicts_with = "hosts")]
    servers: Option<u16>,
    /// Start the servers a hostfile names, each through its launcher at its fixed address
    /// (see docs/DEPLOY.md); the file is kept as DIR/hosts for later `up` and `restart`.
    #[arg(long)]
    hosts: Option<PathBuf>,
    /// Cluster directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Default stripe unit of new files, in bytes (4096, 64k, 1m).
    #[arg(long, value_parser = tessera_client::layouts::parse_bytes, default_value_t = STRIPE_UNIT_BYTES_DEFAULT)]
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
    /// Handles whose objects the mds keeps made ahead on every iod (`tessera mds
    /// --precreate`; default the mds's, 0 turns it off).
    #[arg(long, value_name = "N")]
    precreate: Option<usize>,
    /// Have the servers of a local cluster serve Prometheus metrics on loopback: the mds on
    /// port P, iod i on P+1+i (`http://127.0.0.1:PORT/metrics`).
    #[arg(long, value_name = "P")]
    metrics_base_port: Option<u16>,
    /// How every iod of a local cluster serves reads: `normal` (copied through a server
    /// buffer from the page cache), `mmap` (pushed from a mapping of the object over `local`;
    /// as `normal` over tcp) or `unified` (from the iod's own cache). Default: the iod's.
    #[arg(long, value_name = "MODE", value_parser = clap::builder::ValueParser::new(str::parse::<ServeMode>))]
    serve: Option<ServeMode>,
    /// Byte budget of each iod's unified cache (4096, 64k, 512m, 2g); passed to every iod of
    /// a local cluster as a plain byte count. Default: the iod's.
    #[arg(long, value_name = "BYTES", value_parser = tessera_client::layouts::parse_bytes)]
    cache_bytes: Option<u64>,
}

/// The flags that make every iod serve by `serve` with a unified cache of `cache_bytes`
/// (each only when given), for [`start_local`]'s `iod_flags`.
pub fn serve_flags(serve: Option<ServeMode>, cache_bytes: Option<u64>) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(serve) = serve {
        flags.extend(["--serve".to_owned(), serve.name().to_owned()]);
    }
    if let Some(bytes) = cache_bytes {
        flags.extend(["--cache-bytes".to_owned(), bytes.to_string()]);
    }
    flags
}

/// The `[client]` section of the cluster file a restart rewrites (a user's client defaults
/// survive `tessera up` after `tessera down`); empty when there is none.
fn kept_client_entry(dir: &Path) -> tessera_client::config::ClientEntry {
    ClusterConfig::load(&dir.join("cluster.toml"))
        .map(|config| config.client)
        .unwrap_or_default()
}

/// The `--metrics` address of each server of a local cluster of `servers` iods when
/// `--metrics-base-port` is `base`: the mds on `base`, iod i on `base + 1 + i`.
fn metrics_addresses(base: u16, servers: u16) -> Result<(String, Vec<String>), String> {
    let last = u32::from(base) + u32::from(servers);
    if base == 0 || last > u32::from(u16::MAX) {
        return Err(format!(
            "--metrics-base-port {base}: the mds and {servers} iods need ports {base} to {last}, \
             within 1 to 65535"
        ));
    }
    let address = |offset: u16| format!("127.0.0.1:{}", base + offset);
    Ok((address(0), (1..=servers).map(address).collect()))
}

/// Arguments of `tessera down`.
#[derive(Debug, clap::Args)]
pub struct DownArgs {
    /// Cluster directory given to `tessera up`.
    #[arg(long)]
    dir: PathBuf,
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
    // Over ssh the program's words are shell-quoted where needed (`shell_quoted`).
    let command: Vec<String> = command.iter().map(|word| shell_unquoted(word)).collect();
    let Some(stem) = pid_file.file_stem().and_then(|stem| stem.to_str()) else {
        return false;
    };
    let (role, index) = match stem.split_once('-') {
        Some(("iod", index)) => ("iod", Some(index)),
        // A hostfile's agents are `agent-K`, K their line among the agent lines.
        Some(("agent", line)) if line.parse::<usize>().is_ok() => ("agent", None),
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
    // The program may follow a launcher's words (`ssh -tt HOST …`; `ip netns exec NS …`
    // replaces itself with the program, so its pid then shows the program alone).
    let runs_role = command.windows(2).any(|pair| {
        Path::new(&pair[0])
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("tessera"))
            && pair[1] == role
    });
    runs_role && same_key && index.is_none_or(|index| value_of("--index") == Some(index))
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

/// How one server is started: saved as `DIR/run/NAME.cmd` at every start, so `restart` and a
/// later `up` start it again the same way, at the same address.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct ServerCommand {
    /// The launcher's words before the program (empty: a plain child of `up`).
    launcher: Vec<String>,
    /// The tessera program, then its arguments (`--listen ADDR` among them).
    program: Vec<String>,
    /// Whether the address file the server writes is on this host's file system (not so
    /// over `ssh`).
    address_here: bool,
}

impl ServerCommand {
    /// The value of `flag` in the program's arguments.
    fn value_of(&self, flag: &str) -> Option<&str> {
        self.program
            .windows(2)
            .find(|pair| pair[0] == flag)
            .map(|pair| pair[1].as_str())
    }

    /// Sets `flag` to `value`, adding it if missing.
    fn set(&mut self, flag: &str, value: &str) {
        match self.program.iter().position(|word| word == flag) {
            Some(at) if at + 1 < self.program.len() => value.clone_into(&mut self.program[at + 1]),
            _ => self.program.extend([flag.to_owned(), value.to_owned()]),
        }
    }
}

/// The command `up` saved for server `name` of `dir`, if any.
fn saved_command(dir: &Path, name: &str) -> Option<ServerCommand> {
    let text = fs::read_to_string(run_dir(dir).join(format!("{name}.cmd"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// Where server `name` listened before: its saved `--listen` when that names a fixed port,
/// else the address it last wrote to `DIR/run/NAME.addr` (kept across `down`).
fn previous_address(dir: &Path, name: &str) -> Option<String> {
    let fixed = |address: &str| !address.ends_with(":0") && address.contains(':');
    saved_command(dir, name)
        .and_then(|command| command.value_of("--listen").map(str::to_owned))
        .filter(|address| fixed(address))
        .or_else(|| {
            fs::read_to_string(run_dir(dir).join(format!("{name}.addr")))
                .ok()
                .map(|address| address.trim().to_owned())
                .filter(|address| fixed(address))
        })
}

/// A server process being started.
struct Starting {
    name: String,
    child: std::process::Child,
    address_file: PathBuf,
    log_file: PathBuf,
    command: ServerCommand,
}

/// Writes `text` to `path`, owner-only, by rename (a reader never sees half of it; a link at
/// `path` is replaced, never followed).
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    owned::write_new(path, text, PRIVATE_FILE_MODE)
}

/// Writes the cluster file `dir/cluster.toml` (readable by every user) by rename.
fn save_cluster_file(dir: &Path, config: &ClusterConfig) -> Result<(), String> {
    let path = dir.join("cluster.toml");
    let text =
        toml::to_string(config).map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    owned::write_new(&path, &text, owned::SHARED_FILE_MODE)
}

fn save_command(dir: &Path, name: &str, command: &ServerCommand) -> Result<(), String> {
    let text = serde_json::to_string_pretty(command).expect("a command serializes");
    write_private(&run_dir(dir).join(format!("{name}.cmd")), &text)
}

/// The path of the running tessera binary: what every server runs (on remote hosts too,
/// which therefore install tessera at the same path).
pub fn tessera_program() -> Result<String, String> {
    let exe =
        std::env::current_exe().map_err(|err| format!("cannot find the tessera binary: {err}"))?;
    if exe.file_name().is_some_and(|name| name == "tessera") {
        return Ok(exe.display().to_string());
    }
    // Another binary of the workspace (`tessera-bench`): the servers are `tessera`, installed
    // or built beside it. A test of the workspace runs from cargo's `deps` directory, below
    // the one its binaries are built in.
    let sibling = exe.with_file_name("tessera");
    let above_deps = exe
        .parent()
        .filter(|dir| dir.file_name().is_some_and(|name| name == "deps"))
        .and_then(Path::parent)
        .map(|dir| dir.join("tessera"));
    if sibling.is_file() {
        Ok(sibling.display().to_string())
    } else if let Some(built) = above_deps.filter(|built| built.is_file()) {
        Ok(built.display().to_string())
    } else {
        Err(format!(
            "cannot start servers: {} not found beside {} (build it with `cargo build -p tessera-cli`)",
            sibling.display(),
            exe.display()
        ))
    }
}

/// Quotes `word` for the remote shell `ssh` hands its command to (only when needed, so the
/// pid check still sees `tessera ROLE` as words of its own).
fn shell_quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"/._-:=,@+%".contains(&byte));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The word [`shell_quoted`] made `quoted` from (other words are returned as they are).
fn shell_unquoted(quoted: &str) -> String {
    match quoted
        .strip_prefix('\'')
        .and_then(|rest| rest.strip_suffix('\''))
    {
        Some(inner) if quoted.len() >= 2 => inner.replace(r"'\''", "'"),
        _ => quoted.to_owned(),
    }
}

fn spawn_server(dir: &Path, name: &str, command: ServerCommand) -> Result<Starting, String> {
    let log_file = dir.join("log").join(format!("{name}.log"));
    let address_file = absolute(&run_dir(dir).join(format!("{name}.addr")));
    if command.address_here {
        let _ = fs::remove_file(&address_file);
    }
    save_command(dir, name, &command)?;
    let log = owned::open_log(&log_file)?;
    let log_err = log.try_clone().map_err(|err| err.to_string())?;
    let mut words: Vec<String> = command.launcher.clone();
    words.extend(command.program.iter().cloned());
    words.extend([
        "--address-file".to_owned(),
        address_file.display().to_string(),
    ]);
    if !command.address_here {
        // Over ssh the words are joined into one remote shell command.
        let launcher_words = command.launcher.len();
        for word in &mut words[launcher_words..] {
            *word = shell_quoted(word);
        }
    }
    let child = Command::new(&words[0])
        .args(&words[1..])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .spawn()
        .map_err(|err| format!("cannot start {name} ({}): {err}", words[0]))?;
    let pid_file = run_dir(dir).join(format!("{name}.pid"));
    owned::write_new(&pid_file, &child.id().to_string(), owned::SHARED_FILE_MODE)?;
    Ok(Starting {
        name: name.to_owned(),
        child,
        address_file,
        log_file,
        command,
    })
}

fn exited_message(server: &Starting, status: std::process::ExitStatus) -> String {
    format!(
        "{} exited ({status}) while starting; its log {} ends:\n{}",
        server.name,
        server.log_file.display(),
        log_tail(&server.log_file)
    )
}

/// Waits for the address a local server writes once it listens, then saves its command with
/// that address fixed, so every later start puts it there again.
fn wait_for_address(
    dir: &Path,
    server: &mut Starting,
    deadline: Instant,
) -> Result<String, String> {
    loop {
        if let Ok(address) = fs::read_to_string(&server.address_file) {
            let address = address.trim().to_owned();
            if server.command.value_of("--listen").is_some() {
                server.command.set("--listen", &address);
                save_command(dir, &server.name, &server.command)?;
            }
            return Ok(address);
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(exited_message(server, status));
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

/// Starts a cluster: the servers of a hostfile (`--hosts`, or the one an earlier `up` kept
/// in `DIR/hosts`), else a local cluster of `--servers` iods. Servers already running are
/// left alone; the missing ones start at their old addresses.
pub fn up(args: &UpArgs) -> Result<(), String> {
    let mut mds_flags = Vec::new();
    if args.root_squash {
        mds_flags.push("--root-squash".to_owned());
    }
    if let Some(seconds) = args.capability_seconds {
        mds_flags.extend(["--capability-seconds".to_owned(), seconds.to_string()]);
    }
    if let Some(handles) = args.precreate {
        mds_flags.extend(["--precreate".to_owned(), handles.to_string()]);
    }
    // Nothing of the directory is read before it is known to be this user's alone.
    claim(&args.dir)?;
    let kept_hosts = args.dir.join(HOSTS_FILE);
    let hosts = match (&args.hosts, kept_hosts.exists()) {
        (Some(file), _) => Some(file.clone()),
        (None, true) if args.servers.is_none() => Some(kept_hosts),
        (None, true) => {
            return Err(format!(
                "{} was started from a hostfile (kept in {}); run `tessera up --dir {}` without --servers",
                args.dir.display(),
                kept_hosts.display(),
                args.dir.display()
            ))
        }
        (None, false) => None,
    };
    let (config, started) = if let Some(hosts) = hosts {
        if args.ofi_provider.is_some()
            || args.metrics_base_port.is_some()
            || args.serve.is_some()
            || args.cache_bytes.is_some()
        {
            return Err(
                "--ofi-provider, --metrics-base-port, --serve and --cache-bytes are for local \
                 clusters; they do not go with a hostfile (give each server --metrics, \
                 --serve or --cache-bytes in the hostfile's flags)"
                    .to_owned(),
            );
        }
        start_hosts(&args.dir, &hosts, args.stripe_unit, &mds_flags)?
    } else {
        let ofi = args.ofi_provider.as_ref().map(|provider| OfiEntry {
            provider: provider.clone(),
            // tcp binds to loopback, where the servers listen.
            node: provider.starts_with("tcp").then(|| "127.0.0.1".to_owned()),
        });
        let previous = ClusterConfig::load(&args.dir.join("cluster.toml"))
            .ok()
            .and_then(|config| u16::try_from(config.iods.len()).ok());
        let servers = args.servers.or(previous).unwrap_or(SERVERS_DEFAULT);
        let mut iod_metrics = Vec::new();
        if let Some(base) = args.metrics_base_port {
            let (mds, iods) = metrics_addresses(base, servers)?;
            mds_flags.extend(["--metrics".to_owned(), mds]);
            iod_metrics = iods;
        }
        start_local(
            &args.dir,
            servers,
            args.stripe_unit,
            ofi.as_ref(),
            &mds_flags,
            &iod_metrics,
            &serve_flags(args.serve, args.cache_bytes),
        )?
    };
    let started = if started.is_empty() {
        "every server was already running".to_owned()
    } else {
        format!("started {}", started.join(", "))
    };
    println!(
        "tessera: cluster up in {}: mds at {}, {} I/O servers; {started}",
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

/// Iods of a local cluster when `up` is given no `--servers` and there is no earlier one.
const SERVERS_DEFAULT: u16 = 4;
/// The copy of the hostfile `up --hosts` keeps in the cluster directory.
pub const HOSTS_FILE: &str = "hosts";

/// Measures the storage cost model once, in the first of `indices`' data directories, and
/// gives every iod of `indices` without a model of its own a copy: these data directories
/// share one machine, and iods calibrating all at once on a small machine would measure each
/// other rather than the storage. The measuring is the iod's own (`tessera iod --calibrate`,
/// run here as a process), so this crate needs only the model's file format.
fn share_cost_model(dir: &Path, indices: &[u16]) -> Result<(), String> {
    let Some(first_index) = indices.first() else {
        return Ok(());
    };
    let first = dir.join(format!("iod-{first_index}"));
    private_dir(&first).map_err(|err| format!("{}: {err}", first.display()))?;
    let kept = tessera_policy::cost::load(&first)
        .map_err(|err| format!("iod {first_index}: cost model: {err}"))?;
    if kept.is_none() {
        calibrate(dir, *first_index, &first)?;
    }
    let measured = first.join(COST_MODEL_FILE);
    // Owner-only like everything else of a data directory, whatever the umask (the copies
    // below take its mode).
    fs::set_permissions(&measured, fs::Permissions::from_mode(PRIVATE_FILE_MODE))
        .map_err(|err| format!("{}: {err}", measured.display()))?;
    for index in &indices[1..] {
        let data = dir.join(format!("iod-{index}"));
        let kept = data.join(COST_MODEL_FILE);
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

/// Measures the cost model of iod `index`'s data directory `data` and keeps it there, by
/// `tessera iod --calibrate` (which neither reads the key nor serves).
fn calibrate(dir: &Path, index: u16, data: &Path) -> Result<(), String> {
    let program = tessera_program()?;
    let output = Command::new(&program)
        .args([
            "iod",
            "--calibrate",
            "--index",
            &index.to_string(),
            "--data",
        ])
        .arg(data)
        .arg("--key")
        .arg(dir.join(KEY_FILE))
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("iod {index}: cost model: cannot run {program}: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iod {index}: cost model: `{program} iod --calibrate` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
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
/// every server answers. On failure nothing it started is left running.
pub fn start(dir: &Path, servers: u16, stripe_unit: u64) -> Result<ClusterConfig, String> {
    start_local(dir, servers, stripe_unit, None, &[], &[], &[]).map(|(config, _)| config)
}

/// Makes the cluster directory `dir` unless it exists, then checks it and every part of it
/// ([`owned::check_cluster_dir`]): a directory another user made first, or anything in it
/// another user owns or may write, is refused before it is used.
fn claim(dir: &Path) -> Result<(), String> {
    owned::create_dir(dir, owned::SHARED_DIRECTORY_MODE)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    owned::check_cluster_dir(dir)
}

/// Checks the cluster directory and creates its parts (`run/` readable by all, so clients
/// reach the sockets; `log/` and `mds/` owner-only), forgets pid files of servers that are
/// gone, and returns the names of the servers still running.
fn prepare(dir: &Path) -> Result<std::collections::BTreeSet<String>, String> {
    claim(dir)?;
    let run = run_dir(dir);
    owned::create_dir(&run, owned::SHARED_DIRECTORY_MODE)
        .map_err(|err| format!("cannot create {}: {err}", run.display()))?;
    for sub in ["log", "mds"] {
        let path = dir.join(sub);
        private_dir(&path).map_err(|err| format!("{}: {err}", path.display()))?;
    }
    let mut alive = std::collections::BTreeSet::new();
    for pid_file in pid_files(dir) {
        let name = pid_file
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        if read_pid(&pid_file).is_some_and(|pid| server_alive(dir, &pid_file, pid)) {
            alive.insert(name);
        } else {
            let _ = fs::remove_file(pid_file);
        }
    }
    Ok(alive)
}

/// Loads the cluster key of `dir`, making one at the first start; returns its path and the
/// cluster id.
fn cluster_key(dir: &Path) -> Result<(PathBuf, u64), String> {
    let key = absolute(&dir.join(KEY_FILE));
    // A key that is there must be this user's: anyone else who owns it could sign
    // credentials of any user, and servers of any role.
    let cluster_id = if fs::symlink_metadata(&key).is_ok() {
        tessera_auth::ClusterKey::load_owned(&key)
    } else {
        tessera_auth::ClusterKey::create(&key)
    }
    .map_err(|err| err.to_string())?
    .cluster_id();
    Ok((key, cluster_id))
}

/// Stops the servers of `started` (what one `up` or `restart` started before it failed).
fn stop_started(dir: &Path, started: &[String]) {
    for name in started {
        stop_one(dir, &run_dir(dir).join(format!("{name}.pid")));
    }
}

/// [`start`], with the iods serving one-sided transfers over the fabric `ofi` names,
/// `mds_flags` given to the mds (`--root-squash`, `--capability-seconds N`), iod i serving
/// its metrics on `iod_metrics[i]` (none when the list is shorter) and `iod_flags` given to
/// every iod (`--serve MODE`, `--cache-bytes N`: [`serve_flags`]). Servers of `dir`
/// that are running are kept; the others start at the address they had before (the kernel
/// picks one at the first start). Returns the cluster and the names of the servers started.
pub fn start_local(
    dir: &Path,
    servers: u16,
    stripe_unit: u64,
    ofi: Option<&OfiEntry>,
    mds_flags: &[String],
    iod_metrics: &[String],
    iod_flags: &[String],
) -> Result<(ClusterConfig, Vec<String>), String> {
    if servers == 0 || usize::from(servers) > SERVERS_MAX {
        return Err(format!("--servers {servers} is outside 1..={SERVERS_MAX}"));
    }
    let alive = prepare(dir)?;
    if !alive.is_empty() {
        let running = ClusterConfig::load(&dir.join("cluster.toml"))
            .map(|config| config.iods.len())
            .unwrap_or_default();
        if running != usize::from(servers) {
            return Err(format!(
                "a cluster of {running} iods is running in {} ({}); `up --servers {servers}` cannot change that while it runs: run `tessera down --dir {}` first",
                dir.display(),
                alive.iter().cloned().collect::<Vec<_>>().join(", "),
                dir.display()
            ));
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
            return Err(format!(
                "iod {index} has no earlier address in {} but the mds runs with a fixed list; run `tessera down --dir {}` first",
                run_dir(dir).display(),
                dir.display()
            ));
        }
    }
    let all: Vec<u16> = (0..servers).collect();
    share_cost_model(dir, &all)?;
    let (key, cluster_id) = cluster_key(dir)?;
    let program = tessera_program()?;
    let agent_socket = absolute(&run_dir(dir).join(AGENT_SOCKET));
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut started = Vec::new();
    let result = (|| {
        let mut starting = Vec::new();
        for &index in &missing_iods {
            let name = format!("iod-{index}");
            let data = dir.join(&name);
            let listen = previous_address(dir, &name).unwrap_or_else(|| "127.0.0.1:0".into());
            let mut args = vec![
                program.clone(),
                "iod".into(),
                "--index".into(),
                index.to_string(),
                "--data".into(),
                data.display().to_string(),
                "--key".into(),
                key.display().to_string(),
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
            if let Some(ofi) = ofi {
                args.extend(["--ofi-provider".into(), ofi.provider.clone()]);
                if let Some(node) = &ofi.node {
                    args.extend(["--ofi-node".into(), node.clone()]);
                }
            }
            if let Some(address) = iod_metrics.get(usize::from(index)) {
                args.extend(["--metrics".into(), address.clone()]);
            }
            args.extend(iod_flags.iter().cloned());
            let command = ServerCommand {
                launcher: Vec::new(),
                program: args,
                address_here: true,
            };
            starting.push((index, spawn_server(dir, &name, command)?));
            started.push(name);
        }
        let mut iod_addresses = Vec::new();
        for index in 0..servers {
            let name = format!("iod-{index}");
            let address = match starting.iter_mut().find(|(at, _)| *at == index) {
                Some((_, server)) => wait_for_address(dir, server, deadline)?,
                None => previous_address(dir, &name).ok_or_else(|| {
                    format!(
                        "{name} runs but its address is not in {}",
                        run_dir(dir).display()
                    )
                })?,
            };
            iod_addresses.push(address);
        }
        let mds_address = if alive.contains("mds") {
            previous_address(dir, "mds").ok_or_else(|| {
                format!(
                    "the mds runs but its address is not in {}",
                    run_dir(dir).display()
                )
            })?
        } else {
            let mut mds_args = vec![
                program.clone(),
                "mds".to_owned(),
                "--db".to_owned(),
                dir.join("mds").join("meta.redb").display().to_string(),
                "--stripe-unit".to_owned(),
                stripe_unit.to_string(),
                "--key".to_owned(),
                key.display().to_string(),
                "--listen".to_owned(),
                previous_address(dir, "mds").unwrap_or_else(|| "127.0.0.1:0".into()),
            ];
            for address in &iod_addresses {
                mds_args.push("--iod".to_owned());
                mds_args.push(address.clone());
            }
            mds_args.extend(mds_flags.iter().cloned());
            let command = ServerCommand {
                launcher: Vec::new(),
                program: mds_args,
                address_here: true,
            };
            let mut mds = spawn_server(dir, "mds", command)?;
            started.push("mds".to_owned());
            wait_for_address(dir, &mut mds, deadline)?
        };
        // An agent socket path too long for the kernel leaves the host without an agent:
        // only processes that can read the key can then use the cluster.
        let agent_fits = agent_socket.as_os_str().len() <= UNIX_SOCKET_PATH_BYTES_MAX;
        if !agent_fits {
            tracing::warn!(
                "{} is too long for a Unix socket; no agent runs for this cluster",
                agent_socket.display()
            );
        } else if !alive.contains("agent") {
            let command = ServerCommand {
                launcher: Vec::new(),
                program: vec![
                    program.clone(),
                    "agent".to_owned(),
                    "--key".to_owned(),
                    key.display().to_string(),
                    "--socket".to_owned(),
                    agent_socket.display().to_string(),
                ],
                address_here: true,
            };
            let mut agent = spawn_server(dir, "agent", command)?;
            started.push("agent".to_owned());
            wait_for_address(dir, &mut agent, deadline)?;
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
            client: kept_client_entry(dir),
        };
        save_cluster_file(dir, &config)?;
        wait_until_answering(&config, &mut [], deadline)?;
        Ok::<_, String>(config)
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

/// Starts the servers of the hostfile `hosts` that are not running (each through its
/// launcher, at its fixed address), keeps a copy of the hostfile in `dir/hosts`, and writes
/// the cluster file naming those addresses.
fn start_hosts(
    dir: &Path,
    hosts: &Path,
    stripe_unit: u64,
    mds_flags: &[String],
) -> Result<(ClusterConfig, Vec<String>), String> {
    let text = fs::read_to_string(hosts)
        .map_err(|err| format!("cannot read the hostfile {}: {err}", hosts.display()))?;
    let hostfile = hosts::Hostfile::load(hosts)?;
    let alive = prepare(dir)?;
    let kept = dir.join(HOSTS_FILE);
    // Servers that run from another hostfile, or from a local `up` (no hostfile kept), would
    // be mixed with these.
    if !alive.is_empty() && fs::read_to_string(&kept).map_or(true, |old| old != text) {
        return Err(format!(
            "servers of {} run from another hostfile or a local `up` (kept hostfile: {}); run `tessera down --dir {}` first",
            dir.display(),
            kept.display(),
            dir.display()
        ));
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
    let (mds_address, mds_launcher) = &hostfile.mds;
    let mut servers: Vec<(String, hosts::Launcher, Vec<String>)> = Vec::new();
    for ((address, launcher), index) in hostfile.iods.iter().zip(0u16..) {
        let mut args = vec![
            program.clone(),
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
        program.clone(),
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
            program.clone(),
            "agent".to_owned(),
            "--key".to_owned(),
            key.display().to_string(),
            "--socket".to_owned(),
            agent_socket.display().to_string(),
        ];
        servers.push((format!("agent-{line}"), launcher.clone(), args));
    }
    let config = ClusterConfig {
        mds: MdsEntry {
            address: mds_address.clone(),
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
            key: Some(key.clone()),
            agent: (!hostfile.agents.is_empty()).then(|| agent_socket.clone()),
        },
        cluster_id: Some(cluster_id),
        client: kept_client_entry(dir),
    };
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
        Ok::<_, String>(())
    })();
    match result {
        Ok(()) => Ok((config, started)),
        Err(err) => {
            stop_started(dir, &started);
            Err(err)
        }
    }
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
pub fn restart(args: &RestartArgs) -> Result<(), String> {
    let name = match (args.role.as_str(), args.index) {
        ("mds", None) => "mds".to_owned(),
        ("iod", Some(index)) => format!("iod-{index}"),
        ("agent", None) if saved_command(&args.dir, "agent").is_some() => "agent".to_owned(),
        ("agent", line) => format!("agent-{}", line.unwrap_or(0)),
        ("iod", None) => {
            return Err("restart iod: give its index (`tessera restart iod 1`)".to_owned())
        }
        (role, _) => {
            return Err(format!(
                "restart {role}: expected `mds`, `iod N` or `agent [N]`"
            ))
        }
    };
    owned::check_cluster_dir(&args.dir)?;
    let command = saved_command(&args.dir, &name).ok_or_else(|| {
        format!(
            "no saved command for {name} in {} (was this cluster started by `tessera up`?)",
            run_dir(&args.dir).display()
        )
    })?;
    let config =
        ClusterConfig::load(&args.dir.join("cluster.toml")).map_err(|err| err.to_string())?;
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
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                stop_one(&args.dir, &pid_file);
                return Err(err);
            }
        }
    };
    println!(
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

/// Waits until every server of `config` answers a ping; fails early, with its log, if one
/// of the processes in `starting` exits.
fn wait_until_answering(
    config: &ClusterConfig,
    starting: &mut [Starting],
    deadline: Instant,
) -> Result<(), String> {
    let options = ClientOptions {
        timeout: Duration::from_secs(2),
        ..ClientOptions::default()
    };
    loop {
        for server in starting.iter_mut() {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(exited_message(server, status));
            }
        }
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

/// Stops the server of `pid_file` if it runs (SIGTERM, then SIGKILL after
/// [`SHUTDOWN_TIMEOUT`]) and removes the pid file; its address file stays, so the next start
/// puts it at the same address. Returns whether it was running.
fn stop_one(dir: &Path, pid_file: &Path) -> bool {
    let name = pid_file
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let alive = |pid| server_alive(dir, pid_file, pid);
    let mut stopped = false;
    if let Some(pid) = read_pid(pid_file).filter(|&pid| alive(pid)) {
        // SAFETY: sending a signal to a pid touches no memory of ours.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        while alive(pid) && Instant::now() < deadline {
            reap(pid);
            std::thread::sleep(Duration::from_millis(10));
        }
        if alive(pid) {
            eprintln!(
                "tessera: {name} (pid {pid}) ignored SIGTERM for {SHUTDOWN_TIMEOUT:?}; killing it"
            );
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            reap(pid);
        }
        stopped = true;
    }
    let _ = fs::remove_file(pid_file);
    stopped
}

/// Stops every process of `dir`; returns how many were stopped.
pub fn stop_all(dir: &Path) -> usize {
    pid_files(dir)
        .iter()
        .filter(|pid_file| stop_one(dir, pid_file))
        .count()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn serve_flags_forward_only_what_was_given_as_the_iod_spells_it() {
        assert!(serve_flags(None, None).is_empty());
        assert_eq!(
            serve_flags(Some(ServeMode::Unified), Some(64 << 20)),
            ["--serve", "unified", "--cache-bytes", "67108864"]
        );
        assert_eq!(serve_flags(None, Some(4096)), ["--cache-bytes", "4096"]);
        let names: Vec<&str> = ServeMode::ALL.iter().map(|mode| mode.name()).collect();
        assert_eq!(names, ["normal", "mmap", "unified"]);
        let up = |words: &[&str]| {
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                up: UpArgs,
            }
            let words = ["up", "--dir", "/c"].iter().chain(words);
            <Cli as clap::Parser>::try_parse_from(words).map(|cli| cli.up)
        };
        let args = up(&["--serve", "unified", "--cache-bytes", "512m"]).unwrap();
        assert_eq!(
            (args.serve, args.cache_bytes),
            (Some(ServeMode::Unified), Some(512 << 20))
        );
        assert_eq!(up(&[]).unwrap().serve, None);
        let err = up(&["--serve", "fast"]).err().unwrap().to_string();
        assert!(err.contains("fast") && err.contains("unified"), "{err}");
    }

    #[test]
    fn metrics_ports_follow_the_base_and_stay_in_range() {
        let (mds, iods) = metrics_addresses(9100, 3).unwrap();
        assert_eq!(mds, "127.0.0.1:9100");
        assert_eq!(iods, ["127.0.0.1:9101", "127.0.0.1:9102", "127.0.0.1:9103"]);
        assert!(metrics_addresses(65_535, 1)
            .unwrap_err()
            .contains("65535 to 65536"));
        assert!(metrics_addresses(0, 1).is_err());
        assert_eq!(metrics_addresses(65_534, 1).unwrap().1, ["127.0.0.1:65535"]);
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
        // Behind a launcher (ssh keeps the program's words in its own command line), and a
        // hostfile's agents.
        let over_ssh = words(&format!(
            "ssh -tt -o BatchMode=yes node1 /bin/tessera iod --index 2 --key {key}"
        ));
        assert!(is_our_server(dir, &iod, &over_ssh));
        assert!(!is_our_server(dir, &mds, &over_ssh));
        assert!(is_our_server(dir, &run.join("agent-3.pid"), &agent_line));
        assert!(!is_our_server(dir, &run.join("agent-x.pid"), &agent_line));
        // Quoted for the remote shell when a path needs it.
        let spaced = Path::new("/clusters/my one");
        let quoted: Vec<String> = words("ssh -tt node1 /bin/tessera mds --key")
            .into_iter()
            .chain([shell_quoted("/clusters/my one/key")])
            .collect();
        assert_eq!(quoted.last().unwrap(), "'/clusters/my one/key'");
        assert!(is_our_server(spaced, &spaced.join("run/mds.pid"), &quoted));
        for word in ["plain/path:7000", "it's here", "", "'"] {
            assert_eq!(shell_unquoted(&shell_quoted(word)), word);
        }
    }
}
