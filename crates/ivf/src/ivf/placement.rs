//! Where the inverted lists live when an index is sharded over serving devices (Centaur): the
//! quantizer (centroids) on every device, each list on exactly one, the devices balanced by
//! the bytes their lists hold (vectors and ids), not by how many lists they hold - IVF lists
//! differ in size by an order of magnitude, and a device's scan time and memory follow bytes.

/// The owner of every list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub devices: usize,
    /// `owner[list]`: the device holding list `list`.
    pub owner: Vec<u16>,
}

impl Placement {
    /// Every list on one device (replication's view of a single device).
    pub fn single(nlist: usize) -> Placement {
        Placement {
            devices: 1,
            owner: vec![0; nlist],
        }
    }

    /// Lists of `list_bytes` over `devices`, largest first, each to the device holding the
    /// fewest bytes so far (the smaller index on a tie): deterministic, so the same sizes
    /// always give the same placement, and within the largest list of the mean.
    pub fn balanced(list_bytes: &[u64], devices: usize) -> Placement {
        assert!(
            (1..=u16::MAX as usize + 1).contains(&devices),
            "1 to 65536 devices"
        );
        let mut order: Vec<usize> = (0..list_bytes.len()).collect();
        // Largest first; equal sizes in list order.
        order.sort_by(|&a, &b| list_bytes[b].cmp(&list_bytes[a]).then(a.cmp(&b)));
        let mut load = vec![0u64; devices];
        let mut owner = vec![0u16; list_bytes.len()];
        for l in order {
            let d = (0..devices)
                .min_by_key(|&d| (load[d], d))
                .expect("at least one device");
            owner[l] = d as u16;
            load[d] += list_bytes[l];
        }
        Placement { devices, owner }
    }

    /// The lists device `d` holds, in list order.
    pub fn lists_of(&self, d: usize) -> Vec<u32> {
        (0..self.owner.len())
            .filter(|&l| self.owner[l] as usize == d)
            .map(|l| l as u32)
            .collect()
    }

    /// Bytes of lists per device.
    pub fn bytes_per_device(&self, list_bytes: &[u64]) -> Vec<u64> {
        let mut b = vec![0u64; self.devices];
        for (l, &d) in self.owner.iter().enumerate() {
            b[d as usize] += list_bytes[l];
        }
        b
    }

    /// The fullest device's bytes over the mean (1.0: perfectly even).
    pub fn imbalance(&self, list_bytes: &[u64]) -> f64 {
        let b = self.bytes_per_device(list_bytes);
        let total: u64 = b.iter().sum();
        if total == 0 {
            return 1.0;
        }
        *b.iter().max().expect("devices >= 1") as f64 / (total as f64 / self.devices as f64)
    }
}

/// Bytes of each list of an index with `dim`-dimensional f32 vectors and u32 ids.
pub fn list_bytes(cell_sizes: &[usize], dim: usize) -> Vec<u64> {
    cell_sizes
        .iter()
        .map(|&n| (n * (dim * 4 + 4)) as u64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bytes_not_counts_are_balanced() {
        // One huge list and many small ones: counts would put 4 lists on each device.
        let sizes = [1000, 10, 10, 10, 10, 10, 10, 10];
        let p = Placement::balanced(&sizes, 2);
        assert_eq!(p.lists_of(0), vec![0]);
        assert_eq!(p.lists_of(1), (1..8).collect::<Vec<u32>>());
        assert_eq!(p.bytes_per_device(&sizes), vec![1000, 70]);
    }

    proptest! {
        /// Every list has one owner; the fullest device holds at most the mean plus the
        /// largest list (greedy's bound); the same sizes give the same placement.
        #[test]
        fn every_list_is_placed_once_and_evenly(
            sizes in proptest::collection::vec(0u64..5000, 1..300),
            devices in 1usize..17,
        ) {
            let p = Placement::balanced(&sizes, devices);
            prop_assert_eq!(p.owner.len(), sizes.len());
            prop_assert!(p.owner.iter().all(|&d| (d as usize) < devices));
            let per = p.bytes_per_device(&sizes);
            let total: u64 = sizes.iter().sum();
            prop_assert_eq!(per.iter().sum::<u64>(), total);
            let largest = *sizes.iter().max().unwrap();
            let max = *per.iter().max().unwrap();
            prop_assert!(max as f64 <= total as f64 / devices as f64 + largest as f64);
            prop_assert_eq!(Placement::balanced(&sizes, devices), p);
        }
    }
}
