//! A cluster on loopback: a real etcd, `cohort node` processes (cpu engines) and a `cohort
//! serve --cluster` front end, driven by the real load generator with every answer checked.
//! Faults under load: a node killed (-9), a node frozen (SIGSTOP), a node added, etcd
//! restarted; in each, every request sent gets exactly one answer.
//!
//! Needs etcd (Debian's etcd-server) and UCX (`pip install libucx-cu13`); scripts/test.sh
//! installs both and sets COHORT_REQUIRE_CLUSTER, without which a machine lacking them skips
//! (and says so).

use crate::common;
mod entries;
mod etcd;
mod keys;

use cohort_load::{Mode, Target};
use common::{
    assert_all_answered, cohort, cohort_load_report, free_port, http_get, http_ok, http_post,
    knn_files, load_over, Scratch, Served,
};
use etcd::Etcd;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Node {
    child: Child,
    admin: SocketAddr,
    /// Its `--node-listen` address, as bound.
    listen: SocketAddr,
}

impl Node {
    fn start(etcd: &Etcd, id: &str) -> Node {
        Node::start_with(etcd, id, &[])
    }

    fn start_with(etcd: &Etcd, id: &str, extra: &[&str]) -> Node {
        Node::launch(&etcd.url(), id, "127.0.0.1:0", extra)
    }

    /// A node registering in the etcd at `url` (`etcd://...`), listening on `listen`.
    fn launch(url: &str, id: &str, listen: &str, extra: &[&str]) -> Node {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["node", "--cluster", url, "--node-id", id])
            .args(extra)
            .args(["--node-listen", listen, "--admin", "127.0.0.1:0"])
            .args(if extra.contains(&"--service") {
                &[][..]
            } else {
                &["--service", "echo"][..]
            })
            .args(["--lease-secs", "2", "--log-level", "warn"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start cohort node");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = |k: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|p| p.strip_prefix(k))
                .unwrap_or_else(|| panic!("no {k} address in {line:?}"))
                .parse()
                .unwrap()
        };
        let (admin, listen) = (addr("admin="), addr("node="));
        Node {
            child,
            admin,
            listen,
        }
    }

