//! The FUSE file system: each kernel request becomes Tessera client calls made as its caller.
//!
//! A request arrives on one of the session's [`crate::mount::THREADS`] threads with the
//! caller's uid, gid and pid; namespace calls (lookup, getattr, mkdir, create, open, unlink,
//! rename, setattr, readdir) go to the mds through that caller's client
//! ([`super::callers::Callers`]), so the mds checks the caller's rights. `open` and `create`
//! hand back a [`tessera_client::File`] with the caller's capability, kept in the open-file
//! table until `release`; `read` and `write` on it go straight to the iods as one list
//! request per call (at most `MAX_WRITE_BYTES` / the kernel's readahead each), split by the
//! client into one request per involved iod. Nothing is buffered here: a write has reached
//! the iods when it returns (`flush` has nothing to do; `fsync` asks the iods to sync).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use tessera_client::{
    Attr, Client, ClientError, CreateOptions, DirEntry, File, FileKind, OpenMode, SetTime,
};
use tessera_proto::limits::NAME_BYTES_MAX;

use super::callers::{Caller, Callers};
use super::errno::{errno, Call};
use super::inodes::{Inodes, TableFull, ROOT};

/// How long the kernel may trust an entry or attributes before asking again: the window in
/// which a change made by another client may go unseen through the mount.
pub const ATTR_TTL: Duration = Duration::from_secs(1);

/// Largest write the kernel sends in one request (and `st_blksize`, which sizes the buffers
/// of `cp` and stdio): one list request to the iods per megabyte.
pub const MAX_WRITE_BYTES: u32 = 1 << 20;

/// Readahead the mount asks of the kernel (the kernel may grant less).
pub const READAHEAD_BYTES: u32 = 1 << 20;

/// Readahead and other background requests the kernel keeps in flight at once.
pub const BACKGROUND_MAX: u16 = 64;

/// Files and directories open through the mount at once (beyond: `EMFILE`).
pub const OPEN_FILES_MAX: usize = 65_536;

/// The largest read the mount serves in one request (the session's buffer size; the kernel
/// asks at most `max_pages` pages, 1 MiB by default, so a larger one is a broken request).
pub const READ_BYTES_MAX: u32 = 16 << 20;

/// The block size `statfs` reports sizes in.
const STATFS_BLOCK_BYTES: u64 = 4096;

/// A directory being listed: the page of entries last fetched from the mds.
struct DirStream {
    path: String,
    client: Client,
    /// Index (in the whole listing) of `page[0]`.
    base: u64,
    page: Vec<DirEntry>,
    /// Whether the mds has entries after `page`.
    more: bool,
    /// Whether `page` was fetched at all.
    fetched: bool,
}

/// An open handle: a file with its capability, or a directory being listed.
enum Open {
    File(Arc<File>),
    Directory(Arc<Mutex<DirStream>>),
}

/// The mounted file system.
pub struct TesseraFs {
    callers: Callers,
    inodes: Inodes,
    open: Mutex<HashMap<u64, Open>>,
    next_handle: AtomicU64,
}

impl TesseraFs {
    /// A file system serving each caller through `callers`.
    pub fn new(callers: Callers) -> Self {
        Self {
            callers,
            inodes: Inodes::new(),
            open: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
        }
    }

    fn caller(request: &Request) -> Caller {
        Caller::of_request(request.uid(), request.gid(), request.pid())
    }

    fn client(&self, request: &Request) -> Client {
        self.callers.client(&Self::caller(request))
    }

    fn path(&self, inode: INodeNo) -> Result<String, Errno> {
        self.inodes.path(inode.0).ok_or(Errno::ESTALE)
    }

    fn child_path(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        if name.len() > NAME_BYTES_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.inodes.child_path(parent.0, name).ok_or(Errno::ESTALE)
    }

