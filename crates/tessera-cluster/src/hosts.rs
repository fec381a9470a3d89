//! The hostfile of `tessera up --hosts FILE`: which server runs where, and how to start it.
//!
//! One server per line: `mds ADDR:PORT`, `iod N ADDR:PORT`, or `agent HOST`, each optionally
//! followed by a launcher: `local` (run here), `ssh HOST` (run there through `ssh -tt`), or
//! `exec "PREFIX"` (run here behind a command prefix such as `ip netns exec NS`). A line
//! without a launcher runs locally when its host is `localhost`, `127.0.0.1` or `::1`, and
//! over `ssh` to its host otherwise. `#` starts a comment. The parsed file becomes, in
//! `hosted.rs`, one command per server with a fixed `--listen` address, so every start and
//! restart of a server puts it at the same address.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use tessera_proto::limits::SERVERS_MAX;

/// Most agent lines a hostfile may hold (one per client host).
pub const HOSTFILE_AGENTS_MAX: usize = 4096;
/// Largest hostfile read, in bytes.
pub const HOSTFILE_BYTES_MAX: u64 = 1 << 20;

/// A hostfile that cannot be read or does not parse, naming the file (and the line).
#[derive(Debug, thiserror::Error)]
pub enum HostfileError {
    /// The file cannot be read.
    #[error("cannot read the hostfile {}: {source}", path.display())]
    Read {
        /// The hostfile.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is over [`HOSTFILE_BYTES_MAX`].
    #[error(
        "the hostfile {} holds {size} bytes, over the limit of {HOSTFILE_BYTES_MAX}",
        path.display()
    )]
    TooLarge {
        /// The hostfile.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// A line does not parse, or repeats what another line said.
    #[error("{name}:{line}: {detail}")]
    Line {
        /// The hostfile, as named in errors.
        name: String,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        detail: LineError,
    },
    /// No mds line.
    #[error("{name}: no mds line")]
    NoMds {
        /// The hostfile, as named in errors.
        name: String,
    },
    /// No iod line.
    #[error("{name}: no iod lines")]
    NoIods {
        /// The hostfile, as named in errors.
        name: String,
    },
    /// An iod below the highest index has no line.
    #[error("{name}: iod {index} is missing (iods are numbered 0, 1, 2, …)")]
    IodMissing {
        /// The hostfile, as named in errors.
        name: String,
        /// The iod.
        index: usize,
    },
}

/// What is wrong with one line of a hostfile.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// A `"` has no closing one.
    #[error("a quote is not closed")]
    UnclosedQuote,
    /// An address without a host or a port.
    #[error("{0:?} is not HOST:PORT")]
    NotHostPort(String),
    /// An address with port 0.
    #[error("{0:?}: a hostfile needs a fixed port, not 0 (clients find servers by it)")]
    PortZero(String),
    /// An address whose port is not a number.
    #[error("{address:?}: port {port:?} is not a number 1..=65535")]
    BadPort {
        /// The address.
        address: String,
        /// Its port.
        port: String,
    },
    /// `exec ""`.
    #[error("exec needs a command prefix in quotes")]
    EmptyExec,
    /// Launcher words that are none of the three.
    #[error("launcher {0:?} is not `local`, `ssh HOST` or `exec \"PREFIX\"`")]
    BadLauncher(String),
    /// An iod index that is not a number.
    #[error("iod index {0:?} is not a number")]
    BadIndex(String),
    /// A line that is no server.
    #[error(
        "expected `mds ADDR:PORT`, `iod N ADDR:PORT` or `agent HOST`, then an optional launcher"
    )]
    NoServer,
    /// An address given to two servers.
    #[error("address {0} is given twice")]
    AddressTwice(String),
    /// A second mds line.
    #[error("a second mds line (a cluster has one mds)")]
    SecondMds,
    /// An iod index at or over [`SERVERS_MAX`].
    #[error("iod index {0} is over the limit of {SERVERS_MAX} iods")]
    IndexOverLimit(u16),
    /// An iod index given twice.
    #[error("iod {0} is given twice")]
    IndexTwice(u16),
    /// More than [`HOSTFILE_AGENTS_MAX`] agent lines.
    #[error("more than {HOSTFILE_AGENTS_MAX} agent lines")]
    TooManyAgents,
}

/// How a server of a hostfile is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// A child process of `tessera up` on this host.
    Local,
    /// `ssh -tt HOST` runs it on HOST; stopping the local ssh hangs up the remote terminal,
    /// and the server takes the hangup as a request to stop.
    Ssh(String),
    /// A child process on this host behind a command prefix (`ip netns exec NS`,
    /// `docker exec NAME`): the words of the prefix, split at white space.
    Exec(Vec<String>),
}

impl Launcher {
    /// The words placed before the server's own command line.
    pub fn prefix(&self) -> Vec<String> {
        match self {
            Self::Local => Vec::new(),
            // No password prompt, and an unreachable host fails within the start-up time.
            Self::Ssh(host) => [
                "ssh",
                "-tt",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                host.as_str(),
            ]
            .map(str::to_owned)
            .to_vec(),
            Self::Exec(words) => words.clone(),
        }
    }

