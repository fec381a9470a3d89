//! Accepting connections and running them: the connection table and its slots, the handshake,
//! the same-host path's mover for each local connection, one task per connection reading
//! requests and handing them to the [`Service`], and the rate limit on what connections log.

use super::frame::{write_frame_to, BODY_PERMIT_BYTES};
use super::{ConnectionError, ServerConnection, ServerStream, Service};
use crate::local::mover::{Mover, PeerProcess};
use crate::local::region::{RegionTable, SharedBytes};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_auth::{CapabilityCache, ServerAuth, HANDSHAKE_TIMEOUT};
use tessera_proto::header::{FLAG_ERROR, FLAG_REPLY};
use tessera_proto::limits::{
    CONNECTIONS_MAX, HEADER_BYTES, SERVER_BODY_BYTES_MAX, SERVER_REQUESTS_INFLIGHT_MAX,
};
use tessera_proto::metrics::{CONNECTIONS_DROPPED, REQUESTS, REQUEST_SECONDS};
use tessera_proto::{Credentials, ErrorCode, Header, Hello, Opcode, RemoteError, Request, Wire};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::sync::{Notify, Semaphore};

/// A connection's place in the server's table.
#[derive(Debug, Default)]
pub(super) struct Slot {
    /// Since when the connection has waited for a request (`None`: busy with one).
    pub(super) idle_since: std::sync::Mutex<Option<Instant>>,
    /// Told when the server closes the connection for a new one.
    pub(super) close: Notify,
}

impl Slot {
    pub(super) fn set_idle(&self, idle: bool) {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = idle.then(Instant::now);
    }

