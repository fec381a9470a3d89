//! Datatype trees built through C: one constructor per MPI type constructor.
//!
//! Each function takes its children as `TesseraDatatype` handles (which it does not consume:
//! the new type shares them, and the caller frees its handles when it likes) and array
//! arguments as pointer + count, and calls the matching `tessera-dtype` constructor, whose
//! limits (`DATATYPE_*`) apply. Displacements and strides are in bytes where the MPI
//! constructor's name starts with `h`, in extents of the child otherwise, as in MPI.

use std::ffi::c_int;

use tessera_client::dtype::{Distribution, Order, DATATYPE_BLOCKS_MAX, DATATYPE_DIMS_MAX};
use tessera_client::Datatype;

use crate::error::{guard, handle, put, Failure};

/// A datatype: an immutable tree, safe to share between threads.
pub struct TesseraDatatype {
    pub(crate) datatype: Datatype,
}

/// Row-major order (C): the last dimension varies fastest.
pub const TESSERA_ORDER_C: c_int = 0;
/// Column-major order (Fortran): the first dimension varies fastest.
pub const TESSERA_ORDER_FORTRAN: c_int = 1;
/// A darray dimension dealt in contiguous blocks.
pub const TESSERA_DISTRIBUTE_BLOCK: c_int = 1;
/// A darray dimension dealt round-robin in blocks.
pub const TESSERA_DISTRIBUTE_CYCLIC: c_int = 2;
/// A darray dimension not distributed.
pub const TESSERA_DISTRIBUTE_NONE: c_int = 3;

/// Sizes and bounds of a datatype, as MPI reports them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TesseraTypeInfo {
    /// Data bytes in one instance.
    pub size: u64,
    /// Lower bound.
    pub lb: i64,
    /// Extent (upper minus lower bound).
    pub extent: i64,
    /// Lowest byte the data touches.
    pub true_lb: i64,
    /// Extent of the bytes the data touches.
    pub true_extent: i64,
    /// Depth of the tree (1 for a basic type).
    pub depth: u32,
}

fn hand_out(
    made: Result<Datatype, tessera_client::dtype::DatatypeError>,
    out: *mut *mut TesseraDatatype,
) -> Result<(), Failure> {
    let boxed = Box::into_raw(Box::new(TesseraDatatype { datatype: made? }));
    // SAFETY: the exported callers guarantee `out` is valid for one write.
    unsafe { put(out, boxed, "out") }.inspect_err(|_| {
        // SAFETY: `boxed` came from Box::into_raw above and was not handed out.
        drop(unsafe { Box::from_raw(boxed) });
    })
}

/// The child type argument.
///
/// # Safety
/// `old` is null or a live handle.
unsafe fn child<'a>(old: *const TesseraDatatype) -> Result<&'a Datatype, Failure> {
    // SAFETY: the caller's guarantee.
    unsafe { handle(old, "old type") }.map(|old| &old.datatype)
}

/// An array argument of `count` elements (null is allowed when `count` is 0).
///
/// # Safety
/// `values` is null or valid for reads of `count` elements.
unsafe fn array<'a, T>(values: *const T, count: usize, what: &str) -> Result<&'a [T], Failure> {
    if count == 0 {
        return Ok(&[]);
    }
    if values.is_null() {
        return Err(Failure::invalid(format!(
            "{what}: a null pointer for {count} values"
        )));
    }
    if count > DATATYPE_BLOCKS_MAX.max(DATATYPE_DIMS_MAX) {
        return Err(Failure::limit(format!(
            "{what}: {count} values, over datatype_blocks_max ({DATATYPE_BLOCKS_MAX})"
        )));
    }
    // SAFETY: not null, and the caller guarantees `count` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(values, count) })
}

/// `n` contiguous bytes: the basic type (a named MPI type of `n` bytes).
///
/// # Safety
/// `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_bytes(n: u64, out: *mut *mut TesseraDatatype) -> c_int {
    guard(|| hand_out(Datatype::bytes(n), out))
}