    /// Removes the name `(parent, name)` as the caller, with `call` (`unlink` or `rmdir`).
    fn remove(
        &self,
        request: &Request,
        (parent, name): (INodeNo, &OsStr),
        reply: ReplyEmpty,
        operation: &str,
        call: fn(&Client, &str) -> Result<(), ClientError>,
    ) {
        let result = self.child_path(parent, name).and_then(|path| {
            call(&self.client(request), &path)
                .map_err(|err| failed(operation, &path, &err, Call::Access))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn remember(&self, attr: &Attr, parent: INodeNo, name: &OsStr) -> Result<(), Errno> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        self.inodes
            .remember(attr.handle, parent.0, name)
            .map_err(|TableFull| Errno::ENFILE)
    }

    fn insert(&self, open: Open) -> Result<FileHandle, Errno> {
        let mut table = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= OPEN_FILES_MAX {
            return Err(Errno::EMFILE);
        }
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        table.insert(handle, open);
        Ok(FileHandle(handle))
    }

    fn file(&self, handle: FileHandle) -> Result<Arc<File>, Errno> {
        match self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&handle.0)
        {
            Some(Open::File(file)) => Ok(file.clone()),
            Some(Open::Directory(_)) => Err(Errno::EISDIR),
            None => Err(Errno::EBADF),
        }
    }

    fn directory(&self, handle: FileHandle) -> Result<Arc<Mutex<DirStream>>, Errno> {
        match self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&handle.0)
        {
            Some(Open::Directory(stream)) => Ok(stream.clone()),
            Some(Open::File(_)) => Err(Errno::ENOTDIR),
            None => Err(Errno::EBADF),
        }
    }

    /// The attributes of `inode` as `request`'s caller sees them.
    fn attributes(&self, request: &Request, inode: INodeNo) -> Result<Attr, Errno> {
        let path = self.path(inode)?;
        let attr = self
            .client(request)
            .stat(&path)
            .map_err(|err| failed("getattr", &path, &err, Call::Access))?;
        // Another client replaced the name: the kernel's inode is gone (it looks up again).
        if attr.handle != inode.0 {
            return Err(Errno::ESTALE);
        }
        Ok(attr)
    }

    fn setattr_as(
        &self,
        request: &Request,
        inode: INodeNo,
        mode: Option<u32>,
        owner: (Option<u32>, Option<u32>),
        size: Option<u64>,
        times: (Option<TimeOrNow>, Option<TimeOrNow>),
    ) -> Result<Attr, Errno> {
        let path = self.path(inode)?;
        let client = self.client(request);
        if let Some(mode) = mode {
            client
                .chmod(&path, mode & 0o7777)
                .map_err(|err| failed("chmod", &path, &err, Call::Owner))?;
        }
        if owner.0.is_some() || owner.1.is_some() {
            client
                .chown(&path, owner.0, owner.1)
                .map_err(|err| failed("chown", &path, &err, Call::Owner))?;
        }
        if let Some(size) = size {
            client
                .truncate(&path, size)
                .map_err(|err| failed("truncate", &path, &err, Call::Access))?;
        }
        if times.0.is_some() || times.1.is_some() {
            let wanted = |time: Option<TimeOrNow>| match time {
                None => SetTime::Omit,
                Some(TimeOrNow::Now) => SetTime::Now,
                Some(TimeOrNow::SpecificTime(at)) => {
                    SetTime::At(at.duration_since(UNIX_EPOCH).map_or(0, |since| {
                        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
                    }))
                }
            };
            let (atime, mtime) = (wanted(times.0), wanted(times.1));
            // A time given needs the owner (EPERM); "now" needs write permission (EACCES).
            let given = [atime, mtime]
                .iter()
                .any(|time| matches!(time, SetTime::At(_)));
            let attr = client.set_times(&path, atime, mtime).map_err(|err| {
                let call = if given { Call::Owner } else { Call::Access };
                failed("utimensat", &path, &err, call)
            })?;
            // The reply holds the attributes after the change, the size computed, and the
            // times are the last change made: no second round trip (tar x sets times after
            // every file).
            if attr.handle != inode.0 {
                return Err(Errno::ESTALE);
            }
            return Ok(attr);
        }
        self.attributes(request, inode)
    }

