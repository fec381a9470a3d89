//! `tessera agent`: signs credentials for the processes of its host.
//!
//! The agent holds the cluster key and listens on a Unix socket that any local user may
//! connect to. For each `AgentSign` it takes the caller's uid and gid from the kernel
//! (`SO_PEERCRED` of the connection) and the supplementary groups from `/proc/PID/status`
//! (used only while that process still has the uid the kernel reported), signs a credential
//! for them with this host's name and an expiry, and answers the server challenge the caller
//! passed on. Nothing in the request names a user: a caller can only get its own credential.
//!
//! Every local user shares the agent, so no user may hold it for another: the accept loop
//! never waits, a uid holds at most [`AGENT_CONNECTIONS_PER_UID_MAX`] of the
//! [`AGENT_CONNECTIONS_MAX`] places (the table in [`table`]), a whole request must arrive
//! within [`AGENT_REQUEST_TIMEOUT`] of the accept or of the previous answer, and no connection
//! lives past [`AGENT_CONNECTION_LIFETIME`]. A connection refused or evicted is told why in
//! one error frame of request id 0 before it is closed.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tessera_proto::header::{FLAG_ERROR, FLAG_REPLY};
use tessera_proto::limits::HEADER_BYTES;
use tessera_proto::metrics::{AGENT_CREDENTIALS, ERRORS, REQUESTS, REQUEST_SECONDS};
use tessera_proto::{
    AgentSign, AgentSigned, ErrorCode, Header, Opcode, Principal, RemoteError, Request, Wire,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::handshake::{credentials_for, hello_proof, welcome_proof};
use crate::ClusterKey;

mod table;

use table::{Connections, OverShare};

/// The pause after a failed accept (out of descriptors, say) before the next one.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Most connections the agent serves at once, all users together (see [`table`] for how a
/// full table makes room: it never keeps a uid within its share out).
pub const AGENT_CONNECTIONS_MAX: usize = 256;
/// Most connections one uid holds at once; one more is answered `LimitExceeded` and closed.
/// An honest process holds one for a round trip, so even a large job's ranks starting
/// together stay well under it.
pub const AGENT_CONNECTIONS_PER_UID_MAX: usize = 128;
/// Most requests on one agent connection (a client makes one per connection it opens).
pub const AGENT_REQUESTS_PER_CONNECTION_MAX: usize = 64;
/// How long a whole request (header and body) may take to arrive, counted from the accept
/// or from the previous answer; also the bound on writing an answer.
pub const AGENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest life of one agent connection, however it spends it.
pub const AGENT_CONNECTION_LIFETIME: Duration = Duration::from_secs(10);
/// Largest request body the agent reads (an `AgentSign` is 75 bytes).
pub const AGENT_REQUEST_BODY_BYTES_MAX: u32 = 128;
/// Most lines a second the agent logs about connections it refuses past a uid's share; the
/// others are counted and the count is logged with the next line.
pub const AGENT_REFUSAL_LINES_PER_SECOND_MAX: u32 = 1;
/// Most lines a second of its other warnings (evictions, bad requests, accept errors).
pub const AGENT_WARNINGS_PER_SECOND_MAX: u32 = 4;

// Two uids at their share fit the table; one uid alone can never fill it.
const _: () = assert!(AGENT_CONNECTIONS_PER_UID_MAX * 2 <= AGENT_CONNECTIONS_MAX);
const _: () = assert!(AGENT_CONNECTIONS_PER_UID_MAX >= 1);
// A connection lives long enough for at least one request at its deadline and its answer.
const _: () =
    assert!(AGENT_REQUEST_TIMEOUT.as_millis() * 2 <= AGENT_CONNECTION_LIFETIME.as_millis());

/// The agent's settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The cluster key.
    pub key: ClusterKey,
    /// How long the credentials it signs are accepted.
    pub lifetime: Duration,
}

