//! The compact encoding of a datatype, and its decoder for untrusted bytes.
//!
//! A type is sent as a table of its distinct nodes, children before parents, the root last;
//! a node shared by several parents is sent once. All integers are little-endian.
//!
//! ```text
//! u8  version (1)
//! u32 node count N            1..=DATATYPE_NODES_MAX
//! N × node, by tag:
//!   1 bytes    u64 n
//!   2 vector   u32 child | u64 count | u64 blocklen | i64 stride_bytes
//!   3 indexed  u32 child | u32 blocks B | B × (i64 displacement_bytes | u64 blocklen)
//!   4 struct   u32 blocks B | B × (u32 child | i64 displacement_bytes | u64 blocklen)
//!   5 resized  u32 child | i64 lb | u64 extent
//! ```
//!
//! The decoder rebuilds the tree through the public constructors, so every limit of the
//! constructors (counts, bounds, depth) holds for decoded types too; on top of that it checks
//! the encoded length, the node count, the total block count, and that every child index
//! names an earlier node (so there are no cycles). Nothing is allocated before the bytes that
//! justify it have been seen.

use std::collections::HashMap;

use crate::{
    Datatype, DatatypeError, Kind, Node, DATATYPE_BLOCKS_MAX, DATATYPE_ENCODED_BYTES_MAX,
    DATATYPE_NODES_MAX,
};

const VERSION: u8 = 1;
const TAG_BYTES: u8 = 1;
const TAG_VECTOR: u8 = 2;
const TAG_INDEXED: u8 = 3;
const TAG_STRUCT: u8 = 4;
const TAG_RESIZED: u8 = 5;
/// The shortest node: a struct without blocks.
const NODE_BYTES_MIN: usize = 5;

/// Encodes `datatype`; fails only if it has more distinct nodes or blocks than the limits.
pub fn encode(datatype: &Datatype) -> Result<Vec<u8>, DatatypeError> {
    let mut encoder = Encoding {
        out: vec![VERSION, 0, 0, 0, 0],
        index: HashMap::new(),
        blocks: 0,
    };
    encoder.node(&datatype.0)?;
    let count = u32::try_from(encoder.index.len()).expect("bounded by datatype_nodes_max");
    encoder.out[1..5].copy_from_slice(&count.to_le_bytes());
    if encoder.out.len() > DATATYPE_ENCODED_BYTES_MAX {
        return Err(DatatypeError::over(
            "encoding",
            "datatype_encoded_bytes_max",
            encoder.out.len() as u128,
            DATATYPE_ENCODED_BYTES_MAX as u128,
        ));
    }
    Ok(encoder.out)
}

struct Encoding {
    out: Vec<u8>,
    index: HashMap<*const Node, u32>,
    blocks: usize,
}

