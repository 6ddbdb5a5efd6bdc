//! The k-NN kernels (per-pair and tiled plans, k-means assignment) against their CPU twins on
//! fresh random inputs. Used by the test suite and by
//! `cohort selftest gpu` (the GPU machine has no cargo: the binary carries the checks).

use super::gpu_ivf::{round_f16, to_neighbors, FilterKind, GpuIvf, Plan, Precision, SearchKind};
use cohort_gpu::{probe, GpuError};
use cohort_ivf::ivf::stages;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::{IvfIndex, Metric, Neighbor, SearchParams, Vectors};

/// Relative tolerance between GPU and CPU distances (different summation order, FMA).
const TOL: f32 = 1e-4;

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= TOL * a.abs().max(b.abs()).max(1.0)
}

/// Same neighbours: distances agree within tolerance position by position, and ids agree
/// wherever the distance is distinct from its neighbours' (near-ties may swap).
pub fn same_neighbors(gpu: &[Neighbor], cpu: &[Neighbor]) -> Result<(), String> {
    same_neighbors_then(gpu, cpu, None).map(|_| ())
}

/// As `same_neighbors`, with `next` the CPU's neighbour after its last (where it has one): a
/// near-tie between the last place and the one after may swap too, which the k places alone
/// cannot show. Returns how many places hold a different id (each a near-tie).
fn same_neighbors_then(
    gpu: &[Neighbor],
    cpu: &[Neighbor],
    next: Option<&Neighbor>,
) -> Result<usize, String> {
    if gpu.len() != cpu.len() {
        return Err(format!(
            "gpu returned {} neighbours, cpu {}",
            gpu.len(),
            cpu.len()
        ));
    }
    let mut swapped = 0;
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        if !close(g.distance, c.distance) {
            return Err(format!(
                "position {i}: gpu distance {} vs cpu {}",
                g.distance, c.distance
            ));
        }
        let tied = |j: usize| {
            let other = if j < cpu.len() { cpu.get(j) } else { next };
            other.is_some_and(|o| close(o.distance, c.distance))
        };
        let tied_before = i > 0 && tied(i - 1);
        let distinct = !tied_before && !tied(i + 1);
        if g.id != c.id {
            if distinct {
                return Err(format!(
                    "position {i}: gpu id {} vs cpu id {} at distance {}",
                    g.id, c.id, c.distance
                ));
            }
            swapped += 1;
        }
    }
    Ok(swapped)
}

pub struct Case {
    pub n: usize,
    pub dim: usize,
    pub nlist: usize,
    pub nq: usize,
    pub k: usize,
    pub nprobe: usize,
    pub metric: Metric,
    pub seed: u64,
    pub precision: Precision,
}