/// Serves `listener` until `shutdown` completes.
///
/// The loop never waits for room before `accept`: it takes every connection, learns its uid
/// from `SO_PEERCRED` at once, and either admits it to the table ([`table`]) or answers it
/// `LimitExceeded` (its uid holds [`AGENT_CONNECTIONS_PER_UID_MAX`] already) and closes it.
pub async fn serve(
    listener: UnixListener,
    config: AgentConfig,
    shutdown: impl Future<Output = ()>,
) {
    let config = Arc::new(config);
    let connections = Connections::default();
    let refusals = Warnings::new("refusals", AGENT_REFUSAL_LINES_PER_SECOND_MAX);
    let warnings = Arc::new(Warnings::new("warnings", AGENT_WARNINGS_PER_SECOND_MAX));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                warnings.warn(|| format!("accept failed: {err}"));
                tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                continue;
            }
        };
        let uid = match stream.peer_cred() {
            Ok(credentials) => credentials.uid(),
            Err(err) => {
                warnings.warn(|| format!("no peer credentials: {err}"));
                continue;
            }
        };
        let admitted = match connections.admit(uid) {
            Ok(admitted) => admitted,
            Err(OverShare { held }) => {
                let message = format!(
                    "uid {uid} holds {held} connections to this agent already (agent_connections_per_uid_max {AGENT_CONNECTIONS_PER_UID_MAX})"
                );
                refuse(&stream, ErrorCode::LimitExceeded, &message);
                refusals.warn(|| format!("refused a connection: {message}"));
                continue;
            }
        };
        if let Some(eviction) = admitted.made_room {
            warnings.warn(|| {
                format!(
                    "agent_connections_max ({AGENT_CONNECTIONS_MAX}) reached: closed the oldest connection of uid {} (of {}) for one of uid {uid}",
                    eviction.uid, eviction.held
                )
            });
        }
        let config = config.clone();
        let warnings = warnings.clone();
        tokio::spawn(async move {
            let slot = admitted.slot;
            if let Err(err) = serve_connection(stream, &config, admitted.evicted).await {
                warnings.warn(|| err);
            }
            drop(slot);
        });
    }
}

/// Tells a connection the agent closes without an answer why: one error frame of request
/// id 0 (no request of the client's), written only if the socket takes it at once, and only
/// where no answer is partly written.
fn refuse(stream: &UnixStream, code: ErrorCode, message: &str) {
    let body = RemoteError::new(code, message).to_body();
    let header = Header {
        opcode: AgentSign::OPCODE as u8,
        flags: FLAG_REPLY | FLAG_ERROR,
        request_id: 0,
        body_bytes: u32::try_from(body.len()).expect("a short message"),
        bulk_bytes: 0,
    };
    let _ = stream.try_write(&[header.encode().as_slice(), &body].concat());
}

/// A rate limit on one kind of the agent's warnings: at most `per_second_max` lines in each
/// one-second window; the others are counted, and the first line of a later window is
/// preceded by one saying how many were left out. (`tessera-net` has its own for the servers;
/// the agent sits below it in the crate chain.)
#[derive(Debug)]
struct Warnings {
    /// What the lines are, for the count of those left out.
    kind: &'static str,
    per_second_max: u32,
    window: Mutex<WarningWindow>,
}

#[derive(Debug)]
struct WarningWindow {
    started: std::time::Instant,
    logged: u32,
    suppressed: u64,
}

