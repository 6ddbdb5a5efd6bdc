//! Cohort's own k-NN search as a trace: a real IVF index (cohort-ivf, SIFT-like synthetic
//! vectors, k-means coarse quantizer) and real probes (the coarse quantizer's filter on real
//! queries) turned into the address streams of the GPU engine's three kernels: filter (every
//! query reads all centroids), search (a CTA per (query, probe) scans the probed cell's rows,
//! contiguous in the cell-major vector array), reduce (a CTA per query merges its partials).

use super::{Access, Kernel, Workload, LINE};
use cohort_ivf::ivf::stages::filter;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::{IvfIndex, Metric};

struct Layout {
    dim: u64,
    centroids: u64,
    nlist: u64,
    vectors: u64,
    queries: u64,
    partials: u64,
    /// Rows [start, end) of each cell.
    cells: Vec<(u64, u64)>,
    /// Per query, its probed cells.
    probes: Vec<Vec<u32>>,
}

impl Layout {
    fn row_bytes(&self) -> u64 {
        self.dim * 4
    }
    fn lines(from: u64, bytes: u64, out: &mut Vec<Access>) {
        let mut a = from / LINE * LINE;
        while a < from + bytes {
            out.push(Access::read(a));
            a += LINE;
        }
    }
}

struct Filter(std::sync::Arc<Layout>);
struct Search(std::sync::Arc<Layout>, usize);
struct Reduce(std::sync::Arc<Layout>, usize);

impl Kernel for Filter {
    fn ctas(&self) -> usize {
        self.0.probes.len()
    }
    fn compute_per_access(&self) -> f64 {
        2.0
    }
    fn accesses(&self, q: usize, out: &mut Vec<Access>) {
        let l = &self.0;
        Layout::lines(l.queries + q as u64 * l.row_bytes(), l.row_bytes(), out);
        Layout::lines(l.centroids, l.nlist * l.row_bytes(), out);
    }
}

impl Kernel for Search {
    fn ctas(&self) -> usize {
        self.0.probes.len() * self.1
    }
    fn compute_per_access(&self) -> f64 {
        2.0
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        let l = &self.0;
        let (q, j) = (cta / self.1, cta % self.1);
        let (start, end) = l.cells[l.probes[q][j] as usize];
        Layout::lines(l.queries + q as u64 * l.row_bytes(), l.row_bytes(), out);
        Layout::lines(
            l.vectors + start * l.row_bytes(),
            (end - start) * l.row_bytes(),
            out,
        );
        out.push(Access::write(l.partials + cta as u64 * LINE));
    }
}

impl Kernel for Reduce {
    fn ctas(&self) -> usize {
        self.0.probes.len()
    }
    fn accesses(&self, q: usize, out: &mut Vec<Access>) {
        let l = &self.0;
        for j in 0..self.1 {
            out.push(Access::read(l.partials + (q * self.1 + j) as u64 * LINE));
        }
        out.push(Access::write(
            l.partials + (l.probes.len() * self.1 + q) as u64 * LINE,
        ));
    }
}

fn fill(from: u64, to: u64) -> Box<dyn Kernel> {
    Box::new(super::stream_init::Fill {
        base: from,
        lines: (to - from) / LINE,
    })
}

/// 200K x 64 vectors at scale 1 (at least 4K), nlist 256, 256 queries of nprobe 8.
pub fn knn_trace(scale: f64, seed: u64) -> Workload {
    let (dim, nlist, nq, nprobe) = (64usize, 256usize, 256usize, 8usize);
    let n = ((200_000.0 * scale) as usize).max(4096);
    let model = Model::new(SynthConfig::sift_like(dim, seed));
    let base = model.sample(n, 1);
    let index = IvfIndex::build(
        &base,
        nlist,
        Metric::L2,
        &KMeansConfig {
            iters: 4,
            seed,
            ..KMeansConfig::new(nlist)
        },
    );
    let queries = model.sample(nq, 2);
    let probes: Vec<Vec<u32>> = queries
        .data
        .chunks_exact(dim)
        .map(|q| filter(index.centroids(), dim, Metric::L2, q, nprobe))
        .collect();
    let row = dim as u64 * 4;
    let array = |bytes: u64| bytes.next_multiple_of(super::ALLOC_ALIGN);
    let centroids = 0;
    let vectors = array(nlist as u64 * row);
    let queries_at = vectors + array(n as u64 * row);
    let partials = queries_at + array(nq as u64 * row);
    let end = partials + (nq * (nprobe + 1)) as u64 * LINE;
    let layout = std::sync::Arc::new(Layout {
        dim: dim as u64,
        centroids,
        nlist: nlist as u64,
        vectors,
        queries: queries_at,
        partials,
        cells: (0..nlist)
            .map(|c| {
                let (s, e) = index.cell_range(c);
                (s as u64, e as u64)
            })
            .collect(),
        probes,
    });
    Workload {
        name: "knn-ivf-search".into(),
        class: "k-NN",
        footprint: end,
        kernels: vec![
            // Centroids, vectors and the query batch are each uploaded by a full-width copy
            // kernel (first touch splits each array over the sockets in order; the partials
            // are placed by their writers).
            fill(centroids, vectors),
            fill(vectors, queries_at),
            fill(queries_at, partials),
            Box::new(Filter(layout.clone())),
            Box::new(Search(layout.clone(), nprobe)),
            Box::new(Reduce(layout, nprobe)),
        ],
    }
}
