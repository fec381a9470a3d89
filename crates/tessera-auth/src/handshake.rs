//! The connection handshake and credential signatures.
//!
//! ```text
//! server -> client   Challenge { role, server_index, nonce }            (reply frame, id 0)
//! client -> server   Hello { credentials, proof = HMAC(key, hello | nonce | credentials.mac) }
//! server -> client   Welcome { proof = HMAC(key, welcome | nonce | hello.proof) }
//! ```
//!
//! The server checks the credential's tag and expiry and the proof; a fresh nonce per
//! connection makes a recorded `Hello` worthless on another connection. The client checks the
//! welcome (itself with the key, or with the value its agent computed), so a server without
//! the key cannot pose as one.

use std::time::Duration;

use tessera_proto::{Challenge, Credentials, Hello, Mac, Nonce, Principal, Welcome};

use crate::{AuthError, ClusterKey};

const CREDENTIAL_DOMAIN: &str = "tessera-credential-v1";
const HELLO_DOMAIN: &str = "tessera-hello-v1";
const WELCOME_DOMAIN: &str = "tessera-welcome-v1";

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

/// The proof a `Hello` carries for `nonce`.
pub fn hello_proof(key: &ClusterKey, nonce: &Nonce, credentials: &Credentials) -> Mac {
    key.sign(HELLO_DOMAIN, &[&nonce.0, &credentials.mac.0])
}

/// The proof a `Welcome` carries.
pub fn welcome_proof(key: &ClusterKey, nonce: &Nonce, hello_proof: &Mac) -> Mac {
    key.sign(WELCOME_DOMAIN, &[&nonce.0, &hello_proof.0])
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
        let mut nonce = Nonce::default();
        getrandom::fill(&mut nonce.0).map_err(|err| {
            AuthError::Refused(format!("no random bytes for a handshake nonce: {err}"))
        })?;
        Ok(Challenge {
            role: self.role,
            server_index: self.index,
            cluster_id: self.key.cluster_id(),
            nonce,
        })
    }

    /// Checks a client's `Hello` against the `challenge` sent on its connection; returns the
    /// welcome to send back.
    pub fn accept(&self, challenge: &Challenge, hello: &Hello) -> Result<Welcome, AuthError> {
        verify_credentials(&self.key, &hello.credentials)?;
        let expected = [&challenge.nonce.0[..], &hello.credentials.mac.0];
        if !self.key.verify(HELLO_DOMAIN, &expected, &hello.proof) {
            return Err(AuthError::BadSignature {
                what: "the handshake proof (made for another connection, or with another key)",
            });
        }
        Ok(Welcome {
            proof: welcome_proof(&self.key, &challenge.nonce, &hello.proof),
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

    #[test]
    fn a_hello_is_accepted_once_per_challenge_and_only_with_the_key() {
        let key = ClusterKey::from_bytes([9; 32]);
        let server = ServerAuth::new(key.clone(), 2, 3);
        let challenge = server.challenge().unwrap();
        let credentials = user(&key);
        let hello = Hello {
            proof: hello_proof(&key, &challenge.nonce, &credentials),
            credentials,
        };
        let welcome = server.accept(&challenge, &hello).unwrap();
        assert_eq!(
            welcome.proof,
            welcome_proof(&key, &challenge.nonce, &hello.proof)
        );
        // Replayed on another connection: another nonce.
        let next = server.challenge().unwrap();
        assert_ne!(next.nonce, challenge.nonce);
        let err = server.accept(&next, &hello).unwrap_err().to_string();
        assert!(err.contains("handshake proof"), "{err}");
        // Signed with another key.
        let other = ClusterKey::from_bytes([8; 32]);
        let credentials = user(&other);
        let forged = Hello {
            proof: hello_proof(&other, &next.nonce, &credentials),
            credentials,
        };
        let err = server.accept(&next, &forged).unwrap_err().to_string();
        assert!(err.contains("credential is not signed"), "{err}");
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
