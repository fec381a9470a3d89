//! The client's side: where a process gets its credential and its handshake proofs.
//!
//! A process that can read the cluster key signs for itself ([`KeySigner`]: the servers, and
//! root on a cluster it started); any other process asks the agent of its host
//! ([`AgentClient`]), which signs for whoever the kernel says is calling.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use tessera_proto::header::FLAG_ERROR;
use tessera_proto::limits::HEADER_BYTES;
use tessera_proto::{
    AgentSign, AgentSigned, Binding, Challenge, Credentials, Header, Hello, Mac, Principal,
    RemoteError, Request, Wire,
};

use crate::handshake::{credentials_for, hello_proof, welcome_proof};
use crate::{due_for_renewal, AuthError, ClusterKey, CREDENTIAL_LIFETIME};

/// What a client sends in its `Hello`, and the welcome it expects back.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The credential.
    pub credentials: Credentials,
    /// The proof over the binding (the server, its nonce and the client's).
    pub proof: Mac,
    /// The welcome proof a server holding the key sends back.
    pub welcome: Mac,
}

/// A source of credentials and handshake answers.
pub trait Authenticator: Send + Sync + std::fmt::Debug {
    /// Answers a server's challenge: proofs bound to `binding` (the server the client means
    /// to reach and both nonces, [`crate::handshake::bind`]).
    fn answer(&self, binding: &Binding) -> Result<Answer, AuthError>;
    /// The `Hello` that answers `challenge` (proofs bound to the server it names, with a
    /// fresh client nonce) and the welcome proof a genuine server sends back. The caller
    /// compares the challenge's role, index and cluster with the server it expects first.
    fn hello(&self, challenge: &Challenge) -> Result<(Hello, Mac), AuthError> {
        let binding = crate::handshake::bind(challenge)?;
        let answer = self.answer(&binding)?;
        let hello = Hello {
            credentials: answer.credentials,
            client_nonce: binding.client_nonce,
            proof: answer.proof,
        };
        Ok((hello, answer.welcome))
    }
    /// A credential for namespace requests, fresh enough to use now.
    fn credentials(&self) -> Result<Credentials, AuthError>;
}

