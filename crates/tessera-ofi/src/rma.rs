//! One-sided list transfers: `fi_readmsg` / `fi_writemsg` chains.
//!
//! A transfer is a local piece list and a remote piece list holding the same number of bytes,
//! with boundaries that need not agree. [`Planner`] walks both lists with one cursor each and
//! cuts them into operations: an operation takes pieces (or the rest of a piece, or part of one)
//! from both sides until either side would need more entries than the provider's `iov_limit`
//! (local) or `rma_iov_limit` (remote), or its bytes would pass `max_msg_size`. A piece that
//! continues across an operation boundary resumes at its offset in the next one. The
//! endpoint keeps up to its slot count (at most [`crate::OPS_INFLIGHT_MAX`], at most the
//! transmit queue size) operations in flight, posts again as completions free slots, and
//! returns once every posted operation has completed, so the caller's memory is free when it
//! returns, also on error. If no completion arrives for the endpoint's completion timeout,
//! the endpoint is closed (which ends the provider's work on those operations) and the call
//! fails.

use std::ffi::c_void;
use std::ptr;
use std::time::Instant;

use tessera_ofi_sys as sys;

use crate::call::check;
use crate::endpoint::{Endpoint, EndpointState, Peer, Slot};
use crate::error::{CompletionFailure, OfiError};
use crate::mem::{Descriptor, LocalIov, MemoryRegion, RemoteIov};
use crate::progress::CompletionError;
use crate::TRANSFER_PIECES_MAX;

/// What a transfer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferCounts {
    /// Bytes moved.
    pub bytes: u64,
    /// `fi_readmsg`/`fi_writemsg` calls made.
    pub operations: u64,
    /// Non-empty local pieces.
    pub local_pieces: u64,
    /// Non-empty remote pieces.
    pub remote_pieces: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }
}

/// The per-operation limits a plan obeys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanLimits {
    pub(crate) iov_limit: usize,
    pub(crate) rma_iov_limit: usize,
    pub(crate) max_msg_size: u64,
}

/// Cuts two piece lists into operations; see the module comment.
pub(crate) struct Planner<'a> {
    local: &'a [LocalIov],
    remote: &'a [RemoteIov],
    limits: PlanLimits,
    local_index: usize,
    local_offset: usize,
    remote_index: usize,
    remote_offset: u64,
}

impl<'a> Planner<'a> {
    pub(crate) fn new(local: &'a [LocalIov], remote: &'a [RemoteIov], limits: PlanLimits) -> Self {
        debug_assert!(limits.iov_limit > 0 && limits.rma_iov_limit > 0 && limits.max_msg_size > 0);
        let mut planner = Planner {
            local,
            remote,
            limits,
            local_index: 0,
            local_offset: 0,
            remote_index: 0,
            remote_offset: 0,
        };
        planner.skip_empty();
        planner
    }

    fn skip_empty(&mut self) {
        while self.local_index < self.local.len() && self.local[self.local_index].length == 0 {
            self.local_index += 1;
        }
        while self.remote_index < self.remote.len() && self.remote[self.remote_index].length == 0 {
            self.remote_index += 1;
        }
    }

    /// Whether every byte has been planned. The lists hold equal byte counts, so both
    /// cursors reach their ends together.
    pub(crate) fn is_done(&self) -> bool {
        self.local_index >= self.local.len() || self.remote_index >= self.remote.len()
    }