    /// Requests this node answered with a result.
    fn answered(&self) -> u64 {
        http_get(self.admin, "/metrics")
            .lines()
            .filter(|l| l.starts_with("cohort_requests_total{") && l.contains("outcome=\"ok\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn front(etcd: &Etcd) -> Served {
    front_with(etcd, &[])
}

fn front_with(etcd: &Etcd, extra: &[&str]) -> Served {
    let url = etcd.url();
    let mut args = vec!["--cluster", &url, "--service", "echo"];
    args.extend_from_slice(extra);
    Served::start(&args)
}

fn echo() -> std::sync::Arc<dyn cohort_load::Workload> {
    std::sync::Arc::new(cohort_services::micro::load::EchoWorkload { payload_bytes: 100 })
}

/// Open-loop (Poisson) load at `target`, checked.
fn poisson(target: Target, rate: f64, secs: f64) -> cohort_load::Report {
    let mode = Mode::Open {
        rate,
        poisson: true,
    };
    load_over(target, mode, secs, echo(), 2)
}

fn udp_load(fe: &Served, rate: f64, secs: f64) -> cohort_load::Report {
    poisson(Target::Udp(fe.udp.unwrap()), rate, secs)
}

/// Load until the front end answers without error (its nodes known and connected).
fn wait_routed(fe: &Served) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let r = udp_load(fe, 500.0, 0.3);
        if r.sent > 0 && r.ok == r.sent {
            return;
        }
        assert!(Instant::now() < until, "the front end never routed: {r:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Open-loop load in the background while `during` runs, then the report.
fn load_while(fe: &Served, secs: f64, rate: f64, during: impl FnOnce()) -> cohort_load::Report {
    let target = Target::Tcp(fe.tcp.unwrap());
    let run = std::thread::spawn(move || poisson(target, rate, secs));
    during();
    run.join().unwrap()
}

#[test]
fn a_front_end_serves_from_two_nodes_and_both_take_traffic() {
    let Some(etcd) = Etcd::start() else { return };
    let (a, b) = (Node::start(&etcd, "a"), Node::start(&etcd, "b"));
    let fe = front(&etcd);
    wait_routed(&fe);
    for target in [Target::Udp(fe.udp.unwrap()), Target::Tcp(fe.tcp.unwrap())] {
        let r = poisson(target, 3000.0, 1.5);
        assert_all_answered(&r);
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert!(r.ok > 3000, "{r:#?}");
    }
    let (na, nb) = (a.answered(), b.answered());
    assert!(na > 500 && nb > 500, "both nodes serve: a {na}, b {nb}");
    // The front end's per-node counters: every request sent, batched into messages.
    let m = http_get(fe.http.unwrap(), "/metrics");
    for node in ["a", "b"] {
        let (parts, messages) = (
            metric(
                &m,
                &format!("cohort_cluster_parts_sent_total{{node=\"{node}\"}}"),
            ),
            metric(
                &m,
                &format!("cohort_cluster_messages_sent_total{{node=\"{node}\"}}"),
            ),
        );
        assert!(
            parts >= 500.0 && messages >= 1.0 && messages <= parts,
            "{node}: {parts} parts in {messages} messages"
        );
    }
    assert!(
        m.contains("cohort_cluster_outstanding{node=\"a\",lane=\"0\"}"),
        "{m}"
    );
}

/// A sample's value in a Prometheus text exposition (0 when absent).
fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_killed_node_loses_nothing() {
    let Some(etcd) = Etcd::start() else { return };
    let (a, mut b) = (Node::start(&etcd, "a"), Node::start(&etcd, "b"));
    let fe = front(&etcd);
    wait_routed(&fe);
    let before = a.answered();
    let r = load_while(&fe, 3.0, 3000.0, || {
        std::thread::sleep(Duration::from_millis(1200));
        b.child.kill().unwrap(); // SIGKILL mid-load
    });
    assert_all_answered(&r);
    // echo is idempotent: what b held is retried on a.
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    // a took b's share once b was gone: more than half of the run.
    assert!(
        a.answered() - before > r.sent / 2,
        "a answered {}",
        a.answered() - before
    );
    b.child.wait().ok();
}

#[test]
fn a_frozen_node_leaves_routing_within_its_lease_and_its_requests_are_answered() {
    let Some(etcd) = Etcd::start() else { return };
    let (a, b) = (Node::start(&etcd, "a"), Node::start(&etcd, "b"));
    let fe = front(&etcd);
    wait_routed(&fe);
    let before = a.answered();
    let r = load_while(&fe, 6.0, 2000.0, || {
        std::thread::sleep(Duration::from_millis(1000));
        b.signal(libc::SIGSTOP);
    });
    // Everything answered: b's requests by the front end at their deadline or on b's
    // leaving (retried on a), everything after the lease on a alone.
    assert_served_past_a_lost_node(&fe, &r, a.answered() - before);
}

/// A run during which a node was lost (learned from its lease): every request answered,
/// most served (`by_a` of them by the node left), and past the lease a second run served
/// without error.
fn assert_served_past_a_lost_node(fe: &Served, r: &cohort_load::Report, by_a: u64) {
    assert_all_answered(r);
    let errors: u64 = r.errors.values().sum();
    assert!(
        errors < r.sent / 3,
        "most requests still served: {:?} of {}",
        r.errors,
        r.sent
    );
    assert!(
        by_a > r.sent / 2,
        "the node left answered {by_a} of {}",
        r.sent
    );
    let r2 = udp_load(fe, 2000.0, 1.0);
    assert_all_answered(&r2);
    assert!(r2.errors.is_empty(), "after the lease: {:?}", r2.errors);
}

#[test]
fn a_node_added_under_load_takes_traffic() {
    let Some(etcd) = Etcd::start() else { return };
    let a = Node::start(&etcd, "a");
    let fe = front(&etcd);
    wait_routed(&fe);
    let mut b = None;
    // (4 s: on a busy 2-core machine the new node's start alone took over a second.)
    let r = load_while(&fe, 4.0, 3000.0, || {
        std::thread::sleep(Duration::from_millis(800));
        b = Some(Node::start(&etcd, "b"));
    });
    assert_all_answered(&r);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let b = b.unwrap();
    assert!(b.answered() > 300, "the new node served {}", b.answered());
    assert!(a.answered() > 300);
}

#[test]
fn etcd_restarted_under_load_loses_nothing() {
    let Some(mut etcd) = Etcd::start() else {
        return;
    };
    let (_a, _b) = (Node::start(&etcd, "a"), Node::start(&etcd, "b"));
    let fe = front(&etcd);
    wait_routed(&fe);
    let r = load_while(&fe, 4.0, 3000.0, || {
        std::thread::sleep(Duration::from_millis(800));
        etcd.stop();
        std::thread::sleep(Duration::from_millis(1500));
        etcd.run();
    });
    assert_all_answered(&r);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    // Both nodes registered again and still serve.
    wait_routed(&fe);
}

#[test]
fn a_drained_node_loses_nothing() {
    let Some(etcd) = Etcd::start() else { return };
    let (a, mut b) = (Node::start(&etcd, "a"), Node::start(&etcd, "b"));
    let fe = front(&etcd);
    wait_routed(&fe);
    let r = load_while(&fe, 3.0, 3000.0, || {
        std::thread::sleep(Duration::from_millis(1000));
        b.signal(libc::SIGTERM);
    });
    // b left etcd first, answered what it held, then stopped: nothing failed.
    assert_all_answered(&r);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let st = b.child.wait().unwrap();
    assert!(st.success(), "the drained node exits cleanly: {st:?}");
    assert!(a.answered() > r.sent / 2);
}

/// Nodes and front end polling: the front end connects by each node's UCX worker address
/// (shared memory where both share a machine), asks the node for a ring and writes its
/// request batches there one-sided (Lynx's design), offers the node a ring of its own that
/// the node writes its answers into, and serves as through the listener. With a cluster key
/// the rings' batches are sealed as messages are; a second front end given
/// `--cluster-no-rings` sends every batch as a message and gets its answers so, beside it on
/// the same node.
#[test]
fn polling_roles_write_batches_into_the_nodes_rings_and_serve() {
    let d = Scratch::new("cluster-rings");
    let key = d.path("cluster.key");
    std::fs::write(&key, "33".repeat(32)).unwrap();
    let Some(etcd) = Etcd::start() else { return };
    let _a = Node::start_with(&etcd, "a", &["--cluster-busy-poll", "--cluster-key", &key]);
    let rings = front_with(&etcd, &["--cluster-busy-poll", "--cluster-key", &key]);
    let plain = front_with(
        &etcd,
        &[
            "--cluster-busy-poll",
            "--cluster-key",
            &key,
            "--cluster-no-rings",
        ],
    );
    for (fe, with_rings) in [(&rings, true), (&plain, false)] {
        wait_routed(fe);
        let r = udp_load(fe, 2000.0, 1.0);
        assert_all_answered(&r);
        assert!(r.errors.is_empty() && r.ok > 1000, "{r:#?}");
        let m = http_get(fe.http.unwrap(), "/metrics");
        let written = metric(&m, "cohort_cluster_ring_writes_total{node=\"a\"}");
        let messages = metric(&m, "cohort_cluster_messages_sent_total{node=\"a\"}");
        let answered = metric(&m, "cohort_cluster_ring_answers_total{node=\"a\"}");
        if with_rings {
            // The first batches may go as messages, before the offers come. At this rate
            // a batch holds a request or two, and so does its answers' batch. A lane kept
            // off its core (2 cores, several polling processes) lets its answer ring fill,
            // and the node then sends messages: most answers, not all, come by the ring.
            assert!(
                written > 0.9 * messages,
                "{written} of {messages} batches through the ring"
            );
            assert!(
                answered > 0.5 * written,
                "{answered} answer batches through the ring, for {written} request batches"
            );
        } else {
            assert_eq!(written + answered, 0.0, "no ring asked for nor offered");
        }
    }
}

/// A polling node killed (SIGKILL) while the front end writes into its ring: polled
/// connections report no failure, so the node leaves routing by its lease; every request
/// is answered (by the other node, retried, or an error), none twice, and the front end's
/// writes into a dead node's ring do not take it down.
#[test]
fn a_killed_node_with_a_ring_loses_nothing() {
    let Some(etcd) = Etcd::start() else { return };
    let poll = ["--cluster-busy-poll"];
    let (a, mut b) = (
        Node::start_with(&etcd, "a", &poll),
        Node::start_with(&etcd, "b", &poll),
    );
    let fe = front_with(&etcd, &poll);
    wait_routed(&fe);
    let before = a.answered();
    let r = load_while(&fe, 6.0, 2000.0, || {
        std::thread::sleep(Duration::from_millis(1000));
        b.child.kill().unwrap();
    });
    assert_served_past_a_lost_node(&fe, &r, a.answered() - before);
    let m = http_get(fe.http.unwrap(), "/metrics");
    assert!(metric(&m, "cohort_cluster_ring_writes_total{node=\"a\"}") > 0.0);
    b.child.wait().ok();
}

/// A polling front end killed (SIGKILL) while a node writes answers into its ring: the
/// node's writes into a dead process fail without taking the node down, and a second front
/// end on the same node is served throughout, every request answered once.
#[test]
fn a_killed_front_end_with_an_answer_ring_leaves_the_node_serving() {
    let Some(etcd) = Etcd::start() else { return };
    let poll = ["--cluster-busy-poll"];
    let mut a = Node::start_with(&etcd, "a", &poll);
    let mut doomed = front_with(&etcd, &poll);
    let kept = front_with(&etcd, &poll);
    wait_routed(&doomed);
    wait_routed(&kept);
    let target = Target::Tcp(doomed.tcp.unwrap());
    let doomed_load = std::thread::spawn(move || poisson(target, 4000.0, 3.0));
    let r = load_while(&kept, 4.0, 2000.0, || {
        std::thread::sleep(Duration::from_millis(1000));
        doomed.child.kill().unwrap();
    });
    assert_all_answered(&r);
    assert!(r.errors.is_empty() && r.ok > 4000, "{r:#?}");
    let m = http_get(kept.http.unwrap(), "/metrics");
    assert!(metric(&m, "cohort_cluster_ring_answers_total{node=\"a\"}") > 0.0);
    // The killed one's load lost its server: no claim on its answers.
    doomed_load.join().unwrap();
    doomed.child.wait().ok();
    assert!(a.child.try_wait().unwrap().is_none(), "the node still runs");
    assert!(
        http_ok(a.admin, "/metrics"),
        "the node still serves its admin port"
    );
}

/// The body of an HTTP answer (status line checked: 200).
fn http_body(answer: &str) -> &str {
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer.split_once("\r\n\r\n").expect("a body").1
}

/// The index split over two nodes (`--index-shard 0/2`, `1/2`; cpu engines) behind a front
/// end gives every query the whole index's answer, byte for byte beside a plain `serve` of
/// the whole index, and its recall under load; with a second node of shard 0, the first
/// killed under load loses nothing (its part is retried on the other).
#[test]
fn a_knn_index_sharded_over_two_nodes_answers_as_the_whole_index() {
    let d = Scratch::new("cluster-knn");
    let f = knn_files(&d);
    // Only a node serves a shard: `serve` (a front end, or alone) answers from the whole.
    let o = cohort(&[
        "serve",
        "--udp",
        "127.0.0.1:0",
        "--service",
        "knn",
        "--index",
        &f.index,
        "--index-shard",
        "0/2",
        "--check-config",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("cohort node"), "{err}");
    let Some(etcd) = Etcd::start() else { return };
    let shard = |id: &str, which: &str| {
        Node::start_with(
            &etcd,
            id,
            &[
                "--service",
                "knn",
                "--index",
                &f.index,
                "--index-shard",
                which,
            ],
        )
    };
    let (mut s0, s1) = (shard("s0", "0/2"), shard("s1", "1/2"));
    let url = etcd.url();
    let fe = Served::start(&["--cluster", &url, "--service", "knn", "--index", &f.index]);
    let whole = Served::start(&["--service", "knn:cpu", "--index", &f.index]);
    let queries = cohort_ivf::vecfile::read_vectors(std::path::Path::new(&f.queries)).unwrap();
    let ask = |at: &Served, i: usize| {
        let body = serde_json::json!({ "vector": queries.row(i), "k": 10, "nprobe": 4 });
        http_post(at.http.unwrap(), "/v1/knn", &body.to_string())
    };
    // Until the front end knows both shards' nodes.
    let until = Instant::now() + Duration::from_secs(20);
    while !ask(&fe, 0).starts_with("HTTP/1.1 200") {
        assert!(
            Instant::now() < until,
            "the front end never routed: {}",
            ask(&fe, 0)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in 0..60 {
        let (split, one) = (ask(&fe, i), ask(&whole, i));
        assert_eq!(http_body(&split), http_body(&one), "query {i}");
    }
    assert!(
        s0.answered() >= 60 && s1.answered() >= 60,
        "both shards answer every query"
    );
    let m = http_get(fe.http.unwrap(), "/metrics");
    for node in ["s0", "s1"] {
        let parts = metric(
            &m,
            &format!("cohort_cluster_parts_sent_total{{node=\"{node}\"}}"),
        );
        assert!(parts >= 60.0, "{node}: {parts} parts sent");
    }
    // Under load, checked, the recall of the whole index. Over TCP: over UDP this step failed
    // now and then on a loaded 2-core machine (ok < sent), and a datagram the kernel drops is
    // a request no server saw; over TCP every request reaches the server, whose answers are
    // what this checks.
    let recall = |at: &Served| {
        let target = format!("tcp://{}", at.tcp.unwrap());
        let r = cohort_load_report(
            &target,
            "knn",
            &[
                "--queries",
                &f.queries,
                "--gt",
                &f.gt,
                "--k",
                "10",
                "--nprobe",
                "4",
                "--rate",
                "2000",
                "--duration",
                "1",
                "--warmup",
                "0.2",
            ],
        );
        assert_eq!(r["ok"].as_u64(), r["sent"].as_u64(), "{r}");
        r["recall_at_k"].as_f64().unwrap()
    };
    let (split, one) = (recall(&fe), recall(&whole));
    assert!((split - one).abs() < 0.01, "split {split}, whole {one}");
    // A second node of shard 0; the first killed mid-load.
    let s0b = shard("s0b", "0/2");
    let until = Instant::now() + Duration::from_secs(20);
    while s0b.answered() == 0 {
        assert!(
            Instant::now() < until,
            "the second node of shard 0 never took traffic"
        );
        ask(&fe, 1);
    }
    let gt = cohort_ivf::vecfile::read_ivecs(std::path::Path::new(&f.gt)).unwrap();
    let w = std::sync::Arc::new(cohort_services::knn::load::KnnWorkload::new(
        queries,
        Some((gt.1, gt.2)),
        10,
        4,
    ));
    let target = Target::Tcp(fe.tcp.unwrap());
    let mode = Mode::Open {
        rate: 1000.0,
        poisson: true,
    };
    let run = std::thread::spawn(move || load_over(target, mode, 3.0, w, 2));
    std::thread::sleep(Duration::from_millis(1200));
    s0.child.kill().unwrap();
    let r = run.join().unwrap();
    assert_all_answered(&r);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(r.ok > 1500, "{r:#?}");
    s0.child.wait().ok();
}

/// A TCP port that accepts connections and never says anything (held open until the test
/// ends), or (`garbage`) writes random bytes on each, over and over.
fn stranger(garbage: bool) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            if garbage {
                let mut c = c.try_clone().unwrap();
                std::thread::spawn(move || {
                    use std::io::Write;
                    let mut x = 0x9e37_79b9_7f4a_7c15u64;
                    let mut buf = [0u8; 512];
                    loop {
                        for b in buf.iter_mut() {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            *b = x as u8;
                        }
                        if c.write_all(&buf).is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                });
            }
            held.push(c);
        }
    });
    addr
}

/// A node stopped and started again at once on the same `--node-listen` port (issue 84: it
/// failed "Address already in use" for about 60 s, its last connections in TIME_WAIT): it
/// binds at once and the front end serves from it again.
#[test]
fn a_node_restarted_on_its_port_at_once_serves() {
    let Some(etcd) = Etcd::start() else { return };
    let listen = format!("127.0.0.1:{}", free_port());
    let fe = front(&etcd);
    // A socket of the node's port left behind by its process (TIME_WAIT, FIN_WAIT, LAST_ACK:
    // any state but LISTEN) is what made a restart fail. The node's side is left so when
    // the node closes first: killed, its kernel closes its sockets before the front end
    // learns anything (stopped by SIGTERM it leaves etcd first and the front end may close
    // first). Each round serves, kills the node and restarts it on the port at once (what
    // is tested), until a kill left such a socket (what the restart must bind past).
    let mut a = Node::launch(&etcd.url(), "a", &listen, &[]);
    let mut rounds = 0;
    loop {
        wait_routed(&fe);
        assert!(udp_load(&fe, 2000.0, 0.5).ok > 0);
        a.signal(libc::SIGKILL);
        let _ = a.child.wait();
        let port = a.listen.port();
        let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let left = tcp
            .lines()
            .skip(1)
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f[1].ends_with(&format!(":{port:04X}")) && f[3] != "0A"
            })
            .count();
        rounds += 1;
        if left > 0 {
            break;
        }
        assert!(
            rounds < 8,
            "no socket of port {port} left after {rounds} kills: the test shows nothing"
        );
        let next = Node::launch(&etcd.url(), "a", &listen, &[]);
        assert_eq!(next.listen, a.listen);
        a = next;
    }
    let again = Node::launch(&etcd.url(), "a", &listen, &[]);
    assert_eq!(again.listen, a.listen);
    wait_routed(&fe);
    let r = udp_load(&fe, 2000.0, 1.0);
    assert_all_answered(&r);
    assert!(r.errors.is_empty() && r.ok > 1000, "{r:#?}");
}

/// etcd with authentication on (etcd's `auth enable`): a node and a front end given
/// `--etcd-user` and `--etcd-password-file` register and serve; a front end without them
/// learns no node. The flags' misuses are refused at the command line.
#[test]
fn etcd_with_auth_serves_roles_given_its_user_only() {
    let d = Scratch::new("cluster-etcd-auth");
    let pw = d.path("root.pw");
    std::fs::write(&pw, "a-root-password\n").unwrap();
    let check = |extra: &[&str]| {
        let mut args = vec!["serve", "--udp", "127.0.0.1:0", "--service", "echo"];
        args.extend_from_slice(extra);
        args.push("--check-config");
        cohort(&args)
    };
    let cluster = ["--cluster", "etcd://127.0.0.1:2379"];
    assert!(!check(&[&cluster[..], &["--etcd-user", "root"]].concat())
        .status
        .success());
    let o = check(
        &[
            &cluster[..],
            &[
                "--etcd-user",
                "root",
                "--etcd-password-file",
                "/nonexistent",
            ],
        ]
        .concat(),
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--etcd-password-file /nonexistent"));
    let o = check(&["--etcd-user", "root", "--etcd-password-file", &pw]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("need --cluster"),
        "{o:?}"
    );
    assert!(check(
        &[
            &cluster[..],
            &["--etcd-user", "root", "--etcd-password-file", &pw]
        ]
        .concat()
    )
    .status
    .success());
    let Some(etcd) = Etcd::start() else { return };
    etcd.api("/v3/auth/role/add", serde_json::json!({ "name": "root" }));
    etcd.api(
        "/v3/auth/user/add",
        serde_json::json!({ "name": "root", "password": "a-root-password" }),
    );
    etcd.api(
        "/v3/auth/user/grant",
        serde_json::json!({ "user": "root", "role": "root" }),
    );
    etcd.api("/v3/auth/enable", serde_json::json!({}));
    let user = ["--etcd-user", "root", "--etcd-password-file", &pw];
    let a = Node::start_with(&etcd, "a", &user);
    let fe = front_with(&etcd, &user);
    wait_routed(&fe);
    let stranger = front(&etcd);
    std::thread::sleep(Duration::from_millis(500));
    let r = udp_load(&stranger, 1000.0, 1.0);
    assert_all_answered(&r);
    assert_eq!(
        r.ok, 0,
        "a front end without etcd's user found a node: {r:#?}"
    );
    let r = udp_load(&fe, 2000.0, 1.0);
    assert_all_answered(&r);
    assert!(r.errors.is_empty() && r.ok > 1000, "{r:#?}");
    assert!(a.answered() > 1000);
}
