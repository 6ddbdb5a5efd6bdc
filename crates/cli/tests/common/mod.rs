//! Starts the real `cohort serve` binary on loopback ports and drives it with the real load
//! generator. The lab's tests (lab/cli/tests) include this module too.
#![allow(dead_code)]

use cohort_load::{LoadConfig, Mode, Report, Target, Workload};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// The product's binary: this crate's (cohort-cli's tests), or the one beside the lab's
/// (cohort-lab's tests; `cargo test --workspace` builds both into one folder).
pub fn cohort_bin() -> std::path::PathBuf {
    let lab = match option_env!("CARGO_BIN_EXE_cohort") {
        Some(p) => return p.into(),
        None => lab_bin(),
    };
    let p = lab.with_file_name("cohort");
    assert!(
        p.is_file(),
        "no product binary at {}: build it with the same profile first \
         (cargo build -p cohort-cli), or test the workspace",
        p.display()
    );
    p
}

/// The lab's binary, in the lab's tests.
pub fn lab_bin() -> std::path::PathBuf {
    match option_env!("CARGO_BIN_EXE_cohort-lab") {
        Some(p) => p.into(),
        None => panic!("not a test of cohort-lab (nor of cohort-cli)"),
    }
}

pub struct Served {
    pub child: Child,
    pub udp: Option<SocketAddr>,
    pub tcp: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    /// Only when the extra flags ask for it (`--grpc 127.0.0.1:0`).
    pub grpc: Option<SocketAddr>,
    /// Only when the extra flags ask for it (`--admin 127.0.0.1:0`).
    pub admin: Option<SocketAddr>,
}

impl Served {
    /// `cohort serve` with loopback listeners and extra flags; waits for the listening line.
    pub fn start(extra: &[&str]) -> Served {
        Served::start_with(extra, |_| {})
    }

    /// `start`, with the command adjusted by `setup` first (where its log goes, what the
    /// child may do).
    pub fn start_with(extra: &[&str], setup: impl FnOnce(&mut Command)) -> Served {
        let mut cmd = Command::new(cohort_bin());
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
            grpc: get("grpc"),
            admin: get("admin"),
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

/// A loopback TCP port free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
        warmup: Duration::from_millis(200),
        answer_timeout: Duration::from_secs(3),
        seed: 7,
        ..LoadConfig::new(target, mode, Duration::from_secs_f64(secs), connections)
    };
    cohort_load::run(&cfg, w).expect("load run")
}

/// Runs the real `cohort load` binary at `target` for `service` with `args`, and returns its
/// JSON report (a sweep's first point); the run must succeed.
pub fn cohort_load_report(target: &str, service: &str, args: &[&str]) -> serde_json::Value {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("cohort-load-{}-{n}.json", std::process::id()));
    let o = Command::new(cohort_bin())
        .args(["load", "--target", target, "--service", service])
        .args(args)
        .args(["--log-level", "warn", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{target}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).unwrap();
    if r.is_array() {
        r[0].clone()
    } else {
        r
    }
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

/// Whether `path` at `addr` answers 200 (false while nothing listens there).
pub fn http_ok(addr: SocketAddr, path: &str) -> bool {
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        && std::panic::catch_unwind(|| http_get(addr, path))
            .is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
}

/// A `POST` of `body` over a fresh connection (`connection: close`): the whole response as
/// text (what arrived before a close or the 5 s read timeout).
#[allow(dead_code)]
pub fn http_post(addr: SocketAddr, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

/// An answer frame as the tests read it: (request id, kind, error code if an error).
#[allow(dead_code)] // (each test binary compiles this module; not all read frames)
pub type Answered = (u64, cohort_proto::Kind, Option<cohort_proto::ErrorCode>);

#[allow(dead_code)]
fn answered(f: &cohort_proto::Frame<'_>) -> Answered {
    let code = (f.header.kind == cohort_proto::Kind::Error).then(|| {
        cohort_proto::ErrorPayload::decode(f.payload)
            .expect("an error frame's payload")
            .code
    });
    (f.header.request_id, f.header.kind, code)
}

/// Reads `n` answer frames from a TCP connection (fails if it closes first).
#[allow(dead_code)]
pub fn read_answers(c: &mut std::net::TcpStream, n: usize) -> Vec<Answered> {
    use std::io::Read;
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    let mut chunk = [0u8; 4096];
    while out.len() < n {
        while let Ok(Some((f, used))) =
            cohort_proto::Frame::decode_stream(&buf, cohort_proto::MAX_PAYLOAD)
        {
            out.push(answered(&f));
            buf.drain(..used);
        }
        if out.len() >= n {
            break;
        }
        let got = c.read(&mut chunk).expect("answers");
        assert!(got > 0, "closed after {} answers", out.len());
        buf.extend_from_slice(&chunk[..got]);
    }
    out
}

/// The next answer datagram on `s` (within its read timeout).
#[allow(dead_code)]
pub fn udp_answer(s: &std::net::UdpSocket) -> Answered {
    let mut b = vec![0u8; 65_536];
    let n = s.recv(&mut b).expect("an answer datagram");
    let f = cohort_proto::Frame::decode_datagram(&b[..n], cohort_proto::MAX_PAYLOAD);
    answered(&f.expect("a frame"))
}

/// `cohort ARGS...` run to its end: its status and output.
pub fn cohort(args: &[&str]) -> std::process::Output {
    Command::new(cohort_bin()).args(args).output().unwrap()
}

/// `cohort-lab ARGS...` run to its end (the lab's tests): its status and output.
pub fn lab(args: &[&str]) -> std::process::Output {
    Command::new(lab_bin()).args(args).output().unwrap()
}

/// A folder under the system's temp dir for one test's files, removed when dropped (tests
/// leave nothing behind).
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("cohort-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    pub fn path(&self, f: &str) -> String {
        self.0.join(f).to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small k-NN index (20 000 x 32, nlist 64, cpu build), its 200 queries and their exact
/// top-10, synthetic, in `d`.
pub struct KnnFiles {
    pub index: String,
    pub queries: String,
    pub gt: String,
}

pub fn knn_files(d: &Scratch) -> KnnFiles {
    let data = d.path("data");
    let run = |args: &[&str]| {
        let o = cohort(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run(&[
        "data",
        "synth",
        "--n",
        "20000",
        "--dim",
        "32",
        "--queries",
        "200",
        "--gt-k",
        "10",
        "--out",
        &data,
    ]);
    let index = d.path("ivf64.index");
    let base = format!("{data}/base.fvecs");
    run(&[
        "index", "build", "--base", &base, "--nlist", "64", "--out", &index,
    ]);
    KnnFiles {
        index,
        queries: format!("{data}/query.fvecs"),
        gt: format!("{data}/groundtruth.ivecs"),
    }
}
