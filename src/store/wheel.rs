//! A hierarchical timer wheel with millisecond deadlines.
//!
//! Six levels of 64 slots each: a slot on level `n` spans `64^n` ms, so the
//! levels together cover the 2^36 ms (about 795 days) block that holds the
//! wheel's current time. Each level keeps a `u64` occupancy bitmap, which makes
//! finding the next expiration O(levels) without looking inside any slot.
//! Items are filed on the level of the highest bit where their deadline differs
//! from the current time, and only move down (cascade) when their slot comes
//! due, so an item is touched at most once per level. Deadlines in a later
//! 2^36 ms block wait in an overflow list and are re-filed when that block
//! begins.
//!
//! There is no removal: callers cancel lazily, keeping their own record of what
//! is still live and ignoring stale items as they come out of [`Wheel::poll_bounded`].

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::mem;

#[cfg(test)]
mod tests;

/// Number of levels in the wheel.
const LEVELS: usize = 6;
/// log2 of the number of slots per level.
const SLOT_BITS: u32 = 6;
/// Slots per level; one bit each in a `u64` occupancy bitmap.
const SLOTS: usize = 1 << SLOT_BITS;
/// Mask selecting a slot index.
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// The levels cover one aligned block of `2^SPAN_BITS` ms.
const SPAN_BITS: u32 = SLOT_BITS * LEVELS as u32;
/// Length of the block the levels cover; later deadlines go to overflow.
const SPAN: u64 = 1 << SPAN_BITS;

/// Level on which a deadline `at > elapsed` is filed; `LEVELS` means overflow.
///
/// The level is given by the highest bit in which `at` and `elapsed` differ:
/// everything above it is shared, so the item belongs to the current block of
/// that level and its slot there is strictly ahead of the current one.
fn level_for(elapsed: u64, at: u64) -> usize {
    // OR-ing in the slot mask maps "differs only in the low bits" to level 0.
    let diff = (elapsed ^ at) | SLOT_MASK;
    let top_bit = u64::BITS - 1 - diff.leading_zeros();
    ((top_bit / SLOT_BITS) as usize).min(LEVELS)
}

/// Milliseconds covered by one slot on `level`.
fn slot_span(level: usize) -> u64 {
    1 << (SLOT_BITS as usize * level)
}

/// Slot index of `at` on `level`.
fn slot_of(level: usize, at: u64) -> usize {
    ((at >> (SLOT_BITS as usize * level)) & SLOT_MASK) as usize
}

/// One level: 64 slots and a bitmap of which ones hold items.
struct Level<T> {
    /// Bit `i` is set iff `slots[i]` is non-empty.
    occupied: u64,
    /// Items as `(deadline, item)`; boxed to keep the wheel itself small.
    slots: Box<[Bucket<T>; SLOTS]>,
    /// The earliest deadline in each slot (`u64::MAX` when empty). The owner sleeps until
    /// it, not until the slot's span begins, so waiting on far deadlines costs no wake-up
    /// (and no cascading) until the first of them is due.
    earliest: [u64; SLOTS],
}

impl<T> Level<T> {
    /// An empty level.
    fn new() -> Self {
        Level {
            occupied: 0,
            slots: Box::new(std::array::from_fn(|_| Bucket::default())),
            earliest: [u64::MAX; SLOTS],
        }
    }

    /// The first occupied slot after the current one, its start time and its earliest
    /// deadline.
    ///
    /// Searching from the current slot (rotate, then count trailing zeros)
    /// finds the earliest slot; by the filing invariant it is never the
    /// current slot itself or one behind it.
    fn next_slot(&self, level: usize, elapsed: u64) -> Option<(usize, u64, u64)> {
        if self.occupied == 0 {
            return None;
        }
        let current = slot_of(level, elapsed);
        let ahead = self.occupied.rotate_right(current as u32).trailing_zeros() as usize;
        let slot = current + ahead;
        debug_assert!(ahead > 0 && slot < SLOTS, "slot behind the wheel's time");
        let span = slot_span(level);
        let level_start = elapsed & !(span * SLOTS as u64 - 1);
        Some((slot, level_start + slot as u64 * span, self.earliest[slot]))
    }
}

/// Where the next cascade takes items from.
#[derive(Clone, Copy, Debug)]
struct Cascade {
    /// Level index, or `LEVELS` for the overflow list.
    level: usize,
    /// Slot index on `level` (unused for overflow).
    slot: usize,
    /// Time at which the cascade happens; no item in it is due earlier.
    deadline: u64,
    /// The earliest deadline among its items: when the owner next needs to wake.
    earliest: u64,
}

/// An item whose deadline had already passed when it was inserted.
///
/// Ordered by deadline only, reversed so `BinaryHeap` pops the earliest.
struct Late<T>(u64, T);

impl<T> PartialEq for Late<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<T> Eq for Late<T> {}

impl<T> PartialOrd for Late<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Late<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.cmp(&self.0)
    }
}

