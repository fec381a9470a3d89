//! The real storage: one file per handle in `DATA/objects/`, named by the handle as 16
//! lowercase hex digits, readable by the server's user alone. Objects are kernel files, so the
//! store's io_uring batches and mapped reads apply to them. An object created with a cache
//! unit other than the iod's default has a record of it, a file of the same name in
//! `DATA/cache-units/` holding the unit in decimal bytes, removed with the object.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::storage::{Listed, Listing, ObjectStorage, Usage};

/// Mode of an iod's data directory and its object directory: the owner's alone.
pub const OWNER_ONLY_DIRECTORY: u32 = 0o700;
/// Mode of every object file (and of the calibration scratch file).
pub const OWNER_ONLY_FILE: u32 = 0o600;

/// A directory of object files.
#[derive(Debug)]
pub struct FileStorage {
    directory: PathBuf,
    /// The records of objects' cache units.
    units_directory: PathBuf,
    /// `directory` as text, for messages.
    location: String,
}

impl FileStorage {
    /// Opens (creating if needed) the object directory under `data_directory`, owner-only.
    pub fn open(data_directory: &Path) -> io::Result<Self> {
        let directory = data_directory.join("objects");
        let units_directory = data_directory.join("cache-units");
        fs::create_dir_all(&directory)?;
        fs::create_dir_all(&units_directory)?;
        // Owner-only, also for a directory an older server made: the objects are the files'
        // bytes, for the servers alone (clients reach them through requests).
        for private in [data_directory, &directory, &units_directory] {
            fs::set_permissions(private, fs::Permissions::from_mode(OWNER_ONLY_DIRECTORY))?;
        }
        let location = directory.display().to_string();
        Ok(Self {
            directory,
            units_directory,
            location,
        })
    }

    /// The object directory.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The path of the object of `handle`.
    pub fn path(&self, handle: u64) -> PathBuf {
        self.directory.join(format!("{handle:016x}"))
    }
}

impl ObjectStorage for FileStorage {
    type Object = File;

    const FILE_BACKED: bool = true;

    fn location(&self) -> &str {
        &self.location
    }

    fn open(&self, handle: u64) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path(handle))
    }

    fn create(&self, handle: u64) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(OWNER_ONLY_FILE)
            .open(self.path(handle))
            .map(drop)
    }

    fn remove(&self, handle: u64) -> io::Result<()> {
        fs::remove_file(self.path(handle))?;
        self.set_cache_unit(handle, 0)
    }

    fn cache_unit(&self, handle: u64) -> io::Result<u32> {
        let record = self.units_directory.join(format!("{handle:016x}"));
        match fs::read_to_string(&record) {
            Ok(text) => text.trim().parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {text:?} is not a cache unit", record.display()),
                )
            }),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(err) => Err(err),
        }
    }

    fn set_cache_unit(&self, handle: u64, unit_bytes: u32) -> io::Result<()> {
        let record = self.units_directory.join(format!("{handle:016x}"));
        if unit_bytes != 0 {
            // Owner-only, as the objects (a record an older server made keeps its mode).
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(OWNER_ONLY_FILE)
                .open(record)?;
            return io::Write::write_all(&mut file, format!("{unit_bytes}\n").as_bytes());
        }
        match fs::remove_file(record) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        }
    }

    fn list(&self) -> io::Result<Listing<'_>> {
        let entries = fs::read_dir(&self.directory)?;
        Ok(Box::new(entries.map(|entry| {
            entry.map(|entry| match parse_object_name(&entry.file_name()) {
                Some(handle) => Listed::Object(handle),
                None => Listed::Foreign,
            })
        })))
    }

    /// `statvfs(3)` of the object directory, and one `stat` per object.
    fn usage(&self) -> io::Result<Usage> {
        let path = std::ffi::CString::new(self.directory.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
        // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
        let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `path` is a NUL-terminated string and `vfs` a live struct the call fills.
        if unsafe { libc::statvfs(path.as_ptr(), &raw mut vfs) } != 0 {
            return Err(io::Error::last_os_error());
        }
        #[allow(
            clippy::useless_conversion,
            reason = "the statvfs fields are u64 here, narrower on 32-bit targets"
        )]
        let (fragment, blocks, free, available) = (
            u64::from(vfs.f_frsize),
            u64::from(vfs.f_blocks),
            u64::from(vfs.f_bfree),
            u64::from(vfs.f_bavail),
        );
        let mut usage = Usage {
            total_bytes: blocks.saturating_mul(fragment),
            free_bytes: free.saturating_mul(fragment),
            available_bytes: available.saturating_mul(fragment),
            ..Usage::default()
        };
        for entry in fs::read_dir(&self.directory)? {
            let entry = entry?;
            if parse_object_name(&entry.file_name()).is_none() {
                continue;
            }
            let metadata = match entry.metadata() {
                Ok(metadata) => metadata,
                // Removed while listing: no longer an object.
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            usage.objects += 1;
            usage.object_bytes += metadata.len();
            usage.object_allocated_bytes += std::os::unix::fs::MetadataExt::blocks(&metadata) * 512;
        }
        Ok(usage)
    }
}

/// The handle an object file is named for: exactly 16 lowercase hex digits.
fn parse_object_name(name: &std::ffi::OsStr) -> Option<u64> {
    let name = name.to_str()?;
    let hex = name.len() == 16
        && name
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    hex.then(|| u64::from_str_radix(name, 16).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_sixteen_lowercase_hex_digits() {
        use std::ffi::OsStr;
        assert_eq!(
            parse_object_name(OsStr::new("00000000000000ff")),
            Some(0xff)
        );
        for bad in [
            "ff",
            "00000000000000FF",
            "00000000000000fg",
            "000000000000000ff",
            "x.tmp",
        ] {
            assert_eq!(parse_object_name(OsStr::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn a_cache_unit_record_is_owner_only_and_goes_with_its_unit() {
        let data = tempfile::tempdir().unwrap();
        let storage = FileStorage::open(data.path()).unwrap();
        storage.set_cache_unit(7, 4096).unwrap();
        let record = data.path().join("cache-units").join(format!("{:016x}", 7));
        let meta = fs::metadata(&record).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, OWNER_ONLY_FILE);
        assert_eq!(fs::read_to_string(&record).unwrap(), "4096\n");
        storage.set_cache_unit(7, 0).unwrap();
        assert!(!record.exists());
    }
}
