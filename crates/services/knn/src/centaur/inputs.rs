//! The model's inputs, each measured: runs of `cohort-lab bench engine` (the measured curve and one
//! device's cohort times), the index and queries (which lists a query probes, so the rows each
//! device scans), and the host's cost per request (the service's codec and staging, timed
//! here on this machine).

use super::Layout;
use crate::{encode_request, encode_response_into, parse_head, vector_into, Elems};
use cohort_ivf::ivf::stages::filter;
use cohort_ivf::topk::Neighbor;
use cohort_ivf::IvfIndex;
use rayon::prelude::*;
use serde_json::Value;
use std::path::Path;
use std::time::Instant;

/// One `cohort-lab bench engine` result.
#[derive(Clone, Debug)]
pub struct Run {
    pub file: String,
    pub engine: String,
    pub devices: usize,
    pub layout: Layout,
    pub window: usize,
    pub max_cohort: usize,
    pub drivers: usize,
    pub nprobe: usize,
    pub rate: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The machine's logical CPUs (its `machine.cpus`).
    pub cpus: Option<usize>,
}

/// Reads a `bench engine` JSON of the knn service: one run per engine it measured; a run that
/// did not start (its `skipped` says why) is an error with that reason.
pub fn read_runs(path: &Path) -> Result<Vec<Result<Run, String>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let results = v.get("results").and_then(Value::as_array).ok_or_else(|| {
        format!(
            "{}: no results (a `cohort-lab bench engine` result?)",
            path.display()
        )
    })?;
    let cpus = v
        .get("machine")
        .and_then(|m| m.get("cpus"))
        .and_then(Value::as_u64)
        .map(|c| c as usize);
    Ok(results
        .iter()
        .map(|r| one_run(path, r).map(|run| Run { cpus, ..run }))
        .collect())
}

fn one_run(path: &Path, r: &Value) -> Result<Run, String> {
    let what = |k: &str| {
        format!(
            "{}: no {k} (a `cohort-lab bench engine` result?)",
            path.display()
        )
    };
    let num = |k: &str| r.get(k).and_then(Value::as_f64).ok_or_else(|| what(k));
    if let Some(s) = r.get("skipped").and_then(Value::as_str) {
        return Err(format!("{}: the run did not start: {s}", path.display()));
    }
    if r.get("service").and_then(Value::as_str) != Some("knn") {
        return Err(format!("{}: not a knn run", path.display()));
    }
    let layout = match r.get("service_opt").and_then(Value::as_array) {
        Some(opts)
            if opts
                .iter()
                .any(|o| o.as_str() == Some("knn.placement=shard")) =>
        {
            Layout::Shard
        }
        _ => Layout::Replicate,
    };
    let lat = |k: &str| {
        r.get("latency_us")
            .and_then(|l| l.get(k))
            .and_then(Value::as_f64)
            .ok_or_else(|| what(k))
    };
    Ok(Run {
        file: path.display().to_string(),
        engine: r
            .get("engine")
            .and_then(Value::as_str)
            .ok_or_else(|| what("engine"))?
            .to_string(),
        devices: r
            .get("gpus")
            .and_then(Value::as_array)
            .map(|g| g.len())
            .filter(|&n| n > 0)
            .ok_or_else(|| what("gpus"))?,
        layout,
        window: num("window")? as usize,
        max_cohort: num("max_cohort")? as usize,
        drivers: num("drivers")? as usize,
        nprobe: num("nprobe")? as usize,
        rate: num("queries_per_s")?,
        p50_us: lat("p50")?,
        p99_us: lat("p99")?,
        cpus: None,
    })
}

/// f_l of eq. 7: the share of `queries` (rows of `dim`) that probe each list at `nprobe`.
pub fn probe_shares(ix: &IvfIndex, queries: &[f32], nprobe: usize) -> Vec<f64> {
    assert!(nprobe >= 1 && nprobe <= ix.nlist, "nprobe in 1..=nlist");
    let nq = queries.len() / ix.dim;
    assert!(nq > 0, "at least one query");
    let counts = queries
        .par_chunks_exact(ix.dim)
        .map(|q| filter(ix.centroids(), ix.dim, ix.metric, q, nprobe))
        .fold(
            || vec![0u32; ix.nlist],
            |mut c, probes| {
                probes.iter().for_each(|&l| c[l as usize] += 1);
                c
            },
        )
        .reduce(
            || vec![0u32; ix.nlist],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        );
    counts.iter().map(|&c| c as f64 / nq as f64).collect()
}

