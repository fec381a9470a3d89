//! Lazy iteration of the runs of a byte range of a data stream.
//!
//! The stream of a type tiled from a displacement is walked with one frame per tree level
//! (at most [`crate::DATATYPE_DEPTH_MAX`]): a frame holds its node, the byte offset of the
//! node's instance, and a cursor (block, element within the block). A block whose children
//! tile without gaps, and any dense child, is emitted as one run without descending, so a
//! vector of a million byte blocks costs one frame step per run. [`Runs::new`] seeks to the
//! first byte of the range by descending once (binary search over block prefix sums), then
//! the walk stops after the last byte; adjacent runs are merged before they are returned.
//!
//! Offsets are computed with wrapping arithmetic, on purpose. [`Runs::new`] refuses a range
//! whose instances' true bounds leave ±2·`DATATYPE_BYTES_MAX`, so every run the walk emits lies
//! well inside `i64`; but a frame's base on the way there may not (a block displacement near
//! `i64::MAX` whose child has a true lower bound near `i64::MIN`, as a fuzzed type had). In
//! arithmetic modulo 2^64 a sum whose true value fits `i64` comes out exact whatever its
//! intermediate values did, so wrapping adds give the right run where checked adds would
//! refuse a valid type and plain adds panic in debug builds.

use crate::{Datatype, DatatypeError, Node, DATATYPE_BYTES_MAX};

/// A contiguous run of bytes at a (possibly negative, for memory types) byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Offset in bytes from the origin the type was tiled from.
    pub offset: i64,
    /// Bytes in the run (never 0).
    pub length: u64,
}

impl Run {
    /// One past the last byte.
    #[allow(clippy::cast_possible_wrap)] // runs are bounded by datatype_bytes_max
    pub fn end(&self) -> i64 {
        self.offset + self.length as i64
    }
}

#[derive(Debug, Clone, Copy)]
struct Frame<'a> {
    node: &'a Node,
    /// Offset of this node's instance.
    base: i64,
    /// Next block.
    block: usize,
    /// Next child within the block.
    element: u64,
}

/// The merged runs of a byte range of a type's data stream, in stream order.
#[derive(Debug, Clone)]
pub struct Runs<'a> {
    root: &'a Node,
    displacement: i64,
    /// Next instance of the root to start when the stack empties.
    instance: u64,
    stack: Vec<Frame<'a>>,
    /// Bytes to drop from the front of the next run (set by the seek).
    skip: u64,
    /// Stream bytes still to return.
    remaining: u64,
    /// A run held back to be merged with the next one (none when its length is 0). Two
    /// plain words rather than an `Option<Run>`: the hot loop moves them in registers.
    pending_offset: i64,
    pending_length: u64,
}

impl Datatype {
    /// The merged runs of stream bytes `[start, end)` of this type tiled from
    /// `displacement` (instance `k` at `displacement + k * extent`). Offsets are relative to
    /// the same origin as `displacement`.
    pub fn runs(&self, displacement: i64, start: u64, end: u64) -> Result<Runs<'_>, DatatypeError> {
        Runs::new(self, displacement, start, end)
    }

    /// The runs of `count` instances from displacement 0: the whole stream.
    pub fn all_runs(&self, count: u64) -> Result<Runs<'_>, DatatypeError> {
        let end = u128::from(count) * u128::from(self.size());
        let end = u64::try_from(end)
            .ok()
            .filter(|&end| end <= DATATYPE_BYTES_MAX)
            .ok_or_else(|| {
                DatatypeError::over(
                    "stream",
                    "datatype_bytes_max",
                    end,
                    u128::from(DATATYPE_BYTES_MAX),
                )
            })?;
        Runs::new(self, 0, 0, end)
    }

    /// Lowest and highest byte (exclusive) the stream bytes `[start, end)` can touch, from
    /// the bounds alone: every run of [`Datatype::runs`] lies inside.
    pub fn span(&self, displacement: i64, start: u64, end: u64) -> Option<(i128, i128)> {
        if start >= end || self.size() == 0 {
            return None;
        }
        let first = start / self.size();
        let last = (end - 1) / self.size();
        let extent = i128::from(self.extent());
        let base = |instance: u64| i128::from(displacement) + extent * i128::from(instance);
        Some((
            base(first) + i128::from(self.true_lb()),
            base(last) + i128::from(self.true_ub()),
        ))
    }
}

