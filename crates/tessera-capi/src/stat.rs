//! The attributes a stat call hands to C: `TesseraStat`, filled from the client library's
//! attributes. A leaf: the namespace calls (`client.rs`) and the open-file calls (`file.rs`)
//! both fill it.

use std::ffi::c_int;

use tessera_client::{Attr, FileKind, Layout};

/// What [`tessera_stat`] and [`tessera_file_stat`] report.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TesseraStat {
    /// The file handle.
    pub handle: u64,
    /// Size in bytes (computed from the servers).
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Non-zero for a directory.
    pub is_directory: c_int,
    /// Last data or name change, ns since the Unix epoch.
    pub mtime_ns: u64,
    /// Stripe unit of a striped file (0 for a directory or a pattern layout).
    pub stripe_unit_bytes: u64,
    /// Servers the file's layout spans (0 for a directory).
    pub server_count: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links (2 + subdirectories for a directory, 1 for a file).
    pub nlink: u32,
    /// Last access, ns since the Unix epoch.
    pub atime_ns: u64,
    /// Last attribute change, ns since the Unix epoch.
    pub ctime_ns: u64,
}

impl From<&Attr> for TesseraStat {
    fn from(attr: &Attr) -> Self {
        let (stripe_unit_bytes, server_count) = match &attr.layout {
            Some(Layout::Stripe(stripe)) => (stripe.stripe_unit_bytes, stripe.servers.len()),
            Some(layout) => (0, layout.servers().len()),
            None => (0, 0),
        };
        Self {
            handle: attr.handle,
            size: attr.size,
            mode: attr.mode,
            is_directory: c_int::from(attr.kind == FileKind::Directory),
            mtime_ns: attr.mtime_ns,
            stripe_unit_bytes,
            server_count: u32::try_from(server_count).unwrap_or(u32::MAX),
            uid: attr.uid,
            gid: attr.gid,
            nlink: attr.nlink,
            atime_ns: attr.atime_ns,
            ctime_ns: attr.ctime_ns,
        }
    }
}
