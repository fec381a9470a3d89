//! Frames on the wire, server side: a reply's header, body and bulk written in one `writev`
//! (small ones copied into one buffer first), data read straight into the caller's slices,
//! and the deadline each frame's bytes get from the slowest peer the server tolerates.

use super::{ConnectionError, ServerStream};
use std::future::Future;
use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::time::Duration;
use tessera_proto::limits::{FRAME_TIMEOUT_MS, HEADER_BYTES, PEER_BYTES_PER_S_MIN};
use tessera_proto::Header;
use tokio::io::AsyncWriteExt;

pub(super) async fn write_frame_to(
    stream: &mut ServerStream,
    opcode: u8,
    flags: u16,
    request_id: u64,
    body: &[u8],
    bulk: &[u8],
) -> Result<(), ConnectionError> {
    // Large bulk goes out with the header in one `writev`, without a copy. Written apart,
    // the header left as a segment of its own (`TCP_NODELAY`), and the reader woke for it
    // and slept again before the data: a wake-up more per reply.
    if bulk.len() > SMALL_FRAME_BYTES {
        let bulk = [IoSlice::new(bulk)];
        return write_frame_vectored(stream, opcode, flags, request_id, body, &bulk).await;
    }
    let header = Header {
        opcode,
        flags,
        request_id,
        body_bytes: u32::try_from(body.len()).expect("bodies are built under the body limit"),
        bulk_bytes: u32::try_from(bulk.len()).expect("bulk is built under the bulk limit"),
    };
    // A small frame is copied into one buffer and goes out in one write.
    let mut head = Vec::with_capacity(HEADER_BYTES + body.len() + bulk.len());
    head.extend_from_slice(&header.encode());
    head.extend_from_slice(body);
    head.extend_from_slice(bulk);
    let bytes = head.len() as u64;
    within(bytes, "a reply", stream.write_all(&head)).await
}

/// Most bulk bytes a frame copies to send them with its header in one write.
pub(super) const SMALL_FRAME_BYTES: usize = 4096;

/// Most slices one `writev` is given (the kernel's `IOV_MAX`).
pub(super) const WRITEV_SLICES_MAX: usize = 1024;

/// A frame's header and body, its bulk the bytes of `bulk`.
pub(super) fn frame_head(
    opcode: u8,
    flags: u16,
    request_id: u64,
    body: &[u8],
    bulk: &[IoSlice<'_>],
) -> Vec<u8> {
    let bulk_bytes: usize = bulk.iter().map(|slice| slice.len()).sum();
    let header = Header {
        opcode,
        flags,
        request_id,
        body_bytes: u32::try_from(body.len()).expect("bodies are built under the body limit"),
        bulk_bytes: u32::try_from(bulk_bytes).expect("bulk is built under the bulk limit"),
    };
    let mut head = Vec::with_capacity(HEADER_BYTES + body.len());
    head.extend_from_slice(&header.encode());
    head.extend_from_slice(body);
    head
}

/// [`write_frame_to`] with the bulk in slices: the header and body go in the first `writev`
/// with the first slices, at most [`WRITEV_SLICES_MAX`] slices a call.
pub(super) async fn write_frame_vectored(
    stream: &mut ServerStream,
    opcode: u8,
    flags: u16,
    request_id: u64,
    body: &[u8],
    bulk: &[IoSlice<'_>],
) -> Result<(), ConnectionError> {
    let bulk_bytes: usize = bulk.iter().map(|slice| slice.len()).sum();
    let head = frame_head(opcode, flags, request_id, body, bulk);
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(bulk.len() + 1);
    slices.push(IoSlice::new(&head));
    slices.extend(bulk.iter().filter(|slice| !slice.is_empty()).copied());
    let bytes = (head.len() + bulk_bytes) as u64;
    within(bytes, "a reply", async {
        let mut left: &mut [IoSlice<'_>] = &mut slices;
        while !left.is_empty() {
            let count = left.len().min(WRITEV_SLICES_MAX);
            let written = stream.write_vectored(&left[..count]).await?;
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut left, written);
        }
        Ok(())
    })
    .await
}

/// Most slices one `readv` is given (the kernel's `IOV_MAX`).
pub(super) const READV_SLICES_MAX: usize = 1024;

/// Refuses slices that do not hold exactly `bytes` bytes (a caller's mistake, named).
pub(super) fn check_slices(slices: &[IoSliceMut<'_>], bytes: u64) -> Result<(), ConnectionError> {
    let held: u64 = slices.iter().map(|slice| slice.len() as u64).sum();
    if held == bytes {
        return Ok(());
    }
    Err(ConnectionError::Io(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{held} bytes of memory laid out for {bytes} bytes of request data"),
    )))
}

/// Reads exactly `bytes` bytes into the front of `left`, advancing it past them: `readv`
/// over TCP and Unix sockets, at most [`READV_SLICES_MAX`] slices a call.
#[allow(clippy::mut_mut)] // `IoSliceMut::advance_slices` shortens the caller's slice reference
pub(super) async fn read_into_slices(
    stream: &mut ServerStream,
    left: &mut &mut [IoSliceMut<'_>],
    mut bytes: usize,
) -> io::Result<()> {
    IoSliceMut::advance_slices(left, 0);
    while bytes > 0 {
        let got = {
            let mut window = Vec::with_capacity(left.len().min(READV_SLICES_MAX));
            let mut room = bytes;
            for slice in left.iter_mut() {
                if room == 0 || window.len() == READV_SLICES_MAX {
                    break;
                }
                let take = slice.len().min(room);
                window.push(IoSliceMut::new(&mut slice[..take]));
                room -= take;
            }
            stream.read_vectored(&mut window).await?
        };
        if got == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        IoSliceMut::advance_slices(left, got);
        bytes -= got;
    }
    Ok(())
}

/// The body budget is counted in units of this many bytes.
pub(super) const BODY_PERMIT_BYTES: u32 = 1024;

/// The time a peer gets to move `bytes` bytes of a frame it has begun, or of a reply.
pub(super) fn frame_deadline(bytes: u64) -> Duration {
    Duration::from_millis(FRAME_TIMEOUT_MS)
        + Duration::from_millis(bytes.saturating_mul(1000) / PEER_BYTES_PER_S_MIN)
}

/// Runs `io`, a transfer of `bytes` bytes with a peer, within [`frame_deadline`].
pub(super) async fn within<T>(
    bytes: u64,
    what: &str,
    io: impl Future<Output = io::Result<T>>,
) -> Result<T, ConnectionError> {
    let deadline = frame_deadline(bytes);
    match tokio::time::timeout(deadline, io).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(ConnectionError::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{what} of {bytes} bytes took over {deadline:?} (frame_timeout_ms plus bytes at peer_bytes_per_s_min)"
            ),
        ))),
    }
}
