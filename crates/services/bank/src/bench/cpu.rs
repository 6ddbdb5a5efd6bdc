//! The bank (Rhythm's banking workload) on the CPU in-process: the CPU baseline of Rhythm's
//! Table 3, as Rhythm's emulation: sessions of the Table 2 mix pre-built in memory, served by
//! `workers` threads calling the service directly (no network), every page checked on the
//! first pass. Served over HTTP is `cohort-lab bench served --services bank` (the server pinned,
//! the generator a separate process; `lab/scripts/bank-cpu.sh` runs both).

use super::Record;
use crate::client;
use crate::kinds::{Kind, KINDS};
use crate::{Bank, BankConfig};
use anyhow::Result;
use clap::Args;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BankBench {
    /// In-process worker counts (threads calling the service).
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    pub workers: Vec<usize>,
    /// Users in the backend.
    #[arg(long, default_value_t = crate::besim::DEFAULT_USERS)]
    pub users: u32,
    /// Sessions pre-built per worker.
    #[arg(long, default_value_t = 2000)]
    pub sessions: usize,
    /// Seconds each in-process point runs.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Host power per busy core (W) for requests per joule: the CPU side has no meter here
    /// (RAPL is not readable on the lent machines), so the figure is stated, not measured.
    #[arg(long, default_value_t = 10.0)]
    pub core_watts: f64,
    #[arg(long, default_value = "lab/results/bank-cpu.json")]
    pub out: PathBuf,
}

/// One pre-built session: its user, and its requests with the cookie's token left as 16
/// zeros at a known offset (patched in after the login answers, as a browser would).
struct Session {
    user: u32,
    requests: Vec<(Kind, Vec<u8>, Option<usize>)>,
}

const PLACEHOLDER: crate::parse::Cookie = crate::parse::Cookie { user: 0, token: 0 };

fn build_sessions(users: u32, worker: usize, workers: usize, n: usize, seed: u64) -> Vec<Session> {
    let mut rng = SmallRng::seed_from_u64(seed ^ worker as u64);
    let stride = workers.min(users as usize).max(1) as u32;
    let first = 1 + worker as u32 % stride;
    let span = (users - first) / stride + 1;
    (0..n)
        .map(|_| {
            let user = first + stride * rand::Rng::gen_range(&mut rng, 0..span);
            let mut requests = vec![(
                Kind::Login,
                client::step(Kind::Login, user, &mut rng).raw(None),
                None,
            )];
            // The session runs until a logout, or until the mix draws a login: then it is
            // abandoned (no logout), as SPECweb's users abandon theirs, and that login opens
            // the next session - so logins are 28% and logouts 8% of the requests, as in
            // Table 2.
            loop {
                let kind = client::draw(&mut rng);
                if kind == Kind::Login {
                    break;
                }
                let raw = client::step(kind, user, &mut rng).raw(Some(crate::parse::Cookie {
                    user,
                    ..PLACEHOLDER
                }));
                let marker = format!("SID={user}-");
                let at = raw
                    .windows(marker.len())
                    .position(|w| w == marker.as_bytes())
                    .map(|i| i + marker.len());
                requests.push((kind, raw, at));
                if kind == Kind::Logout {
                    break;
                }
            }
            Session { user, requests }
        })
        .collect()
}