    /// Whether the server shares this host's file system (its cost model can be copied, its
    /// address file read here).
    pub fn is_this_host(&self) -> bool {
        !matches!(self, Self::Ssh(_))
    }
}

/// One line of a hostfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostLine {
    /// The metadata server and the address it listens on.
    Mds { address: String, launcher: Launcher },
    /// I/O server `index` and the address it listens on.
    Iod {
        index: u16,
        address: String,
        launcher: Launcher,
    },
    /// A host's agent (it signs credentials for that host's processes).
    Agent { host: String, launcher: Launcher },
}

/// A parsed hostfile: exactly one mds, iods `0..n` each once, any number of agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostfile {
    /// The mds's address and launcher.
    pub mds: (String, Launcher),
    /// Every iod's address and launcher, by index.
    pub iods: Vec<(String, Launcher)>,
    /// Every agent's host and launcher, in file order.
    pub agents: Vec<(String, Launcher)>,
}

/// Whether `host` names this machine (the default launcher is then `local`).
fn is_loopback(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1" | "[::1]")
}

/// The host part of `ADDR:PORT` (brackets of an IPv6 literal removed).
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Splits a line into words: white space separates, `"…"` groups (no escapes inside).
fn words(line: &str) -> Result<Vec<String>, LineError> {
    let mut words = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').ok_or(LineError::UnclosedQuote)?;
            words.push(quoted[..end].to_owned());
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            words.push(rest[..end].to_owned());
            rest = rest[end..].trim_start();
        }
    }
    Ok(words)
}

/// Checks that `address` is `HOST:PORT` with a fixed (non-zero) port.
fn fixed_address(address: &str) -> Result<String, LineError> {
    let port = address
        .rsplit_once(':')
        .and_then(|(host, port)| (!host.is_empty()).then_some(port))
        .ok_or_else(|| LineError::NotHostPort(address.to_owned()))?;
    match port.parse::<u16>() {
        Ok(0) => Err(LineError::PortZero(address.to_owned())),
        Ok(_) => Ok(address.to_owned()),
        Err(_) => Err(LineError::BadPort {
            address: address.to_owned(),
            port: port.to_owned(),
        }),
    }
}

/// The launcher words after a server's own fields, or the default for `host`.
fn launcher(words: &[String], host: &str) -> Result<Launcher, LineError> {
    match words {
        [] if is_loopback(host) => Ok(Launcher::Local),
        [] => Ok(Launcher::Ssh(host.to_owned())),
        [local] if local == "local" => Ok(Launcher::Local),
        [ssh, target] if ssh == "ssh" => Ok(Launcher::Ssh(target.clone())),
        [exec, prefix] if exec == "exec" => {
            let prefix: Vec<String> = prefix.split_whitespace().map(str::to_owned).collect();
            if prefix.is_empty() {
                Err(LineError::EmptyExec)
            } else {
                Ok(Launcher::Exec(prefix))
            }
        }
        other => Err(LineError::BadLauncher(other.join(" "))),
    }
}

/// Parses one non-empty line.
fn parse_line(line: &str) -> Result<HostLine, LineError> {
    let words = words(line)?;
    match words.first().map(String::as_str) {
        Some("mds") if words.len() >= 2 => {
            let address = fixed_address(&words[1])?;
            let launcher = launcher(&words[2..], host_of(&address))?;
            Ok(HostLine::Mds { address, launcher })
        }
        Some("iod") if words.len() >= 3 => {
            let index = words[1]
                .parse::<u16>()
                .map_err(|_| LineError::BadIndex(words[1].clone()))?;
            let address = fixed_address(&words[2])?;
            let launcher = launcher(&words[3..], host_of(&address))?;
            Ok(HostLine::Iod {
                index,
                address,
                launcher,
            })
        }
        Some("agent") if words.len() >= 2 => {
            let host = words[1].clone();
            let launcher = launcher(&words[2..], &host)?;
            Ok(HostLine::Agent { host, launcher })
        }
        _ => Err(LineError::NoServer),
    }
}

