//! Irregular gathers (BFS / SSSP over a CSR graph): a CTA walks 256 vertices' edge lists
//! (sequential) and reads each neighbour's distance (a line per edge, anywhere in memory:
//! half the neighbours within a community of 64K vertices, half uniform), writing the
//! distances that improve. No placement makes these local: the paper's worst-scaling class.

use super::{Access, Kernel, Workload, LINE};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const VERTS_PER_CTA: u64 = 256;
const DEGREE: u64 = 8;
const COMMUNITY: u64 = 1 << 16;

struct Relax {
    vertices: u64,
    row_ptr: u64,
    cols: u64,
    /// Edge weights (SSSP), read beside the columns.
    weights: Option<u64>,
    dist: u64,
    /// Share of vertices in this kernel's frontier, per mille (the rest are skipped).
    frontier_permille: u64,
    seed: u64,
}

impl Kernel for Relax {
    fn ctas(&self) -> usize {
        self.vertices.div_ceil(VERTS_PER_CTA) as usize
    }
    fn compute_per_access(&self) -> f64 {
        0.5
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        let mut rng =
            SmallRng::seed_from_u64(self.seed ^ (cta as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let v0 = cta as u64 * VERTS_PER_CTA;
        let v1 = (v0 + VERTS_PER_CTA).min(self.vertices);
        // Row pointers and the frontier flags of the CTA's vertices: sequential lines.
        for l in (v0 * 4 / LINE)..=((v1 - 1) * 4 / LINE) {
            out.push(Access::read(self.row_ptr + l * LINE));
        }
        for v in v0..v1 {
            if rng.gen_range(0..1000) >= self.frontier_permille {
                continue;
            }
            let e0 = v * DEGREE;
            // The vertex's 8 columns (32 bytes) share a line with its neighbours' in the list.
            if (e0 * 4).is_multiple_of(LINE) || v == v0 {
                out.push(Access::read(self.cols + e0 * 4 / LINE * LINE));
                if let Some(w) = self.weights {
                    out.push(Access::read(w + e0 * 4 / LINE * LINE));
                }
            }
            for _ in 0..DEGREE {
                let u = if rng.gen_bool(0.5) {
                    let c = v / COMMUNITY * COMMUNITY;
                    (c + rng.gen_range(0..COMMUNITY)).min(self.vertices - 1)
                } else {
                    rng.gen_range(0..self.vertices)
                };
                out.push(Access::read(self.dist + u * 4 / LINE * LINE));
                if rng.gen_range(0..8) == 0 {
                    out.push(Access::write(self.dist + u * 4 / LINE * LINE));
                }
            }
        }
    }
}

fn graph(name: &str, footprint: u64, seed: u64, sssp: bool) -> Workload {
    // Bytes per vertex: row pointer 4 + distance 4 + columns 32 (+ weights 32).
    let per_vertex = if sssp { 72 } else { 40 };
    let vertices = (footprint / per_vertex).max(VERTS_PER_CTA);
    // Arrays start on page boundaries, as allocations do.
    let array = |bytes: u64| bytes.next_multiple_of(super::ALLOC_ALIGN);
    let row_ptr = 0;
    let dist = array(vertices * 4);
    let cols = dist + array(vertices * 4);
    let weights = sssp.then_some(cols + array(vertices * DEGREE * 4));
    let end = weights.unwrap_or(cols) + array(vertices * DEGREE * 4);
    // Frontiers of a BFS from one source grow then shrink; SSSP sweeps more of the graph.
    let frontiers: &[u64] = if sssp {
        &[300, 600, 600, 300]
    } else {
        &[50, 400, 500, 50]
    };
    // Set-up: each array (row pointers, distances, columns, weights) allocated and written by
    // its own full-width loader kernel, as an application does: under first touch + contiguous
    // CTA blocks every array is then split over the sockets in vertex order, so a CTA's
    // community neighbours live on its own socket. (One fill over the whole footprint would put
    // every distance - the gathered array - on socket 0.)
    let mut arrays = vec![(row_ptr, dist), (dist, cols)];
    match weights {
        Some(w) => arrays.extend([(cols, w), (w, end)]),
        None => arrays.push((cols, end)),
    }
    let mut kernels: Vec<Box<dyn Kernel>> = arrays
        .into_iter()
        .map(|(from, to)| -> Box<dyn Kernel> {
            Box::new(super::stream_init::Fill {
                base: from,
                lines: (to - from).div_ceil(LINE),
            })
        })
        .collect();
    for (i, &f) in frontiers.iter().enumerate() {
        kernels.push(Box::new(Relax {
            vertices,
            row_ptr,
            cols,
            weights,
            dist,
            frontier_permille: f,
            seed: seed.wrapping_add(i as u64),
        }));
    }
    Workload {
        name: name.into(),
        class: "irregular",
        footprint: end,
        kernels,
    }
}

pub fn bfs(name: &str, footprint: u64, seed: u64) -> Workload {
    graph(name, footprint, seed, false)
}

pub fn sssp(name: &str, footprint: u64, seed: u64) -> Workload {
    graph(name, footprint, seed, true)
}