impl<'a> Runs<'a> {
    fn new(
        datatype: &'a Datatype,
        displacement: i64,
        start: u64,
        end: u64,
    ) -> Result<Self, DatatypeError> {
        let root = &*datatype.0;
        let mut runs = Self {
            root,
            displacement,
            instance: 0,
            stack: Vec::with_capacity(root.depth as usize),
            skip: 0,
            remaining: end.saturating_sub(start),
            pending_offset: 0,
            pending_length: 0,
        };
        if runs.remaining == 0 {
            return Ok(runs);
        }
        if root.size == 0 {
            return Err(DatatypeError::invalid(
                "stream",
                format!("bytes {start}..{end} were asked of a type that holds no data"),
            ));
        }
        // Every offset the walk computes must stay inside i64 (and far from its edges).
        if let Some((low, high)) = datatype.span(displacement, start, end) {
            let limit = i128::from(DATATYPE_BYTES_MAX) * 2;
            if low < -limit || high > limit {
                return Err(DatatypeError::over(
                    "stream",
                    "datatype_bytes_max",
                    low.unsigned_abs().max(high.unsigned_abs()),
                    limit.unsigned_abs(),
                ));
            }
        }
        runs.seek(start);
        Ok(runs)
    }

    #[allow(clippy::cast_possible_wrap)] // offsets were bounded in `new`
    fn instance_base(&self, instance: u64) -> i64 {
        self.displacement
            .wrapping_add((instance as i64).wrapping_mul(self.root.extent()))
    }

    /// Positions the walk so that the next run starts at stream byte `start`.
    #[allow(clippy::cast_possible_wrap)] // offsets were bounded in `new`
    fn seek(&mut self, start: u64) {
        let instance = start / self.root.size;
        let mut within = start % self.root.size;
        self.instance = instance;
        if self.root.dense {
            self.skip = within;
            return;
        }
        self.instance += 1;
        self.stack.push(Frame {
            node: self.root,
            base: self.instance_base(instance),
            block: 0,
            element: 0,
        });
        loop {
            let frame = self.stack.last_mut().expect("a frame was pushed");
            let (block, before) = frame.node.block_at(within);
            within -= before;
            let (displacement, blocklen, child) = frame.node.block(block);
            frame.block = block;
            if child.tiles() {
                // `next_raw` emits the whole block; drop the bytes before `start`.
                self.skip = within;
                return;
            }
            let element = within / child.size;
            within %= child.size;
            frame.element = element;
            if child.dense {
                self.skip = within;
                return;
            }
            let child_base = frame
                .base
                .wrapping_add(displacement)
                .wrapping_add((element as i64).wrapping_mul(child.extent()));
            Self::advance(frame, blocklen);
            self.stack.push(Frame {
                node: child,
                base: child_base,
                block: 0,
                element: 0,
            });
        }
    }

    #[inline]
    fn advance(frame: &mut Frame<'_>, blocklen: u64) {
        frame.element += 1;
        if frame.element >= blocklen {
            frame.block += 1;
            frame.element = 0;
        }
    }

    #[inline]
    fn emit(&mut self, offset: i64, length: u64) -> Run {
        let skip = std::mem::take(&mut self.skip);
        let length = (length - skip).min(self.remaining);
        self.remaining -= length;
        #[allow(clippy::cast_possible_wrap)] // skip < length ≤ datatype_bytes_max
        Run {
            offset: offset.wrapping_add(skip as i64),
            length,
        }
    }

    /// The next run as the tree gives it, before merging.
    #[inline]
    pub fn next_unmerged(&mut self) -> Option<Run> {
        match self.next_in_block() {
            Some(run) => Some(run),
            None => self.next_unmerged_walk(),
        }
    }

