//! Who a connection reaches: a server's name, address and identity ([`Peer`]), what its
//! challenge says it is ([`Identity`]), and what a new connection checks it against
//! ([`Expected`]).
//!
//! A leaf module: both the connection and the pool that keeps connections use these types,
//! so neither imports the other for them.

use std::path::PathBuf;

/// One server of a pool: its name for errors and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Names the server in errors: "iod 2 at 127.0.0.1:7001".
    pub name: String,
    /// `host:port`.
    pub address: String,
    /// The server's Unix socket, when it runs on this host: data then moves one-sidedly
    /// (the `local` backend), with TCP as the fallback.
    pub local: Option<PathBuf>,
    /// Who must answer at this address: the role and index the server names in its
    /// challenge, checked on every new connection before any request.
    pub expect: Identity,
}

/// Who a server is: what its challenge says, and what a client expects of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// `ROLE_MDS` or `ROLE_IOD`.
    pub role: u8,
    /// The iod's index in the cluster (0 for the mds).
    pub index: u16,
}

impl Identity {
    /// The metadata server.
    pub const MDS: Self = Self {
        role: tessera_proto::ROLE_MDS,
        index: 0,
    };

    /// I/O server `index`.
    pub fn iod(index: u16) -> Self {
        Self {
            role: tessera_proto::ROLE_IOD,
            index,
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.role {
            tessera_proto::ROLE_MDS => f.write_str("the mds"),
            tessera_proto::ROLE_IOD => write!(f, "iod {}", self.index),
            role => write!(f, "a server of role {role}"),
        }
    }
}

impl Peer {
    /// A server reached by TCP only, which must be `expect`.
    pub fn tcp(name: impl Into<String>, address: impl Into<String>, expect: Identity) -> Self {
        Self {
            name: name.into(),
            address: address.into(),
            local: None,
            expect,
        }
    }
}

/// Who a new connection must reach: checked against the server's challenge before anything
/// is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// The role and index.
    pub identity: Identity,
    /// The cluster, when known.
    pub cluster_id: Option<u64>,
}
