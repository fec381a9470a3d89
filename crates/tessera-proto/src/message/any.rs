//! Requests any server answers: `Ping`, the handshake, `ServerStats`, `Statfs`, and the
//! agent's.

use super::{Credentials, Mac, Nonce, Opcode, Request};
use crate::codec::{Decoder, Encoder, Wire};
use crate::error::WireError;

/// Which kind of server answered a ping.
pub const ROLE_MDS: u8 = 1;
/// Which kind of server answered a ping.
pub const ROLE_IOD: u8 = 2;

/// `PingReply::store_state`: the server's store serves reads and writes.
pub const STORE_OK: u8 = 0;
/// `PingReply::store_state`: the last change failed because the store's disk is full; reads
/// are served, changes fail with `NoSpace` until space is freed.
pub const STORE_NO_SPACE: u8 = 1;
/// `PingReply::store_state`: the store failed with another I/O error; the server reopens it
/// and retries, changes fail with `Io` meanwhile.
pub const STORE_FAILED: u8 = 2;

wire_struct! {
    /// Asks a server who it is.
    pub struct Ping {}
}

wire_struct! {
    /// Who a server is.
    pub struct PingReply {
        /// `ROLE_MDS` or `ROLE_IOD`.
        pub role: u8,
        /// The iod's index in the cluster (0 for the mds).
        pub server_index: u16,
        /// The server's process id.
        pub pid: u32,
        /// Files (mds) or objects (iod) the server holds.
        pub objects: u64,
        /// `STORE_OK`, `STORE_NO_SPACE` or `STORE_FAILED` (the iod always sends `STORE_OK`).
        pub store_state: u8,
    }
}
request!(Ping => Ping, PingReply);

wire_struct! {
    /// The first frame on every connection, from the server: who it is and a fresh random
    /// nonce the client's proof must cover (so a recorded handshake cannot be replayed).
    pub struct Challenge {
        /// `ROLE_MDS` or `ROLE_IOD`.
        pub role: u8,
        /// The iod's index (0 for the mds).
        pub server_index: u16,
        /// The cluster the server belongs to (derived from its key): a client compares it,
        /// and the role and index, with what it expects before any request.
        pub cluster_id: u64,
        /// Random, new for each connection.
        pub nonce: Nonce,
    }
}

wire_struct! {
    /// What both handshake proofs are bound to: the server the client means to reach (its
    /// role, index and cluster, as the client expects them and the server knows itself) and
    /// the two nonces of the connection. A proof made for one server, or on one connection,
    /// verifies nowhere else, so a squatter cannot relay a key holder's proof to another
    /// server.
    pub struct Binding {
        /// `ROLE_MDS` or `ROLE_IOD`.
        pub role: u8,
        /// The iod's index (0 for the mds).
        pub server_index: u16,
        /// The server's cluster.
        pub cluster_id: u64,
        /// The server's challenge nonce.
        pub server_nonce: Nonce,
        /// The client's challenge nonce (in its `Hello`).
        pub client_nonce: Nonce,
    }
}

wire_struct! {
    /// The client's answer to a [`Challenge`]: its credential, its own challenge to the
    /// server, and a proof that a holder of the cluster key vouches for this connection to
    /// this server: HMAC(key, `tessera-hello-v2` | [`Binding`] | credential tag).
    pub struct Hello {
        /// Who the connection speaks for.
        pub credentials: Credentials,
        /// Random, new for each connection: the server's proof must cover it.
        pub client_nonce: Nonce,
        /// The proof.
        pub proof: Mac,
    }
}

wire_struct! {
    /// The server's acceptance, proving it holds the key too: HMAC(key, `tessera-welcome-v2`
    /// | [`Binding`] | the client's proof).
    pub struct Welcome {
        /// The server's proof.
        pub proof: Mac,
    }
}
request!(Hello => Hello, Welcome);

wire_struct! {
    /// To the agent of this host: sign a credential for the calling process (whom the agent
    /// learns from the kernel) and answer a server's challenge with it, for the server and
    /// nonces `binding` names.
    pub struct AgentSign {
        /// What the proofs are bound to (all zeros when only a fresh credential is wanted).
        pub binding: Binding,
    }
}

wire_struct! {
    /// The agent's answer: everything a [`Hello`] needs, and the [`Welcome`] proof a genuine
    /// server will send back.
    pub struct AgentSigned {
        /// The caller's credential.
        pub credentials: Credentials,
        /// The proof for the binding.
        pub proof: Mac,
        /// The welcome proof to expect.
        pub welcome: Mac,
    }
}
request!(AgentSign => AgentSign, AgentSigned);

impl Wire for u8 {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u8(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.u8()
    }
}
