//! The bank served for real: `cohort serve --service bank` on loopback, driven by the load
//! generator's session replay (every page checked byte for byte), and raw bad requests over a
//! plain TCP socket getting their 4xx pages.

use crate::common;
use cohort_load::{Mode, Target};
use cohort_services::bank::load::BankWorkload;
use common::*;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn sessions_over_http_get_correct_pages() {
    let mut s = Served::start(&[
        "--service",
        "bank",
        "--bank-users",
        "5000",
        "--workers",
        "1",
    ]);
    let bank = Arc::new(BankWorkload { users: 5000 });
    let r = load(
        Target::Http(s.http.unwrap()),
        Mode::Open {
            rate: 800.0,
            poisson: true,
        },
        1.5,
        bank.clone(),
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    assert!(r.ok >= 1000, "{r:#?}");
    // Every type of the mix was served and timed (the rarest is 1% of 1200 requests).
    assert!(r.per_type.len() >= 12, "{:?}", r.per_type.keys());
    assert!(r.per_type["login"].answers > 100);
    // A closed loop over several connections: each its own users, no session stolen.
    let r = load(
        Target::Http(s.http.unwrap()),
        Mode::Closed { concurrency: 8 },
        1.0,
        bank,
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

/// Sends raw bytes on a fresh connection and returns the status line's code.
fn status_of(addr: std::net::SocketAddr, req: &[u8]) -> u16 {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(req).unwrap();
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        let n = c.read(&mut buf[got..]).unwrap();
        assert!(
            n > 0,
            "closed without an answer to {:?}",
            String::from_utf8_lossy(req)
        );
        got += n;
    }
    assert!(
        buf.starts_with(b"HTTP/1.1 "),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
    std::str::from_utf8(&buf[9..12]).unwrap().parse().unwrap()
}

#[test]
fn bad_requests_get_their_pages() {
    let s = Served::start(&["--service", "bank", "--bank-users", "100", "--workers", "1"]);
    let a = s.http.unwrap();
    assert_eq!(
        status_of(a, b"GET /bank/profile HTTP/1.1\r\nHost: x\r\n\r\n"),
        401
    );
    assert_eq!(
        status_of(
            a,
            b"GET /bank/profile HTTP/1.1\r\nHost: x\r\nCookie: SID=3-00000000deadbeef\r\n\r\n"
        ),
        401
    );
    assert_eq!(
        status_of(a, b"GET /bank/vault HTTP/1.1\r\nHost: x\r\n\r\n"),
        404
    );
    assert_eq!(
        status_of(a, b"GET /bank/login HTTP/1.1\r\nHost: x\r\n\r\n"),
        405
    );
    assert_eq!(
        status_of(
            a,
            b"POST /bank/login HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nuserid=1&"
        ),
        400
    );
    let big = format!(
        "POST /bank/post_payee HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n{}",
        "a".repeat(2000)
    );
    assert_eq!(status_of(a, big.as_bytes()), 413);
    // Not HTTP at all: hyper's own 400.
    assert_eq!(status_of(a, b"\x01\x02garbage\r\n\r\n"), 400);
    // The JSON gateway still serves the other routes beside the pages.
    assert_eq!(
        status_of(a, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
        200
    );
}

/// The records in a real memcached (Rhythm's Titan A placement): the server loads them at
/// start, every page of the session replay is still byte-identical to the computed
/// records', and with memcached gone a request that needs its records gets a 503 page (a
/// page without records still its 200), never a hang or a dropped answer.
#[test]
fn a_memcached_backend_serves_the_same_pages_and_503_without_it() {
    let Some(mut mc) = cohort_services::memcached::spawn_for_test(64) else {
        return;
    };
    let backend = format!("memcached://{}", mc.addr);
    let mut s = Served::start(&[
        "--service",
        "bank",
        "--bank-users",
        "3000",
        "--bank-backend",
        &backend,
        "--workers",
        "2",
    ]);
    let r = load(
        Target::Http(s.http.unwrap()),
        Mode::Open {
            rate: 600.0,
            poisson: true,
        },
        1.5,
        Arc::new(BankWorkload { users: 3000 }),
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    assert!(r.ok >= 700, "{r:#?}");
    let a = s.http.unwrap();
    let password = cohort_services::bank::besim::Besim::password(17);
    let login = |pw: u64| {
        let body = format!("userid=17&password={pw}");
        format!(
            "POST /bank/login HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    assert_eq!(status_of(a, login(password).as_bytes()), 200);
    assert_eq!(status_of(a, login(password + 1).as_bytes()), 401);
    mc.kill();
    assert_eq!(status_of(a, login(password).as_bytes()), 503);
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

#[test]
fn an_unreachable_memcached_or_gpu_records_on_cpu_is_a_clear_start_up_error() {
    for (backend, says) in [
        ("memcached://127.0.0.1:1", "memcached at 127.0.0.1:1"),
        ("gpu", "needs a GPU engine"),
        ("memcached://nohost", "unknown bank backend"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["serve", "--service", "bank", "--http", "127.0.0.1:0"])
            .args(["--bank-users", "10", "--bank-backend", backend])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{backend}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{backend}: {err}");
    }
}

/// With API keys on, the bank's pages need a key too: the load generator's browsers send it
/// (`--key`) and every page is served and checked; without it the page is 401.
#[test]
fn with_keys_the_generator_sends_its_key_with_every_page() {
    let dir = std::env::temp_dir().join(format!("cohort-bank-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    std::fs::write(
        &keys,
        "[[key]]\nid = \"web\"\nsecret = \"web-secret-0123456\"\n",
    )
    .unwrap();
    let s = Served::start(&[
        "--service",
        "bank",
        "--bank-users",
        "1000",
        "--workers",
        "1",
        "--auth-keys",
        keys.to_str().unwrap(),
    ]);
    let a = s.http.unwrap();
    assert_eq!(
        status_of(a, b"GET /bank/login HTTP/1.1\r\nHost: x\r\n\r\n"),
        401
    );
    let cfg = cohort_load::LoadConfig {
        key: Some("web:web-secret-0123456".parse().unwrap()),
        ..cohort_load::LoadConfig::new(
            Target::Http(a),
            Mode::Closed { concurrency: 4 },
            Duration::from_millis(600),
            2,
        )
    };
    let r = cohort_load::run(&cfg, Arc::new(BankWorkload { users: 1000 })).unwrap();
    assert_all_answered(&r);
    assert!(r.ok > 100 && r.error_total() == 0, "{r:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