/// Runs `sessions` round and round for `secs`: (requests, body bytes, per type counts).
fn serve_sessions(
    bank: &Bank,
    sessions: &mut [Session],
    secs: f64,
    check: bool,
) -> Result<(u64, u64, [u64; 14])> {
    let mut out = Vec::with_capacity(64 << 10);
    let (mut n, mut bytes, mut per) = (0u64, 0u64, [0u64; 14]);
    let until = Instant::now() + Duration::from_secs_f64(secs);
    'outer: loop {
        for s in sessions.iter_mut() {
            let mut token = [b'0'; 16];
            for (kind, raw, at) in s.requests.iter_mut() {
                if let Some(at) = *at {
                    raw[at..at + 16].copy_from_slice(&token);
                }
                bank.serve(raw, &mut out);
                anyhow::ensure!(
                    out.starts_with(b"HTTP/1.1 200"),
                    "{kind:?} refused: {}",
                    String::from_utf8_lossy(&out[..40])
                );
                if *kind == Kind::Login {
                    let c = client::set_cookie(&out).expect("login sets a cookie");
                    token.copy_from_slice(format!("{:016x}", c.token).as_bytes());
                }
                if check {
                    // The step is re-derived from the raw request to build the expected page.
                    let parsed = crate::parse::parse(raw).expect("own request");
                    let mut want = Vec::new();
                    let change = match kind {
                        Kind::Login => crate::page::SessionChange::Opened(
                            client::set_cookie(&out).expect("cookie"),
                        ),
                        Kind::Logout => crate::page::SessionChange::Closed,
                        _ => crate::page::SessionChange::None,
                    };
                    crate::page::render(
                        &parsed,
                        crate::record::Records::Computed(s.user),
                        change,
                        &mut want,
                    );
                    anyhow::ensure!(out == want, "{kind:?} page of user {} differs", s.user);
                }
                n += 1;
                bytes += (out.len()) as u64;
                per[*kind as usize] += 1;
            }
            if !check && Instant::now() >= until {
                break 'outer;
            }
        }
        if check {
            break;
        }
    }
    Ok((n, bytes, per))
}

fn in_process(a: &BankBench, workers: usize) -> Result<serde_json::Value> {
    let bank = Bank::new(&BankConfig {
        users: a.users,
        max_sessions: a.users as usize,
        ..Default::default()
    });
    let mut sessions: Vec<Vec<Session>> = (0..workers)
        .map(|w| build_sessions(a.users, w, workers, a.sessions, 1))
        .collect();
    // First pass: every page checked against the backend records.
    for s in sessions.iter_mut() {
        serve_sessions(&bank, s, 0.0, true)?;
    }
    let start = Instant::now();
    let results: Vec<(u64, u64, [u64; 14])> = std::thread::scope(|sc| {
        let handles: Vec<_> = sessions
            .iter_mut()
            .map(|s| {
                let bank = &bank;
                sc.spawn(move || serve_sessions(bank, s, a.duration, false))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect::<Result<Vec<_>>>()
    })?;
    let secs = start.elapsed().as_secs_f64();
    let n: u64 = results.iter().map(|r| r.0).sum();
    let bytes: u64 = results.iter().map(|r| r.1).sum();
    let mut per = [0u64; 14];
    for r in &results {
        for (p, x) in per.iter_mut().zip(r.2) {
            *p += x;
        }
    }
    let rate = n as f64 / secs;
    let watts = workers as f64 * a.core_watts;
    println!(
        "in-process workers={workers:>2}: {rate:>10.0} requests/s, {:>7.2} GB/s of pages, {:.1} us per request per worker, {:.0} requests/J at {} W per core",
        bytes as f64 / secs / 1e9,
        workers as f64 / rate * 1e6,
        rate / watts,
        a.core_watts
    );
    Ok(json!({
        "workers": workers, "requests": n, "seconds": secs, "requests_per_s": rate,
        "page_bytes_per_s": bytes as f64 / secs,
        "mean_service_us": workers as f64 / rate * 1e6,
        "requests_per_joule": rate / watts, "core_watts": a.core_watts,
        "per_type_requests_per_s": KINDS.iter().map(|k| (k.name.to_string(), json!(per[k.kind as usize] as f64 / secs))).collect::<serde_json::Map<_, _>>(),
    }))
}

pub fn run(a: &BankBench, record: Record) -> Result<()> {
    anyhow::ensure!(
        a.users >= 1 && a.sessions >= 1,
        "--users and --sessions must be positive"
    );
    let mut inproc = Vec::new();
    for &w in &a.workers {
        anyhow::ensure!(w >= 1, "--workers entries must be positive");
        inproc.push(in_process(a, w)?);
    }
    record(
        &a.out,
        json!({ "engine": "cpu", "users": a.users, "in_process": inproc }),
    )
    .map_err(anyhow::Error::msg)
}