/// s of eq. 9: rows scanned per query over rows scanned plus centroids compared (both are
/// `dim`-long distance computations; the filter compares every centroid).
pub fn scan_share(ix: &IvfIndex, probed: &[f64]) -> f64 {
    let rows = rows_per_query(ix, probed);
    rows / (rows + ix.nlist as f64)
}

/// The rows a query scans on average: sum over the lists of f_l |l|.
pub fn rows_per_query(ix: &IvfIndex, probed: &[f64]) -> f64 {
    ix.cell_sizes()
        .iter()
        .zip(probed)
        .map(|(&s, &f)| s as f64 * f)
        .sum()
}

/// Eq. 3's bytes per query: the probed rows (f32). The centroids are not counted: a cohort's
/// filter reads them once per tile of queries, from L2 (2 MiB at 4096 x 128).
pub fn bytes_per_query(ix: &IvfIndex, probed: &[f64]) -> f64 {
    rows_per_query(ix, probed) * ix.dim as f64 * 4.0
}

/// Eq. 3's bytes per query at each cohort size in `cohorts`: a cohort reads each list its
/// queries probe once (the tiled plan scans a list for all of its cohort's queries at a time),
/// so of list l, probed by a share f_l of queries, a cohort of b reads |l| rows with
/// probability 1 - (1 - f_l)^b; per query that is the sum over lists divided by b (at b = 1,
/// `bytes_per_query`).
pub fn cohort_bytes(ix: &IvfIndex, probed: &[f64], cohorts: &[f64]) -> Vec<(f64, f64)> {
    let sizes = ix.cell_sizes();
    let row = ix.dim as f64 * 4.0;
    cohorts
        .iter()
        .map(|&b| {
            let read: f64 = sizes
                .iter()
                .zip(probed)
                .map(|(&s, &f)| s as f64 * row * (1.0 - (1.0 - f).powf(b)))
                .sum();
            (b, read / b)
        })
        .collect()
}

/// c_r of eq. 2: a request's host work in microseconds, one thread: encoding it (the client's
/// side in process), checking its head and staging its vector (the engine's), and encoding and
/// decoding a k-neighbour answer.
pub fn host_cost_us(dim: usize, nlist: usize, queries: &[f32], k: usize) -> f64 {
    let nq = queries.len() / dim;
    assert!(nq > 0, "at least one query");
    let answer: Vec<Neighbor> = (0..k)
        .map(|i| Neighbor {
            id: i as u32,
            distance: i as f32,
        })
        .collect();
    let (mut p, mut out, mut staged) = (Vec::new(), Vec::new(), vec![0f32; dim]);
    let rounds = (200_000 / nq).max(1);
    let t = Instant::now();
    let mut sink = 0usize;
    for _ in 0..rounds {
        for q in queries.chunks_exact(dim) {
            p.clear();
            encode_request(k as u16, 16, Elems::F32(q), &mut p);
            let head = parse_head(&p, dim, nlist, usize::MAX).expect("a valid request");
            vector_into(&p, head, &mut staged).expect("finite values");
            out.clear();
            encode_response_into(&answer, &mut out);
            sink += crate::decode_response(&out).expect("own answer").len();
        }
    }
    assert_eq!(sink, rounds * nq * k, "every answer decoded");
    t.elapsed().as_secs_f64() * 1e6 / (rounds * nq) as f64
}

