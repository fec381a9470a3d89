//! Views declared on this server: file types kept under (handle, view id).
//!
//! A client declares a view once ([`tessera_proto::DeclareView`]); later view requests carry
//! only the id and a byte range, and the server walks the stored type for its share. The
//! table holds at most [`IOD_VIEWS_MAX`] views; past it the least recently used one is
//! dropped. A dropped or never-declared view (after a restart, say) is answered with
//! `UnknownView`, and the client declares it again, so eviction costs a round trip, never
//! correctness. Views of a removed object are dropped with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tessera_proto::limits::IOD_VIEWS_MAX;
use tessera_proto::{ErrorCode, FileType, RemoteError};

#[derive(Debug)]
struct Entry {
    file: Arc<FileType>,
    used: u64,
}

#[derive(Debug, Default)]
struct Table {
    views: HashMap<(u64, u64), Entry>,
    clock: u64,
}

/// The declared views of one server.
#[derive(Debug, Default)]
pub struct ViewTable {
    table: Mutex<Table>,
}

impl ViewTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Declares `view_id` of `handle`. Declaring the same file type again is harmless;
    /// another file type under a declared id is refused.
    pub fn declare(&self, handle: u64, view_id: u64, file: FileType) -> Result<(), RemoteError> {
        let mut table = self.lock();
        table.clock += 1;
        let now = table.clock;
        if let Some(entry) = table.views.get_mut(&(handle, view_id)) {
            if *entry.file != file {
                return Err(RemoteError::new(
                    ErrorCode::InvalidArgument,
                    format!("view {view_id:#x} of handle {handle:#x} is declared with another file type"),
                ));
            }
            entry.used = now;
            return Ok(());
        }
        if table.views.len() >= IOD_VIEWS_MAX {
            let oldest = table
                .views
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(&key, _)| key)
                .expect("the table is full, so not empty");
            table.views.remove(&oldest);
            tracing::debug!(
                "views: dropped view {:#x} of handle {:#x} (iod_views_max {IOD_VIEWS_MAX})",
                oldest.1,
                oldest.0
            );
        }
        table.views.insert(
            (handle, view_id),
            Entry {
                file: Arc::new(file),
                used: now,
            },
        );
        Ok(())
    }

    /// The file type of a declared view.
    pub fn get(&self, handle: u64, view_id: u64) -> Result<Arc<FileType>, RemoteError> {
        let mut table = self.lock();
        table.clock += 1;
        let now = table.clock;
        match table.views.get_mut(&(handle, view_id)) {
            Some(entry) => {
                entry.used = now;
                Ok(entry.file.clone())
            }
            None => Err(RemoteError::new(
                ErrorCode::UnknownView,
                format!("view {view_id:#x} of handle {handle:#x} is not declared here"),
            )),
        }
    }

    /// Forgets one view.
    pub fn release(&self, handle: u64, view_id: u64) {
        self.lock().views.remove(&(handle, view_id));
    }

    /// Forgets every view of a handle.
    pub fn release_handle(&self, handle: u64) {
        self.lock()
            .views
            .retain(|&(view_handle, _), _| view_handle != handle);
    }

    /// Views held.
    pub fn len(&self) -> usize {
        self.lock().views.len()
    }

    /// No views held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redeclaring_is_idempotent_but_a_different_type_is_refused() {
        let views = ViewTable::default();
        let file = FileType::default();
        views.declare(1, 7, file.clone()).unwrap();
        views.declare(1, 7, file.clone()).unwrap();
        assert_eq!(views.len(), 1);
        let other = FileType {
            displacement: 8,
            ..file
        };
        assert_eq!(
            views.declare(1, 7, other).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        assert_eq!(views.get(1, 8).unwrap_err().code, ErrorCode::UnknownView);
        views.release_handle(1);
        assert!(views.is_empty());
    }

    #[test]
    fn the_least_recently_used_view_goes_first() {
        let views = ViewTable::default();
        for id in 0..IOD_VIEWS_MAX as u64 {
            views.declare(1, id, FileType::default()).unwrap();
        }
        views.get(1, 0).unwrap();
        views.declare(1, u64::MAX, FileType::default()).unwrap();
        assert_eq!(views.len(), IOD_VIEWS_MAX);
        assert!(views.get(1, 0).is_ok(), "recently used view kept");
        assert_eq!(views.get(1, 1).unwrap_err().code, ErrorCode::UnknownView);
    }
}
