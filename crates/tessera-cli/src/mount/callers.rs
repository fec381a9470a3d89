//! Who a request comes from: each caller's credential, and one client per caller.
//!
//! The kernel hands the mount daemon the uid, gid and pid of every request. The daemon runs
//! as root and holds the cluster key, so it could sign anything; it signs exactly what the
//! kernel reports: the request's uid and gid, and the supplementary groups
//! `/proc/PID/status` lists for the calling process (as the agent does for a local process,
//! ARCHITECTURE §2.6). Since a connection speaks for one credential, each caller gets a
//! [`Client`] of its own, whose connections authenticate as that caller: the mds and the iods
//! then apply the same permission rules to a process on the mount as to the same process
//! running the CLI. The clients live in a small LRU of [`CALLERS_MAX`] entries; an evicted
//! client closes its connections once the last file opened through it is released.

use std::sync::{Arc, Mutex, PoisonError};

use tessera_auth::handshake::{credentials_for, hello_proof, welcome_proof};
use tessera_auth::{
    due_for_renewal, Answer, AuthError, Authenticator, ClusterKey, CREDENTIAL_LIFETIME,
};
use tessera_client::{Client, ClientOptions, ClusterConfig};
use tessera_proto::limits::CREDENTIAL_GROUPS_MAX;
use tessera_proto::{Credentials, Nonce, Principal};

/// Distinct callers (uid, gid, groups) with a client of their own at one time; the least
/// recently used one beyond is dropped (its open files keep it alive until released).
pub const CALLERS_MAX: usize = 64;

/// The identity a request is served as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller {
    /// The request's (filesystem) uid.
    pub uid: u32,
    /// The request's (filesystem) gid.
    pub gid: u32,
    /// Supplementary groups, sorted, at most `CREDENTIAL_GROUPS_MAX`, the gid left out.
    pub groups: Vec<u32>,
}

impl Caller {
    /// The caller of a request by `uid`, `gid` from process `pid`: its supplementary groups
    /// are read from `/proc/PID/status`. A process gone before we look (or pid 0, a request
    /// the kernel makes itself) has none, so it gets no more rights than its uid and gid give.
    pub fn of_request(uid: u32, gid: u32, pid: u32) -> Self {
        let mut groups = if pid == 0 {
            Vec::new()
        } else {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map(|status| groups_of_status(&status))
                .unwrap_or_default()
        };
        groups.retain(|&group| group != gid);
        groups.sort_unstable();
        groups.dedup();
        groups.truncate(CREDENTIAL_GROUPS_MAX);
        Self { uid, gid, groups }
    }

    /// Whether this caller is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The ids of the `Groups:` line of a `/proc/PID/status` text (none if it has no such line).
fn groups_of_status(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|list| {
            list.split_whitespace()
                .filter_map(|id| id.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Signs credentials for one caller with the cluster key, renewing them before they expire.
#[derive(Debug)]
struct CallerSigner {
    key: ClusterKey,
    caller: Caller,
    cached: Mutex<Option<Credentials>>,
}

impl Authenticator for CallerSigner {
    fn answer(&self, nonce: &Nonce) -> Result<Answer, AuthError> {
        let credentials = self.credentials()?;
        let proof = hello_proof(&self.key, nonce, &credentials);
        Ok(Answer {
            welcome: welcome_proof(&self.key, nonce, &proof),
            credentials,
            proof,
        })
    }

    fn credentials(&self) -> Result<Credentials, AuthError> {
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = cached
            .as_ref()
            .filter(|held| !due_for_renewal(held.expires_s, CREDENTIAL_LIFETIME))
        {
            return Ok(held.clone());
        }
        let ids = (self.caller.uid, self.caller.gid, self.caller.groups.clone());
        let credentials = credentials_for(&self.key, Principal::User, ids, CREDENTIAL_LIFETIME);
        *cached = Some(credentials.clone());
        Ok(credentials)
    }
}

/// The clients of the mount's callers, least recently used first out.
pub struct Callers {
    config: ClusterConfig,
    options: ClientOptions,
    key: ClusterKey,
    /// (caller, client, last use); at most `CALLERS_MAX` entries.
    clients: Mutex<Vec<(Caller, Client, u64)>>,
    tick: std::sync::atomic::AtomicU64,
}

impl Callers {
    /// Clients of the cluster in `config`, signed with `key`, made with `options`.
    pub fn new(config: ClusterConfig, options: ClientOptions, key: ClusterKey) -> Self {
        Self {
            config,
            options,
            key,
            clients: Mutex::new(Vec::with_capacity(CALLERS_MAX)),
            tick: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The client that speaks for `caller` (made on first use).
    pub fn client(&self, caller: &Caller) -> Client {
        let now = self.tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = clients.iter_mut().find(|(held, _, _)| held == caller) {
            entry.2 = now;
            return entry.1.clone();
        }
        if clients.len() >= CALLERS_MAX {
            let oldest = clients
                .iter()
                .enumerate()
                .min_by_key(|(_, (_, _, used))| *used)
                .map(|(index, _)| index)
                .expect("a full table has entries");
            clients.swap_remove(oldest);
        }
        let signer = CallerSigner {
            key: self.key.clone(),
            caller: caller.clone(),
            cached: Mutex::new(None),
        };
        let client = Client::with_authenticator(&self.config, &self.options, Arc::new(signer));
        clients.push((caller.clone(), client.clone(), now));
        debug_assert!(clients.len() <= CALLERS_MAX);
        client
    }

    /// How many callers hold a client now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_come_from_the_status_line() {
        let status = "Name:\tbash\nUid:\t5\t5\t5\t5\nGroups:\t10 20 30 \nNgid:\t0\n";
        assert_eq!(groups_of_status(status), vec![10, 20, 30]);
        assert_eq!(groups_of_status("Name:\tx\n"), Vec::<u32>::new());
        assert_eq!(groups_of_status("Groups:\n"), Vec::<u32>::new());
    }

    #[test]
    fn a_caller_of_this_process_has_its_groups_without_the_gid() {
        let (uid, gid, mut groups) = tessera_auth::authenticator::process_ids();
        let caller = Caller::of_request(uid, gid, std::process::id());
        groups.sort_unstable();
        groups.dedup();
        assert_eq!(caller.groups, groups);
        assert!(caller.in_group(gid));
        let kernel = Caller::of_request(7, 8, 0);
        assert!(kernel.groups.is_empty() && kernel.in_group(8) && !kernel.in_group(0));
    }

    #[test]
    fn the_table_keeps_at_most_callers_max_clients() {
        let config = ClusterConfig {
            mds: tessera_client::config::MdsEntry {
                address: "127.0.0.1:1".to_owned(),
            },
            iods: Vec::new(),
            ofi: None,
            auth: tessera_client::config::AuthEntry::default(),
            cluster_id: None,
            client: tessera_client::config::ClientEntry::default(),
        };
        let callers = Callers::new(
            config,
            ClientOptions::default(),
            ClusterKey::from_bytes([7; 32]),
        );
        for uid in 0..u32::try_from(CALLERS_MAX).unwrap() + 5 {
            callers.client(&Caller::of_request(uid, uid, 0));
        }
        assert_eq!(callers.len(), CALLERS_MAX);
    }
}