/// Runs one case: filter, search, reduce and the chained query, each against the CPU.
pub fn check_case(c: &Case) -> Result<String, GpuError> {
    let devs = probe()?;
    let model = Model::new(SynthConfig {
        clusters: 16,
        ..SynthConfig::sift_like(c.dim, c.seed)
    });
    let base = model.sample(c.n, 1);
    let queries = model.sample(c.nq, 2);
    let ix = IvfIndex::build(
        &base,
        c.nlist,
        c.metric,
        &KMeansConfig {
            iters: 5,
            seed: c.seed,
            ..KMeansConfig::new(c.nlist)
        },
    );
    let g = GpuIvf::upload(&devs[0], &ix, c.precision)?;
    // The CPU twin of f16 storage: the same index with every vector rounded through f16.
    let ix = match c.precision {
        Precision::F32 | Precision::U8 => ix, // u8 holds the integral data exactly
        Precision::F16 => ix.with_vectors_mapped(round_f16),
    };
    let s = g.ctx.default_stream();
    let fail = |what: &str, m: String| GpuError::Invalid(format!("{what} (seed {}): {m}", c.seed));
    let at = |stage: &'static str| move |e: GpuError| GpuError::Invalid(format!("{stage}: {e}"));
    let qd = s.clone_htod(&queries.data)?;
    // Stage 1.
    let probes_d = g
        .launch_filter(&s, &qd, c.nq, c.nprobe)
        .map_err(at("filter launch"))?;
    let probes = s.clone_dtoh(&probes_d)?;
    s.synchronize().map_err(|e| at("filter run")(e.into()))?;
    let same_probes = |what: &str, probes: &[u32]| {
        for i in 0..c.nq {
            let cpu = stages::filter(ix.centroids(), ix.dim, ix.metric, queries.row(i), c.nprobe);
            let gpu = &probes[i * c.nprobe..(i + 1) * c.nprobe];
            if cpu != gpu {
                // Allow only swaps among near-equal centroid distances.
                let d = |cell: u32| {
                    ix.metric.distance(
                        queries.row(i),
                        &ix.centroids()[cell as usize * ix.dim..(cell as usize + 1) * ix.dim],
                    )
                };
                let ok = cpu.iter().zip(gpu).all(|(a, b)| close(d(*a), d(*b)));
                if !ok {
                    return Err(fail(
                        what,
                        format!("query {i}: gpu probes {gpu:?} vs cpu {cpu:?}"),
                    ));
                }
            }
        }
        Ok(())
    };
    same_probes("filter", &probes)?;
    // The tiled plan's filter on the CUDA cores and on the tensor cores (3xTF32 scores, then
    // the exact re-rank of each query's best few), against the same.
    let mut g = g;
    let device_filter = g.filter;
    for kind in [
        FilterKind::Cores,
        FilterKind::TensorCores { min_queries: 0 },
    ] {
        g.filter = kind;
        let mut b = g.buffers(&s, c.nq)?;
        s.memcpy_htod(&queries.data, &mut b.q.slice_mut(..queries.data.len()))?;
        g.filter_into(&s, &mut b, c.nq, c.nprobe)
            .map_err(at("tiled filter launch"))?;
        let tiled = s.clone_dtoh(&b.probes.slice(..c.nq * c.nprobe))?;
        s.synchronize()
            .map_err(|e| at("tiled filter run")(e.into()))?;
        same_probes(&format!("tiled filter on the {kind:?}"), &tiled)?;
    }
    g.filter = device_filter;
    // Stage 2 on the GPU's own probes, against search_cell.
    let (pi, pd) = g
        .launch_search(&s, &qd, &probes_d, c.nq, c.nprobe, c.k)
        .map_err(at("search launch"))?;
    let (part_ids, part_dist) = (s.clone_dtoh(&pi)?, s.clone_dtoh(&pd)?);
    s.synchronize().map_err(|e| at("search run")(e.into()))?;
    let parts = to_neighbors(&part_ids, &part_dist, c.nq * c.nprobe, c.k);
    for (b, gpu) in parts.iter().enumerate() {
        let (qi, cell) = (b / c.nprobe, probes[b]);
        let cpu = stages::search_cell(&ix, queries.row(qi), cell, c.k);
        same_neighbors(gpu, &cpu)
            .map_err(|m| fail("search", format!("query {qi} cell {cell}: {m}")))?;
    }
    // Stage 3 against reduce over the same partials.
    let (ri, rd) = g
        .launch_reduce(&s, &pi, &pd, c.nq, c.nprobe, c.k)
        .map_err(at("reduce launch"))?;
    let (ids, dist) = (s.clone_dtoh(&ri)?, s.clone_dtoh(&rd)?);
    s.synchronize().map_err(|e| at("reduce run")(e.into()))?;
    let reduced = to_neighbors(&ids, &dist, c.nq, c.k);
    for (qi, gpu) in reduced.iter().enumerate() {
        let cpu = stages::reduce(&parts[qi * c.nprobe..(qi + 1) * c.nprobe], c.k);
        same_neighbors(gpu, &cpu).map_err(|m| fail("reduce", format!("query {qi}: {m}")))?;
    }
    // Whole queries by each plan against the CPU query (recall must match too). The tiled plan
    // also runs with a candidate buffer for 3 queries, so the cohort takes several passes. On
    // u8 storage the integral queries take the integer tensor-core scan (dims a multiple of 32)
    // and the same queries moved off the integers take the f32 scan: both are checked.
    let mut query_sets = vec![("", queries.clone())];
    if c.precision == Precision::U8 {
        let off = queries.data.iter().map(|v| v + 0.375).collect();
        query_sets.push((" (queries off the integers)", Vectors::new(c.dim, off)));
    }
    // The tiled plan runs under each search: the device's (u8 passes of a few queries take
    // the pair scan), the grouped warp search at every pass, 32 rows a step, and the block
    // kernel.
    let device_search = g.search;
    let grouped = SearchKind::Warp {
        rows: 16,
        pairs_up_to: 0,
    };
    let x2 = SearchKind::Warp {
        rows: 32,
        pairs_up_to: SearchKind::PAIRS_UP_TO,
    };
    let passes = Some(3 * g.max_candidate_row(c.nprobe));
    let mut hits_g = 0usize;
    for ((plan, cand, search), (set, queries)) in [
        (Plan::PerPair, None, device_search),
        (Plan::Tiled, None, device_search),
        (Plan::Tiled, passes, device_search),
        (Plan::Tiled, None, grouped),
        (Plan::Tiled, passes, grouped),
        (Plan::Tiled, None, x2),
        (Plan::Tiled, None, SearchKind::Block),
    ]
    .into_iter()
    .flat_map(|p| query_sets.iter().map(move |q| (p, q)))
    {
        g.search = search;
        let mut b = match cand {
            None => g.buffers(&s, c.nq)?,
            Some(f) => g.buffers_with(&s, c.nq, f)?,
        };
        let what = format!(
            "{plan:?} plan{}{set}, {search:?} search",
            if cand.is_some() { ", in passes" } else { "" }
        );
        let full = g
            .search_in(&s, &mut b, &queries.data, c.k, c.nprobe, Some(plan))
            .map_err(|e| fail(&what, e.to_string()))?;
        // The CPU's k + 1 nearest: the one after the k-th shows a near-tie at the last place
        // (f32 sums in another order may break it the other way; seen at dim 256 with queries
        // off the integers, whose distances fall on multiples of 1/4).
        let (mut hg, mut hc, mut swapped) = (0usize, 0usize, 0usize);
        for (qi, gpu) in full.iter().enumerate() {
            let mut cpu = ix.query(
                queries.row(qi),
                SearchParams {
                    k: c.k + 1,
                    nprobe: c.nprobe,
                },
            );
            let next = (cpu.len() > c.k).then(|| cpu[c.k]);
            cpu.truncate(c.k);
            swapped += same_neighbors_then(gpu, &cpu, next.as_ref())
                .map_err(|m| fail(&what, format!("query {qi}: {m}")))?;
            let exact = cohort_ivf::exact::search_one(&base, c.metric, queries.row(qi), c.k);
            let hits = |r: &[Neighbor]| {
                r.iter()
                    .filter(|n| exact.iter().any(|e| e.id == n.id))
                    .count()
            };
            hg += hits(gpu);
            hc += hits(&cpu);
        }
        // Each near-tie swapped in or out of the k may move a hit.
        if hg.abs_diff(hc) > swapped {
            return Err(fail(
                &what,
                format!("recall: gpu hits {hg} vs cpu {hc} ({swapped} near-ties swapped)"),
            ));
        }
        hits_g = hg;
    }
    Ok(format!(
        "ok: n={} dim={} nlist={} nq={} k={} nprobe={} metric={} {:?} seed={} recall@k={:.3}",
        c.n,
        c.dim,
        c.nlist,
        c.nq,
        c.k,
        c.nprobe,
        c.metric.name(),
        c.precision,
        c.seed,
        hits_g as f64 / (c.nq * c.k) as f64
    ))
}

