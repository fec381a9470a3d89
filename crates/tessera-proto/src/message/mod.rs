//! The catalogue of wire operations: opcode, request type, reply type.
//!
//! Every request a client, the metadata server (mds) or an I/O server (iod) can receive is
//! listed once in [`Opcode`] and bound to its body types by a [`Request`] impl. The bodies live
//! in one file per protocol: `shared` (types several carry), `any` (any server), `mds`, `iod`;
//! `fields` holds the codecs of their fields. The server handlers are in
//! `tessera-mds/src/handler.rs` and `tessera-iod/src/handler/` (one module per request kind);
//! the byte layout of every body is in `docs/PROTOCOL.md`, which the encode tests (`tests.rs`)
//! keep honest.

use crate::codec::Wire;
use crate::error::WireError;

/// Every operation on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Liveness and identity of any server.
    Ping = 0x01,
    /// The connection handshake: the server's [`Challenge`] (sent first, as a reply frame
    /// with request id 0), the client's [`Hello`] and the server's [`Welcome`].
    Hello = 0x02,
    /// Agent: sign a credential for the calling process and answer a server's challenge.
    AgentSign = 0x03,
    /// mds: resolve a path to its attributes and layout.
    Lookup = 0x10,
    /// mds: create a file (and its objects on the iods).
    Create = 0x11,
    /// mds: create a directory.
    Mkdir = 0x12,
    /// mds: remove an empty directory.
    Rmdir = 0x13,
    /// mds: remove a file and its objects.
    Unlink = 0x14,
    /// mds: move a name.
    Rename = 0x15,
    /// mds: list a directory, one page at a time.
    Readdir = 0x16,
    /// mds: attributes of a path, with the file size computed from the iods.
    Stat = 0x17,
    /// mds: attributes of an open file by handle, size computed.
    StatHandle = 0x18,
    /// mds: set the size of a file.
    Truncate = 0x19,
    /// mds: take a byte-range lock on a file (waits until it is free).
    LockRange = 0x1A,
    /// mds: release a byte-range lock.
    UnlockRange = 0x1B,
    /// mds: open a file: permission check, attributes and a capability.
    Open = 0x1E,
    /// mds: a fresh capability for a file already open (by handle).
    Renew = 0x1F,
    /// mds: set the permission bits of a path.
    Chmod = 0x1C,
    /// mds: set the owner and/or group of a path.
    Chown = 0x1D,
    /// mds, from a server only: which of a batch of handles name live files (an iod's orphan
    /// sweep).
    HandlesLive = 0x20,
    /// mds: its group commit counters (changes made durable, durable commits) and inodes.
    MdsStats = 0x21,
    /// mds: set the access and modification times of a path (`utimensat`).
    SetTimes = 0x22,
    /// iod, from the mds only: create the local object of a handle (never over an existing
    /// one).
    ObjectCreate = 0x30,
    /// iod: remove the local object of a handle.
    ObjectRemove = 0x31,
    /// iod: size and mtime of a local object.
    ObjectStat = 0x32,
    /// iod: set the size of a local object.
    ObjectTruncate = 0x33,
    /// iod: write a list of local pieces.
    Write = 0x34,
    /// iod: read a list of local pieces.
    Read = 0x35,
    /// iod: flush a local object to stable storage.
    ObjectSync = 0x36,
    /// iod: write this server's share of a range of a datatype's stream.
    WriteType = 0x37,
    /// iod: read this server's share of a range of a datatype's stream.
    ReadType = 0x38,
    /// iod: declare a view (a file type, displacement and layout) under an id.
    DeclareView = 0x39,
    /// iod: write this server's share of a range of a declared view.
    WriteView = 0x3A,
    /// iod: read this server's share of a range of a declared view.
    ReadView = 0x3B,
    /// iod: forget a view.
    ReleaseView = 0x3C,
    /// iod: storage counters and the cost model in use.
    ServerStats = 0x3D,
    /// iod: check that one-sided access to the client's memory works.
    RemoteProbe = 0x3E,
    /// A bulk-only frame of the `multiple` transfer mode: one piece of data.
    Data = 0x3F,
    /// iod: one participant's share of a server-directed collective write.
    WriteCollective = 0x40,
    /// iod: one participant's share of a server-directed collective read.
    ReadCollective = 0x41,
    /// iod: map a shared-memory region of a same-host client, whose descriptor travels
    /// with the frame (`SCM_RIGHTS`), under a key the client chose.
    ShareRegion = 0x42,
    /// iod: capacity and use of the file system under its data directory (`tessera df`).
    Statfs = 0x43,
    /// iod: turn this connection into the client's callback channel for lease revocations.
    LeaseListen = 0x44,
    /// iod: a read lease on a file's object, for a client that caches its blocks.
    LeaseAcquire = 0x45,
    /// iod → client, on a callback channel: drop what you cache of a file, then answer.
    LeaseRevoke = 0x46,
    /// iod: which of these clean blocks a caching client evicted the iod wants (DEMOTE).
    DemoteOffer = 0x47,
    /// iod: clean blocks a caching client evicted, for the iod's unified cache (DEMOTE).
    Demote = 0x48,
    /// iod: create the local objects of many handles (the mds's objects made ahead).
    ObjectCreateMany = 0x49,
    /// iod: the requests on this connection are those of caching client `client_id` (the
    /// writes its write-back flushes).
    LeaseClient = 0x4A,
}

