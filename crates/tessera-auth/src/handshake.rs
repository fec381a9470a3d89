//! The connection handshake and credential signatures.
//!
//! ```text
//! server -> client   Challenge { role, server_index, cluster_id, nonce }     (reply frame, id 0)
//! client -> server   Hello { credentials, client_nonce,
//!                            proof = HMAC(key, hello | binding | credentials.mac) }
//! server -> client   Welcome { proof = HMAC(key, welcome | binding | hello.proof) }
//!
//! binding = Binding { role, server_index, cluster_id, server nonce, client nonce }
//! ```
//!
//! Both proofs name both ends. The client binds its proof to the server it means to reach
//! (the role, index and cluster it expects at that address, which it has compared with the
//! challenge) and to the server's nonce; the server verifies it against its own identity, so
//! a proof made for iod 1 (say, by the mds dialing a squatter on iod 1's port) is refused by
//! iod 2 and by the mds. The server's proof covers the client's nonce, so a recorded welcome
//! is worthless on another connection. The server checks the credential's tag and expiry
//! too; the client checks the welcome (itself with the key, or with the value its agent
//! computed), so a server without the key cannot pose as one.

use std::time::Duration;

use tessera_proto::{Binding, Challenge, Credentials, Hello, Mac, Nonce, Principal, Welcome, Wire};

use crate::{AuthError, ClusterKey};

const CREDENTIAL_DOMAIN: &str = "tessera-credential-v1";
const HELLO_DOMAIN: &str = "tessera-hello-v2";
const WELCOME_DOMAIN: &str = "tessera-welcome-v2";

/// Signs `credentials` (every field but the tag) with `key`, setting its tag.
pub fn sign_credentials(key: &ClusterKey, credentials: &mut Credentials) {
    credentials.mac = key.sign(CREDENTIAL_DOMAIN, &[&credentials.signed_bytes()]);
}

/// A credential for `uid`, `gid` and `groups` on this host, valid for `lifetime`.
pub fn credentials_for(
    key: &ClusterKey,
    principal: Principal,
    (uid, gid, groups): (u32, u32, Vec<u32>),
    lifetime: Duration,
) -> Credentials {
    let mut groups = groups;
    groups.truncate(tessera_proto::limits::CREDENTIAL_GROUPS_MAX);
    let mut credentials = Credentials {
        principal,
        uid,
        gid,
        groups,
        host: crate::host_name(),
        expires_s: crate::now_s().saturating_add(lifetime.as_secs()),
        mac: Mac::default(),
    };
    sign_credentials(key, &mut credentials);
    credentials
}

/// Checks a credential's tag and expiry.
pub fn verify_credentials(key: &ClusterKey, credentials: &Credentials) -> Result<(), AuthError> {
    if !key.verify(
        CREDENTIAL_DOMAIN,
        &[&credentials.signed_bytes()],
        &credentials.mac,
    ) {
        return Err(AuthError::BadSignature {
            what: "the credential",
        });
    }
    crate::check_expiry("the credential", credentials.expires_s)
}

/// Checks only the expiry of a credential whose tag was checked before.
pub fn check_credentials_expiry(credentials: &Credentials) -> Result<(), AuthError> {
    crate::check_expiry("the credential", credentials.expires_s)
}

/// A fresh random nonce.
pub fn nonce() -> Result<Nonce, AuthError> {
    let mut nonce = Nonce::default();
    getrandom::fill(&mut nonce.0).map_err(|err| {
        AuthError::Refused(format!("no random bytes for a handshake nonce: {err}"))
    })?;
    Ok(nonce)
}

/// The binding of a client's answer to `challenge`, with a fresh client nonce. The client
/// must have compared the challenge's role, index and cluster with the server it expects at
/// that address first: the proofs are then bound to that server.
pub fn bind(challenge: &Challenge) -> Result<Binding, AuthError> {
    Ok(Binding {
        role: challenge.role,
        server_index: challenge.server_index,
        cluster_id: challenge.cluster_id,
        server_nonce: challenge.nonce,
        client_nonce: nonce()?,
    })
}

/// The proof a `Hello` carries for `binding`.
pub fn hello_proof(key: &ClusterKey, binding: &Binding, credentials: &Credentials) -> Mac {
    key.sign(HELLO_DOMAIN, &[&binding.to_body(), &credentials.mac.0])
}

/// The proof a `Welcome` carries.
pub fn welcome_proof(key: &ClusterKey, binding: &Binding, hello_proof: &Mac) -> Mac {
    key.sign(WELCOME_DOMAIN, &[&binding.to_body(), &hello_proof.0])
}

/// A server's side of the handshake.
#[derive(Debug, Clone)]
pub struct ServerAuth {
    key: ClusterKey,
    role: u8,
    index: u16,
}

impl ServerAuth {
    /// The handshake of a server of `role` and `index` holding `key`.
    pub fn new(key: ClusterKey, role: u8, index: u16) -> Self {
        Self { key, role, index }
    }

    /// The key (to check credentials and capabilities in requests).
    pub fn key(&self) -> &ClusterKey {
        &self.key
    }

    /// A challenge with a fresh random nonce.
    pub fn challenge(&self) -> Result<Challenge, AuthError> {
        Ok(Challenge {
            role: self.role,
            server_index: self.index,
            cluster_id: self.key.cluster_id(),
            nonce: nonce()?,
        })
    }