/// r(N) of eq. 9 from a `bench gpu-kernels --shards` result: at the profiled cohort nearest
/// `cohort`, (F + N S(N)) / (F + S(1)), where F is the filter's stages (the home's, for its
/// own cohort) and S(N) the scan's stages on one device's shard of an N-way placement (run
/// once for each of the N homes' cohorts). Ascending by N, N > 1.
pub fn shard_work(profile: &Value, cohort: f64) -> Result<Vec<(usize, f64)>, String> {
    let points = profile
        .get("results")
        .unwrap_or(profile)
        .get("points")
        .and_then(Value::as_array)
        .ok_or("no points (a `cohort-lab bench gpu-kernels --shards` result?)")?;
    // (cohort, shards, filter ms, scan ms) of every point with a stage profile.
    let staged: Vec<(f64, usize, f64, f64)> = points
        .iter()
        .filter_map(|p| {
            let stages = p.get("tiled_stage_ms")?.as_object()?;
            let (mut f, mut scan) = (0.0, 0.0);
            for (name, ms) in stages {
                let ms = ms.as_f64()?;
                // The filter's stages: `filter`, then `select_filter`, or on the tensor cores
                // `rerank_filter` after it (to 55af72b) or `select_rerank_filter` (one kernel).
                if name == "filter" || name.ends_with("_filter") {
                    f += ms;
                } else {
                    scan += ms;
                }
            }
            Some((
                p.get("cohort")?.as_f64()?,
                p.get("shards").and_then(Value::as_u64).unwrap_or(1) as usize,
                f,
                scan,
            ))
        })
        .collect();
    let at = staged
        .iter()
        .map(|p| p.0)
        .min_by(|a, b| (a - cohort).abs().total_cmp(&(b - cohort).abs()))
        .ok_or("no point with a stage profile (tiled_stage_ms)")?;
    let here: Vec<_> = staged.iter().filter(|p| p.0 == at).collect();
    let whole = here
        .iter()
        .find(|p| p.1 == 1)
        .ok_or_else(|| format!("no whole-index point (shards 1) at cohort {at}"))?;
    let base = whole.2 + whole.3;
    let mut out: Vec<(usize, f64)> = here
        .iter()
        .filter(|p| p.1 > 1)
        .map(|p| (p.1, (whole.2 + p.1 as f64 * p.3) / base))
        .collect();
    out.sort_by_key(|p| p.0);
    out.dedup_by_key(|p| p.0);
    Ok(out)
}

#[cfg(test)]
mod shard_work_tests {
    use super::*;

    #[test]
    fn shard_work_is_read_at_the_nearest_cohort() {
        let point = |cohort: u64, shards: u64, filter: f64, search: f64| {
            serde_json::json!({"cohort": cohort, "shards": shards, "tiled_stage_ms": {
                "filter": filter * 0.8, "select_filter": filter * 0.2, "plan": 0.0,
                "search": search * 0.9, "select_search": search * 0.1 }})
        };
        let v = serde_json::json!({"results": {"points": [
            point(2048, 1, 3.0, 11.0), point(2048, 4, 3.0, 3.0), point(2048, 2, 3.0, 5.5),
            point(8192, 1, 10.0, 30.0), point(8192, 4, 10.0, 9.0),
        ]}});
        let r = shard_work(&v, 2000.0).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].0, 2);
        // Halving the scan exactly costs nothing: (3 + 2 x 5.5) / 14.
        assert!((r[0].1 - 1.0).abs() < 1e-9);
        assert!((r[1].1 - (3.0 + 4.0 * 3.0) / 14.0).abs() < 1e-9);
        let r = shard_work(&v, 9000.0).unwrap();
        assert_eq!(r, vec![(4, (10.0 + 36.0) / 40.0)]);
        assert!(shard_work(&serde_json::json!({"results": {}}), 1.0).is_err());
    }

    #[test]
    fn the_tensor_core_filters_stages_count_as_filter() {
        // The stages each build reports for the tensor-core filter, split 1:1 here.
        for pick in [
            &["select_filter", "rerank_filter"][..],
            &["select_rerank_filter"][..],
        ] {
            let point = |shards: u64, search: f64| {
                let mut st = serde_json::json!({"filter": 1.0, "search": search});
                for name in pick {
                    st[*name] = serde_json::json!(1.0 / pick.len() as f64);
                }
                serde_json::json!({"cohort": 1024, "shards": shards, "tiled_stage_ms": st})
            };
            let v = serde_json::json!({"points": [point(1, 8.0), point(2, 4.0)]});
            // Filter 2 ms on every device, the scan halved: (2 + 2 x 4) / 10.
            assert_eq!(shard_work(&v, 1024.0).unwrap(), vec![(2, 1.0)], "{pick:?}");
        }
    }
}
