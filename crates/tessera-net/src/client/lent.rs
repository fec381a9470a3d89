//! Data moved one-sidedly: memory the client lends the server for the outstanding request —
//! through the connection's eager buffer, a shared memfd region, its process memory (packed
//! first when the transfer packs) or the fabric — described in the request's bulk, kept alive
//! and registered until the reply, and sent once more when the server no longer knows a
//! shared region.

use super::{segment_of, Connection, TransferCounts};
use crate::error::NetError;
use crate::iov::write_all_vectored;
use crate::stream::ByteStream;
use std::io;
use std::io::IoSlice;
use std::os::fd::{AsFd, OwnedFd};
use tessera_proto::limits::{REMOTE_SEGMENTS_MAX, SHARED_REGIONS_PER_CONNECTION_MAX};
use tessera_proto::{
    Empty, ErrorCode, Header, IoReply, Opcode, RemoteAccess, RemoteMemory, RemoteSegment,
    ShareRegion, Wire,
};

/// Memory lent to the server for the outstanding request. Fields drop in order: the
/// registrations go before the pack buffer they cover is freed.
pub(super) struct Lent {
    /// The data is in (a read: will be in) the connection's eager buffer.
    pub(super) eager: bool,
    /// Keeps the segments registered.
    pub(super) _registration: Option<Box<dyn Send>>,
    /// Keeps the segments registered with the fabric (a pack buffer's transiently).
    pub(super) _lending: Option<Box<dyn Send>>,
    /// The pack buffer, when the transfer packs.
    pub(super) packed: Option<Vec<u8>>,
    /// A request naming a shared region, kept to send once more should the server answer
    /// `UnknownRegion`.
    pub(super) resend: Option<SharedRequest>,
}

/// A sent request whose data lies in a shared region (`RemoteAccess::Shared`).
pub(super) struct SharedRequest {
    pub(super) opcode: Opcode,
    pub(super) body: Vec<u8>,
    pub(super) descriptor: Vec<u8>,
    pub(super) key: u64,
}

impl<S: ByteStream> Connection<S> {
    /// Sends a request whose data goes through the connection's eager buffer: copied into it
    /// now (`fill`, a write) or out of it at the reply (a read). Without an eager buffer (a
    /// fabric, memfd unavailable, or the server refused it), or for more data than it holds,
    /// the data is packed and moved one-sidedly instead.
    pub(super) fn send_eager(
        &mut self,
        opcode: Opcode,
        body: Vec<u8>,
        slices: &[(*const u8, usize)],
        fill: bool,
    ) -> Result<TransferCounts, NetError> {
        let total: usize = slices.iter().map(|&(_, len)| len).sum();
        let usable = self.fabric.is_none() && self.one_sided;
        let key = match &self.eager {
            Some(eager) if usable && total <= eager.len() => eager.key(),
            _ => return self.send_remote(opcode, body, slices, true, 0),
        };
        if !self.ensure_shared(key)? {
            return self.send_remote(opcode, body, slices, true, 0);
        }
        let eager = self.eager.as_mut().expect("checked above");
        let copied = if fill {
            // SAFETY: `slices` were made by `send_data` / `send_read` from the caller's live
            // slices, borrowed for this call.
            unsafe { eager.fill(slices) }
        } else {
            0
        };
        let mut counts = self.send_shared(opcode, body, key, &[(0, total as u64)], 0)?;
        counts.bytes_copied = copied as u64;
        Ok(counts)
    }

