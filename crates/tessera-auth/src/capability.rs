//! Capabilities: the mds's signed word that a uid may read or write one file's objects.
//!
//! Layout (62 bytes, carried as the opaque `Capability` bytes of every data request):
//! `version u8 (1) | handle u64 | rights u8 | uid u32 | expires_s u64 | epoch u64 | mac [32]`,
//! the tag being HMAC-SHA-256 with the cluster key over `tessera-capability-v1`, a zero byte
//! and the first 30 bytes. An iod checks the tag once per connection and capability
//! ([`CapabilityCache`]) and the handle, rights, uid and expiry on every request.

use tessera_proto::limits::MAC_BYTES;
use tessera_proto::{Capability, Mac, Principal};

use crate::{check_expiry, AuthError, ClusterKey};

const DOMAIN: &str = "tessera-capability-v1";
const VERSION: u8 = 1;
const SIGNED_BYTES: usize = 1 + 8 + 1 + 4 + 8 + 8;
/// Bytes of an encoded capability.
pub const CAPABILITY_BYTES: usize = SIGNED_BYTES + MAC_BYTES;

/// Verified capabilities an iod remembers per connection (checked by comparing bytes, with
/// no HMAC); the least recently used is forgotten past it.
pub const CAPABILITIES_CACHED_PER_CONNECTION_MAX: usize = 32;

/// What a capability allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Rights {
    /// Reading the file's bytes.
    pub read: bool,
    /// Writing them (and syncing).
    pub write: bool,
}

impl Rights {
    /// Read only.
    pub const READ: Self = Self {
        read: true,
        write: false,
    };
    /// Write only.
    pub const WRITE: Self = Self {
        read: false,
        write: true,
    };
    /// Read and write.
    pub const READ_WRITE: Self = Self {
        read: true,
        write: true,
    };
    /// Either one: what declaring a view or asking an object's size needs.
    pub const ANY: Self = Self {
        read: false,
        write: false,
    };

    fn bits(self) -> u8 {
        u8::from(self.read) | u8::from(self.write) << 1
    }

    fn covers(self, wanted: Self) -> bool {
        (!wanted.read || self.read) && (!wanted.write || self.write) && (self.read || self.write)
    }

    fn name(self) -> &'static str {
        match (self.read, self.write) {
            (true, true) => "read and write",
            (true, false) => "read",
            (false, true) => "write",
            (false, false) => "no",
        }
    }
}

/// The fields of a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The file.
    pub handle: u64,
    /// What it allows.
    pub rights: Rights,
    /// Whose it is: requests carrying it must come on a connection of this uid.
    pub uid: u32,
    /// Seconds since the Unix epoch when it stops being accepted.
    pub expires_s: u64,
    /// The file's layout epoch when it was signed (its creation time in ns): a client that
    /// holds a layout of another epoch has a stale layout.
    pub epoch: u64,
}

impl Grant {
    fn signed_bytes(&self) -> [u8; SIGNED_BYTES] {
        let mut out = [0u8; SIGNED_BYTES];
        out[0] = VERSION;
        out[1..9].copy_from_slice(&self.handle.to_le_bytes());
        out[9] = self.rights.bits();
        out[10..14].copy_from_slice(&self.uid.to_le_bytes());
        out[14..22].copy_from_slice(&self.expires_s.to_le_bytes());
        out[22..30].copy_from_slice(&self.epoch.to_le_bytes());
        out
    }

    /// Signs the grant with `key`.
    pub fn sign(&self, key: &ClusterKey) -> Capability {
        let signed = self.signed_bytes();
        let mac = key.sign(DOMAIN, &[&signed]);
        Capability([signed.as_slice(), &mac.0].concat())
    }

