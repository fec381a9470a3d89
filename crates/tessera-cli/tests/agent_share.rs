//! The agent's per-uid share (issue 35, item 6): one user's flood of silent agent connections
//! must not keep another user out. As uid `FLOODER`, a forked child opens `FLOOD_CONNECTIONS`
//! connections to the real agent of a real cluster and sends nothing; while it holds them, uid
//! `OTHER` runs `tessera ls` and `tessera mkdir`, which must succeed within the client's own
//! timeout, and the directory made must belong to `OTHER`. The agent keeps exactly
//! `AGENT_CONNECTIONS_PER_UID_MAX` of the flood and refuses the rest with an answer naming the
//! limit, in a few log lines, not one a connection. Before the share, the flood took the
//! agent's 256 places and `OTHER`'s `ls` waited in the listen queue past its timeout.
//! This file holds one test, so no other test thread runs when it forks.

mod common;

use std::io::{Read as _, Write as _};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, TESSERA};
use tessera_auth::agent::AGENT_CONNECTIONS_PER_UID_MAX;
use tessera_proto::header::FLAG_ERROR;
use tessera_proto::limits::HEADER_BYTES;
use tessera_proto::{Header, RemoteError, Wire};

/// The user who floods the agent.
const FLOODER: u32 = 2001;
/// The user who must still be served.
const OTHER: u32 = 2002;
/// Connections the flooder opens: more than the agent's whole table (256).
const FLOOD_CONNECTIONS: usize = 400;
/// The other user's client timeout: a few seconds, under the 5 s the flood's silent
/// connections each held a place before the share.
const OTHER_TIMEOUT_MS: u64 = 3000;
/// How long the flooder waits for the agent to refuse what is past its share.
const REFUSALS_WAIT: Duration = Duration::from_secs(10);

/// What the flooder saw, sent to the parent as four u32s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Report {
    connected: u32,
    /// Answered `LimitExceeded` naming `agent_connections_per_uid_max`, then closed.
    refused: u32,
    /// Closed with anything else (or nothing) said.
    closed_otherwise: u32,
    /// Still open, unanswered.
    open: u32,
}

impl Report {
    fn to_bytes(self) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        for (chunk, value) in bytes.chunks_mut(4).zip([
            self.connected,
            self.refused,
            self.closed_otherwise,
            self.open,
        ]) {
            chunk.copy_from_slice(&value.to_le_bytes());
        }
        bytes
    }

    fn from_bytes(bytes: [u8; 16]) -> Self {
        let value = |index: usize| {
            u32::from_le_bytes(bytes[index * 4..index * 4 + 4].try_into().expect("4 bytes"))
        };
        Self {
            connected: value(0),
            refused: value(1),
            closed_otherwise: value(2),
            open: value(3),
        }
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two new descriptors into the array we own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are new and owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn exit(status: i32) -> ! {
    // SAFETY: ends the forked child without running the parent's destructors or harness.
    unsafe { libc::_exit(status) }
}

/// How one flood connection ended up, as far as can be told without blocking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Refused,
    ClosedOtherwise,
}