    /// Checks a client's `Hello` against the `challenge` sent on its connection and against
    /// this server's own identity (never what the challenge says); returns the welcome to
    /// send back.
    pub fn accept(&self, challenge: &Challenge, hello: &Hello) -> Result<Welcome, AuthError> {
        verify_credentials(&self.key, &hello.credentials)?;
        let binding = Binding {
            role: self.role,
            server_index: self.index,
            cluster_id: self.key.cluster_id(),
            server_nonce: challenge.nonce,
            client_nonce: hello.client_nonce,
        };
        let expected = [&binding.to_body()[..], &hello.credentials.mac.0];
        if !self.key.verify(HELLO_DOMAIN, &expected, &hello.proof) {
            return Err(AuthError::BadSignature {
                what: "the handshake proof (made for another server or connection, or with \
                       another key)",
            });
        }
        Ok(Welcome {
            proof: welcome_proof(&self.key, &binding, &hello.proof),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(key: &ClusterKey) -> Credentials {
        credentials_for(
            key,
            Principal::User,
            (1000, 100, vec![5, 6]),
            Duration::from_mins(1),
        )
    }

    /// The `Hello` a key holder sends for `challenge`, and the welcome it expects.
    fn hello_for(
        key: &ClusterKey,
        challenge: &Challenge,
        credentials: Credentials,
    ) -> (Hello, Mac) {
        let binding = bind(challenge).unwrap();
        let proof = hello_proof(key, &binding, &credentials);
        let welcome = welcome_proof(key, &binding, &proof);
        let hello = Hello {
            credentials,
            client_nonce: binding.client_nonce,
            proof,
        };
        (hello, welcome)
    }

    #[test]
    fn a_hello_is_accepted_once_per_challenge_and_only_with_the_key() {
        let key = ClusterKey::from_bytes([9; 32]);
        let server = ServerAuth::new(key.clone(), 2, 3);
        let challenge = server.challenge().unwrap();
        let (hello, expected_welcome) = hello_for(&key, &challenge, user(&key));
        let welcome = server.accept(&challenge, &hello).unwrap();
        assert_eq!(welcome.proof, expected_welcome);
        // Replayed on another connection: another nonce.
        let next = server.challenge().unwrap();
        assert_ne!(next.nonce, challenge.nonce);
        let err = server.accept(&next, &hello).unwrap_err().to_string();
        assert!(err.contains("handshake proof"), "{err}");
        // Signed with another key.
        let other = ClusterKey::from_bytes([8; 32]);
        let (forged, _) = hello_for(&other, &next, user(&other));
        let err = server.accept(&next, &forged).unwrap_err().to_string();
        assert!(err.contains("credential is not signed"), "{err}");
    }

    #[test]
    fn a_proof_made_for_one_server_is_refused_by_every_other() {
        // A squatter on iod 1's port relays the real iod 2's (or the mds's) nonce to the mds,
        // which answers as for iod 1; the relayed proof must not open iod 2 or the mds.
        let key = ClusterKey::from_bytes([9; 32]);
        let iod1 = ServerAuth::new(key.clone(), tessera_proto::ROLE_IOD, 1);
        let iod2 = ServerAuth::new(key.clone(), tessera_proto::ROLE_IOD, 2);
        let mds = ServerAuth::new(key.clone(), tessera_proto::ROLE_MDS, 0);
        let server_credentials = credentials_for(
            &key,
            Principal::Server,
            (0, 0, Vec::new()),
            Duration::from_mins(1),
        );
        for victim in [&iod2, &mds] {
            let real = victim.challenge().unwrap();
            let posed = Challenge {
                role: tessera_proto::ROLE_IOD,
                server_index: 1,
                ..real.clone()
            };
            let (hello, _) = hello_for(&key, &posed, server_credentials.clone());
            let err = victim.accept(&real, &hello).unwrap_err().to_string();
            assert!(err.contains("made for another server"), "{err}");
            // The same answer is good for the server it was made for, on its connection.
            let genuine = Challenge {
                nonce: real.nonce,
                ..iod1.challenge().unwrap()
            };
            iod1.accept(&genuine, &hello).unwrap();
        }
        // Another cluster's iod 1 (another key, so another cluster id) refuses it too.
        let foreign = ServerAuth::new(ClusterKey::from_bytes([4; 32]), tessera_proto::ROLE_IOD, 1);
        let challenge = foreign.challenge().unwrap();
        let (hello, _) = hello_for(&key, &challenge, server_credentials);
        assert!(foreign.accept(&challenge, &hello).is_err());
    }

    #[test]
    fn the_welcome_covers_the_clients_nonce() {
        let key = ClusterKey::from_bytes([9; 32]);
        let server = ServerAuth::new(key.clone(), tessera_proto::ROLE_IOD, 0);
        let challenge = server.challenge().unwrap();
        let (hello, expected) = hello_for(&key, &challenge, user(&key));
        let welcome = server.accept(&challenge, &hello).unwrap();
        assert_eq!(welcome.proof, expected);
        // A client that sent another nonce expects another welcome: a recorded one is no good.
        let (other_hello, other_expected) = hello_for(&key, &challenge, user(&key));
        assert_ne!(other_hello.client_nonce, hello.client_nonce);
        assert_ne!(other_expected, welcome.proof);
    }

    #[test]
    fn a_changed_field_or_an_old_credential_is_refused() {
        let key = ClusterKey::from_bytes([9; 32]);
        let mut credentials = user(&key);
        verify_credentials(&key, &credentials).unwrap();
        credentials.uid = 0;
        assert!(verify_credentials(&key, &credentials).is_err());
        let mut credentials = user(&key);
        credentials.groups.push(0);
        assert!(verify_credentials(&key, &credentials).is_err());
        let mut old = user(&key);
        old.expires_s = crate::now_s() - 1;
        sign_credentials(&key, &mut old);
        let err = verify_credentials(&key, &old).unwrap_err().to_string();
        assert!(err.contains("expired"), "{err}");
    }
}
