//! Datatype I/O and views: accesses described by types, never by lists on the wire.
//!
//! A datatype call names a memory type (with a count) over the caller's buffer and a file
//! type tiled from a displacement. The client walks the file type once to plan one request
//! per involved server ([`Plan::from_runs`]) and to cut its memory into each request's
//! slices; the request itself carries only the encoded type and a stream range, and the
//! server walks the type again for its own share. A [`View`] goes one step further: the
//! file type is declared on the servers once ([`File::set_view`]) and every later access
//! sends only (view id, offset, length). A server that has lost a view (a restart, or
//! eviction past `IOD_VIEWS_MAX`) answers `UnknownView`; the view declares itself again and
//! repeats the call, so the caller never sees it.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tessera_net::local::policy::Transfer;
use tessera_net::{PieceData, PieceDataMut};
use tessera_proto::access::{check_file_range, touched_positions, MatchedView};
use tessera_proto::limits::{FILE_BYTES_MAX, MESSAGE_BULK_BYTES_MAX};
use tessera_proto::TransferMode;
use tessera_proto::{
    Capability, Datatype, DeclareView, ErrorCode, FileType, IoReply, Piece, ReadType, ReadView,
    ReleaseView, RemoteError, Request, WriteType, WriteView,
};

use crate::encodable::check_encodable;
use crate::error::ClientError;
use crate::file::{File, IoReport};
use crate::plan::{Plan, RequestPlan};

/// The byte ranges of the caller's buffer that a memory type selects, in stream order.
struct MemoryRuns {
    runs: Vec<(usize, usize)>,
    total: u64,
}

impl MemoryRuns {
    fn new(memory_len: usize, memtype: &Datatype, count: u64) -> Result<Self, ClientError> {
        let total = u128::from(memtype.size()) * u128::from(count);
        let total = u64::try_from(total)
            .ok()
            .filter(|&total| total <= FILE_BYTES_MAX)
            .ok_or_else(|| ClientError::LimitExceeded {
                what: format!(
                    "{count} instances of a memory type of {} bytes",
                    memtype.size()
                ),
                limit: "file_bytes_max",
                value: u64::try_from(total).unwrap_or(u64::MAX),
                max: FILE_BYTES_MAX,
            })?;
        let Some((low, high)) = memtype.span(0, 0, total) else {
            return Ok(Self {
                runs: Vec::new(),
                total: 0,
            });
        };
        if low < 0 || high > memory_len as i128 {
            return Err(ClientError::InvalidArgument(format!(
                "the memory type reaches bytes {low}..{high}, outside the buffer of {memory_len} bytes"
            )));
        }
        let runs = memtype
            .runs(0, 0, total)
            .map_err(|err| ClientError::InvalidArgument(err.to_string()))?
            .map(|run| {
                (
                    usize::try_from(run.offset).expect("inside the buffer"),
                    usize::try_from(run.length).expect("inside the buffer"),
                )
            })
            .collect();
        Ok(Self { runs, total })
    }

    fn contiguous(length: usize) -> Self {
        Self {
            runs: if length == 0 {
                Vec::new()
            } else {
                vec![(0, length)]
            },
            total: length as u64,
        }
    }

    fn slices<'a>(&self, memory: &'a [u8]) -> Vec<&'a [u8]> {
        self.runs
            .iter()
            .map(|&(offset, length)| &memory[offset..offset + length])
            .collect()
    }

    /// Disjoint mutable slices; a memory type that selects a byte twice cannot be read into.
    fn slices_mut<'a>(&self, memory: &'a mut [u8]) -> Result<Vec<&'a mut [u8]>, ClientError> {
        let mut sorted = self.runs.clone();
        sorted.sort_unstable();
        for pair in sorted.windows(2) {
            if pair[0].0 + pair[0].1 > pair[1].0 {
                return Err(ClientError::InvalidArgument(format!(
                    "the memory type selects byte {} of the buffer twice; a read cannot land there twice",
                    pair[1].0
                )));
            }
        }
        let base = memory.as_mut_ptr();
        Ok(self
            .runs
            .iter()
            .map(|&(offset, length)| {
                // SAFETY: every run lies inside `memory` (checked against the type's true
                // bounds in `new`), no two runs overlap (checked above), and the slices
                // borrow `memory` mutably for 'a, so nothing else can reach those bytes.
                unsafe { std::slice::from_raw_parts_mut(base.add(offset), length) }
            })
            .collect())
    }
}

