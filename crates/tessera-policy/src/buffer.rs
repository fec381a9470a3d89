//! The DEMOTE buffer (seed 001 §6.3): evicted clean blocks wait here, and travel to the
//! server in batches, so a read does not wait for a demote.
//!
//! The buffer has two halves. Evicted blocks fill one half; when it is full it is **sealed**
//! into a batch (if no other batch is in flight) and the other half starts filling. A batch
//! moves in three steps the caller drives: its metadata goes to the server
//! ([`DemoteBuffer::metadata`]), the server answers which blocks it wants (it refuses blocks
//! it caches already) and the wanted ones leave in one gathered transfer
//! ([`DemoteBuffer::answer`]), then the transfer's completion frees the half
//! ([`DemoteBuffer::complete`]). When both halves are taken, [`DemoteBuffer::push`] hands the
//! block back ([`Push::Full`]): the caller waits for the batch in flight to complete. Until its
//! answer a block can be found again by a read ([`DemoteBuffer::take`]): the buffer is a
//! victim cache of the client cache, and a block taken back is not demoted.

use std::hash::Hash;

/// The largest DEMOTE buffer, in blocks (both halves).
pub const DEMOTE_BUFFER_BLOCKS_MAX: usize = 4096;

/// Names one sealed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchId(pub u64);

/// What [`DemoteBuffer::push`] did with a block.
#[derive(Debug, PartialEq, Eq)]
pub enum Push<K, T> {
    /// Buffered; nothing to send yet.
    Buffered,
    /// Buffered, and its half was sealed: send this batch's metadata.
    Sealed(BatchId),
    /// Both halves are taken: the block comes back; complete the batch in flight first.
    Full(K, T),
}

/// A call out of order, or a buffer size out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    /// The size is not in `2..=DEMOTE_BUFFER_BLOCKS_MAX`.
    #[error("DEMOTE buffer of {blocks} blocks: must be 2..={DEMOTE_BUFFER_BLOCKS_MAX}")]
    Size {
        /// The size asked for.
        blocks: usize,
    },
    /// No batch of that id is in flight.
    #[error("no DEMOTE batch {0:?} in flight")]
    UnknownBatch(BatchId),
    /// The batch was answered already.
    #[error("DEMOTE batch {0:?} answered twice")]
    AlreadyAnswered(BatchId),
    /// The batch completes before the server answered it.
    #[error("DEMOTE batch {0:?} completed before its answer")]
    NotAnswered(BatchId),
    /// The answer does not have one entry per block of the metadata.
    #[error("answer to DEMOTE batch {id:?} has {got} entries for {expected} blocks")]
    AnswerLength {
        /// The batch.
        id: BatchId,
        /// Blocks in its metadata.
        expected: usize,
        /// Entries in the answer.
        got: usize,
    },
}

#[derive(Debug)]
struct Batch<K, T> {
    id: BatchId,
    /// In metadata order; `None` once taken back by a read or sent.
    entries: Vec<(K, Option<T>)>,
    answered: bool,
}

/// A bounded, double-buffered DEMOTE buffer of blocks `K` carrying payloads `T` (the bytes on
/// the live path, `()` in the simulator).
#[derive(Debug)]
pub struct DemoteBuffer<K, T> {
    half: usize,
    filling: Vec<(K, T)>,
    sealed: Option<Batch<K, T>>,
    next_id: u64,
}

impl<K: Copy + Eq + Hash, T> DemoteBuffer<K, T> {
    /// An empty buffer of `blocks` blocks, two halves of `blocks / 2` (an odd size rounds down).
    pub fn new(blocks: usize) -> Result<Self, BufferError> {
        if !(2..=DEMOTE_BUFFER_BLOCKS_MAX).contains(&blocks) {
            return Err(BufferError::Size { blocks });
        }
        Ok(Self {
            half: blocks / 2,
            filling: Vec::with_capacity(blocks / 2),
            sealed: None,
            next_id: 0,
        })
    }