/// Reads what the agent sent on `stream` (non-blocking), adding it to `received`.
fn state(stream: &mut UnixStream, received: &mut Vec<u8>) -> State {
    let mut buffer = [0u8; 512];
    let ended = loop {
        match stream.read(&mut buffer) {
            Ok(0) => break true,
            Ok(count) => received.extend_from_slice(&buffer[..count]),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    if received.len() >= HEADER_BYTES {
        let header = Header::decode(received[..HEADER_BYTES].try_into().expect("a header"))
            .expect("an agent frame");
        let body = &received[HEADER_BYTES..];
        if body.len() >= header.body_bytes as usize {
            let refused = header.flags & FLAG_ERROR != 0
                && header.request_id == 0
                && RemoteError::from_body(&body[..header.body_bytes as usize])
                    .is_ok_and(|error| error.message.contains("agent_connections_per_uid_max"));
            return if refused {
                State::Refused
            } else {
                State::ClosedOtherwise
            };
        }
    }
    if ended {
        State::ClosedOtherwise
    } else {
        State::Open
    }
}

/// The flooder, as uid `FLOODER`: connects, says so on `ready`, waits for the agent to refuse
/// what is past its share (bounded by [`REFUSALS_WAIT`]), reports, and holds its connections
/// open until the parent closes `done`.
fn flood(socket: &Path, ready: OwnedFd, done: OwnedFd) -> i32 {
    if !common::become_user(FLOODER) {
        return 10;
    }
    let mut ready = std::fs::File::from(ready);
    let mut streams = Vec::with_capacity(FLOOD_CONNECTIONS);
    for _ in 0..FLOOD_CONNECTIONS {
        match UnixStream::connect(socket) {
            Ok(stream) if stream.set_nonblocking(true).is_ok() => streams.push(stream),
            _ => break,
        }
    }
    let connected = u32::try_from(streams.len()).expect("a small count");
    if ready.write_all(&connected.to_le_bytes()).is_err() {
        return 11;
    }
    let expected_refused = streams.len().saturating_sub(AGENT_CONNECTIONS_PER_UID_MAX);
    let mut received = vec![Vec::new(); streams.len()];
    let started = Instant::now();
    let report = loop {
        let mut report = Report {
            connected,
            ..Report::default()
        };
        for (stream, received) in streams.iter_mut().zip(&mut received) {
            match state(stream, received) {
                State::Open => report.open += 1,
                State::Refused => report.refused += 1,
                State::ClosedOtherwise => report.closed_otherwise += 1,
            }
        }
        if report.refused as usize >= expected_refused || started.elapsed() > REFUSALS_WAIT {
            break report;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if ready.write_all(&report.to_bytes()).is_err() {
        return 12;
    }
    // Hold everything until the parent is done with its checks (end of file on `done`).
    let mut done = std::fs::File::from(done);
    let _ = done.read(&mut [0u8; 1]);
    drop(streams);
    0
}

/// Runs `tessera ARGS --cluster FILE` as `uid` with the client timeout
/// [`OTHER_TIMEOUT_MS`]; returns (success, stderr).
fn run_as(cluster: &Cluster, uid: u32, args: &[&str]) -> (bool, String) {
    let output = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(TESSERA)
        .args(args)
        .arg("--cluster")
        .arg(cluster.file())
        .env_remove("TESSERA_CLUSTER")
        .env_remove("TESSERA_AGENT")
        .env("TESSERA_TIMEOUT_MS", OTHER_TIMEOUT_MS.to_string())
        .output()
        .expect("setpriv runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn one_users_silent_agent_connections_do_not_keep_another_user_out() {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        common::not_run::ignored_at_run_time(&format!(
            "switching users needs root, and this test runs as uid {euid}"
        ));
        return;
    }
    let cluster = Cluster::start(1);
    std::fs::set_permissions(cluster.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    cluster.client().mkdir("/shared", 0o1777).unwrap();
    let socket = cluster.path().join("run").join("agent.sock");

    let (ready_read, ready_write) = pipe();
    let (done_read, done_write) = pipe();
    // SAFETY: the child only runs `flood` and leaves with _exit; this test binary runs no
    // other test thread.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "{}", std::io::Error::last_os_error());
    if child == 0 {
        drop((ready_read, done_write));
        exit(flood(&socket, ready_write, done_read));
    }
    drop((ready_write, done_read));
    let mut ready = std::fs::File::from(ready_read);
    let mut connected = [0u8; 4];
    ready
        .read_exact(&mut connected)
        .expect("the flooder connects and says so");
    assert_eq!(u32::from_le_bytes(connected) as usize, FLOOD_CONNECTIONS);

    // While the flood holds its connections, the other user is served within its timeout.
    let (listed, stderr) = run_as(&cluster, OTHER, &["ls", "/shared"]);
    assert!(
        listed,
        "uid {OTHER}: tessera ls failed under uid {FLOODER}'s flood: {stderr}"
    );
    let (made, stderr) = run_as(&cluster, OTHER, &["mkdir", "/shared/other"]);
    assert!(
        made,
        "uid {OTHER}: tessera mkdir failed under uid {FLOODER}'s flood: {stderr}"
    );

    let mut report = [0u8; 16];
    ready.read_exact(&mut report).expect("the flooder's report");
    let report = Report::from_bytes(report);
    drop(done_write);
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(child, &raw mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the flooder failed with status {}",
        libc::WEXITSTATUS(status)
    );

    // The other user's credential named the other user.
    let attr = cluster.client().stat("/shared/other").unwrap();
    assert_eq!((attr.uid, attr.gid), (OTHER, OTHER));
    // The agent kept the flooder's share and refused the rest, saying why.
    let share = u32::try_from(AGENT_CONNECTIONS_PER_UID_MAX).unwrap();
    let flood = u32::try_from(FLOOD_CONNECTIONS).unwrap();
    assert_eq!(
        (report.refused, report.open + report.closed_otherwise),
        (flood - share, share),
        "{report:?}"
    );
    // ... in a few log lines naming the uid and the limit, not one a connection.
    let log = cluster.log("agent");
    let lines = log
        .lines()
        .filter(|line| line.contains("agent_connections_per_uid_max"))
        .count();
    assert!(
        log.contains(&format!("uid {FLOODER} holds"))
            && (1..=tessera_auth::agent::AGENT_REFUSAL_LINES_PER_SECOND_MAX as usize * 3)
                .contains(&lines),
        "{lines} refusal lines for {} refusals:\n{log}",
        report.refused
    );
}