/// Checks stream bytes `[start, end)` of `filetype` tiled from `displacement` for an
/// `operation` on `file`. A range reaching past `file_bytes_max` is a `LimitExceeded`, as
/// it is for list calls; any other refusal is a bad argument. Both name the file.
fn check_range(
    file: &File,
    operation: &str,
    filetype: &Datatype,
    displacement: u64,
    start: u64,
    end: u64,
) -> Result<(), ClientError> {
    check_file_range(filetype, displacement, start, end).map_err(|error: RemoteError| {
        let what = format!("{operation} of {}", file.path);
        match error.code {
            ErrorCode::LimitExceeded => ClientError::LimitExceeded {
                what,
                limit: "file_bytes_max",
                value: if displacement > FILE_BYTES_MAX {
                    displacement
                } else {
                    #[allow(clippy::cast_possible_wrap)] // displacement ≤ file_bytes_max
                    filetype
                        .span(displacement as i64, start, end)
                        .map_or(u64::MAX, |(_, high)| {
                            u64::try_from(high).unwrap_or(u64::MAX)
                        })
                },
                max: FILE_BYTES_MAX,
            },
            _ => ClientError::InvalidArgument(format!("{what}: file type: {}", error.message)),
        }
    })
}

/// The runs of stream bytes `[start, end)` of a file type as file pieces, checked first
/// ([`check_range`]).
fn file_runs<'a>(
    file: &File,
    operation: &str,
    filetype: &'a Datatype,
    displacement: u64,
    start: u64,
    end: u64,
) -> Result<impl Iterator<Item = Piece> + 'a, ClientError> {
    check_range(file, operation, filetype, displacement, start, end)?;
    checked_runs(filetype, displacement, start, end)
}

/// As [`file_runs`], for a range [`check_range`] has passed.
fn checked_runs(
    filetype: &Datatype,
    displacement: u64,
    start: u64,
    end: u64,
) -> Result<impl Iterator<Item = Piece> + '_, ClientError> {
    #[allow(clippy::cast_possible_wrap)] // checked against file_bytes_max
    let runs = filetype
        .runs(displacement as i64, start, end)
        .map_err(|err| ClientError::InvalidArgument(err.to_string()))?;
    Ok(runs.map(|run| {
        Piece::new(
            u64::try_from(run.offset).expect("checked by check_file_range"),
            run.length,
        )
    }))
}

pub(crate) fn piece_count(request: &RequestPlan) -> u32 {
    u32::try_from(request.local_pieces).expect("bounded by request_pieces_max")
}

impl File {
    pub(crate) fn file_type(
        &self,
        position: usize,
        filetype: &Datatype,
        displacement: u64,
    ) -> FileType {
        FileType {
            layout: self.layout.clone(),
            position: u16::try_from(position).expect("positions are below servers_max"),
            filetype: filetype.clone(),
            displacement,
        }
    }

    /// Whether the file's transfer policy may send a request in the framed `multiple` mode,
    /// which needs its memory cut at every piece boundary.
    pub(crate) fn may_send_multiple(&self) -> bool {
        [false, true].into_iter().any(|one_sided| {
            Transfer::choose(self.transfer_policy(), one_sided, 0, 1)
                == Transfer::Framed(TransferMode::Multiple)
        })
    }

    /// Plans a datatype, view or collective access of the stream that starts at stream byte
    /// `stream_start`, in requests of at most `bulk_max` bytes. The servers find their pieces
    /// themselves, so the plan keeps their count rather than their list
    /// ([`Plan::counted_from_runs`]), unless each piece may travel in a frame of its own.
    pub(crate) fn plan_typed(
        &self,
        stream_start: u64,
        runs: impl IntoIterator<Item = Piece>,
        bulk_max: u64,
    ) -> Plan {
        if self.may_send_multiple() {
            Plan::from_runs_capped(&self.layout, stream_start, runs, bulk_max)
        } else {
            Plan::counted_from_runs(&self.layout, stream_start, runs, bulk_max)
        }
    }