    /// The common step, small enough to inline into the caller: the next run is a whole
    /// block of the top frame whose children tile, or one dense child, so no frame is pushed
    /// or popped. Exactly the first pass of [`Runs::next_unmerged_walk`]'s loop in those
    /// cases; `None` means "take the general walk", not "the end".
    #[inline]
    #[allow(clippy::cast_possible_wrap)] // offsets were bounded in `new`
    fn next_in_block(&mut self) -> Option<Run> {
        if self.remaining == 0 {
            return None;
        }
        let frame = self.stack.last_mut()?;
        if frame.block >= frame.node.block_count() {
            return None;
        }
        let (displacement, blocklen, child) = frame.node.block(frame.block);
        if blocklen == 0 || child.size == 0 {
            return None;
        }
        if child.tiles() {
            frame.block += 1;
            let offset = frame
                .base
                .wrapping_add(displacement)
                .wrapping_add(child.true_lb);
            return Some(self.emit(offset, blocklen * child.size));
        }
        if !child.dense {
            return None;
        }
        let child_base = frame
            .base
            .wrapping_add(displacement)
            .wrapping_add((frame.element as i64).wrapping_mul(child.extent()));
        Self::advance(frame, blocklen);
        Some(self.emit(child_base.wrapping_add(child.true_lb), child.size))
    }

    /// The general step: starts instances, pops finished frames, skips empty blocks and
    /// descends until a run comes out.
    #[inline(never)]
    #[allow(clippy::cast_possible_wrap)] // offsets were bounded in `new`
    fn next_unmerged_walk(&mut self) -> Option<Run> {
        loop {
            if self.remaining == 0 {
                return None;
            }
            let Some(frame) = self.stack.last_mut() else {
                let instance = self.instance;
                self.instance += 1;
                let base = self.instance_base(instance);
                if self.root.tiles() {
                    // Instances of a root that tiles follow each other without gaps: the rest
                    // of the range is one run, however many instances it spans (a predefined
                    // type is never walked element by element).
                    let length = self.skip + self.remaining;
                    return Some(self.emit(base.wrapping_add(self.root.true_lb), length));
                }
                if self.root.dense {
                    return Some(self.emit(base.wrapping_add(self.root.true_lb), self.root.size));
                }
                self.stack.push(Frame {
                    node: self.root,
                    base,
                    block: 0,
                    element: 0,
                });
                continue;
            };
            if frame.block >= frame.node.block_count() {
                self.stack.pop();
                continue;
            }
            let (displacement, blocklen, child) = frame.node.block(frame.block);
            if blocklen == 0 || child.size == 0 {
                frame.block = frame.node.skip_empty(frame.block);
                frame.element = 0;
                continue;
            }
            if child.tiles() {
                frame.block += 1;
                let offset = frame
                    .base
                    .wrapping_add(displacement)
                    .wrapping_add(child.true_lb);
                return Some(self.emit(offset, blocklen * child.size));
            }
            let child_base = frame
                .base
                .wrapping_add(displacement)
                .wrapping_add((frame.element as i64).wrapping_mul(child.extent()));
            Self::advance(frame, blocklen);
            if child.dense {
                return Some(self.emit(child_base.wrapping_add(child.true_lb), child.size));
            }
            self.stack.push(Frame {
                node: child,
                base: child_base,
                block: 0,
                element: 0,
            });
        }
    }

    /// Stream bytes not yet returned (including a run held back for merging).
    pub fn remaining(&self) -> u64 {
        self.remaining + self.pending_length
    }
}

impl Iterator for Runs<'_> {
    type Item = Run;

    #[inline]
    fn next(&mut self) -> Option<Run> {
        let mut current = if self.pending_length > 0 {
            Run {
                offset: self.pending_offset,
                length: std::mem::take(&mut self.pending_length),
            }
        } else {
            self.next_unmerged()?
        };
        while let Some(run) = self.next_unmerged() {
            if run.offset == current.end() {
                current.length += run.length;
            } else {
                self.pending_offset = run.offset;
                self.pending_length = run.length;
                break;
            }
        }
        Some(current)
    }
}