impl Opcode {
    /// Decodes an opcode byte.
    pub fn from_u8(value: u8) -> Result<Self, WireError> {
        Ok(match value {
            0x01 => Self::Ping,
            0x02 => Self::Hello,
            0x03 => Self::AgentSign,
            0x10 => Self::Lookup,
            0x11 => Self::Create,
            0x12 => Self::Mkdir,
            0x13 => Self::Rmdir,
            0x14 => Self::Unlink,
            0x15 => Self::Rename,
            0x16 => Self::Readdir,
            0x17 => Self::Stat,
            0x18 => Self::StatHandle,
            0x19 => Self::Truncate,
            0x1A => Self::LockRange,
            0x1B => Self::UnlockRange,
            0x1E => Self::Open,
            0x1F => Self::Renew,
            0x1C => Self::Chmod,
            0x1D => Self::Chown,
            0x20 => Self::HandlesLive,
            0x21 => Self::MdsStats,
            0x22 => Self::SetTimes,
            0x30 => Self::ObjectCreate,
            0x31 => Self::ObjectRemove,
            0x32 => Self::ObjectStat,
            0x33 => Self::ObjectTruncate,
            0x34 => Self::Write,
            0x35 => Self::Read,
            0x36 => Self::ObjectSync,
            0x37 => Self::WriteType,
            0x38 => Self::ReadType,
            0x39 => Self::DeclareView,
            0x3A => Self::WriteView,
            0x3B => Self::ReadView,
            0x3C => Self::ReleaseView,
            0x3D => Self::ServerStats,
            0x3E => Self::RemoteProbe,
            0x3F => Self::Data,
            0x40 => Self::WriteCollective,
            0x41 => Self::ReadCollective,
            0x42 => Self::ShareRegion,
            0x43 => Self::Statfs,
            0x44 => Self::LeaseListen,
            0x45 => Self::LeaseAcquire,
            0x46 => Self::LeaseRevoke,
            0x47 => Self::DemoteOffer,
            0x48 => Self::Demote,
            0x49 => Self::ObjectCreateMany,
            0x4A => Self::LeaseClient,
            opcode => return Err(WireError::UnknownOpcode { opcode }),
        })
    }

