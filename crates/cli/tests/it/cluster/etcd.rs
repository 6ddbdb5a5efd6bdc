//! The cluster tests' etcd (`cluster.rs`): a real etcd on loopback ports, restarted on its
//! own data, and what anyone who can write to it can do through its JSON gateway.

use crate::common::{free_port, http_ok, http_post};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct Etcd {
    child: Option<Child>,
    pub(crate) client: u16,
    peer: u16,
    dir: std::path::PathBuf,
}

impl Etcd {
    pub(crate) fn start() -> Option<Etcd> {
        let have_etcd = Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let ucx = cohort_ucx::load().map(|_| ()).map_err(|e| e.to_string());
        if !have_etcd || ucx.is_err() {
            // Only what is missing, so that the skip is counted for that tool.
            let mut missing = Vec::new();
            if !have_etcd {
                missing.push("etcd not found".to_string());
            }
            if let Err(e) = ucx {
                missing.push(format!("UCX: {e}"));
            }
            let why = missing.join("; ");
            assert!(
                std::env::var_os("COHORT_REQUIRE_CLUSTER").is_none(),
                "COHORT_REQUIRE_CLUSTER is set: {why}"
            );
            // Straight to stderr, as scripts/test.sh counts it (libtest keeps eprintln!).
            use std::io::Write;
            let thread = std::thread::current();
            let test = thread.name().unwrap_or("a cluster test");
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "cohort-etcd-{}-{}",
            std::process::id(),
            free_port()
        ));
        let mut e = Etcd {
            child: None,
            client: free_port(),
            peer: free_port(),
            dir,
        };
        // A port free_port saw free may be taken before etcd binds it (the other tests' nodes
        // and connections draw from the same range): then etcd exits at once, and a first
        // start tries two fresh ports.
        for attempt in 1..=5 {
            match e.try_run() {
                Ok(()) => return Some(e),
                Err(why) if attempt < 5 && why.exited => {
                    eprintln!(
                        "etcd exited at start (attempt {attempt}); fresh ports: {}",
                        why.log
                    );
                    std::fs::remove_dir_all(&e.dir).ok();
                    e.client = free_port();
                    e.peer = free_port();
                }
                Err(why) => panic!("etcd did not come up: {}", why.log),
            }
        }
        unreachable!()
    }

    /// Restarts etcd on the same data and ports and waits until it answers; a port taken
    /// meanwhile is waited out, not changed, because the member's peer URL is in its data.
    pub(crate) fn run(&mut self) {
        let mut last = String::new();
        for _ in 0..20 {
            match self.try_run() {
                Ok(()) => return,
                Err(why) if why.exited => {
                    last = why.log;
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(why) => panic!("etcd did not come up again: {}", why.log),
            }
        }
        panic!("etcd did not come up again: {last}");
    }

    /// Starts etcd and waits (up to 30 s: CI machines are small and busy) until /health
    /// answers 200.
    fn try_run(&mut self) -> Result<(), EtcdFailed> {
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        let log_path = self.dir.with_extension("log");
        let log = std::fs::File::create(&log_path).expect("etcd log file");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--listen-client-urls", &url(self.client)])
            .args(["--advertise-client-urls", &url(self.client)])
            .args(["--listen-peer-urls", &url(self.peer)])
            .args(["--initial-advertise-peer-urls", &url(self.peer)])
            .args(["--initial-cluster", &format!("default={}", url(self.peer))])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        let failed = |exited: bool| {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            EtcdFailed {
                exited,
                log: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
            }
        };
        let until = Instant::now() + Duration::from_secs(30);
        let addr: SocketAddr = format!("127.0.0.1:{}", self.client).parse().unwrap();
        while !http_ok(addr, "/health") {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                let mut f = failed(true);
                f.log = format!("{status}; {}", f.log);
                return Err(f);
            }
            if Instant::now() >= until {
                self.stop();
                return Err(failed(false));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.client)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
        std::fs::remove_dir_all(&self.dir).ok();
        std::fs::remove_file(self.dir.with_extension("log")).ok();
    }
}

/// Why a start of etcd failed: it exited (`exited`, e.g. a port taken), or it never answered.
struct EtcdFailed {
    exited: bool,
    log: String,
}

/// Base64 (standard, padded), for etcd's JSON gateway.
fn b64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | (x as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn unb64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let mut out = Vec::new();
    for c in s.trim_end_matches('=').as_bytes().chunks(4) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | (val(x) as u32) << (18 - 6 * i));
        for i in 0..c.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// What anyone who can write to etcd can do, through etcd's JSON gateway (`/v3/...`).
impl Etcd {
    pub(crate) fn api(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let addr: SocketAddr = format!("127.0.0.1:{}", self.client).parse().unwrap();
        let answer = http_post(addr, path, &body.to_string());
        let json = &answer[answer
            .find('{')
            .unwrap_or_else(|| panic!("{path}: {answer}"))..];
        serde_json::from_str(&json[..=json.rfind('}').unwrap()])
            .unwrap_or_else(|e| panic!("{path}: {e}: {answer}"))
    }

    /// A lease of `ttl` seconds (its id, as the gateway writes int64s: a string).
    pub(crate) fn grant(&self, ttl: u64) -> String {
        let r = self.api(
            "/v3/lease/grant",
            serde_json::json!({ "TTL": ttl.to_string() }),
        );
        r["ID"].as_str().expect("a lease id").to_string()
    }

    pub(crate) fn put(&self, key: &str, value: &str, lease: Option<&str>) {
        let mut body =
            serde_json::json!({ "key": b64(key.as_bytes()), "value": b64(value.as_bytes()) });
        if let Some(l) = lease {
            body["lease"] = l.into();
        }
        self.api("/v3/kv/put", body);
    }

    /// A key's value and lease (0: none), if it exists.
    pub(crate) fn get(&self, key: &str) -> Option<(String, i64)> {
        let r = self.api(
            "/v3/kv/range",
            serde_json::json!({ "key": b64(key.as_bytes()) }),
        );
        let kv = r["kvs"].as_array()?.first()?.clone();
        let value = String::from_utf8(unb64(kv["value"].as_str().unwrap_or(""))).unwrap();
        let lease = kv["lease"].as_str().map_or(0, |l| l.parse().unwrap());
        Some((value, lease))
    }

    pub(crate) fn delete(&self, key: &str) {
        self.api(
            "/v3/kv/deleterange",
            serde_json::json!({ "key": b64(key.as_bytes()) }),
        );
    }

    /// A node's entry as it registered it, changed by `f` (a stranger's entry looks real).
    pub(crate) fn entry_like(&self, id: &str, f: impl FnOnce(&mut serde_json::Value)) -> String {
        let until = Instant::now() + Duration::from_secs(20);
        let (value, _) = loop {
            if let Some(e) = self.get(&format!("/cohort/nodes/{id}")) {
                break e;
            }
            assert!(Instant::now() < until, "node {id} never registered");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut v: serde_json::Value = serde_json::from_str(&value).unwrap();
        f(&mut v);
        v.to_string()
    }
}

#[test]
fn base64_round_trips() {
    for s in ["", "a", "ab", "abc", "abcd", "/cohort/nodes/x"] {
        assert_eq!(unb64(&b64(s.as_bytes())), s.as_bytes(), "{s}");
    }
    assert_eq!(b64(b"abcd"), "YWJjZA==");
}
