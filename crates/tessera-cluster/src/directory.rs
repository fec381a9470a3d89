//! The cluster directory before any server starts: claimed (this user's alone), its parts
//! made, the pid files of servers that are gone forgotten, its key made or loaded, and one
//! measured cost model shared by the iods of this machine.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tessera_client::ClusterConfig;
use tessera_policy::cost::COST_MODEL_FILE;

use crate::error::ClusterError;
use crate::names::KEY_FILE;
use crate::owned::{self, private_dir, PRIVATE_FILE_MODE};
use crate::server::{absolute, pid_files, read_pid, run_dir, server_alive, tessera_program};

/// Makes the cluster directory `dir` unless it exists, then checks it and every part of it
/// ([`owned::check_cluster_dir`]): a directory another user made first, or anything in it
/// another user owns or may write, is refused before it is used.
pub(crate) fn claim(dir: &Path) -> Result<(), ClusterError> {
    owned::create_dir(dir, owned::SHARED_DIRECTORY_MODE).map_err(|source| {
        ClusterError::Create {
            path: dir.to_owned(),
            source,
        }
    })?;
    Ok(owned::check_cluster_dir(dir)?)
}

/// Checks the cluster directory and creates its parts (`run/` readable by all, so clients
/// reach the sockets; `log/` and `mds/` owner-only), forgets pid files of servers that are
/// gone, and returns the names of the servers still running.
pub(crate) fn prepare(dir: &Path) -> Result<BTreeSet<String>, ClusterError> {
    claim(dir)?;
    let run = run_dir(dir);
    owned::create_dir(&run, owned::SHARED_DIRECTORY_MODE).map_err(|source| {
        ClusterError::Create {
            path: run.clone(),
            source,
        }
    })?;
    for sub in ["log", "mds"] {
        let path = dir.join(sub);
        private_dir(&path).map_err(|source| ClusterError::Io { path, source })?;
    }
    let mut alive = BTreeSet::new();
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
pub(crate) fn cluster_key(dir: &Path) -> Result<(PathBuf, u64), ClusterError> {
    let key = absolute(&dir.join(KEY_FILE));
    // A key that is there must be this user's: anyone else who owns it could sign
    // credentials of any user, and servers of any role.
    let cluster_id = if fs::symlink_metadata(&key).is_ok() {
        tessera_auth::ClusterKey::load_owned(&key)
    } else {
        tessera_auth::ClusterKey::create(&key)
    }?
    .cluster_id();
    Ok((key, cluster_id))
}

/// The `[client]` section of the cluster file a restart rewrites (a user's client defaults
/// survive `tessera up` after `tessera down`); empty when there is none.
pub(crate) fn kept_client_entry(dir: &Path) -> tessera_client::config::ClientEntry {
    ClusterConfig::load(&dir.join("cluster.toml"))
        .map(|config| config.client)
        .unwrap_or_default()
}

/// Measures the storage cost model once, in the first of `indices`' data directories, and
/// gives every iod of `indices` without a model of its own a copy: these data directories
/// share one machine, and iods calibrating all at once on a small machine would measure each
/// other rather than the storage. The measuring is the iod's own (`tessera iod --calibrate`,
/// run here as a process), so this crate needs only the model's file format.
pub(crate) fn share_cost_model(dir: &Path, indices: &[u16]) -> Result<(), ClusterError> {
    let Some(first_index) = indices.first() else {
        return Ok(());
    };
    let first = dir.join(format!("iod-{first_index}"));
    private_dir(&first).map_err(|source| ClusterError::Io {
        path: first.clone(),
        source,
    })?;
    let kept = tessera_policy::cost::load(&first).map_err(|source| ClusterError::CostModel {
        index: *first_index,
        source,
    })?;
    if kept.is_none() {
        calibrate(dir, *first_index, &first)?;
    }
    let measured = first.join(COST_MODEL_FILE);
    // Owner-only like everything else of a data directory, whatever the umask (the copies
    // below take its mode).
    fs::set_permissions(&measured, fs::Permissions::from_mode(PRIVATE_FILE_MODE)).map_err(
        |source| ClusterError::Io {
            path: measured.clone(),
            source,
        },
    )?;
    for index in &indices[1..] {
        let data = dir.join(format!("iod-{index}"));
        let kept = data.join(COST_MODEL_FILE);
        if !kept.exists() {
            private_dir(&data)
                .and_then(|()| fs::copy(&measured, &kept).map(drop))
                .map_err(|source| ClusterError::CopyCostModel { path: kept, source })?;
        }
    }
    Ok(())
}

/// Measures the cost model of iod `index`'s data directory `data` and keeps it there, by
/// `tessera iod --calibrate` (which neither reads the key nor serves).
pub(crate) fn calibrate(dir: &Path, index: u16, data: &Path) -> Result<(), ClusterError> {
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
        .map_err(|source| ClusterError::CalibrateRun {
            index,
            program: program.clone(),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(ClusterError::Calibrate {
            index,
            program,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}
