//! The cluster file (`cluster.toml`) that tells a client where the servers are.
//!
//! `tessera up` writes it; clients read it from `--cluster FILE` or `$TESSERA_CLUSTER`.
//!
//! ```toml
//! [mds]
//! address = "127.0.0.1:40001"
//!
//! [[iod]]
//! index = 0
//! address = "127.0.0.1:40002"
//!
//! [ofi]                  # optional: the iods serve one-sided transfers over libfabric
//! provider = "tcp;ofi_rxm"
//! node = "127.0.0.1"
//!
//! [auth]
//! key = "/c/key"         # used when this process can read it (mode 0600)
//! agent = "/c/agent.sock" # else this host's agent signs ($TESSERA_AGENT overrides)
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};
use tessera_proto::limits::SERVERS_MAX;

use crate::error::ClientError;

/// The environment variable naming the cluster file.
pub const CLUSTER_ENV: &str = "TESSERA_CLUSTER";

/// Address of the metadata server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsEntry {
    /// `host:port`.
    pub address: String,
}

/// One I/O server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IodEntry {
    /// Index in the cluster (what layouts name).
    pub index: u16,
    /// `host:port`.
    pub address: String,
    /// The server's Unix socket, for clients on its host (the `local` backend: data moves
    /// one-sidedly with `process_vm_readv`/`process_vm_writev`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<std::path::PathBuf>,
}

/// The libfabric provider the iods serve one-sided transfers over (`tessera up
/// --ofi-provider`); clients built with the `ofi` feature open the same provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfiEntry {
    /// The provider, e.g. `tcp;ofi_rxm` or `shm`.
    pub provider: String,
    /// The address endpoints bind to (`tcp;ofi_rxm`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// How a client proves who it is (`[auth]`): by the cluster key when it can read it (root on
/// a cluster it started, the servers), else by asking the agent of its host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AuthEntry {
    /// The cluster key file (mode 0600; readable by its owner only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<std::path::PathBuf>,
    /// The Unix socket of this host's agent (`tessera agent`); `$TESSERA_AGENT` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<std::path::PathBuf>,
}

/// What the cluster's clients do by default (`[client]`); a client's own
/// [`crate::ClientOptions`] (and `$TESSERA_CLIENT_CACHE`, `$TESSERA_CLIENT_DEMOTE`,
/// `$TESSERA_CLIENT_WRITE_BACK`) win.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClientEntry {
    /// The client cache's budget (`64m`, `1g`; `0` for none), docs/SEMANTICS.md §3.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// What the cache does with the blocks it evicts: `off`, `eager` or `buffered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demote: Option<String>,
    /// Whether the cache buffers small writes under write leases (docs/SEMANTICS.md §3.3);
    /// needs `cache`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_back: Option<bool>,
}

impl ClientEntry {
    /// Whether nothing is set (the section is then left out of a written file).
    pub fn is_empty(&self) -> bool {
        self.cache.is_none() && self.demote.is_none() && self.write_back.is_none()
    }

    /// The cache budget, if set.
    pub fn cache_bytes(&self) -> Result<Option<u64>, String> {
        self.cache
            .as_deref()
            .map(|text| {
                crate::size::parse_bytes(text)
                    .map_err(|err| format!("[client] cache = {text:?}: {err}"))
            })
            .transpose()
    }

    /// The DEMOTE mode, if set.
    pub fn demote(&self) -> Result<Option<crate::DemoteMode>, String> {
        self.demote
            .as_deref()
            .map(|text| {
                text.parse()
                    .map_err(|err| format!("[client] demote: {err}"))
            })
            .transpose()
    }
}

/// Where a cluster's servers are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// The metadata server.
    pub mds: MdsEntry,
    /// The I/O servers, by index.
    #[serde(rename = "iod")]
    pub iods: Vec<IodEntry>,
    /// The fabric the iods serve one-sided transfers over, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ofi: Option<OfiEntry>,
    /// How clients authenticate.
    #[serde(default)]
    pub auth: AuthEntry,
    /// The cluster's id (derived from its key): every server names it when a client
    /// connects, and a server of another cluster is refused. Absent: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_id")]
    pub cluster_id: Option<u64>,
    /// The clients' defaults.
    #[serde(default, skip_serializing_if = "ClientEntry::is_empty")]
    pub client: ClientEntry,
}