    /// Fills `slot` with the next operation; false when nothing is left.
    pub(crate) fn next_operation(&mut self, slot: &mut Slot) -> bool {
        slot.local.clear();
        slot.descriptors.clear();
        slot.remote.clear();
        slot.bytes = 0;
        if self.is_done() {
            return false;
        }
        slot.local_first = self.local_index;
        slot.remote_first = self.remote_index;
        // The piece index the last entry on each side belongs to, while it can still grow.
        let mut local_open: Option<usize> = None;
        let mut remote_open: Option<usize> = None;
        while !self.is_done() {
            let local = &self.local[self.local_index];
            let remote = &self.remote[self.remote_index];
            let local_left = (local.length - self.local_offset) as u64;
            let remote_left = remote.length - self.remote_offset;
            let room = self.limits.max_msg_size - slot.bytes;
            let segment = local_left.min(remote_left).min(room);
            if segment == 0 {
                break;
            }
            let local_new = local_open != Some(self.local_index);
            let remote_new = remote_open != Some(self.remote_index);
            if (local_new && slot.local.len() == self.limits.iov_limit)
                || (remote_new && slot.remote.len() == self.limits.rma_iov_limit)
            {
                break;
            }
            // `segment` is at most `local_left`, a usize.
            let segment_bytes = usize::try_from(segment).unwrap_or(usize::MAX);
            if local_new {
                slot.local.push(libc::iovec {
                    iov_base: (local.address + self.local_offset) as *mut c_void,
                    iov_len: segment_bytes,
                });
                slot.descriptors.push(local.descriptor.0);
                local_open = Some(self.local_index);
            } else if let Some(entry) = slot.local.last_mut() {
                entry.iov_len += segment_bytes;
            }
            if remote_new {
                slot.remote.push(sys::fi_rma_iov {
                    addr: remote.address + self.remote_offset,
                    len: segment_bytes,
                    key: remote.key,
                });
                remote_open = Some(self.remote_index);
            } else if let Some(entry) = slot.remote.last_mut() {
                entry.len += segment_bytes;
            }
            slot.bytes += segment;
            slot.local_last = self.local_index;
            slot.remote_last = self.remote_index;
            self.local_offset += segment_bytes;
            self.remote_offset += segment;
            if self.local_offset == local.length {
                self.local_index += 1;
                self.local_offset = 0;
            }
            if self.remote_offset == remote.length {
                self.remote_index += 1;
                self.remote_offset = 0;
            }
            self.skip_empty();
        }
        slot.bytes > 0
    }
}

impl Endpoint {
    /// Reads the `remote` pieces of `peer`'s registered memory into the `local` pieces
    /// (`fi_readmsg`), returning once every byte has arrived.
    ///
    /// # Safety
    /// Every local piece must be valid for writes for the whole call and must not be accessed
    /// through any reference meanwhile; its descriptor, if any, must come from a live
    /// [`MemoryRegion`] that contains it.
    pub unsafe fn read_from(
        &self,
        peer: &Peer,
        local: &[LocalIov],
        remote: &[RemoteIov],
    ) -> Result<TransferCounts, OfiError> {
        self.transfer(Direction::Read, peer, local, remote)
    }

    /// Writes the `local` pieces into the `remote` pieces of `peer`'s registered memory
    /// (`fi_writemsg`, delivery complete), returning once the peer holds every byte.
    ///
    /// # Safety
    /// Every local piece must be valid for reads for the whole call and must not be written
    /// meanwhile; its descriptor, if any, must come from a live [`MemoryRegion`] that contains
    /// it.
    pub unsafe fn write_to(
        &self,
        peer: &Peer,
        local: &[LocalIov],
        remote: &[RemoteIov],
    ) -> Result<TransferCounts, OfiError> {
        self.transfer(Direction::Write, peer, local, remote)
    }

    /// Safe [`Endpoint::read_from`] into slices, all inside `region` when one is given (it
    /// must be for providers that require local registration).
    pub fn read_into(
        &self,
        peer: &Peer,
        local: &mut [&mut [u8]],
        region: Option<&MemoryRegion>,
        remote: &[RemoteIov],
    ) -> Result<TransferCounts, OfiError> {
        let pieces = local_pieces(
            local
                .iter()
                .map(|piece| (piece.as_ptr() as usize, piece.len())),
            region,
        )?;
        // SAFETY: the slices are borrowed mutably for the whole call, so they are valid for
        // writes and nothing else touches them; the descriptor comes from `region`, which is
        // borrowed for the call and contains every piece (checked in `local_pieces`).
        unsafe { self.read_from(peer, &pieces, remote) }
    }

