//! Giving memory back after a peak. A hash map keeps its largest capacity after its entries are
//! removed, so a kernel that once held 100 000 live or waiting executions would keep every map
//! indexed by execution at that size for good. The maps that grow with the number of
//! executions call [`relax`] after removing entries: once at most an eighth of a large map is
//! used, it is shrunk to twice its length. Shrinking costs one rehash of what is left, and at
//! least three quarters of the entries must go before the next one, so the cost per removal
//! stays constant.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// Capacity below which a map is never shrunk (not worth a rehash).
const FLOOR: usize = 1024;

/// Whether a collection of `len` entries in `capacity` slots should be shrunk.
fn oversized(len: usize, capacity: usize) -> bool {
    capacity > FLOOR && len.saturating_mul(8) < capacity
}

/// Shrinks `map` when it is large and mostly empty.
pub fn relax<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if oversized(map.len(), map.capacity()) {
        map.shrink_to(map.len() * 2);
    }
}

/// Shrinks `set` when it is large and mostly empty.
pub fn relax_set<T: Eq + Hash, S: BuildHasher>(set: &mut HashSet<T, S>) {
    if oversized(set.len(), set.capacity()) {
        set.shrink_to(set.len() * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_map_emptied_below_an_eighth_gives_its_memory_back() {
        let mut map: HashMap<u32, u32> = (0..100_000).map(|n| (n, n)).collect();
        map.retain(|key, _| *key < 20_000);
        let before = map.capacity();
        relax(&mut map);
        assert_eq!(map.capacity(), before, "a fifth still used: kept");
        map.retain(|key, _| *key < 1_000);
        relax(&mut map);
        assert!(
            map.capacity() < 4_000,
            "shrunk to about twice its length: {}",
            map.capacity()
        );
        assert_eq!(map.len(), 1_000);
        assert!((0..1_000).all(|key| map.get(&key) == Some(&key)));
    }

    #[test]
    fn small_maps_are_left_alone() {
        let mut set: HashSet<u32> = (0..500).collect();
        let capacity = set.capacity();
        set.clear();
        relax_set(&mut set);
        assert_eq!(set.capacity(), capacity);
    }
}
