//! Where each byte of a file lives: the stripe layout.
//!
//! A file's bytes are cut into stripe units dealt round-robin over an ordered list of I/O
//! servers. Each server keeps one local object holding its units back to back in logical
//! order, so logical offset `o` lives on server position `(o / unit) % n` at local offset
//! `(o / (unit * n)) * unit + o % unit`. The client uses [`StripeLayout::map`] to split an
//! access into per-server pieces; the metadata server uses [`StripeLayout::local_size`] and
//! [`StripeLayout::logical_end`] to turn server object sizes into the file size and back.

use std::sync::Arc;

use tessera_dtype::Datatype;

use crate::codec::{Decoder, Encoder, Wire};
use crate::error::WireError;
use crate::limits::{SERVERS_MAX, STRIPE_UNIT_BYTES_MAX, STRIPE_UNIT_BYTES_MIN};
use crate::pattern::PatternLayout;
pub use crate::segment::Segment;

/// The physical distribution of a file over its I/O servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Round-robin stripe units (the default).
    Stripe(StripeLayout),
    /// A periodic pattern given by one datatype per server.
    Pattern(Arc<PatternLayout>),
}

impl From<StripeLayout> for Layout {
    fn from(layout: StripeLayout) -> Self {
        Self::Stripe(layout)
    }
}

impl Layout {
    /// Cluster indices of the servers, by position.
    pub fn servers(&self) -> &[u16] {
        match self {
            Self::Stripe(layout) => &layout.servers,
            Self::Pattern(layout) => &layout.servers,
        }
    }

    /// Splits the logical range `[offset, offset + length)` into per-server runs, in logical
    /// order.
    pub fn map(&self, offset: u64, length: u64) -> Box<dyn Iterator<Item = Segment> + '_> {
        match self {
            Self::Stripe(layout) => Box::new(layout.map(offset, length)),
            Self::Pattern(layout) => Box::new(layout.map(offset, length)),
        }
    }

    /// Calls `visit` with every per-server run of `[offset, offset + length)`, in logical
    /// order (no allocation; the hot path of planning).
    #[inline]
    pub fn for_each_segment(&self, offset: u64, length: u64, visit: impl FnMut(Segment)) {
        match self {
            Self::Stripe(layout) => layout.map(offset, length).for_each(visit),
            Self::Pattern(layout) => layout.map(offset, length).for_each(visit),
        }
    }

    /// Bytes the server at `position` holds of a file of `logical_size` bytes.
    pub fn local_size(&self, position: usize, logical_size: u64) -> u64 {
        match self {
            Self::Stripe(layout) => layout.local_size(position, logical_size),
            Self::Pattern(layout) => layout.local_size(position, logical_size),
        }
    }

    /// The logical end of a local object of `local_size` bytes on the server at `position`.
    pub fn logical_end(&self, position: usize, local_size: u64) -> u64 {
        match self {
            Self::Stripe(layout) => layout.logical_end(position, local_size),
            Self::Pattern(layout) => layout.logical_end(position, local_size),
        }
    }

    /// One line for people: `stripe 65536 B over [0, 1]` or `pattern of 4096 B over [..]`.
    pub fn describe(&self) -> String {
        match self {
            Self::Stripe(layout) => format!(
                "stripe {} B over servers {:?}",
                layout.stripe_unit_bytes, layout.servers
            ),
            Self::Pattern(layout) => format!(
                "pattern, period {} B, over servers {:?}",
                layout.period_bytes(),
                layout.servers
            ),
        }
    }
}

/// Maps many runs of one file through its layout, remembering the stripe unit of the last
/// run: a run inside that unit (the many small runs of a fine-grained file type) is mapped
/// without a division. The segments are exactly those of [`Layout::for_each_segment`]; the
/// client's planner and the server's share walk both use it, so they cut alike.
#[derive(Debug)]
pub struct SegmentCursor<'a> {
    layout: &'a Layout,
    unit_start: u64,
    unit_end: u64,
    position: usize,
    local_base: u64,
}

impl<'a> SegmentCursor<'a> {
    /// A cursor over `layout` with no unit remembered yet.
    pub fn new(layout: &'a Layout) -> Self {
        Self {
            layout,
            unit_start: 0,
            unit_end: 0,
            position: 0,
            local_base: 0,
        }
    }

