//! `tessera.Stat`, the attributes `Client.stat` and `File.stat` return: a leaf both use.

use pyo3::prelude::*;
use tessera_client::{Attr, FileKind};

/// A file's or directory's attributes (`Client.stat`, `File.stat`).
#[pyclass(module = "tessera._tessera", frozen, get_all)]
pub struct Stat {
    /// Size in bytes.
    size: u64,
    /// Permission bits with the file-type bits (`stat.S_IFREG` or `stat.S_IFDIR`), as
    /// `os.stat`'s `st_mode`.
    mode: u32,
    /// Owner.
    uid: u32,
    /// Group.
    gid: u32,
    /// Links.
    nlink: u32,
    /// Last access, ns since the epoch.
    atime_ns: u64,
    /// Last data change, ns since the epoch.
    mtime_ns: u64,
    /// Last attribute change, ns since the epoch.
    ctime_ns: u64,
    /// The file handle.
    handle: u64,
    /// `"file"` or `"directory"`.
    kind: &'static str,
}

#[pymethods]
impl Stat {
    /// Whether it is a directory.
    fn is_dir(&self) -> bool {
        self.kind == "directory"
    }

    /// Whether it is a regular file.
    fn is_file(&self) -> bool {
        self.kind == "file"
    }

    fn __repr__(&self) -> String {
        format!(
            "tessera.Stat(kind={:?}, size={}, mode=0o{:o}, uid={}, gid={})",
            self.kind, self.size, self.mode, self.uid, self.gid
        )
    }
}

impl From<&Attr> for Stat {
    fn from(attr: &Attr) -> Self {
        let (kind, type_bits) = match attr.kind {
            FileKind::Directory => ("directory", libc::S_IFDIR),
            FileKind::File => ("file", libc::S_IFREG),
        };
        Self {
            size: attr.size,
            mode: attr.mode | type_bits,
            uid: attr.uid,
            gid: attr.gid,
            nlink: attr.nlink,
            atime_ns: attr.atime_ns,
            mtime_ns: attr.mtime_ns,
            ctime_ns: attr.ctime_ns,
            handle: attr.handle,
            kind,
        }
    }
}