/// A cluster id as 16 hex digits in the cluster file.
mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(clippy::ref_option)]
    pub fn serialize<S: Serializer>(id: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => serializer.serialize_str(&format!("{id:016x}")),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        let text = Option::<String>::deserialize(deserializer)?;
        text.map(|text| {
            u64::from_str_radix(&text, 16).map_err(|_| {
                serde::de::Error::custom(format!("cluster_id {text:?} is not 16 hex digits"))
            })
        })
        .transpose()
    }
}

impl ClusterConfig {
    /// Reads and checks a cluster file.
    pub fn load(path: &Path) -> Result<Self, ClientError> {
        let config_error = |detail: String| ClientError::Config {
            path: path.display().to_string(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|err| config_error(err.to_string()))?;
        let config: Self = toml::from_str(&text).map_err(|err| config_error(err.to_string()))?;
        config.validate().map_err(config_error)?;
        Ok(config)
    }

    /// Reads the cluster file named by `$TESSERA_CLUSTER`.
    pub fn from_env() -> Result<Self, ClientError> {
        let path = std::env::var_os(CLUSTER_ENV).ok_or_else(|| ClientError::Config {
            path: format!("${CLUSTER_ENV}"),
            detail: "not set: pass --cluster FILE or set TESSERA_CLUSTER".to_owned(),
        })?;
        Self::load(Path::new(&path))
    }

    /// Checks that the iods are numbered 0..n in order and the `[client]` values parse.
    pub fn validate(&self) -> Result<(), String> {
        self.client.cache_bytes()?;
        self.client.demote()?;
        if self.iods.is_empty() || self.iods.len() > SERVERS_MAX {
            return Err(format!(
                "it lists {} I/O servers; a cluster has 1..={SERVERS_MAX}",
                self.iods.len()
            ));
        }
        for (position, iod) in self.iods.iter().enumerate() {
            if usize::from(iod.index) != position {
                return Err(format!("I/O server entry {position} has index {}; entries must be numbered 0, 1, ... in order", iod.index));
            }
        }
        Ok(())
    }

    /// Writes the cluster file (atomically: a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = toml::to_string(self).map_err(std::io::Error::other)?;
        let temporary = path.with_extension("toml.tmp");
        std::fs::write(&temporary, text)?;
        std::fs::rename(temporary, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks_indices() {
        let config = ClusterConfig {
            mds: MdsEntry {
                address: "127.0.0.1:1".into(),
            },
            iods: vec![
                IodEntry {
                    index: 0,
                    address: "127.0.0.1:2".into(),
                    local: Some("/run/tessera/iod-0.sock".into()),
                },
                IodEntry {
                    index: 1,
                    address: "127.0.0.1:3".into(),
                    local: None,
                },
            ],
            ofi: Some(OfiEntry {
                provider: "shm".into(),
                node: None,
            }),
            auth: AuthEntry {
                key: Some("/c/key".into()),
                agent: Some("/c/agent.sock".into()),
            },
            cluster_id: Some(0x0123_4567_89ab_cdef),
            client: ClientEntry {
                cache: Some("64m".into()),
                demote: Some("buffered".into()),
                write_back: Some(true),
            },
        };
        let text = toml::to_string(&config).unwrap();
        assert!(text.contains("[[iod]]"), "{text}");
        assert!(text.contains("[client]"), "{text}");
        assert_eq!(toml::from_str::<ClusterConfig>(&text).unwrap(), config);
        assert_eq!(config.client.cache_bytes().unwrap(), Some(64 << 20));
        assert_eq!(
            config.client.demote().unwrap(),
            Some(crate::DemoteMode::Buffered)
        );
        let mut bad = config.clone();
        bad.iods[1].index = 5;
        assert!(bad.validate().unwrap_err().contains("index 5"));
        let mut bad = config.clone();
        bad.client.cache = Some("lots".into());
        assert!(bad.validate().unwrap_err().contains("[client] cache"));
        let mut bad = config;
        bad.client.demote = Some("sometimes".into());
        assert!(bad.validate().unwrap_err().contains("sometimes"));
    }
}