    /// As [`Layout::for_each_segment`].
    #[inline]
    pub fn for_each_segment(&mut self, offset: u64, length: u64, mut visit: impl FnMut(Segment)) {
        if length == 0 {
            return;
        }
        if let Layout::Stripe(stripe) = self.layout {
            let end = offset + length;
            if !(offset >= self.unit_start && end <= self.unit_end) {
                let unit = stripe.stripe_unit_bytes;
                let count = stripe.server_count();
                let index = offset / unit;
                self.unit_start = index * unit;
                self.unit_end = self.unit_start + unit;
                self.position = usize::try_from(index % count).expect("position < servers.len()");
                self.local_base = (index / count) * unit;
            }
            if end <= self.unit_end {
                visit(Segment {
                    server_position: self.position,
                    local_offset: self.local_base + (offset - self.unit_start),
                    logical_offset: offset,
                    length,
                });
                return;
            }
        }
        self.layout.for_each_segment(offset, length, visit);
    }
}

const LAYOUT_STRIPE: u8 = 1;
const LAYOUT_PATTERN: u8 = 2;

impl Wire for Layout {
    fn encode(&self, encoder: &mut Encoder) {
        match self {
            Self::Stripe(layout) => {
                encoder.u8(LAYOUT_STRIPE);
                layout.encode(encoder);
            }
            Self::Pattern(layout) => {
                encoder.u8(LAYOUT_PATTERN);
                encoder.count(layout.servers.len());
                for (&server, datatype) in layout.servers.iter().zip(&layout.types) {
                    encoder.u16(server);
                    datatype.encode(encoder);
                }
            }
        }
    }

    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        match decoder.u8()? {
            LAYOUT_STRIPE => Ok(Self::Stripe(StripeLayout::decode(decoder)?)),
            LAYOUT_PATTERN => {
                let count = decoder.count("servers_max", SERVERS_MAX, 16)?;
                let mut servers = Vec::with_capacity(count);
                let mut types = Vec::with_capacity(count);
                for _ in 0..count {
                    servers.push(decoder.u16()?);
                    types.push(Datatype::decode(decoder)?);
                }
                let layout = PatternLayout::new(servers, types)
                    .map_err(|why| WireError::Datatype(format!("pattern layout: {why}")))?;
                Ok(Self::Pattern(Arc::new(layout)))
            }
            other => Err(WireError::BadValue {
                field: "layout tag",
                value: u64::from(other),
            }),
        }
    }
}

/// Round-robin striping of a file over an ordered list of servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeLayout {
    /// Bytes per stripe unit.
    pub stripe_unit_bytes: u64,
    /// Cluster indices of the I/O servers, in stripe order.
    pub servers: Vec<u16>,
}

impl StripeLayout {
    /// A layout, checked against the limits.
    pub fn new(stripe_unit_bytes: u64, servers: Vec<u16>) -> Result<Self, String> {
        let layout = Self {
            stripe_unit_bytes,
            servers,
        };
        layout.validate()?;
        Ok(layout)
    }

    /// Checks the stripe unit and server list (non-empty, no repeats, within limits).
    pub fn validate(&self) -> Result<(), String> {
        if !(STRIPE_UNIT_BYTES_MIN..=STRIPE_UNIT_BYTES_MAX).contains(&self.stripe_unit_bytes) {
            return Err(format!(
                "stripe unit {} bytes is outside {STRIPE_UNIT_BYTES_MIN}..={STRIPE_UNIT_BYTES_MAX}",
                self.stripe_unit_bytes
            ));
        }
        if self.servers.is_empty() || self.servers.len() > SERVERS_MAX {
            return Err(format!(
                "layout names {} servers; it needs 1..={SERVERS_MAX}",
                self.servers.len()
            ));
        }
        let mut seen = self.servers.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != self.servers.len() {
            return Err("layout names a server twice".to_owned());
        }
        Ok(())
    }

    fn server_count(&self) -> u64 {
        self.servers.len() as u64
    }

