//! IVF-Flat: a coarse quantizer (k-means centroids) splits the base into `nlist` cells; the
//! vectors are stored cell-major (every cell contiguous, ids beside them) so scanning a cell
//! is one sequential read. The quantizer (centroids) and the inverted lists are separate,
//! as in FAISS, and the query runs as three stages (see `stages`).

mod format;
pub mod placement;
pub mod shard;
pub mod stages;
pub mod streamed;

use crate::assign::{Assigner, CpuGemm};
use crate::hugebuf::HugeF32;
use crate::kmeans::{self, KMeansConfig};
use crate::metric::Metric;
use crate::topk::Neighbor;
use crate::vecfile::Vectors;
use anyhow::Result;
use std::path::Path;

pub use format::{FORMAT_VERSION, MAGIC};

/// Where the arrays live: built in memory, or mapped from an index file.
enum Store {
    Owned {
        centroids: Vec<f32>,
        offsets: Vec<u64>,
        ids: Vec<u32>,
        vectors: HugeF32,
    },
    Mapped {
        map: memmap2::Mmap,
        layout: format::Layout,
    },
}

pub struct IvfIndex {
    pub dim: usize,
    pub nlist: usize,
    pub n: usize,
    pub metric: Metric,
    /// nprobe used when a request asks for 0.
    pub default_nprobe: usize,
    /// Where the lists go when the index is sharded over `placement.devices` devices, as
    /// recorded in the file (`cohort index place`), so every start places them the same way.
    pub placement: Option<placement::Placement>,
    store: Store,
}

impl std::fmt::Debug for IvfIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IvfIndex")
            .field("dim", &self.dim)
            .field("nlist", &self.nlist)
            .field("n", &self.n)
            .field("metric", &self.metric)
            .field("mapped", &matches!(self.store, Store::Mapped { .. }))
            .finish()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct SearchParams {
    pub k: usize,
    pub nprobe: usize,
}

impl IvfIndex {
    /// Trains the quantizer on `base` and fills the inverted lists, on the CPU.
    pub fn build(base: &Vectors, nlist: usize, metric: Metric, km: &KMeansConfig) -> IvfIndex {
        IvfIndex::build_with(base, nlist, metric, km, &mut CpuGemm)
            .expect("the CPU assigner fails only on bad dimensions")
    }

    /// Builds with the nearest-centroid steps (training and filling the lists) on `assigner`.
    pub fn build_with(
        base: &Vectors,
        nlist: usize,
        metric: Metric,
        km: &KMeansConfig,
        assigner: &mut dyn Assigner,
    ) -> Result<IvfIndex> {
        assert!(
            nlist >= 1 && nlist <= base.n,
            "nlist must be between 1 and the number of vectors"
        );
        assert!(base.n <= u32::MAX as usize, "ids are u32");
        let centroids = kmeans::train_with(
            base,
            &KMeansConfig {
                k: nlist,
                ..km.clone()
            },
            assigner,
        )?;
        let assign = assigner.assign(base, &centroids, metric)?;
        // Counting sort by cell: offsets, then stable placement.
        let mut offsets = vec![0u64; nlist + 1];
        for &a in &assign {
            offsets[a as usize + 1] += 1;
        }
        for i in 0..nlist {
            offsets[i + 1] += offsets[i];
        }
        let mut cursor: Vec<u64> = offsets[..nlist].to_vec();
        let mut ids = vec![0u32; base.n];
        let mut vectors = HugeF32::zeroed(base.n * base.dim);
        for (i, &a) in assign.iter().enumerate() {
            let at = cursor[a as usize] as usize;
            cursor[a as usize] += 1;
            ids[at] = i as u32;
            vectors[at * base.dim..(at + 1) * base.dim].copy_from_slice(base.row(i));
        }
        Ok(IvfIndex {
            dim: base.dim,
            nlist,
            n: base.n,
            metric,
            default_nprobe: default_nprobe(nlist),
            placement: None,
            store: Store::Owned {
                centroids: centroids.data,
                offsets,
                ids,
                vectors,
            },
        })
    }

    pub fn centroids(&self) -> &[f32] {
        match &self.store {
            Store::Owned { centroids, .. } => centroids,
            Store::Mapped { map, layout } => layout.centroids(map),
        }
    }
    pub fn offsets(&self) -> &[u64] {
        match &self.store {
            Store::Owned { offsets, .. } => offsets,
            Store::Mapped { map, layout } => layout.offsets(map),
        }
    }
    pub fn ids(&self) -> &[u32] {
        match &self.store {
            Store::Owned { ids, .. } => ids,
            Store::Mapped { map, layout } => layout.ids(map),
        }
    }
    /// All vectors, cell-major.
    pub fn vectors(&self) -> &[f32] {
        match &self.store {
            Store::Owned { vectors, .. } => vectors,
            Store::Mapped { map, layout } => layout.vectors(map),
        }
    }

    /// Rows [start, end) of cell `c` in the cell-major arrays.
    pub fn cell_range(&self, c: usize) -> (usize, usize) {
        let o = self.offsets();
        (o[c] as usize, o[c + 1] as usize)
    }

    pub fn cell_sizes(&self) -> Vec<usize> {
        self.offsets()
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .collect()
    }

