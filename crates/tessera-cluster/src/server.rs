//! One server process of a cluster: the command it was started with (`DIR/run/NAME.cmd`), its
//! pid file, how it is started (directly or through a hostfile's launcher), waited for and
//! stopped, and whether a pid is still the server `up` started.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tessera_client::{Client, ClientOptions, ClusterConfig};

use crate::error::ClusterError;
use crate::names::{KEY_FILE, SHUTDOWN_TIMEOUT, STARTUP_TIMEOUT, UNIX_SOCKET_PATH_BYTES_MAX};
use crate::owned::{self, PRIVATE_FILE_MODE};

/// How often a starting server's address file is looked for.
const START_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How long each ping of a starting server may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// How often starting servers are pinged until they all answer.
const ANSWER_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How often a stopping server is looked at until it is gone.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(10);

pub(crate) fn run_dir(dir: &Path) -> PathBuf {
    dir.join("run")
}

/// The command line of `pid`, one string per argument (empty for a zombie or a dead pid).
pub(crate) fn command_line(pid: i32) -> Vec<String> {
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
pub(crate) fn is_our_server(dir: &Path, pid_file: &Path, command: &[String]) -> bool {
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
pub(crate) fn server_alive(dir: &Path, pid_file: &Path, pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists; no memory is involved.
    is_our_server(dir, pid_file, &command_line(pid)) && unsafe { libc::kill(pid, 0) == 0 }
}

pub(crate) fn read_pid(path: &Path) -> Option<i32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The pid files of a cluster directory: the mds first, then the iods.
pub(crate) fn pid_files(dir: &Path) -> Vec<PathBuf> {
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

pub(crate) fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(3)..].join("\n")
}

/// How one server is started: saved as `DIR/run/NAME.cmd` at every start, so `restart` and a
/// later `up` start it again the same way, at the same address.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ServerCommand {
    /// The launcher's words before the program (empty: a plain child of `up`).
    pub(crate) launcher: Vec<String>,
    /// The tessera program, then its arguments (`--listen ADDR` among them).
    pub(crate) program: Vec<String>,
    /// Whether the address file the server writes is on this host's file system (not so
    /// over `ssh`).
    pub(crate) address_here: bool,
}

impl ServerCommand {
    /// The value of `flag` in the program's arguments.
    pub(crate) fn value_of(&self, flag: &str) -> Option<&str> {
        self.program
            .windows(2)
            .find(|pair| pair[0] == flag)
            .map(|pair| pair[1].as_str())
    }

    /// Sets `flag` to `value`, adding it if missing.
    pub(crate) fn set(&mut self, flag: &str, value: &str) {
        match self.program.iter().position(|word| word == flag) {
            Some(at) if at + 1 < self.program.len() => value.clone_into(&mut self.program[at + 1]),
            _ => self.program.extend([flag.to_owned(), value.to_owned()]),
        }
    }
}

