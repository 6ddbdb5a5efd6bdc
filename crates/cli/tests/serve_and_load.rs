//! The real server driven by the real load generator over every transport.

mod common;
use cohort_load::{Mode, Target};
use cohort_services::micro::load::{EchoWorkload, SpinWorkload};
use common::*;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// The machine has 2 cores: run the servers one at a time so they do not starve each other.
static SERIAL: Mutex<()> = Mutex::new(());

/// The Open Inference Protocol over gRPC, driven by the load generator's gRPC target: every
/// answer's tensors checked (echo's bytes, lenet's class and logits against the CPU
/// function), open and closed loop; a service with no tensor form is refused up front.
#[test]
fn grpc_answers_are_checked_open_and_closed_loop() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&["--service", "echo,lenet:cpu", "--grpc", "127.0.0.1:0"]);
    let grpc = Target::Grpc(s.grpc.expect("grpc listener"));
    let echo = Arc::new(EchoWorkload { payload_bytes: 100 });
    let open = Mode::Open {
        rate: 2000.0,
        poisson: true,
    };
    let r = load(grpc, open, 1.0, echo);
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    assert!(r.ok >= 1800, "{r:#?}");
    use cohort_services::lenet::{load::LenetWorkload, mnist, model::Weights};
    let weights = Weights::load(None).expect("the shipped model");
    let lenet = LenetWorkload::new(mnist::embedded_test_subset(), &weights);
    let r = load(grpc, Mode::Closed { concurrency: 2 }, 1.0, Arc::new(lenet));
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    assert!(r.ok > 50, "{r:#?}");
    let spin = Arc::new(SpinWorkload {
        spin_us: 1,
        payload_bytes: 8,
    });
    let cfg = cohort_load::LoadConfig::new(
        grpc,
        Mode::Closed { concurrency: 1 },
        Duration::from_millis(100),
        1,
    );
    let e = cohort_load::run(&cfg, spin).expect_err("spin has no tensor form");
    assert!(e.to_string().contains("no tensor form"), "{e}");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

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

/// 64-byte echoes over UDP, open loop at 500/s then 5000/s: every one answered, none an error.
fn echo_at_a_low_and_a_higher_rate(s: &Served) {
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
    echo_at_a_low_and_a_higher_rate(&s);
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

/// HTTP/1.1 holds one request a connection: a rate past what the generator's connections
/// carry waits in the generator, not the server, and the report says so (`gen_sat`, the wait
/// as send lag) instead of showing a server that queued; a rate they carry is not flagged.
#[test]
fn http_requests_waiting_for_a_connection_flag_the_generator() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&["--service", "spin", "--workers", "2"]);
    let spin = Arc::new(SpinWorkload {
        spin_us: 2000,
        payload_bytes: 8,
    });
    let http = |rate: f64, connections: usize| {
        load_over(
            Target::Http(s.http.unwrap()),
            Mode::Open {
                rate,
                poisson: false,
            },
            1.0,
            spin.clone(),
            connections,
        )
    };
    // Two connections at 2 ms a request carry at most ~1 000/s: 2 000/s waits for them.
    let r = http(2000.0, 2);
    assert!(r.generator_saturated, "{r:#?}");
    assert!(r.send_lag_us_p99 > 10_000.0, "{r:#?}");
    assert_all_answered(&r);
    // 16 connections at 50/s never all wait on the server: what lag is left is the
    // generator's pacing on a busy machine (a few ms at most on the 2-core CI), far below.
    let r = http(50.0, 16);
    assert!(r.send_lag_us_p99 < 10_000.0, "{r:#?}");
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