/// Millisecond ticks on a monotonic time base that starts at 0.
///
/// Holds items keyed by deadline and hands them back through
/// [`poll_bounded`](Wheel::poll_bounded) in deadline order once their time has come; the
/// owner sleeps until [`next_expiration`](Wheel::next_expiration) in between.
pub(crate) struct Wheel<T> {
    /// The wheel's current time: every deadline `<= elapsed` is in `late`
    /// or `due` (or already returned); the levels hold only later ones.
    elapsed: u64,
    /// Number of items not yet returned.
    len: usize,
    /// The levels, finest first.
    levels: [Level<T>; LEVELS],
    /// Items in a later `SPAN` block than `elapsed`.
    overflow: Bucket<T>,
    /// Earliest deadline in `overflow` (meaningless when it is empty).
    overflow_min: u64,
    /// Ready items whose deadline equals `elapsed`.
    due: Bucket<T>,
    /// Ready items inserted with a deadline before `elapsed`.
    late: BinaryHeap<Late<T>>,
    /// Items of a cascaded slot not re-filed yet: a big slot is re-filed a chunk per
    /// poll, so one cascade never stalls the owner thread. All have `at >= elapsed`.
    refiling: Bucket<T>,
}

/// What one bounded step of [`Wheel::poll_bounded`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Polled<T> {
    /// An item whose deadline has come.
    Item(u64, T),
    /// The wheel did a bounded amount of re-filing and has more to do before it can tell:
    /// call again.
    Busy,
    /// Nothing is due at `now`.
    Idle,
}

/// Items re-filed per bounded step: about 4 us of work here (15 ns an item, median of a
/// million-task expiry; p99 5.4 us).
pub(crate) const REFILE_CHUNK: usize = 256;

/// The items of one slot (or of the due list, the overflow, a cascade being re-filed):
/// chunks of at most [`REFILE_CHUNK`] entries, never empty ones. A slot holding a million
/// items grows without ever copying them (one big `Vec` would copy megabytes at a time as
/// it doubles, stalling the owner), is taken whole in O(1), and is re-filed a chunk at a
/// time.
struct Bucket<T> {
    chunks: Vec<Vec<(u64, T)>>,
}

impl<T> Default for Bucket<T> {
    fn default() -> Self {
        Bucket { chunks: Vec::new() }
    }
}

impl<T> Bucket<T> {
    fn push(&mut self, entry: (u64, T)) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < REFILE_CHUNK => chunk.push(entry),
            _ => self.chunks.push(vec![entry]),
        }
    }

    fn pop(&mut self) -> Option<(u64, T)> {
        let chunk = self.chunks.last_mut()?;
        let entry = chunk.pop();
        if chunk.is_empty() {
            self.chunks.pop();
        }
        entry
    }

    fn pop_chunk(&mut self) -> Option<Vec<(u64, T)>> {
        self.chunks.pop()
    }

    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    #[cfg(debug_assertions)]
    fn deadlines(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.iter().flatten().map(|(at, _)| *at)
    }
}

