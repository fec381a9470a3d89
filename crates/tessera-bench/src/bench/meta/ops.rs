//! A target of the meta bench and the operations a phase makes on it ([`Ops`]): the native
//! client of a cluster, or system calls under a directory (local, tmpfs, `tessera mount`).
//! The phases of the worker and the `tar-x` unpacking both go through it, so it is a leaf
//! they share.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, OpenMode};

/// Subdirectories of a tree (`tree-create`), each holding its share of the items.
pub const TREE_FANOUT: usize = 10;

/// Where a step's operations go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// The native client of the cluster in this file.
    Native(PathBuf),
    /// System calls under this directory: a local directory, tmpfs, or `tessera mount`.
    Posix(PathBuf),
}

/// The operations of a target.
pub(super) enum Ops {
    Native(Client),
    Posix(PathBuf),
}

pub(super) type OpResult<T> = Result<T, String>;

impl Ops {
    pub(super) fn open(target: &Target) -> OpResult<Self> {
        Ok(match target {
            Target::Native(cluster) => {
                let config = ClusterConfig::load(cluster).map_err(|err| err.to_string())?;
                Self::Native(Client::new(&config, &ClientOptions::default()))
            }
            Target::Posix(root) => Self::Posix(root.clone()),
        })
    }

    pub(super) fn local(root: &Path, path: &str) -> PathBuf {
        root.join(path.trim_start_matches('/'))
    }

    pub(super) fn create(&self, path: &str) -> OpResult<()> {
        match self {
            Self::Native(client) => {
                let options = CreateOptions {
                    exclusive: true,
                    ..CreateOptions::default()
                };
                client
                    .create(path, &options)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
            Self::Posix(root) => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(Self::local(root, path))
                .map(drop)
                .map_err(|err| format!("{path}: {err}")),
        }
    }

    /// Whether `path` is a file, and its size.
    pub(super) fn stat(&self, path: &str) -> OpResult<(bool, u64)> {
        match self {
            Self::Native(client) => client
                .stat(path)
                .map(|attr| (attr.kind == tessera_client::FileKind::File, attr.size))
                .map_err(|e| e.to_string()),
            Self::Posix(root) => std::fs::metadata(Self::local(root, path))
                .map(|meta| (meta.is_file(), meta.len()))
                .map_err(|err| format!("{path}: {err}")),
        }
    }

    pub(super) fn open_close(&self, path: &str) -> OpResult<()> {
        match self {
            Self::Native(client) => client
                .open(path, OpenMode::ReadOnly)
                .map(drop)
                .map_err(|e| e.to_string()),
            Self::Posix(root) => std::fs::File::open(Self::local(root, path))
                .map(drop)
                .map_err(|err| format!("{path}: {err}")),
        }
    }

    pub(super) fn list(&self, dir: &str) -> OpResult<Vec<String>> {
        match self {
            Self::Native(client) => client
                .readdir(dir)
                .map(|entries| entries.into_iter().map(|entry| entry.name).collect())
                .map_err(|e| e.to_string()),
            Self::Posix(root) => std::fs::read_dir(Self::local(root, dir))
                .and_then(|entries| {
                    entries
                        .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into()))
                        .collect()
                })
                .map_err(|err| format!("{dir}: {err}")),
        }
    }

    pub(super) fn rename(&self, from: &str, to: &str) -> OpResult<()> {
        match self {
            Self::Native(client) => client.rename(from, to).map_err(|e| e.to_string()),
            Self::Posix(root) => std::fs::rename(Self::local(root, from), Self::local(root, to))
                .map_err(|err| format!("{from} -> {to}: {err}")),
        }
    }

    pub(super) fn unlink(&self, path: &str) -> OpResult<()> {
        match self {
            Self::Native(client) => client.unlink(path).map_err(|e| e.to_string()),
            Self::Posix(root) => std::fs::remove_file(Self::local(root, path))
                .map_err(|err| format!("{path}: {err}")),
        }
    }

    pub(super) fn mkdir(&self, path: &str) -> OpResult<()> {
        match self {
            Self::Native(client) => client
                .mkdir(path, 0o755)
                .map(drop)
                .map_err(|e| e.to_string()),
            Self::Posix(root) => {
                std::fs::create_dir(Self::local(root, path)).map_err(|err| format!("{path}: {err}"))
            }
        }
    }

    pub(super) fn rmdir(&self, path: &str) -> OpResult<()> {
        match self {
            Self::Native(client) => client.rmdir(path).map_err(|e| e.to_string()),
            Self::Posix(root) => {
                std::fs::remove_dir(Self::local(root, path)).map_err(|err| format!("{path}: {err}"))
            }
        }
    }

    /// The whole of file `path` and its mtime (ns).
    pub(super) fn read_with_mtime(&self, path: &str) -> OpResult<(Vec<u8>, u64)> {
        match self {
            Self::Native(client) => {
                let failed = |err: tessera_client::ClientError| format!("{path}: {err}");
                let file = client.open(path, OpenMode::ReadOnly).map_err(failed)?;
                let attr = file.stat().map_err(failed)?;
                let mut bytes = vec![0u8; usize::try_from(attr.size).map_err(|e| e.to_string())?];
                file.read_at(0, &mut bytes).map_err(failed)?;
                Ok((bytes, attr.mtime_ns))
            }
            Self::Posix(root) => {
                use std::os::unix::fs::MetadataExt;
                let local = Self::local(root, path);
                let failed = |err: std::io::Error| format!("{path}: {err}");
                let meta = std::fs::metadata(&local).map_err(failed)?;
                let mtime_ns = u64::try_from(meta.mtime()).unwrap_or(0) * 1_000_000_000
                    + u64::try_from(meta.mtime_nsec()).unwrap_or(0);
                Ok((std::fs::read(&local).map_err(failed)?, mtime_ns))
            }
        }
    }

    pub(super) fn ping(&self) -> OpResult<()> {
        match self {
            Self::Native(client) => client.ping_mds().map(drop).map_err(|e| e.to_string()),
            Self::Posix(_) => Err("ping: a local directory has no server".to_owned()),
        }
    }
}