    pub(super) fn idle_since(&self) -> Option<Instant> {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Every open connection of a server (at most `CONNECTIONS_MAX`).
#[derive(Debug, Default)]
pub(super) struct Slots {
    pub(super) table: std::sync::Mutex<HashMap<u64, Arc<Slot>>>,
    pub(super) next: std::sync::atomic::AtomicU64,
}

/// What admitting a connection did.
pub(super) enum Admission {
    /// A free place.
    Free(u64, Arc<Slot>),
    /// The longest idle connection (idle for the duration) was closed for it.
    Evicted(u64, Arc<Slot>, Duration),
    /// Every connection is busy with a request.
    Full,
}

impl Slots {
    /// A place for a new connection, idle (in its handshake) from now on.
    pub(super) fn admit(&self) -> Admission {
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slot = Arc::new(Slot::default());
        slot.set_idle(true);
        if table.len() < CONNECTIONS_MAX {
            table.insert(id, slot.clone());
            return Admission::Free(id, slot);
        }
        let oldest = table
            .iter()
            .filter_map(|(&id, slot)| slot.idle_since().map(|since| (since, id)))
            .min();
        let Some((since, victim)) = oldest else {
            return Admission::Full;
        };
        if let Some(evicted) = table.remove(&victim) {
            evicted.close.notify_one();
        }
        table.insert(id, slot.clone());
        Admission::Evicted(id, slot, since.elapsed())
    }

    pub(super) fn release(&self, id: u64) {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
    }
}

/// Serves `service` on `listener` until `shutdown` completes; every connection must pass the
/// handshake of `auth` first.
pub async fn serve<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    auth: Arc<ServerAuth>,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_local(listener, None, service, auth, shutdown).await;
}

/// Largest `Hello` body a server reads (a credential with every group and a long host name).
pub(super) const HELLO_BODY_BYTES_MAX: u32 = 1024;

/// Runs the server's side of the handshake on a new connection: sends the challenge, checks
/// the `Hello` and answers with the welcome, all within `HANDSHAKE_TIMEOUT`. Returns the
/// credential the connection speaks for. A refusal is answered (when the peer sent a
/// `Hello` to answer) and returned as [`ConnectionError::Auth`].
pub(super) async fn handshake(
    stream: &mut ServerStream,
    auth: &ServerAuth,
) -> Result<Credentials, ConnectionError> {
    let exchange = async {
        let challenge = auth
            .challenge()
            .map_err(|err| ConnectionError::Auth(err.to_string()))?;
        let challenge_body = challenge.to_body();
        write_frame_to(
            stream,
            Hello::OPCODE as u8,
            FLAG_REPLY,
            0,
            &challenge_body,
            &[],
        )
        .await?;
        let mut bytes = [0u8; HEADER_BYTES];
        stream.read_exact(&mut bytes).await?;
        let header = Header::decode(&bytes)?;
        if header.opcode != Hello::OPCODE as u8
            || header.is_reply()
            || header.bulk_bytes != 0
            || header.body_bytes > HELLO_BODY_BYTES_MAX
        {
            return Err(ConnectionError::Auth(format!(
                "expected a Hello, got opcode {:#04x} with {} body bytes",
                header.opcode, header.body_bytes
            )));
        }
        let mut body = vec![0u8; header.body_bytes as usize];
        stream.read_exact(&mut body).await?;
        let accepted = Hello::from_body(&body)
            .map_err(|err| err.to_string())
            .and_then(|hello| {
                auth.accept(&challenge, &hello)
                    .map(|welcome| (hello.credentials, welcome))
                    .map_err(|err| err.to_string())
            });
        match accepted {
            Ok((credentials, welcome)) => {
                let body = welcome.to_body();
                write_frame_to(
                    stream,
                    Hello::OPCODE as u8,
                    FLAG_REPLY,
                    header.request_id,
                    &body,
                    &[],
                )
                .await?;
                Ok(credentials)
            }
            Err(reason) => {
                let error = RemoteError::new(
                    ErrorCode::PermissionDenied,
                    format!("authentication failed: {reason}"),
                );
                let flags = FLAG_REPLY | FLAG_ERROR;
                let body = error.to_body();
                // Best effort: the peer learns why before the connection closes.
                let _ = write_frame_to(
                    stream,
                    Hello::OPCODE as u8,
                    flags,
                    header.request_id,
                    &body,
                    &[],
                )
                .await;
                Err(ConnectionError::Auth(reason))
            }
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(ConnectionError::Auth(format!(
                "no handshake within {HANDSHAKE_TIMEOUT:?}"
            )))
        })
}

/// Accepts on `listener`, or waits forever without one.
pub(super) async fn accept_local(
    listener: Option<&UnixListener>,
) -> io::Result<(ServerStream, String, MoverSlot)> {
    let Some(listener) = listener else {
        return std::future::pending().await;
    };
    let (stream, _) = listener.accept().await?;
    let process = PeerProcess::of_socket(std::os::fd::AsFd::as_fd(&stream)).ok();
    let peer = match &process {
        Some(process) => format!("local pid {} (uid {})", process.pid, process.uid),
        None => "local peer".to_owned(),
    };
    let slot = process.map_or(MoverSlot::Absent, MoverSlot::Unstarted);
    Ok((ServerStream::Unix(stream), peer, slot))
}

/// A connection's mover, started at its first one-sided copy.
#[derive(Debug)]
pub(super) enum MoverSlot {
    /// Not a same-host peer (TCP), or one the kernel does not show.
    Absent,
    /// The peer, waiting for its first one-sided copy.
    Unstarted(PeerProcess),
    /// Running.
    Started(Arc<Mover>),
    /// Refused or retired: every later one-sided copy is refused the same way.
    Refused(RemoteError),
}

impl MoverSlot {
    pub(super) fn pid(&self) -> Option<u32> {
        match self {
            Self::Unstarted(process) => Some(process.pid),
            Self::Started(mover) => Some(mover.pid()),
            Self::Absent | Self::Refused(_) => None,
        }
    }

