//! Bounded top-k selection (smallest distances), ties broken by smaller id so results are
//! deterministic and comparable between implementations.

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbor {
    pub id: u32,
    pub distance: f32,
}

fn before(a: &Neighbor, b: &Neighbor) -> bool {
    a.distance < b.distance || (a.distance == b.distance && a.id < b.id)
}

/// Keeps the k nearest seen so far in a sorted array: for the small k of k-NN queries
/// (<= a few hundred) an insertion into a sorted array beats a heap, and the threshold
/// check rejects almost every candidate with one comparison.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    items: Vec<Neighbor>,
}

impl TopK {
    pub fn new(k: usize) -> TopK {
        TopK {
            k,
            items: Vec::with_capacity(k + 1),
        }
    }

    /// Distance a candidate must beat to enter (infinity until k are held).
    #[inline]
    pub fn threshold(&self) -> f32 {
        if self.items.len() < self.k {
            f32::INFINITY
        } else {
            self.items[self.k - 1].distance
        }
    }

    #[inline]
    pub fn push(&mut self, id: u32, distance: f32) {
        if self.k == 0 {
            return;
        }
        let n = Neighbor { id, distance };
        if self.items.len() == self.k && !before(&n, &self.items[self.k - 1]) {
            return;
        }
        let pos = self.items.partition_point(|x| before(x, &n));
        self.items.insert(pos, n);
        self.items.truncate(self.k);
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Sorted nearest first.
    pub fn into_sorted(self) -> Vec<Neighbor> {
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Equals sorting everything and taking the first k.
        #[test]
        fn matches_full_sort(d in proptest::collection::vec(0u8..50, 0..400), k in 0usize..40) {
            let mut t = TopK::new(k);
            for (i, x) in d.iter().enumerate() {
                t.push(i as u32, *x as f32);
            }
            let mut all: Vec<Neighbor> = d.iter().enumerate()
                .map(|(i, x)| Neighbor { id: i as u32, distance: *x as f32 }).collect();
            all.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.id.cmp(&b.id)));
            all.truncate(k);
            prop_assert_eq!(t.into_sorted(), all);
        }
    }
}