/// `count` copies of `old` back to back (MPI_Type_contiguous).
///
/// # Safety
/// `old` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_contiguous(
    count: u64,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    // SAFETY: the caller's guarantees.
    guard(|| hand_out(Datatype::contiguous(count, unsafe { child(old)? }), out))
}

/// `count` blocks of `blocklen` copies of `old`, `stride` extents of `old` apart
/// (MPI_Type_vector).
///
/// # Safety
/// `old` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_vector(
    count: u64,
    blocklen: u64,
    stride: i64,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let old = unsafe { child(old)? };
        hand_out(Datatype::vector(count, blocklen, stride, old), out)
    })
}

/// As [`tessera_type_vector`] with the stride in bytes (MPI_Type_create_hvector).
///
/// # Safety
/// `old` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_hvector(
    count: u64,
    blocklen: u64,
    stride_bytes: i64,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let old = unsafe { child(old)? };
        hand_out(Datatype::hvector(count, blocklen, stride_bytes, old), out)
    })
}

/// `count` blocks of `blocklens[i]` copies of `old` at `displacements[i]` extents of `old`
/// (MPI_Type_indexed).
///
/// # Safety
/// `blocklens` and `displacements` are valid for `count` reads; `old` is a live handle;
/// `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_indexed(
    count: usize,
    blocklens: *const u64,
    displacements: *const i64,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (blocklens, displacements, old) = unsafe {
            (
                array(blocklens, count, "indexed block lengths")?,
                array(displacements, count, "indexed displacements")?,
                child(old)?,
            )
        };
        hand_out(Datatype::indexed(blocklens, displacements, old), out)
    })
}

/// As [`tessera_type_indexed`] with byte displacements (MPI_Type_create_hindexed).
///
/// # Safety
/// `blocklens` and `displacements` are valid for `count` reads; `old` is a live handle;
/// `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_hindexed(
    count: usize,
    blocklens: *const u64,
    displacements: *const i64,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (blocklens, displacements, old) = unsafe {
            (
                array(blocklens, count, "hindexed block lengths")?,
                array(displacements, count, "hindexed displacements")?,
                child(old)?,
            )
        };
        hand_out(Datatype::hindexed(blocklens, displacements, old), out)
    })
}

/// `count` blocks of `blocklen` copies of `old` at `displacements[i]` extents of `old`
/// (MPI_Type_create_indexed_block).
///
/// # Safety
/// `displacements` is valid for `count` reads; `old` is a live handle; `out` is valid for
/// one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_indexed_block(
    count: usize,
    blocklen: u64,
    displacements: *const i64,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (displacements, old) = unsafe {
            (
                array(displacements, count, "indexed block displacements")?,
                child(old)?,
            )
        };
        hand_out(Datatype::indexed_block(blocklen, displacements, old), out)
    })
}

/// As [`tessera_type_indexed_block`] with byte displacements
/// (MPI_Type_create_hindexed_block).
///
/// # Safety
/// `displacements` is valid for `count` reads; `old` is a live handle; `out` is valid for
/// one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_hindexed_block(
    count: usize,
    blocklen: u64,
    displacements: *const i64,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (displacements, old) = unsafe {
            (
                array(displacements, count, "hindexed block displacements")?,
                child(old)?,
            )
        };
        hand_out(Datatype::hindexed_block(blocklen, displacements, old), out)
    })
}

