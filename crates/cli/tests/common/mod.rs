//! Starts the real `cohort serve` binary on loopback ports and drives it with the real load
//! generator.
#![allow(dead_code)]

use cohort_load::{LoadConfig, Mode, Report, Target, Workload};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub struct Served {
    pub child: Child,
    pub udp: Option<SocketAddr>,
    pub tcp: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
}

impl Served {
    /// `cohort serve` with loopback listeners and extra flags; waits for the listening line.
    pub fn start(extra: &[&str]) -> Served {
        Served::start_with(extra, |_| {})
    }

    /// `start`, with the command adjusted by `setup` first (where its log goes, what the
    /// child may do).
    pub fn start_with(extra: &[&str], setup: impl FnOnce(&mut Command)) -> Served {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cohort"));
        cmd.args([
            "serve",
            "--udp",
            "127.0.0.1:0",
            "--tcp",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ])
        .args(["--log-level", "warn"])
        .args(extra)
        .stdout(Stdio::piped());
        setup(&mut cmd);
        let mut child = cmd.spawn().expect("start cohort serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert!(
            line.starts_with("listening "),
            "unexpected first line {line:?}"
        );
        let get = |k: &str| {
            line.split_whitespace()
                .find_map(|p| p.strip_prefix(&format!("{k}=")))
                .map(|a| a.parse().expect("address"))
        };
        Served {
            udp: get("udp"),
            tcp: get("tcp"),
            http: get("http"),
            child,
        }
    }

    pub fn sigterm(&self) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    /// Waits for exit (bounded) and returns the exit code.
    pub fn wait_exit(&mut self, within: Duration) -> i32 {
        let until = std::time::Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st.code().unwrap_or(-1);
            }
            assert!(
                std::time::Instant::now() < until,
                "server did not exit in {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn load(target: Target, mode: Mode, secs: f64, w: Arc<dyn Workload>) -> Report {
    load_over(target, mode, secs, w, 2)
}

/// `load` over `connections` connections (TCP/HTTP) or sockets (UDP).
pub fn load_over(
    target: Target,
    mode: Mode,
    secs: f64,
    w: Arc<dyn Workload>,
    connections: usize,
) -> Report {
    let cfg = LoadConfig {
        target,
        mode,
        duration: Duration::from_secs_f64(secs),
        warmup: Duration::from_millis(200),
        connections,
        answer_timeout: Duration::from_secs(3),
        request_timeout_us: 0,
        seed: 7,
        server_pid: None,
        key: None,
        tls: None,
    };
    cohort_load::run(&cfg, w).expect("load run")
}

/// Every request sent in the window got exactly one answer (a result or an error).
pub fn assert_all_answered(r: &Report) {
    assert_eq!(r.errors.get("no_answer").copied().unwrap_or(0), 0, "{r:#?}");
    assert_eq!(
        r.ok + r.error_total(),
        r.sent,
        "ok + errors != sent: {r:#?}"
    );
    assert_eq!(
        r.unexpected_answers, 0,
        "duplicate or stray answers: {r:#?}"
    );
}

/// A plain `GET` over a fresh connection (`connection: close`): the whole response, head and
/// body, as text.
pub fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).expect("read the answer");
    out
}
