//! Where the machine keeps its tasks: one `BTreeMap` in creation order, plus a hash index
//! from task id to creation sequence.
//!
//! Keying the map by a random UUID (the obvious layout) made every create a cache-missing
//! walk to a random leaf, every list page a series of such walks, and every expiry one
//! more. In creation order, a create appends at the right edge of the tree (which stays
//! in cache), a page of a listing reads neighbouring entries, and a mass expiry removes
//! from the left edge. Lookups by id pay one hash probe first. Entries are boxed so tree
//! nodes stay small (a node of inline entries is about 1.7 KB, and splits and shifts move
//! them around); the box also keeps the memory per task below what inline entries in
//! half-full nodes would take.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use super::Entry;
use crate::model::TaskId;

/// Live tasks by creation sequence, with an index by id. Every entry's `id` is its key in
/// the index.
#[derive(Debug)]
pub(super) struct TaskTable<W> {
    by_seq: BTreeMap<u64, Box<Entry<W>>>,
    by_id: HashMap<TaskId, u64, IdHasher>,
}

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
        let seq = self.by_id.get(id)?;
        self.by_seq.get(seq).map(|entry| &**entry)
    }

    pub(super) fn get_mut(&mut self, id: &TaskId) -> Option<&mut Entry<W>> {
        let seq = self.by_id.get(id)?;
        self.by_seq.get_mut(seq).map(|entry| &mut **entry)
    }

    /// The task created with sequence number `seq`.
    pub(super) fn by_seq(&self, seq: u64) -> Option<&Entry<W>> {
        self.by_seq.get(&seq).map(|entry| &**entry)
    }

    /// The creation sequence number of task `id`.
    pub(super) fn seq_of(&self, id: &TaskId) -> Option<u64> {
        self.by_id.get(id).copied()
    }

    /// Adds a task under its `id` and `seq`; the caller guarantees neither is taken.
    pub(super) fn insert(&mut self, seq: u64, entry: Entry<W>) {
        let id = entry.id;
        let had_id = self.by_id.insert(id, seq).is_some();
        let had_seq = self.by_seq.insert(seq, Box::new(entry)).is_some();
        // A violation would leave two ids on one entry and later remove the wrong task:
        // better to stop the owner thread (callers then get `Closed`) than to go on.
        assert!(!had_id && !had_seq, "task {id} (seq {seq}) inserted twice");
    }

    /// Removes task `id`, handing back its sequence number and entry.
    pub(super) fn remove(&mut self, id: &TaskId) -> Option<(u64, Box<Entry<W>>)> {
        let seq = self.by_id.remove(id)?;
        self.by_seq.remove(&seq).map(|entry| (seq, entry))
    }

    /// Every task in creation order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry<W>> {
        self.by_seq.values().map(|entry| &**entry)
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
    fn the_key_changes_every_hash() {
        let (a, b) = (IdHasher::new(1), IdHasher::new(2));
        let id = TaskId::from_u128(7);
        assert_ne!(a.hash_one(id), b.hash_one(id));
    }
}
