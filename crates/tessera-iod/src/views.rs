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

use tessera_proto::access::{MatchedView, Share};
use tessera_proto::limits::{IOD_VIEWS_BYTES_MAX, IOD_VIEWS_MAX, IOD_VIEW_KEPT_PIECES_MAX};
use tessera_proto::{ErrorCode, FileType, Piece, RemoteError};

/// A declared view as its requests use it.
#[derive(Debug, Clone)]
pub struct Declared {
    /// The file type, layout and this server's position.
    pub file: Arc<FileType>,
    /// Where the view is one server's bytes of a pattern layout: its share of any range,
    /// without a walk (found once, at declaration).
    pub matched: Option<MatchedView>,
    /// A declared view's last share, for its next request of the same range (none for the
    /// type of a datatype request, which is not asked again).
    pub kept: Option<Arc<KeptShare>>,
}

impl Declared {
    /// The file type of a datatype request, which names it inline: never matched, since
    /// finding a match costs as much as the walk it would save.
    pub fn of_type(file: FileType) -> Self {
        Self {
            file: Arc::new(file),
            matched: None,
            kept: None,
        }
    }
}

/// The share of a view's last request: programs access the same range of a view call after
/// call, and the next request of that range (with the same stream ranges) is then served
/// without a walk. One share of at most [`IOD_VIEW_KEPT_PIECES_MAX`] pieces per view, so the
/// table's views keep at most `IOD_VIEWS_MAX` such shares.
#[derive(Debug, Default)]
pub struct KeptShare(Mutex<Option<Kept>>);

#[derive(Debug)]
struct Kept {
    start: u64,
    end: u64,
    ranges: Vec<Piece>,
    share: Share,
}

impl KeptShare {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kept>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The kept share of stream bytes `[start, end)` walked over `ranges`, if it is that one.
    pub fn get(&self, start: u64, end: u64, ranges: &[Piece]) -> Option<Share> {
        self.lock()
            .as_ref()
            .filter(|kept| (kept.start, kept.end, &kept.ranges[..]) == (start, end, ranges))
            .map(|kept| kept.share.clone())
    }

    /// Keeps `share` of `[start, end)` over `ranges` in place of the last one, unless it has
    /// more than [`IOD_VIEW_KEPT_PIECES_MAX`] pieces (the last one is then kept).
    pub fn keep(&self, start: u64, end: u64, ranges: &[Piece], share: &Share) {
        if share.pieces.len() > IOD_VIEW_KEPT_PIECES_MAX {
            return;
        }
        *self.lock() = Some(Kept {
            start,
            end,
            ranges: ranges.to_vec(),
            share: share.clone(),
        });
    }
}

#[derive(Debug)]
struct Entry {
    view: Declared,
    used: u64,
    /// Bytes the view counts against [`IOD_VIEWS_BYTES_MAX`].
    bytes: u64,
}

#[derive(Debug, Default)]
struct Table {
    views: HashMap<(u64, u64), Entry>,
    clock: u64,
    /// Bytes of the views held.
    bytes: u64,
}

impl Table {
    fn remove(&mut self, key: (u64, u64)) {
        if let Some(entry) = self.views.remove(&key) {
            self.bytes -= entry.bytes;
        }
    }

    /// Drops the least recently used views until one of `bytes` more fits both limits.
    fn make_room(&mut self, bytes: u64) {
        while !self.views.is_empty()
            && (self.views.len() >= IOD_VIEWS_MAX || self.bytes + bytes > IOD_VIEWS_BYTES_MAX)
        {
            let oldest = self
                .views
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(&key, _)| key)
                .expect("not empty");
            self.remove(oldest);
            tracing::debug!(
                "views: dropped view {:#x} of handle {:#x} (iod_views_max {IOD_VIEWS_MAX}, \
                 iod_views_bytes_max {IOD_VIEWS_BYTES_MAX})",
                oldest.1,
                oldest.0
            );
        }
    }
}

