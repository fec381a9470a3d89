//! The fixed 24-byte header that starts every frame.
//!
//! A frame is `header | body | bulk`: the header says which operation the body encodes and
//! how many body and bulk bytes follow, so a receiver can check both lengths against the
//! limits before it reads or allocates anything. Bulk bytes are raw file data and are moved
//! straight between the caller's pieces and the socket (`writev`/`readv`).

use crate::error::WireError;
use crate::limits::{
    HEADER_BYTES, MESSAGE_BODY_BYTES_MAX, MESSAGE_BULK_BYTES_MAX, PROTOCOL_VERSION,
};

/// "TSRA" read as a little-endian `u32`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"TSRA");

/// The frame is a reply to the request with the same `request_id`.
pub const FLAG_REPLY: u16 = 1 << 0;
/// The reply body is an error (code and message), not the operation's reply.
pub const FLAG_ERROR: u16 = 1 << 1;
/// Every flag this version knows; others are refused.
pub const FLAGS_KNOWN: u16 = FLAG_REPLY | FLAG_ERROR;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The operation (see [`crate::Opcode`]).
    pub opcode: u8,
    /// `FLAG_*` bits.
    pub flags: u16,
    /// Chosen by the requester; echoed in the reply.
    pub request_id: u64,
    /// Bytes of encoded body that follow the header.
    pub body_bytes: u32,
    /// Bytes of raw bulk data that follow the body.
    pub bulk_bytes: u32,
}

impl Header {
    /// Encodes the header into its 24 bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        debug_assert!(self.body_bytes <= MESSAGE_BODY_BYTES_MAX);
        debug_assert!(self.bulk_bytes <= MESSAGE_BULK_BYTES_MAX);
        let mut out = [0u8; HEADER_BYTES];
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4] = PROTOCOL_VERSION;
        out[5] = self.opcode;
        out[6..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        out[16..20].copy_from_slice(&self.body_bytes.to_le_bytes());
        out[20..24].copy_from_slice(&self.bulk_bytes.to_le_bytes());
        out
    }

    /// Decodes and checks a header: magic, version, flags and both length limits.
    pub fn decode(bytes: &[u8; HEADER_BYTES]) -> Result<Self, WireError> {
        let word = |range: std::ops::Range<usize>| {
            let mut four = [0u8; 4];
            four.copy_from_slice(&bytes[range]);
            u32::from_le_bytes(four)
        };
        let magic = word(0..4);
        if magic != MAGIC {
            return Err(WireError::BadMagic { found: magic });
        }
        if bytes[4] != PROTOCOL_VERSION {
            return Err(WireError::BadVersion {
                found: bytes[4],
                expected: PROTOCOL_VERSION,
            });
        }
        let flags = u16::from_le_bytes([bytes[6], bytes[7]]);
        if flags & !FLAGS_KNOWN != 0 {
            return Err(WireError::BadValue {
                field: "header flags",
                value: u64::from(flags),
            });
        }
        let mut eight = [0u8; 8];
        eight.copy_from_slice(&bytes[8..16]);
        let header = Self {
            opcode: bytes[5],
            flags,
            request_id: u64::from_le_bytes(eight),
            body_bytes: word(16..20),
            bulk_bytes: word(20..24),
        };
        if header.body_bytes > MESSAGE_BODY_BYTES_MAX {
            return Err(WireError::OverLimit {
                limit: "message_body_bytes_max",
                value: u64::from(header.body_bytes),
                max: u64::from(MESSAGE_BODY_BYTES_MAX),
            });
        }
        if header.bulk_bytes > MESSAGE_BULK_BYTES_MAX {
            return Err(WireError::OverLimit {
                limit: "message_bulk_bytes_max",
                value: u64::from(header.bulk_bytes),
                max: u64::from(MESSAGE_BULK_BYTES_MAX),
            });
        }
        Ok(header)
    }

    /// True for replies.
    pub fn is_reply(&self) -> bool {
        self.flags & FLAG_REPLY != 0
    }

    /// True for error replies.
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_has_documented_layout() {
        let header = Header {
            opcode: 0x34,
            flags: FLAG_REPLY,
            request_id: 9,
            body_bytes: 40,
            bulk_bytes: 4096,
        };
        let bytes = header.encode();
        assert_eq!(&bytes[0..4], b"TSRA");
        assert_eq!(bytes[4], PROTOCOL_VERSION);
        assert_eq!(bytes[5], 0x34);
        assert_eq!(Header::decode(&bytes).unwrap(), header);
    }

    #[test]
    fn refuses_bad_magic_version_flags_and_lengths() {
        let good = Header {
            opcode: 1,
            flags: 0,
            request_id: 1,
            body_bytes: 0,
            bulk_bytes: 0,
        }
        .encode();
        let mut bad = good;
        bad[0] = b'X';
        assert!(matches!(
            Header::decode(&bad),
            Err(WireError::BadMagic { .. })
        ));
        let mut bad = good;
        bad[4] = 99;
        assert!(matches!(
            Header::decode(&bad),
            Err(WireError::BadVersion { found: 99, .. })
        ));
        let mut bad = good;
        bad[7] = 0x80;
        assert!(matches!(
            Header::decode(&bad),
            Err(WireError::BadValue { .. })
        ));
        let mut bad = good;
        bad[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Header::decode(&bad),
            Err(WireError::OverLimit {
                limit: "message_body_bytes_max",
                ..
            })
        ));
        let mut bad = good;
        bad[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Header::decode(&bad),
            Err(WireError::OverLimit {
                limit: "message_bulk_bytes_max",
                ..
            })
        ));
    }
}