/// The standard set of cases on fresh seeds.
pub fn cases(seed: u64) -> Vec<Case> {
    vec![
        Case {
            n: 20_000,
            dim: 128,
            nlist: 64,
            nq: 64,
            k: 10,
            nprobe: 8,
            metric: Metric::L2,
            seed,
            precision: Precision::F32,
        },
        Case {
            n: 20_000,
            dim: 96,
            nlist: 128,
            nq: 33,
            k: 100,
            nprobe: 16,
            metric: Metric::L2,
            seed: seed + 1,
            precision: Precision::F32,
        },
        Case {
            n: 5_000,
            dim: 17,
            nlist: 16,
            nq: 20,
            k: 7,
            nprobe: 16,
            metric: Metric::InnerProduct,
            seed: seed + 2,
            precision: Precision::F32,
        },
        // Cells far larger than a shared-memory tile, and k above most cell sizes elsewhere.
        Case {
            n: 30_000,
            dim: 64,
            nlist: 4,
            nq: 10,
            k: 128,
            nprobe: 2,
            metric: Metric::L2,
            seed: seed + 3,
            precision: Precision::F32,
        },
        // Half-precision storage against the f16-rounded CPU twin.
        Case {
            n: 20_000,
            dim: 128,
            nlist: 64,
            nq: 64,
            k: 10,
            nprobe: 8,
            metric: Metric::L2,
            seed: seed + 4,
            precision: Precision::F16,
        },
        Case {
            n: 5_000,
            dim: 40,
            nlist: 32,
            nq: 20,
            k: 20,
            nprobe: 4,
            metric: Metric::InnerProduct,
            seed: seed + 5,
            precision: Precision::F16,
        },
        // u8 storage (the synthetic data is integral in 0..=255, so exact).
        Case {
            n: 20_000,
            dim: 128,
            nlist: 64,
            nq: 40,
            k: 10,
            nprobe: 8,
            metric: Metric::L2,
            seed: seed + 6,
            precision: Precision::U8,
        },
        // u8 with the inner product, a cohort of several 32-query groups per cell (both of the
        // tensor-core scan's query tiles), and a dimension off the multiples of 32 (f32 scan).
        Case {
            n: 40_000,
            dim: 96,
            nlist: 32,
            nq: 300,
            k: 20,
            nprobe: 6,
            metric: Metric::InnerProduct,
            seed: seed + 9,
            precision: Precision::U8,
        },
        Case {
            n: 10_000,
            dim: 100,
            nlist: 32,
            nq: 50,
            k: 10,
            nprobe: 4,
            metric: Metric::L2,
            seed: seed + 10,
            precision: Precision::U8,
        },
        // u8 over several batches of the integer scan's k-steps (TC_KSTEPS 2: 64 dimensions a
        // batch; 192 = three), and an odd count of k-steps (dim 96, above) ends in a partial one.
        Case {
            n: 8_000,
            dim: 192,
            nlist: 16,
            nq: 70,
            k: 10,
            nprobe: 4,
            metric: Metric::L2,
            seed: seed + 11,
            precision: Precision::U8,
        },
        // u8 on the warp search with more work items than the grid's warps (~12 000 row chunks
        // of 64 against 4 224 warps on an H200), so warps take items past their first from
        // the work counter.
        Case {
            n: 100_000,
            dim: 128,
            nlist: 256,
            nq: 128,
            k: 10,
            nprobe: 16,
            metric: Metric::L2,
            seed: seed + 13,
            precision: Precision::U8,
        },
        // The pair scan's one-query rows at 64 dimensions (4 lanes a row) with the inner
        // product and more probes than a warp's lanes (its walk over the probes takes two
        // turns), and at 256 (16 lanes a row).
        Case {
            n: 30_000,
            dim: 64,
            nlist: 128,
            nq: 100,
            k: 10,
            nprobe: 40,
            metric: Metric::InnerProduct,
            seed: seed + 14,
            precision: Precision::U8,
        },
        Case {
            n: 8_000,
            dim: 256,
            nlist: 32,
            nq: 20,
            k: 10,
            nprobe: 8,
            metric: Metric::L2,
            seed: seed + 15,
            precision: Precision::U8,
        },
        // A cohort large enough that cells hold several 32-query groups and rows several chunks.
        Case {
            n: 50_000,
            dim: 128,
            nlist: 32,
            nq: 300,
            k: 16,
            nprobe: 12,
            metric: Metric::L2,
            seed: seed + 7,
            precision: Precision::F32,
        },
        Case {
            n: 20_000,
            dim: 100,
            nlist: 256,
            nq: 200,
            k: 50,
            nprobe: 40,
            metric: Metric::InnerProduct,
            seed: seed + 8,
            precision: Precision::F16,
        },
        // The tensor-core filter's edges: an odd cell count (its paired stores fall back to
        // single ones at each row's end), a cell tile cut short, query tiles of 128 with a
        // partial last one, and a dimension that is neither a multiple of 4 nor of the stage.
        Case {
            n: 6_000,
            dim: 37,
            nlist: 75,
            nq: 150,
            k: 10,
            nprobe: 10,
            metric: Metric::L2,
            seed: seed + 12,
            precision: Precision::F32,
        },
    ]
}