    /// Splits the logical range `[offset, offset + length)` into per-server runs, in logical
    /// order. Each run lies inside one stripe unit.
    pub fn map(&self, offset: u64, length: u64) -> impl Iterator<Item = Segment> + '_ {
        let unit = self.stripe_unit_bytes;
        let count = self.server_count();
        let end = offset + length;
        let mut cursor = offset;
        std::iter::from_fn(move || {
            if cursor >= end {
                return None;
            }
            let stripe = cursor / unit;
            let within = cursor % unit;
            let run = (unit - within).min(end - cursor);
            let segment = Segment {
                server_position: usize::try_from(stripe % count).expect("position < servers.len()"),
                local_offset: (stripe / count) * unit + within,
                logical_offset: cursor,
                length: run,
            };
            cursor += run;
            Some(segment)
        })
    }

    /// Bytes the server at `position` holds of a file of `logical_size` bytes.
    pub fn local_size(&self, position: usize, logical_size: u64) -> u64 {
        let unit = self.stripe_unit_bytes;
        let row_bytes = unit * self.server_count();
        let full_rows = logical_size / row_bytes;
        let tail = logical_size % row_bytes;
        let start = position as u64 * unit;
        full_rows * unit + tail.saturating_sub(start).min(unit)
    }

    /// The logical offset just past the last byte of a local object of `local_size` bytes on
    /// the server at `position` (0 for an empty object).
    pub fn logical_end(&self, position: usize, local_size: u64) -> u64 {
        if local_size == 0 {
            return 0;
        }
        let unit = self.stripe_unit_bytes;
        let last = local_size - 1;
        let row = last / unit;
        (row * self.server_count() + position as u64) * unit + last % unit + 1
    }
}

impl Wire for StripeLayout {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u64(self.stripe_unit_bytes);
        encoder.count(self.servers.len());
        for &server in &self.servers {
            encoder.u16(server);
        }
    }

    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let stripe_unit_bytes = decoder.u64()?;
        let count = decoder.count("servers_max", SERVERS_MAX, 2)?;
        let servers = (0..count)
            .map(|_| decoder.u16())
            .collect::<Result<Vec<_>, _>>()?;
        let layout = Self {
            stripe_unit_bytes,
            servers,
        };
        layout.validate().map_err(|_| WireError::BadValue {
            field: "layout",
            value: layout.stripe_unit_bytes,
        })?;
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_segment_cursor_cuts_as_the_layout_does() {
        let layout: Layout = StripeLayout::new(64, vec![2, 0, 1]).unwrap().into();
        let mut cursor = SegmentCursor::new(&layout);
        let mut seed = 3u64;
        let mut offset = 0u64;
        for _ in 0..2000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            // Mostly small forward steps, sometimes a jump back or a run across units.
            let length = (seed >> 40) % 150;
            offset = if (seed >> 20).is_multiple_of(10) {
                (seed >> 30) % 5000
            } else {
                offset + (seed >> 50) % 20
            };
            let mut fast = Vec::new();
            cursor.for_each_segment(offset, length, |segment| fast.push(segment));
            let mut slow = Vec::new();
            layout.for_each_segment(offset, length, |segment| slow.push(segment));
            assert_eq!(fast, slow, "offset {offset} length {length}");
        }
    }
    use proptest::prelude::*;

    #[test]
    fn maps_across_units_and_servers() {
        let layout = StripeLayout::new(100, vec![0, 1, 2]).unwrap();
        let segments: Vec<_> = layout.map(250, 200).collect();
        assert_eq!(
            segments,
            vec![
                Segment {
                    server_position: 2,
                    local_offset: 50,
                    logical_offset: 250,
                    length: 50
                },
                Segment {
                    server_position: 0,
                    local_offset: 100,
                    logical_offset: 300,
                    length: 100
                },
                Segment {
                    server_position: 1,
                    local_offset: 100,
                    logical_offset: 400,
                    length: 50
                },
            ]
        );
    }

    #[test]
    fn refuses_bad_layouts() {
        assert!(StripeLayout::new(1, vec![0]).is_err());
        assert!(StripeLayout::new(4096, vec![]).is_err());
        assert!(StripeLayout::new(4096, vec![1, 1]).is_err());
    }

    proptest! {
        /// `local_size` and `logical_end` agree with a byte-by-byte model of the mapping.
        #[test]
        fn sizes_match_byte_model(unit in 64u64..300, servers in 1usize..6, size in 0u64..5000) {
            let layout = StripeLayout::new(unit, (0..u16::try_from(servers).unwrap()).collect()).unwrap();
            let mut local = vec![0u64; servers];
            let mut end = vec![0u64; servers];
            for segment in layout.map(0, size) {
                local[segment.server_position] = segment.local_offset + segment.length;
                end[segment.server_position] = segment.logical_offset + segment.length;
            }
            for position in 0..servers {
                prop_assert_eq!(layout.local_size(position, size), local[position]);
                prop_assert_eq!(layout.logical_end(position, local[position]), end[position]);
            }
            let max_end = (0..servers).map(|p| layout.logical_end(p, local[p])).max().unwrap();
            prop_assert_eq!(max_end, size);
        }
    }
}