    /// Fills `reply` from `offset` on: 0 is ".", 1 "..", 2 + i the listing's entry i.
    fn fill_directory(
        &self,
        inode: INodeNo,
        stream: &mut DirStream,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Result<(), Errno> {
        let mut position = offset;
        loop {
            let full = match position {
                0 => reply.add(inode, 1, FileType::Directory, "."),
                1 => {
                    let parent = self.inodes.parent(inode.0).unwrap_or(ROOT);
                    reply.add(INodeNo(parent), 2, FileType::Directory, "..")
                }
                _ => {
                    let index = position - 2;
                    let Some(entry) = next_entry(stream, index)? else {
                        return Ok(());
                    };
                    reply.add(
                        INodeNo(entry.handle),
                        position + 1,
                        file_type(entry.kind),
                        &entry.name,
                    )
                }
            };
            if full {
                return Ok(());
            }
            position += 1;
        }
    }
}

/// Entry `index` of the listing, fetching pages from the mds as needed (from the start
/// again when the kernel seeks back before the page held).
fn next_entry(stream: &mut DirStream, index: u64) -> Result<Option<DirEntry>, Errno> {
    if !stream.fetched || index < stream.base {
        let (page, more) = stream
            .client
            .readdir_page(&stream.path, "")
            .map_err(|err| failed("readdir", &stream.path, &err, Call::Access))?;
        stream.page = page;
        stream.more = more;
        stream.base = 0;
        stream.fetched = true;
    }
    loop {
        let held = stream.page.len() as u64;
        if index < stream.base + held {
            let slot = usize::try_from(index - stream.base).expect("within the page");
            return Ok(Some(stream.page[slot].clone()));
        }
        let Some(last) = stream.page.last().filter(|_| stream.more) else {
            return Ok(None);
        };
        let after = last.name.clone();
        let (page, more) = stream
            .client
            .readdir_page(&stream.path, &after)
            .map_err(|err| failed("readdir", &stream.path, &err, Call::Access))?;
        stream.base += held;
        stream.page = page;
        stream.more = more;
    }
}

/// Logs a failed call with its full message, and gives its errno.
fn failed(operation: &str, path: &str, error: &ClientError, call: Call) -> Errno {
    tracing::debug!("{operation} {path}: {error}");
    errno(error, call)
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
    }
}

fn time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// Tessera's attributes as the kernel's.
pub fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.handle),
        size: attr.size,
        blocks: attr.size.div_ceil(512),
        atime: time(attr.atime_ns),
        mtime: time(attr.mtime_ns),
        ctime: time(attr.ctime_ns),
        crtime: time(attr.ctime_ns),
        kind: file_type(attr.kind),
        perm: u16::try_from(attr.mode & 0o7777).expect("masked to 12 bits"),
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: 0,
        blksize: MAX_WRITE_BYTES,
        flags: 0,
    }
}

/// Whether `caller` may access a file of `attr` for `mask` by the POSIX mode bits (as the mds
/// decides; root may read and write anything, and execute what anyone may).
fn allowed(caller: &Caller, attr: &Attr, mask: AccessFlags) -> bool {
    let wanted = mask.bits() & 0o7;
    let granted = if caller.uid == 0 {
        let any_execute = attr.kind == FileKind::Directory || attr.mode & 0o111 != 0;
        0o6 | u32::from(any_execute)
    } else if caller.uid == attr.uid {
        (attr.mode >> 6) & 0o7
    } else if caller.in_group(attr.gid) {
        (attr.mode >> 3) & 0o7
    } else {
        attr.mode & 0o7
    };
    let granted = i32::try_from(granted).expect("three bits");
    wanted & !granted == 0
}

