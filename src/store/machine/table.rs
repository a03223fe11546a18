//! Where the machine keeps its tasks: one `BTreeMap` in creation order, plus a hash index
//! from task id to the task's place.
//!
//! Keying the map by a random UUID (the obvious layout) made every create a cache-missing
//! walk to a random leaf, every list page a series of such walks, and every expiry one
//! more. In creation order, a create appends at the right edge of the tree (which stays
//! in cache), a page of a listing reads neighbouring entries, and a mass expiry removes
//! from the left edge.
//!
//! Entries live in heap allocations of their own, so tree nodes stay small (a node of
//! inline entries is about 1.7 KB, and splits and shifts move them around) and an entry
//! never moves. The hash index therefore points at the entry itself: a lookup by id is one
//! hash probe and no walk down the tree (at 100,000 tasks the walk made the cycle of
//! create, get, store result and get result 12-15% slower). The index's slot is 32 bytes
//! either way (the id is 16-aligned), so the pointer costs no memory.

use std::collections::btree_map;
use std::collections::hash_map;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::ptr::NonNull;

use super::Entry;
use crate::model::TaskId;

/// Live tasks by creation sequence, with an index by id.
///
/// Ownership: every entry is a `Box` turned into a raw pointer when inserted, owned by the
/// table from then on and freed exactly once, when it is removed or the table drops.
/// `by_seq` and `by_id` always hold the same tasks, with the same pointer for each, and
/// each entry's `id` is its key in `by_id`. Entries are reached only through the table:
/// shared access through `&self`, exclusive through `&mut self`.
pub(super) struct TaskTable<W> {
    by_seq: BTreeMap<u64, NonNull<Entry<W>>>,
    by_id: HashMap<TaskId, Place<W>, IdHasher>,
}

/// Where a task is: its creation sequence number and its entry.
struct Place<W> {
    seq: u64,
    entry: NonNull<Entry<W>>,
}

// SAFETY: the table owns its entries as a collection of `Box<Entry<W>>` would (see the
// ownership note above): sending it sends them, sharing it shares them read-only.
unsafe impl<W> Send for TaskTable<W> where Entry<W>: Send {}
// SAFETY: as above; `&TaskTable` only ever gives out `&Entry`.
unsafe impl<W> Sync for TaskTable<W> where Entry<W>: Sync {}

impl<W> TaskTable<W> {
    /// An empty table; `key` seeds the id hash (pass a secret).
    pub(super) fn new(key: u64) -> TaskTable<W> {
        TaskTable {
            by_seq: BTreeMap::new(),
            by_id: HashMap::with_hasher(IdHasher::new(key)),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.by_seq.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_seq.is_empty()
    }

    pub(super) fn contains_key(&self, id: &TaskId) -> bool {
        self.by_id.contains_key(id)
    }

    pub(super) fn get(&self, id: &TaskId) -> Option<&Entry<W>> {
        let place = self.by_id.get(id)?;
        // SAFETY: a pointer in the table is a live entry it owns; `&self` rules out any
        // `&mut` to it for the lifetime returned.
        Some(unsafe { place.entry.as_ref() })
    }

    pub(super) fn get_mut(&mut self, id: &TaskId) -> Option<&mut Entry<W>> {
        let mut entry = self.by_id.get(id)?.entry;
        // SAFETY: as in `get`; `&mut self` makes this the only reference.
        Some(unsafe { entry.as_mut() })
    }

    /// The task created with sequence number `seq`.
    pub(super) fn by_seq(&self, seq: u64) -> Option<&Entry<W>> {
        let entry = self.by_seq.get(&seq)?;
        // SAFETY: as in `get`.
        Some(unsafe { entry.as_ref() })
    }

    /// The creation sequence number of task `id`.
    pub(super) fn seq_of(&self, id: &TaskId) -> Option<u64> {
        self.by_id.get(id).map(|place| place.seq)
    }

    /// Adds a task under its `id` and `seq`; the caller guarantees neither is taken.
    pub(super) fn insert(&mut self, seq: u64, entry: Entry<W>) {
        let id = entry.id;
        // A violation would leave two ids on one entry and later remove the wrong task:
        // better to stop the owner thread (callers then get `Closed`) than to go on.
        let (hash_map::Entry::Vacant(by_id), btree_map::Entry::Vacant(by_seq)) =
            (self.by_id.entry(id), self.by_seq.entry(seq))
        else {
            panic!("task {id} (seq {seq}) inserted twice");
        };
        let entry = NonNull::from(Box::leak(Box::new(entry)));
        by_seq.insert(entry);
        by_id.insert(Place { seq, entry });
    }

    /// Removes task `id`, handing back its sequence number and entry.
    pub(super) fn remove(&mut self, id: &TaskId) -> Option<(u64, Entry<W>)> {
        let Place { seq, entry } = self.by_id.remove(id)?;
        let same = self.by_seq.remove(&seq);
        debug_assert_eq!(same, Some(entry), "the two indexes agree");
        // SAFETY: the pointer came from the box leaked in `insert` and has just left both
        // indexes, so this is its only owner.
        let entry = unsafe { Box::from_raw(entry.as_ptr()) };
        Some((seq, *entry))
    }

    /// The tasks created after sequence number `after` (from the first with `None`), in
    /// creation order, with their sequence numbers.
    pub(super) fn iter_after(&self, after: Option<u64>) -> impl Iterator<Item = (u64, &Entry<W>)> {
        let from = match after {
            Some(seq) => std::ops::Bound::Excluded(seq),
            None => std::ops::Bound::Unbounded,
        };
        self.by_seq
            .range((from, std::ops::Bound::Unbounded))
            // SAFETY: as in `get`.
            .map(|(seq, entry)| (*seq, unsafe { entry.as_ref() }))
    }

    /// Every task in creation order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry<W>> {
        // SAFETY: as in `get`.
        self.by_seq.values().map(|entry| unsafe { entry.as_ref() })
    }
}

