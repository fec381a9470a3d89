//! The array constructors: subarray and darray, lowered onto vectors, structs and resized
//! nodes the way MPI implementations build them.
//!
//! Both walk the dimensions from the fastest-varying (last in C order, first in Fortran
//! order) to the slowest, wrapping the type built so far in the pattern of one more
//! dimension. The element stride of a dimension is the product of the global sizes of the
//! faster dimensions times the extent of the element type. The result is resized to the
//! whole array (lower bound 0, extent = product of global sizes × element extent), so that
//! consecutive instances tile arrays back to back. A tree has O(dimensions) nodes whatever
//! the array size.

use crate::{Datatype, DatatypeError, DATATYPE_BYTES_MAX, DATATYPE_DIMS_MAX};

/// Storage order of a multidimensional array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Row-major: the last dimension varies fastest.
    C,
    /// Column-major: the first dimension varies fastest.
    Fortran,
}

/// How one dimension of a darray is dealt over its processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Contiguous blocks of the given size (default: ceil(global / processes)).
    Block(Option<u64>),
    /// Blocks of the given size dealt round-robin (default: 1).
    Cyclic(Option<u64>),
    /// Not distributed: every process has the whole dimension (its process count must be 1).
    None,
}

fn check_dims(what: &'static str, lengths: &[usize]) -> Result<usize, DatatypeError> {
    let dims = lengths[0];
    if dims == 0 || dims > DATATYPE_DIMS_MAX {
        return Err(DatatypeError::invalid(
            what,
            format!("{dims} dimensions; 1..={DATATYPE_DIMS_MAX} are allowed (datatype_dims_max)"),
        ));
    }
    if lengths.iter().any(|&length| length != dims) {
        return Err(DatatypeError::invalid(
            what,
            format!("argument arrays have different lengths {lengths:?}"),
        ));
    }
    Ok(dims)
}

/// Dimensions from the fastest-varying to the slowest, each with its element stride in bytes.
fn dims_fastest_first(
    what: &'static str,
    sizes: &[u64],
    order: Order,
    element_extent: i64,
) -> Result<Vec<(usize, i64)>, DatatypeError> {
    let indices: Vec<usize> = match order {
        Order::C => (0..sizes.len()).rev().collect(),
        Order::Fortran => (0..sizes.len()).collect(),
    };
    let mut stride = i128::from(element_extent);
    let mut out = Vec::with_capacity(sizes.len());
    for d in indices {
        out.push((d, i64::try_from(stride).expect("checked below")));
        stride *= i128::from(sizes[d]);
        if stride.unsigned_abs() > u128::from(DATATYPE_BYTES_MAX) {
            return Err(DatatypeError::over(
                what,
                "datatype_bytes_max",
                stride.unsigned_abs(),
                u128::from(DATATYPE_BYTES_MAX),
            ));
        }
    }
    Ok(out)
}

/// Extent of the whole array.
fn array_extent(sizes: &[u64], element_extent: i64) -> i64 {
    let total = sizes.iter().fold(i128::from(element_extent), |acc, &size| {
        acc * i128::from(size)
    });
    i64::try_from(total).expect("bounded by dims_fastest_first")
}

/// Places `inner` at byte displacement `displacement`.
fn at(displacement: i64, inner: &Datatype) -> Result<Datatype, DatatypeError> {
    if displacement == 0 {
        return Ok(inner.clone());
    }
    Datatype::hindexed(&[1], &[displacement], inner)
}

impl Datatype {
    /// A sub-block of a multidimensional array (MPI_Type_create_subarray): `subsizes`
    /// elements from `starts` in each dimension of an array of `sizes` elements of `old`.
    pub fn subarray(
        sizes: &[u64],
        subsizes: &[u64],
        starts: &[u64],
        order: Order,
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        const WHAT: &str = "subarray";
        check_dims(WHAT, &[sizes.len(), subsizes.len(), starts.len()])?;
        for d in 0..sizes.len() {
            if sizes[d] == 0 || starts[d].saturating_add(subsizes[d]) > sizes[d] {
                return Err(DatatypeError::invalid(
                    WHAT,
                    format!(
                        "dimension {d}: start {} + subsize {} must fit size {} (and the size be at least 1)",
                        starts[d], subsizes[d], sizes[d]
                    ),
                ));
            }
        }
        let mut current = old.clone();
        let mut displacement = 0i128;
        for (d, stride) in dims_fastest_first(WHAT, sizes, order, old.extent())? {
            current = if current.extent() == stride {
                Self::contiguous(subsizes[d], &current)?
            } else {
                Self::hvector(subsizes[d], 1, stride, &current)?
            };
            displacement += i128::from(starts[d]) * i128::from(stride);
        }
        let displacement = i64::try_from(displacement).expect("inside the array extent");
        Self::resized(
            0,
            array_extent(sizes, old.extent()),
            &at(displacement, &current)?,
        )
    }

