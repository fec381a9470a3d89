//! A real cluster mounted with `tessera mount` on a temporary directory, for tests that work
//! through the mount.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tessera_client::OpenMode;

use super::{tessera, Cluster};

/// A cluster mounted on a temporary directory; unmounted when dropped (before the cluster
/// goes down).
pub struct Mounted {
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    pub cluster: Cluster,
}

impl Mounted {
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// [`Mounted::start`] with `extra` arguments to `tessera up`.
    pub fn start_with(extra: &[&str]) -> Option<Self> {
        // SAFETY: geteuid cannot fail and touches no memory of ours.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 || !Path::new("/dev/fuse").exists() {
            super::not_run::ignored_at_run_time(&format!(
                "mounting needs root and /dev/fuse (uid {euid}, /dev/fuse present: {})",
                Path::new("/dev/fuse").exists()
            ));
            return None;
        }
        let cluster = Cluster::start_with(2, extra);
        std::fs::set_permissions(cluster.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = cluster.path().join("log").join("mount.log");
        let output = tessera(&[
            "mount",
            dir.path().to_str().unwrap(),
            "--cluster",
            cluster.file().to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
        ]);
        assert!(
            output.status.success(),
            "tessera mount failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Some(Self { dir, log, cluster })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name.trim_start_matches('/'))
    }

    /// The whole of Tessera file `path`, read with a direct client (not through the mount).
    pub fn direct(&self, path: &str) -> Vec<u8> {
        let client = self.cluster.client();
        let file = client.open(path, OpenMode::ReadOnly).unwrap();
        let size = file.stat().unwrap().size;
        let mut data = vec![0u8; usize::try_from(size).unwrap()];
        file.read_at(0, &mut data).unwrap();
        data
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let output = tessera(&["umount", self.dir.path().to_str().unwrap()]);
        let gone = String::from_utf8_lossy(&output.stderr).contains("is not a Tessera mount");
        if !output.status.success() && !gone {
            // Leave no mount behind a failed test: detach it.
            let path = std::ffi::CString::new(self.dir.path().to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path that outlives the call.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            eprintln!(
                "umount failed: {}\nmount log:\n{}",
                String::from_utf8_lossy(&output.stderr),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}