    /// Makes sure the server maps the region `key` (the eager buffer or a live arena) for
    /// this connection: shares it (`ShareRegion` with its memfd) unless this connection's
    /// table says it is mapped, and marks it most recently used, as the server does. `false`
    /// when it cannot be shared (the server refused it, or the arena is gone): the caller
    /// moves the data another way. An error is the connection's own.
    pub(super) fn ensure_shared(&mut self, key: u64) -> Result<bool, NetError> {
        if let Some(at) = self.shared_keys.iter().position(|&shared| shared == key) {
            let key = self.shared_keys.remove(at);
            self.shared_keys.push(key);
            return Ok(true);
        }
        if self.sharing_refused {
            return Ok(false);
        }
        let found: Option<io::Result<(OwnedFd, u64)>> = match &self.eager {
            Some(eager) if eager.key() == key => Some(
                eager
                    .descriptor()
                    .try_clone_to_owned()
                    .map(|fd| (fd, eager.len() as u64)),
            ),
            _ => crate::local::arena::descriptor(key),
        };
        let Some(found) = found else {
            return Ok(false);
        };
        let (descriptor, bytes) = found.map_err(|err| self.io_error(err))?;
        match self.share_region(key, bytes, &descriptor) {
            Ok(()) => {
                if self.shared_keys.len() >= SHARED_REGIONS_PER_CONNECTION_MAX {
                    self.shared_keys.remove(0);
                }
                self.shared_keys.push(key);
                Ok(true)
            }
            Err(NetError::Remote { error, .. }) => {
                tracing::warn!(
                    "{}: the server refused shared memory ({}: {}); eager requests pack and \
                     arena pieces go by address on this connection",
                    self.peer,
                    error.code,
                    error.message
                );
                self.sharing_refused = true;
                Ok(false)
            }
            Err(other) => Err(other),
        }
    }

    /// One `ShareRegion` round trip: the frame goes in one `sendmsg` with `descriptor`
    /// attached.
    pub(super) fn share_region(
        &mut self,
        key: u64,
        bytes: u64,
        descriptor: &OwnedFd,
    ) -> Result<(), NetError> {
        assert!(
            self.outstanding.is_none(),
            "one request in flight per connection"
        );
        let Some(socket) = self.stream.descriptor_socket() else {
            return Err(self.protocol("shared memory needs a same-host Unix socket".to_owned()));
        };
        let body = ShareRegion { key, bytes }.to_body();
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let mut frame = Header {
            opcode: Opcode::ShareRegion as u8,
            flags: 0,
            request_id,
            body_bytes: u32::try_from(body.len()).expect("16 bytes"),
            bulk_bytes: 0,
        }
        .encode()
        .to_vec();
        frame.extend_from_slice(&body);
        let sent = crate::local::scm::send_with_descriptors(socket, &frame, &[descriptor.as_fd()])
            .map_err(|err| self.io_error(err))?;
        // The descriptor went with the first byte; any rest of the frame follows plainly.
        write_all_vectored(&mut self.stream, &mut [IoSlice::new(&frame[sent..])])
            .map_err(|err| self.io_error(err))?;
        self.outstanding = Some((request_id, Opcode::ShareRegion));
        let (Empty {}, _) = self.recv_reply::<Empty>(None)?;
        Ok(())
    }

    /// Sends a request whose data the server moves one-sidedly from or into `slices`
    /// (packed into one buffer first with `pack`), with the descriptor as the frame's bulk.
    pub(super) fn send_remote(
        &mut self,
        opcode: Opcode,
        body: Vec<u8>,
        slices: &[(*const u8, usize)],
        pack: bool,
        segments_per_call: u16,
    ) -> Result<TransferCounts, NetError> {
        if !self.one_sided() {
            return Err(self.protocol(
                "a one-sided transfer was asked of a connection without one-sided access"
                    .to_owned(),
            ));
        }
        let mut counts = TransferCounts {
            messages_sent: 1,
            one_sided: 1,
            ..TransferCounts::default()
        };
        // More slices than a descriptor may hold: pack them (one segment) instead.
        let pack = pack || slices.len() > REMOTE_SEGMENTS_MAX;
        if !pack && self.fabric.is_none() {
            if let Some((key, offsets)) = crate::local::arena::locate(slices) {
                if self.ensure_shared(key)? {
                    return self.send_shared(opcode, body, key, &offsets, segments_per_call);
                }
            }
        }
        let packed = pack.then(|| {
            let total = slices.iter().map(|&(_, len)| len).sum();
            let mut packed = Vec::with_capacity(total);
            for &(pointer, len) in slices {
                // SAFETY: every slice was made from a live `&[u8]`/`&mut [u8]` the caller
                // lends for this call.
                packed.extend_from_slice(unsafe { std::slice::from_raw_parts(pointer, len) });
            }
            packed
        });
        let segments: Vec<(usize, usize)> = match &packed {
            Some(packed) => vec![(packed.as_ptr() as usize, packed.len())],
            None => slices
                .iter()
                .filter(|&&(_, len)| len > 0)
                .map(|&(pointer, len)| (pointer as usize, len))
                .collect(),
        };
        if let Some(packed) = &packed {
            counts.bytes_copied = packed.len() as u64;
        }
        let registration = match &self.registration {
            Some(registration) => {
                Some(
                    registration
                        .acquire(&segments)
                        .map_err(|detail| NetError::Register {
                            peer: self.peer.clone(),
                            detail,
                        })?,
                )
            }
            None => None,
        };
        let (memory, lending) = self.describe(&segments, segments_per_call, packed.is_some())?;
        let descriptor = memory.to_body();
        let bulk_bytes = self.bulk_len(descriptor.len() as u64)?;
        self.send_frame(opcode, &body, &mut [IoSlice::new(&descriptor)], bulk_bytes)?;
        // Set for every one-sided request: marks the memory as lent until the reply.
        self.lent = Some(Lent {
            eager: false,
            _registration: registration,
            _lending: lending,
            packed,
            resend: None,
        });
        Ok(counts)
    }

