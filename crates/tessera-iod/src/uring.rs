//! The batched storage plan: all runs of a request in io_uring submissions of at most
//! `URING_BATCH_ENTRIES_MAX` entries, one `io_uring_enter` each instead of one system call
//! per run.
//!
//! Each thread keeps one ring (storage runs on the blocking pool and, for small requests, on
//! the async workers, so rings are bounded by those thread counts). Every entry of a
//! submission is waited for before the call returns, so the kernel never touches a buffer
//! after its owner has moved on. A short read is finished with `pread` (and zeros past the
//! end of the object); a short write with `pwrite`.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::OnceLock;

use io_uring::{opcode, types, IoUring};
use tessera_proto::limits::URING_BATCH_ENTRIES_MAX;

use crate::run::Run;
use crate::storage::read_full;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Whether this process can use io_uring, with the reason if not (probed once).
pub fn available() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let ring = IoUring::new(8).map_err(|err| format!("io_uring_setup failed: {err}"))?;
            let nop = opcode::Nop::new().build().user_data(0);
            // SAFETY: a no-op entry references no memory.
            unsafe { ring.submission_shared().push(&nop) }
                .map_err(|_| "io_uring submission queue full".to_owned())?;
            ring.submit_and_wait(1)
                .map_err(|err| format!("io_uring_enter failed: {err}"))?;
            Ok(())
        })
        .clone()
}

fn with_ring<T>(work: impl FnOnce(&mut IoUring) -> io::Result<T>) -> io::Result<T> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(IoUring::new(URING_BATCH_ENTRIES_MAX)?);
        }
        let ring = slot.as_mut().expect("ring just made");
        let result = work(ring);
        if result.is_err() {
            // Entries the kernel did not take would go out with the next submission: drop
            // the ring so they never do.
            *slot = None;
        }
        result
    })
}