/// The command `up` saved for server `name` of `dir`, if any.
pub(crate) fn saved_command(dir: &Path, name: &str) -> Option<ServerCommand> {
    let text = fs::read_to_string(run_dir(dir).join(format!("{name}.cmd"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// Where server `name` listened before: its saved `--listen` when that names a fixed port,
/// else the address it last wrote to `DIR/run/NAME.addr` (kept across `down`).
pub(crate) fn previous_address(dir: &Path, name: &str) -> Option<String> {
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
pub(crate) struct Starting {
    pub(crate) name: String,
    pub(crate) child: std::process::Child,
    pub(crate) address_file: PathBuf,
    pub(crate) log_file: PathBuf,
    pub(crate) command: ServerCommand,
}

/// Writes `text` to `path`, owner-only, by rename (a reader never sees half of it; a link at
/// `path` is replaced, never followed).
pub(crate) fn write_private(path: &Path, text: &str) -> Result<(), ClusterError> {
    Ok(owned::write_new(path, text, PRIVATE_FILE_MODE)?)
}

/// Writes the cluster file `dir/cluster.toml` (readable by every user) by rename.
pub(crate) fn save_cluster_file(dir: &Path, config: &ClusterConfig) -> Result<(), ClusterError> {
    let path = dir.join("cluster.toml");
    let text = toml::to_string(config).map_err(|err| ClusterError::Encode {
        path: path.clone(),
        detail: err.to_string(),
    })?;
    Ok(owned::write_new(&path, &text, owned::SHARED_FILE_MODE)?)
}

pub(crate) fn save_command(
    dir: &Path,
    name: &str,
    command: &ServerCommand,
) -> Result<(), ClusterError> {
    let text = serde_json::to_string_pretty(command).expect("a command serializes");
    write_private(&run_dir(dir).join(format!("{name}.cmd")), &text)
}

/// The path of the running tessera binary: what every server runs (on remote hosts too,
/// which therefore install tessera at the same path).
pub fn tessera_program() -> Result<String, ClusterError> {
    let exe = std::env::current_exe().map_err(ClusterError::CurrentExe)?;
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
        Err(ClusterError::NoProgram { sibling, exe })
    }
}

/// Quotes `word` for the remote shell `ssh` hands its command to (only when needed, so the
/// pid check still sees `tessera ROLE` as words of its own).
pub(crate) fn shell_quoted(word: &str) -> String {
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
pub(crate) fn shell_unquoted(quoted: &str) -> String {
    match quoted
        .strip_prefix('\'')
        .and_then(|rest| rest.strip_suffix('\''))
    {
        Some(inner) if quoted.len() >= 2 => inner.replace(r"'\''", "'"),
        _ => quoted.to_owned(),
    }
}

pub(crate) fn spawn_server(
    dir: &Path,
    name: &str,
    command: ServerCommand,
) -> Result<Starting, ClusterError> {
    let log_file = dir.join("log").join(format!("{name}.log"));
    let address_file = absolute(&run_dir(dir).join(format!("{name}.addr")));
    if command.address_here {
        let _ = fs::remove_file(&address_file);
    }
    save_command(dir, name, &command)?;
    let log = owned::open_log(&log_file)?;
    let log_err = log.try_clone().map_err(|source| ClusterError::Io {
        path: log_file.clone(),
        source,
    })?;
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
        .map_err(|source| ClusterError::Spawn {
            name: name.to_owned(),
            program: words[0].clone(),
            source,
        })?;
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

/// `server` exited while starting, with the end of its log.
pub(crate) fn exited(server: &Starting, status: std::process::ExitStatus) -> ClusterError {
    ClusterError::Exited {
        name: server.name.clone(),
        status,
        log: server.log_file.clone(),
        tail: log_tail(&server.log_file),
    }
}

/// Waits for the address a local server writes once it listens, then saves its command with
/// that address fixed, so every later start puts it there again.
pub(crate) fn wait_for_address(
    dir: &Path,
    server: &mut Starting,
    deadline: Instant,
) -> Result<String, ClusterError> {
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
            return Err(exited(server, status));
        }
        if Instant::now() > deadline {
            return Err(ClusterError::NotStarted {
                name: server.name.clone(),
                timeout: STARTUP_TIMEOUT,
                log: server.log_file.clone(),
            });
        }
        std::thread::sleep(START_POLL_INTERVAL);
    }
}

/// Waits until every server of `config` answers a ping; fails early, with its log, if one
/// of the processes in `starting` exits.
pub(crate) fn wait_until_answering(
    config: &ClusterConfig,
    starting: &mut [Starting],
    deadline: Instant,
) -> Result<(), ClusterError> {
    let options = ClientOptions {
        timeout: ANSWER_TIMEOUT,
        ..ClientOptions::default()
    };
    loop {
        for server in starting.iter_mut() {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(exited(server, status));
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
            return Err(ClusterError::NotAnswering { failures });
        }
        std::thread::sleep(ANSWER_POLL_INTERVAL);
    }
}

/// Stops the servers of `started` (what one `up` or `restart` started before it failed).
pub(crate) fn stop_started(dir: &Path, started: &[String]) {
    for name in started {
        stop_one(dir, &run_dir(dir).join(format!("{name}.pid")));
    }
}

/// Stops the server of `pid_file` if it runs (SIGTERM, then SIGKILL after
/// [`SHUTDOWN_TIMEOUT`]) and removes the pid file; its address file stays, so the next start
/// puts it at the same address. Returns whether it was running.
pub(crate) fn stop_one(dir: &Path, pid_file: &Path) -> bool {
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
            std::thread::sleep(STOP_POLL_INTERVAL);
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
pub(crate) fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid writes only to `status`, a local we own; WNOHANG never blocks.
    unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
}

/// Where iod `index` of the cluster in `dir` listens for same-host clients, unless the path
/// is too long for a Unix socket (then that iod is reached by TCP only).
pub(crate) fn local_socket(dir: &Path, index: u16) -> Option<std::path::PathBuf> {
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

pub(crate) fn absolute(path: &Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
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
