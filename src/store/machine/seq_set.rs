//! An ordered set of creation sequence numbers, stored as 64-bit blocks in a `BTreeMap`.
//!
//! A session's index lists its tasks in creation order. As a `BTreeSet<u64>` it took about
//! 15 bytes per task in tree nodes of about 100 bytes, and a mass expiry freed those nodes
//! by the hundred thousand: small chunks the allocator keeps on its fast lists and later
//! consolidates in one go, which measured as single 4-11 ms stalls of the owner thread.
//! A session's tasks are mostly created in runs, so a block of 64 numbers with a bitmap
//! holds many of them in one map entry: about 0.3 bytes per task in the common case, and
//! some 25-30 in the worst (every block holding a single number, in tree nodes).

use std::collections::BTreeMap;

/// A set of `u64`, iterable in order from any point.
#[derive(Debug, Default)]
pub(super) struct SeqSet {
    /// Block number (`seq / 64`) -> bitmap of the members in it; never an empty bitmap.
    blocks: BTreeMap<u64, u64>,
    len: usize,
}

fn split(seq: u64) -> (u64, u64) {
    (seq >> 6, 1 << (seq & 63))
}

impl SeqSet {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `seq`; false if it was there already.
    pub(super) fn insert(&mut self, seq: u64) -> bool {
        let (block, bit) = split(seq);
        let bits = self.blocks.entry(block).or_insert(0);
        let added = *bits & bit == 0;
        *bits |= bit;
        self.len += usize::from(added);
        added
    }

    /// Removes `seq`; false if it was not there.
    pub(super) fn remove(&mut self, seq: u64) -> bool {
        let (block, bit) = split(seq);
        let Some(bits) = self.blocks.get_mut(&block) else {
            return false;
        };
        if *bits & bit == 0 {
            return false;
        }
        *bits &= !bit;
        if *bits == 0 {
            self.blocks.remove(&block);
        }
        self.len -= 1;
        true
    }

    /// The members `>= from`, in increasing order.
    pub(super) fn range_from(&self, from: u64) -> impl Iterator<Item = u64> + '_ {
        let (first_block, _) = split(from);
        self.blocks
            .range(first_block..)
            .flat_map(|(&block, &bits)| Bits { block, bits })
            .filter(move |&seq| seq >= from)
    }
}

/// The members of one block, in increasing order.
struct Bits {
    block: u64,
    bits: u64,
}

impl Iterator for Bits {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.bits == 0 {
            return None;
        }
        let low = u64::from(self.bits.trailing_zeros());
        self.bits &= self.bits - 1;
        Some(self.block << 6 | low)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn keeps_order_across_blocks_and_drops_empty_blocks() {
        let mut set = SeqSet::default();
        for seq in [130, 1, 63, 64, 0, u64::MAX] {
            assert!(set.insert(seq));
        }
        assert!(!set.insert(63));
        assert_eq!(set.len(), 6);
        assert_eq!(
            set.range_from(0).collect::<Vec<_>>(),
            [0, 1, 63, 64, 130, u64::MAX]
        );
        assert_eq!(set.range_from(64).collect::<Vec<_>>(), [64, 130, u64::MAX]);
        assert_eq!(set.range_from(131).collect::<Vec<_>>(), [u64::MAX]);
        assert!(set.remove(64));
        assert!(!set.remove(64));
        assert!(!set.remove(65));
        assert!(!set.blocks.contains_key(&1), "an emptied block goes away");
        for seq in [130, 1, 63, 0, u64::MAX] {
            assert!(set.remove(seq));
        }
        assert!(set.is_empty());
        assert!(set.blocks.is_empty());
    }

    proptest! {
        #[test]
        fn behaves_like_a_btreeset(
            ops in prop::collection::vec((any::<bool>(), 0u64..400), 0..300),
            from in 0u64..450,
        ) {
            let mut set = SeqSet::default();
            let mut oracle = BTreeSet::new();
            for (add, seq) in ops {
                if add {
                    prop_assert_eq!(set.insert(seq), oracle.insert(seq));
                } else {
                    prop_assert_eq!(set.remove(seq), oracle.remove(&seq));
                }
                prop_assert_eq!(set.len(), oracle.len());
            }
            let ours: Vec<u64> = set.range_from(from).collect();
            let theirs: Vec<u64> = oracle.range(from..).copied().collect();
            prop_assert_eq!(ours, theirs);
        }
    }
}
