//! Listing a directory the way C programs list one with `opendir`, `readdir` and `closedir`.
//!
//! A `TesseraDir` holds one page of the listing at a time (at most `READDIR_ENTRIES_MAX`
//! entries, as the mds sends them, in name order) and the name the next page starts after:
//! [`tessera_readdir`] hands out the page's entries one by one and asks the mds for the next
//! page when the page runs out, so a directory of any size is listed in bounded memory. As
//! with POSIX `readdir`, an entry made or removed while the listing runs may or may not be
//! listed, and no name is listed twice. A `TesseraDir` is for one thread at a time.

use std::ffi::{c_char, c_int};

use tessera_client::{Client, DirEntry, FileKind};
use tessera_proto::limits::{NAME_BYTES_MAX, READDIR_ENTRIES_MAX};

use crate::client::TesseraClient;
use crate::error::{guard, handle, put, text, Failure};

/// Bytes of the `name` field of `TesseraDirEntry`: the longest name Tessera allows (255
/// bytes) and its NUL.
pub const TESSERA_DIR_NAME_BYTES: usize = 256;
const _: () = assert!(TESSERA_DIR_NAME_BYTES == NAME_BYTES_MAX + 1);

/// One entry of a directory, as [`tessera_readdir`] hands it out.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TesseraDirEntry {
    /// The entry's name within the directory (no slash), NUL-terminated.
    pub name: [c_char; TESSERA_DIR_NAME_BYTES],
    /// The entry's file handle (as `TesseraStat.handle`).
    pub handle: u64,
    /// Non-zero for a directory.
    pub is_directory: c_int,
}

impl TesseraDirEntry {
    fn new(entry: &DirEntry) -> Result<Self, Failure> {
        let bytes = entry.name.as_bytes();
        if bytes.is_empty() || bytes.len() >= TESSERA_DIR_NAME_BYTES || bytes.contains(&0) {
            return Err(Failure::new(
                crate::error::TESSERA_ERR_PROTOCOL,
                format!(
                    "the mds listed a name of {} bytes that is empty, holds a NUL byte or is \
                     over NAME_BYTES_MAX ({NAME_BYTES_MAX})",
                    bytes.len()
                ),
            ));
        }
        let mut name = [0; TESSERA_DIR_NAME_BYTES];
        for (slot, &byte) in name.iter_mut().zip(bytes) {
            *slot = byte.cast_signed();
        }
        Ok(Self {
            name,
            handle: entry.handle,
            is_directory: c_int::from(entry.kind == FileKind::Directory),
        })
    }
}

/// An open directory listing.
pub struct TesseraDir {
    client: Client,
    path: String,
    /// The page being handed out, and the index of the next entry in it.
    page: Vec<DirEntry>,
    next: usize,
    /// More entries follow the page's last one.
    more: bool,
    /// The entry last handed out; the pointer given to C points here.
    current: TesseraDirEntry,
}

impl TesseraDir {
    /// Fetches the page that follows `after`.
    fn fetch(&mut self, after: &str) -> Result<(), Failure> {
        let (page, more) = self.client.readdir_page(&self.path, after)?;
        if page.len() > READDIR_ENTRIES_MAX as usize {
            return Err(Failure::new(
                crate::error::TESSERA_ERR_PROTOCOL,
                format!(
                    "readdir {}: the mds sent {} entries in one page, over READDIR_ENTRIES_MAX \
                     ({READDIR_ENTRIES_MAX})",
                    self.path,
                    page.len()
                ),
            ));
        }
        self.page = page;
        self.next = 0;
        self.more = more;
        Ok(())
    }

    /// The next entry, or `None` at the end of the listing.
    fn next_entry(&mut self) -> Result<Option<&TesseraDirEntry>, Failure> {
        if self.next == self.page.len() {
            let last = match self.page.last() {
                Some(last) if self.more => last.name.clone(),
                _ => return Ok(None),
            };
            self.fetch(&last)?;
            if self.page.is_empty() {
                return Ok(None);
            }
        }
        self.current = TesseraDirEntry::new(&self.page[self.next])?;
        self.next += 1;
        Ok(Some(&self.current))
    }
}

/// Opens the directory `path` for listing. The first page of entries is read here, so a
/// missing path (`TESSERA_ERR_NOT_FOUND`), a file (`TESSERA_ERR_NOT_DIRECTORY`) or a
/// directory the caller may not read (`TESSERA_ERR_PERMISSION_DENIED`) fails now, not at
/// the first `tessera_readdir`. Free the handle with [`tessera_closedir`].
///
/// # Safety
/// `client` comes from [`tessera_connect`](crate::tessera_connect); `path` is a
/// NUL-terminated string; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_opendir(
    client: *const TesseraClient,
    path: *const c_char,
    out: *mut *mut TesseraDir,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        let mut dir = TesseraDir {
            client: client.client.clone(),
            path: path.to_owned(),
            page: Vec::new(),
            next: 0,
            more: false,
            current: TesseraDirEntry {
                name: [0; TESSERA_DIR_NAME_BYTES],
                handle: 0,
                is_directory: 0,
            },
        };
        dir.fetch("")?;
        let boxed = Box::into_raw(Box::new(dir));
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, boxed, "out") }.inspect_err(|_| {
            // SAFETY: `boxed` came from Box::into_raw above and was not handed out.
            drop(unsafe { Box::from_raw(boxed) });
        })
    })
}

/// The next entry of `dir`, in name order: `*entry` points at it, or is null at the end of
/// the listing (and the call returns `TESSERA_OK`). The entry stays valid until the next call
/// on `dir`; copy it to keep it. A failure (the mds unreachable while the next page is read,
/// the directory removed) returns its code and leaves `*entry` null.
///
/// ```c
/// const TesseraDirEntry *entry;
/// while ((rc = tessera_readdir(dir, &entry)) == TESSERA_OK && entry != NULL)
///     printf("%s\n", entry->name);
/// ```
///
/// # Safety
/// `dir` comes from [`tessera_opendir`] and is not used by another thread during the call;
/// `entry` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_readdir(
    dir: *mut TesseraDir,
    entry: *mut *const TesseraDirEntry,
) -> c_int {
    guard(|| {
        // SAFETY: the caller guarantees `entry` is valid for one write.
        unsafe { put(entry, std::ptr::null(), "entry")? };
        // SAFETY: the caller guarantees `dir` is null or a live handle no one else uses now.
        let dir =
            unsafe { dir.as_mut() }.ok_or_else(|| Failure::invalid("dir is a null pointer"))?;
        let next = dir
            .next_entry()?
            .map_or(std::ptr::null(), std::ptr::from_ref);
        // SAFETY: as above.
        unsafe { put(entry, next, "entry") }
    })
}

/// Frees a directory listing. Null is ignored.
///
/// # Safety
/// `dir` is null or a pointer from [`tessera_opendir`] not freed before.
#[no_mangle]
pub unsafe extern "C" fn tessera_closedir(dir: *mut TesseraDir) {
    if !dir.is_null() {
        // SAFETY: the caller guarantees the pointer came from tessera_opendir, once.
        drop(unsafe { Box::from_raw(dir) });
    }
}
