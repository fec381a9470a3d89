//! The bounds of the layout match over tcp: each process's quarter of the matrix sent as one
//! loopback round trip per call, alone (`tcp`) and with the page-cache copy a server makes
//! (`tcp+file`), measured once per repetition ([`Bounds`]) and turned into rows beside the
//! matched view's ([`bound_rows`]).

use super::rows::{case, Part, ViewsRow};
use super::{DISTRIBUTIONS, PROCESSES};
use crate::report::{self, Direction, Measure, Spread};

/// The bounds of a matched layout over tcp, seconds per call, one per repetition.
#[derive(Debug, Default)]
pub(super) struct Bounds {
    /// The transport alone (the same both ways).
    tcp: Vec<f64>,
    /// The transport and the storage copy: `[write, read]`.
    tcp_file: [Vec<f64>; 2],
}

impl Bounds {
    /// Measures each bound once for `calls` calls of `share` bytes per process.
    pub(super) fn measure(&mut self, share: usize, calls: u64) -> Result<(), String> {
        self.tcp.push(tcp_bound(share, calls, None)?);
        for (slot, direction) in Direction::BOTH.into_iter().enumerate() {
            self.tcp_file[slot].push(tcp_bound(share, calls, Some(direction))?);
        }
        Ok(())
    }
}

/// An unlinked file of [`PROCESSES`] regions of `share` bytes, each written once so that
/// every later copy finds its pages cached (owner-only while it has a name).
fn cached_file(share: usize) -> Result<std::fs::File, String> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let failed =
        |what: String, err: std::io::Error| format!("bench views: tcp bound: {what}: {err}");
    let path =
        std::env::temp_dir().join(format!("tessera-bench-views-bound-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|err| failed(format!("create {}", path.display()), err))?;
    // Unlinked at once: the file lives while it is open, and nothing is left behind.
    std::fs::remove_file(&path).map_err(|err| failed(format!("unlink {}", path.display()), err))?;
    let filled = vec![0xA5u8; share];
    for process in 0..PROCESSES {
        file.write_all_at(&filled, (process * share) as u64)
            .map_err(|err| failed("fill".to_owned(), err))?;
    }
    Ok(file)
}

/// Seconds per call of the transport alone, the bound of a matched layout over tcp: one
/// loopback TCP stream per process, all at once, each call a round trip as a call of the
/// protocol is: the receiving thread sends a 1-byte request, the sending thread answers with
/// `share` bytes, `calls` times (no header, storage or protocol; the same for writes and
/// reads). Measured so, not as a stream of `calls` shares back to back: here the stream ran
/// at 0.70-0.80 of the round trips (four senders filling their sockets at once on 2 cores),
/// so it bounded nothing.
///
/// With `storage`, each call also makes the page-cache copy of a server that copies between
/// the socket and the page cache: a write's receiver `pwrite`s what it received to its region
/// of a cached file, a read's sender `pread`s it from there before sending. The iods make
/// that copy for writes; a cached read they send straight from the page cache, as `tcp`.
fn tcp_bound(share: usize, calls: u64, storage: Option<Direction>) -> Result<f64, String> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::FileExt;
    let failed = |what: &str, err: std::io::Error| format!("bench views: tcp bound: {what}: {err}");
    let file = storage.map(|_| cached_file(share)).transpose()?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|err| failed("bind", err))?;
    let address = listener
        .local_addr()
        .map_err(|err| failed("local address", err))?;
    let mut pairs = Vec::with_capacity(PROCESSES);
    for _ in 0..PROCESSES {
        let sender = TcpStream::connect(address).map_err(|err| failed("connect", err))?;
        let (receiver, _) = listener.accept().map_err(|err| failed("accept", err))?;
        for stream in [&sender, &receiver] {
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .and_then(|()| stream.set_nodelay(true))
                .map_err(|err| failed("socket options", err))?;
        }
        pairs.push((sender, receiver));
    }
    let start = std::sync::Barrier::new(2 * PROCESSES + 1);
    let mut started = None;
    let outcome: Result<(), String> = std::thread::scope(|scope| {
        let mut threads = Vec::with_capacity(2 * PROCESSES);
        for (process, (sender, receiver)) in pairs.iter_mut().enumerate() {
            let (start, file) = (&start, file.as_ref());
            let region = (process * share) as u64;
            threads.push(scope.spawn(move || {
                let mut data = vec![0x5Au8; share];
                start.wait();
                (0..calls).try_for_each(|_| {
                    sender.read_exact(&mut [0u8])?;
                    if let (Some(Direction::Read), Some(file)) = (storage, file) {
                        file.read_exact_at(&mut data, region)?;
                    }
                    sender.write_all(&data)
                })
            }));
            threads.push(scope.spawn(move || {
                let mut data = vec![0u8; share];
                start.wait();
                (0..calls).try_for_each(|_| {
                    receiver.write_all(&[1u8])?;
                    receiver.read_exact(&mut data)?;
                    match (storage, file) {
                        (Some(Direction::Write), Some(file)) => file.write_all_at(&data, region),
                        _ => Ok(()),
                    }
                })
            }));
        }
        start.wait();
        started = Some(std::time::Instant::now());
        threads.into_iter().try_for_each(|thread| {
            thread
                .join()
                .map_err(|_| "bench views: tcp bound: a thread panicked".to_owned())?
                .map_err(|err| failed("transfer", err))
        })
    });
    outcome?;
    let seconds = started.expect("timed").elapsed().as_secs_f64();
    Ok(seconds / calls.max(1) as f64)
}

/// The bounds of the layout match at side `n`, both directions: rows `tcp` and `tcp+file`
/// of the matched part (beside `view-stripe`, `view-pattern` and `contiguous`, already in
/// `rows`).
pub(super) fn bound_rows(
    n: u64,
    rows: &[ViewsRow],
    bounds: &Bounds,
) -> Result<Vec<ViewsRow>, String> {
    let mut out = Vec::with_capacity(4);
    for (slot, direction) in Direction::BOTH.into_iter().enumerate() {
        let key = case(Part::LayoutMatch, DISTRIBUTIONS[1].name(), n, direction);
        let found = |method: &str| {
            rows.iter()
                .find(|row| report::Row::key(*row) == (key.clone(), method))
                .ok_or_else(|| format!("bench views: {key}: no {method} row"))
        };
        let (stripe, contiguous) = (found("view-stripe")?, found("contiguous")?);
        for (method, seconds) in [("tcp", &bounds.tcp), ("tcp+file", &bounds.tcp_file[slot])] {
            let spread =
                Spread::of(seconds).map_err(|err| format!("bench views: {method} bound: {err}"))?;
            let measure = Measure::of_seconds(spread, n * n);
            out.push(ViewsRow {
                method: method.to_owned(),
                speedup: Some(measure.mib_s / stripe.measure.mib_s.max(1e-9)),
                speedup_best: Some(measure.mib_s_max / stripe.measure.mib_s_max.max(1e-9)),
                speedup_paired: None,
                measure,
                requests: 0,
                pieces: 0,
                requests_per_process: 0,
                offset_bytes: 0,
                offset_overhead_pct: 0.0,
                storage_calls_per_server: 0.0,
                servers: 0,
                file_pieces: 0,
                send_us: 0.0,
                reply_us: 0.0,
                ..contiguous.clone()
            });
        }
    }
    Ok(out)
}
