//! The real server driven by the real load generator over every transport.

mod common;
use cohort_load::{EchoWorkload, Mode, SpinWorkload, Target};
use common::*;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// The machine has 2 cores: run the servers one at a time so they do not starve each other.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn echo_over_udp_tcp_http_is_correct_and_sigterm_exits_zero() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&["--service", "echo,spin"]);
    let echo = Arc::new(EchoWorkload { payload_bytes: 100 });
    for target in [Target::Udp(s.udp.unwrap()), Target::Tcp(s.tcp.unwrap())] {
        let r = load(
            target,
            Mode::Open {
                rate: 5000.0,
                poisson: true,
            },
            1.0,
            echo.clone(),
        );
        assert_all_answered(&r);
        assert_eq!(r.error_total(), 0, "{r:#?}");
        assert!(r.ok >= 4500, "{r:#?}");
    }
    let r = load(
        Target::Http(s.http.unwrap()),
        Mode::Closed { concurrency: 4 },
        1.0,
        echo,
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    assert!(r.ok > 100);
    let spin = Arc::new(SpinWorkload {
        spin_us: 200,
        payload_bytes: 8,
    });
    let r = load(
        Target::Udp(s.udp.unwrap()),
        Mode::Closed { concurrency: 2 },
        1.0,
        spin,
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    // 200 us of spinning per request bounds the rate of one worker.
    assert!(r.achieved_rate < 2.0 * 5000.0 + 100.0, "{r:#?}");
    assert!(r.latency_us.p50 >= 200.0, "{r:#?}");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

/// UDP io threads that poll before sleeping (`--io-spin-us`): at a low rate they go from
/// polling to sleeping between requests, so both paths run; every request is answered once.
#[test]
fn udp_io_threads_that_poll_before_sleeping_answer_every_request() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&[
        "--service",
        "echo",
        "--io-threads",
        "2",
        "--io-spin-us",
        "300",
    ]);
    let echo = Arc::new(EchoWorkload { payload_bytes: 64 });
    for rate in [500.0, 5000.0] {
        let r = load(
            Target::Udp(s.udp.unwrap()),
            Mode::Open {
                rate,
                poisson: true,
            },
            1.0,
            echo.clone(),
        );
        assert_all_answered(&r);
        assert_eq!(r.error_total(), 0, "{r:#?}");
        assert!(r.ok as f64 >= 0.9 * rate, "{r:#?}");
    }
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

/// Far more than capacity over TCP: the excess is refused with OVERLOADED at once, nothing
/// goes unanswered, the server stays up.
#[test]
fn overload_over_tcp_answers_overloaded_and_never_drops() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&["--service", "spin", "--workers", "1", "--max-queue", "16"]);
    let spin = Arc::new(SpinWorkload {
        spin_us: 500,
        payload_bytes: 8,
    });
    // Capacity is about 2000/s; offer 10x.
    let r = load(
        Target::Tcp(s.tcp.unwrap()),
        Mode::Open {
            rate: 20_000.0,
            poisson: false,
        },
        2.0,
        spin.clone(),
    );
    assert_all_answered(&r);
    let overloaded = r.errors.get("OVERLOADED").copied().unwrap_or(0);
    assert!(
        overloaded > r.sent / 2,
        "expected mostly OVERLOADED: {r:#?}"
    );
    assert!(r.ok > 1000, "the server kept serving at capacity: {r:#?}");
    // OVERLOADED answers are immediate, so admitted work is never stuck behind a long queue.
    assert!(r.latency_us.p99 < 100_000.0, "{r:#?}");
    // Still healthy afterwards.
    let r = load(
        Target::Udp(s.udp.unwrap()),
        Mode::Closed { concurrency: 1 },
        0.5,
        spin,
    );
    assert_eq!(r.error_total(), 0, "{r:#?}");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

/// SIGTERM in the middle of a TCP run: GOAWAY, every request the server read is answered,
/// exit 0.
#[test]
fn sigterm_under_load_leaves_nothing_unanswered() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&["--service", "spin"]);
    let tcp = s.tcp.unwrap();
    let spin = Arc::new(SpinWorkload {
        spin_us: 100,
        payload_bytes: 8,
    });
    let h = std::thread::spawn(move || {
        load(
            Target::Tcp(tcp),
            Mode::Open {
                rate: 3000.0,
                poisson: false,
            },
            3.0,
            spin,
        )
    });
    std::thread::sleep(Duration::from_millis(1500));
    s.sigterm();
    let r = h.join().unwrap();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
    assert!(r.goaway, "the client saw GOAWAY: {r:#?}");
    assert_eq!(r.errors.get("no_answer").copied().unwrap_or(0), 0, "{r:#?}");
    assert_eq!(r.unexpected_answers, 0);
    assert!(r.ok > 1000, "{r:#?}");
}

/// Three io threads: TCP and HTTP connections spread over three shards (each its own listener,
/// ingress and answer pump); every request on every connection is answered once, and SIGTERM
/// during HTTP load drains all three and exits 0.
#[test]
fn tcp_and_http_over_several_io_threads_answer_every_request_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&["--service", "echo", "--io-threads", "3", "--workers", "2"]);
    let echo = Arc::new(EchoWorkload {
        payload_bytes: 3000,
    });
    let r = load_over(
        Target::Tcp(s.tcp.unwrap()),
        Mode::Open {
            rate: 4000.0,
            poisson: true,
        },
        1.0,
        echo.clone(),
        12,
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    assert!(r.ok >= 3500, "{r:#?}");
    let http = s.http.unwrap();
    let e = echo.clone();
    let h = std::thread::spawn(move || {
        load_over(
            Target::Http(http),
            Mode::Closed { concurrency: 16 },
            2.0,
            e,
            16,
        )
    });
    std::thread::sleep(Duration::from_millis(1200));
    s.sigterm();
    let r = h.join().unwrap();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
    assert_eq!(r.errors.get("no_answer").copied().unwrap_or(0), 0, "{r:#?}");
    assert_eq!(r.unexpected_answers, 0, "{r:#?}");
    assert!(r.ok > 200, "{r:#?}");
}