    /// The peer's uid as the kernel reported it at accept (`SO_PEERCRED`); `None` once the
    /// slot holds no peer (TCP, or a peer the kernel does not show).
    pub(super) fn uid(&self) -> Option<u32> {
        match self {
            Self::Unstarted(process) => Some(process.uid),
            Self::Started(mover) => Some(mover.uid()),
            Self::Absent | Self::Refused(_) => None,
        }
    }
}

/// A slot for a new connection from `peer`: a free one, or the one idle longest; `None` when
/// every connection is busy (counted and logged, rate-limited).
fn admit(
    slots: &Slots,
    server: &str,
    peer: &str,
    warnings: &WarningLimiter,
) -> Option<(u64, Arc<Slot>)> {
    match slots.admit() {
        Admission::Free(id, slot) => Some((id, slot)),
        Admission::Evicted(id, slot, idle) => {
            tracing::debug!(
                "{server}: closed the connection idle longest ({idle:?}) for {peer}: connections_max ({CONNECTIONS_MAX}) reached"
            );
            Some((id, slot))
        }
        Admission::Full => {
            metrics::counter!(CONNECTIONS_DROPPED, "reason" => "full").increment(1);
            warnings.warn(server, || {
                format!(
                    "refusing {peer}: connections_max ({CONNECTIONS_MAX}) reached, every connection busy"
                )
            });
            None
        }
    }
}

/// The next connection on the TCP `listener` or the Unix socket `local`; `None` after a failed
/// accept (logged, rate-limited, and followed by a short pause).
async fn accept_next<S: Service>(
    listener: &TcpListener,
    local: Option<&UnixListener>,
    service: &S,
    warnings: &WarningLimiter,
) -> Option<(ServerStream, String, MoverSlot)> {
    let accepted = tokio::select! {
        accepted = listener.accept() => accepted.map(|(stream, peer)| {
            if let Err(err) = stream.set_nodelay(true) {
                warnings.warn(&service.name(), || format!("{peer}: cannot set TCP_NODELAY: {err}"));
            }
            (ServerStream::Tcp(stream), peer.to_string(), MoverSlot::Absent)
        }),
        accepted = accept_local(local) => accepted,
    };
    match accepted {
        Ok(accepted) => Some(accepted),
        Err(err) => {
            warnings.warn(&service.name(), || format!("accept failed: {err}"));
            tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
            None
        }
    }
}

/// The pause after a failed accept (out of descriptors, say) before the next one.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Serves `service` on the TCP `listener` and, when given, on the Unix socket `local` (for
/// clients on this host: the `local` backend) until `shutdown` completes. Both share the
/// connection and in-flight limits.
pub async fn serve_with_local<S: Service>(
    listener: TcpListener,
    local: Option<UnixListener>,
    service: Arc<S>,
    auth: Arc<ServerAuth>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Slots::default());
    let inflight = Arc::new(Semaphore::new(SERVER_REQUESTS_INFLIGHT_MAX));
    let bodies = Arc::new(Semaphore::new(
        usize::try_from(SERVER_BODY_BYTES_MAX / u64::from(BODY_PERMIT_BYTES))
            .expect("the body budget fits usize"),
    ));
    let warnings = Arc::new(WarningLimiter::new());
    let shared_bytes = Arc::new(SharedBytes::default());
    // Dropped when this function returns: the connections on threads of their own end then.
    let (stop, _) = tokio::sync::watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = accept_next(&listener, local.as_ref(), &*service, &warnings) => accepted,
        };
        let Some((stream, peer, mover)) = accepted else {
            continue;
        };
        let Some((id, slot)) = admit(&slots, &service.name(), &peer, &warnings) else {
            drop(stream);
            continue;
        };
        let slots = slots.clone();
        let bodies = bodies.clone();
        let service = service.clone();
        let inflight = inflight.clone();
        let auth = auth.clone();
        let refusals = warnings.clone();
        let warnings = warnings.clone();
        let service_name = service.name();
        let shared = RegionTable::new(shared_bytes.clone(), mover.uid());
        let own_thread = matches!(stream, ServerStream::Unix(_)) && mover.pid().is_some();
        let unserved = {
            let slots = slots.clone();
            move || slots.release(id)
        };
        let serve_connection = move |mut stream: ServerStream| async move {
            let handshake = tokio::select! {
                () = slot.close.notified() => {
                    slots.release(id);
                    return;
                }
                handshake = handshake(&mut stream, &auth) => handshake,
            };
            let credentials = match handshake {
                Ok(credentials) => credentials,
                Err(err) => {
                    metrics::counter!(CONNECTIONS_DROPPED, "reason" => "handshake").increment(1);
                    warnings.warn(&service.name(), || {
                        format!("refusing {peer}: authentication failed: {err}")
                    });
                    slots.release(id);
                    return;
                }
            };
            let mut connection = ServerConnection {
                stream,
                peer: peer.clone(),
                peer_pid: mover.pid(),
                mover,
                auth,
                credentials,
                last_credentials: None,
                capabilities: CapabilityCache::default(),
                shared,
                slot,
                work: None,
                inflight: inflight.clone(),
                prefetched: None,
                bodies,
                body_budget: None,
                peer_calls: 0,
                client_id: None,
            };
            if let Err(err) = run_connection(&*service, &mut connection, &inflight).await {
                metrics::counter!(CONNECTIONS_DROPPED, "reason" => "error").increment(1);
                warnings.warn(&service.name(), || {
                    format!("dropping connection from {peer}: {err}")
                });
            }
            slots.release(id);
        };
        match stream {
            // A same-host client that may lend its memory: served on a thread of its own,
            // where a one-sided copy runs in line (it may wait on the client's memory, which
            // then holds up this connection alone).
            ServerStream::Unix(unix) if own_thread => {
                let subscribed = stop.subscribe();
                if let Err(err) =
                    on_own_thread(unix, serve_connection, subscribed, unserved.clone())
                {
                    unserved();
                    refusals.warn(&service_name, || {
                        format!("refusing a local connection: no thread for it: {err}")
                    });
                }
            }
            stream => {
                tokio::spawn(serve_connection(stream));
            }
        }
    }
}

