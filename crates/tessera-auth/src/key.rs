//! The cluster key: 32 random bytes, kept as hex in a file only its owner may read.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use hmac::{KeyInit, Mac as _};
use tessera_proto::Mac;

use crate::AuthError;

/// Bytes of key material.
pub const KEY_BYTES: usize = 32;

/// Mode of a key file: the owner's alone.
pub const KEY_FILE_MODE: u32 = 0o600;

/// Most bytes of a key file read: the hex key, a newline and room for stray whitespace.
const KEY_FILE_BYTES_MAX: u64 = 256;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The cluster's shared secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey([u8; KEY_BYTES]);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// A new random key from the kernel's generator.
    pub fn generate() -> Result<Self, AuthError> {
        let mut bytes = [0u8; KEY_BYTES];
        getrandom::fill(&mut bytes).map_err(|err| AuthError::Key {
            path: "(new key)".to_owned(),
            detail: format!("no random bytes from the kernel: {err}"),
        })?;
        Ok(Self(bytes))
    }

    /// A key from raw bytes (tests).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        Self(bytes)
    }

    /// Creates a new key file at `path` (mode 0600; an existing file is never overwritten).
    pub fn create(path: &Path) -> Result<Self, AuthError> {
        let key = Self::generate()?;
        let error = |detail: String| AuthError::Key {
            path: path.display().to_string(),
            detail,
        };
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(KEY_FILE_MODE)
            .open(path)
            .map_err(|err| error(format!("cannot create: {err}")))?;
        let hex = key.0.iter().fold(String::new(), |mut hex, byte| {
            use std::fmt::Write as _;
            let _ = write!(hex, "{byte:02x}");
            hex
        });
        file.write_all(format!("{hex}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|err| error(format!("cannot write: {err}")))?;
        Ok(key)
    }

    /// Reads the key file at `path`, as a client does. Refused when it is not a regular file,
    /// when group or others may read or write it, or when it does not hold 64 hex digits.
    /// Its owner is not checked: a client that can read the key (root, or the account that
    /// owns the cluster) trusts the account that runs the servers, as `docs/DEPLOY.md` §6 has
    /// it. A server, the agent and `tessera up` load theirs with [`ClusterKey::load_owned`].
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        Self::read(path, false)
    }

    /// Reads the key file of a server, an agent or `tessera up`: as [`ClusterKey::load`], and
    /// also refused unless this process's effective uid owns it. Whoever owns the key file
    /// holds the key, and a key holder can sign credentials of any user and pass for any
    /// server: a key another user planted (in a cluster directory under `/tmp`) would hand
    /// them the cluster.
    pub fn load_owned(path: &Path) -> Result<Self, AuthError> {
        Self::read(path, true)
    }

    /// Opens `path` once and checks and reads that one file (no window between the check and
    /// the read); `owned`: also its owner.
    fn read(path: &Path, owned: bool) -> Result<Self, AuthError> {
        use std::io::Read as _;
        let error = |detail: String| AuthError::Key {
            path: path.display().to_string(),
            detail,
        };
        // O_NONBLOCK: opening a FIFO planted at the path must not wait for a writer.
        let mut file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|err| error(err.to_string()))?;
        let meta = file.metadata().map_err(|err| error(err.to_string()))?;
        if !meta.is_file() {
            return Err(error("not a regular file".to_owned()));
        }
        // SAFETY: geteuid cannot fail and touches no memory of ours.
        let uid = unsafe { libc::geteuid() };
        if owned && meta.uid() != uid {
            return Err(error(format!(
                "owned by uid {}, not by uid {uid} who runs this server: whoever owns the key \
                 can sign any credential; use a key of your own",
                meta.uid()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(error(format!(
                "mode {:04o} lets others read it; `chmod 600` it",
                meta.mode() & 0o7777
            )));
        }
        let mut text = String::new();
        // A key is 65 bytes; read a little more than that, so a huge file is not read whole.
        std::io::Read::by_ref(&mut file)
            .take(KEY_FILE_BYTES_MAX)
            .read_to_string(&mut text)
            .map_err(|err| error(err.to_string()))?;
        Self::parse(text.trim()).map_err(error)
    }

    /// Whether this process may read the key file at `path` (without reading it).
    pub fn readable(path: &Path) -> bool {
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        // SAFETY: access() reads a NUL-terminated path we own and touches no other memory.
        unsafe { libc::access(c_path.as_ptr(), libc::R_OK) == 0 }
    }

    fn parse(hex: &str) -> Result<Self, String> {
        if hex.len() != 2 * KEY_BYTES || !hex.is_ascii() {
            return Err(format!(
                "holds {} characters; a key is {} hex digits",
                hex.len(),
                2 * KEY_BYTES
            ));
        }
        let mut bytes = [0u8; KEY_BYTES];
        for (index, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * index..2 * index + 2], 16)
                .map_err(|_| format!("not hex at character {}", 2 * index))?;
        }
        Ok(Self(bytes))
    }

    fn hmac(&self, domain: &str, parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        mac.update(domain.as_bytes());
        mac.update(&[0]);
        for part in parts {
            mac.update(part);
        }
        mac
    }

    /// The cluster's id: 64 bits derived from the key, the same on every server and in the
    /// cluster file, so a client can tell a server of another cluster before any request.
    pub fn cluster_id(&self) -> u64 {
        let tag = self.sign("tessera-cluster-id-v1", &[]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&tag.0[..8]);
        u64::from_le_bytes(id)
    }

    /// The tag of `parts` under `domain` (a string naming what is signed, so a tag made for
    /// one purpose never verifies for another).
    pub fn sign(&self, domain: &str, parts: &[&[u8]]) -> Mac {
        let mut out = [0u8; tessera_proto::limits::MAC_BYTES];
        out.copy_from_slice(&self.hmac(domain, parts).finalize().into_bytes());
        Mac(out)
    }

    /// Whether `tag` is the tag of `parts` under `domain` (compared in constant time).
    pub fn verify(&self, domain: &str, parts: &[&[u8]], tag: &Mac) -> bool {
        self.hmac(domain, parts).verify_slice(&tag.0).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_created_key_is_owner_only_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let key = ClusterKey::create(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(ClusterKey::load(&path).unwrap(), key);
        assert!(ClusterKey::create(&path).is_err(), "never overwrites");
    }

    #[test]
    fn a_key_readable_by_others_or_malformed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        ClusterKey::create(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = ClusterKey::load(&path).unwrap_err().to_string();
        assert!(err.contains("mode 0644"), "{err}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&path, "abc\n").unwrap();
        let err = ClusterKey::load(&path).unwrap_err().to_string();
        assert!(err.contains("hex digits"), "{err}");
    }

    #[test]
    fn a_key_of_ours_loads_owned_and_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let key = ClusterKey::create(&path).unwrap();
        assert_eq!(ClusterKey::load_owned(&path).unwrap(), key);
        // Not a regular file: a directory, and a FIFO (which must not block the open).
        let err = ClusterKey::load_owned(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let err = ClusterKey::load(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        // A huge file is refused by its content, without being read whole.
        fs::write(&path, "a".repeat(1 << 20)).unwrap();
        let err = ClusterKey::load(&path).unwrap_err().to_string();
        assert!(err.contains("holds 256 characters"), "{err}");
    }

    #[test]
    fn tags_depend_on_key_domain_and_every_byte() {
        let one = ClusterKey::from_bytes([1; KEY_BYTES]);
        let two = ClusterKey::from_bytes([2; KEY_BYTES]);
        let tag = one.sign("d", &[b"ab", b"c"]);
        assert!(one.verify("d", &[b"abc"], &tag));
        assert!(!one.verify("e", &[b"abc"], &tag));
        assert!(!one.verify("d", &[b"abd"], &tag));
        assert!(!two.verify("d", &[b"abc"], &tag));
    }
}