    /// Sends a request whose pieces all lie in the shared region `key` (the eager buffer or
    /// an arena), named by their offsets in it (`RemoteAccess::Shared`): the server maps the
    /// region and copies from or into it directly.
    pub(super) fn send_shared(
        &mut self,
        opcode: Opcode,
        body: Vec<u8>,
        key: u64,
        offsets: &[(u64, u64)],
        segments_per_call: u16,
    ) -> Result<TransferCounts, NetError> {
        let memory = RemoteMemory {
            access: RemoteAccess::Shared,
            endpoint: tessera_proto::RemoteEndpoint::default(),
            segments_per_call,
            segments: offsets
                .iter()
                .map(|&(address, length)| RemoteSegment {
                    address,
                    length,
                    key,
                })
                .collect(),
        };
        let descriptor = memory.to_body();
        let bulk_bytes = self.bulk_len(descriptor.len() as u64)?;
        self.send_frame(opcode, &body, &mut [IoSlice::new(&descriptor)], bulk_bytes)?;
        self.lent = Some(Lent {
            // A read's data is copied out of the eager buffer at the reply. An arena's pieces
            // are the caller's own memory.
            eager: !crate::local::arena::is_arena(key),
            _registration: None,
            _lending: None,
            packed: None,
            resend: Some(SharedRequest {
                opcode,
                body,
                descriptor,
                key,
            }),
        });
        Ok(TransferCounts {
            messages_sent: 1,
            one_sided: 1,
            ..TransferCounts::default()
        })
    }

    /// The descriptor of `segments` for the server: its process reaches them directly, or,
    /// with a fabric, through their registrations (then also the guard keeping them);
    /// `transient` segments are this connection's own buffer, freed after the reply.
    pub(super) fn describe(
        &self,
        segments: &[(usize, usize)],
        segments_per_call: u16,
        transient: bool,
    ) -> Result<(RemoteMemory, Option<Box<dyn Send>>), NetError> {
        let Some(fabric) = &self.fabric else {
            let memory = RemoteMemory {
                access: RemoteAccess::Process,
                endpoint: tessera_proto::RemoteEndpoint::default(),
                segments_per_call,
                segments: segments
                    .iter()
                    .map(|&(address, length)| segment_of(address as *const u8, length))
                    .collect(),
            };
            return Ok((memory, None));
        };
        let lending = fabric
            .lend(segments, transient)
            .map_err(|detail| NetError::Register {
                peer: self.peer.clone(),
                detail: format!("{}: {detail}", fabric.provider()),
            })?;
        let memory = RemoteMemory {
            access: RemoteAccess::Fabric,
            endpoint: tessera_proto::RemoteEndpoint(lending.endpoint),
            segments_per_call,
            segments: lending.segments,
        };
        Ok((memory, Some(lending.guard)))
    }