impl Encoding {
    fn node(&mut self, node: &Node) -> Result<u32, DatatypeError> {
        if let Some(&index) = self.index.get(&std::ptr::from_ref(node)) {
            return Ok(index);
        }
        // Children first, so every reference points backwards.
        let children: Vec<u32> = match &node.kind {
            Kind::Bytes(_) => Vec::new(),
            Kind::Vector { child, .. }
            | Kind::Indexed { child, .. }
            | Kind::Resized { child, .. } => {
                vec![self.node(&child.0)?]
            }
            Kind::Struct { fields, .. } => fields
                .iter()
                .map(|field| self.node(&field.2 .0))
                .collect::<Result<_, _>>()?,
        };
        if self.index.len() >= DATATYPE_NODES_MAX {
            return Err(DatatypeError::over(
                "encoding",
                "datatype_nodes_max",
                self.index.len() as u128 + 1,
                DATATYPE_NODES_MAX as u128,
            ));
        }
        let out = &mut self.out;
        match &node.kind {
            Kind::Bytes(n) => {
                out.push(TAG_BYTES);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Kind::Vector {
                count,
                blocklen,
                stride,
                ..
            } => {
                out.push(TAG_VECTOR);
                out.extend_from_slice(&children[0].to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(&blocklen.to_le_bytes());
                out.extend_from_slice(&stride.to_le_bytes());
            }
            Kind::Indexed { blocks, .. } => {
                self.blocks += blocks.len();
                out.push(TAG_INDEXED);
                out.extend_from_slice(&children[0].to_le_bytes());
                out.extend_from_slice(&u32::try_from(blocks.len()).expect("bounded").to_le_bytes());
                for (displacement, blocklen) in &**blocks {
                    out.extend_from_slice(&displacement.to_le_bytes());
                    out.extend_from_slice(&blocklen.to_le_bytes());
                }
            }
            Kind::Struct { fields, .. } => {
                self.blocks += fields.len();
                out.push(TAG_STRUCT);
                out.extend_from_slice(&u32::try_from(fields.len()).expect("bounded").to_le_bytes());
                for (field, child) in fields.iter().zip(&children) {
                    out.extend_from_slice(&child.to_le_bytes());
                    out.extend_from_slice(&field.0.to_le_bytes());
                    out.extend_from_slice(&field.1.to_le_bytes());
                }
            }
            Kind::Resized { lb, extent, .. } => {
                out.push(TAG_RESIZED);
                out.extend_from_slice(&children[0].to_le_bytes());
                out.extend_from_slice(&lb.to_le_bytes());
                out.extend_from_slice(&extent.to_le_bytes());
            }
        }
        if self.blocks > DATATYPE_BLOCKS_MAX {
            return Err(DatatypeError::over(
                "encoding",
                "datatype_blocks_max",
                self.blocks as u128,
                DATATYPE_BLOCKS_MAX as u128,
            ));
        }
        let index = u32::try_from(self.index.len()).expect("bounded by datatype_nodes_max");
        self.index.insert(std::ptr::from_ref(node), index);
        Ok(index)
    }
}

/// Decodes a type from untrusted bytes, which must be exactly one encoding.
pub fn decode(bytes: &[u8]) -> Result<Datatype, DatatypeError> {
    if bytes.len() > DATATYPE_ENCODED_BYTES_MAX {
        return Err(DatatypeError::over(
            "decoding",
            "datatype_encoded_bytes_max",
            bytes.len() as u128,
            DATATYPE_ENCODED_BYTES_MAX as u128,
        ));
    }
    let mut reader = Reader { bytes, at: 0 };
    let version = reader.u8()?;
    if version != VERSION {
        return Err(reader.malformed(format!("version {version}; this build reads {VERSION}")));
    }
    let count = reader.u32()? as usize;
    if count == 0 || count > DATATYPE_NODES_MAX {
        return Err(DatatypeError::over(
            "decoding",
            "datatype_nodes_max",
            count as u128,
            DATATYPE_NODES_MAX as u128,
        ));
    }
    // Every node takes at least 5 bytes (a struct without blocks: tag and block count), so
    // the table can be no longer than the input allows.
    if count > reader.left() / NODE_BYTES_MIN {
        return Err(reader.malformed(format!(
            "{count} nodes cannot fit in {} bytes",
            reader.left()
        )));
    }
    let mut nodes: Vec<Datatype> = Vec::with_capacity(count);
    let mut blocks_total = 0usize;
    for _ in 0..count {
        let tag_at = reader.at;
        let node = match reader.u8()? {
            TAG_BYTES => Datatype::bytes(reader.u64()?)?,
            TAG_VECTOR => {
                let child = reader.child(&nodes)?;
                let count = reader.u64()?;
                let blocklen = reader.u64()?;
                let stride = reader.i64()?;
                Datatype::hvector(count, blocklen, stride, &child)?
            }
            TAG_INDEXED => {
                let child = reader.child(&nodes)?;
                let blocks = reader.blocks(&mut blocks_total, 16)?;
                let mut lengths = Vec::with_capacity(blocks);
                let mut displacements = Vec::with_capacity(blocks);
                for _ in 0..blocks {
                    displacements.push(reader.i64()?);
                    lengths.push(reader.u64()?);
                }
                Datatype::hindexed(&lengths, &displacements, &child)?
            }
            TAG_STRUCT => {
                let blocks = reader.blocks(&mut blocks_total, 20)?;
                let mut lengths = Vec::with_capacity(blocks);
                let mut displacements = Vec::with_capacity(blocks);
                let mut types = Vec::with_capacity(blocks);
                for _ in 0..blocks {
                    types.push(reader.child(&nodes)?);
                    displacements.push(reader.i64()?);
                    lengths.push(reader.u64()?);
                }
                Datatype::structure(&lengths, &displacements, &types)?
            }
            TAG_RESIZED => {
                let child = reader.child(&nodes)?;
                let lb = reader.i64()?;
                let extent = reader.u64()?;
                let extent = i64::try_from(extent).map_err(|_| {
                    DatatypeError::invalid("resized", format!("extent {extent} is too large"))
                })?;
                Datatype::resized(lb, extent, &child)?
            }
            tag => {
                reader.at = tag_at;
                return Err(reader.malformed(format!("unknown node tag {tag}")));
            }
        };
        nodes.push(node);
    }
    if reader.left() != 0 {
        return Err(reader.malformed(format!("{} bytes after the last node", reader.left())));
    }
    let root = nodes.pop().expect("count is at least 1");
    // One type, one encoding: nodes in the encoder's order, each once, none unused. This
    // keeps equality of types a comparison of bytes.
    if encode(&root).ok().as_deref() != Some(bytes) {
        return Err(DatatypeError::Malformed {
            at: 0,
            detail: "not the canonical encoding (nodes out of order, repeated or unused)".into(),
        });
    }
    Ok(root)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn malformed(&self, detail: String) -> DatatypeError {
        DatatypeError::Malformed {
            at: self.at,
            detail,
        }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DatatypeError> {
        let Some(slice) = self.bytes.get(self.at..self.at + N) else {
            return Err(self.malformed(format!("{N} bytes needed, {} left", self.left())));
        };
        self.at += N;
        Ok(slice.try_into().expect("N bytes"))
    }

    fn u8(&mut self) -> Result<u8, DatatypeError> {
        Ok(self.take::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, DatatypeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, DatatypeError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn i64(&mut self) -> Result<i64, DatatypeError> {
        Ok(i64::from_le_bytes(self.take()?))
    }

    fn child(&mut self, nodes: &[Datatype]) -> Result<Datatype, DatatypeError> {
        let index = self.u32()? as usize;
        nodes.get(index).cloned().ok_or_else(|| {
            self.malformed(format!(
                "child {index} is not an earlier node (only {} so far)",
                nodes.len()
            ))
        })
    }

    /// A block count, checked against the total limit and the bytes left.
    fn blocks(&mut self, total: &mut usize, bytes_each: usize) -> Result<usize, DatatypeError> {
        let blocks = self.u32()? as usize;
        *total += blocks;
        if *total > DATATYPE_BLOCKS_MAX {
            return Err(DatatypeError::over(
                "decoding",
                "datatype_blocks_max",
                *total as u128,
                DATATYPE_BLOCKS_MAX as u128,
            ));
        }
        if blocks > self.left() / bytes_each {
            return Err(self.malformed(format!(
                "{blocks} blocks cannot fit in {} bytes",
                self.left()
            )));
        }
        Ok(blocks)
    }
}
