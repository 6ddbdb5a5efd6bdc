//! The bank's GPU code against its CPU twins on fresh random inputs (the GPU test executable
//! runs every service's checks through the catalog): the parser on the client's requests and
//! mangled ones, the pages and sessions on the harness's cohorts, and the engine backend as
//! gpu-cohort drives it, for every layout, grouping and record placement. A mismatch panics
//! with the request and both answers.

use cohort_gpu::DeviceInfo;
use cohort_service_api::checks::GpuCheck;

pub const CHECKS: &[GpuCheck] = &[
    GpuCheck {
        name: "bank parser vs cpu twin",
        run: parser_matches_its_cpu_twin,
        persistent: false,
    },
    GpuCheck {
        name: "bank pages vs cpu twins",
        run: pages_match_the_cpu_twins,
        persistent: false,
    },
    GpuCheck {
        name: "bank engine backend vs cpu twin",
        run: engine_backend_matches_the_cpu_twin,
        persistent: false,
    },
];

/// The bank's GPU parser against its CPU twin on fresh random requests: the client's real
/// requests of every type (with and without cookies), the same with bytes flipped, cut or
/// inserted, and random bytes; both slot layouts. Every field of every request must match.
fn parser_matches_its_cpu_twin(devs: &[DeviceInfo], seed: u64) -> Result<Vec<String>, String> {
    let dev = &devs[0];
    use super::{client, gpu::GpuParser, kinds::Kind, parse};
    use rand::{Rng, SeedableRng};
    let mut log = Vec::new();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let n = 50_000;
    let reqs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let kind = Kind::from_index(rng.gen_range(0..14)).unwrap();
            let user = rng.gen_range(1..=1_000_000);
            let cookie = rng.gen_bool(0.8).then(|| parse::Cookie {
                user,
                token: rng.gen(),
            });
            let mut r = client::step(kind, user, &mut rng).raw(cookie);
            match i % 4 {
                0 | 1 => {}
                2 => {
                    for _ in 0..rng.gen_range(1..4) {
                        let at = rng.gen_range(0..=r.len());
                        match rng.gen_range(0..3) {
                            0 if at < r.len() => r[at] = rng.gen(),
                            1 if at < r.len() => {
                                r.remove(at);
                            }
                            _ => r.insert(at, rng.gen()),
                        }
                    }
                }
                _ => {
                    r = (0..rng.gen_range(0..2100)).map(|_| rng.gen()).collect();
                    if rng.gen_bool(0.5) {
                        r.extend_from_slice(b"\r\n\r\n");
                    }
                }
            }
            r
        })
        .collect();
    let want: Vec<_> = reqs.iter().map(|r| parse::parse(r)).collect();
    let ok = want.iter().filter(|w| w.is_ok()).count();
    assert!(ok > n / 3, "the mix should parse mostly: {ok} of {n}");
    let mut p = GpuParser::new(dev, n).map_err(|e| e.to_string())?;
    // By the cohort's size (one thread a request at this size), then groups of 32 and 4.
    let runs = [
        (false, None),
        (true, None),
        (false, Some(32)),
        (true, Some(4)),
    ];
    for (transposed, lanes) in runs {
        p.set_parse_lanes(lanes).map_err(|e| e.to_string())?;
        let threads = lanes.map_or("by cohort".to_string(), |l| l.to_string());
        p.upload(&reqs, transposed).map_err(|e| e.to_string())?;
        p.launch().map_err(|e| e.to_string())?;
        p.synchronize().map_err(|e| e.to_string())?;
        let got = p.results().map_err(|e| e.to_string())?;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g,
                w,
                "request {i} (transposed {transposed}, threads per request {threads}): {:?}",
                String::from_utf8_lossy(&reqs[i])
            );
        }
        log.push(format!(
            "bank parser: {n} requests ({ok} parse), transposed {transposed}, threads per request {threads}: GPU = CPU twin"
        ));
    }
    Ok(log)
}

/// Runs one cohort of raw requests on a GPU path of the bank: its responses, in order.
type ServeCohort<'a> = dyn FnMut(&[Vec<u8>]) -> Vec<Vec<u8>> + 'a;