/// Blocking threads of the runtime of a connection served on a thread of its own.
pub(super) const CONNECTION_BLOCKING_THREADS_MAX: usize = 1;

thread_local! {
    /// This thread serves one connection, on a runtime of its own ([`on_own_thread`]).
    static OWN_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread serves one connection alone: a blocking call made in line there
/// holds up that connection and nothing else.
pub fn serving_on_own_thread() -> bool {
    OWN_THREAD.get()
}

/// Serves a same-host connection on a thread of its own, with a runtime of its own, until
/// `serve` ends or `stop` is dropped. A connection the thread cannot serve (no runtime) is
/// dropped and `unserved` runs; an error (no thread) leaves that to the caller.
pub(super) fn on_own_thread<F, Fut>(
    unix: UnixStream,
    serve: F,
    mut stop: tokio::sync::watch::Receiver<()>,
    unserved: impl FnOnce() + Send + 'static,
) -> io::Result<()>
where
    F: FnOnce(ServerStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let socket = unix.into_std()?;
    std::thread::Builder::new()
        .name("tessera-local".to_owned())
        .spawn(move || {
            OWN_THREAD.set(true);
            // Storage calls and copies run in line here; what still goes to a blocking
            // thread (share walks, the last participant of a collective) has one.
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .max_blocking_threads(CONNECTION_BLOCKING_THREADS_MAX)
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    tracing::warn!("a local connection's thread has no runtime: {err}");
                    unserved();
                    return;
                }
            };
            runtime.block_on(async move {
                let stream = match UnixStream::from_std(socket) {
                    Ok(stream) => stream,
                    Err(err) => {
                        tracing::warn!("a local connection's socket: {err}");
                        unserved();
                        return;
                    }
                };
                tokio::select! {
                    () = serve(ServerStream::Unix(stream)) => {}
                    _ = stop.changed() => {}
                }
            });
        })
        .map(drop)
}

/// The `kind` label of a request's metrics: its opcode's name.
pub(super) fn request_kind(opcode: u8) -> &'static str {
    Opcode::from_u8(opcode).map_or("unknown", Opcode::name)
}

