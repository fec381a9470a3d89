//! NumPy arrays as datatypes: an element (a dtype) becomes a byte type or a struct type, an
//! array's memory (shape and byte strides) a nest of vectors over it, and a block of a
//! C- or Fortran-ordered array in the file a subarray type.
//!
//! Everything here is plain Rust over numbers (no Python), so the unit tests below can check
//! the types against a naive walk of the same strides. The two sides of one access walk
//! their elements in the same order: the file's array order (C: last index fastest;
//! Fortran: first index fastest), so element `(i, j, …)` of the memory array lands on element
//! `(start + i, start + j, …)` of the file's array whatever the memory strides are.

use tessera_client::dtype::{DatatypeError, Order};
use tessera_client::Datatype;

/// Most dimensions of an array moved in one call (NumPy's own limit is 64).
pub const ARRAY_DIMS_MAX: usize = 32;

/// Most fields of a structured dtype, nested fields counted.
pub const DTYPE_FIELDS_MAX: usize = 1024;

/// Deepest nesting of structured and subarray dtypes.
pub const DTYPE_DEPTH_MAX: usize = 8;

/// One element of an array, as its dtype describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Element {
    /// A plain value of this many bytes (any number, string or void dtype).
    Bytes(u64),
    /// A structured dtype: fields at byte offsets inside an element of `itemsize` bytes.
    /// Only the fields' bytes move; padding and bytes of no field are skipped.
    Struct {
        /// Bytes of one element (the dtype's `itemsize`, padding included).
        itemsize: u64,
        /// (byte offset, field) pairs.
        fields: Vec<(u64, Element)>,
    },
    /// A subarray dtype (`('f8', (3,))`): `count` elements back to back.
    Array {
        /// Elements (the product of the subarray's shape).
        count: u64,
        /// The base element.
        base: Box<Element>,
    },
}

/// A bad array or dtype argument, with what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutError(pub String);

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<DatatypeError> for LayoutError {
    fn from(error: DatatypeError) -> Self {
        Self(error.to_string())
    }
}

impl Element {
    /// The element's datatype: a byte type, or for a struct a struct type of its fields
    /// resized to `itemsize`. A struct whose fields cover every byte in order becomes a byte
    /// type too (one run per element rather than one per field).
    pub fn datatype(&self) -> Result<Datatype, LayoutError> {
        let datatype = self.build(0)?;
        if datatype.is_dense()
            && datatype.lb() == 0
            && u64::try_from(datatype.extent()).is_ok_and(|extent| extent == datatype.size())
        {
            return Ok(Datatype::bytes(datatype.size())?);
        }
        Ok(datatype)
    }

    fn build(&self, depth: usize) -> Result<Datatype, LayoutError> {
        if depth > DTYPE_DEPTH_MAX {
            return Err(LayoutError(format!(
                "the dtype nests deeper than dtype_depth_max ({DTYPE_DEPTH_MAX})"
            )));
        }
        match self {
            Self::Bytes(0) => Err(LayoutError("a dtype of 0 bytes cannot be moved".to_owned())),
            Self::Bytes(n) => Ok(Datatype::bytes(*n)?),
            Self::Array { count, base } => {
                Ok(Datatype::contiguous(*count, &base.build(depth + 1)?)?)
            }
            Self::Struct { itemsize, fields } => {
                if fields.is_empty() {
                    return Err(LayoutError("a structured dtype with no fields".to_owned()));
                }
                if self.field_count() > DTYPE_FIELDS_MAX {
                    return Err(LayoutError(format!(
                        "the dtype has {} fields, over dtype_fields_max ({DTYPE_FIELDS_MAX})",
                        self.field_count()
                    )));
                }
                let mut displacements = Vec::with_capacity(fields.len());
                let mut types = Vec::with_capacity(fields.len());
                for (offset, field) in fields {
                    displacements.push(
                        i64::try_from(*offset).map_err(|_| {
                            LayoutError(format!("field offset {offset} is too large"))
                        })?,
                    );
                    types.push(field.build(depth + 1)?);
                }
                let itemsize = i64::try_from(*itemsize)
                    .map_err(|_| LayoutError(format!("itemsize {itemsize} is too large")))?;
                let blocklens = vec![1; fields.len()];
                let structure = Datatype::structure(&blocklens, &displacements, &types)?;
                if structure.true_lb() < 0 || structure.true_ub() > itemsize {
                    return Err(LayoutError(format!(
                        "the dtype's fields reach bytes {}..{}, outside its itemsize of {itemsize}",
                        structure.true_lb(),
                        structure.true_ub()
                    )));
                }
                Ok(Datatype::resized(0, itemsize, &structure)?)
            }
        }
    }