/// Bytes a kept share may take at most.
const KEPT_SHARE_BYTES_MAX: u64 = (IOD_VIEW_KEPT_PIECES_MAX * std::mem::size_of::<Piece>()) as u64;

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

    /// Declares `view_id` of `handle`, whose declaration took `body_bytes` (counted, with the
    /// most its kept share takes, against [`IOD_VIEWS_BYTES_MAX`]). Declaring the same file
    /// type again is harmless; another file type under a declared id is refused.
    pub fn declare(
        &self,
        handle: u64,
        view_id: u64,
        file: FileType,
        body_bytes: u64,
    ) -> Result<(), RemoteError> {
        let matched = MatchedView::of(&file.layout, &file.filetype, file.displacement);
        let mut table = self.lock();
        table.clock += 1;
        let now = table.clock;
        if let Some(entry) = table.views.get_mut(&(handle, view_id)) {
            if *entry.view.file != file {
                return Err(RemoteError::new(
                    ErrorCode::InvalidArgument,
                    format!("view {view_id:#x} of handle {handle:#x} is declared with another file type"),
                ));
            }
            entry.used = now;
            return Ok(());
        }
        let bytes = body_bytes + KEPT_SHARE_BYTES_MAX;
        table.make_room(bytes);
        table.bytes += bytes;
        table.views.insert(
            (handle, view_id),
            Entry {
                view: Declared {
                    file: Arc::new(file),
                    matched,
                    kept: Some(Arc::default()),
                },
                used: now,
                bytes,
            },
        );
        Ok(())
    }

    /// A declared view.
    pub fn get(&self, handle: u64, view_id: u64) -> Result<Declared, RemoteError> {
        let mut table = self.lock();
        table.clock += 1;
        let now = table.clock;
        match table.views.get_mut(&(handle, view_id)) {
            Some(entry) => {
                entry.used = now;
                Ok(entry.view.clone())
            }
            None => Err(RemoteError::new(
                ErrorCode::UnknownView,
                format!("view {view_id:#x} of handle {handle:#x} is not declared here"),
            )),
        }
    }

    /// Forgets one view.
    pub fn release(&self, handle: u64, view_id: u64) {
        self.lock().remove((handle, view_id));
    }

    /// Forgets every view of a handle.
    pub fn release_handle(&self, handle: u64) {
        let mut table = self.lock();
        let released: Vec<(u64, u64)> = table
            .views
            .keys()
            .filter(|&&(view_handle, _)| view_handle == handle)
            .copied()
            .collect();
        for key in released {
            table.remove(key);
        }
    }

    /// Bytes of the views held, as counted against [`IOD_VIEWS_BYTES_MAX`].
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
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
    fn a_kept_share_answers_only_its_own_range_and_a_large_one_is_not_kept() {
        let kept = KeptShare::default();
        let share = |pieces: usize| Share {
            pieces: (0..pieces as u64).map(|i| Piece::new(i * 32, 16)).collect(),
            bytes: pieces as u64 * 16,
        };
        let ranges = [Piece::new(0, 64), Piece::new(256, 64)];
        assert_eq!(kept.get(0, 512, &ranges), None);
        kept.keep(0, 512, &ranges, &share(8));
        assert_eq!(kept.get(0, 512, &ranges), Some(share(8)));
        assert_eq!(kept.get(0, 320, &ranges), None, "another end");
        assert_eq!(kept.get(16, 512, &ranges), None, "another start");
        assert_eq!(kept.get(0, 512, &ranges[..1]), None, "other ranges");
        // Past the limit the share is not kept, and the last one stays.
        kept.keep(0, 4096, &[], &share(IOD_VIEW_KEPT_PIECES_MAX + 1));
        assert_eq!(kept.get(0, 4096, &[]), None);
        assert_eq!(kept.get(0, 512, &ranges), Some(share(8)));
        kept.keep(0, 4096, &[], &share(IOD_VIEW_KEPT_PIECES_MAX));
        assert_eq!(
            kept.get(0, 4096, &[]),
            Some(share(IOD_VIEW_KEPT_PIECES_MAX))
        );
        assert_eq!(kept.get(0, 512, &ranges), None, "one share per view");
    }

    #[test]
    fn redeclaring_is_idempotent_but_a_different_type_is_refused() {
        let views = ViewTable::default();
        let file = FileType::default();
        views.declare(1, 7, file.clone(), 0).unwrap();
        views.declare(1, 7, file.clone(), 0).unwrap();
        assert_eq!(views.len(), 1);
        let other = FileType {
            displacement: 8,
            ..file
        };
        assert_eq!(
            views.declare(1, 7, other, 0).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        assert_eq!(views.get(1, 8).unwrap_err().code, ErrorCode::UnknownView);
        views.release_handle(1);
        assert!(views.is_empty());
    }

    #[test]
    fn a_view_matching_a_pattern_layout_is_found_matched_at_declaration() {
        use tessera_proto::{Datatype, Layout, PatternLayout};
        // Two servers, each 4 bytes of every 8-byte row.
        let half = |first| {
            let block = Datatype::hindexed(&[4], &[first], &Datatype::byte()).unwrap();
            Datatype::resized(0, 8, &block).unwrap()
        };
        let pattern = PatternLayout::new(vec![0, 1], vec![half(0), half(4)]).unwrap();
        let views = ViewTable::default();
        let file = FileType {
            layout: Layout::Pattern(Arc::new(pattern)),
            position: 0,
            filetype: half(4),
            displacement: 16,
        };
        views.declare(1, 1, file.clone(), 0).unwrap();
        let matched = views.get(1, 1).unwrap().matched;
        assert_eq!(
            matched,
            Some(MatchedView {
                position: 1,
                local_base: 8
            })
        );
        let other = FileType {
            filetype: Datatype::byte(),
            ..file
        };
        views.declare(1, 2, other, 0).unwrap();
        assert_eq!(views.get(1, 2).unwrap().matched, None);
    }

    #[test]
    fn the_least_recently_used_view_goes_first() {
        let views = ViewTable::default();
        for id in 0..IOD_VIEWS_MAX as u64 {
            views.declare(1, id, FileType::default(), 0).unwrap();
        }
        views.get(1, 0).unwrap();
        views.declare(1, u64::MAX, FileType::default(), 0).unwrap();
        assert_eq!(views.len(), IOD_VIEWS_MAX);
        assert!(views.get(1, 0).is_ok(), "recently used view kept");
        assert_eq!(views.get(1, 1).unwrap_err().code, ErrorCode::UnknownView);
    }

    #[test]
    fn past_the_byte_limit_the_least_recently_used_views_go_and_releases_give_bytes_back() {
        let views = ViewTable::default();
        // Each a third of the budget, so three never fit.
        let body = IOD_VIEWS_BYTES_MAX / 3;
        let charge = body + KEPT_SHARE_BYTES_MAX;
        views.declare(1, 1, FileType::default(), body).unwrap();
        views.declare(1, 2, FileType::default(), body).unwrap();
        assert_eq!(views.bytes(), 2 * charge);
        views.get(1, 1).unwrap();
        views.declare(2, 3, FileType::default(), body).unwrap();
        assert_eq!(views.len(), 2);
        assert!(views.get(1, 1).is_ok(), "recently used view kept");
        assert_eq!(views.get(1, 2).unwrap_err().code, ErrorCode::UnknownView);
        assert_eq!(views.bytes(), 2 * charge);
        // Declaring a held view again charges nothing more.
        views.declare(2, 3, FileType::default(), body).unwrap();
        assert_eq!(views.bytes(), 2 * charge);
        views.release(1, 1);
        assert_eq!(views.bytes(), charge);
        views.declare(2, 4, FileType::default(), 10).unwrap();
        views.release_handle(2);
        assert!(views.is_empty());
        assert_eq!(views.bytes(), 0);
    }
}