impl<W> Drop for TaskTable<W> {
    fn drop(&mut self) {
        for (_, entry) in std::mem::take(&mut self.by_seq) {
            // SAFETY: each pointer is owned by the table alone and freed only here.
            drop(unsafe { Box::from_raw(entry.as_ptr()) });
        }
    }
}

impl<W> std::fmt::Debug for TaskTable<W>
where
    Entry<W>: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.by_seq.keys().zip(self.iter()))
            .finish()
    }
}

impl<W> std::ops::Index<&TaskId> for TaskTable<W> {
    type Output = Entry<W>;

    fn index(&self, id: &TaskId) -> &Entry<W> {
        self.get(id).expect("no task with this id")
    }
}

/// Hashes task ids (128 random bits) with one keyed multiply instead of SipHash: ids come
/// from a CSPRNG or from the store's own journal, and the key is secret, so a caller cannot
/// aim many ids at one bucket.
#[derive(Clone, Copy, Debug)]
struct IdHasher {
    key: u64,
}

impl IdHasher {
    fn new(key: u64) -> IdHasher {
        // Decorrelate from the cursor key it is derived from.
        IdHasher {
            key: mix(key ^ 0x9e37_79b9_7f4a_7c15, 0xd6e8_feb8_6659_fd93),
        }
    }
}

impl BuildHasher for IdHasher {
    type Hasher = IdHash;

    fn build_hasher(&self) -> IdHash {
        IdHash { state: self.key }
    }
}

/// The hasher [`IdHasher`] builds.
#[derive(Debug)]
struct IdHash {
    state: u64,
}

impl Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write_u128(&mut self, value: u128) {
        let (high, low) = ((value >> 64) as u64, value as u64);
        // The key goes into both factors, so no id makes either factor a known constant.
        let key = self.state;
        self.state = mix(
            key ^ low,
            high ^ key.rotate_left(32) ^ 0x2d35_8dcc_aa6c_78a5,
        );
    }

    // Only task ids are hashed with this; anything else still hashes soundly.
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.state = mix(self.state ^ u64::from_le_bytes(word), 0x8bb8_4b93_962e_acc9);
        }
    }
}

/// The folded 64x64 -> 128-bit multiply: both halves of the product, xored.
fn mix(a: u64, b: u64) -> u64 {
    let product = u128::from(a).wrapping_mul(u128::from(b));
    (product as u64) ^ ((product >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn sequential_ids_spread_over_buckets() {
        // Ids a caller might invent (small integers) must not collide in the low bits
        // hashbrown picks buckets with.
        let build = IdHasher::new(42);
        let buckets: HashSet<u64> = (0u128..4096)
            .map(|i| build.hash_one(TaskId::from_u128(i)) & 0xfff)
            .collect();
        assert!(
            buckets.len() > 2_400,
            "{} of 4096 buckets used",
            buckets.len()
        );
    }

    #[test]
    fn ids_differing_only_in_their_high_half_spread_over_buckets() {
        // Both halves of an id feed the hash: ids that differ only in their high half must
        // not share buckets either.
        let build = IdHasher::new(42);
        let buckets: HashSet<u64> = (0u128..4096)
            .map(|i| build.hash_one(TaskId::from_u128(i << 64 | 7)) & 0xfff)
            .collect();
        assert!(
            buckets.len() > 2_400,
            "{} of 4096 buckets used",
            buckets.len()
        );
    }

    #[test]
    fn the_key_changes_every_hash() {
        let (a, b) = (IdHasher::new(1), IdHasher::new(2));
        let id = TaskId::from_u128(7);
        assert_ne!(a.hash_one(id), b.hash_one(id));
    }
}