/// Session mixes for a GPU path of the bank, every response compared byte for byte with the
/// CPU twin's (`Bank::serve` on a twin with the same secret): three rounds of logins of
/// distinct users (one in ten with a wrong password), every other type from logged-in users
/// (one in ten without a cookie, one in ten forged, one in ten with a byte changed, a few
/// over the size limit), then logouts of half the live sessions. `serve` runs one cohort on
/// the GPU and returns its responses. Returns the responses compared.
fn bank_session_rounds(
    rng: &mut rand::rngs::SmallRng,
    cpu: &super::Bank,
    users: u32,
    label: &str,
    serve: &mut ServeCohort,
) -> usize {
    use super::kinds::Kind;
    use super::{client, parse::Cookie, parse::MAX_REQUEST};
    use rand::seq::SliceRandom;
    use rand::Rng;
    let mut live: Vec<(u32, Cookie)> = Vec::new();
    let mut compared = 0usize;
    let mut run = |reqs: Vec<Vec<u8>>, live: &mut Vec<(u32, Cookie)>| {
        let got = serve(&reqs);
        assert_eq!(got.len(), reqs.len());
        let mut out = Vec::new();
        for (i, req) in reqs.iter().enumerate() {
            cpu.serve(req, &mut out);
            assert!(
                got[i] == out,
                "request {i} ({label}) {:?}: GPU {:?}\nCPU {:?}",
                String::from_utf8_lossy(&req[..req.len().min(600)]),
                String::from_utf8_lossy(&got[i][..got[i].len().min(600)]),
                String::from_utf8_lossy(&out[..out.len().min(600)])
            );
            if let Some(c) = client::set_cookie(&out) {
                live.retain(|(u, _)| *u != c.user);
                live.push((c.user, c));
            }
        }
        compared += reqs.len();
    };
    for _round in 0..3 {
        let mut us: Vec<u32> = (1..=users).collect();
        us.shuffle(rng);
        let logins: Vec<Vec<u8>> = us[..1500]
            .iter()
            .map(|&u| {
                let mut s = client::step(Kind::Login, u, rng);
                if rng.gen_bool(0.1) {
                    s.form = format!("userid={u}&password=1");
                }
                s.raw(None)
            })
            .collect();
        run(logins, &mut live);
        for kind in Kind::all().filter(|k| !matches!(k, Kind::Login | Kind::Logout)) {
            let reqs: Vec<Vec<u8>> = (0..700)
                .map(|_| {
                    let (u, c) = live[rng.gen_range(0..live.len())];
                    let cookie = match rng.gen_range(0..10) {
                        0 => None,
                        1 => Some(Cookie {
                            user: u,
                            token: rng.gen(),
                        }),
                        _ => Some(c),
                    };
                    let mut r = client::step(kind, u, rng).raw(cookie);
                    match rng.gen_range(0..100) {
                        0..=9 => {
                            let at = rng.gen_range(0..r.len());
                            r[at] = rng.gen();
                        }
                        10 => r.resize(MAX_REQUEST + 1 + rng.gen_range(0..100), b'a'),
                        _ => {}
                    }
                    r
                })
                .collect();
            run(reqs, &mut live);
        }
        live.shuffle(rng);
        let out: Vec<(u32, Cookie)> = live.drain(..live.len() / 2).collect();
        let reqs = out
            .iter()
            .map(|&(u, c)| client::step(Kind::Logout, u, rng).raw(Some(c)))
            .collect();
        run(reqs, &mut live);
    }
    compared
}

/// The bank's kernels (parse, sessions, pages, padding) on the test harness's cohorts against
/// the CPU twins: both layouts, the pages written by groups of threads as the cohort's size
/// picks (32 a page here) and by fixed groups of 1, 4 and 8, every response byte compared.
fn pages_match_the_cpu_twins(devs: &[DeviceInfo], seed: u64) -> Result<Vec<String>, String> {
    let dev = &devs[0];
    use super::{gpu::GpuParser, Bank, BankConfig};
    use rand::{Rng, SeedableRng};
    let mut log = Vec::new();
    let users = 20_000u32;
    let runs = [
        (false, None),
        (true, None),
        (false, Some(1)),
        (true, Some(1)),
        (false, Some(4)),
        (true, Some(8)),
    ];
    for (i, (transposed, lanes)) in runs.into_iter().enumerate() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ i as u64);
        let cfg = BankConfig {
            users,
            max_sessions: users as usize,
            secret: rng.gen(),
        };
        let cpu = Bank::new(&cfg);
        let mut gpu = GpuParser::new(dev, 4096)
            .and_then(|p| p.with_sessions(users, users, cfg.secret))
            .map_err(|e| e.to_string())?;
        gpu.set_page_lanes(lanes).map_err(|e| e.to_string())?;
        gpu.set_parse_lanes(lanes).map_err(|e| e.to_string())?;
        let threads = lanes.map_or("by cohort".to_string(), |l| l.to_string());
        let label =
            format!("harness, transposed {transposed}, threads per page and request {threads}");
        let compared = bank_session_rounds(&mut rng, &cpu, users, &label, &mut |reqs| {
            gpu.upload(reqs, transposed).unwrap();
            gpu.launch().unwrap();
            gpu.serve().unwrap();
            gpu.responses().unwrap()
        });
        log.push(format!(
            "bank pages: {compared} responses, {label}: GPU = CPU twins"
        ));
    }
    Ok(log)
}