impl Hostfile {
    /// Parses the text of a hostfile; `name` is used in errors.
    pub fn parse(text: &str, name: &str) -> Result<Self, HostfileError> {
        let mut mds = None;
        let mut iods: Vec<Option<(String, Launcher)>> = Vec::new();
        let mut agents = Vec::new();
        let mut addresses = BTreeSet::new();
        for (number, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let at = |detail: LineError| HostfileError::Line {
                name: name.to_owned(),
                line: number + 1,
                detail,
            };
            let parsed = parse_line(line).map_err(at)?;
            if let HostLine::Mds { address, .. } | HostLine::Iod { address, .. } = &parsed {
                // Two servers on one address would be the same server to every client.
                if !addresses.insert(address.clone()) {
                    return Err(at(LineError::AddressTwice(address.clone())));
                }
            }
            match parsed {
                HostLine::Mds { address, launcher } => {
                    if mds.replace((address, launcher)).is_some() {
                        return Err(at(LineError::SecondMds));
                    }
                }
                HostLine::Iod {
                    index,
                    address,
                    launcher,
                } => {
                    let slot = usize::from(index);
                    if slot >= SERVERS_MAX {
                        return Err(at(LineError::IndexOverLimit(index)));
                    }
                    if iods.len() <= slot {
                        iods.resize(slot + 1, None);
                    }
                    if iods[slot].replace((address, launcher)).is_some() {
                        return Err(at(LineError::IndexTwice(index)));
                    }
                }
                HostLine::Agent { host, launcher } => {
                    if agents.len() == HOSTFILE_AGENTS_MAX {
                        return Err(at(LineError::TooManyAgents));
                    }
                    agents.push((host, launcher));
                }
            }
        }
        let name = name.to_owned();
        let Some(mds) = mds else {
            return Err(HostfileError::NoMds { name });
        };
        if iods.is_empty() {
            return Err(HostfileError::NoIods { name });
        }
        let iods = iods
            .into_iter()
            .enumerate()
            .map(|(index, iod)| {
                iod.ok_or_else(|| HostfileError::IodMissing {
                    name: name.clone(),
                    index,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { mds, iods, agents })
    }

    /// Reads and parses the hostfile at `path`.
    pub fn load(path: &Path) -> Result<Self, HostfileError> {
        let read = |source| HostfileError::Read {
            path: path.to_owned(),
            source,
        };
        let size = std::fs::metadata(path).map_err(read)?.len();
        if size > HOSTFILE_BYTES_MAX {
            return Err(HostfileError::TooLarge {
                path: path.to_owned(),
                size,
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Self::parse(&text, &path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_of_line_and_launcher() {
        let text = r#"
            # the metadata server
            mds 192.0.2.10:7000
            iod 1 127.0.0.1:7002
            iod 0 192.0.2.11:7001 ssh admin@node1   # remote over ssh
            agent client1 exec "ip netns exec tsr-client"
            agent localhost
        "#;
        let hosts = Hostfile::parse(text, "hosts").unwrap();
        assert_eq!(
            hosts.mds,
            (
                "192.0.2.10:7000".to_owned(),
                Launcher::Ssh("192.0.2.10".into())
            )
        );
        assert_eq!(
            hosts.iods,
            vec![
                (
                    "192.0.2.11:7001".to_owned(),
                    Launcher::Ssh("admin@node1".into())
                ),
                ("127.0.0.1:7002".to_owned(), Launcher::Local),
            ]
        );
        assert_eq!(
            hosts.agents,
            vec![
                (
                    "client1".to_owned(),
                    Launcher::Exec(vec![
                        "ip".into(),
                        "netns".into(),
                        "exec".into(),
                        "tsr-client".into()
                    ])
                ),
                ("localhost".to_owned(), Launcher::Local),
            ]
        );
        assert_eq!(
            Launcher::Ssh("n".into()).prefix(),
            [
                "ssh",
                "-tt",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                "n"
            ]
        );
    }

    #[test]
    fn bad_hostfiles_are_refused_naming_the_line() {
        for (text, expected) in [
            ("iod 0 127.0.0.1:7001", "no mds line"),
            ("mds 127.0.0.1:7000", "no iod lines"),
            (
                "mds 127.0.0.1:7000\niod 1 127.0.0.1:7001",
                "iod 0 is missing",
            ),
            (
                "mds 127.0.0.1:0\niod 0 127.0.0.1:7001",
                "hosts:1: \"127.0.0.1:0\": a hostfile needs a fixed port",
            ),
            (
                "mds 127.0.0.1:7000\niod 0 127.0.0.1:7000",
                "hosts:2: address 127.0.0.1:7000 is given twice",
            ),
            (
                "mds 127.0.0.1:7000\nmds 127.0.0.1:7001",
                "hosts:2: a second mds line",
            ),
            (
                "mds 127.0.0.1:7000\niod 0 127.0.0.1:7001\niod 0 127.0.0.1:7002",
                "hosts:3: iod 0 is given twice",
            ),
            ("mds 127.0.0.1:7000 rsh x", "hosts:1: launcher \"rsh x\""),
            (
                "mds 127.0.0.1:7000 exec \"ip netns",
                "hosts:1: a quote is not closed",
            ),
            (
                "mds 127.0.0.1:7000 exec \"\"",
                "hosts:1: exec needs a command prefix",
            ),
            (
                "iod x 127.0.0.1:7001",
                "hosts:1: iod index \"x\" is not a number",
            ),
            ("iod 70000 127.0.0.1:7001", "hosts:1: iod index \"70000\""),
            ("mds localhost", "hosts:1: \"localhost\" is not HOST:PORT"),
            ("server 1", "hosts:1: expected `mds ADDR:PORT`"),
        ] {
            let err = Hostfile::parse(text, "hosts").unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }
}
