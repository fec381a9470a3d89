//! Which namespace this iod belongs to: the id of the one mds whose object requests it obeys.
//!
//! Every server holds the cluster key, so the key alone cannot tell this cluster's mds from a
//! second mds started with the same key on a fresh store (`--db`): that one hands out the same
//! small handles again, and its `ObjectCreate` emptied the real files' objects. So the mds
//! makes a random namespace id at its first start (kept in its store), and names it in every
//! request that changes objects (`ObjectCreate`, `ObjectRemove`, `ObjectTruncate`) and in its
//! answers to the orphan sweep (`HandlesLiveReply`). At the first of these an iod meets, it
//! records the id in `DATA/namespace` (owner-only, made with `O_NOFOLLOW | O_EXCL`, written to
//! a temporary file, synced and linked into place, then the directory synced); from then on
//! it refuses, before any change, every request and every sweep answer of another namespace,
//! naming both ids. The record survives restarts; removing it (with the iod stopped) is how an
//! operator moves a data directory to another cluster.

use std::fmt::Display;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use tessera_proto::{ErrorCode, RemoteError};

use crate::files::OWNER_ONLY_FILE;

/// The file in an iod's data directory that records its namespace.
pub const NAMESPACE_FILE: &str = "namespace";
/// Where the record is written before it is linked into place.
const NAMESPACE_TEMPORARY_FILE: &str = "namespace.tmp";
/// Bytes of the record: 16 lowercase hex digits and a newline.
const RECORD_BYTES: usize = 17;

/// The namespace this iod belongs to, once known.
#[derive(Debug)]
pub struct Membership {
    /// This iod's index, for messages.
    index: u16,
    /// The record's file (`None`: kept in memory only, for tests and in-process benches).
    path: Option<PathBuf>,
    /// The recorded id. Held while a first record is written, so two first contacts cannot
    /// record two ids.
    recorded: Mutex<Option<u64>>,
}

impl Membership {
    /// The membership recorded in `data_directory` (none yet if the record is missing). A
    /// record that is not a regular file, or does not hold an id, is an error: the iod must
    /// not start and then belong to whichever mds speaks first.
    pub fn open(data_directory: &Path, index: u16) -> io::Result<Self> {
        let path = data_directory.join(NAMESPACE_FILE);
        // A temporary record left by a crash before its link: the id was never recorded.
        match fs::remove_file(data_directory.join(NAMESPACE_TEMPORARY_FILE)) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        let recorded = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(file) => Some(read_record(&path, file)?),
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => {
                return Err(io::Error::new(
                    err.kind(),
                    format!("{}: {err}", path.display()),
                ))
            }
        };
        Ok(Self {
            index,
            path: Some(path),
            recorded: Mutex::new(recorded),
        })
    }

    /// A membership kept in memory only: the first contact's id holds until the process ends.
    pub fn in_memory(index: u16) -> Self {
        Self {
            index,
            path: None,
            recorded: Mutex::new(None),
        }
    }

    /// The recorded namespace id, if any.
    pub fn recorded(&self) -> Option<u64> {
        *self.recorded.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Accepts `namespace`, the id an mds named in `doing` (e.g. "ObjectCreate of handle
    /// 0x5"), if it is this iod's, recording it at the first contact. Refuses another id,
    /// and the id 0 (no namespace), with `PermissionDenied` naming both ids. A first record
    /// that cannot be written is `Io`, and nothing is recorded.
    pub fn check(&self, namespace: u64, doing: impl Display) -> Result<(), RemoteError> {
        let index = self.index;
        if namespace == 0 {
            return Err(RemoteError::new(
                ErrorCode::PermissionDenied,
                format!("iod {index}: refusing {doing}: the request names no namespace"),
            ));
        }
        let mut recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        match *recorded {
            Some(own) if own == namespace => Ok(()),
            Some(own) => Err(RemoteError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "iod {index}: refusing {doing} from an mds of namespace {namespace:016x}: this iod belongs to namespace {own:016x}{}; a second mds with this cluster's key but another store?",
                    self.path
                        .as_ref()
                        .map(|path| format!(" (recorded in {})", path.display()))
                        .unwrap_or_default()
                ),
            )),
            None => {
                // Once in the iod's life: the write and its syncs run on the caller's thread.
                if let Some(path) = &self.path {
                    write_record(path, namespace).map_err(|err| {
                        RemoteError::new(
                            ErrorCode::Io,
                            format!(
                                "iod {index}: recording namespace {namespace:016x} in {}: {err}",
                                path.display()
                            ),
                        )
                    })?;
                }
                tracing::info!(
                    "iod {index}: belongs to namespace {namespace:016x} from now on (first contact: {doing})"
                );
                *recorded = Some(namespace);
                Ok(())
            }
        }
    }
}

