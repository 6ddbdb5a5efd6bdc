//! The bank's HTTP parser alone on one GPU (Rhythm: 7.4 M requests/s on a GTX Titan): a
//! mixed trace of the client's real requests (the Table 2 mix, with session cookies) parsed
//! one thread per request, row-major vs transposed slots, per cohort size. The first launch
//! of each layout is checked against the CPU twin request by request.

use super::Record;
use crate::gpu::GpuParser;
use crate::{client, parse};
use anyhow::{Context, Result};
use clap::Args;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BankParseBench {
    /// Cohort sizes (requests parsed per launch).
    #[arg(long, value_delimiter = ',', default_value = "4096,65536,524288")]
    pub cohorts: Vec<usize>,
    /// Launches timed per point.
    #[arg(long, default_value_t = 50)]
    pub iters: usize,
    #[arg(long, default_value = "lab/results/bank-parse-gpu.json")]
    pub out: PathBuf,
}

pub fn run(a: &BankParseBench, record: Record) -> Result<()> {
    let devs = cohort_gpu::probe().context("the parser benchmark needs a GPU")?;
    let max = *a.cohorts.iter().max().context("--cohorts is empty")?;
    anyhow::ensure!(
        max >= 1 && a.iters >= 1,
        "cohorts and iters must be positive"
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let reqs: Vec<Vec<u8>> = (0..max)
        .map(|_| {
            let user = rng.gen_range(1..=1_000_000);
            let kind = client::draw(&mut rng);
            let cookie = (kind != crate::kinds::Kind::Login).then(|| parse::Cookie {
                user,
                token: rng.gen(),
            });
            client::step(kind, user, &mut rng).raw(cookie)
        })
        .collect();
    let mean_bytes = reqs.iter().map(Vec::len).sum::<usize>() as f64 / max as f64;
    let mut p = GpuParser::new(&devs[0], max)?;
    let mut points = Vec::new();
    for transposed in [false, true] {
        for &n in &a.cohorts {
            p.upload(&reqs[..n], transposed)?;
            p.launch()?;
            p.synchronize()?;
            for (i, (g, r)) in p.results()?.iter().zip(&reqs).enumerate() {
                anyhow::ensure!(
                    *g == parse::parse(r),
                    "request {i}: GPU and CPU twin differ"
                );
            }
            let t = Instant::now();
            for _ in 0..a.iters {
                p.launch()?;
            }
            p.synchronize()?;
            let secs = t.elapsed().as_secs_f64() / a.iters as f64;
            let rate = n as f64 / secs;
            println!(
                "parse on {}: cohort {n:>7}, {}: {:>8.1} us per launch, {:>7.1} M requests/s ({:.0} GB/s of requests)",
                devs[0].name,
                if transposed { "transposed" } else { "row-major " },
                secs * 1e6,
                rate / 1e6,
                rate * mean_bytes / 1e9
            );
            points.push(json!({
                "cohort": n, "transposed": transposed, "us_per_launch": secs * 1e6,
                "requests_per_s": rate, "mean_request_bytes": mean_bytes,
            }));
        }
    }
    record(
        &a.out,
        json!({ "gpu": devs[0].name, "points": points, "iters": a.iters }),
    )
    .map_err(anyhow::Error::msg)
}

/// The whole bank on one GPU in-process (Rhythm's emulation): cohorts of one request type,
/// pre-built in pinned host memory, uploaded, parsed, sessions checked and pages built; the
/// pages either left in GPU memory (an integrated NIC, Rhythm's Titan B/C) or copied to the
/// host. Per type and cohort size: time per cohort; the Table 2 mix's rate from those; the
/// PCIe bound from the bytes per request and the measured pinned copy rates; GPU board
/// energy over a sustained run of the mix.
#[derive(Args, Debug)]
pub struct BankGpuBench {
    #[arg(long, value_delimiter = ',', default_value = "256,1024,4096,8192")]
    pub cohorts: Vec<usize>,
    #[arg(long, default_value_t = 1_000_000)]
    pub users: u32,
    /// Cohorts timed per type and point.
    #[arg(long, default_value_t = 10)]
    pub iters: usize,
    /// Seconds of the sustained mix under the power meter (cohort 4096, transposed), per
    /// point of --streams.
    #[arg(long, default_value_t = 5.0)]
    pub energy_secs: f64,
    /// Streams with a cohort in flight each, for the sustained mix (one cohort of 4096 is
    /// ~33 threads per SM of an H200: one stream leaves it mostly idle).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub streams: Vec<usize>,
    /// Host power per busy core (W): the one host thread that drives the GPU.
    #[arg(long, default_value_t = 10.0)]
    pub core_watts: f64,
    /// Where the records live: computed (per thread), gpu (the record table in GPU memory,
    /// Titan B) or memcached://HOST:PORT (one multiget per cohort through the host, Titan A).
    #[arg(long, default_value = "computed")]
    pub backend: crate::store::Placement,
    /// Threads that write one page (a power of two up to 32); by default chosen from the
    /// cohort's size, as the engines do.
    #[arg(long, value_parser = parse_page_lanes)]
    pub page_lanes: Option<u32>,
    #[arg(long, default_value = "lab/results/bank-gpu.json")]
    pub out: PathBuf,
}

/// `--page-lanes`: a number, then [`crate::kernels::check_page_lanes`].
fn parse_page_lanes(s: &str) -> Result<u32, String> {
    let lanes = s
        .parse::<u32>()
        .map_err(|e| format!("threads per page: {e}"))?;
    crate::kernels::check_page_lanes(lanes)
}

use crate::gpu::{pack, upload_bytes};
use crate::gpu_records::SharedRecords;
use crate::kinds::{Kind, KINDS};
use crate::parse::Cookie;

/// One pre-built cohort: packed slots (pinned) and lengths.
struct Cohort {
    kind: Kind,
    slots: cohort_gpu::engine::Pinned<u8>,
    bytes: usize,
    lens: Vec<u32>,
}

fn build(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    kind: Kind,
    reqs: &[Vec<u8>],
    transposed: bool,
) -> Result<Cohort> {
    let (slots, lens) = pack(reqs, transposed);
    let bytes = upload_bytes(&lens, transposed);
    let mut pinned = cohort_gpu::engine::Pinned::for_uploads(ctx, bytes.max(1))?;
    pinned.as_mut_slice()[..bytes].copy_from_slice(&slots[..bytes]);
    Ok(Cohort {
        kind,
        slots: pinned,
        bytes,
        lens,
    })
}

/// The longest response of a type: its page and header (or a refusal page).
fn longest(kind: Kind) -> usize {
    kind.info().page_bytes.max(crate::page::REFUSAL_PAGE_BYTES) + 256
}

pub fn run_all(a: &BankGpuBench, record: Record) -> Result<()> {
    let devs = cohort_gpu::probe().context("the bank GPU benchmark needs a GPU")?;
    let max = *a.cohorts.iter().max().context("--cohorts is empty")?;
    anyhow::ensure!(
        a.iters >= 1 && a.users as usize >= 4 * max,
        "--users must be at least 4 x the largest cohort"
    );
    let secret = 0x5eed;
    let g = GpuParser::new(&devs[0], max)?.with_sessions(a.users, a.users, secret)?;
    let ctx = cohort_gpu::launch::context(&devs[0])?;
    let records = SharedRecords::new(&a.backend, &ctx.default_stream(), a.users)
        .map_err(anyhow::Error::msg)?;
    let mut g = g.with_records(&records)?;
    g.set_page_lanes(a.page_lanes)?;
    println!(
        "bank records: {}; threads per page: {}",
        a.backend,
        a.page_lanes
            .map_or("by cohort size".to_string(), |l| l.to_string())
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(2);
    // A pool of logged-in users (1..=max) for every type but login/logout.
    let pool: Vec<u32> = (1..=max as u32).collect();
    let logins: Vec<Vec<u8>> = pool
        .iter()
        .map(|&u| client::step(Kind::Login, u, &mut rng).raw(None))
        .collect();
    g.upload(&logins, false)?;
    g.launch()?;
    g.serve()?;
    let cookies: Vec<Cookie> = g
        .responses()?
        .iter()
        .map(|r| client::set_cookie(r).context("a pool login failed"))
        .collect::<Result<_>>()?;
    // Pinned copy rates (the PCIe bound's denominators).
    let (h2d, d2h) = copy_rates(&ctx)?;
    println!(
        "pinned copies on {}: H2D {:.1} GB/s, D2H {:.1} GB/s",
        devs[0].name,
        h2d / 1e9,
        d2h / 1e9
    );
    let mut next_user = max as u32 + 1;
    let mut points = Vec::new();
    // Pinned, as a server's send buffers would be (pageable memory halves the copy rate).
    let mut host_pinned =
        cohort_gpu::engine::Pinned::<u8>::for_reads(&ctx, max * crate::cuda::RESP_SLOT)?;
    let host = host_pinned.as_mut_slice();
    for transposed in [false, true] {
        for &c in &a.cohorts {
            let mut per_type = serde_json::Map::new();
            let (mut mix_s_gpu, mut mix_s_host, mut mix_h2d, mut mix_d2h) = (0.0, 0.0, 0.0, 0.0);
            for info in &KINDS {
                let kind = info.kind;
                let (mut t_gpu, mut t_host) = (0.0f64, 0.0f64);
                let (mut up, mut down) = (0usize, 0usize);
                for it in 0..a.iters {
                    // Logins: fresh users each time; logouts: those users' new sessions;
                    // the rest: pool users with their sessions.
                    let reqs: Vec<Vec<u8>> = match kind {
                        Kind::Login | Kind::Logout => Vec::new(),
                        _ => (0..c)
                            .map(|i| {
                                let k = rng.gen_range(0..pool.len());
                                let _ = i;
                                client::step(kind, pool[k], &mut rng).raw(Some(cookies[k]))
                            })
                            .collect(),
                    };
                    let reqs = if kind == Kind::Login || kind == Kind::Logout {
                        let users: Vec<u32> = (0..c as u32)
                            .map(|i| 1 + (next_user + i - 1) % a.users)
                            .collect();
                        let login: Vec<Vec<u8>> = users
                            .iter()
                            .map(|&u| client::step(Kind::Login, u, &mut rng).raw(None))
                            .collect();
                        if kind == Kind::Login {
                            next_user = 1 + (next_user + c as u32 - 1) % a.users;
                            if next_user <= max as u32 {
                                next_user = max as u32 + 1;
                            }
                            login
                        } else {
                            // Log them in (untimed) and time their logouts.
                            g.upload(&login, transposed)?;
                            g.launch()?;
                            g.serve()?;
                            let rs = g.responses()?;
                            users
                                .iter()
                                .zip(&rs)
                                .map(|(&u, r)| {
                                    let ck =
                                        client::set_cookie(r).context("login for logout failed")?;
                                    Ok(client::step(Kind::Logout, u, &mut rng).raw(Some(ck)))
                                })
                                .collect::<Result<Vec<_>>>()?
                        }
                    } else {
                        reqs
                    };
                    let cohort = build(&ctx, kind, &reqs, transposed)?;
                    for copy in [false, true] {
                        // Login cohorts change state: the second pass re-logs the same users
                        // (renewing their sessions), the same work. Logout's second pass
                        // finds them logged out: refusal pages, less work - so it is timed
                        // only without the copy, and its copy cost is added from its bytes.
                        if copy && kind == Kind::Logout {
                            continue;
                        }
                        g.synchronize()?;
                        let t = Instant::now();
                        g.upload_packed(
                            &cohort.slots.as_slice()[..cohort.bytes],
                            &cohort.lens,
                            transposed,
                        )?;
                        g.launch()?;
                        g.serve()?;
                        let out = g.response_bytes(longest(cohort.kind));
                        if copy {
                            g.copy_out(&mut host[..out])?;
                        }
                        g.synchronize()?;
                        let s = t.elapsed().as_secs_f64();
                        if copy {
                            t_host += s;
                        } else {
                            t_gpu += s;
                        }
                        up = g.uploaded;
                        down = out;
                        if it == 0 && !copy && kind != Kind::Logout {
                            let ok = g
                                .responses()?
                                .iter()
                                .filter(|r| r.starts_with(b"HTTP/1.1 200"))
                                .count();
                            anyhow::ensure!(ok == c, "{kind:?}: {ok} of {c} pages are 200");
                        }
                    }
                }
                let t_gpu = t_gpu / a.iters as f64;
                let t_host = if kind == Kind::Logout {
                    t_gpu + down as f64 / d2h
                } else {
                    t_host / a.iters as f64
                };
                let share = info.mix_bp as f64 / 10_002.0;
                mix_s_gpu += share * t_gpu / c as f64;
                mix_s_host += share * t_host / c as f64;
                mix_h2d += share * up as f64 / c as f64;
                mix_d2h += share * down as f64 / c as f64;
                per_type.insert(
                    info.name.into(),
                    json!({ "us_per_cohort_in_gpu": t_gpu * 1e6, "us_per_cohort_to_host": t_host * 1e6,
                            "requests_per_s_in_gpu": c as f64 / t_gpu, "requests_per_s_to_host": c as f64 / t_host,
                            "h2d_bytes": up, "d2h_bytes": down }),
                );
            }
            let (rate_gpu, rate_host) = (1.0 / mix_s_gpu, 1.0 / mix_s_host);
            // The PCIe bound: requests/s if the bus did nothing but carry each request's
            // bytes up and its page down (the two directions in parallel).
            let bound = 1.0 / (mix_h2d / h2d).max(mix_d2h / d2h);
            println!(
                "bank on {}: cohort {c:>5} {}: mix {:>6.2} M req/s pages in GPU memory, {:>6.2} M req/s copied to host = {:>5.1}% of the PCIe bound ({:.2} M/s: {:.0} B up, {:.0} B down per request)",
                devs[0].name,
                if transposed { "transposed" } else { "row-major " },
                rate_gpu / 1e6,
                rate_host / 1e6,
                100.0 * rate_host / bound,
                bound / 1e6,
                mix_h2d,
                mix_d2h
            );
            points.push(json!({
                "cohort": c, "transposed": transposed,
                "page_lanes": a.page_lanes.unwrap_or_else(|| crate::kernels::page_lanes(c)),
                "mix_requests_per_s_in_gpu": rate_gpu,
                "mix_requests_per_s_to_host": rate_host, "pcie_bound_requests_per_s": bound,
                "fraction_of_pcie_bound": rate_host / bound, "h2d_bytes_per_request": mix_h2d,
                "d2h_bytes_per_request": mix_d2h, "per_type": per_type,
            }));
        }
    }
    record(
        &a.out,
        json!({ "gpu": devs[0].name, "users": a.users, "iters": a.iters,
                "backend": a.backend.to_string(),
                "page_lanes": a.page_lanes.map_or(serde_json::Value::from("by cohort size"), |l| l.into()),
                "pinned_h2d_bytes_per_s": h2d, "pinned_d2h_bytes_per_s": d2h, "points": points,
                "sustained": sustained_sweep(a, &g, &records, &pool, &cookies)? }),
    )
    .map_err(anyhow::Error::msg)
}

/// The sustained mix at every --streams point, pages left in GPU memory and copied to the
/// host, with the best of each named (the Table 3 rows and the energy goal's figures).
fn sustained_sweep(
    a: &BankGpuBench,
    g: &GpuParser,
    records: &SharedRecords,
    pool: &[u32],
    cookies: &[Cookie],
) -> Result<serde_json::Value> {
    let mut runs = Vec::new();
    for copy in [false, true] {
        for &k in &a.streams {
            anyhow::ensure!(k >= 1, "--streams must be at least 1");
            runs.push(sustained(a, g, records, pool, cookies, k, copy)?);
        }
    }
    let best = |copy: bool| {
        runs.iter()
            .filter(|r| r["copied_to_host"] == copy)
            .max_by(|x, y| {
                let r = |v: &serde_json::Value| v["requests_per_s"].as_f64().unwrap_or(0.0);
                r(x).total_cmp(&r(y))
            })
            .cloned()
    };
    Ok(json!({ "best_pages_in_gpu": best(false), "best_pages_to_host": best(true), "runs": runs }))
}

/// Pinned host <-> device copy rates over 256 MB.
fn copy_rates(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> Result<(f64, f64)> {
    let bytes = 256 << 20;
    let s = ctx.default_stream();
    let mut host = cohort_gpu::engine::Pinned::<u8>::for_reads(ctx, bytes)?;
    let mut dev = s.alloc_zeros::<u8>(bytes)?;
    let mut rate = |up: bool| -> Result<f64> {
        let mut best = 0.0f64;
        for _ in 0..5 {
            s.synchronize()?;
            let t = Instant::now();
            if up {
                s.memcpy_htod(host.as_slice(), &mut dev)?;
            } else {
                s.memcpy_dtoh(&dev, host.as_mut_slice())?;
            }
            s.synchronize()?;
            best = best.max(bytes as f64 / t.elapsed().as_secs_f64());
        }
        Ok(best)
    };
    Ok((rate(true)?, rate(false)?))
}

/// GPU board energy over a sustained mix (cohort 4096, transposed; pages left in GPU memory
/// or copied to the host): cohorts of each non-login type in proportion to the mix, dealt
/// round robin to `streams` streams, each with its own cohort buffers and the one session
/// table (a stream is waited for only before its buffers are reused).
fn sustained(
    a: &BankGpuBench,
    g: &GpuParser,
    records: &SharedRecords,
    pool: &[u32],
    cookies: &[Cookie],
    streams: usize,
    copy: bool,
) -> Result<serde_json::Value> {
    use crate::gpu::CohortBuffers;
    let ctx = g.context();
    let (kernels, table) = g.parts();
    let table = table.context("the harness has its session table")?;
    let c = 4096.min(pool.len());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    let mut cohorts = Vec::new();
    for info in KINDS
        .iter()
        .filter(|k| !matches!(k.kind, Kind::Login | Kind::Logout))
    {
        let reqs: Vec<Vec<u8>> = (0..c)
            .map(|_| {
                let k = rng.gen_range(0..pool.len());
                client::step(info.kind, pool[k], &mut rng).raw(Some(cookies[k]))
            })
            .collect();
        cohorts.push((info.mix_bp, build(ctx, info.kind, &reqs, true)?));
    }
    let total_bp: u32 = cohorts.iter().map(|(bp, _)| bp).sum();
    let slot = crate::cuda::RESP_SLOT;
    let mut lanes = Vec::new();
    for _ in 0..streams {
        let s = ctx.new_stream()?;
        let mut bufs = CohortBuffers::new(&s, c)?;
        bufs.set_page_lanes(a.page_lanes)?;
        let host =
            cohort_gpu::engine::Pinned::<u8>::for_reads(ctx, if copy { c * slot } else { 1 })?;
        let recs = records.for_stream(ctx, &s, c)?;
        lanes.push((s, bufs, host, recs));
    }
    let power = cohort_power::GpuPower::shared();
    let meter = cohort_power::Meter::start_with(power);
    let t = Instant::now();
    let mut served = 0u64;
    let mut next = 0usize;
    let mut credit = vec![0.0f64; cohorts.len()];
    while t.elapsed().as_secs_f64() < a.energy_secs {
        // Weighted round robin: each type's cohorts in proportion to its share.
        for (i, (bp, cohort)) in cohorts.iter().enumerate() {
            credit[i] += *bp as f64 / total_bp as f64 * cohorts.len() as f64;
            while credit[i] >= 1.0 {
                credit[i] -= 1.0;
                let (s, bufs, host, recs) = &mut lanes[next % streams];
                next += 1;
                // This stream's previous cohort is done before its buffers are reused; the
                // other streams' cohorts keep the GPU busy meanwhile.
                s.synchronize()?;
                bufs.upload_slots(s, &cohort.slots.as_slice()[..cohort.bytes], &cohort.lens)?;
                bufs.parse(kernels, s, c, true)?;
                recs.fetch(kernels, bufs, s, c, table.users())?;
                bufs.serve(kernels, table, s, c, true, recs.on_device())?;
                if copy {
                    let out = longest(cohort.kind).div_ceil(4) * 4 * c;
                    bufs.copy_out(s, &mut host.as_mut_slice()[..out])?;
                }
                served += c as u64;
            }
        }
    }
    for (s, ..) in &lanes {
        s.synchronize()?;
    }
    let secs = t.elapsed().as_secs_f64();
    let report = meter.finish();
    let rate = served as f64 / secs;
    let gpu_w = report.gpu_mean_power_w;
    let per_joule = (gpu_w > 0.0).then(|| rate / (gpu_w + a.core_watts));
    println!(
        "sustained mix (no login/logout), cohort {c}, transposed, {streams} stream(s), {}: {:.2} M req/s, GPU board {:.0} W + 1 host core at {} W: {} requests/J",
        if copy { "copied to host" } else { "pages in GPU memory" },
        rate / 1e6,
        gpu_w,
        a.core_watts,
        per_joule.map(|x| format!("{x:.0}")).unwrap_or_else(|| "- (no NVML)".into())
    );
    Ok(
        json!({ "streams": streams, "copied_to_host": copy, "cohort": c, "requests_per_s": rate,
               "seconds": secs, "gpu_mean_power_w": gpu_w, "core_watts": a.core_watts,
               "requests_per_joule_gpu_and_core": per_joule,
               "meter": report.to_json(served as f64) }),
    )
}

#[cfg(test)]
mod tests {
    use super::BankGpuBench;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BankGpuBench,
    }

    #[test]
    fn page_lanes_are_refused_unless_a_power_of_two_up_to_32() {
        let parse =
            |v: &str| Cli::try_parse_from(["bank-gpu".to_string(), format!("--page-lanes={v}")]);
        assert_eq!(parse("8").unwrap().bench.page_lanes, Some(8));
        assert_eq!(
            Cli::try_parse_from(["bank-gpu"]).unwrap().bench.page_lanes,
            None
        );
        for bad in ["0", "3", "48", "-1", "eight", ""] {
            let e = parse(bad).err().expect(bad).to_string();
            assert!(e.contains("--page-lanes"), "{bad}: {e}");
            assert!(e.contains("threads per page"), "{bad}: {e}");
        }
    }
}