    /// The share of process `rank` of a distributed array (MPI_Type_create_darray) over a
    /// process grid of `psizes`, whose ranks count in row-major order.
    #[allow(clippy::too_many_arguments)]
    pub fn darray(
        size: u64,
        rank: u64,
        gsizes: &[u64],
        distributions: &[Distribution],
        psizes: &[u64],
        order: Order,
        old: &Self,
    ) -> Result<Self, DatatypeError> {
        const WHAT: &str = "darray";
        let dims = check_dims(WHAT, &[gsizes.len(), distributions.len(), psizes.len()])?;
        let grid = psizes
            .iter()
            .try_fold(1u64, |acc, &p| acc.checked_mul(p))
            .unwrap_or(0);
        if grid != size || psizes.contains(&0) {
            return Err(DatatypeError::invalid(
                WHAT,
                format!("process grid {psizes:?} does not hold exactly {size} processes"),
            ));
        }
        if rank >= size {
            return Err(DatatypeError::invalid(
                WHAT,
                format!("rank {rank} is not below the {size} processes"),
            ));
        }
        // Row-major coordinates of `rank` in the process grid.
        let mut coords = vec![0u64; dims];
        let mut rest = rank;
        for d in (0..dims).rev() {
            coords[d] = rest % psizes[d];
            rest /= psizes[d];
        }
        let mut current = old.clone();
        for (d, stride) in dims_fastest_first(WHAT, gsizes, order, old.extent())? {
            let (global, processes, coord) = (gsizes[d], psizes[d], coords[d]);
            if global == 0 {
                return Err(DatatypeError::invalid(
                    WHAT,
                    format!("dimension {d} has size 0"),
                ));
            }
            let element = Self::resized(0, stride, &current)?;
            current = match distributions[d] {
                Distribution::None => {
                    if processes != 1 {
                        return Err(DatatypeError::invalid(
                            WHAT,
                            format!(
                                "dimension {d} is not distributed but has {processes} processes"
                            ),
                        ));
                    }
                    Self::contiguous(global, &element)?
                }
                Distribution::Block(block) => {
                    let block = block.unwrap_or_else(|| global.div_ceil(processes));
                    if block == 0 || block.saturating_mul(processes) < global {
                        return Err(DatatypeError::invalid(
                            WHAT,
                            format!(
                                "dimension {d}: blocks of {block} over {processes} processes cannot hold {global} elements"
                            ),
                        ));
                    }
                    let first = coord * block;
                    let count = block.min(global.saturating_sub(first));
                    at(
                        Self::offset(WHAT, first, stride)?,
                        &Self::contiguous(count, &element)?,
                    )?
                }
                Distribution::Cyclic(block) => {
                    let block = block.unwrap_or(1);
                    if block == 0 {
                        return Err(DatatypeError::invalid(
                            WHAT,
                            format!("dimension {d}: cyclic block size 0"),
                        ));
                    }
                    Self::cyclic(global, processes, coord, block, stride, &element)?
                }
            };
        }
        Self::resized(0, array_extent(gsizes, old.extent()), &current)
    }

    fn offset(what: &'static str, elements: u64, stride: i64) -> Result<i64, DatatypeError> {
        let bytes = i128::from(elements) * i128::from(stride);
        i64::try_from(bytes)
            .ok()
            .filter(|bytes| bytes.unsigned_abs() <= DATATYPE_BYTES_MAX)
            .ok_or_else(|| {
                DatatypeError::over(
                    what,
                    "datatype_bytes_max",
                    bytes.unsigned_abs(),
                    u128::from(DATATYPE_BYTES_MAX),
                )
            })
    }

    /// Blocks `coord, coord + processes, …` of `block` elements of a dimension of `global`.
    fn cyclic(
        global: u64,
        processes: u64,
        coord: u64,
        block: u64,
        stride: i64,
        element: &Self,
    ) -> Result<Self, DatatypeError> {
        const WHAT: &str = "darray";
        let blocks = global.div_ceil(block);
        let mine = if coord < blocks {
            (blocks - coord - 1) / processes + 1
        } else {
            0
        };
        if mine == 0 {
            return Self::contiguous(0, element);
        }
        let last = coord + (mine - 1) * processes;
        let last_length = block.min(global - last * block);
        let full = if last_length == block { mine } else { mine - 1 };
        let step = Self::offset(WHAT, block.saturating_mul(processes), stride)?;
        let mut lengths = Vec::with_capacity(2);
        let mut displacements = Vec::with_capacity(2);
        let mut types = Vec::with_capacity(2);
        if full > 0 {
            lengths.push(1);
            displacements.push(Self::offset(WHAT, coord * block, stride)?);
            types.push(Self::hvector(full, block, step, element)?);
        }
        if last_length < block {
            lengths.push(1);
            displacements.push(Self::offset(WHAT, last * block, stride)?);
            types.push(Self::contiguous(last_length, element)?);
        }
        if types.len() == 1 {
            return at(displacements[0], &types[0]);
        }
        Self::structure(&lengths, &displacements, &types)
    }
}