    /// Receives the reply to the outstanding write of any form.
    pub fn recv_write(&mut self) -> Result<(IoReply, TransferCounts), NetError> {
        let (result, lent) = self.recv_lent_reply();
        drop(lent);
        result
    }

    /// Receives the reply to the outstanding one-sided request and takes back the memory it
    /// lent. A request naming a shared region that the server no longer maps
    /// (`UnknownRegion`, answered before any data moved) is sent once more after sharing the
    /// region again.
    pub(super) fn recv_lent_reply(
        &mut self,
    ) -> (Result<(IoReply, TransferCounts), NetError>, Option<Lent>) {
        let mut result = self.recv_reply::<IoReply>(None);
        let unknown_region = matches!(
            &result,
            Err(NetError::Remote { error, .. }) if error.code == ErrorCode::UnknownRegion
        );
        if unknown_region {
            if let Some(request) = self.lent.as_mut().and_then(|lent| lent.resend.take()) {
                self.shared_keys.retain(|&key| key != request.key);
                match self.ensure_shared(request.key) {
                    // Shared again: the request goes once more, and its reply is the answer.
                    Ok(true) => {
                        result = self.resend_shared(&request).map(|(reply, mut counts)| {
                            // The refused request and its reply, the share and its reply.
                            counts.messages_sent += 2;
                            counts.messages_received += 2;
                            (reply, counts)
                        });
                    }
                    // It cannot be shared again: the server's answer stands.
                    Ok(false) => {}
                    Err(error) => result = Err(error),
                }
            }
        }
        let lent = self.settle_lent(&result);
        (result, lent)
    }

    /// Sends `request` once more after its region was shared again (its data is where it
    /// was: the eager buffer, or the arena the caller still lends) and receives the reply.
    pub(super) fn resend_shared(
        &mut self,
        request: &SharedRequest,
    ) -> Result<(IoReply, TransferCounts), NetError> {
        tracing::debug!(
            "{}: shared region {:#x} was unmapped by the server; shared again",
            self.peer,
            request.key
        );
        let bulk_bytes = self.bulk_len(request.descriptor.len() as u64)?;
        self.send_frame(
            request.opcode,
            &request.body,
            &mut [IoSlice::new(&request.descriptor)],
            bulk_bytes,
        )?;
        self.recv_reply::<IoReply>(None)
    }

    /// Takes back the memory lent for the outstanding one-sided request once its reply has
    /// come. If no reply came, the server may still be moving data from or into that memory,
    /// so first make sure it has let go: stop sending and wait, at most one more timeout, for
    /// the server to finish the request and close the stream.
    pub(super) fn settle_lent<T>(&mut self, result: &Result<T, NetError>) -> Option<Lent> {
        // An error reply means the server is done with the request; only a missing reply
        // (timeout, broken stream) leaves it possibly still at work on the memory.
        let no_reply = matches!(result, Err(error) if error.remote().is_none());
        if no_reply && self.lent.is_some() && !self.settle() {
            self.keep_lent();
            return None;
        }
        self.lent.take()
    }

    /// Waits for the server to close the stream (it finishes the request in progress first);
    /// false if it did not within the timeout (a stopped or stalled server).
    pub(super) fn settle(&mut self) -> bool {
        let _ = self.stream.shutdown_write();
        let _ = self.stream.set_read_timeout(Some(self.timeout));
        let deadline = std::time::Instant::now() + self.timeout;
        let mut scratch = [0u8; 4096];
        while std::time::Instant::now() < deadline {
            match self.stream.read(&mut scratch) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        false
    }

    /// Never hands back the memory lent for the outstanding request (its pack buffer, its
    /// registrations): the server did not let go of it and may still write into it once it
    /// runs again, which into freed memory would corrupt this process's heap. At most one
    /// request's lent memory per connection given up this way.
    pub(super) fn keep_lent(&mut self) {
        if let Some(lent) = self.lent.take() {
            tracing::error!(
                "{}: the server did not let go of a one-sided transfer within {} ms; it may \
                 still write into the memory of that request, which is never reused",
                self.peer,
                self.timeout.as_millis()
            );
            std::mem::forget(lent);
        }
    }
}