pub(super) async fn run_connection<S: Service>(
    service: &S,
    connection: &mut ServerConnection,
    inflight: &Arc<Semaphore>,
) -> Result<(), ConnectionError> {
    loop {
        let Some(request) = connection.read_incoming().await? else {
            return Ok(());
        };
        let header = request.header;
        let (kind, started) = (request.opcode.name(), Instant::now());
        // A small bulk comes in before the request takes a work slot; the slot goes back when
        // the reply goes out (`ServerConnection::write_frame`).
        connection.prefetch_bulk(&header).await?;
        connection.work = Some(
            inflight
                .clone()
                .acquire_owned()
                .await
                .expect("the in-flight semaphore is never closed"),
        );
        let handled = service.handle(request, connection).await;
        metrics::counter!(REQUESTS, "kind" => kind).increment(1);
        metrics::histogram!(REQUEST_SECONDS, "kind" => kind)
            .record(started.elapsed().as_secs_f64());
        connection.work = None;
        connection.prefetched = None;
        connection.body_budget = None;
        match handled {
            Ok(()) => {}
            Err(ConnectionError::Refused(error)) => {
                // Best effort: the peer learns why before the connection closes.
                let _ = connection.reply_error(&header, &error).await;
                return Err(ConnectionError::Refused(error));
            }
            Err(err) => return Err(err),
        }
    }
}

/// Most warning lines one server logs in a second about connections it refuses or drops
/// (accept errors, a full connection table, failed handshakes, malformed frames). A flood of
/// bad connections then costs a few lines a second, not one line each.
pub const CONNECTION_WARNINGS_PER_SECOND_MAX: u32 = 10;

/// The rate limit on one server's connection warnings: at most
/// [`CONNECTION_WARNINGS_PER_SECOND_MAX`] lines in each one-second window; the others are
/// counted, and the first warning of a later window is preceded by one line saying how many
/// were suppressed.
#[derive(Debug)]
pub(super) struct WarningLimiter {
    pub(super) window: std::sync::Mutex<WarningWindow>,
}

#[derive(Debug)]
pub(super) struct WarningWindow {
    pub(super) started: std::time::Instant,
    pub(super) logged: u32,
    pub(super) suppressed: u64,
}

/// What [`WarningLimiter::admit`] decided for one warning.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Admitted {
    /// Log the warning.
    pub(super) log: bool,
    /// Warnings suppressed in earlier windows, to report before this one (0: none).
    pub(super) suppressed_before: u64,
}

impl WarningLimiter {
    pub(super) fn new() -> Self {
        Self {
            window: std::sync::Mutex::new(WarningWindow {
                started: std::time::Instant::now(),
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// Decides for a warning raised at `now`.
    pub(super) fn admit(&self, now: std::time::Instant) -> Admitted {
        let mut window = self
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if now.saturating_duration_since(window.started) >= std::time::Duration::from_secs(1) {
            window.started = now;
            window.logged = 0;
        }
        if window.logged >= CONNECTION_WARNINGS_PER_SECOND_MAX {
            window.suppressed += 1;
            return Admitted {
                log: false,
                suppressed_before: 0,
            };
        }
        window.logged += 1;
        Admitted {
            log: true,
            suppressed_before: std::mem::take(&mut window.suppressed),
        }
    }

    /// Logs `message()` as a warning of `server` unless this second's lines are spent.
    pub(super) fn warn(&self, server: &str, message: impl FnOnce() -> String) {
        let admitted = self.admit(std::time::Instant::now());
        if admitted.suppressed_before > 0 {
            tracing::warn!(
                "{server}: {} connection warnings suppressed (at most {CONNECTION_WARNINGS_PER_SECOND_MAX} a second)",
                admitted.suppressed_before
            );
        }
        if admitted.log {
            tracing::warn!("{server}: {}", message());
        }
    }
}

#[cfg(test)]
mod warning_tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn connection_warnings_are_rate_limited_and_counted() {
        let limiter = WarningLimiter::new();
        let start = Instant::now();
        let logged = (0..1000).filter(|_| limiter.admit(start).log).count();
        assert_eq!(logged, CONNECTION_WARNINGS_PER_SECOND_MAX as usize);
        // Still the same window: nothing more, and no report yet.
        let later = start + Duration::from_millis(900);
        assert_eq!(
            limiter.admit(later),
            Admitted {
                log: false,
                suppressed_before: 0
            }
        );
        // The next window logs again, first reporting the 991 suppressed.
        let next = start + Duration::from_millis(1500);
        assert_eq!(
            limiter.admit(next),
            Admitted {
                log: true,
                suppressed_before: 1000 - 10 + 1
            }
        );
        assert_eq!(
            limiter.admit(next),
            Admitted {
                log: true,
                suppressed_before: 0
            }
        );
    }
}