    /// An in-memory copy whose vectors went through `f` (e.g. rounding to f16: the CPU twin
    /// of an index stored in half precision).
    pub fn with_vectors_mapped(&self, f: impl Fn(f32) -> f32) -> IvfIndex {
        let mut v = HugeF32::zeroed(self.vectors().len());
        v.iter_mut()
            .zip(self.vectors())
            .for_each(|(o, x)| *o = f(*x));
        IvfIndex {
            placement: self.placement.clone(),
            ..self.owning(self.offsets().to_vec(), self.ids().to_vec(), v)
        }
    }

    /// An index of this one's shape and quantizer holding `offsets`, `ids` and `vectors`.
    fn owning(&self, offsets: Vec<u64>, ids: Vec<u32>, vectors: HugeF32) -> IvfIndex {
        IvfIndex {
            dim: self.dim,
            nlist: self.nlist,
            n: self.n,
            metric: self.metric,
            default_nprobe: self.default_nprobe,
            placement: None,
            store: Store::Owned {
                centroids: self.centroids().to_vec(),
                offsets,
                ids,
                vectors,
            },
        }
    }

    /// filter -> search -> reduce for one query.
    pub fn query(&self, q: &[f32], p: SearchParams) -> Vec<Neighbor> {
        let nprobe = if p.nprobe == 0 {
            self.default_nprobe
        } else {
            p.nprobe
        };
        let probes = stages::filter(self.centroids(), self.dim, self.metric, q, nprobe);
        let partials = stages::search(self, q, &probes, p.k);
        stages::reduce(&partials, p.k)
    }

    /// The placement over `devices` devices: the recorded one where the file holds one for
    /// that many, else the balanced one (deterministic: the same sizes place the same way).
    pub fn placement_for(&self, devices: usize) -> placement::Placement {
        match &self.placement {
            Some(p) if p.devices == devices => p.clone(),
            _ => placement::Placement::balanced(
                &placement::list_bytes(&self.cell_sizes(), self.dim),
                devices,
            ),
        }
    }

    /// Part `part` of the index under `p` (a node's shard): every centroid, only the lists
    /// `p` gives that part (the others empty), ids as in the whole index. A query finds
    /// exactly the whole index's neighbours among those lists, so the parts' answers reduced
    /// together are the whole index's answer. `n` stays the whole index's: requests are
    /// checked against the index they were written for, not against one part's rows.
    pub fn part(&self, p: &placement::Placement, part: usize) -> IvfIndex {
        assert_eq!(p.owner.len(), self.nlist, "a placement of another index");
        assert!(part < p.devices, "part {part} of {}", p.devices);
        let lists = p.lists_of(part);
        let rows: usize = lists
            .iter()
            .map(|&l| {
                let (s, e) = self.cell_range(l as usize);
                e - s
            })
            .sum();
        let (mut ids, mut vectors) = (Vec::with_capacity(rows), HugeF32::zeroed(rows * self.dim));
        let mut offsets = Vec::with_capacity(self.nlist + 1);
        let mut mine = lists.iter().peekable();
        for l in 0..self.nlist {
            offsets.push(ids.len() as u64);
            if mine.next_if(|&&m| m as usize == l).is_some() {
                let (s, e) = self.cell_range(l);
                let at = ids.len();
                ids.extend_from_slice(&self.ids()[s..e]);
                vectors[at * self.dim..(at + e - s) * self.dim]
                    .copy_from_slice(&self.vectors()[s * self.dim..e * self.dim]);
            }
        }
        offsets.push(ids.len() as u64);
        self.owning(offsets, ids, vectors)
    }

    /// A fingerprint of the index's lists and quantizer under placement `p`: parts cut from
    /// the same index the same way agree on it, so a front end never merges parts of two
    /// different indexes (or two placements of one).
    pub fn layout_fingerprint(&self, p: &placement::Placement) -> u64 {
        let mut lists = crc32fast::Hasher::new();
        for o in self.offsets() {
            lists.update(&o.to_le_bytes());
        }
        for d in &p.owner {
            lists.update(&d.to_le_bytes());
        }
        lists.update(&(p.devices as u64).to_le_bytes());
        let mut quantizer = crc32fast::Hasher::new();
        for c in self.centroids() {
            quantizer.update(&c.to_le_bytes());
        }
        (u64::from(lists.finalize()) << 32) | u64::from(quantizer.finalize())
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        format::save(self, path)
    }

    /// Maps the file (pages come in on first use; nothing is copied).
    pub fn load(path: &Path) -> Result<IvfIndex> {
        format::load(path)
    }

    /// Loads the file (mapped, checked) and copies it into resident memory backed by huge
    /// pages where the kernel allows: faster scans, no first-touch page faults.
    pub fn load_resident(path: &Path) -> Result<IvfIndex> {
        let m = format::load(path)?;
        let store = Store::Owned {
            centroids: m.centroids().to_vec(),
            offsets: m.offsets().to_vec(),
            ids: m.ids().to_vec(),
            vectors: HugeF32::from_slice(m.vectors()),
        };
        Ok(IvfIndex { store, ..m })
    }
}

/// A default nprobe that gives recall@10 around 0.9 on SIFT-like data (about 1/64 of nlist,
/// at least 8; the demo measures it).
pub fn default_nprobe(nlist: usize) -> usize {
    (nlist / 64).clamp(8.min(nlist), nlist)
}