    fn field_count(&self) -> usize {
        match self {
            Self::Bytes(_) => 1,
            Self::Array { base, .. } => base.field_count(),
            Self::Struct { fields, .. } => {
                fields.iter().map(|(_, field)| field.field_count()).sum()
            }
        }
    }
}

/// The array order a Python `order=` names: `'C'` or `'F'`.
pub fn order(name: &str) -> Result<Order, LayoutError> {
    match name {
        "C" | "c" => Ok(Order::C),
        "F" | "f" => Ok(Order::Fortran),
        other => Err(LayoutError(format!("order {other:?} is not 'C' or 'F'"))),
    }
}

/// The bytes an array's elements span in memory and the type that walks them.
#[derive(Debug, Clone)]
pub struct MemoryLayout {
    /// Byte offset of the lowest byte any element touches, from the array's data pointer
    /// (0 or negative: negative strides reach below it).
    pub low: i64,
    /// Bytes from `low` to one past the highest byte touched.
    pub length: u64,
    /// The type, over memory starting at `low`, that visits the elements in `order`.
    pub datatype: Datatype,
}

/// The memory type of an array of `shape` with byte `strides` of `element`s, visiting its
/// elements in `order`: one vector per dimension, fastest first, with the dimension's stride
/// in bytes, so a strided view is moved where it lies, run by run, with no copy. `None` for
/// an array of no elements.
pub fn memory_layout(
    shape: &[u64],
    strides: &[i64],
    element: &Datatype,
    itemsize: u64,
    array_order: Order,
) -> Result<Option<MemoryLayout>, LayoutError> {
    check_dims(shape.len())?;
    if shape.len() != strides.len() {
        return Err(LayoutError(format!(
            "{} dimensions but {} strides",
            shape.len(),
            strides.len()
        )));
    }
    if shape.contains(&0) {
        return Ok(None);
    }
    let mut low = 0i128;
    let mut high = i128::from(itemsize);
    for (&extent, &stride) in shape.iter().zip(strides) {
        let reach = i128::from(extent - 1) * i128::from(stride);
        if reach < 0 {
            low += reach;
        } else {
            high += reach;
        }
    }
    let mut current = element.clone();
    for d in fastest_first(shape.len(), array_order) {
        current = if i128::from(strides[d]) == i128::from(current.extent()) && current.lb() == 0 {
            Datatype::contiguous(shape[d], &current)?
        } else {
            Datatype::hvector(shape[d], 1, strides[d], &current)?
        };
    }
    let low = i64::try_from(low)
        .map_err(|_| LayoutError("the array's strides reach too far".to_owned()))?;
    if low != 0 {
        current = Datatype::hindexed(&[1], &[-low], &current)?;
    }
    let length = u64::try_from(high - i128::from(low))
        .map_err(|_| LayoutError("the array's strides reach too far".to_owned()))?;
    Ok(Some(MemoryLayout {
        low,
        length,
        datatype: current,
    }))
}

/// The file type of the block of `count` elements from `start` in an array of `file_shape`
/// elements stored in `array_order` (MPI's subarray type).
pub fn file_type(
    file_shape: &[u64],
    start: &[u64],
    count: &[u64],
    array_order: Order,
    element: &Datatype,
) -> Result<Datatype, LayoutError> {
    check_dims(file_shape.len())?;
    if start.len() != file_shape.len() || count.len() != file_shape.len() {
        return Err(LayoutError(format!(
            "file_shape has {} dimensions, start {} and count {}; they must be equal",
            file_shape.len(),
            start.len(),
            count.len()
        )));
    }
    Ok(Datatype::subarray(
        file_shape,
        count,
        start,
        array_order,
        element,
    )?)
}

fn check_dims(dims: usize) -> Result<(), LayoutError> {
    if dims == 0 || dims > ARRAY_DIMS_MAX {
        return Err(LayoutError(format!(
            "an array of {dims} dimensions; 1..={ARRAY_DIMS_MAX} are allowed (array_dims_max)"
        )));
    }
    Ok(())
}