/// Reads a record: exactly 16 lowercase hex digits and a newline, not 0.
fn read_record(path: &Path, file: File) -> io::Result<u64> {
    let invalid = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: {why}; it should hold this iod's namespace id (16 hex digits); with the iod stopped, remove it to let the next mds that speaks to this iod claim it",
                path.display()
            ),
        )
    };
    if !file.metadata()?.is_file() {
        return Err(invalid("not a regular file"));
    }
    let mut bytes = Vec::with_capacity(RECORD_BYTES);
    file.take(RECORD_BYTES as u64 + 1).read_to_end(&mut bytes)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| invalid("not text"))?;
    let digits = text
        .strip_suffix('\n')
        .filter(|digits| {
            digits.len() == 16
                && digits
                    .bytes()
                    .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        })
        .ok_or_else(|| invalid(&format!("{text:?} is not a namespace id")))?;
    match u64::from_str_radix(digits, 16) {
        Ok(0) | Err(_) => Err(invalid("namespace 0")),
        Ok(id) => Ok(id),
    }
}

/// Writes the record durably and atomically: a new temporary file (`O_EXCL | O_NOFOLLOW`,
/// owner-only), synced, hard-linked to `path` (which fails if anything is there, and follows
/// no link), then removed and the directory synced.
fn write_record(path: &Path, namespace: u64) -> io::Result<()> {
    let directory = path.parent().unwrap_or_else(|| Path::new("."));
    let temporary = directory.join(NAMESPACE_TEMPORARY_FILE);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(OWNER_ONLY_FILE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temporary)?;
    let written = file
        .write_all(format!("{namespace:016x}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::hard_link(&temporary, path));
    let removed = fs::remove_file(&temporary);
    written?;
    removed?;
    File::open(directory)?.sync_all()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_first_namespace_is_recorded_and_every_other_refused_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let membership = Membership::open(dir.path(), 3).unwrap();
        assert_eq!(membership.recorded(), None);
        let zero = membership
            .check(0, "ObjectCreate of handle 0x5")
            .unwrap_err();
        assert_eq!(zero.code, ErrorCode::PermissionDenied);
        assert!(
            zero.message.contains("names no namespace"),
            "{}",
            zero.message
        );
        assert_eq!(membership.recorded(), None);
        membership
            .check(0xabc, "ObjectCreate of handle 0x5")
            .unwrap();
        membership
            .check(0xabc, "ObjectRemove of handle 0x5")
            .unwrap();
        let record = dir.path().join(NAMESPACE_FILE);
        assert_eq!(fs::read_to_string(&record).unwrap(), "0000000000000abc\n");
        let mode = fs::metadata(&record).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert!(!dir.path().join(NAMESPACE_TEMPORARY_FILE).exists());
        let refusal = |membership: &Membership| {
            membership
                .check(0xdef, "ObjectCreate of handle 0x7")
                .unwrap_err()
        };
        let error = refusal(&membership);
        assert_eq!(error.code, ErrorCode::PermissionDenied);
        for words in [
            "iod 3",
            "ObjectCreate of handle 0x7",
            "namespace 0000000000000def",
            "belongs to namespace 0000000000000abc",
            &record.display().to_string(),
        ] {
            assert!(error.message.contains(words), "{words}: {}", error.message);
        }
        // A restart reads the record back.
        let again = Membership::open(dir.path(), 3).unwrap();
        assert_eq!(again.recorded(), Some(0xabc));
        assert!(refusal(&again).message.contains("abc"));
        again.check(0xabc, "the orphan sweep").unwrap();
    }

    #[test]
    fn a_bad_record_or_a_planted_link_stops_the_iod() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join(NAMESPACE_FILE);
        for bad in [
            "",
            "abc\n",
            "0000000000000000\n",
            "00000000000000ABC\n",
            "0000000000000abc",
        ] {
            fs::write(&record, bad).unwrap();
            let error = Membership::open(dir.path(), 0).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{bad:?}: {error}");
            assert!(error.to_string().contains("namespace"), "{error}");
        }
        fs::remove_file(&record).unwrap();
        // A symbolic link is not followed, whether there at start or planted before the
        // first record (the link is not replaced either).
        let elsewhere = dir.path().join("elsewhere");
        fs::write(&elsewhere, "0000000000000abc\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &record).unwrap();
        assert!(Membership::open(dir.path(), 0).is_err());
        let membership = Membership::in_memory(0);
        assert!(membership.path.is_none());
        let planted = Membership {
            index: 0,
            path: Some(record.clone()),
            recorded: Mutex::new(None),
        };
        let error = planted
            .check(0x123, "ObjectCreate of handle 0x1")
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Io, "{}", error.message);
        assert_eq!(planted.recorded(), None);
        assert_eq!(
            fs::read_to_string(&elsewhere).unwrap(),
            "0000000000000abc\n"
        );
        // A temporary record left by a crash is removed at open; nothing is recorded.
        fs::remove_file(&record).unwrap();
        fs::write(dir.path().join(NAMESPACE_TEMPORARY_FILE), "junk").unwrap();
        let membership = Membership::open(dir.path(), 0).unwrap();
        assert_eq!(membership.recorded(), None);
        membership.check(0x9, "ObjectCreate of handle 0x1").unwrap();
        assert_eq!(fs::read_to_string(&record).unwrap(), "0000000000000009\n");
    }
}
