//! The cluster key (`cluster.rs`): it seals the link, a node without it runs nothing, and a
//! node with another says so.

use super::*;

/// With a cluster key, front end and node seal every message and serve as without; a node
/// holding another key, or none, runs nothing a front end sends it, and the front end
/// answers every request itself. The key's misuses are refused at the command line.
#[test]
fn a_cluster_key_seals_the_link_and_a_node_without_it_runs_nothing() {
    let d = Scratch::new("cluster-key");
    let (good, other, short) = (d.path("good.key"), d.path("other.key"), d.path("short.key"));
    std::fs::write(&good, "11".repeat(32)).unwrap();
    std::fs::write(&other, "22".repeat(32)).unwrap();
    std::fs::write(&short, "tiny").unwrap();
    let check = |extra: &[&str]| {
        let mut args = vec!["serve", "--udp", "127.0.0.1:0", "--service", "echo"];
        args.extend_from_slice(extra);
        args.push("--check-config");
        let o = cohort(&args);
        assert!(!o.status.success(), "{extra:?} accepted");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(check(&["--cluster-key", &good]).contains("needs --cluster"));
    let cluster = ["--cluster", "etcd://127.0.0.1:2379"];
    assert!(check(&[&cluster[..], &["--cluster-key", &short]].concat()).contains("at least 16"));
    let Some(etcd) = Etcd::start() else { return };
    let mut a = Node::start_with(&etcd, "a", &["--cluster-key", &good]);
    let fe = front_with(&etcd, &["--cluster-key", &good]);
    wait_routed(&fe);
    let r = udp_load(&fe, 2000.0, 1.0);
    assert_all_answered(&r);
    assert!(r.errors.is_empty() && r.ok > 1000, "{r:#?}");
    // Only nodes without the key are left.
    let (b, c) = (
        Node::start_with(&etcd, "b", &["--cluster-key", &other]),
        Node::start(&etcd, "c"),
    );
    a.signal(libc::SIGTERM);
    a.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let r = udp_load(&fe, 1000.0, 1.5);
    assert_all_answered(&r);
    assert_eq!(r.ok, 0, "{r:#?}");
    assert!(
        r.errors
            .keys()
            .all(|k| k == "UNAVAILABLE" || k == "TIMEOUT"),
        "{:?}",
        r.errors
    );
    assert_eq!((b.answered(), c.answered()), (0, 0), "a node ran a request");
}

/// A node holding another cluster key (or none) tells the front end why it closes the
/// connection, and the front end says so, naming the node and the key, where it used to log
/// only "Connection reset by remote peer".
#[test]
fn a_node_with_another_key_says_so_and_the_front_end_logs_it() {
    let d = Scratch::new("cluster-refusal");
    let (good, other) = (d.path("good.key"), d.path("other.key"));
    std::fs::write(&good, "11".repeat(32)).unwrap();
    std::fs::write(&other, "22".repeat(32)).unwrap();
    let Some(etcd) = Etcd::start() else { return };
    let _b = Node::start_with(&etcd, "b", &["--cluster-key", &other]);
    let log = d.path("front.log");
    let url = etcd.url();
    let fe = Served::start_with(
        &[
            "--cluster",
            &url,
            "--service",
            "echo",
            "--cluster-key",
            &good,
        ],
        |c| {
            c.stderr(std::fs::File::create(&log).unwrap());
        },
    );
    // Requests until the front end has found the node in etcd and been refused by it.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let r = udp_load(&fe, 500.0, 0.3);
        assert_all_answered(&r);
        assert_eq!(r.ok, 0, "{r:#?}");
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("the node refused this front end's messages") {
            assert!(
                text.contains("--cluster-key") && text.contains("node=b"),
                "{text}"
            );
            break;
        }
        assert!(Instant::now() < until, "no refusal logged: {text}");
    }
}
