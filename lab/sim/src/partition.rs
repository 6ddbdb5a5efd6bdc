//! NUMA-aware cache way partitioning: each socket starts a kernel with half its ways for
//! local and half for remote data; every sample it moves one way toward remote when its
//! incoming link saturates while its DRAM does not, toward local in the opposite case, and
//! toward equal when both saturate; each side keeps at least one way.

/// New count of local ways (of `ways`) after one sample.
pub fn rebalance(ways: usize, local: usize, link_saturated: bool, dram_saturated: bool) -> usize {
    debug_assert!(local >= 1 && local < ways);
    let half = ways / 2;
    let next = match (link_saturated, dram_saturated) {
        (true, false) => local.saturating_sub(1),
        (false, true) => local + 1,
        (true, true) if local > half => local - 1,
        (true, true) if local < half => local + 1,
        _ => local,
    };
    next.clamp(1, ways - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_one_way_toward_what_saturates_never_below_one() {
        assert_eq!(rebalance(16, 8, true, false), 7); // link-bound: more remote ways
        assert_eq!(rebalance(16, 8, false, true), 9); // DRAM-bound: more local ways
        assert_eq!(rebalance(16, 1, true, false), 1);
        assert_eq!(rebalance(16, 15, false, true), 15);
        assert_eq!(rebalance(16, 12, true, true), 11); // both: toward equal
        assert_eq!(rebalance(16, 5, true, true), 6);
        assert_eq!(rebalance(16, 8, false, false), 8);
        assert_eq!(rebalance(4, 2, true, false), 1); // an L1 of 4 ways
    }
}