impl Warnings {
    fn new(kind: &'static str, per_second_max: u32) -> Self {
        Self {
            kind,
            per_second_max,
            window: Mutex::new(WarningWindow {
                started: std::time::Instant::now(),
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// Logs `message()` unless this second's lines are spent.
    fn warn(&self, message: impl FnOnce() -> String) {
        let now = std::time::Instant::now();
        let suppressed = {
            let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
            if now.saturating_duration_since(window.started) >= Duration::from_secs(1) {
                window.started = now;
                window.logged = 0;
            }
            if window.logged >= self.per_second_max {
                window.suppressed += 1;
                return;
            }
            window.logged += 1;
            std::mem::take(&mut window.suppressed)
        };
        if suppressed > 0 {
            tracing::warn!(
                "agent: {suppressed} more {} not logged (at most {} a second)",
                self.kind,
                self.per_second_max
            );
        }
        tracing::warn!("agent: {}", message());
    }
}

/// The caller of a connection, by the kernel's word.
fn caller(stream: &UnixStream) -> Result<(u32, u32, Vec<u32>, Option<i32>), String> {
    let credentials = stream
        .peer_cred()
        .map_err(|err| format!("no peer credentials: {err}"))?;
    let (uid, gid, pid) = (credentials.uid(), credentials.gid(), credentials.pid());
    let groups = pid
        .and_then(|pid| groups_of(pid, uid))
        .unwrap_or_default()
        .into_iter()
        .filter(|&group| group != gid)
        .collect();
    Ok((uid, gid, groups, pid))
}

/// The supplementary groups of process `pid`, if it still runs as effective uid `uid`.
fn groups_of(pid: i32, uid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    // "Uid: real effective saved fs"
    let effective: u32 = field("Uid:")?.split_whitespace().nth(1)?.parse().ok()?;
    if effective != uid {
        return None;
    }
    field("Groups:")?
        .split_whitespace()
        .map(|group| group.parse().ok())
        .collect()
}

/// The `kind` label of the agent's request metrics.
const KIND: &str = Opcode::AgentSign.name();

/// Reads one whole request: `None` if the client closed the connection before its first byte.
async fn read_request(stream: &mut UnixStream) -> Result<Option<(Header, Vec<u8>)>, String> {
    let mut bytes = [0u8; HEADER_BYTES];
    if stream
        .read(&mut bytes[..1])
        .await
        .map_err(|err| err.to_string())?
        == 0
    {
        return Ok(None);
    }
    stream
        .read_exact(&mut bytes[1..])
        .await
        .map_err(|err| err.to_string())?;
    let header = Header::decode(&bytes).map_err(|err| err.to_string())?;
    if header.opcode != Opcode::AgentSign as u8
        || header.body_bytes > AGENT_REQUEST_BODY_BYTES_MAX
        || header.bulk_bytes != 0
    {
        return Err(format!(
            "refused a frame of opcode {:#x} with {} body bytes (agent_request_body_bytes_max {AGENT_REQUEST_BODY_BYTES_MAX})",
            header.opcode, header.body_bytes
        ));
    }
    let mut body = vec![0u8; header.body_bytes as usize];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|err| err.to_string())?;
    Ok(Some((header, body)))
}

/// The answer frame to `request` from caller `ids`.
fn answer(config: &AgentConfig, ids: (u32, u32, &[u32]), header: &Header, body: &[u8]) -> Vec<u8> {
    let (uid, gid, groups) = ids;
    let (flags, reply) = match AgentSign::from_body(body) {
        Ok(request) => {
            let credentials = credentials_for(
                &config.key,
                Principal::User,
                (uid, gid, groups.to_vec()),
                config.lifetime,
            );
            let proof = hello_proof(&config.key, &request.binding, &credentials);
            let welcome = welcome_proof(&config.key, &request.binding, &proof);
            let signed = AgentSigned {
                credentials,
                proof,
                welcome,
            };
            metrics::counter!(AGENT_CREDENTIALS).increment(1);
            (FLAG_REPLY, signed.to_body())
        }
        Err(err) => {
            let error = RemoteError::new(ErrorCode::Protocol, err.to_string());
            metrics::counter!(ERRORS, "kind" => KIND, "code" => error.code.name()).increment(1);
            (FLAG_REPLY | FLAG_ERROR, error.to_body())
        }
    };
    let out = Header {
        opcode: AgentSign::OPCODE as u8,
        flags,
        request_id: header.request_id,
        body_bytes: u32::try_from(reply.len()).expect("a small body"),
        bulk_bytes: 0,
    };
    [out.encode().as_slice(), &reply].concat()
}

/// Serves one admitted connection until the client closes it, a request is late (a whole
/// request within [`AGENT_REQUEST_TIMEOUT`] of the accept or of the previous answer), its
/// life ([`AGENT_CONNECTION_LIFETIME`]) or its requests
/// ([`AGENT_REQUESTS_PER_CONNECTION_MAX`]) are spent, or the table evicts it (`evicted`).
/// Every wait is bounded by the earlier of the request's deadline and the end of its life.
/// A late or silent client is closed without a log line: in a flood, a line each would be
/// the attacker's to write.
async fn serve_connection(
    mut stream: UnixStream,
    config: &AgentConfig,
    mut evicted: oneshot::Receiver<()>,
) -> Result<(), String> {
    let (uid, gid, groups, pid) = caller(&stream)?;
    let who = format!("uid {uid} (pid {})", pid.unwrap_or(0));
    let ends = Instant::now() + AGENT_CONNECTION_LIFETIME;
    for _ in 0..AGENT_REQUESTS_PER_CONNECTION_MAX {
        let due = ends.min(Instant::now() + AGENT_REQUEST_TIMEOUT);
        let request = tokio::select! {
            biased;
            _ = &mut evicted => {
                // Nothing of an answer is on the socket while the agent waits for a request.
                refuse(
                    &stream,
                    ErrorCode::Busy,
                    &format!(
                        "closed to make room for a newer connection (agent_connections_max {AGENT_CONNECTIONS_MAX} reached, and uid {uid} held the most)"
                    ),
                );
                return Ok(());
            }
            read = tokio::time::timeout_at(due, read_request(&mut stream)) => read,
        };
        let (header, body) = match request {
            // Late (past its deadline or the connection's life), or closed by the client.
            Err(_) | Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(request))) => request,
            Ok(Err(err)) => return Err(format!("{who}: {err}")),
        };
        let started = std::time::Instant::now();
        let frame = answer(config, (uid, gid, &groups), &header, &body);
        let due = ends.min(Instant::now() + AGENT_REQUEST_TIMEOUT);
        tokio::select! {
            biased;
            _ = &mut evicted => return Ok(()),
            written = tokio::time::timeout_at(due, stream.write_all(&frame)) => written
                .map_err(|_| format!("{who}: answer not taken within agent_request_timeout ({} s)", AGENT_REQUEST_TIMEOUT.as_secs()))?
                .map_err(|err| format!("{who}: {err}"))?,
        }
        metrics::counter!(REQUESTS, "kind" => KIND).increment(1);
        metrics::histogram!(REQUEST_SECONDS, "kind" => KIND)
            .record(started.elapsed().as_secs_f64());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::path::PathBuf;

    use super::*;
    use crate::authenticator::{AgentClient, Authenticator};
    use crate::handshake::verify_credentials;
    use tessera_proto::{Binding, Nonce};

    /// An agent serving on a socket of its own, on a thread of its own, until dropped.
    struct TestAgent {
        socket: PathBuf,
        key: ClusterKey,
        stop: Option<oneshot::Sender<()>>,
        server: Option<std::thread::JoinHandle<()>>,
        _dir: tempfile::TempDir,
    }

    impl TestAgent {
        fn start() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("agent.sock");
            let key = ClusterKey::from_bytes([5; 32]);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let listener = runtime
                .block_on(async { UnixListener::bind(&socket) })
                .unwrap();
            let (stop, stopped) = oneshot::channel::<()>();
            let config = AgentConfig {
                key: key.clone(),
                lifetime: Duration::from_mins(1),
            };
            let server = std::thread::spawn(move || {
                runtime.block_on(serve(listener, config, async {
                    let _ = stopped.await;
                }));
            });
            Self {
                socket,
                key,
                stop: Some(stop),
                server: Some(server),
                _dir: dir,
            }
        }

        fn client(&self) -> AgentClient {
            AgentClient::new(self.socket.clone(), Duration::from_secs(5))
        }
    }

    impl Drop for TestAgent {
        fn drop(&mut self) {
            let _ = self.stop.take().unwrap().send(());
            let _ = self.server.take().unwrap().join();
        }
    }

    fn binding(key: &ClusterKey) -> Binding {
        Binding {
            role: tessera_proto::ROLE_IOD,
            server_index: 3,
            cluster_id: key.cluster_id(),
            server_nonce: Nonce([7; 32]),
            client_nonce: Nonce([8; 32]),
        }
    }

    /// An `AgentSign` request frame, as the client sends it.
    fn request_frame(key: &ClusterKey, request_id: u64) -> Vec<u8> {
        let body = AgentSign {
            binding: binding(key),
        }
        .to_body();
        let header = Header {
            opcode: AgentSign::OPCODE as u8,
            flags: 0,
            request_id,
            body_bytes: u32::try_from(body.len()).unwrap(),
            bulk_bytes: 0,
        };
        [header.encode().as_slice(), &body].concat()
    }

    #[test]
    fn the_agent_signs_for_the_caller_the_kernel_names() {
        let agent = TestAgent::start();
        let key = &agent.key;
        let client = agent.client();
        let binding = binding(key);
        let answer = client.answer(&binding).unwrap();
        let (uid, gid, _) = crate::authenticator::process_ids();
        assert_eq!((answer.credentials.uid, answer.credentials.gid), (uid, gid));
        verify_credentials(key, &answer.credentials).unwrap();
        assert_eq!(
            answer.proof,
            hello_proof(key, &binding, &answer.credentials)
        );
        assert_eq!(answer.welcome, welcome_proof(key, &binding, &answer.proof));
        assert_eq!(client.credentials().unwrap(), answer.credentials);
    }

    #[test]
    fn a_uid_past_its_share_is_refused_with_the_socket_and_the_limit_named() {
        let agent = TestAgent::start();
        // This uid's share, held by connections that send nothing.
        let held: Vec<std::os::unix::net::UnixStream> = (0..AGENT_CONNECTIONS_PER_UID_MAX)
            .map(|_| std::os::unix::net::UnixStream::connect(&agent.socket).unwrap())
            .collect();
        let refused = agent.client().answer(&binding(&agent.key)).unwrap_err();
        let message = refused.to_string();
        assert!(
            message.contains(&agent.socket.display().to_string())
                && message.contains(&format!(
                    "agent_connections_per_uid_max {AGENT_CONNECTIONS_PER_UID_MAX}"
                )),
            "{message}"
        );
        // Once they close, the share is free again (bounded: their tasks see the end of
        // stream at once).
        drop(held);
        let signed = (0..100).find_map(|_| {
            let answer = agent.client().answer(&binding(&agent.key)).ok();
            if answer.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            answer
        });
        assert!(
            signed.is_some(),
            "still refused after the share was given back"
        );
    }

    /// Sends `bytes` one at a time, `gap` apart; false if a write failed (the agent closed the
    /// connection).
    fn trickle(stream: &mut std::os::unix::net::UnixStream, bytes: &[u8], gap: Duration) -> bool {
        bytes.iter().all(|byte| {
            std::thread::sleep(gap);
            stream.write_all(std::slice::from_ref(byte)).is_ok()
        })
    }

    /// True if an answer (a whole frame) comes back on `stream`.
    fn answered(stream: &mut std::os::unix::net::UnixStream) -> bool {
        let mut bytes = [0u8; HEADER_BYTES];
        if stream.read_exact(&mut bytes).is_err() {
            return false;
        }
        let header = Header::decode(&bytes).unwrap();
        let mut body = vec![0u8; header.body_bytes as usize];
        stream.read_exact(&mut body).is_ok() && header.flags & FLAG_ERROR == 0
    }

    #[test]
    fn a_slow_request_and_a_long_connection_are_closed() {
        let agent = TestAgent::start();
        let frame = request_frame(&agent.key, 1);
        let (header, body) = frame.split_at(HEADER_BYTES);
        let connect = || {
            let stream = std::os::unix::net::UnixStream::connect(&agent.socket).unwrap();
            stream
                .set_read_timeout(Some(AGENT_CONNECTION_LIFETIME))
                .unwrap();
            stream
                .set_write_timeout(Some(AGENT_CONNECTION_LIFETIME))
                .unwrap();
            stream
        };
        // A slow sender whose header and body each take 3/5 of the request deadline: each
        // would be in time alone, the whole request is not.
        let slow = std::thread::scope(|scope| {
            let slow = scope.spawn(|| {
                let mut stream = connect();
                let part = AGENT_REQUEST_TIMEOUT * 3 / 5;
                // Stops early if the agent closes the connection first.
                let _ = trickle(&mut stream, header, part / 24)
                    && trickle(&mut stream, body, part / u32::try_from(body.len()).unwrap());
                let _ = stream.shutdown(std::net::Shutdown::Write);
                answered(&mut stream)
            });
            // A client that sends a whole request every 3/5 of the deadline, each in time,
            // but past the connection's life.
            let mut stream = connect();
            let interval = AGENT_REQUEST_TIMEOUT * 3 / 5;
            let requests_max = AGENT_CONNECTION_LIFETIME.as_millis() / interval.as_millis() + 2;
            let mut served = 0;
            for request_id in 1..=u64::try_from(requests_max).unwrap() {
                if stream
                    .write_all(&request_frame(&agent.key, request_id))
                    .is_err()
                    || !answered(&mut stream)
                {
                    break;
                }
                served += 1;
                std::thread::sleep(interval);
            }
            assert!(served >= 1, "the first request was not answered");
            assert!(
                served < requests_max,
                "{served} requests served over {:?}: the connection outlived agent_connection_lifetime",
                interval * u32::try_from(served).unwrap()
            );
            slow.join().unwrap()
        });
        assert!(
            !slow,
            "a request that took {:?} to arrive was answered",
            AGENT_REQUEST_TIMEOUT * 6 / 5
        );
    }
}