    /// Blocks per half: the size of a full batch.
    pub fn half(&self) -> usize {
        self.half
    }

    /// Blocks held that a read can still find (filling half and unanswered batch).
    pub fn len(&self) -> usize {
        let sealed = self.sealed.as_ref().map_or(0, |batch| {
            batch.entries.iter().filter(|(_, v)| v.is_some()).count()
        });
        self.filling.len() + sealed
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch in flight, if any.
    pub fn in_flight(&self) -> Option<BatchId> {
        self.sealed.as_ref().map(|batch| batch.id)
    }

    /// Buffers an evicted block (see [`Push`]). The block must not be held already.
    pub fn push(&mut self, key: K, value: T) -> Push<K, T> {
        if self.filling.len() == self.half {
            return Push::Full(key, value);
        }
        debug_assert!(!self.contains(&key), "a block is buffered once");
        self.filling.push((key, value));
        if self.filling.len() == self.half && self.sealed.is_none() {
            Push::Sealed(self.seal())
        } else {
            Push::Buffered
        }
    }

    /// Seals the filling half even if not full (an idle client, the end of a run); `None` if
    /// a batch is in flight or nothing is buffered.
    pub fn drain(&mut self) -> Option<BatchId> {
        if self.sealed.is_some() || self.filling.is_empty() {
            None
        } else {
            Some(self.seal())
        }
    }

    fn seal(&mut self) -> BatchId {
        let id = BatchId(self.next_id);
        self.next_id += 1;
        let entries = self
            .filling
            .drain(..)
            .map(|(key, value)| (key, Some(value)))
            .collect();
        self.sealed = Some(Batch {
            id,
            entries,
            answered: false,
        });
        id
    }

    fn batch_mut(&mut self, id: BatchId) -> Result<&mut Batch<K, T>, BufferError> {
        match self.sealed.as_mut() {
            Some(batch) if batch.id == id => Ok(batch),
            _ => Err(BufferError::UnknownBatch(id)),
        }
    }

    /// Whether a read would find `key` here.
    pub fn contains(&self, key: &K) -> bool {
        self.filling.iter().any(|(k, _)| k == key)
            || self.sealed.as_ref().is_some_and(|batch| {
                !batch.answered && batch.entries.iter().any(|(k, v)| k == key && v.is_some())
            })
    }

    /// Drops every held block `stale` says is stale (its file was changed: it must never be
    /// demoted); returns how many it dropped.
    pub fn purge(&mut self, stale: impl Fn(&K) -> bool) -> usize {
        let before = self.filling.len();
        self.filling.retain(|(key, _)| !stale(key));
        let mut dropped = before - self.filling.len();
        if let Some(batch) = self.sealed.as_mut() {
            for (key, value) in &mut batch.entries {
                if value.is_some() && stale(key) {
                    *value = None;
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// Victim lookup: a read finds `key` here and takes it back (it will not be demoted).
    pub fn take(&mut self, key: &K) -> Option<T> {
        if let Some(at) = self.filling.iter().position(|(k, _)| k == key) {
            return Some(self.filling.swap_remove(at).1);
        }
        let batch = self.sealed.as_mut().filter(|batch| !batch.answered)?;
        batch
            .entries
            .iter_mut()
            .find(|(k, v)| k == key && v.is_some())
            .and_then(|(_, v)| v.take())
    }

    /// The batch's metadata, sent first: its block keys in order (blocks taken back by a read
    /// since sealing are left out). Answer with one bool per key.
    pub fn metadata(&mut self, id: BatchId) -> Result<Vec<K>, BufferError> {
        self.metadata_with(id, |key, _| *key)
    }

    /// [`DemoteBuffer::metadata`], each block described by `describe` from its key and
    /// payload (where its parts go, say).
    pub fn metadata_with<M>(
        &mut self,
        id: BatchId,
        describe: impl Fn(&K, &T) -> M,
    ) -> Result<Vec<M>, BufferError> {
        let batch = self.batch_mut(id)?;
        if batch.answered {
            return Err(BufferError::AlreadyAnswered(id));
        }
        batch.entries.retain(|(_, v)| v.is_some());
        Ok(batch
            .entries
            .iter()
            .filter_map(|(key, value)| value.as_ref().map(|value| describe(key, value)))
            .collect())
    }

    /// The server's answer to the metadata: `wanted[i]` for the i-th key. Returns the blocks to
    /// send in one gathered transfer; the refused ones are dropped (the server has them).
    /// Blocks taken back by a read after the metadata went are not sent.
    pub fn answer(&mut self, id: BatchId, wanted: &[bool]) -> Result<Vec<(K, T)>, BufferError> {
        let batch = self.batch_mut(id)?;
        if batch.answered {
            return Err(BufferError::AlreadyAnswered(id));
        }
        if wanted.len() != batch.entries.len() {
            return Err(BufferError::AnswerLength {
                id,
                expected: batch.entries.len(),
                got: wanted.len(),
            });
        }
        batch.answered = true;
        Ok(batch
            .entries
            .iter_mut()
            .zip(wanted)
            .filter_map(|((key, value), &want)| {
                let value = value.take()?;
                want.then_some((*key, value))
            })
            .collect())
    }

    /// The gathered transfer of batch `id` completed: its half is free. If the other half
    /// filled meanwhile it is sealed now, and its id returned: send its metadata.
    pub fn complete(&mut self, id: BatchId) -> Result<Option<BatchId>, BufferError> {
        if !self.batch_mut(id)?.answered {
            return Err(BufferError::NotAnswered(id));
        }
        self.sealed = None;
        Ok((self.filling.len() == self.half).then(|| self.seal()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_full_half_seals_and_a_full_buffer_hands_the_block_back() {
        let mut buffer = DemoteBuffer::new(4).unwrap();
        assert_eq!(buffer.push(1_u64, 'a'), Push::Buffered);
        let first = match buffer.push(2, 'b') {
            Push::Sealed(id) => id,
            other => panic!("expected a sealed batch, got {other:?}"),
        };
        assert_eq!(buffer.push(3, 'c'), Push::Buffered);
        assert_eq!(buffer.push(4, 'd'), Push::Buffered);
        assert_eq!(buffer.push(5, 'e'), Push::Full(5, 'e'));
        assert_eq!(buffer.len(), 4);
        // Victim lookup in both halves.
        assert_eq!(buffer.take(&3), Some('c'));
        assert_eq!(buffer.take(&1), Some('a'));
        assert_eq!(buffer.metadata(first).unwrap(), vec![2]);
        assert_eq!(buffer.complete(first), Err(BufferError::NotAnswered(first)));
        assert_eq!(
            buffer.answer(first, &[true, false]),
            Err(BufferError::AnswerLength {
                id: first,
                expected: 1,
                got: 2
            })
        );
        assert_eq!(buffer.answer(first, &[true]).unwrap(), vec![(2, 'b')]);
        assert_eq!(buffer.take(&2), None);
        assert_eq!(buffer.complete(first).unwrap(), None);
        assert_eq!(buffer.push(6, 'f'), Push::Sealed(BatchId(1)));
        assert_eq!(buffer.metadata(BatchId(1)).unwrap(), vec![4, 6]);
        assert_eq!(
            buffer.answer(BatchId(1), &[false, true]).unwrap(),
            vec![(6, 'f')]
        );
        assert_eq!(
            buffer.answer(BatchId(1), &[false, true]),
            Err(BufferError::AlreadyAnswered(BatchId(1)))
        );
        assert_eq!(
            buffer.complete(BatchId(0)),
            Err(BufferError::UnknownBatch(BatchId(0)))
        );
        assert_eq!(buffer.complete(BatchId(1)).unwrap(), None);
        assert!(buffer.is_empty());
        assert_eq!(buffer.drain(), None);
        assert_eq!(
            DemoteBuffer::<u64, ()>::new(1).unwrap_err(),
            BufferError::Size { blocks: 1 }
        );
    }

    #[test]
    fn completing_seals_the_half_that_filled_meanwhile() {
        let mut buffer = DemoteBuffer::new(2).unwrap();
        assert_eq!(buffer.push(1_u64, ()), Push::Sealed(BatchId(0)));
        assert_eq!(buffer.push(2, ()), Push::Buffered);
        buffer.metadata(BatchId(0)).unwrap();
        buffer.answer(BatchId(0), &[true]).unwrap();
        assert_eq!(buffer.complete(BatchId(0)).unwrap(), Some(BatchId(1)));
        assert_eq!(buffer.metadata(BatchId(1)).unwrap(), vec![2]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8),
        Take(u8),
        /// Metadata and answer of the batch in flight, wanting the keys the mask selects.
        Answer(u16),
        Complete,
        Drain,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0_u8..16).prop_map(Op::Push),
            1 => (0_u8..16).prop_map(Op::Take),
            1 => any::<u16>().prop_map(Op::Answer),
            1 => Just(Op::Complete),
            1 => Just(Op::Drain),
        ]
    }

    proptest! {
        /// Every pushed block ends exactly once: taken back, sent, refused, handed back as
        /// Full, or still held; the buffer never holds more than its size.
        #[test]
        fn blocks_are_conserved_and_bounded(blocks in 2_usize..9, ops in proptest::collection::vec(op(), 0..300)) {
            let mut buffer = DemoteBuffer::new(blocks).unwrap();
            let mut held: BTreeSet<u8> = BTreeSet::new();
            let mut in_flight: Option<(BatchId, bool)> = None;
            let mut sealed_ids = 0_u64;
            for op in ops {
                match op {
                    Op::Push(key) => {
                        if held.contains(&key) {
                            continue;
                        }
                        match buffer.push(key, key) {
                            Push::Buffered => { held.insert(key); }
                            Push::Sealed(id) => {
                                held.insert(key);
                                prop_assert!(in_flight.is_none());
                                prop_assert_eq!(id, BatchId(sealed_ids));
                                sealed_ids += 1;
                                in_flight = Some((id, false));
                            }
                            Push::Full(back, value) => {
                                prop_assert_eq!((back, value), (key, key));
                                prop_assert!(in_flight.is_some());
                            }
                        }
                    }
                    Op::Take(key) => {
                        let found = buffer.take(&key);
                        prop_assert_eq!(found.is_some(), held.remove(&key));
                        if let Some(value) = found {
                            prop_assert_eq!(value, key);
                        }
                    }
                    Op::Answer(mask) => {
                        let Some((id, false)) = in_flight else { continue };
                        let keys = buffer.metadata(id).unwrap();
                        prop_assert!(keys.len() <= buffer.half());
                        let wanted: Vec<bool> = (0..keys.len()).map(|i| mask >> i & 1 == 1).collect();
                        let sent = buffer.answer(id, &wanted).unwrap();
                        let expect: Vec<(u8, u8)> = keys.iter().zip(&wanted).filter(|(_, w)| **w).map(|(k, _)| (*k, *k)).collect();
                        prop_assert_eq!(sent, expect);
                        for key in keys {
                            prop_assert!(held.remove(&key));
                        }
                        in_flight = Some((id, true));
                    }
                    Op::Complete => {
                        let Some((id, true)) = in_flight else { continue };
                        in_flight = buffer.complete(id).unwrap().map(|next| {
                            sealed_ids += 1;
                            (next, false)
                        });
                    }
                    Op::Drain => {
                        if let Some(id) = buffer.drain() {
                            prop_assert!(in_flight.is_none());
                            sealed_ids += 1;
                            in_flight = Some((id, false));
                        }
                    }
                }
                prop_assert_eq!(buffer.len(), held.len());
                prop_assert!(buffer.len() <= 2 * buffer.half());
                for key in &held {
                    prop_assert!(buffer.contains(key));
                }
            }
        }
    }
}