    /// Every opcode, in byte order.
    pub const ALL: [Self; 49] = [
        Self::Ping,
        Self::Hello,
        Self::AgentSign,
        Self::Lookup,
        Self::Create,
        Self::Mkdir,
        Self::Rmdir,
        Self::Unlink,
        Self::Rename,
        Self::Readdir,
        Self::Stat,
        Self::StatHandle,
        Self::Truncate,
        Self::LockRange,
        Self::UnlockRange,
        Self::Chmod,
        Self::Chown,
        Self::Open,
        Self::Renew,
        Self::HandlesLive,
        Self::MdsStats,
        Self::SetTimes,
        Self::ObjectCreate,
        Self::ObjectRemove,
        Self::ObjectStat,
        Self::ObjectTruncate,
        Self::Write,
        Self::Read,
        Self::ObjectSync,
        Self::WriteType,
        Self::ReadType,
        Self::DeclareView,
        Self::WriteView,
        Self::ReadView,
        Self::ReleaseView,
        Self::ServerStats,
        Self::RemoteProbe,
        Self::Data,
        Self::WriteCollective,
        Self::ReadCollective,
        Self::ShareRegion,
        Self::Statfs,
        Self::LeaseListen,
        Self::LeaseAcquire,
        Self::LeaseRevoke,
        Self::DemoteOffer,
        Self::Demote,
        Self::ObjectCreateMany,
        Self::LeaseClient,
    ];

    /// A short, stable snake_case name: the `kind` label of the servers' request metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::Hello => "hello",
            Self::AgentSign => "agent_sign",
            Self::Lookup => "lookup",
            Self::Create => "create",
            Self::Mkdir => "mkdir",
            Self::Rmdir => "rmdir",
            Self::Unlink => "unlink",
            Self::Rename => "rename",
            Self::Readdir => "readdir",
            Self::Stat => "stat",
            Self::StatHandle => "stat_handle",
            Self::Truncate => "truncate",
            Self::LockRange => "lock_range",
            Self::UnlockRange => "unlock_range",
            Self::Open => "open",
            Self::Renew => "renew",
            Self::Chmod => "chmod",
            Self::Chown => "chown",
            Self::HandlesLive => "handles_live",
            Self::MdsStats => "mds_stats",
            Self::SetTimes => "set_times",
            Self::ObjectCreate => "object_create",
            Self::ObjectRemove => "object_remove",
            Self::ObjectStat => "object_stat",
            Self::ObjectTruncate => "object_truncate",
            Self::Write => "write",
            Self::Read => "read",
            Self::ObjectSync => "object_sync",
            Self::WriteType => "write_type",
            Self::ReadType => "read_type",
            Self::DeclareView => "declare_view",
            Self::WriteView => "write_view",
            Self::ReadView => "read_view",
            Self::ReleaseView => "release_view",
            Self::ServerStats => "server_stats",
            Self::RemoteProbe => "remote_probe",
            Self::Data => "data",
            Self::WriteCollective => "write_collective",
            Self::ReadCollective => "read_collective",
            Self::ShareRegion => "share_region",
            Self::Statfs => "statfs",
            Self::LeaseListen => "lease_listen",
            Self::LeaseAcquire => "lease_acquire",
            Self::LeaseRevoke => "lease_revoke",
            Self::DemoteOffer => "demote_offer",
            Self::Demote => "demote",
            Self::ObjectCreateMany => "object_create_many",
            Self::LeaseClient => "lease_client",
        }
    }
}

/// A request body bound to its opcode and reply body.
pub trait Request: Wire {
    /// The opcode in the frame header.
    const OPCODE: Opcode;
    /// The body of a successful reply.
    type Reply: Wire;
}

/// Declares a message struct and its field-by-field encoding, in declaration order.
macro_rules! wire_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$field_meta:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name { $($(#[$field_meta])* pub $field: $ty,)* }

        impl Wire for $name {
            #[allow(unused_variables)]
            fn encode(&self, encoder: &mut Encoder) {
                $(self.$field.encode(encoder);)*
            }
            #[allow(unused_variables)]
            fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
                Ok(Self { $($field: <$ty as Wire>::decode(decoder)?,)* })
            }
        }
    };
}

/// Binds a request type to its opcode and reply type.
macro_rules! request {
    ($request:ident => $opcode:ident, $reply:ty) => {
        impl Request for $request {
            const OPCODE: Opcode = Opcode::$opcode;
            type Reply = $reply;
        }
    };
}

mod any;
mod fields;
mod iod;
mod mds;
mod shared;

pub use any::*;
pub use iod::*;
pub use mds::*;
pub use shared::*;

#[cfg(test)]
mod tests;
