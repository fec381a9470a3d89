//! Frames on the wire, client side: a request's header, body and bulk written in one gather,
//! a reply's header and body read back and checked against the request, and the errors that
//! name the peer.

use super::{Connection, PieceDataMut, TransferCounts};
use crate::error::NetError;
use crate::iov::{read_exact_vectored, write_all_vectored};
use crate::stream::ByteStream;
use std::io;
use std::io::{IoSlice, IoSliceMut};
use tessera_proto::limits::HEADER_BYTES;
use tessera_proto::{Header, Opcode, Piece, RemoteError, TransferMode, Wire};

impl<S: ByteStream> Connection<S> {
    pub(super) fn bulk_len(&self, bytes: u64) -> Result<u32, NetError> {
        u32::try_from(bytes)
            .ok()
            .filter(|&bytes| bytes <= tessera_proto::limits::MESSAGE_BULK_BYTES_MAX)
            .ok_or_else(|| NetError::Protocol {
                peer: self.peer.clone(),
                detail: format!("bulk of {bytes} bytes is over message_bulk_bytes_max"),
            })
    }

    pub(super) fn send_frame(
        &mut self,
        opcode: Opcode,
        body: &[u8],
        bulk: &mut [IoSlice<'_>],
        bulk_bytes: u32,
    ) -> Result<(), NetError> {
        assert!(
            self.outstanding.is_none(),
            "one request in flight per connection"
        );
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        self.write_frame(opcode, 0, request_id, body, bulk, bulk_bytes)?;
        self.outstanding = Some((request_id, opcode));
        Ok(())
    }

    pub(super) fn write_frame(
        &mut self,
        opcode: Opcode,
        flags: u16,
        request_id: u64,
        body: &[u8],
        bulk: &mut [IoSlice<'_>],
        bulk_bytes: u32,
    ) -> Result<(), NetError> {
        let body_max = tessera_proto::limits::MESSAGE_BODY_BYTES_MAX;
        if body.len() > body_max as usize {
            // Refused before a byte is sent, so the connection stays in step.
            return Err(NetError::Remote {
                peer: self.peer.clone(),
                error: RemoteError::over_limit(
                    "message_body_bytes_max",
                    body.len() as u64,
                    u64::from(body_max),
                ),
            });
        }
        let header = Header {
            opcode: opcode as u8,
            flags,
            request_id,
            body_bytes: u32::try_from(body.len()).expect("checked against the body limit"),
            bulk_bytes,
        }
        .encode();
        let mut slices = Vec::with_capacity(2 + bulk.len());
        slices.push(IoSlice::new(&header));
        slices.push(IoSlice::new(body));
        slices.extend(bulk.iter().map(|slice| IoSlice::new(slice)));
        write_all_vectored(&mut self.stream, &mut slices).map_err(|err| self.io_error(err))?;
        Ok(())
    }

    pub(super) fn read_header(&mut self) -> Result<Header, NetError> {
        if !self.reply_spin.is_zero() {
            self.stream.spin_until_readable(self.reply_spin);
        }
        let mut bytes = [0u8; HEADER_BYTES];
        self.stream
            .read_exact(&mut bytes)
            .map_err(|err| self.io_error(err))?;
        Header::decode(&bytes).map_err(|err| NetError::protocol(&self.peer, &err))
    }

    pub(super) fn read_vec(&mut self, len: u32) -> Result<Vec<u8>, NetError> {
        let mut bytes = vec![0u8; len as usize];
        self.stream
            .read_exact(&mut bytes)
            .map_err(|err| self.io_error(err))?;
        Ok(bytes)
    }

    pub(super) fn recv_reply<T: Wire>(
        &mut self,
        destination: Option<(TransferMode, &[Piece], &mut PieceDataMut<'_>)>,
    ) -> Result<(T, TransferCounts), NetError> {
        let (request_id, opcode) = self
            .outstanding
            .take()
            .expect("recv without an outstanding request");
        let header = self.read_header()?;
        if !header.is_reply() || header.request_id != request_id || header.opcode != opcode as u8 {
            return Err(self.protocol(format!(
                "expected the reply to request {request_id} ({opcode:?}), got opcode {:#04x} id {} flags {:#x}",
                header.opcode, header.request_id, header.flags
            )));
        }
        let mut counts = TransferCounts {
            messages_received: 1,
            ..TransferCounts::default()
        };
        if header.is_error() {
            let body = self.read_vec(header.body_bytes)?;
            let error = RemoteError::from_body(&body)
                .map_err(|err| NetError::protocol(&self.peer, &err))?;
            if header.bulk_bytes != 0 {
                return Err(self.protocol("error reply carries bulk data".to_owned()));
            }
            return Err(NetError::Remote {
                peer: self.peer.clone(),
                error,
            });
        }
        let Some((mode, pieces, data)) = destination else {
            if header.bulk_bytes != 0 {
                return Err(self.protocol(format!("unexpected {} bulk bytes", header.bulk_bytes)));
            }
            let body = self.read_vec(header.body_bytes)?;
            let reply = T::from_body(&body).map_err(|err| NetError::protocol(&self.peer, &err))?;
            return Ok((reply, counts));
        };
        let expected: u64 = pieces.iter().map(|piece| piece.length).sum();
        let body;
        match mode {
            TransferMode::Remote => {
                return Err(self.protocol(
                    "the remote mode travels as Transfer::Remote, not in frames".to_owned(),
                ));
            }
            TransferMode::Gather => {
                self.expect_bulk(header.bulk_bytes, expected)?;
                // Body and data arrive with one readv: the data lands in the caller's pieces.
                let mut body_bytes = vec![0u8; header.body_bytes as usize];
                let mut slices = Vec::with_capacity(1 + data.slices.len());
                slices.push(IoSliceMut::new(&mut body_bytes));
                slices.extend(data.slices.iter_mut().map(|slice| IoSliceMut::new(slice)));
                read_exact_vectored(&mut self.stream, &mut slices)
                    .map_err(|err| self.io_error(err))?;
                drop(slices);
                body = body_bytes;
            }
            TransferMode::Pack => {
                self.expect_bulk(header.bulk_bytes, expected)?;
                body = self.read_vec(header.body_bytes)?;
                let packed = self.read_vec(header.bulk_bytes)?;
                let mut cursor = 0;
                for slice in &mut data.slices {
                    let len = slice.len();
                    slice.copy_from_slice(&packed[cursor..cursor + len]);
                    cursor += len;
                }
                counts.bytes_copied = packed.len() as u64;
            }
            TransferMode::Multiple => {
                self.expect_bulk(header.bulk_bytes, 0)?;
                body = self.read_vec(header.body_bytes)?;
                let mut start = 0;
                for (piece, &end) in pieces.iter().zip(&data.piece_ends) {
                    let frame = self.read_header()?;
                    if frame.opcode != Opcode::Data as u8
                        || frame.request_id != request_id
                        || frame.body_bytes != 0
                    {
                        return Err(self.protocol("expected a data frame".to_owned()));
                    }
                    self.expect_bulk(frame.bulk_bytes, piece.length)?;
                    read_exact_vectored(&mut self.stream, &mut data.slices[start..end])
                        .map_err(|err| self.io_error(err))?;
                    counts.messages_received += 1;
                    start = end;
                }
            }
        }
        let reply = T::from_body(&body).map_err(|err| NetError::protocol(&self.peer, &err))?;
        Ok((reply, counts))
    }

    pub(super) fn expect_bulk(&self, found: u32, expected: u64) -> Result<(), NetError> {
        if u64::from(found) == expected {
            Ok(())
        } else {
            Err(self.protocol(format!(
                "reply carries {found} data bytes, expected {expected}"
            )))
        }
    }

    pub(super) fn protocol(&self, detail: String) -> NetError {
        NetError::Protocol {
            peer: self.peer.clone(),
            detail,
        }
    }

    pub(super) fn io_error(&self, err: io::Error) -> NetError {
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => NetError::TimedOut {
                peer: self.peer.clone(),
                timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            },
            _ => NetError::Io {
                peer: self.peer.clone(),
                source: err,
            },
        }
    }
}