    /// Reads the fields of a capability without checking its tag (a client reads its own
    /// capability's expiry this way; servers use [`Grant::verify`]).
    pub fn parse(capability: &Capability) -> Result<Self, AuthError> {
        let bytes = &capability.0;
        if bytes.is_empty() {
            return Err(AuthError::Refused("no capability".to_owned()));
        }
        if bytes.len() != CAPABILITY_BYTES || bytes[0] != VERSION || bytes[9] > 3 {
            return Err(AuthError::Refused(format!(
                "a malformed capability ({} bytes, version {}, rights byte {:#x})",
                bytes.len(),
                bytes[0],
                bytes.get(9).copied().unwrap_or(0)
            )));
        }
        let word = |range: std::ops::Range<usize>| -> [u8; 8] {
            let mut out = [0u8; 8];
            out.copy_from_slice(&bytes[range]);
            out
        };
        let mut uid = [0u8; 4];
        uid.copy_from_slice(&bytes[10..14]);
        Ok(Self {
            handle: u64::from_le_bytes(word(1..9)),
            rights: Rights {
                read: bytes[9] & 1 != 0,
                write: bytes[9] & 2 != 0,
            },
            uid: u32::from_le_bytes(uid),
            expires_s: u64::from_le_bytes(word(14..22)),
            epoch: u64::from_le_bytes(word(22..30)),
        })
    }

    /// Checks the tag of `capability` with `key` and returns its fields (expiry not checked).
    pub fn verify(key: &ClusterKey, capability: &Capability) -> Result<Self, AuthError> {
        let grant = Self::parse(capability)?;
        let mut mac = [0u8; MAC_BYTES];
        mac.copy_from_slice(&capability.0[SIGNED_BYTES..]);
        if !key.verify(DOMAIN, &[&capability.0[..SIGNED_BYTES]], &Mac(mac)) {
            return Err(AuthError::BadSignature {
                what: "the capability",
            });
        }
        Ok(grant)
    }

    /// Whether the grant lets `uid` (`None`: a server) do `wanted` on `handle` now.
    pub fn allows(&self, handle: u64, wanted: Rights, uid: Option<u32>) -> Result<(), AuthError> {
        self.names(handle, wanted, uid)?;
        check_expiry("the capability", self.expires_s)
    }

    /// Whether the grant lets `uid` renew it for `wanted` on `handle`: as [`Grant::allows`],
    /// but an expired grant is accepted. A renewal only shows that the caller learned the
    /// handle from an open; the mds re-checks the file's permissions as of now before it
    /// signs a new capability, so the old one's age grants nothing.
    pub fn allows_renewal(&self, handle: u64, wanted: Rights, uid: u32) -> Result<(), AuthError> {
        self.names(handle, wanted, Some(uid))
    }

    /// The handle, rights and uid checks of [`Grant::allows`], without the expiry.
    fn names(&self, handle: u64, wanted: Rights, uid: Option<u32>) -> Result<(), AuthError> {
        if self.handle != handle {
            return Err(AuthError::Refused(format!(
                "the capability is for handle {:#x}, not {handle:#x}",
                self.handle
            )));
        }
        if !self.rights.covers(wanted) {
            return Err(AuthError::Refused(format!(
                "the capability grants {} access, and this request needs {}",
                self.rights.name(),
                wanted.name()
            )));
        }
        if let Some(uid) = uid.filter(|&uid| uid != self.uid) {
            return Err(AuthError::Refused(format!(
                "the capability is uid {}'s, and this connection speaks for uid {uid}",
                self.uid
            )));
        }
        Ok(())
    }
}

/// The capabilities one connection has shown that verified, most recently used last.
#[derive(Debug, Default)]
pub struct CapabilityCache {
    verified: Vec<(Capability, Grant)>,
    /// HMAC checks made (cache misses), for tests and counters.
    pub checks: u64,
}