/// `echo:inline` (the io threads run it) beside `spin` on cpu workers, two io threads: every
/// transport answers every request once and correctly, a bad spin payload on an inline spin
/// gets BAD_REQUEST, and /metrics counts the inline answers under their engine.
#[test]
fn inline_services_answer_every_transport_on_the_io_threads() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&[
        "--service",
        "echo:inline,spin",
        "--io-threads",
        "2",
        "--workers",
        "1",
    ]);
    let echo = Arc::new(EchoWorkload {
        payload_bytes: 3000,
    });
    for target in [Target::Udp(s.udp.unwrap()), Target::Tcp(s.tcp.unwrap())] {
        let r = load_over(
            target,
            Mode::Open {
                rate: 4000.0,
                poisson: true,
            },
            1.0,
            Arc::new(EchoWorkload { payload_bytes: 500 }),
            8,
        );
        assert_all_answered(&r);
        assert_eq!(r.error_total(), 0, "{r:#?}");
        assert!(r.ok >= 3500, "{r:#?}");
    }
    let r = load_over(
        Target::Http(s.http.unwrap()),
        Mode::Closed { concurrency: 8 },
        1.0,
        echo,
        8,
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    assert!(r.ok > 200, "{r:#?}");
    // The spin service still runs on its worker beside the inline echo.
    let spin = Arc::new(SpinWorkload {
        spin_us: 100,
        payload_bytes: 8,
    });
    let r = load(
        Target::Udp(s.udp.unwrap()),
        Mode::Closed { concurrency: 2 },
        0.5,
        spin,
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    let metrics = http_get(s.http.unwrap(), "/metrics");
    let inline_ok = metrics
        .lines()
        .find(|l| {
            l.starts_with("cohort_requests_total")
                && l.contains(r#"service="echo""#)
                && l.contains(r#"engine="inline""#)
                && l.contains(r#"outcome="ok""#)
        })
        .unwrap_or_else(|| panic!("no inline echo count in /metrics:\n{metrics}"));
    let n: f64 = inline_ok.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 7000.0, "{inline_ok}");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

/// A bad payload for a service served inline is refused with BAD_REQUEST by the io thread,
/// and the server goes on answering.
#[test]
fn inline_service_refuses_a_bad_payload_and_goes_on() {
    use cohort_proto::{encode_frame, ErrorCode, ErrorPayload, Frame, Header, Kind, MAX_PAYLOAD};
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Served::start(&["--service", "spin:inline"]);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let spin = cohort_services::spin::ID;
    let mut f = Vec::new();
    // spin_us over its limit (a datagram long enough for an error frame: UDP answers are
    // never larger than their request).
    let mut bad = u32::MAX.to_le_bytes().to_vec();
    bad.extend_from_slice(b"too long a spin");
    encode_frame(Header::request(spin, 1, 3), &bad, &mut f);
    sock.send_to(&f, s.udp.unwrap()).unwrap();
    let mut buf = [0u8; 2048];
    let n = sock.recv(&mut buf).expect("an answer");
    let got = Frame::decode_datagram(&buf[..n], MAX_PAYLOAD).unwrap();
    assert_eq!((got.header.kind, got.header.request_id), (Kind::Error, 1));
    let e = ErrorPayload::decode(got.payload).unwrap();
    assert_eq!(e.code, ErrorCode::BadRequest, "{e:?}");
    let r = load(
        Target::Udp(s.udp.unwrap()),
        Mode::Closed { concurrency: 2 },
        0.5,
        Arc::new(SpinWorkload {
            spin_us: 20,
            payload_bytes: 8,
        }),
    );
    assert_all_answered(&r);
    assert_eq!(r.error_total(), 0, "{r:#?}");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}

/// `cohort serve --udp-io uring` with `setup` applied to its command; its log (warn and up)
/// goes to the returned file. Loads echo over UDP at a low and a higher rate and checks every
/// answer, then returns the server's /metrics and log.
fn uring_server_answers_echo(setup: impl FnOnce(&mut std::process::Command)) -> (String, String) {
    let log = std::env::temp_dir().join(format!("cohort-uring-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let mut s = Served::start_with(
        &[
            "--service",
            "echo",
            "--io-threads",
            "2",
            "--udp-io",
            "uring",
        ],
        |c| {
            c.stderr(file);
            setup(c);
        },
    );
    echo_at_a_low_and_a_higher_rate(&s);
    let metrics = http_get(s.http.unwrap(), "/metrics");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    (metrics, text)
}

/// io_uring io threads answer every request; where this kernel refuses io_uring, the server
/// said so and both threads run the recvmmsg path (the refusal test below covers that path).
#[test]
fn udp_io_threads_on_io_uring_answer_every_request() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (metrics, log) = uring_server_answers_echo(|_| {});
    if log.contains("io_uring refused") {
        eprintln!("io_uring is refused on this machine: only the fallback ran ({log})");
        assert!(
            metrics.contains("cohort_udp_io_threads{path=\"recvmmsg\"} 2"),
            "{metrics}"
        );
    } else {
        assert!(
            metrics.contains("cohort_udp_io_threads{path=\"io_uring\"} 2"),
            "{metrics}"
        );
    }
}

/// A sandbox that refuses io_uring the way container runtimes' seccomp profiles do
/// (io_uring_setup fails with EPERM): the server says so in one log line, runs recvmmsg, and
/// answers every request.
#[cfg(target_arch = "x86_64")]
#[test]
fn udp_io_uring_refused_by_seccomp_falls_back_to_recvmmsg() {
    use std::os::unix::process::CommandExt;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (metrics, log) = uring_server_answers_echo(|c| {
        // SAFETY: only async-signal-safe prctl calls between fork and exec.
        unsafe { c.pre_exec(refuse_io_uring) };
    });
    assert_eq!(log.matches("io_uring refused").count(), 1, "{log}");
    assert!(log.contains("Operation not permitted"), "{log}");
    assert!(
        metrics.contains("cohort_udp_io_threads{path=\"recvmmsg\"} 2"),
        "{metrics}"
    );
}

/// Installs a seccomp filter on this process: io_uring_setup fails with EPERM, every other
/// system call is allowed.
#[cfg(target_arch = "x86_64")]
fn refuse_io_uring() -> std::io::Result<()> {
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let mut prog = [
        stmt(load, 4), // seccomp_data.arch
        jeq(AUDIT_ARCH_X86_64, 0, 3),
        stmt(load, 0), // seccomp_data.nr
        jeq(libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: plain prctl calls with a filter program that outlives them.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