    /// Sends the planned writes, one request per plan entry, from `memory`.
    pub(crate) fn send_writes<R: Request<Reply = IoReply>>(
        &self,
        plan: &Plan,
        memory: Vec<&[u8]>,
        request: impl Fn(&RequestPlan, TransferMode) -> R,
    ) -> Result<IoReport, ClientError> {
        let carved = if self.may_send_multiple() {
            plan.carve(memory)
        } else {
            plan.carve_merged(memory)
        };
        let mut decisions = Vec::with_capacity(plan.requests.len());
        let memory_pieces = carved.iter().map(|carved| carved.slices.len() as u64).sum();
        let requests: Vec<(R, Transfer, PieceData<'_>)> = plan
            .requests
            .iter()
            .zip(carved)
            .map(|(planned, carved)| {
                let (transfer, decision) =
                    self.transfer_for(planned.server_position, planned.bytes, &carved.slices);
                decisions.push(decision);
                let data = PieceData {
                    slices: carved
                        .slices
                        .into_iter()
                        .map(std::io::IoSlice::new)
                        .collect(),
                    piece_ends: carved.piece_ends,
                };
                (request(planned, transfer.wire_mode()), transfer, data)
            })
            .collect();
        self.execute(
            plan,
            &decisions,
            |connection, index, _| {
                let (request, transfer, data) = &requests[index];
                connection.send_data(request, *transfer, &plan.requests[index].pieces, data)
            },
            |connection, _| connection.recv_write(),
        )
        .map(|report| IoReport {
            memory_pieces,
            ..report
        })
    }

    /// Sends the planned reads, one request per plan entry, into `memory`.
    pub(crate) fn send_reads<R: Request<Reply = IoReply>>(
        &self,
        plan: &Plan,
        memory: Vec<&mut [u8]>,
        request: impl Fn(&RequestPlan, TransferMode) -> R,
    ) -> Result<IoReport, ClientError> {
        let mut requests: Vec<(R, Transfer)> = Vec::with_capacity(plan.requests.len());
        let mut destinations: Vec<PieceDataMut<'_>> = Vec::with_capacity(plan.requests.len());
        let carved = if self.may_send_multiple() {
            plan.carve(memory)
        } else {
            plan.carve_merged(memory)
        };
        let mut decisions = Vec::with_capacity(plan.requests.len());
        let mut memory_pieces = 0;
        for (planned, carved) in plan.requests.iter().zip(carved) {
            memory_pieces += carved.slices.len() as u64;
            let (transfer, decision) =
                self.transfer_for(planned.server_position, planned.bytes, &carved.slices);
            decisions.push(decision);
            requests.push((request(planned, transfer.wire_mode()), transfer));
            destinations.push(PieceDataMut {
                slices: carved
                    .slices
                    .into_iter()
                    .map(std::io::IoSliceMut::new)
                    .collect(),
                piece_ends: carved.piece_ends,
            });
        }
        // Send lends the destinations one-sidedly and recv fills them; they take turns.
        let destinations = std::cell::RefCell::new(destinations);
        self.execute(
            plan,
            &decisions,
            |connection, index, _| {
                let (request, transfer) = &requests[index];
                connection.send_read(request, *transfer, &mut destinations.borrow_mut()[index])
            },
            |connection, index| {
                let transfer = requests[index].1;
                let pieces = &plan.requests[index].pieces;
                connection.recv_data(transfer, pieces, &mut destinations.borrow_mut()[index])
            },
        )
        .map(|report| IoReport {
            memory_pieces,
            ..report
        })
    }

    /// Checks a datatype call and plans it: the memory runs of `count` instances of
    /// `memtype` over a buffer of `memory_len` bytes, and one request per involved server for
    /// the file stream of the same length.
    fn type_plan(
        &self,
        operation: &'static str,
        memory_len: usize,
        memtype: &Datatype,
        count: u64,
        filetype: &Datatype,
        displacement: u64,
    ) -> Result<(MemoryRuns, Plan), ClientError> {
        self.check(operation, &[], &[])?;
        check_encodable("file type", filetype)?;
        let runs = MemoryRuns::new(memory_len, memtype, count)?;
        let plan = self.plan_typed(
            0,
            file_runs(self, operation, filetype, displacement, 0, runs.total)?,
            u64::from(MESSAGE_BULK_BYTES_MAX),
        );
        Ok((runs, plan))
    }

    /// Writes `count` instances of `memtype` from `memory` into the stream of `filetype`
    /// tiled from file offset `displacement` (MPI's write with a file view, in one call).
    /// Each involved server gets one request carrying the encoded file type, never a list.
    pub fn write_type(
        &self,
        memory: &[u8],
        memtype: &Datatype,
        count: u64,
        filetype: &Datatype,
        displacement: u64,
    ) -> Result<IoReport, ClientError> {
        let (runs, plan) = self.type_plan(
            "write",
            memory.len(),
            memtype,
            count,
            filetype,
            displacement,
        )?;
        let capability = self.capability()?;
        self.send_writes(&plan, runs.slices(memory), |planned, mode| WriteType {
            handle: self.handle,
            capability: capability.clone(),
            mode,
            storage: self.storage,
            file: self.file_type(planned.server_position, filetype, displacement),
            start: planned.stream.0,
            end: planned.stream.1,
            ranges: planned.stream_ranges(),
            pieces: piece_count(planned),
        })
    }

    /// Reads the stream of `filetype` tiled from `displacement` into `count` instances of
    /// `memtype` over `memory`. Bytes never written read as zeros.
    pub fn read_type(
        &self,
        memory: &mut [u8],
        memtype: &Datatype,
        count: u64,
        filetype: &Datatype,
        displacement: u64,
    ) -> Result<IoReport, ClientError> {
        let (runs, plan) =
            self.type_plan("read", memory.len(), memtype, count, filetype, displacement)?;
        let slices = runs.slices_mut(memory)?;
        let capability = self.capability()?;
        self.send_reads(&plan, slices, |planned, mode| ReadType {
            handle: self.handle,
            capability: capability.clone(),
            mode,
            storage: self.storage,
            file: self.file_type(planned.server_position, filetype, displacement),
            start: planned.stream.0,
            end: planned.stream.1,
            ranges: planned.stream_ranges(),
        })
    }

    /// Declares a view: the stream of `filetype` tiled from file offset `displacement`
    /// becomes a contiguous byte space, declared once on the servers it touches. The view
    /// lives until it is released or the file is closed ([`File::close`]).
    pub fn set_view(&self, displacement: u64, filetype: &Datatype) -> Result<View, ClientError> {
        if filetype.size() == 0 {
            return Err(ClientError::InvalidArgument(format!(
                "view of {}: the file type selects no bytes",
                self.path
            )));
        }
        check_range(self, "view", filetype, displacement, 0, filetype.size())?;
        check_encodable("file type", filetype)?;
        let matched = MatchedView::of(&self.layout, filetype, displacement);
        let positions: Vec<usize> = match matched {
            Some(matched) => vec![matched.position],
            None => touched_positions(&self.layout, filetype, displacement)
                .into_iter()
                .enumerate()
                .filter_map(|(position, touched)| touched.then_some(position))
                .collect(),
        };
        let view = View {
            file: self.clone(),
            id: new_view_id(),
            filetype: filetype.clone(),
            displacement,
            positions,
            matched,
            kept: Arc::default(),
        };
        view.declare(&view.positions)?;
        Ok(view)
    }

    /// Writes what this client buffered of the file, and releases every view declared
    /// through this file (or its clones) on the servers.
    pub fn close(self) -> Result<(), ClientError> {
        self.flush_buffered()?;
        let views: Vec<u64> = std::mem::take(
            &mut *self
                .views
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut first_error = None;
        let capability = if views.is_empty() {
            Capability::default()
        } else {
            self.capability()?
        };
        for view_id in views {
            for &server in self.layout.servers() {
                let released = self
                    .client
                    .inner
                    .iods
                    .with(usize::from(server), |connection| {
                        connection.call(&ReleaseView {
                            handle: self.handle,
                            capability: capability.clone(),
                            view_id,
                        })
                    });
                if let Err(error) = released {
                    first_error.get_or_insert(ClientError::from(error));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// A process-unique, cluster-unlikely-to-collide view id (a server refuses an id declared
/// with another type, so a collision is an error, never a wrong access).
fn new_view_id() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos()),
    );
    hasher.finish()
}

/// A file type declared once on the servers: accesses name (view id, offset, length).
#[derive(Debug, Clone)]
pub struct View {
    file: File,
    id: u64,
    filetype: Datatype,
    displacement: u64,
    /// Positions of the servers the view was declared on.
    positions: Vec<usize>,
    /// Where the view is one server's bytes of a pattern layout, in order: its calls are
    /// planned, and served, without a walk.
    matched: Option<MatchedView>,
    /// The plan of the last call, shared by the view's clones.
    kept: Arc<Mutex<Option<KeptPlan>>>,
}

/// Most entries ([`Plan::entries`], 8 to 16 bytes each: at most 1 MiB) of the plan a view
/// keeps for its next call; a larger plan is made anew on each call, where its walk is small
/// beside the call's transfer.
pub const VIEW_KEPT_PLAN_ENTRIES_MAX: usize = 65_536;

/// One plan a view keeps for its next call: programs access the same range of a view call
/// after call (a time step, a checkpoint), and such a call then skips the client's walk of
/// the file type. Only the last plan is kept, if it has at most
/// [`VIEW_KEPT_PLAN_ENTRIES_MAX`] entries: one plan per view.
#[derive(Debug)]
struct KeptPlan {
    start: u64,
    end: u64,
    /// Made for the view's file, whose layout and transfer policy (which decides whether a
    /// plan lists its pieces, [`File::plan_typed`]) a view never changes.
    plan: Arc<Plan>,
}

impl View {
    /// Whether the view is one server's bytes of the file's pattern layout, in file order:
    /// its calls then go to that server alone and are planned and served without a walk of
    /// the file type.
    pub fn matches_layout(&self) -> bool {
        self.matched.is_some()
    }

    /// The id the servers know the view by.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Positions (in the layout) of the servers the view was declared on.
    pub fn positions(&self) -> &[usize] {
        &self.positions
    }

    /// Declares the view on the servers at `positions`. Every declaration, a first one or
    /// one again after `UnknownView` (also after [`File::close`] released it), puts the
    /// view back on its file's list first, so the next close releases it and a declaration
    /// that failed partway leaves nothing behind once the file is closed.
    fn declare(&self, positions: &[usize]) -> Result<(), ClientError> {
        {
            let mut views = self
                .file
                .views
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !views.contains(&self.id) {
                views.push(self.id);
            }
        }
        for &position in positions {
            let declare = DeclareView {
                handle: self.file.handle,
                capability: self.file.capability()?,
                view_id: self.id,
                file: self
                    .file
                    .file_type(position, &self.filetype, self.displacement),
            };
            self.file
                .client
                .inner
                .iods
                .with(self.file.server_of(position), |connection| {
                    connection.call(&declare)
                })
                .map_err(|error| self.file.name_file(error.into()))?;
        }
        Ok(())
    }

    /// Runs `attempt`; if a server had lost the view, declares it again on every server of
    /// the plan and runs `attempt` once more.
    fn with_redeclare(
        &self,
        plan: &Plan,
        mut attempt: impl FnMut() -> Result<IoReport, ClientError>,
    ) -> Result<IoReport, ClientError> {
        match attempt() {
            Err(error) if error.code() == Some(ErrorCode::UnknownView) => {
                tracing::debug!("view {:#x}: declared again after {error}", self.id);
                let mut positions = plan.server_positions();
                positions.extend_from_slice(&self.positions);
                positions.sort_unstable();
                positions.dedup();
                self.declare(&positions)?;
                attempt()
            }
            other => other,
        }
    }

    /// The plan of a call of stream bytes `[offset, offset + length)`: the view's kept one
    /// when the last call was of the same range (it was checked then), else a new one, which
    /// is kept.
    fn plan(&self, operation: &str, offset: u64, length: u64) -> Result<Arc<Plan>, ClientError> {
        let end = offset.checked_add(length).ok_or_else(|| {
            ClientError::InvalidArgument(format!("view range {offset}+{length} overflows"))
        })?;
        if let Some(kept) = self
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|kept| (kept.start, kept.end) == (offset, end))
        {
            return Ok(Arc::clone(&kept.plan));
        }
        check_range(
            &self.file,
            operation,
            &self.filetype,
            self.displacement,
            offset,
            end,
        )?;
        let bulk_max = u64::from(MESSAGE_BULK_BYTES_MAX);
        if let Some(matched) = self.matched {
            // O(1), so never kept.
            return Ok(Arc::new(Plan::matched(matched, offset, end, bulk_max)));
        }
        let plan = Arc::new(self.file.plan_typed(
            offset,
            checked_runs(&self.filetype, self.displacement, offset, end)?,
            bulk_max,
        ));
        // Planned without the lock, so calls of other ranges on clones do not wait.
        if plan.entries() <= VIEW_KEPT_PLAN_ENTRIES_MAX {
            *self.kept.lock().unwrap_or_else(PoisonError::into_inner) = Some(KeptPlan {
                start: offset,
                end,
                plan: Arc::clone(&plan),
            });
        }
        Ok(plan)
    }

    fn write_runs(
        &self,
        offset: u64,
        memory: &[u8],
        runs: &MemoryRuns,
    ) -> Result<IoReport, ClientError> {
        self.file.check("write", &[], &[])?;
        let plan = self.plan("write", offset, runs.total)?;
        let capability = self.file.capability()?;
        self.with_redeclare(&plan, || {
            self.file
                .send_writes(&plan, runs.slices(memory), |planned, mode| WriteView {
                    handle: self.file.handle,
                    capability: capability.clone(),
                    mode,
                    storage: self.file.storage,
                    view_id: self.id,
                    start: planned.stream.0,
                    end: planned.stream.1,
                    ranges: planned.stream_ranges(),
                    pieces: piece_count(planned),
                })
        })
    }

    fn read_runs(
        &self,
        offset: u64,
        memory: &mut [u8],
        runs: &MemoryRuns,
    ) -> Result<IoReport, ClientError> {
        self.file.check("read", &[], &[])?;
        let plan = self.plan("read", offset, runs.total)?;
        let capability = self.file.capability()?;
        self.with_redeclare(&plan, || {
            let slices = runs.slices_mut(memory)?;
            self.file
                .send_reads(&plan, slices, |planned, mode| ReadView {
                    handle: self.file.handle,
                    capability: capability.clone(),
                    mode,
                    storage: self.file.storage,
                    view_id: self.id,
                    start: planned.stream.0,
                    end: planned.stream.1,
                    ranges: planned.stream_ranges(),
                })
        })
    }

    /// Writes `data` at byte `offset` of the view.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<IoReport, ClientError> {
        self.write_runs(offset, data, &MemoryRuns::contiguous(data.len()))
    }

    /// Reads `data.len()` bytes at byte `offset` of the view.
    pub fn read_at(&self, offset: u64, data: &mut [u8]) -> Result<IoReport, ClientError> {
        let runs = MemoryRuns::contiguous(data.len());
        self.read_runs(offset, data, &runs)
    }

    /// Writes `count` instances of `memtype` from `memory` at byte `offset` of the view.
    pub fn write_typed(
        &self,
        offset: u64,
        memory: &[u8],
        memtype: &Datatype,
        count: u64,
    ) -> Result<IoReport, ClientError> {
        let runs = MemoryRuns::new(memory.len(), memtype, count)?;
        self.write_runs(offset, memory, &runs)
    }

    /// Reads into `count` instances of `memtype` over `memory` from byte `offset` of the
    /// view.
    pub fn read_typed(
        &self,
        offset: u64,
        memory: &mut [u8],
        memtype: &Datatype,
        count: u64,
    ) -> Result<IoReport, ClientError> {
        let runs = MemoryRuns::new(memory.len(), memtype, count)?;
        self.read_runs(offset, memory, &runs)
    }

    /// Forgets the view on its servers now, rather than at [`File::close`].
    pub fn release(self) -> Result<(), ClientError> {
        self.file
            .views
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|&id| id != self.id);
        let capability = self.file.capability()?;
        for &server in self.file.layout.servers() {
            self.file
                .client
                .inner
                .iods
                .with(usize::from(server), |connection| {
                    connection.call(&ReleaseView {
                        handle: self.file.handle,
                        capability: capability.clone(),
                        view_id: self.id,
                    })
                })?;
        }
        Ok(())
    }
}
