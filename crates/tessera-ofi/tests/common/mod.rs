//! Shared by the integration tests: the providers under test, a seeded generator, piece
//! lists with uneven boundaries and gaps, and a byte hash that both processes compute.

#![allow(dead_code)]

/// The providers `make test` covers, with the local address each binds to (`tcp;ofi_rxm` on
/// loopback only).
pub const PROVIDERS: [(&str, Option<&str>); 2] =
    [("tcp;ofi_rxm", Some("127.0.0.1")), ("shm", None)];

/// A small seeded generator (splitmix64), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }

    /// Uniform in `low..=high`.
    pub fn range_usize(&mut self, low: usize, high: usize) -> usize {
        let value = self.range(low as u64, high as u64);
        usize::try_from(value).expect("inside low..=high, which are usize")
    }
}

/// A piece: offset into its side's buffer, and length.
#[derive(Debug, Clone, Copy)]
pub struct Piece {
    /// Offset into its side's buffer.
    pub offset: usize,
    /// Length in bytes.
    pub length: usize,
}

/// `count` pieces of `min..=max` bytes, laid out in order with gaps of 0..=64 bytes; returns
/// the pieces and the buffer size they need.
pub fn pieces(rng: &mut Rng, count: usize, min: usize, max: usize) -> (Vec<Piece>, usize) {
    let mut offset = 0;
    let mut list = Vec::with_capacity(count);
    for _ in 0..count {
        offset += rng.range_usize(0, 64);
        let length = rng.range_usize(min, max);
        list.push(Piece { offset, length });
        offset += length;
    }
    (list, offset)
}

/// Pieces covering exactly `total` bytes, lengths `min..=max` (the last one shorter), with
/// gaps, then shuffled so addresses do not rise along the list.
pub fn pieces_for_total(
    rng: &mut Rng,
    total: usize,
    min: usize,
    max: usize,
) -> (Vec<Piece>, usize) {
    let mut offset = 0;
    let mut left = total;
    let mut list = Vec::new();
    while left > 0 {
        offset += rng.range_usize(0, 64);
        let length = rng.range_usize(min, max).min(left);
        list.push(Piece { offset, length });
        offset += length;
        left -= length;
    }
    for index in (1..list.len()).rev() {
        let other = rng.range_usize(0, index);
        list.swap(index, other);
    }
    (list, offset)
}

/// FNV-1a over the bytes.
pub fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Lower-case hex of the bytes.
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

/// The bytes of lower-case hex text.
pub fn from_hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(&text[index..index + 2], 16).expect("hex"))
        .collect()
}
