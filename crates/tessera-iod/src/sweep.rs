//! The orphan sweep at start: an iod asks the mds which of its objects' handles live and
//! removes the others.
//!
//! Orphans come from unlinks and renames whose object removal failed (the iod was down: the
//! mds commits the name change first, see `tessera-mds/src/handler.rs`) and from creates the
//! mds never committed. At start the iod runs [`run`] on a thread of its own, beside serving:
//! it waits for the mds to answer (its address given, or read from a file `tessera up`
//! writes), authenticates with the cluster key as a server, then pages through its object
//! directory with `HandlesLive` questions ([`ObjectStore::sweep_orphans`] keeps what a create
//! makes meanwhile). Everything it waits on is bounded: each call by the connection timeout,
//! the whole wait for the mds by [`SweepOptions::give_up_after`]. It logs what it removed.
//!
//! Each answer names the mds's namespace, which must be the one this iod belongs to
//! ([`Membership`], recorded at the first contact): an mds of another namespace (one started
//! with this cluster's key on another store) would call every object here an orphan, so the
//! sweep stops at its first answer, removing nothing, and does not ask it again.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_auth::{Authenticator, ClusterKey, KeySigner};
use tessera_net::{Identity, NetError, Peer, Pool};
use tessera_proto::{ErrorCode, HandlesLive, RemoteError};

use crate::membership::Membership;
use crate::storage::ObjectStorage;
use crate::store::{ObjectStore, SweepReport};

/// How the iod finds the mds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MdsAddress {
    /// `host:port` (`tessera iod --mds`).
    Fixed(String),
    /// A file holding `host:port`, written once the mds listens (`--mds-address-file`;
    /// `tessera up` passes its run directory's `mds.addr`). Read again at every attempt, since
    /// it may still hold a former mds's address.
    File(PathBuf),
}

/// How long a sweep waits for the mds, by default, before giving up (logged; the next
/// start sweeps again).
pub const SWEEP_MDS_WAIT: Duration = Duration::from_mins(2);
/// Pause between attempts to reach the mds.
const SWEEP_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Handles named in the log line of a sweep; the rest are counted.
const SWEEP_LOGGED_HANDLES_MAX: usize = 32;

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// This iod's index (for log lines).
    pub index: u16,
    /// Where the mds is.
    pub mds: MdsAddress,
    /// The cluster key: the iod authenticates to the mds as a server.
    pub key: ClusterKey,
    /// Bound on each connect and call.
    pub timeout: Duration,
    /// Bound on the whole wait for the mds.
    pub give_up_after: Duration,
    /// The namespace this iod belongs to (the iod's own, shared).
    pub membership: Arc<Membership>,
}

/// Why one try of the sweep failed.
enum Failure {
    /// Worth another try (the mds not up yet, a timeout).
    Retry(String),
    /// An mds of another namespace answered: asking it again changes nothing.
    Refused(String),
}

/// Sweeps `store` once the mds answers; returns the report, or why it gave up (also logged).
pub fn run<S: ObjectStorage>(
    store: &ObjectStore<S>,
    options: &SweepOptions,
) -> Result<SweepReport, String> {
    let index = options.index;
    let deadline = Instant::now() + options.give_up_after;
    let signer: Arc<dyn Authenticator> = Arc::new(KeySigner::server(options.key.clone()));
    loop {
        let last_error = match attempt(store, options, &signer) {
            Ok(report) => {
                log_report(index, &report);
                return Ok(report);
            }
            Err(Failure::Refused(why)) => {
                let why = format!("iod {index}: orphan sweep refused, nothing removed: {why}");
                tracing::warn!("{why}");
                return Err(why);
            }
            Err(Failure::Retry(error)) => error,
        };
        if Instant::now() + SWEEP_RETRY_PAUSE > deadline {
            let why = format!(
                "iod {index}: orphan sweep gave up after {:?}: {last_error}",
                options.give_up_after
            );
            tracing::warn!("{why}");
            return Err(why);
        }
        std::thread::sleep(SWEEP_RETRY_PAUSE);
    }
}

/// One try: resolve the mds, then sweep. An error before any removal is retried by [`run`];
/// one during the sweep too (what was removed stays removed, the rest is asked again).
fn attempt<S: ObjectStorage>(
    store: &ObjectStore<S>,
    options: &SweepOptions,
    signer: &Arc<dyn Authenticator>,
) -> Result<SweepReport, Failure> {
    let address = match &options.mds {
        MdsAddress::Fixed(address) => address.clone(),
        MdsAddress::File(path) => std::fs::read_to_string(path)
            .map(|text| text.trim().to_owned())
            .map_err(|err| Failure::Retry(format!("mds address file {}: {err}", path.display())))?,
    };
    let mut refused = false;
    let pool = Pool::new(
        vec![Peer::tcp(
            format!("mds at {address}"),
            address.clone(),
            Identity::MDS,
        )],
        options.timeout,
        signer.clone(),
    )
    .with_cluster_id(Some(options.key.cluster_id()));
    store
        .sweep_orphans(|handles| {
            let credentials = signer.credentials().map_err(|err| {
                RemoteError::new(ErrorCode::PermissionDenied, format!("signing: {err}"))
            })?;
            let request = HandlesLive {
                credentials,
                handles: handles.to_vec(),
            };
            let reply = pool
                .with(0, |connection| connection.call(&request))
                .map_err(|error| match error {
                    NetError::Remote { peer, error } => {
                        RemoteError::new(error.code, format!("{peer}: {}", error.message))
                    }
                    other => RemoteError::new(ErrorCode::Unavailable, other.to_string()),
                })?;
            // Only this iod's mds says what is an orphan here.
            options
                .membership
                .check(
                    reply.namespace,
                    format_args!("the orphan sweep's HandlesLive answer from the mds at {address}"),
                )
                .inspect_err(|error| refused = error.code == ErrorCode::PermissionDenied)?;
            // The mds answers about the handles asked, nothing else.
            if let Some(stranger) = reply.live.iter().find(|handle| !handles.contains(handle)) {
                return Err(RemoteError::new(
                    ErrorCode::Protocol,
                    format!(
                        "mds at {address} named handle {stranger:#x}, which was not asked about"
                    ),
                ));
            }
            Ok(reply.live)
        })
        .map_err(|error| {
            if refused {
                Failure::Refused(error.to_string())
            } else {
                Failure::Retry(error.to_string())
            }
        })
}

fn log_report(index: u16, report: &SweepReport) {
    let shown: Vec<String> = report
        .removed
        .iter()
        .take(SWEEP_LOGGED_HANDLES_MAX)
        .map(|handle| format!("{handle:#x}"))
        .collect();
    let more = report
        .removed
        .len()
        .saturating_sub(SWEEP_LOGGED_HANDLES_MAX);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    tracing::info!(
        "iod {index}: orphan sweep done: {} objects examined, {} orphans removed [{}{more}], {} kept (created during the sweep), {} foreign files left alone{}",
        report.examined,
        report.removed.len(),
        shown.join(", "),
        report.kept_created,
        report.foreign,
        if report.stopped {
            "; stopped early: too many creates during the sweep"
        } else {
            ""
        }
    );
}