/// `count` blocks of `blocklens[i]` copies of `types[i]` at byte `displacements[i]`
/// (MPI_Type_create_struct). No alignment padding is added: give MPI's extent with
/// [`tessera_type_resized`].
///
/// # Safety
/// `blocklens`, `displacements` and `types` are valid for `count` reads, and every entry of
/// `types` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_struct(
    count: usize,
    blocklens: *const u64,
    displacements: *const i64,
    types: *const *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (blocklens, displacements, handles) = unsafe {
            (
                array(blocklens, count, "struct block lengths")?,
                array(displacements, count, "struct displacements")?,
                array(types, count, "struct types")?,
            )
        };
        let types = handles
            .iter()
            // SAFETY: the caller guarantees every entry is a live handle.
            .map(|&pointer| unsafe { child(pointer) }.cloned())
            .collect::<Result<Vec<Datatype>, Failure>>()?;
        hand_out(Datatype::structure(blocklens, displacements, &types), out)
    })
}

fn order(order: c_int) -> Result<Order, Failure> {
    match order {
        TESSERA_ORDER_C => Ok(Order::C),
        TESSERA_ORDER_FORTRAN => Ok(Order::Fortran),
        other => Err(Failure::invalid(format!(
            "order {other} is not TESSERA_ORDER_C or TESSERA_ORDER_FORTRAN"
        ))),
    }
}

/// A sub-block of an `ndims`-dimensional array: `subsizes` elements from `starts` in an
/// array of `sizes` elements of `old`, in `order` (MPI_Type_create_subarray).
///
/// # Safety
/// `sizes`, `subsizes` and `starts` are valid for `ndims` reads; `old` is a live handle;
/// `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_subarray(
    ndims: usize,
    sizes: *const u64,
    subsizes: *const u64,
    starts: *const u64,
    array_order: c_int,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (sizes, subsizes, starts, old) = unsafe {
            (
                array(sizes, ndims, "subarray sizes")?,
                array(subsizes, ndims, "subarray subsizes")?,
                array(starts, ndims, "subarray starts")?,
                child(old)?,
            )
        };
        hand_out(
            Datatype::subarray(sizes, subsizes, starts, order(array_order)?, old),
            out,
        )
    })
}

/// The share of process `rank` of `size` of a distributed `ndims`-dimensional array of
/// `gsizes` elements of `old` (MPI_Type_create_darray): per dimension a distribution
/// (`TESSERA_DISTRIBUTE_*`), a distribution argument (the block size; 0 for MPI's default)
/// and a process count.
///
/// # Safety
/// `gsizes`, `distributions`, `dargs` and `psizes` are valid for `ndims` reads; `old` is a
/// live handle; `out` is valid for one write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_type_darray(
    size: u64,
    rank: u64,
    ndims: usize,
    gsizes: *const u64,
    distributions: *const c_int,
    dargs: *const u64,
    psizes: *const u64,
    array_order: c_int,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (gsizes, kinds, dargs, psizes, old) = unsafe {
            (
                array(gsizes, ndims, "darray gsizes")?,
                array(distributions, ndims, "darray distributions")?,
                array(dargs, ndims, "darray dargs")?,
                array(psizes, ndims, "darray psizes")?,
                child(old)?,
            )
        };
        let distributions = kinds
            .iter()
            .zip(dargs)
            .map(|(&kind, &darg)| {
                let block = (darg != 0).then_some(darg);
                match kind {
                    TESSERA_DISTRIBUTE_BLOCK => Ok(Distribution::Block(block)),
                    TESSERA_DISTRIBUTE_CYCLIC => Ok(Distribution::Cyclic(block)),
                    TESSERA_DISTRIBUTE_NONE => Ok(Distribution::None),
                    other => Err(Failure::invalid(format!(
                        "darray distribution {other} is not a TESSERA_DISTRIBUTE_* value"
                    ))),
                }
            })
            .collect::<Result<Vec<_>, Failure>>()?;
        hand_out(
            Datatype::darray(
                size,
                rank,
                gsizes,
                &distributions,
                psizes,
                order(array_order)?,
                old,
            ),
            out,
        )
    })
}