/// Dimension indices, the one whose index varies fastest first.
fn fastest_first(dims: usize, array_order: Order) -> Vec<usize> {
    match array_order {
        Order::C => (0..dims).rev().collect(),
        Order::Fortran => (0..dims).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte runs of `count` copies of `datatype`, merged where adjacent.
    fn runs(datatype: &Datatype) -> Vec<(i64, u64)> {
        let mut merged: Vec<(i64, u64)> = Vec::new();
        for run in datatype.runs(0, 0, datatype.size()).unwrap() {
            let offset = run.offset;
            match merged.last_mut() {
                Some((start, length)) if *start + i64::try_from(*length).unwrap() == offset => {
                    *length += run.length;
                }
                _ => merged.push((offset, run.length)),
            }
        }
        merged
    }

    /// A naive walk: every element's byte offset from the lowest byte, in `order`.
    fn naive(shape: &[u64], strides: &[i64], itemsize: u64, order: Order) -> Vec<(i64, u64)> {
        let mut index = vec![0u64; shape.len()];
        let low: i64 = shape
            .iter()
            .zip(strides)
            .map(|(&n, &s)| (i64::try_from(n).unwrap() - 1) * s)
            .filter(|&reach| reach < 0)
            .sum();
        let mut out: Vec<(i64, u64)> = Vec::new();
        let total: u64 = shape.iter().product();
        for _ in 0..total {
            let offset: i64 = index
                .iter()
                .zip(strides)
                .map(|(&i, &s)| i64::try_from(i).unwrap() * s)
                .sum::<i64>()
                - low;
            match out.last_mut() {
                Some((start, length)) if *start + i64::try_from(*length).unwrap() == offset => {
                    *length += itemsize;
                }
                _ => out.push((offset, itemsize)),
            }
            for d in fastest_first(shape.len(), order) {
                index[d] += 1;
                if index[d] < shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        out
    }

    #[test]
    fn strided_views_walk_as_numpy_does() {
        let cases: &[(&[u64], &[i64])] = &[
            (&[4], &[8]),
            (&[4], &[-8]),
            (&[3, 5], &[80, 8]),
            (&[3, 5], &[160, 16]),
            (&[3, 5], &[8, 24]),
            (&[2, 3, 4], &[-96, 32, 8]),
            (&[2, 2, 3, 2], &[8, 16, 32, 96]),
        ];
        for order in [Order::C, Order::Fortran] {
            for &(shape, strides) in cases {
                let layout = memory_layout(shape, strides, &Datatype::bytes(8).unwrap(), 8, order)
                    .unwrap()
                    .unwrap();
                assert_eq!(
                    runs(&layout.datatype),
                    naive(shape, strides, 8, order),
                    "{shape:?} {strides:?} {order:?}"
                );
                let expected_low: i64 = shape
                    .iter()
                    .zip(strides)
                    .map(|(&n, &s)| (i64::try_from(n).unwrap() - 1) * s)
                    .filter(|&reach| reach < 0)
                    .sum();
                assert_eq!(layout.low, expected_low);
            }
        }
    }

    #[test]
    fn a_contiguous_array_is_one_run() {
        let layout = memory_layout(&[4, 5], &[40, 8], &Datatype::bytes(8).unwrap(), 8, Order::C)
            .unwrap()
            .unwrap();
        assert_eq!(runs(&layout.datatype), vec![(0, 160)]);
        assert_eq!(layout.length, 160);
    }

    #[test]
    fn an_empty_array_has_no_layout() {
        assert!(
            memory_layout(&[3, 0], &[0, 8], &Datatype::bytes(8).unwrap(), 8, Order::C)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn struct_fields_skip_padding() {
        // {'a': i4 at 0, 'b': f8 at 8}, itemsize 16: bytes 4..8 are padding.
        let element = Element::Struct {
            itemsize: 16,
            fields: vec![(0, Element::Bytes(4)), (8, Element::Bytes(8))],
        };
        let datatype = element.datatype().unwrap();
        assert_eq!(datatype.size(), 12);
        assert_eq!(datatype.extent(), 16);
        assert_eq!(runs(&datatype), vec![(0, 4), (8, 8)]);
        // A packed struct is one run of bytes.
        let packed = Element::Struct {
            itemsize: 12,
            fields: vec![(0, Element::Bytes(4)), (4, Element::Bytes(8))],
        };
        assert_eq!(runs(&packed.datatype().unwrap()), vec![(0, 12)]);
    }

    #[test]
    fn bad_dtypes_and_shapes_are_errors() {
        assert!(Element::Bytes(0).datatype().is_err());
        let outside = Element::Struct {
            itemsize: 4,
            fields: vec![(2, Element::Bytes(4))],
        };
        assert!(outside
            .datatype()
            .unwrap_err()
            .0
            .contains("outside its itemsize"));
        let byte = Datatype::byte();
        assert!(file_type(&[4, 4], &[3, 0], &[2, 4], Order::C, &byte).is_err());
        assert!(file_type(&[4, 4], &[0], &[2, 4], Order::C, &byte).is_err());
        assert!(memory_layout(&[], &[], &byte, 1, Order::C).is_err());
        assert!(order("K").is_err());
    }

    #[test]
    fn the_file_block_is_the_subarray() {
        let element = Datatype::bytes(8).unwrap();
        let filetype = file_type(&[4, 6], &[1, 2], &[2, 3], Order::C, &element).unwrap();
        assert_eq!(runs(&filetype), vec![(64, 24), (112, 24)]);
        let filetype = file_type(&[4, 6], &[1, 2], &[2, 3], Order::Fortran, &element).unwrap();
        assert_eq!(runs(&filetype), vec![(72, 16), (104, 16), (136, 16)]);
    }
}