    /// Safe [`Endpoint::write_to`] from slices, all inside `region` when one is given.
    pub fn write_from(
        &self,
        peer: &Peer,
        local: &[&[u8]],
        region: Option<&MemoryRegion>,
        remote: &[RemoteIov],
    ) -> Result<TransferCounts, OfiError> {
        let pieces = local_pieces(
            local
                .iter()
                .map(|piece| (piece.as_ptr() as usize, piece.len())),
            region,
        )?;
        // SAFETY: the slices are borrowed for the whole call, so they stay valid and unwritten;
        // the descriptor comes from `region`, borrowed for the call and containing every piece.
        unsafe { self.write_to(peer, &pieces, remote) }
    }

    fn transfer(
        &self,
        direction: Direction,
        peer: &Peer,
        local: &[LocalIov],
        remote: &[RemoteIov],
    ) -> Result<TransferCounts, OfiError> {
        let provider = self.provider();
        if peer.endpoint_id != self.id {
            return Err(OfiError::ForeignPeer {
                peer: peer.label.to_string(),
            });
        }
        let counts = self.check_lists(local, remote)?;
        let limits = self.domain.limits();
        let plan_limits = PlanLimits {
            iov_limit: limits.iov_limit,
            rma_iov_limit: limits.rma_iov_limit,
            max_msg_size: limits.max_msg_size.max(1),
        };
        let mut state = self.lock()?;
        if state.closed {
            return Err(OfiError::Closed {
                provider: provider.to_owned(),
            });
        }
        // An inactivity deadline: moved on by every post and completion, so a long transfer
        // that keeps completing never times out, and a stuck one does after the timeout.
        let timeout = state.completion_timeout;
        let mut deadline = Instant::now() + timeout;
        let mut planner = Planner::new(local, remote, plan_limits);
        let mut pending = 0_usize;
        let mut operations = 0_u64;
        let mut staged: Option<usize> = None;
        let mut failure: Option<OfiError> = None;
        let mut idle_polls = 0_u32;
        loop {
            if failure.is_none() && pending < state.slots.len() {
                if staged.is_none() {
                    if let Some(free) = state.slots.iter().position(|slot| !slot.busy) {
                        if planner.next_operation(&mut state.slots[free]) {
                            staged = Some(free);
                        }
                    }
                }
                if let Some(index) = staged {
                    match post(&mut state, provider, direction, peer, index) {
                        Ok(true) => {
                            state.slots[index].busy = true;
                            staged = None;
                            pending += 1;
                            operations += 1;
                            idle_polls = 0;
                            deadline = Instant::now() + timeout;
                            continue;
                        }
                        Ok(false) => {} // queue full: poll, then post again
                        Err(error) => {
                            failure = Some(error);
                            staged = None;
                        }
                    }
                }
            }
            if pending == 0 && ((staged.is_none() && planner.is_done()) || failure.is_some()) {
                break;
            }
            let mut completed = 0_usize;
            let polled = state.poll(provider, |state, completion| {
                let Some(index) = completion.slot else { return };
                let slot = &mut state.slots[index];
                if !slot.busy {
                    return;
                }
                slot.busy = false;
                completed += 1;
                if let (Some(error), None) = (completion.error, failure.as_ref()) {
                    failure = Some(completion_failure((provider, direction, peer), slot, error));
                }
            });
            pending -= completed;
            match polled {
                Ok(0) => {
                    if Instant::now() > deadline {
                        close_after_timeout(&mut state);
                        return Err(OfiError::Timeout {
                            provider: provider.to_owned(),
                            operation: direction.name(),
                            peer: peer.label.to_string(),
                            pending,
                            timeout: state.completion_timeout,
                        });
                    }
                    idle_polls = idle_polls.saturating_add(1);
                    backoff(idle_polls);
                }
                Ok(_) => {
                    idle_polls = 0;
                    deadline = Instant::now() + timeout;
                }
                Err(error) => {
                    // The queue itself failed: nothing more can be learnt about the pending
                    // operations, so close the endpoint before their memory is handed back.
                    if pending > 0 {
                        close_after_timeout(&mut state);
                    }
                    return Err(error);
                }
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(TransferCounts {
                operations,
                ..counts
            }),
        }
    }

    /// Checks the lists against the limits and each other; counts their bytes and pieces.
    fn check_lists(
        &self,
        local: &[LocalIov],
        remote: &[RemoteIov],
    ) -> Result<TransferCounts, OfiError> {
        for (what, count) in [
            ("local pieces", local.len()),
            ("remote pieces", remote.len()),
        ] {
            if count > TRANSFER_PIECES_MAX {
                return Err(OfiError::Limit {
                    what,
                    value: count as u64,
                    limit_name: "TRANSFER_PIECES_MAX",
                    limit: TRANSFER_PIECES_MAX as u64,
                });
            }
        }
        let requires_descriptor = self.domain.requires_local_registration();
        let mut counts = TransferCounts::default();
        let mut local_bytes = 0_u64;
        for (index, piece) in local.iter().enumerate() {
            if piece.length == 0 {
                continue;
            }
            if requires_descriptor && piece.descriptor.is_none() {
                return Err(OfiError::LocalNotRegistered {
                    provider: self.provider().to_owned(),
                    index,
                });
            }
            if piece.address.checked_add(piece.length).is_none() {
                return Err(OfiError::OutsideRegion {
                    side: "local",
                    index,
                    address: piece.address as u64,
                    length: piece.length as u64,
                    region_address: 0,
                    region_length: u64::MAX,
                });
            }
            local_bytes = local_bytes.saturating_add(piece.length as u64);
            counts.local_pieces += 1;
        }
        let mut remote_bytes = 0_u64;
        for piece in remote.iter().filter(|piece| piece.length > 0) {
            remote_bytes = remote_bytes.saturating_add(piece.length);
            counts.remote_pieces += 1;
        }
        if local_bytes != remote_bytes || local_bytes == u64::MAX {
            return Err(OfiError::LengthMismatch {
                local_bytes,
                remote_bytes,
            });
        }
        counts.bytes = local_bytes;
        Ok(counts)
    }
}

/// Local pieces for the safe entry points, each checked to lie inside `region`.
fn local_pieces(
    pieces: impl Iterator<Item = (usize, usize)>,
    region: Option<&MemoryRegion>,
) -> Result<Vec<LocalIov>, OfiError> {
    let descriptor = region.map_or(Descriptor::NONE, MemoryRegion::descriptor);
    pieces
        .enumerate()
        .map(|(index, (address, length))| {
            if let Some(region) = region {
                if length > 0 && !region.contains(address, length) {
                    return Err(OfiError::OutsideRegion {
                        side: "local",
                        index,
                        address: address as u64,
                        length: length as u64,
                        region_address: region.address() as u64,
                        region_length: region.length() as u64,
                    });
                }
            }
            Ok(LocalIov {
                address,
                length,
                descriptor,
            })
        })
        .collect()
}

/// Posts the operation staged in slot `index`. `Ok(false)` when the provider's queue is full
/// (`FI_EAGAIN`): poll and post again.
fn post(
    state: &mut EndpointState,
    provider: &str,
    direction: Direction,
    peer: &Peer,
    index: usize,
) -> Result<bool, OfiError> {
    let ep = state.ep;
    let slot = &mut state.slots[index];
    let message = sys::fi_msg_rma {
        msg_iov: slot.local.as_ptr(),
        desc: slot.descriptors.as_mut_ptr(),
        iov_count: slot.local.len(),
        addr: peer.address,
        rma_iov: slot.remote.as_ptr(),
        rma_iov_count: slot.remote.len(),
        context: ptr::addr_of_mut!(slot.context).cast(),
        data: 0,
    };
    // SAFETY: `ep` is open (the caller checked `closed`); the iov arrays and the context live in
    // the slot, which stays put and is not reused until this operation's completion is read;
    // the caller of read_from/write_to vouches for the local memory, and the transfer does not
    // return before the operation completes or the endpoint is closed.
    let ret = unsafe {
        match direction {
            Direction::Read => sys::tessera_fi_readmsg(ep, &raw const message, sys::FI_COMPLETION),
            Direction::Write => sys::tessera_fi_writemsg(
                ep,
                &raw const message,
                sys::FI_COMPLETION | sys::FI_DELIVERY_COMPLETE,
            ),
        }
    };
    if ret == -(sys::FI_EAGAIN as isize) {
        return Ok(false);
    }
    let call = match direction {
        Direction::Read => "fi_readmsg",
        Direction::Write => "fi_writemsg",
    };
    check(provider, call, i64::try_from(ret).unwrap_or(i64::MIN))?;
    Ok(true)
}

/// Closes the endpoint so the provider stops working on its operations; the state keeps the
/// slots alive, and nothing may be posted afterwards.
fn close_after_timeout(state: &mut EndpointState) {
    if !state.closed {
        // SAFETY: `ep` is open (not yet closed) and closed once here; Drop skips it afterwards.
        unsafe {
            sys::tessera_fi_close(ptr::addr_of_mut!((*state.ep).fid));
        }
        state.closed = true;
    }
}

/// Waits a little between empty polls: spin first (completions usually follow within
/// microseconds), then yield, then sleep briefly so a long wait does not hold a core.
fn backoff(idle_polls: u32) {
    if idle_polls < 64 {
        std::hint::spin_loop();
    } else if idle_polls < 1024 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

/// The error of a completion that failed: which operation of the transfer (its slot's pieces
/// on both sides), with the provider's words for it.
fn completion_failure(
    (provider, direction, peer): (&str, Direction, &Peer),
    slot: &Slot,
    error: CompletionError,
) -> OfiError {
    OfiError::Completion(Box::new(CompletionFailure {
        provider: provider.to_owned(),
        operation: direction.name(),
        peer: peer.label.to_string(),
        local_first: slot.local_first,
        local_last: slot.local_last,
        remote_first: slot.remote_first,
        remote_last: slot.remote_last,
        bytes: slot.bytes,
        message: error.message,
        code: error.code,
        provider_code: error.provider_code,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_slot(limits: PlanLimits) -> Slot {
        Slot {
            context: sys::fi_context2::default(),
            local: Vec::with_capacity(limits.iov_limit),
            descriptors: Vec::with_capacity(limits.iov_limit),
            remote: Vec::with_capacity(limits.rma_iov_limit),
            busy: false,
            bytes: 0,
            local_first: 0,
            local_last: 0,
            remote_first: 0,
            remote_last: 0,
        }
    }

    /// splitmix64, for reproducible lists.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, bound: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % bound
        }

        fn below_usize(&mut self, bound: usize) -> usize {
            usize::try_from(self.below(bound as u64)).expect("below a usize")
        }
    }

    /// Every byte address of the pieces, in list order.
    fn bytes_of(pieces: impl Iterator<Item = (u64, u64)>) -> Vec<u64> {
        pieces
            .flat_map(|(address, length)| address..address + length)
            .collect()
    }

    /// Random lists with zero-length pieces and mismatched boundaries are cut into operations
    /// that obey every limit, line up byte for byte, and cover both lists exactly, in order.
    #[test]
    fn plans_obey_limits_and_cover_both_lists() {
        let mut rng = Rng(5);
        for case in 0..400 {
            let limits = PlanLimits {
                iov_limit: 1 + rng.below_usize(5),
                rma_iov_limit: 1 + rng.below_usize(5),
                max_msg_size: if case % 3 == 0 {
                    1 + rng.below(700)
                } else {
                    u64::MAX
                },
            };
            let mut local = Vec::new();
            let mut address = 0x10_000;
            let mut total = 0_u64;
            for _ in 0..rng.below(40) {
                let length = if rng.below(8) == 0 {
                    0
                } else {
                    1 + rng.below_usize(300)
                };
                address += rng.below_usize(3) * 16; // sometimes adjacent
                local.push(LocalIov {
                    address,
                    length,
                    descriptor: Descriptor::NONE,
                });
                address += length;
                total += length as u64;
            }
            let mut remote = Vec::new();
            let mut left = total;
            let mut offset = 0_u64;
            while left > 0 || rng.below(4) == 0 {
                let length = if rng.below(8) == 0 {
                    0
                } else {
                    (1 + rng.below(400)).min(left)
                };
                offset += rng.below(2) * 32;
                remote.push(RemoteIov {
                    address: offset,
                    length,
                    key: 7,
                });
                offset += length;
                left -= length;
            }
            let mut planner = Planner::new(&local, &remote, limits);
            let mut slot = empty_slot(limits);
            let (mut planned_local, mut planned_remote) = (Vec::new(), Vec::new());
            let mut operations = 0;
            while planner.next_operation(&mut slot) {
                operations += 1;
                assert!(slot.local.len() <= limits.iov_limit, "case {case}");
                assert!(slot.remote.len() <= limits.rma_iov_limit, "case {case}");
                assert_eq!(slot.descriptors.len(), slot.local.len());
                assert!(
                    slot.bytes >= 1 && slot.bytes <= limits.max_msg_size,
                    "case {case}"
                );
                let local_bytes: usize = slot.local.iter().map(|iov| iov.iov_len).sum();
                let remote_bytes: usize = slot.remote.iter().map(|iov| iov.len).sum();
                assert_eq!(local_bytes as u64, slot.bytes, "case {case}");
                assert_eq!(remote_bytes as u64, slot.bytes, "case {case}");
                assert!(
                    slot.local_first <= slot.local_last && slot.remote_first <= slot.remote_last
                );
                for iov in &slot.local {
                    let start = iov.iov_base as usize;
                    let piece = &local[slot.local_first..=slot.local_last];
                    assert!(
                        piece
                            .iter()
                            .any(|p| start >= p.address
                                && start + iov.iov_len <= p.address + p.length),
                        "case {case}: a local entry spans two pieces or leaves its pieces"
                    );
                    planned_local.push((start as u64, iov.iov_len as u64));
                }
                for iov in &slot.remote {
                    assert_eq!(iov.key, 7);
                    planned_remote.push((iov.addr, iov.len as u64));
                }
            }
            assert!(planner.is_done());
            assert_eq!(operations == 0, total == 0, "case {case}");
            let wanted_local = bytes_of(local.iter().map(|p| (p.address as u64, p.length as u64)));
            let wanted_remote = bytes_of(remote.iter().map(|p| (p.address, p.length)));
            assert_eq!(
                bytes_of(planned_local.into_iter()),
                wanted_local,
                "case {case}"
            );
            assert_eq!(
                bytes_of(planned_remote.into_iter()),
                wanted_remote,
                "case {case}"
            );
        }
    }

    /// Pieces that line up pack `min(iov_limit, rma_iov_limit)` to an operation.
    #[test]
    fn aligned_pieces_fill_operations() {
        let limits = PlanLimits {
            iov_limit: 4,
            rma_iov_limit: 4,
            max_msg_size: u64::MAX,
        };
        let local: Vec<LocalIov> = (0..10)
            .map(|index| LocalIov {
                address: 0x1000 + index * 200,
                length: 100,
                descriptor: Descriptor::NONE,
            })
            .collect();
        let remote: Vec<RemoteIov> = (0..10)
            .map(|index| RemoteIov {
                address: index * 300,
                length: 100,
                key: 1,
            })
            .collect();
        let mut planner = Planner::new(&local, &remote, limits);
        let mut slot = empty_slot(limits);
        let mut sizes = Vec::new();
        while planner.next_operation(&mut slot) {
            sizes.push((slot.local.len(), slot.remote.len(), slot.bytes));
        }
        assert_eq!(sizes, vec![(4, 4, 400), (4, 4, 400), (2, 2, 200)]);
    }

    /// One long remote piece against many short local ones continues across operations at
    /// the right offset.
    #[test]
    fn long_piece_resumes_at_its_offset() {
        let limits = PlanLimits {
            iov_limit: 2,
            rma_iov_limit: 4,
            max_msg_size: u64::MAX,
        };
        let local: Vec<LocalIov> = (0..5)
            .map(|index| LocalIov {
                address: 0x1000 + index * 64,
                length: 10,
                descriptor: Descriptor::NONE,
            })
            .collect();
        let remote = [RemoteIov {
            address: 500,
            length: 50,
            key: 3,
        }];
        let mut planner = Planner::new(&local, &remote, limits);
        let mut slot = empty_slot(limits);
        let mut remote_entries = Vec::new();
        while planner.next_operation(&mut slot) {
            remote_entries.extend(slot.remote.iter().map(|iov| (iov.addr, iov.len)));
        }
        assert_eq!(remote_entries, vec![(500, 20), (520, 20), (540, 10)]);
    }
}