/// The bank's engine backend (what gpu-cohort runs: requests staged packed in pinned memory,
/// unpacked, parsed, records found, served, gathered back into rows and copied out) against
/// the CPU twin: cohorts formed by the backend's own batch keys, both layouts, both
/// groupings, the three record placements (computed; the GPU's record table; a real
/// memcached, with some users' records removed so both paths answer those with the 503
/// page), every response byte compared.
fn engine_backend_matches_the_cpu_twin(
    devs: &[DeviceInfo],
    seed: u64,
) -> Result<Vec<String>, String> {
    let dev = &devs[0];
    use super::backend::{BankGpu, BankGpuConfig, Cohorts};
    use super::store::{Memcached, Placement};
    use super::{Backend, Bank, BankConfig};
    use cohort_gpu::engine::{GpuBackend, Resume};
    use rand::{Rng, SeedableRng};
    let mut log = Vec::new();
    let users = 20_000u32;
    let cap = 1024;
    let mc = cohort_service_api::memcached::spawn_for_test(128);
    let mut runs = vec![
        (true, Cohorts::ByType, Placement::Computed),
        (false, Cohorts::Mixed, Placement::Computed),
        (true, Cohorts::ByType, Placement::Gpu),
        (false, Cohorts::ByType, Placement::Gpu),
    ];
    match &mc {
        Some(mc) => runs.push((true, Cohorts::ByType, Placement::Memcached(mc.addr.clone()))),
        None => log.push("bank engine backend: no memcached here: its placement not run".into()),
    }
    for (transposed, cohorts, backend) in runs {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ transposed as u64);
        let secret = rng.gen();
        let twin_backend = match &backend {
            Placement::Memcached(addr) => {
                let m = Memcached::connect(addr, 2).unwrap();
                m.load(users).unwrap();
                Backend::Memcached(m)
            }
            _ => Backend::Computed,
        };
        let cpu = Bank::with_backend(
            &BankConfig {
                users,
                max_sessions: users as usize,
                secret,
            },
            twin_backend,
        );
        let cfg = BankGpuConfig {
            users,
            max_sessions: users,
            secret,
            transposed,
            cohorts,
            backend: backend.clone(),
        };
        let gpu = BankGpu::new(dev, cfg).map_err(|e| e.to_string())?;
        if let Placement::Memcached(addr) = &backend {
            // Users whose records are gone after start-up: 503 pages on both paths.
            let m = Memcached::connect(addr, 1).unwrap();
            for u in (1..=users).step_by(97) {
                m.remove(u).unwrap();
            }
        }
        let stream = gpu.context().new_stream().unwrap();
        let mut slot = gpu.stream_buffers(&stream, cap).unwrap();
        let label = format!("engine backend, transposed {transposed}, {cohorts:?}, {backend}");
        let mut lent_released = rand::rngs::SmallRng::seed_from_u64(seed ^ 0x1e47);
        let compared = bank_session_rounds(&mut rng, &cpu, users, &label, &mut |reqs| {
            // Cohorts as the batcher forms them: by batch key, at most `cap` each, in order
            // of arrival within a key (a key's requests are independent of other keys').
            let mut got = vec![Vec::new(); reqs.len()];
            // Pages lent from the slot's pinned result buffers, kept for a while as a slow
            // socket would: later cohorts copy out around them and must never overwrite them.
            let mut lent: Vec<(usize, bytes::Bytes)> = Vec::new();
            let mut keys: Vec<(u64, usize)> = reqs
                .iter()
                .enumerate()
                .map(|(i, r)| (cohort_engine::BatchBackend::batch_key(&gpu, r).unwrap(), i))
                .collect();
            keys.sort();
            for group in keys.chunk_by(|a, b| a.0 == b.0) {
                for cohort in group.chunks(cap) {
                    let key = cohort[0].0;
                    for (row, &(_, i)) in cohort.iter().enumerate() {
                        slot.stage(key, row, &reqs[i]).unwrap();
                    }
                    slot.enqueue(&stream, key, cohort.len()).unwrap();
                    // As the engine's slot drives a batch: each time the queued work has
                    // completed, `resume` until the batch is done (memcached: the
                    // fetcher's lookup, then the second half).
                    loop {
                        stream.synchronize().unwrap();
                        match slot.resume(&stream).unwrap() {
                            Resume::Done => break,
                            Resume::Waiting => std::thread::yield_now(),
                            Resume::Enqueued => {}
                        }
                    }
                    for (row, &(_, i)) in cohort.iter().enumerate() {
                        match slot.answer_shared(key, row) {
                            Some(page) => lent.push((i, page.unwrap())),
                            None => slot.answer(key, row, &mut got[i]).unwrap(),
                        }
                    }
                    if lent_released.gen_bool(0.5) {
                        for (i, page) in lent.drain(..) {
                            got[i] = page.to_vec();
                        }
                    }
                }
            }
            for (i, page) in lent {
                got[i] = page.to_vec();
            }
            got
        });
        log.push(format!(
            "bank engine: {compared} responses, {label}: GPU = CPU twin"
        ));
    }
    Ok(log)
}
