//! `--check-config`'s limits table: every limit a resolved [`ServerConfig`] runs under, the
//! server's then each service's, with its value and why it has it (derived: how; given: so).

use crate::engine_config::EngineKind;
use crate::server_config::ServerConfig;
use std::time::Duration;

/// One row of `--check-config`'s limits table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub name: String,
    pub value: String,
    pub why: String,
}

impl ServerConfig {
    /// Every limit the server runs under, with its value and why it has it: the server-wide
    /// ones, then each service's.
    pub fn limits(&self) -> Vec<Limit> {
        let n = &self.net;
        let s = &self.serve;
        let row = |name: &str, value: String, why: &str| Limit {
            name: name.into(),
            value,
            why: why.into(),
        };
        let ms = |d: Duration| format!("{} ms", d.as_millis());
        let mut out = vec![
            row("io threads", n.io_threads.to_string(), &s.threads.why),
            row(
                "max connections",
                n.limits.max_connections.to_string(),
                &self.net_why.max_connections,
            ),
            row(
                "max buffered bytes",
                bytes(n.limits.max_buffered_bytes),
                &self.net_why.max_buffered_bytes,
            ),
            row(
                "socket buffer bytes",
                crate::serve_serde::bytes::text(n.limits.socket_buffer_bytes),
                if n.limits.socket_buffer_bytes == 0 {
                    "0: the kernel's autotuning"
                } else {
                    "each TCP/HTTP connection's kernel send and receive buffer"
                },
            ),
            row(
                "idle timeout",
                ms(n.limits.idle_timeout),
                "an idle TCP connection is closed after this",
            ),
            row(
                "read timeout",
                ms(n.limits.read_timeout),
                "a started frame, request head or body arrives within this",
            ),
            row(
                "drain timeout",
                ms(n.drain_timeout),
                "shutdown waits this long for in-flight answers",
            ),
            row(
                "default timeout",
                format!("{} us", n.default_timeout.as_micros()),
                "the deadline of requests that carry none",
            ),
            row(
                "max deadline",
                ms(n.max_timeout),
                "a longer deadline asked for is cut to this (services may set their own)",
            ),
            row(
                "client max inflight",
                n.client_quota.max_inflight.to_string(),
                if n.client_quota.max_inflight == 0 {
                    "0: no cap"
                } else {
                    "requests in flight per client address"
                },
            ),
            row(
                "client rate",
                n.client_quota.rate.to_string(),
                if n.client_quota.rate == 0.0 {
                    "0: no limit"
                } else {
                    "requests per second per client address"
                },
            ),
            row(
                "io spin",
                format!("{} us", n.io_spin.as_micros()),
                &self.net_why.io_spin,
            ),
        ];
        if let Some(c) = &self.cluster {
            out.push(row(
                "node window",
                c.window.to_string(),
                "requests in flight to one node at most",
            ));
            if self.is_front_end() {
                out.push(row(
                    "cluster lanes",
                    c.lanes.to_string(),
                    "the front end's forwarding threads",
                ));
            }
        }
        for p in &s.plans {
            let c = &p.cfg;
            let svc = |what: &str| format!("{} {what}", p.name);
            out.push(row(
                &svc("engine"),
                c.engine.name().into(),
                if c.engine == s.defaults.engine {
                    "the server's --engine"
                } else {
                    "its own (NAME:ENGINE or its engine key)"
                },
            ));
            out.push(row(
                &svc("max queue"),
                c.admission.max_queue.to_string(),
                "requests it holds at once; one more is OVERLOADED",
            ));
            if c.admission.max_deadline_ms != s.defaults.admission.max_deadline_ms {
                out.push(row(
                    &svc("max deadline"),
                    format!("{} ms", c.admission.max_deadline_ms),
                    "its own, over the server's",
                ));
            }
            if matches!(c.engine, EngineKind::Cpu | EngineKind::Hybrid) {
                let workers = s.cpu_workers(p);
                let why = if c.cpu.workers > 0 {
                    "its workers (given)"
                } else {
                    "chosen with the io threads (above)"
                };
                out.push(row(&svc("cpu workers"), workers.to_string(), why));
                let (spin, why) = s.worker_spin_us(workers);
                out.push(row(&svc("worker spin"), format!("{spin} us"), &why));
            }
            if c.engine.is_gpu() {
                out.push(row(
                    &svc("gpus"),
                    format!("{:?}", c.gpu.gpus),
                    "the GPUs its engine runs on",
                ));
            }
            if matches!(
                c.engine,
                EngineKind::GpuCohort | EngineKind::GpuDirect | EngineKind::Hybrid
            ) {
                out.push(row(
                    &svc("max cohort"),
                    c.gpu.max_cohort.to_string(),
                    "a cohort closes at this many requests...",
                ));
                out.push(row(
                    &svc("cohort timeout"),
                    format!("{} us", c.gpu.cohort_timeout_us),
                    "...or when its first request has waited this long",
                ));
            }
            if c.engine == EngineKind::GpuPersistent {
                out.push(row(
                    &svc("gpu slots"),
                    c.persistent.gpu_slots.to_string(),
                    "slots per GPU the resident kernel serves",
                ));
            }
            if c.engine == EngineKind::Hybrid {
                out.push(row(
                    &svc("latency budget"),
                    format!("{} us", c.hybrid.latency_budget_us),
                    "what the GPUs cannot answer within this goes to the cpu workers",
                ));
            }
        }
        out
    }

    /// [`limits`](Self::limits) as `--check-config` prints it: comment lines (the printout
    /// reads back as a config file), one limit a line, aligned.
    pub fn limits_table(&self) -> String {
        let rows = self.limits();
        let name = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let value = rows.iter().map(|r| r.value.len()).max().unwrap_or(0);
        let mut out = String::from("# limits:\n");
        for r in rows {
            out.push_str(&format!(
                "#   {:name$}  {:value$}  {}\n",
                r.name, r.value, r.why
            ));
        }
        out
    }
}

/// A byte count as a config file writes it (`64M`), or in whole MiB where it is none.
fn bytes(n: usize) -> String {
    let text = crate::serve_serde::bytes::text(n);
    if text.parse::<usize>().is_ok() && n >= 1 << 20 {
        format!("{n} (~{}M)", n >> 20)
    } else {
        text
    }
}
