//! The caller's memory: a buffer pointer, a count and a memory type, cut into byte slices.
//!
//! An access hands the client library its memory as slices in stream order. They are cut
//! here, at the FFI boundary, because only here is there a raw pointer: the memory type's
//! runs (offsets relative to the buffer pointer, possibly negative, or absolute addresses
//! when the pointer is null, as with `MPI_BOTTOM`) become one slice each. Only the bytes the
//! type selects are ever made into slices, so holes between them need not be mapped. For a
//! read the runs must not overlap, since two mutable slices may not alias.

use tessera_client::Datatype;

use crate::error::Failure;

/// Most runs one access's memory type may give (each becomes a slice of 16 bytes).
pub const TESSERA_MEMORY_RUNS_MAX: usize = 1 << 22;

/// The runs of `count` instances of `memtype` (or `count` bytes with no type), as
/// (offset from the buffer, length), in stream order, and their total.
pub(crate) fn memory_runs(
    count: u64,
    memtype: Option<&Datatype>,
) -> Result<(Vec<(isize, usize)>, u64), Failure> {
    let too_large = || Failure::limit(format!("memory of {count} elements is too large"));
    let Some(memtype) = memtype else {
        let length = usize::try_from(count)
            .ok()
            .filter(|&length| isize::try_from(length).is_ok())
            .ok_or_else(too_large)?;
        let runs = if length == 0 {
            Vec::new()
        } else {
            vec![(0, length)]
        };
        return Ok((runs, count));
    };
    let mut runs = Vec::new();
    let mut total = 0u64;
    for run in memtype.all_runs(count)? {
        if runs.len() == TESSERA_MEMORY_RUNS_MAX {
            return Err(Failure::limit(format!(
                "the memory type gives more than {TESSERA_MEMORY_RUNS_MAX} runs (tessera_memory_runs_max)"
            )));
        }
        let offset = isize::try_from(run.offset).map_err(|_| too_large())?;
        let length = usize::try_from(run.length)
            .ok()
            .filter(|&length| isize::try_from(length).is_ok())
            .ok_or_else(too_large)?;
        runs.push((offset, length));
        total += run.length;
    }
    Ok((runs, total))
}

/// The address of a run: `buffer + offset`, or the absolute address `offset` when the
/// buffer is null (`MPI_BOTTOM`). Refuses null results and runs that wrap the address space.
fn run_start(buffer: *const u8, offset: isize, length: usize) -> Result<*const u8, Failure> {
    let bad = || {
        Failure::invalid(format!(
            "a memory run of {length} bytes at offset {offset} from buffer {buffer:p} leaves the address space"
        ))
    };
    let start = if buffer.is_null() {
        usize::try_from(offset).map_err(|_| bad())? as *const u8
    } else {
        buffer.wrapping_offset(offset)
    };
    if start.is_null() || (start as usize).checked_add(length).is_none() {
        return Err(bad());
    }
    Ok(start)
}

/// The memory of a write as slices.
///
/// # Safety
/// Every run lies in memory that is valid for reads for `'a` and not written meanwhile (the
/// caller's contract for a buffer described by a pointer, a count and a type).
pub(crate) unsafe fn slices<'a>(
    buffer: *const u8,
    runs: &[(isize, usize)],
) -> Result<Vec<&'a [u8]>, Failure> {
    runs.iter()
        .map(|&(offset, length)| {
            let start = run_start(buffer, offset, length)?;
            // SAFETY: the caller guarantees the run is readable for 'a; start is not null
            // and the run does not wrap.
            Ok(unsafe { std::slice::from_raw_parts(start, length) })
        })
        .collect()
}

/// The memory of a read as mutable slices; runs that overlap are refused.
///
/// # Safety
/// Every run lies in memory that is valid for writes for `'a` and not used otherwise
/// meanwhile.
pub(crate) unsafe fn slices_mut<'a>(
    buffer: *mut u8,
    runs: &[(isize, usize)],
) -> Result<Vec<&'a mut [u8]>, Failure> {
    let mut sorted: Vec<(isize, usize)> = runs.to_vec();
    sorted.sort_unstable();
    for pair in sorted.windows(2) {
        let (offset, length) = pair[0];
        if offset.saturating_add_unsigned(length) > pair[1].0 {
            return Err(Failure::invalid(format!(
                "the memory type selects the byte at offset {} twice; a read cannot land there twice",
                pair[1].0
            )));
        }
    }
    runs.iter()
        .map(|&(offset, length)| {
            let start = run_start(buffer, offset, length)?.cast_mut();
            // SAFETY: the caller guarantees the run is writable for 'a and used by nothing
            // else; the runs are disjoint (checked above), so the slices do not alias.
            Ok(unsafe { std::slice::from_raw_parts_mut(start, length) })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_a_vector_and_overlaps_refused_for_reads() {
        let vector = Datatype::vector(3, 2, 4, &Datatype::byte()).unwrap();
        let (runs, total) = memory_runs(1, Some(&vector)).unwrap();
        assert_eq!(runs, vec![(0, 2), (4, 2), (8, 2)]);
        assert_eq!(total, 6);
        let mut buffer = [0u8; 10];
        // SAFETY: every run lies inside `buffer`.
        let slices = unsafe { slices_mut(buffer.as_mut_ptr(), &runs) }.unwrap();
        assert_eq!(slices.len(), 3);
        // A type that selects bytes twice (negative stride overlapping) cannot be read into.
        let twice = Datatype::hindexed(&[4, 4], &[0, 2], &Datatype::byte()).unwrap();
        let (runs, _) = memory_runs(1, Some(&twice)).unwrap();
        // SAFETY: every run lies inside `buffer`.
        let refused = unsafe { slices_mut(buffer.as_mut_ptr(), &runs) };
        assert!(refused.unwrap_err().message.contains("twice"));
        let (plain, total) = memory_runs(5, None).unwrap();
        assert_eq!((plain, total), (vec![(0, 5)], 5));
    }
}
