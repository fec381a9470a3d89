//! `tessera agent`: signs credentials for the processes of its host.
//!
//! The agent holds the cluster key and listens on a Unix socket that any local user may
//! connect to. For each `AgentSign` it takes the caller's uid and gid from the kernel
//! (`SO_PEERCRED` of the connection) and the supplementary groups from `/proc/PID/status`
//! (used only while that process still has the uid the kernel reported), signs a credential
//! for them with this host's name and an expiry, and answers the server challenge the caller
//! passed on. Nothing in the request names a user: a caller can only get its own credential.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tessera_proto::header::{FLAG_ERROR, FLAG_REPLY};
use tessera_proto::limits::HEADER_BYTES;
use tessera_proto::metrics::{AGENT_CREDENTIALS, ERRORS, REQUESTS, REQUEST_SECONDS};
use tessera_proto::{
    AgentSign, AgentSigned, ErrorCode, Header, Opcode, Principal, RemoteError, Request, Wire,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use crate::handshake::{credentials_for, hello_proof, welcome_proof};
use crate::ClusterKey;

/// Most connections the agent serves at once; more wait in the listen queue.
pub const AGENT_CONNECTIONS_MAX: usize = 256;
/// Most requests on one agent connection (a client makes one per connection it opens).
pub const AGENT_REQUESTS_PER_CONNECTION_MAX: usize = 64;
/// How long the agent waits for a request on a connection.
pub const AGENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request body the agent reads (an `AgentSign` is 75 bytes).
pub const AGENT_REQUEST_BODY_BYTES_MAX: u32 = 128;

/// The agent's settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The cluster key.
    pub key: ClusterKey,
    /// How long the credentials it signs are accepted.
    pub lifetime: Duration,
}

/// Serves `listener` until `shutdown` completes.
pub async fn serve(
    listener: UnixListener,
    config: AgentConfig,
    shutdown: impl Future<Output = ()>,
) {
    let config = Arc::new(config);
    let slots = Arc::new(Semaphore::new(AGENT_CONNECTIONS_MAX));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => return,
            permit = slots.clone().acquire_owned() => permit.expect("never closed"),
        };
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!("agent: accept failed: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let config = config.clone();
        tokio::spawn(async move {
            if let Err(err) = serve_connection(stream, &config).await {
                tracing::warn!("agent: {err}");
            }
            drop(permit);
        });
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

async fn serve_connection(mut stream: UnixStream, config: &AgentConfig) -> Result<(), String> {
    let (uid, gid, groups, pid) = caller(&stream)?;
    let who = format!("uid {uid} (pid {})", pid.unwrap_or(0));
    for _ in 0..AGENT_REQUESTS_PER_CONNECTION_MAX {
        let mut bytes = [0u8; HEADER_BYTES];
        let read = tokio::time::timeout(AGENT_REQUEST_TIMEOUT, async {
            match stream.read(&mut bytes[..1]).await? {
                0 => Ok(false),
                _ => stream.read_exact(&mut bytes[1..]).await.map(|_| true),
            }
        })
        .await;
        match read {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) | Err(_) => return Ok(()),
            Ok(Err(err)) => return Err(format!("{who}: {err}")),
        }
        let header = Header::decode(&bytes).map_err(|err| format!("{who}: {err}"))?;
        if header.opcode != Opcode::AgentSign as u8
            || header.body_bytes > AGENT_REQUEST_BODY_BYTES_MAX
            || header.bulk_bytes != 0
        {
            return Err(format!(
                "{who}: refused a frame of opcode {:#x} with {} body bytes",
                header.opcode, header.body_bytes
            ));
        }
        let started = std::time::Instant::now();
        let mut body = vec![0u8; header.body_bytes as usize];
        tokio::time::timeout(AGENT_REQUEST_TIMEOUT, stream.read_exact(&mut body))
            .await
            .map_err(|_| format!("{who}: request body timed out"))?
            .map_err(|err| format!("{who}: {err}"))?;
        let (flags, reply) = match AgentSign::from_body(&body) {
            Ok(request) => {
                let credentials = credentials_for(
                    &config.key,
                    Principal::User,
                    (uid, gid, groups.clone()),
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
        tokio::time::timeout(
            AGENT_REQUEST_TIMEOUT,
            stream.write_all(&[out.encode().as_slice(), &reply].concat()),
        )
        .await
        .map_err(|_| format!("{who}: answer timed out"))?
        .map_err(|err| format!("{who}: {err}"))?;
        metrics::counter!(REQUESTS, "kind" => KIND).increment(1);
        metrics::histogram!(REQUEST_SECONDS, "kind" => KIND)
            .record(started.elapsed().as_secs_f64());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authenticator::{AgentClient, Authenticator};
    use crate::handshake::verify_credentials;
    use tessera_proto::{Binding, Nonce};

    #[test]
    fn the_agent_signs_for_the_caller_the_kernel_names() {
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
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = AgentConfig {
            key: key.clone(),
            lifetime: Duration::from_mins(1),
        };
        let server = std::thread::spawn(move || {
            runtime.block_on(serve(listener, config, async {
                let _ = stopped.await;
            }));
        });
        let client = AgentClient::new(socket, Duration::from_secs(5));
        let binding = Binding {
            role: tessera_proto::ROLE_IOD,
            server_index: 3,
            cluster_id: key.cluster_id(),
            server_nonce: Nonce([7; 32]),
            client_nonce: Nonce([8; 32]),
        };
        let answer = client.answer(&binding).unwrap();
        let (uid, gid, _) = crate::authenticator::process_ids();
        assert_eq!((answer.credentials.uid, answer.credentials.gid), (uid, gid));
        verify_credentials(&key, &answer.credentials).unwrap();
        assert_eq!(
            answer.proof,
            hello_proof(&key, &binding, &answer.credentials)
        );
        assert_eq!(answer.welcome, welcome_proof(&key, &binding, &answer.proof));
        assert_eq!(client.credentials().unwrap(), answer.credentials);
        stop.send(()).unwrap();
        server.join().unwrap();
    }
}