/// `old` with lower bound `lb` and extent `extent` (MPI_Type_create_resized).
///
/// # Safety
/// `old` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_resized(
    lb: i64,
    extent: i64,
    old: *const TesseraDatatype,
    out: *mut *mut TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let old = unsafe { child(old)? };
        hand_out(Datatype::resized(lb, extent, old), out)
    })
}

/// Size and bounds of a type.
///
/// # Safety
/// `datatype` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_info(
    datatype: *const TesseraDatatype,
    out: *mut TesseraTypeInfo,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let datatype = unsafe { child(datatype)? };
        let info = TesseraTypeInfo {
            size: datatype.size(),
            lb: datatype.lb(),
            extent: datatype.extent(),
            true_lb: datatype.true_lb(),
            true_extent: datatype.true_ub() - datatype.true_lb(),
            depth: datatype.depth(),
        };
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, info, "out") }
    })
}

/// Frees a type handle; types built from it keep their share of the tree. Null is ignored.
///
/// # Safety
/// `datatype` is null or a handle not freed before.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_free(datatype: *mut TesseraDatatype) {
    if !datatype.is_null() {
        // SAFETY: the caller guarantees a live handle, freed once.
        drop(unsafe { Box::from_raw(datatype) });
    }
}

/// The typemap is in order: every entry at a non-negative offset, none before the one
/// preceding it, none overlapping it.
pub const TESSERA_TYPEMAP_ORDERED: c_int = 0;
/// An entry lies at a negative offset.
pub const TESSERA_TYPEMAP_NEGATIVE: c_int = 1;
/// An entry lies before the entry preceding it in the typemap.
pub const TESSERA_TYPEMAP_DECREASING: c_int = 2;
/// An entry starts inside the bytes of the entry preceding it.
pub const TESSERA_TYPEMAP_OVERLAPPING: c_int = 3;

/// Checks the order of the typemap of `instances` instances of a type tiled from offset 0
/// (MPI-IO asks an etype's and a file type's typemap to be non-negative, monotonically
/// non-decreasing and, for a file open for writing, non-overlapping; two instances also
/// catch an extent too small for the data). `*order` gets the first `TESSERA_TYPEMAP_*`
/// breach found (overlap is reported only where the order is non-decreasing), `*offset`
/// the byte offset of the entry that breaks it (0 when ordered). If the stream of
/// `instances` instances is over the datatype engine's byte limit, one instance is checked.
///
/// # Safety
/// `datatype` is a live handle; `order` and `offset` are valid for one write each.
#[no_mangle]
pub unsafe extern "C" fn tessera_type_typemap_order(
    datatype: *const TesseraDatatype,
    instances: u64,
    order: *mut c_int,
    offset: *mut i64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let datatype = unsafe { child(datatype)? };
        let runs = match datatype.all_runs(instances.max(1)) {
            Ok(runs) => runs,
            Err(_) => datatype.all_runs(1)?,
        };
        let mut found = (TESSERA_TYPEMAP_ORDERED, 0i64);
        let mut previous: Option<(i64, i128)> = None;
        for run in runs {
            let end = i128::from(run.offset) + i128::from(run.length);
            if run.offset < 0 {
                found = (TESSERA_TYPEMAP_NEGATIVE, run.offset);
                break;
            }
            if let Some((start, previous_end)) = previous {
                if run.offset < start {
                    found = (TESSERA_TYPEMAP_DECREASING, run.offset);
                    break;
                }
                if i128::from(run.offset) < previous_end && found.0 == TESSERA_TYPEMAP_ORDERED {
                    // Remembered, but a decrease or a negative entry later is worse.
                    found = (TESSERA_TYPEMAP_OVERLAPPING, run.offset);
                }
            }
            previous = Some((run.offset, end.max(previous.map_or(end, |(_, e)| e))));
        }
        // SAFETY: the caller guarantees both are valid for one write.
        unsafe {
            put(order, found.0, "order")?;
            put(offset, found.1, "offset")
        }
    })
}
