//! `/metrics` in the Prometheus text format.

use cohort_engine::{Dispatcher, EngineMetrics};
use cohort_net::NetStats;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

fn counter(out: &mut String, name: &str, help: &str, samples: &[(&str, &AtomicU64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{labels} {}", v.load(Ordering::Relaxed));
    }
}

fn seconds(out: &mut String, name: &str, help: &str, ns: &AtomicU64) {
    let v = ns.load(Ordering::Relaxed) as f64 / 1e9;
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

pub fn render_metrics(net: &NetStats, e: &EngineMetrics, d: &Dispatcher) -> String {
    let mut o = String::new();
    counter(
        &mut o,
        "cohort_requests_total",
        "Requests executed by the engine, by outcome.",
        &[
            ("{outcome=\"ok\"}", &e.ok),
            ("{outcome=\"bad_request\"}", &e.bad_request),
            ("{outcome=\"timeout\"}", &e.timeout),
            ("{outcome=\"internal\"}", &e.internal),
        ],
    );
    seconds(
        &mut o,
        "cohort_queue_wait_seconds_total",
        "Time requests spent queued before execution.",
        &e.queue_wait_ns,
    );
    seconds(
        &mut o,
        "cohort_compute_seconds_total",
        "Time spent executing requests.",
        &e.compute_ns,
    );
    let _ = writeln!(
        o,
        "# HELP cohort_queue_depth Requests waiting in engine queues."
    );
    let _ = writeln!(
        o,
        "# TYPE cohort_queue_depth gauge\ncohort_queue_depth {}",
        d.queued()
    );
    counter(
        &mut o,
        "cohort_udp_datagrams_total",
        "UDP datagrams by direction.",
        &[
            ("{direction=\"rx\"}", &net.udp_rx),
            ("{direction=\"tx\"}", &net.udp_tx),
        ],
    );
    counter(
        &mut o,
        "cohort_udp_dropped_total",
        "UDP datagrams dropped, by reason.",
        &[
            ("{reason=\"not_cohort\"}", &net.udp_dropped_foreign),
            ("{reason=\"send_failed\"}", &net.udp_send_failed),
        ],
    );
    counter(
        &mut o,
        "cohort_overloaded_total",
        "Requests refused with OVERLOADED, by where.",
        &[
            ("{at=\"client_table\"}", &net.table_full),
            ("{at=\"engine_queue\"}", d.overloaded_counter()),
        ],
    );
    counter(
        &mut o,
        "cohort_tcp_connections_total",
        "TCP connections accepted.",
        &[("", &net.tcp_connections)],
    );
    counter(
        &mut o,
        "cohort_tcp_frames_total",
        "Frames read from TCP connections.",
        &[("", &net.tcp_frames)],
    );
    counter(
        &mut o,
        "cohort_tcp_protocol_errors_total",
        "TCP connections closed for bad framing.",
        &[("", &net.tcp_protocol_errors)],
    );
    counter(
        &mut o,
        "cohort_http_requests_total",
        "HTTP requests received.",
        &[("", &net.http_requests)],
    );
    o
}