fn open_mode(flags: OpenFlags) -> OpenMode {
    match flags.acc_mode() {
        OpenAccMode::O_RDONLY => OpenMode::ReadOnly,
        OpenAccMode::O_WRONLY => OpenMode::WriteOnly,
        OpenAccMode::O_RDWR => OpenMode::ReadWrite,
    }
}

impl Filesystem for TesseraFs {
    fn init(&mut self, _request: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each setter answers the nearest value the kernel allows when it refuses ours.
        let write = config
            .set_max_write(MAX_WRITE_BYTES)
            .or_else(|nearest| config.set_max_write(nearest));
        let readahead = config
            .set_max_readahead(READAHEAD_BYTES)
            .or_else(|nearest| config.set_max_readahead(nearest));
        let background = config
            .set_max_background(BACKGROUND_MAX)
            .or_else(|nearest| config.set_max_background(nearest));
        if write.is_err() || readahead.is_err() || background.is_err() {
            tracing::warn!("the kernel refused the mount's I/O sizes; using its defaults");
        }
        // Cached pages are dropped when getattr shows another client changed the file.
        if config
            .add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA)
            .is_err()
        {
            tracing::warn!("the kernel does not drop cached pages on a changed mtime");
        }
        Ok(())
    }

    fn lookup(&self, request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let result = (|| {
            let path = self.child_path(parent, name)?;
            let attr = self
                .client(request)
                .stat(&path)
                .map_err(|err| failed("lookup", &path, &err, Call::Access))?;
            self.remember(&attr, parent, name)?;
            Ok(attr)
        })();
        match result {
            Ok(attr) => reply.entry(&ATTR_TTL, &file_attr(&attr), Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn forget(&self, _request: &Request, inode: INodeNo, lookups: u64) {
        self.inodes.forget(inode.0, lookups);
    }

    fn getattr(&self, request: &Request, inode: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let result = match fh.map(|fh| self.file(fh)) {
            Some(Ok(file)) => file
                .stat()
                .map_err(|err| failed("getattr", file.path(), &err, Call::Access)),
            _ => self.attributes(request, inode),
        };
        match result {
            Ok(attr) => reply.attr(&ATTR_TTL, &file_attr(&attr)),
            Err(errno) => reply.error(errno),
        }
    }

    fn setattr(
        &self,
        request: &Request,
        inode: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.setattr_as(request, inode, mode, (uid, gid), size, (atime, mtime)) {
            Ok(attr) => reply.attr(&ATTR_TTL, &file_attr(&attr)),
            Err(errno) => reply.error(errno),
        }
    }

    fn mkdir(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = (|| {
            let path = self.child_path(parent, name)?;
            let attr = self
                .client(request)
                .mkdir(&path, mode & !umask & 0o7777)
                .map_err(|err| failed("mkdir", &path, &err, Call::Access))?;
            self.remember(&attr, parent, name)?;
            Ok(attr)
        })();
        match result {
            Ok(attr) => reply.entry(&ATTR_TTL, &file_attr(&attr), Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn unlink(&self, request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(request, (parent, name), reply, "unlink", Client::unlink);
    }

    fn rmdir(&self, request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(request, (parent, name), reply, "rmdir", Client::rmdir);
    }

    fn rename(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = (|| {
            if flags.intersects(!RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EINVAL);
            }
            let source = self.child_path(parent, name)?;
            let target = self.child_path(new_parent, new_name)?;
            let client = self.client(request);
            let moved = client
                .lookup(&source)
                .map_err(|err| failed("rename", &source, &err, Call::Access))?;
            // Not atomic against another client creating the target between the two calls.
            if flags.contains(RenameFlags::RENAME_NOREPLACE) && client.lookup(&target).is_ok() {
                return Err(Errno::EEXIST);
            }
            client
                .rename(&source, &target)
                .map_err(|err| failed("rename", &source, &err, Call::Access))?;
            let new_name = new_name.to_str().ok_or(Errno::EINVAL)?;
            self.inodes.moved(moved.handle, new_parent.0, new_name);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn open(&self, request: &Request, inode: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = (|| {
            let path = self.path(inode)?;
            let file = self
                .client(request)
                .open(&path, open_mode(flags))
                .map_err(|err| failed("open", &path, &err, Call::Access))?;
            self.insert(Open::File(Arc::new(file)))
        })();
        match result {
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(errno) => reply.error(errno),
        }
    }

    fn create(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = (|| {
            let path = self.child_path(parent, name)?;
            let options = CreateOptions {
                mode: mode & !umask & 0o7777,
                exclusive: flags & libc::O_EXCL != 0,
                ..CreateOptions::default()
            };
            let file = self
                .client(request)
                .create(&path, &options)
                .map_err(|err| failed("create", &path, &err, Call::Access))?;
            // The create's reply holds the attributes (size computed for a name that was
            // there): no second round trip to the mds and its iods.
            let attr = file.attr_at_open().clone();
            self.remember(&attr, parent, name)?;
            let fh = self.insert(Open::File(Arc::new(file)))?;
            Ok((attr, fh))
        })();
        match result {
            Ok((attr, fh)) => reply.created(
                &ATTR_TTL,
                &file_attr(&attr),
                Generation(0),
                fh,
                FopenFlags::empty(),
            ),
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &self,
        _request: &Request,
        _inode: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if size > READ_BYTES_MAX {
            reply.error(Errno::EINVAL);
            return;
        }
        let result = self.file(fh).and_then(|file| {
            // Bytes past the end read as zeros; the kernel copies out only up to the size it
            // holds for the file.
            let mut data = vec![0u8; size as usize];
            file.read_at(offset, &mut data)
                .map_err(|err| failed("read", file.path(), &err, Call::Access))?;
            Ok(data)
        });
        match result {
            Ok(data) => reply.data(&data),
            Err(errno) => reply.error(errno),
        }
    }

    fn write(
        &self,
        _request: &Request,
        _inode: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.file(fh).and_then(|file| {
            file.write_at(offset, data)
                .map_err(|err| failed("write", file.path(), &err, Call::Access))
        });
        match result {
            Ok(_) => reply.written(u32::try_from(data.len()).expect("at most max_write")),
            Err(errno) => reply.error(errno),
        }
    }

    fn flush(
        &self,
        _request: &Request,
        _inode: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes reach the iods before they return: nothing is held here to flush.
        match self.file(fh) {
            Ok(_) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn fsync(
        &self,
        _request: &Request,
        _inode: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self.file(fh).and_then(|file| {
            file.sync()
                .map_err(|err| failed("fsync", file.path(), &err, Call::Access))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn release(
        &self,
        _request: &Request,
        _inode: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fh.0);
        reply.ok();
    }

    fn opendir(&self, request: &Request, inode: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let result = self.path(inode).and_then(|path| {
            self.insert(Open::Directory(Arc::new(Mutex::new(DirStream {
                path,
                client: self.client(request),
                base: 0,
                page: Vec::new(),
                more: false,
                fetched: false,
            }))))
        });
        match result {
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(errno) => reply.error(errno),
        }
    }

    fn readdir(
        &self,
        _request: &Request,
        inode: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.directory(fh).and_then(|stream| {
            let mut stream = stream.lock().unwrap_or_else(PoisonError::into_inner);
            self.fill_directory(inode, &mut stream, offset, &mut reply)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn releasedir(
        &self,
        _request: &Request,
        _inode: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, request: &Request, _inode: INodeNo, reply: ReplyStatfs) {
        let client = self.client(request);
        let (mut total, mut free, mut available, mut objects, mut answered) = (0, 0, 0, 0, 0);
        for index in 0..client.server_count() {
            match client.server_statfs(index) {
                Ok(iod) => {
                    total += iod.total_bytes;
                    free += iod.free_bytes;
                    available += iod.available_bytes;
                    objects += iod.objects;
                    answered += 1;
                }
                Err(err) => tracing::debug!("statfs: iod {index}: {err}"),
            }
        }
        if answered == 0 {
            reply.error(Errno::EIO);
            return;
        }
        let block = STATFS_BLOCK_BYTES;
        let name_max = u32::try_from(NAME_BYTES_MAX).unwrap_or(u32::MAX);
        let block_u32 = u32::try_from(block).expect("a small block");
        // Tessera has no fixed table of inodes: the used ones are the mds's files and
        // directories, and as many more fit as there are free blocks (each file holds at
        // least one), so `df -i` reads the namespace's use, not 100 %.
        let used = client.mds_stats().map_or(objects, |stats| stats.inodes);
        let free_inodes = available / block;
        reply.statfs(
            total / block,
            free / block,
            available / block,
            used.saturating_add(free_inodes),
            free_inodes,
            block_u32,
            name_max,
            block_u32,
        );
    }

    // Tessera keeps no extended attributes. ENOSYS tells the kernel once, and it stops
    // asking (`ls -l` asks for ACLs and SELinux labels of every file).
    fn getxattr(
        &self,
        _request: &Request,
        _inode: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _request: &Request, _inode: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn setxattr(
        &self,
        _request: &Request,
        _inode: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _request: &Request, _inode: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    // Under `default_permissions` the kernel answers access(2) itself from the mode bits;
    // this answers a kernel that asks anyway, the same way.
    fn access(&self, request: &Request, inode: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.attributes(request, inode) {
            Ok(attr) if allowed(&Self::caller(request), &attr, mask) => reply.ok(),
            Ok(_) => reply.error(Errno::EACCES),
            Err(errno) => reply.error(errno),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(mode: u32, uid: u32, gid: u32, kind: FileKind) -> Attr {
        Attr {
            handle: 5,
            kind,
            mode,
            uid,
            gid,
            ..Attr::default()
        }
    }

    #[test]
    fn access_follows_the_mode_bits() {
        let owner = Caller::of_request(10, 10, 0);
        let stranger = Caller::of_request(11, 11, 0);
        let root = Caller::of_request(0, 0, 0);
        let file = attr(0o640, 10, 10, FileKind::File);
        let read = AccessFlags::R_OK;
        let write = AccessFlags::W_OK;
        let execute = AccessFlags::X_OK;
        assert!(allowed(&owner, &file, read | write));
        assert!(!allowed(&owner, &file, execute));
        assert!(!allowed(&stranger, &file, read));
        assert!(allowed(&stranger, &file, AccessFlags::F_OK));
        assert!(allowed(&root, &file, read | write));
        assert!(!allowed(&root, &file, execute));
        let group = Caller {
            uid: 12,
            gid: 99,
            groups: vec![10],
        };
        assert!(allowed(&group, &file, read) && !allowed(&group, &file, write));
        let directory = attr(0o700, 10, 10, FileKind::Directory);
        assert!(allowed(&root, &directory, execute));
    }

    #[test]
    fn attributes_map_to_the_kernel_shape() {
        let mut tessera = attr(0o4755, 3, 4, FileKind::File);
        tessera.size = 1025;
        tessera.mtime_ns = 1_500_000_000;
        tessera.nlink = 1;
        let kernel = file_attr(&tessera);
        assert_eq!(kernel.ino, INodeNo(5));
        assert_eq!(kernel.perm, 0o4755);
        assert_eq!(kernel.blocks, 3);
        assert_eq!(kernel.kind, FileType::RegularFile);
        assert_eq!(kernel.mtime, UNIX_EPOCH + Duration::from_millis(1500));
        assert_eq!((kernel.uid, kernel.gid, kernel.nlink), (3, 4, 1));
    }
}