/// Submits `entries` and waits for all of them; returns each entry's result in order.
///
/// # Safety
/// Every buffer an entry points at must stay valid (and, for reads, not be otherwise
/// accessed) until this function returns.
unsafe fn run_batch(
    ring: &mut IoUring,
    entries: &[io_uring::squeue::Entry],
) -> io::Result<Vec<i32>> {
    debug_assert!(entries.len() <= URING_BATCH_ENTRIES_MAX as usize);
    // SAFETY: the caller keeps the buffers valid until we return, and we return only after
    // every pushed entry has completed (or the ring is dropped with entries never submitted).
    unsafe { ring.submission().push_multiple(entries) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    let mut results = vec![i32::MIN; entries.len()];
    let (mut submitted, mut done, mut failures) = (0usize, 0usize, 0u32);
    while done < entries.len() {
        match ring.submit_and_wait(entries.len() - done) {
            Ok(count) => {
                submitted += count;
                failures = 0;
            }
            Err(err) => {
                let transient = matches!(
                    err.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                );
                failures += 1;
                if submitted == done && (!transient || failures > 1000) {
                    // Nothing is in flight: the entries never submitted die with the ring.
                    return Err(err);
                }
                // Entries in flight still point at the caller's buffers: wait them out.
                if failures > 100_000 {
                    tracing::error!("io_uring_enter keeps failing with entries in flight: {err}");
                    std::process::abort();
                }
            }
        }
        for completion in ring.completion() {
            let index = usize::try_from(completion.user_data()).expect("index fits usize");
            results[index] = completion.result();
            done += 1;
        }
    }
    Ok(results)
}

fn length_of(run: &Run) -> usize {
    usize::try_from(run.length).expect("a run lies within one bulk buffer")
}

/// Reads every run into `buffer[run.data..]`; bytes past the end of the object read as zeros.
pub fn read(file: &File, runs: &[Run], buffer: &mut [u8]) -> io::Result<()> {
    let fd = types::Fd(file.as_raw_fd());
    for group in runs.chunks(URING_BATCH_ENTRIES_MAX as usize) {
        let entries: Vec<_> = group
            .iter()
            .enumerate()
            .map(|(index, run)| {
                let target = &mut buffer[run.data..run.data + length_of(run)];
                opcode::Read::new(
                    fd,
                    target.as_mut_ptr(),
                    u32::try_from(target.len()).expect("run under 4 GiB"),
                )
                .offset(run.offset)
                .build()
                .user_data(index as u64)
            })
            .collect();
        // SAFETY: `buffer` is borrowed mutably for the whole call and each entry points into
        // a distinct in-bounds range of it.
        let results = with_ring(|ring| unsafe { run_batch(ring, &entries) })?;
        for (run, result) in group.iter().zip(results) {
            let done =
                usize::try_from(result).map_err(|_| io::Error::from_raw_os_error(-result))?;
            let target = &mut buffer[run.data..run.data + length_of(run)];
            if done < target.len() {
                read_full(file, &mut target[done..], run.offset + done as u64)?;
            }
        }
    }
    Ok(())
}

/// Writes `data[run.data..]` to every run. Runs must not overlap (their order in a batch is
/// not kept).
pub fn write(file: &File, runs: &[Run], data: &[u8]) -> io::Result<()> {
    let fd = types::Fd(file.as_raw_fd());
    for group in runs.chunks(URING_BATCH_ENTRIES_MAX as usize) {
        let entries: Vec<_> = group
            .iter()
            .enumerate()
            .map(|(index, run)| {
                let source = &data[run.data..run.data + length_of(run)];
                opcode::Write::new(
                    fd,
                    source.as_ptr(),
                    u32::try_from(source.len()).expect("run under 4 GiB"),
                )
                .offset(run.offset)
                .build()
                .user_data(index as u64)
            })
            .collect();
        // SAFETY: `data` is borrowed for the whole call; the kernel only reads from it.
        let results = with_ring(|ring| unsafe { run_batch(ring, &entries) })?;
        for (run, result) in group.iter().zip(results) {
            let done =
                usize::try_from(result).map_err(|_| io::Error::from_raw_os_error(-result))?;
            let source = &data[run.data..run.data + length_of(run)];
            if done < source.len() {
                file.write_all_at(&source[done..], run.offset + done as u64)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_reads_and_writes_match_the_file() {
        if let Err(reason) = available() {
            crate::not_run::ignored_at_run_time(&format!("io_uring is unavailable: {reason}"));
            return;
        }
        let file = tempfile::tempfile().unwrap();
        // 600 runs: three submissions.
        let runs: Vec<Run> = (0..600)
            .map(|index| Run {
                offset: index * 10,
                length: 7,
                data: usize::try_from(index * 7).unwrap(),
            })
            .collect();
        let data: Vec<u8> = (0..600u32 * 7)
            .map(|index| u8::try_from(index % 253).unwrap())
            .collect();
        write(&file, &runs, &data).unwrap();
        // The last run ends at 5997.
        let mut whole = vec![0u8; 5997];
        file.read_exact_at(&mut whole, 0).unwrap();
        for (index, run) in runs.iter().enumerate() {
            let at = usize::try_from(run.offset).unwrap();
            assert_eq!(&whole[at..at + 7], &data[index * 7..index * 7 + 7]);
            if at + 10 <= whole.len() {
                assert_eq!(&whole[at + 7..at + 10], &[0, 0, 0]);
            }
        }
        let mut back = vec![0xFFu8; data.len()];
        read(&file, &runs, &mut back).unwrap();
        assert_eq!(back, data);
        // Past the end: zeros, and a run straddling the end reads what exists.
        let tail = [
            Run {
                offset: 5995,
                length: 10,
                data: 0,
            },
            Run {
                offset: 1 << 20,
                length: 4,
                data: 10,
            },
        ];
        let mut buffer = [0xFFu8; 14];
        read(&file, &tail, &mut buffer).unwrap();
        assert_eq!(&buffer[..2], &whole[5995..5997]);
        assert_eq!(&buffer[2..], &[0; 12]);
    }
}