/// Runs every case; returns one line per case or the first failure.
pub fn run(seed: u64) -> Result<Vec<String>, GpuError> {
    let mut lines: Vec<String> = cases(seed)
        .iter()
        .map(check_case)
        .collect::<Result<_, _>>()?;
    lines.extend(check_kmeans(seed)?);
    Ok(lines)
}

/// The streaming k-means assigner against the exact CPU scan on fresh random inputs: ragged
/// sizes (rows not a multiple of the tile or the chunk, dimensions not of the staging step),
/// both metrics, more chunks than streams.
pub fn check_kmeans(seed: u64) -> Result<Vec<String>, GpuError> {
    use cohort_ivf::assign::{check, Assigner};
    use rand::{Rng, SeedableRng};
    let dev = cohort_gpu::probe()?
        .into_iter()
        .next()
        .expect("probe returns a device");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x6b6d);
    let mut lines = Vec::new();
    for (n, k, dim, metric) in [
        (20_011, 300, 37, Metric::L2),
        (9_000, 64, 128, Metric::InnerProduct),
        (5, 1_000, 3, Metric::L2),
        (50_000, 1_024, 96, Metric::L2),
    ] {
        let mut v = |m: usize| {
            Vectors::new(
                dim,
                (0..m * dim).map(|_| rng.gen_range(-8.0..8.0f32)).collect(),
            )
        };
        let (data, c) = (v(n), v(k));
        let mut g = super::gpu_kmeans::GpuAssigner::new(&dev, 3, 4_096)?;
        let got = g
            .assign(&data, &c, metric)
            .map_err(|e| GpuError::Invalid(format!("{e:#}")))?;
        check(&data, &c, metric, &got).map_err(|e| {
            GpuError::Invalid(format!(
                "k-means assign n {n} k {k} dim {dim} {metric:?}: {e}"
            ))
        })?;
        lines.push(format!(
            "ok   k-means assign n {n} k {k} dim {dim} {metric:?} ({} chunks)",
            g.chunks
        ));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(id: u32, distance: f32) -> Neighbor {
        Neighbor { id, distance }
    }

    #[test]
    fn a_swap_at_the_last_place_passes_only_when_the_next_one_ties() {
        let gpu = [n(1, 1.0), n(7, 5.0)];
        let cpu = [n(1, 1.0), n(9, 5.0)];
        // Without the CPU's next neighbour the last place looks distinct: a wrong id fails.
        assert!(same_neighbors(&gpu, &cpu).is_err());
        // Its next neighbour (id 7) ties with the last: the swap is a near-tie.
        assert_eq!(same_neighbors_then(&gpu, &cpu, Some(&n(7, 5.0))), Ok(1));
        // A next neighbour far from the last does not excuse it.
        assert!(same_neighbors_then(&gpu, &cpu, Some(&n(7, 9.0))).is_err());
        // Distances must agree whatever the ids.
        assert!(same_neighbors_then(&[n(1, 1.0), n(9, 6.0)], &cpu, None).is_err());
        assert_eq!(same_neighbors_then(&cpu, &cpu, None), Ok(0));
    }
}
