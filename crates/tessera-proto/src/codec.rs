//! Little-endian encoding of message bodies.
//!
//! Bodies are written with [`Encoder`] and read with [`Decoder`]. Every variable-length item
//! (bytes, strings, lists) is a `u32` count followed by its elements, and the decoder checks
//! each count against both the named limit for that item and the bytes actually left in the
//! body before it allocates anything, so a hostile count can neither crash a server nor make
//! it allocate more than the body it already holds.

use crate::error::WireError;

/// Appends little-endian values to a body buffer.
#[derive(Debug, Default)]
pub struct Encoder {
    bytes: Vec<u8>,
}

impl Encoder {
    /// A new, empty body.
    pub fn new() -> Self {
        Self::default()
    }

    /// The encoded body.
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }

    /// Appends one byte.
    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    /// Appends a `u16`.
    pub fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends a `bool` as one byte, 0 or 1.
    pub fn bool(&mut self, value: bool) {
        self.u8(u8::from(value));
    }

    /// Appends a count; callers have checked it against the item's limit.
    pub fn count(&mut self, count: usize) {
        self.u32(u32::try_from(count).expect("counts are bounded by limits far below u32::MAX"));
    }

    /// Appends a byte string: `u32` length, then the bytes.
    pub fn bytes(&mut self, value: &[u8]) {
        self.count(value.len());
        self.bytes.extend_from_slice(value);
    }

    /// Appends bytes of a fixed-size field, with no length.
    pub fn raw(&mut self, value: &[u8]) {
        self.bytes.extend_from_slice(value);
    }

    /// Appends a UTF-8 string: `u32` length, then the bytes.
    pub fn str(&mut self, value: &str) {
        self.bytes(value.as_bytes());
    }
}

/// Reads little-endian values from a received body, refusing anything malformed.
#[derive(Debug)]
pub struct Decoder<'a> {
    bytes: &'a [u8],
}

impl<'a> Decoder<'a> {
    /// Starts reading `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// Fails unless every byte of the body was consumed.
    pub fn finish(self) -> Result<(), WireError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes {
                count: self.bytes.len(),
            })
        }
    }

    /// Reads `count` bytes of a fixed-size field.
    pub fn take(&mut self, count: usize) -> Result<&'a [u8], WireError> {
        if count > self.bytes.len() {
            return Err(WireError::Truncated {
                needed: count,
                available: self.bytes.len(),
            });
        }
        let (head, tail) = self.bytes.split_at(count);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let slice = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    /// Reads a `u16`.
    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// Reads a `u32`.
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Reads a `u64`.
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Reads a `bool`; any byte but 0 or 1 is an error.
    pub fn bool(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(WireError::BadValue {
                field: "bool",
                value: u64::from(other),
            }),
        }
    }

    /// Reads a count of items of at least `element_bytes` each, checked against the named
    /// limit and against the bytes left, so no allocation can exceed the body itself.
    pub fn count(
        &mut self,
        limit_name: &'static str,
        limit: usize,
        element_bytes: usize,
    ) -> Result<usize, WireError> {
        let count = self.u32()? as usize;
        if count > limit {
            return Err(WireError::OverLimit {
                limit: limit_name,
                value: count as u64,
                max: limit as u64,
            });
        }
        let needed = count.saturating_mul(element_bytes.max(1));
        if needed > self.bytes.len() {
            return Err(WireError::Truncated {
                needed,
                available: self.bytes.len(),
            });
        }
        Ok(count)
    }

    /// Reads a byte string of at most `limit` bytes.
    pub fn bytes(&mut self, limit_name: &'static str, limit: usize) -> Result<&'a [u8], WireError> {
        let len = self.count(limit_name, limit, 1)?;
        self.take(len)
    }

    /// Reads a UTF-8 string of at most `limit` bytes.
    pub fn str(&mut self, limit_name: &'static str, limit: usize) -> Result<String, WireError> {
        let raw = self.bytes(limit_name, limit)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|_| WireError::BadUtf8 { field: limit_name })
    }
}

/// A value with a body encoding.
pub trait Wire: Sized {
    /// Appends the encoding of `self`.
    fn encode(&self, encoder: &mut Encoder);
    /// Reads one value.
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError>;

    /// Encodes `self` as a whole body.
    fn to_body(&self) -> Vec<u8> {
        let mut encoder = Encoder::new();
        self.encode(&mut encoder);
        encoder.finish()
    }

    /// Decodes a whole body, refusing trailing bytes.
    fn from_body(body: &[u8]) -> Result<Self, WireError> {
        let mut decoder = Decoder::new(body);
        let value = Self::decode(&mut decoder)?;
        decoder.finish()?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_scalars_and_strings() {
        let mut encoder = Encoder::new();
        encoder.u8(7);
        encoder.u16(0xBEEF);
        encoder.u32(0xDEAD_BEEF);
        encoder.u64(u64::MAX - 1);
        encoder.bool(true);
        encoder.str("tessera");
        let body = encoder.finish();
        assert_eq!(body.len(), 1 + 2 + 4 + 8 + 1 + 4 + 7);

        let mut decoder = Decoder::new(&body);
        assert_eq!(decoder.u8().unwrap(), 7);
        assert_eq!(decoder.u16().unwrap(), 0xBEEF);
        assert_eq!(decoder.u32().unwrap(), 0xDEAD_BEEF);
        assert_eq!(decoder.u64().unwrap(), u64::MAX - 1);
        assert!(decoder.bool().unwrap());
        assert_eq!(decoder.str("name", 16).unwrap(), "tessera");
        decoder.finish().unwrap();
    }

    #[test]
    fn refuses_counts_over_limit_and_over_body() {
        let mut encoder = Encoder::new();
        encoder.u32(1_000_000);
        let body = encoder.finish();
        let err = Decoder::new(&body).count("pieces", 10, 16).unwrap_err();
        assert!(matches!(
            err,
            WireError::OverLimit {
                limit: "pieces",
                value: 1_000_000,
                max: 10
            }
        ));
        let err = Decoder::new(&body)
            .count("pieces", 2_000_000, 16)
            .unwrap_err();
        assert!(matches!(err, WireError::Truncated { .. }));
    }

    #[test]
    fn refuses_bad_bool_and_bad_utf8() {
        assert!(Decoder::new(&[2]).bool().is_err());
        let mut encoder = Encoder::new();
        encoder.bytes(&[0xFF, 0xFE]);
        let body = encoder.finish();
        assert!(matches!(
            Decoder::new(&body).str("path", 10),
            Err(WireError::BadUtf8 { .. })
        ));
    }
}