impl CapabilityCache {
    /// Checks that `capability` lets the connection's `principal` and `uid` do `wanted` on
    /// `handle`. A server's connection needs no capability.
    pub fn check(
        &mut self,
        key: &ClusterKey,
        principal: Principal,
        uid: u32,
        capability: &Capability,
        handle: u64,
        wanted: Rights,
    ) -> Result<(), AuthError> {
        if principal == Principal::Server && capability.0.is_empty() {
            return Ok(());
        }
        let held = self
            .verified
            .iter()
            .position(|(held, _)| held == capability);
        let grant = if let Some(at) = held {
            let entry = self.verified.remove(at);
            let grant = entry.1;
            self.verified.push(entry);
            grant
        } else {
            self.checks += 1;
            let grant = Grant::verify(key, capability)?;
            if self.verified.len() >= CAPABILITIES_CACHED_PER_CONNECTION_MAX {
                self.verified.remove(0);
            }
            self.verified.push((capability.clone(), grant));
            grant
        };
        let uid = (principal == Principal::User).then_some(uid);
        grant.allows(handle, wanted, uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::now_s;

    fn grant(rights: Rights, expires_s: u64) -> Grant {
        Grant {
            handle: 7,
            rights,
            uid: 1000,
            expires_s,
            epoch: 99,
        }
    }

    #[test]
    fn a_capability_round_trips_and_is_checked_field_by_field() {
        let key = ClusterKey::from_bytes([3; 32]);
        let later = now_s() + 60;
        let capability = grant(Rights::READ, later).sign(&key);
        assert_eq!(capability.0.len(), CAPABILITY_BYTES);
        assert_eq!(
            Grant::verify(&key, &capability).unwrap(),
            grant(Rights::READ, later)
        );
        let mut cache = CapabilityCache::default();
        let user = Principal::User;
        cache
            .check(&key, user, 1000, &capability, 7, Rights::READ)
            .unwrap();
        cache
            .check(&key, user, 1000, &capability, 7, Rights::ANY)
            .unwrap();
        assert_eq!(cache.checks, 1, "the second use is a cache hit");
        let refused = |uid, handle, wanted| {
            CapabilityCache::default()
                .check(&key, user, uid, &capability, handle, wanted)
                .unwrap_err()
                .to_string()
        };
        assert!(refused(1000, 7, Rights::WRITE).contains("grants read access"));
        assert!(refused(1000, 8, Rights::READ).contains("handle 0x7, not 0x8"));
        assert!(refused(1001, 7, Rights::READ).contains("uid 1000's"));
    }

    #[test]
    fn forged_expired_and_missing_capabilities_are_refused() {
        let key = ClusterKey::from_bytes([3; 32]);
        let other = ClusterKey::from_bytes([4; 32]);
        let check = |capability: &Capability| {
            CapabilityCache::default()
                .check(&key, Principal::User, 1000, capability, 7, Rights::READ)
                .unwrap_err()
                .to_string()
        };
        let forged = grant(Rights::READ_WRITE, now_s() + 60).sign(&other);
        assert!(check(&forged).contains("not signed"));
        let mut altered = grant(Rights::READ, now_s() + 60).sign(&key);
        altered.0[9] = 3;
        assert!(check(&altered).contains("not signed"));
        let expired = grant(Rights::READ, now_s() - 5).sign(&key);
        assert!(check(&expired).contains("expired"));
        assert!(check(&Capability::default()).contains("no capability"));
        assert!(check(&Capability(vec![1; 10])).contains("malformed"));
        let mut unknown_rights = grant(Rights::READ, now_s() + 60).sign(&key);
        unknown_rights.0[9] = 0xFD;
        assert!(check(&unknown_rights).contains("malformed"));
        // A renewal accepts an expired capability, and nothing else it would refuse.
        let expired = grant(Rights::READ, now_s() - 5);
        expired.allows_renewal(7, Rights::READ, 1000).unwrap();
        let renewal = |handle, wanted, uid| {
            expired
                .allows_renewal(handle, wanted, uid)
                .unwrap_err()
                .to_string()
        };
        assert!(renewal(7, Rights::READ_WRITE, 1000).contains("grants read access"));
        assert!(renewal(8, Rights::READ, 1000).contains("handle 0x7, not 0x8"));
        assert!(renewal(7, Rights::READ, 1001).contains("uid 1000's"));
        // A server's connection needs none.
        CapabilityCache::default()
            .check(
                &key,
                Principal::Server,
                0,
                &Capability::default(),
                7,
                Rights::WRITE,
            )
            .unwrap();
    }
}
