//! The `tar-x` phase: unpacking an archive of a small tree, as `tar x` does it — a directory,
//! [`TREE_FANOUT`] subdirectories, small files of 0.5–24 KiB with their contents and times.
//! On a POSIX target it runs `tar -xf` itself; the native client makes the same calls tar
//! makes (mkdir, create, write, set the times). The check (untimed) reads every file back,
//! compares its bytes and its mtime with the source's, and removes the tree.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tessera_client::SetTime;

use super::ops::{OpResult, Ops, TREE_FANOUT};

/// The mtime of the source's file `item`: seconds after 2001-02-03 04:05:06 UTC.
const FIRST_MTIME_S: u64 = 981_173_106;

/// An archive and the tree it was made from (on the bench's local disk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TarSource {
    /// `tar -cf` of the tree.
    pub archive: PathBuf,
    /// The tree: `tree/s{b}/f{i}`, `i % TREE_FANOUT == b`.
    pub tree: PathBuf,
    /// Files in it.
    pub files: usize,
}

/// Bytes of file `item`.
fn size(item: usize) -> usize {
    512 + (item * 7919 % 24) * 1024
}

/// Contents of file `item`.
fn contents(item: usize) -> Vec<u8> {
    (0..size(item))
        .map(|at| u8::try_from((at * 31 + item * 17) % 251).expect("below 251"))
        .collect()
}

fn mtime_s(item: usize) -> u64 {
    FIRST_MTIME_S + item as u64
}

fn relative(item: usize) -> String {
    format!("s{}/f{item}", item % TREE_FANOUT)
}

/// Makes the tree of `files` files under `dir` and its archive.
pub fn make_source(dir: &Path, files: usize) -> Result<TarSource, String> {
    let tree = dir.join("tree");
    let failed = |what: &Path, err: std::io::Error| format!("tar source {}: {err}", what.display());
    for branch in 0..TREE_FANOUT {
        let path = tree.join(format!("s{branch}"));
        std::fs::create_dir_all(&path).map_err(|err| failed(&path, err))?;
    }
    for item in 0..files {
        let path = tree.join(relative(item));
        std::fs::write(&path, contents(item)).map_err(|err| failed(&path, err))?;
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(mtime_s(item));
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|file| {
                file.set_times(std::fs::FileTimes::new().set_modified(at).set_accessed(at))
            })
            .map_err(|err| failed(&path, err))?;
    }
    let archive = dir.join("tree.tar");
    let output = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(dir)
        .arg("tree")
        .output()
        .map_err(|err| format!("tar -cf: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "tar -cf: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(TarSource {
        archive,
        tree,
        files,
    })
}

impl TarSource {
    /// Entries an unpacking makes: the tree's directory, its branches, its files.
    pub fn entries(&self) -> usize {
        1 + TREE_FANOUT + self.files
    }
}

/// Unpacks `source` into `into` (a new directory `into/tree`): the timed part.
pub fn extract(ops: &Ops, source: &TarSource, into: &str) -> OpResult<()> {
    match ops {
        Ops::Posix(root) => {
            let local = Ops::local(root, into);
            std::fs::create_dir(&local).map_err(|err| format!("{}: {err}", local.display()))?;
            let output = std::process::Command::new("tar")
                .arg("-xf")
                .arg(&source.archive)
                .arg("-C")
                .arg(&local)
                .output()
                .map_err(|err| format!("tar -xf: {err}"))?;
            if output.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "tar -xf into {}: {}",
                    local.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ))
            }
        }
        Ops::Native(client) => {
            ops.mkdir(into)?;
            let tree = format!("{into}/tree");
            ops.mkdir(&tree)?;
            for branch in 0..TREE_FANOUT {
                ops.mkdir(&format!("{tree}/s{branch}"))?;
            }
            for item in 0..source.files {
                let path = format!("{tree}/{}", relative(item));
                ops.create(&path)?;
                let file = client
                    .open(&path, tessera_client::OpenMode::WriteOnly)
                    .map_err(|err| err.to_string())?;
                file.write_at(0, &contents(item))
                    .map_err(|err| err.to_string())?;
                let at = SetTime::At(mtime_s(item) * 1_000_000_000);
                client
                    .set_times(&path, at, at)
                    .map_err(|err| err.to_string())?;
            }
            Ok(())
        }
    }
}

/// The check: every file of the source is in `into/tree` with its bytes and mtime (""
/// when right, else what is wrong); then the unpacked tree is removed.
pub fn check_and_remove(ops: &Ops, source: &TarSource, into: &str) -> OpResult<String> {
    let tree = format!("{into}/tree");
    let mut problem = String::new();
    for item in 0..source.files {
        let path = format!("{tree}/{}", relative(item));
        let (bytes, mtime_ns) = ops.read_with_mtime(&path)?;
        if bytes != contents(item) {
            problem = format!(
                "{path}: {} bytes read back, not the {} packed",
                bytes.len(),
                size(item)
            );
            break;
        }
        if mtime_ns / 1_000_000_000 != mtime_s(item) {
            problem = format!(
                "{path}: mtime {} s, the archive's {} s",
                mtime_ns / 1_000_000_000,
                mtime_s(item)
            );
            break;
        }
    }
    match ops {
        Ops::Posix(root) => {
            let local = Ops::local(root, into);
            std::fs::remove_dir_all(&local).map_err(|err| format!("{}: {err}", local.display()))?;
        }
        Ops::Native(_) => {
            for item in 0..source.files {
                ops.unlink(&format!("{tree}/{}", relative(item)))?;
            }
            for branch in 0..TREE_FANOUT {
                ops.rmdir(&format!("{tree}/s{branch}"))?;
            }
            ops.rmdir(&tree)?;
            ops.rmdir(into)?;
        }
    }
    Ok(problem)
}
