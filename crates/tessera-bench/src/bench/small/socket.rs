//! The bare socket floor of `bench small`: round trips between two threads of this process
//! over loopback TCP or a Unix socket pair, `size` bytes one way and 8 bytes back.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::worker::{Outcome, Transport};

/// The longest one round trip may take before the floor is called broken.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// `count` round trips of `size` bytes over `transport`.
pub fn round_trips(transport: Transport, size: usize, count: usize) -> Result<Outcome, String> {
    match transport {
        Transport::Tcp => {
            let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
            let address = listener.local_addr().map_err(|e| e.to_string())?;
            let client = TcpStream::connect(address).map_err(|e| format!("connect: {e}"))?;
            let (server, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
            for stream in [&client, &server] {
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                stream
                    .set_read_timeout(Some(ROUND_TRIP_TIMEOUT))
                    .map_err(|e| e.to_string())?;
            }
            measure(client, server, size, count)
        }
        Transport::Local => {
            let (client, server) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
            for stream in [&client, &server] {
                stream
                    .set_read_timeout(Some(ROUND_TRIP_TIMEOUT))
                    .map_err(|e| e.to_string())?;
            }
            measure(client, server, size, count)
        }
    }
}

fn measure<S: Read + Write + Send + 'static>(
    mut client: S,
    mut server: S,
    size: usize,
    count: usize,
) -> Result<Outcome, String> {
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut request = vec![0u8; size];
        for _ in 0..count {
            server.read_exact(&mut request)?;
            server.write_all(&(size as u64).to_le_bytes())?;
        }
        Ok(())
    });
    let payload = vec![0x5Au8; size];
    let mut answer = [0u8; 8];
    let mut latencies = Vec::with_capacity(count);
    let started = Instant::now();
    let mut failure = None;
    for _ in 0..count {
        let at = Instant::now();
        if let Err(err) = client
            .write_all(&payload)
            .and_then(|()| client.read_exact(&mut answer))
        {
            failure = Some(err);
            break;
        }
        latencies.push(at.elapsed().as_secs_f32() * 1e6);
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(client);
    let echoed = echo
        .join()
        .map_err(|_| "the echo thread panicked".to_owned())?;
    if let Some(err) = failure {
        return Err(format!("socket round trip: {err}"));
    }
    echoed.map_err(|err| format!("socket echo: {err}"))?;
    let verified = u64::from_le_bytes(answer) == size as u64;
    Ok(Outcome {
        seconds,
        ops: count as u64,
        bytes: (count * size) as u64,
        latencies_us: latencies,
        verified,
        problem: if verified {
            String::new()
        } else {
            "the echo answered a wrong size".to_owned()
        },
    })
}