/// The effective uid, gid and supplementary groups of this process.
pub fn process_ids() -> (u32, u32, Vec<u32>) {
    // SAFETY: these calls cannot fail and touch no memory of ours.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut groups = vec![0 as libc::gid_t; tessera_proto::limits::CREDENTIAL_GROUPS_MAX];
    let capacity = libc::c_int::try_from(groups.len()).expect("a small count");
    // SAFETY: getgroups writes at most `capacity` ids into the buffer we own.
    let count = unsafe { libc::getgroups(capacity, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(count).unwrap_or(0));
    groups.retain(|&group| group != gid);
    (uid, gid, groups)
}

/// Signs with the cluster key: for a server, for this process, or for a user it names.
#[derive(Debug)]
pub struct KeySigner {
    key: ClusterKey,
    principal: Principal,
    /// The (uid, gid, groups) signed for a user other than this process's.
    user: Option<(u32, u32, Vec<u32>)>,
    cached: Mutex<Option<Credentials>>,
}

impl KeySigner {
    /// Signs as a server of the cluster.
    pub fn server(key: ClusterKey) -> Self {
        Self {
            key,
            principal: Principal::Server,
            user: None,
            cached: Mutex::new(None),
        }
    }

    /// Signs as this process's user (which may read the key, so may sign anything).
    pub fn process(key: ClusterKey) -> Self {
        Self {
            key,
            principal: Principal::User,
            user: None,
            cached: Mutex::new(None),
        }
    }

    /// Signs as user `(uid, gid, groups)`, whoever this process is: what a process that
    /// holds the key and acts for others does (the FUSE mount, for each caller).
    pub fn user(key: ClusterKey, ids: (u32, u32, Vec<u32>)) -> Self {
        Self {
            key,
            principal: Principal::User,
            user: Some(ids),
            cached: Mutex::new(None),
        }
    }

    /// The key file at `path`, signing for this process.
    pub fn from_key_file(path: &Path) -> Result<Self, AuthError> {
        Ok(Self::process(ClusterKey::load(path)?))
    }
}

impl Authenticator for KeySigner {
    fn answer(&self, binding: &Binding) -> Result<Answer, AuthError> {
        let credentials = self.credentials()?;
        let proof = hello_proof(&self.key, binding, &credentials);
        Ok(Answer {
            welcome: welcome_proof(&self.key, binding, &proof),
            credentials,
            proof,
        })
    }

    fn credentials(&self) -> Result<Credentials, AuthError> {
        let mut cached = self
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(credentials) = cached
            .as_ref()
            .filter(|held| !due_for_renewal(held.expires_s, CREDENTIAL_LIFETIME))
        {
            return Ok(credentials.clone());
        }
        let ids = match (self.principal, &self.user) {
            (Principal::Server, _) => (0, 0, Vec::new()),
            (Principal::User, Some(ids)) => ids.clone(),
            (Principal::User, None) => process_ids(),
        };
        let credentials = credentials_for(&self.key, self.principal, ids, CREDENTIAL_LIFETIME);
        *cached = Some(credentials.clone());
        Ok(credentials)
    }
}

/// Asks the agent of this host (`tessera agent`) over its Unix socket.
#[derive(Debug)]
pub struct AgentClient {
    socket: PathBuf,
    timeout: Duration,
    cached: Mutex<Option<Credentials>>,
}

impl AgentClient {
    /// The agent listening at `socket`; each exchange gives up after `timeout`.
    pub fn new(socket: PathBuf, timeout: Duration) -> Self {
        Self {
            socket,
            timeout,
            cached: Mutex::new(None),
        }
    }

    fn error(&self, detail: impl std::fmt::Display) -> AuthError {
        AuthError::Agent {
            socket: self.socket.display().to_string(),
            detail: detail.to_string(),
        }
    }

    /// One exchange with the agent.
    fn sign(&self, binding: &Binding) -> Result<AgentSigned, AuthError> {
        let mut stream = UnixStream::connect(&self.socket)
            .map_err(|err| self.error(format!("cannot connect: {err}")))?;
        stream
            .set_read_timeout(Some(self.timeout))
            .and_then(|()| stream.set_write_timeout(Some(self.timeout)))
            .map_err(|err| self.error(err))?;
        let body = AgentSign {
            binding: binding.clone(),
        }
        .to_body();
        let header = Header {
            opcode: AgentSign::OPCODE as u8,
            flags: 0,
            request_id: 1,
            body_bytes: u32::try_from(body.len()).expect("a small body"),
            bulk_bytes: 0,
        };
        if let Err(err) = stream.write_all(&[header.encode().as_slice(), &body].concat()) {
            // The agent may have refused the connection (over a limit) and closed it before
            // the request went out: its reason is still there to read.
            return Err(match self.read_answer(&mut stream) {
                Ok((reply, body)) if reply.request_id == 0 => self.refusal(&reply, &body),
                _ => self.error(format!("cannot send: {err}")),
            });
        }
        let (reply, body) = self.read_answer(&mut stream)?;
        if reply.request_id == 0 {
            return Err(self.refusal(&reply, &body));
        }
        if reply.request_id != 1 {
            return Err(self.error(format!(
                "an answer of request id {}: not the answer to its request",
                reply.request_id
            )));
        }
        if reply.flags & FLAG_ERROR != 0 {
            let error = RemoteError::from_body(&body).map_err(|err| self.error(err))?;
            return Err(self.error(error.message));
        }
        AgentSigned::from_body(&body).map_err(|err| self.error(err))
    }

    /// One answer frame of the agent: its header and body.
    fn read_answer(&self, stream: &mut UnixStream) -> Result<(Header, Vec<u8>), AuthError> {
        let mut bytes = [0u8; HEADER_BYTES];
        stream
            .read_exact(&mut bytes)
            .map_err(|err| self.error(format!("no answer: {err}")))?;
        let reply = Header::decode(&bytes).map_err(|err| self.error(err))?;
        if !reply.is_reply() || reply.opcode != AgentSign::OPCODE as u8 {
            return Err(self.error(format!(
                "an answer of opcode {:#04x}, request id {}, flags {:#x}: not the answer to its request",
                reply.opcode, reply.request_id, reply.flags
            )));
        }
        if reply.body_bytes > AGENT_REPLY_BODY_BYTES_MAX || reply.bulk_bytes != 0 {
            return Err(self.error(format!(
                "an answer of {} body bytes (agent_reply_body_bytes_max {AGENT_REPLY_BODY_BYTES_MAX})",
                reply.body_bytes
            )));
        }
        let mut body = vec![0u8; reply.body_bytes as usize];
        stream
            .read_exact(&mut body)
            .map_err(|err| self.error(format!("short answer: {err}")))?;
        Ok((reply, body))
    }

    /// The error for a frame of request id 0: the agent closed the connection without
    /// serving it (its uid holds `agent_connections_per_uid_max` connections already, or the
    /// connection was closed to make room), and says why.
    fn refusal(&self, reply: &Header, body: &[u8]) -> AuthError {
        if reply.flags & FLAG_ERROR == 0 {
            return self.error("an answer of request id 0 that is not an error");
        }
        match RemoteError::from_body(body) {
            Ok(error) => self.error(format!("refused the connection: {}", error.message)),
            Err(err) => self.error(err),
        }
    }
}

/// Largest agent answer a client reads.
pub const AGENT_REPLY_BODY_BYTES_MAX: u32 = 8 << 10;

impl Authenticator for AgentClient {
    fn answer(&self, binding: &Binding) -> Result<Answer, AuthError> {
        let signed = self.sign(binding)?;
        *self
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(signed.credentials.clone());
        Ok(Answer {
            credentials: signed.credentials,
            proof: signed.proof,
            welcome: signed.welcome,
        })
    }

    fn credentials(&self) -> Result<Credentials, AuthError> {
        if let Some(credentials) = self
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|held| !due_for_renewal(held.expires_s, CREDENTIAL_LIFETIME))
        {
            return Ok(credentials.clone());
        }
        Ok(self.answer(&Binding::default())?.credentials)
    }
}

/// No way to authenticate: every use fails with the reason given.
#[derive(Debug)]
pub struct NoAuthenticator(pub String);

impl Authenticator for NoAuthenticator {
    fn answer(&self, _binding: &Binding) -> Result<Answer, AuthError> {
        Err(AuthError::Refused(self.0.clone()))
    }
    fn credentials(&self) -> Result<Credentials, AuthError> {
        Err(AuthError::Refused(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::ServerAuth;

    #[test]
    fn a_key_signer_for_a_user_signs_that_user_and_the_server_accepts_it() {
        let key = ClusterKey::from_bytes([7; 32]);
        let signer = KeySigner::user(key.clone(), (1234, 567, vec![8, 9]));
        let credentials = signer.credentials().unwrap();
        assert_eq!(
            (credentials.uid, credentials.gid, credentials.groups.clone()),
            (1234, 567, vec![8, 9])
        );
        assert_eq!(credentials.principal, Principal::User);
        let server = ServerAuth::new(key, 0, 1);
        let challenge = server.challenge().unwrap();
        let (hello, expected) = signer.hello(&challenge).unwrap();
        let welcome = server.accept(&challenge, &hello).unwrap();
        assert_eq!(welcome.proof, expected);
    }
}