impl<T> std::fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wheel")
            .field("elapsed", &self.elapsed)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<T> Wheel<T> {
    /// An empty wheel whose current time is 0.
    pub(crate) fn new() -> Self {
        Wheel {
            elapsed: 0,
            len: 0,
            levels: std::array::from_fn(|_| Level::new()),
            overflow: Bucket::default(),
            overflow_min: u64::MAX,
            due: Bucket::default(),
            late: BinaryHeap::new(),
            refiling: Bucket::default(),
        }
    }

    /// Adds `item` to come out of [`poll_bounded`](Wheel::poll_bounded) once `at` is reached.
    ///
    /// O(1) for deadlines at or after [`elapsed`](Wheel::elapsed). A deadline
    /// already in the past is due at the next poll; such items wait in a
    /// small heap (O(log n) in their number) so they still come out in order.
    pub(crate) fn insert(&mut self, at: u64, item: T) {
        self.len += 1;
        match at.cmp(&self.elapsed) {
            Ordering::Less => self.late.push(Late(at, item)),
            Ordering::Equal => self.due.push((at, item)),
            Ordering::Greater => self.file(at, item),
        }
    }

    /// Returns one item with deadline `<= now`, earliest first, or `None`
    /// once every such item has been returned.
    ///
    /// Advances the wheel's time to `now`, cascading slots as it goes; a
    /// `now` earlier than the wheel's time counts as the wheel's time, so
    /// time never runs backwards. Unbounded: see [`poll_bounded`](Wheel::poll_bounded).
    #[cfg(test)]
    pub(crate) fn poll(&mut self, now: u64) -> Option<(u64, T)> {
        loop {
            match self.poll_bounded(now) {
                Polled::Item(at, item) => return Some((at, item)),
                Polled::Busy => continue,
                Polled::Idle => return None,
            }
        }
    }

    /// Like `poll`, but never does more than [`REFILE_CHUNK`] items of re-filing in one
    /// call: a cascade of a huge slot comes back as `Busy` until it is done, so the owner
    /// can serve commands in between.
    pub(crate) fn poll_bounded(&mut self, now: u64) -> Polled<T> {
        let now = now.max(self.elapsed);
        loop {
            // Late items precede due ones: their deadlines are below `elapsed`.
            if let Some(Late(at, item)) = self.late.pop() {
                self.len -= 1;
                return Polled::Item(at, item);
            }
            // Due items may leave while a cascade is still being re-filed: everything left
            // to re-file is due at `elapsed` or later.
            if let Some((at, item)) = self.due.pop() {
                self.len -= 1;
                return Polled::Item(at, item);
            }
            if !self.refiling.is_empty() {
                self.refile();
                if self.due.is_empty() && !self.refiling.is_empty() {
                    return Polled::Busy;
                }
                continue;
            }
            match self.next_cascade() {
                Some(cascade) if cascade.deadline <= now => self.cascade(cascade),
                _ => {
                    // Nothing starts before `now`, so moving there keeps
                    // every item on the level `level_for` would choose.
                    self.elapsed = now;
                    return Polled::Idle;
                }
            }
        }
    }

    /// A time no later than the earliest pending deadline, `None` if empty.
    ///
    /// Polling at that time either returns an item or cascades so that the
    /// next value is strictly later; an item therefore causes at most one
    /// early wake-up per level it passes through. O(levels).
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if let Some(Late(at, _)) = self.late.peek() {
            return Some(*at);
        }
        if !self.due.is_empty() || !self.refiling.is_empty() {
            return Some(self.elapsed);
        }
        // Lower levels come first, so the next cascade's earliest item is the earliest of
        // all: sleep until it is due (the cascade then happens on that wake-up).
        self.next_cascade().map(|cascade| cascade.earliest)
    }

    /// Number of items inserted and not yet returned.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no items are pending.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The wheel's current time: the latest `now` it has been polled up to.
    #[cfg(test)]
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Files an item with `at > elapsed` on its level, or in overflow.
    fn file(&mut self, at: u64, item: T) {
        debug_assert!(at > self.elapsed);
        let level = level_for(self.elapsed, at);
        if level == LEVELS {
            self.overflow_min = self.overflow_min.min(at);
            self.overflow.push((at, item));
        } else {
            let slot = slot_of(level, at);
            let lvl = &mut self.levels[level];
            lvl.occupied |= 1 << slot;
            lvl.earliest[slot] = lvl.earliest[slot].min(at);
            lvl.slots[slot].push((at, item));
        }
    }

    /// The earliest slot (or overflow block) to cascade next.
    ///
    /// Lower levels always come first: everything on level `n` lies in the
    /// current level-`n + 1` slot, before anything filed higher up.
    fn next_cascade(&self) -> Option<Cascade> {
        for (level, lvl) in self.levels.iter().enumerate() {
            if let Some((slot, deadline, earliest)) = lvl.next_slot(level, self.elapsed) {
                return Some(Cascade {
                    level,
                    slot,
                    deadline,
                    earliest,
                });
            }
        }
        if self.overflow.is_empty() {
            return None;
        }
        Some(Cascade {
            level: LEVELS,
            slot: 0,
            // Start of the block holding the earliest overflow deadline.
            deadline: self.overflow_min & !(SPAN - 1),
            earliest: self.overflow_min,
        })
    }

    /// Moves the wheel's time to the cascade's deadline and queues its items
    /// for re-filing: those due exactly then become ready, the rest go lower
    /// down, a chunk at a time.
    fn cascade(&mut self, cascade: Cascade) {
        debug_assert!(cascade.deadline > self.elapsed);
        debug_assert!(self.due.is_empty() && self.late.is_empty() && self.refiling.is_empty());
        self.elapsed = cascade.deadline;
        let items = if cascade.level == LEVELS {
            self.overflow_min = u64::MAX;
            mem::take(&mut self.overflow)
        } else {
            let lvl = &mut self.levels[cascade.level];
            lvl.occupied &= !(1 << cascade.slot);
            lvl.earliest[cascade.slot] = u64::MAX;
            if cascade.level == 0 {
                // A level-0 slot holds a single deadline; hand the whole
                // Vec over and keep `due`'s spare buffer for the slot.
                mem::swap(&mut self.due, &mut lvl.slots[cascade.slot]);
                #[cfg(debug_assertions)]
                debug_assert!(self.due.deadlines().all(|at| at == self.elapsed));
                return;
            }
            mem::take(&mut lvl.slots[cascade.slot])
        };
        self.refiling = items;
    }

    /// Re-files one chunk (at most [`REFILE_CHUNK`] items) of the current cascade.
    fn refile(&mut self) {
        let Some(chunk) = self.refiling.pop_chunk() else {
            return;
        };
        for (at, item) in chunk {
            if at == self.elapsed {
                self.due.push((at, item));
            } else {
                self.file(at, item);
            }
        }
    }
}
