//! Which kernel should own which partition: rendezvous (highest random weight) hashing with
//! bounded loads. Every kernel computes the same answer from the same list of live kernels, a
//! kernel joining or leaving moves about 1/N of the partitions, and every kernel gets
//! floor(P/N) or ceil(P/N), so three kernels over 64 partitions hold 21 or 22 each (plain
//! rendezvous hashing would scatter them by ±4 on average).
//!
//! The hash is spelled out here (FNV-1a and the splitmix64 finaliser) because every kernel of
//! a cluster, whatever its build, must agree on it; Rust's `DefaultHasher` promises no stable
//! output.

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The splitmix64 finaliser: spreads every input bit over the output.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The weight of `node` for `partition`; the highest weight wins.
fn weight(node: &str, partition: u32) -> u64 {
    mix(fnv1a(node.as_bytes()) ^ mix(u64::from(partition)))
}

/// Returns, for each partition `0..partitions`, the index in `nodes` of the kernel that should
/// own it (`None` only when `nodes` is empty). `nodes` is the list of live kernel ids; its
/// order does not matter.
///
/// All (partition, kernel) pairs are visited by decreasing weight, and a pair is taken when its
/// partition is still free and its kernel has room: `floor(P/N)` partitions each, plus one more
/// for the first `P mod N` kernels that ask. So every kernel ends with `floor(P/N)` or
/// `ceil(P/N)` partitions (a free partition always meets a kernel with room: the rooms add up
/// to P), and most partitions go to their highest-weight kernel, which is what keeps moves
/// small when the set of kernels changes.
pub fn assign(nodes: &[String], partitions: u32) -> Vec<Option<usize>> {
    let mut owners = vec![None; partitions as usize];
    if nodes.is_empty() {
        return owners;
    }
    let count = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
    let floor = partitions / count;
    let mut extra = partitions % count;
    let mut load = vec![0_u32; nodes.len()];
    let mut pairs: Vec<(u64, u32, &str, usize)> = Vec::with_capacity(owners.len() * nodes.len());
    for partition in 0..partitions {
        for (index, node) in nodes.iter().enumerate() {
            pairs.push((weight(node, partition), partition, node.as_str(), index));
        }
    }
    // Highest weight first; ties (never in practice) by partition, then id, so the order of
    // `nodes` never matters.
    pairs.sort_unstable_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| a.1.cmp(&b.1))
            .then_with(|| a.2.cmp(b.2))
    });
    for (_, partition, _, index) in pairs {
        let slot = &mut owners[partition as usize];
        if slot.is_some() {
            continue;
        }
        if load[index] < floor {
            load[index] += 1;
            *slot = Some(index);
        } else if load[index] == floor && extra > 0 {
            extra -= 1;
            load[index] += 1;
            *slot = Some(index);
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|index| format!("kernel-{index}")).collect()
    }

    fn loads(nodes: &[String], partitions: u32) -> Vec<u32> {
        let mut load = vec![0; nodes.len()];
        for owner in assign(nodes, partitions) {
            load[owner.expect("every partition has an owner")] += 1;
        }
        load
    }

    #[test]
    fn the_hash_is_stable() {
        // Pinned values: a kernel built later must agree with one built today.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(mix(0), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn every_partition_gets_a_kernel_and_loads_are_even() {
        for count in 1..=12 {
            let nodes = names(count);
            let load = loads(&nodes, 64);
            let ideal = 64.0 / count as f64;
            for held in &load {
                assert!(
                    (f64::from(*held) - ideal).abs() < 1.0,
                    "{count} kernels: loads {load:?}"
                );
            }
            assert_eq!(load.iter().sum::<u32>(), 64);
        }
    }

    #[test]
    fn the_order_of_the_kernels_does_not_matter() {
        let nodes = names(5);
        let mut reversed = nodes.clone();
        reversed.reverse();
        let forward: Vec<_> = assign(&nodes, 64)
            .into_iter()
            .map(|owner| owner.map(|index| nodes[index].clone()))
            .collect();
        let backward: Vec<_> = assign(&reversed, 64)
            .into_iter()
            .map(|owner| owner.map(|index| reversed[index].clone()))
            .collect();
        assert_eq!(forward, backward);
    }

    #[test]
    fn a_join_moves_about_one_nth() {
        for count in 1..=6 {
            let before_nodes = names(count);
            let after_nodes = names(count + 1);
            let before = assign(&before_nodes, 64);
            let after = assign(&after_nodes, 64);
            let moved = before
                .iter()
                .zip(&after)
                .filter(|(old, new)| {
                    old.map(|index| &before_nodes[index]) != new.map(|index| &after_nodes[index])
                })
                .count();
            let ideal = 64 / (count + 1);
            assert!(
                moved <= ideal + ideal / 2 + 2,
                "{count} -> {} kernels moved {moved} partitions (ideal {ideal})",
                count + 1
            );
        }
    }

    #[test]
    fn no_kernels_no_owners() {
        assert_eq!(assign(&[], 3), vec![None, None, None]);
    }
}
