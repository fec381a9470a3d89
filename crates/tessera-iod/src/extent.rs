//! Server-local extent locks: byte ranges of one object, shared for readers and exclusive
//! for writers.
//!
//! Every request holds the lock over the extent its pieces span while it makes its storage
//! calls, so a request is atomic on this server (a reader sees all of a concurrent
//! overlapping write or none of it) and a sieving read-modify-write cannot interleave with
//! another write to the bytes between its pieces. Requests on disjoint extents of one object
//! run at the same time. Holders never wait for anything while holding, so waiting cannot
//! deadlock; there are at most `SERVER_REQUESTS_INFLIGHT_MAX` holders per server.

use std::sync::{Condvar, Mutex};

/// One granted extent.
#[derive(Debug, Clone, Copy)]
struct Held {
    id: u64,
    start: u64,
    end: u64,
    exclusive: bool,
}

impl Held {
    fn conflicts(&self, start: u64, end: u64, exclusive: bool) -> bool {
        (self.exclusive || exclusive) && self.start < end && start < self.end
    }
}

#[derive(Debug, Default)]
struct Table {
    held: Vec<Held>,
    next_id: u64,
    /// Exclusive requests waiting; new shared requests that conflict with one of them wait
    /// behind it so writers are not starved by a stream of readers.
    waiting_writers: Vec<(u64, u64)>,
}

impl Table {
    /// Whether `[start, end)` can be held now: no conflicting holder and, for a reader, no
    /// writer waiting for bytes it covers.
    fn free(&self, start: u64, end: u64, exclusive: bool) -> bool {
        let blocked_by_holder = self
            .held
            .iter()
            .any(|held| held.conflicts(start, end, exclusive));
        let blocked_by_writer = !exclusive
            && self
                .waiting_writers
                .iter()
                .any(|&(wstart, wend)| wstart < end && start < wend);
        !blocked_by_holder && !blocked_by_writer
    }
}

/// The extent locks of one object.
#[derive(Debug, Default)]
pub struct ExtentLocks {
    table: Mutex<Table>,
    released: Condvar,
}

/// A held extent; released on drop.
#[derive(Debug)]
pub struct ExtentGuard<'a> {
    locks: &'a ExtentLocks,
    id: u64,
}

impl ExtentLocks {
    /// Waits until `[start, end)` can be held (`exclusive` for writers) and holds it.
    pub fn lock(&self, start: u64, end: u64, exclusive: bool) -> ExtentGuard<'_> {
        let mut table = self.table.lock().expect("extent table lock");
        let mut queued = false;
        while !table.free(start, end, exclusive) {
            if exclusive && !queued {
                table.waiting_writers.push((start, end));
                queued = true;
            }
            table = self.released.wait(table).expect("extent table lock");
        }
        if queued {
            let position = table
                .waiting_writers
                .iter()
                .position(|&entry| entry == (start, end))
                .expect("a queued writer is listed");
            table.waiting_writers.swap_remove(position);
        }
        self.hold(&mut table, start, end, exclusive)
    }

    /// Holds `[start, end)` if that needs no wait, else `None`.
    pub fn try_lock(&self, start: u64, end: u64, exclusive: bool) -> Option<ExtentGuard<'_>> {
        let mut table = self.table.lock().expect("extent table lock");
        table
            .free(start, end, exclusive)
            .then(|| self.hold(&mut table, start, end, exclusive))
    }

    fn hold(&self, table: &mut Table, start: u64, end: u64, exclusive: bool) -> ExtentGuard<'_> {
        table.next_id += 1;
        let id = table.next_id;
        table.held.push(Held {
            id,
            start,
            end,
            exclusive,
        });
        ExtentGuard { locks: self, id }
    }

    /// Lets go of the extent held as `id` now, whoever holds it: its guard releases nothing
    /// later. For a holder stuck where it cannot drop its guard (a one-sided push that waits
    /// on the client's memory), so others do not wait on it.
    pub fn revoke(&self, id: u64) {
        let mut table = self.table.lock().expect("extent table lock");
        if let Some(position) = table.held.iter().position(|held| held.id == id) {
            table.held.swap_remove(position);
            drop(table);
            self.released.notify_all();
        }
    }

    /// Extents held now (for tests and diagnostics).
    pub fn held(&self) -> usize {
        self.table.lock().expect("extent table lock").held.len()
    }
}

impl ExtentGuard<'_> {
    /// The held extent's id (for [`ExtentLocks::revoke`]).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for ExtentGuard<'_> {
    fn drop(&mut self) {
        let mut table = self.locks.table.lock().expect("extent table lock");
        if let Some(position) = table.held.iter().position(|held| held.id == self.id) {
            table.held.swap_remove(position);
        }
        drop(table);
        self.locks.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn readers_share_disjoint_writers_proceed_overlapping_writers_wait() {
        let locks = Arc::new(ExtentLocks::default());
        let first = locks.lock(0, 100, false);
        let second = locks.lock(50, 150, false);
        let disjoint = locks.lock(200, 300, true);
        assert_eq!(locks.held(), 3);
        let entered = Arc::new(AtomicBool::new(false));
        let writer = {
            let (locks, entered) = (locks.clone(), entered.clone());
            std::thread::spawn(move || {
                let _guard = locks.lock(90, 210, true);
                entered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!entered.load(Ordering::SeqCst), "overlaps held extents");
        drop((first, second));
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !entered.load(Ordering::SeqCst),
            "still overlaps the disjoint writer"
        );
        drop(disjoint);
        writer.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
        assert_eq!(locks.held(), 0);
    }

    #[test]
    fn a_waiting_writer_holds_back_new_overlapping_readers() {
        let locks = Arc::new(ExtentLocks::default());
        let reader = locks.lock(0, 10, false);
        let writer = {
            let locks = locks.clone();
            std::thread::spawn(move || drop(locks.lock(0, 10, true)))
        };
        while locks.table.lock().unwrap().waiting_writers.is_empty() {
            std::thread::yield_now();
        }
        let late_reader = {
            let locks = locks.clone();
            std::thread::spawn(move || drop(locks.lock(5, 6, false)))
        };
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(locks.held(), 1, "the late reader waits behind the writer");
        drop(reader);
        writer.join().unwrap();
        late_reader.join().unwrap();
        assert_eq!(locks.held(), 0);
    }
}
