//! Admission control under 5x overload for 10 s: every request gets exactly one answer, the
//! server stays up, and the requests it admitted finish within their deadline.

use crate::common;
use cohort_load::{LoadConfig, Mode, Target};
use cohort_services::micro::load::SpinWorkload;
use common::*;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn five_times_capacity_for_ten_seconds_keeps_every_promise() {
    // One worker spinning 2 ms per request: capacity about 500/s. Offer 2500/s. Long requests
    // at a low rate keep the generator asleep between sends: CI has two cores and the worker
    // fills one, so a generator spinning for 80 us gaps (12.5K/s) starved the server's I/O
    // threads and the measured p99 was the scheduler's (80-145 ms), not the server's. The
    // queue bound (16 x 2 ms) admits nothing that cannot finish in 34 ms, inside the 50 ms
    // deadline, so the margin left is for the machine, not for the server.
    let mut s = Served::start(&[
        "--service",
        "spin",
        "--workers",
        "1",
        "--max-queue",
        "16",
        "--worker-spin-us",
        "0",
    ]);
    let deadline_us = 50_000;
    let open = Mode::Open {
        rate: 2_500.0,
        poisson: true,
    };
    let cfg = LoadConfig {
        answer_timeout: Duration::from_secs(5),
        request_timeout_us: deadline_us,
        seed: 3,
        ..LoadConfig::new(
            Target::Tcp(s.tcp.unwrap()),
            open,
            Duration::from_secs(10),
            2,
        )
    };
    let r = cohort_load::run(
        &cfg,
        Arc::new(SpinWorkload {
            spin_us: 2_000,
            payload_bytes: 8,
        }),
    )
    .unwrap();
    assert_all_answered(&r);
    let refused = r.errors.get("OVERLOADED").copied().unwrap_or(0)
        + r.errors.get("TIMEOUT").copied().unwrap_or(0);
    assert!(
        refused > r.sent / 2,
        "most of a 5x overload must be refused: {r:#?}"
    );
    assert!(r.ok > 2_000, "the server kept serving at capacity: {r:#?}");
    let unexpected: u64 = r
        .errors
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "OVERLOADED" | "TIMEOUT"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        unexpected, 0,
        "only OVERLOADED and TIMEOUT are acceptable refusals: {r:#?}"
    );
    // The server's promise is on its own clock; the client's clock adds the scheduler of a
    // 2-core machine shared by the spinning worker, the server's I/O threads and the
    // generator (2-core runs saw client-side p99 of 69, 77 and 411 ms with p50 far below the
    // bound). The bulk must be inside the deadline and the tail within 10 deadlines: an
    // unbounded queue (the failure this test is for) grows by 4x capacity every second of a
    // 5x overload, which puts p50 and p99 at seconds.
    assert!(
        r.latency_us.p50 <= deadline_us as f64,
        "admitted requests' p50 {} us exceeds their {deadline_us} us deadline",
        r.latency_us.p50
    );
    assert!(
        r.latency_us.p99 <= 10.0 * deadline_us as f64,
        "admitted requests' p99 {} us exceeds 10 x their {deadline_us} us deadline",
        r.latency_us.p99
    );
    // Still up and healthy.
    let r = load(
        Target::Udp(s.udp.unwrap()),
        Mode::Closed { concurrency: 1 },
        0.5,
        Arc::new(SpinWorkload {
            spin_us: 10,
            payload_bytes: 8,
        }),
    );
    assert_eq!(r.error_total(), 0, "{r:#?}");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

#[test]
fn check_config_accepts_a_good_file_and_rejects_a_bad_one() {
    let dir = std::env::temp_dir().join(format!("cohort-cfgtest-{}", std::process::id()));
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "service = \"echo,spin\"\nudp = \"127.0.0.1:0\"\nio_threads = 2\nmax_queue = 100\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args([
            "serve",
            "--config",
            good.to_str().unwrap(),
            "--check-config",
            "--max-queue",
            "7",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("configuration ok")
            && text.contains("max_queue = 7")
            && text.contains("io_threads = 2"),
        "{text}"
    );
    // What it prints is a config file that gives the same configuration back.
    let resolved = dir.join("resolved.toml");
    std::fs::write(&resolved, text.as_bytes()).unwrap();
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args([
            "serve",
            "--config",
            resolved.to_str().unwrap(),
            "--check-config",
        ])
        .output()
        .unwrap();
    assert!(again.status.success(), "{again:?}");
    // The same settings (a value read back from a file is no longer marked as a default).
    let table = |t: &str| t.parse::<toml::Table>().expect("the output is TOML");
    assert_eq!(table(&String::from_utf8_lossy(&again.stdout)), table(&text));
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "service = \"echo\"\nno_such_setting = 3\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["serve", "--config", bad.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown key \"no_such_setting\""), "{err}");
}
