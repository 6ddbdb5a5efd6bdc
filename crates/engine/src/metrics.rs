//! Server metrics in Prometheus form (prometheus-client). One `Metrics` per server, shared
//! by the listeners, the dispatcher and the engines; `/metrics` encodes it. Names and labels
//! are documented in docs/metrics.md.

use crate::sharded::{ShardedCounter, ShardedHistogram};
use cohort_proto::ErrorCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub service: String,
    pub engine: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub service: String,
    pub engine: String,
    pub reason: String,
}

/// Why a request was refused OVERLOADED rather than queued: the `reason` label of
/// `cohort_requests_refused_total`, and the first word of the refusal's message
/// (`queue: engine queue full`), so a client and a dashboard read the same reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// The engine's queue (its rings, or its `max_queue` bound) is full.
    Queue,
    /// The client is over its quota (`--client-max-inflight`, `--client-rate`).
    Quota,
    /// The engine would answer after the request's deadline (admission by deadline).
    Deadline,
    /// The io thread is full: its table of requests in flight, or it is behind its
    /// arrivals (its backlog has stayed over its bound: `cohort_net`'s `behind`).
    Ingress,
    /// A cluster front end: every node serving the service is at its window.
    Nodes,
    /// The byte budget (`--max-buffered-bytes`) is spent and the client's connection holds
    /// answers it has not taken.
    Budget,
}

impl Shed {
    pub const ALL: [Shed; 6] = [
        Shed::Queue,
        Shed::Quota,
        Shed::Deadline,
        Shed::Ingress,
        Shed::Nodes,
        Shed::Budget,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Shed::Queue => "queue",
            Shed::Quota => "quota",
            Shed::Deadline => "deadline",
            Shed::Ingress => "ingress",
            Shed::Nodes => "nodes",
            Shed::Budget => "budget",
        }
    }

    /// The OVERLOADED refusal, its message `REASON: DETAIL`.
    pub fn error(self, detail: &str) -> cohort_proto::ErrorPayload {
        cohort_proto::ErrorPayload::new(
            ErrorCode::Overloaded,
            format!("{}: {detail}", self.label()),
        )
    }

    /// The reason an OVERLOADED refusal's message names (its first word), if any.
    pub fn of_message(message: &str) -> Option<Shed> {
        let (word, _) = message.split_once(": ")?;
        Shed::ALL.into_iter().find(|s| s.label() == word)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    pub service: String,
    pub engine: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub engine: String,
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineLabels {
    pub engine: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IngressLabels {
    pub ingress: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    pub direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    pub path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabels {
    pub gpu: String,
}

/// A choice a service made from its settings and data (knn's GPU precision under `auto`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChoiceLabels {
    pub service: String,
    pub setting: String,
    pub value: String,
}

fn seconds_histogram() -> ShardedHistogram {
    // 1 us .. ~16 s.
    ShardedHistogram::new(exponential_buckets(1e-6, 2.0, 25))
}

/// Metric handles resolved once for the label sets every request touches, so answering a
/// request costs no label allocation or family lookup (hundreds of thousands a second).
struct HotHandles {
    services: HashMap<u16, ServiceHandles>,
    /// Per (engine, stage name) the engines report: (queue wait, compute).
    stages: Vec<(String, &'static str, ShardedHistogram, ShardedHistogram)>,
}

/// A known service's duration histogram, one request counter per outcome label, and one
/// refusal counter per [`Shed`] reason (in `Shed::ALL`'s order).
type ServiceHandles = (
    ShardedHistogram,
    Vec<(&'static str, ShardedCounter)>,
    Vec<ShardedCounter>,
);

/// One (engine, stage)'s queue-wait and compute histograms (`Metrics::stage_hists`).
pub struct StageHists(ShardedHistogram, ShardedHistogram);

impl StageHists {
    pub fn observe(&self, wait: Duration, compute: Duration) {
        self.0.observe(wait.as_secs_f64());
        self.1.observe(compute.as_secs_f64());
    }
}

/// The stage an engine reports, by its name: the GPU engines' "gpu", the others' "execute".
/// Only that stage's series are made up front (a cpu engine exported an empty
/// `stage="gpu"` series when every engine got both); another stage an engine reports still
/// works, through the family lookup.
fn hot_stage(engine: &str) -> &'static str {
    if engine.starts_with("gpu") {
        "gpu"
    } else {
        "execute"
    }
}

/// A service as the metrics label it: its name and the engine that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceLabel {
    pub name: String,
    pub engine: String,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    services: HashMap<u16, ServiceLabel>,
    hot: HotHandles,
    // Touched by every request on every lane and ingress thread: per-thread shards.
    pub requests: Family<OutcomeLabels, ShardedCounter>,
    /// Requests refused OVERLOADED, by service and [`Shed`] reason.
    pub refused: Family<RefusedLabels, ShardedCounter>,
    pub request_duration: Family<ServiceLabels, ShardedHistogram, fn() -> ShardedHistogram>,
    pub queue_wait: Family<StageLabels, ShardedHistogram, fn() -> ShardedHistogram>,
    pub compute: Family<StageLabels, ShardedHistogram, fn() -> ShardedHistogram>,
    pub cohort_size: Family<EngineLabels, ShardedHistogram, fn() -> ShardedHistogram>,
    pub in_flight: Family<IngressLabels, Gauge>,
    pub datagrams: Family<DirectionLabels, Counter>,
    pub dropped_datagrams: Family<ReasonLabels, Counter>,
    /// UDP io threads by how they drive their socket (recvmmsg or io_uring).
    pub udp_io_threads: Family<PathLabels, Gauge>,
    pub tcp_connections: Counter,
    pub tcp_protocol_errors: Counter,
    /// TCP and HTTP connections open now.
    pub connections_open: Gauge,
    /// Connections refused at accept (the cap, the process's descriptor limit), by reason.
    pub connections_refused: Family<ReasonLabels, Counter>,
    /// Connections the server closed for a timeout (idle, slow request, stalled reader).
    pub connections_timed_out: Family<ReasonLabels, Counter>,
    /// Bytes of requests and answers held for TCP/HTTP connections now (the budget
    /// `--max-buffered-bytes` bounds: reading stops while it is over).
    pub buffered_bytes: Gauge,
    pub http_requests: ShardedCounter,
    pub gpu_memory_used: Family<GpuLabels, Gauge>,
    /// 1 for each choice a service made at start (`setting` took `value`).
    pub service_choice: Family<ChoiceLabels, Gauge>,
    /// Board power now (W) and energy since the server started (J), per GPU the driver sees;
    /// updated when `/metrics` is read (`record_gpu_power`).
    pub gpu_power: Family<BoardLabels, Gauge<f64, AtomicU64>>,
    pub gpu_energy: Family<BoardLabels, Counter<f64, AtomicU64>>,
    /// Fraction of the driver's last sample period with a kernel running, per board.
    pub gpu_utilization: Family<BoardLabels, Gauge<f64, AtomicU64>>,
}

/// One board's reading when `/metrics` is read.
#[derive(Clone, Debug)]
pub struct GpuBoardReading {
    /// NVML's index (PCI order, not necessarily the CUDA ordinal).
    pub gpu: u32,
    pub uuid: String,
    pub watts: f64,
    /// 0 to 1, where the board reports it.
    pub utilization: Option<f64>,
    pub joules_since_last: f64,
}

/// A GPU board as NVML names it (its index is PCI order, not necessarily the CUDA ordinal).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BoardLabels {
    pub gpu: String,
    pub gpu_uuid: String,
}

impl Metrics {
    /// `services` maps wire ids to the `service` and `engine` labels.
    pub fn new(services: HashMap<u16, ServiceLabel>) -> Metrics {
        let mut r = Registry::default();
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            services,
            hot: HotHandles {
                services: HashMap::new(),
                stages: Vec::new(),
            },
            requests: Family::default(),
            refused: Family::default(),
            request_duration: Family::new_with_constructor(seconds_histogram),
            queue_wait: Family::new_with_constructor(seconds_histogram),
            compute: Family::new_with_constructor(seconds_histogram),
            cohort_size: Family::new_with_constructor(|| {
                ShardedHistogram::new(exponential_buckets(1.0, 2.0, 14))
            }),
            in_flight: Family::default(),
            datagrams: Family::default(),
            dropped_datagrams: Family::default(),
            udp_io_threads: Family::default(),
            tcp_connections: Counter::default(),
            tcp_protocol_errors: Counter::default(),
            connections_open: Gauge::default(),
            connections_refused: Family::default(),
            connections_timed_out: Family::default(),
            buffered_bytes: Gauge::default(),
            http_requests: ShardedCounter::default(),
            gpu_memory_used: Family::default(),
            service_choice: Family::default(),
            gpu_power: Family::default(),
            gpu_energy: Family::default(),
            gpu_utilization: Family::default(),
        };
        r.register(
            "cohort_requests",
            "Requests answered, by service, engine and outcome",
            m.requests.clone(),
        );
        r.register(
            "cohort_requests_refused",
            "Requests refused OVERLOADED rather than queued, by service and reason (queue, quota, deadline, ingress, nodes)",
            m.refused.clone(),
        );
        r.register(
            "cohort_request_duration_seconds",
            "Arrival to answer, every outcome",
            m.request_duration.clone(),
        );
        r.register(
            "cohort_queue_wait_seconds",
            "Time queued before a stage ran",
            m.queue_wait.clone(),
        );
        r.register(
            "cohort_compute_seconds",
            "Time a stage computed",
            m.compute.clone(),
        );
        r.register(
            "cohort_cohort_size",
            "Requests per cohort (batch) an engine ran together",
            m.cohort_size.clone(),
        );
        r.register(
            "cohort_in_flight",
            "Requests admitted by an ingress and not yet answered",
            m.in_flight.clone(),
        );
        r.register(
            "cohort_udp_datagrams",
            "UDP datagrams by direction",
            m.datagrams.clone(),
        );
        r.register(
            "cohort_udp_dropped",
            "UDP datagrams dropped unanswered, by reason",
            m.dropped_datagrams.clone(),
        );
        r.register(
            "cohort_udp_io_threads",
            "UDP io threads by socket path (recvmmsg or io_uring)",
            m.udp_io_threads.clone(),
        );
        r.register(
            "cohort_tcp_connections",
            "TCP connections accepted",
            m.tcp_connections.clone(),
        );
        r.register(
            "cohort_tcp_protocol_errors",
            "TCP connections closed for bad framing",
            m.tcp_protocol_errors.clone(),
        );
        r.register(
            "cohort_connections_open",
            "TCP and HTTP connections open",
            m.connections_open.clone(),
        );
        r.register(
            "cohort_connections_refused",
            "Connections refused at accept, by reason (max_connections, fd_limit)",
            m.connections_refused.clone(),
        );
        r.register(
            "cohort_connections_timed_out",
            "Connections closed by the server for a timeout, by reason",
            m.connections_timed_out.clone(),
        );
        r.register(
            "cohort_buffered_bytes",
            "Bytes of requests and answers held for TCP/HTTP connections",
            m.buffered_bytes.clone(),
        );
        r.register(
            "cohort_http_requests",
            "HTTP requests received",
            m.http_requests.clone(),
        );
        r.register(
            "cohort_gpu_memory_used_bytes",
            "GPU memory held by the engines",
            m.gpu_memory_used.clone(),
        );
        r.register(
            "cohort_service_choice",
            "1 for each value a service chose for a setting left to it (knn: precision)",
            m.service_choice.clone(),
        );
        // Triton's names, so existing GPU dashboards read them unchanged.
        r.register(
            "nv_gpu_power_usage",
            "GPU board power in watts (NVML)",
            m.gpu_power.clone(),
        );
        r.register(
            "nv_energy_consumption",
            "GPU board energy in joules since the server started (NVML)",
            m.gpu_energy.clone(),
        );
        r.register(
            "nv_gpu_utilization",
            "GPU utilization rate, 0 to 1 (NVML: the fraction of its last sample period with a kernel running)",
            m.gpu_utilization.clone(),
        );
        *m.registry.lock().expect("registry lock") = r;
        let mut m = m;
        m.hot = m.resolve_hot();
        m
    }

    /// Records that `service` chose `value` for `setting` (exported as 1).
    pub fn record_choice(&self, service: &str, setting: &str, value: &str) {
        self.service_choice
            .get_or_create(&ChoiceLabels {
                service: service.into(),
                setting: setting.into(),
                value: value.into(),
            })
            .set(1);
    }

    /// Sets a board's power (and utilization, where it reports one) now and adds the energy
    /// it drew since the last reading.
    pub fn record_gpu_board(&self, board: &GpuBoardReading) {
        let l = BoardLabels {
            gpu: board.gpu.to_string(),
            gpu_uuid: board.uuid.clone(),
        };
        self.gpu_power.get_or_create(&l).set(board.watts);
        if let Some(u) = board.utilization {
            self.gpu_utilization.get_or_create(&l).set(u);
        }
        if board.joules_since_last > 0.0 {
            self.gpu_energy
                .get_or_create(&l)
                .inc_by(board.joules_since_last);
        }
    }

    fn resolve_hot(&self) -> HotHandles {
        let outcomes = std::iter::once("ok").chain(ErrorCode::ALL.iter().map(|c| c.label()));
        let services = self
            .services
            .iter()
            .map(|(&id, s)| {
                let counters = outcomes
                    .clone()
                    .map(|o| {
                        let l = OutcomeLabels {
                            service: s.name.clone(),
                            engine: s.engine.clone(),
                            outcome: o.into(),
                        };
                        (o, self.requests.get_or_create(&l).clone())
                    })
                    .collect();
                let refused = Shed::ALL
                    .iter()
                    .map(|r| {
                        let l = RefusedLabels {
                            service: s.name.clone(),
                            engine: s.engine.clone(),
                            reason: r.label().into(),
                        };
                        self.refused.get_or_create(&l).clone()
                    })
                    .collect();
                let l = ServiceLabels {
                    service: s.name.clone(),
                    engine: s.engine.clone(),
                };
                (
                    id,
                    (
                        self.request_duration.get_or_create(&l).clone(),
                        counters,
                        refused,
                    ),
                )
            })
            .collect();
        let mut engines: Vec<&String> = self.services.values().map(|s| &s.engine).collect();
        engines.sort();
        engines.dedup();
        let stages = engines
            .into_iter()
            .map(|e| (e, hot_stage(e)))
            .map(|(e, st)| {
                let l = StageLabels {
                    engine: e.clone(),
                    stage: st.into(),
                };
                (
                    e.clone(),
                    st,
                    self.queue_wait.get_or_create(&l).clone(),
                    self.compute.get_or_create(&l).clone(),
                )
            })
            .collect();
        HotHandles { services, stages }
    }

    fn service_label(&self, id: u16) -> ServiceLabel {
        self.services.get(&id).cloned().unwrap_or(ServiceLabel {
            name: "unknown".into(),
            engine: "none".into(),
        })
    }

    /// Records one answer (called exactly once per request, from `Request`).
    pub fn answered(&self, service: u16, outcome: &str, elapsed: Duration) {
        if let Some((duration, counters, _)) = self.hot.services.get(&service) {
            if let Some((_, c)) = counters.iter().find(|(o, _)| *o == outcome) {
                c.inc();
                duration.observe(elapsed.as_secs_f64());
                return;
            }
        }
        let ServiceLabel {
            name: service,
            engine,
        } = self.service_label(service);
        self.requests
            .get_or_create(&OutcomeLabels {
                service: service.clone(),
                engine: engine.clone(),
                outcome: outcome.into(),
            })
            .inc();
        self.request_duration
            .get_or_create(&ServiceLabels { service, engine })
            .observe(elapsed.as_secs_f64());
    }

    /// One request refused OVERLOADED for `why` (beside its answer, counted by `answered`).
    pub fn refused(&self, service: u16, why: Shed) {
        if let Some((_, _, refused)) = self.hot.services.get(&service) {
            let i = Shed::ALL.iter().position(|&s| s == why).expect("in ALL");
            refused[i].inc();
            return;
        }
        let ServiceLabel {
            name: service,
            engine,
        } = self.service_label(service);
        self.refused
            .get_or_create(&RefusedLabels {
                service,
                engine,
                reason: why.label().into(),
            })
            .inc();
    }

    /// An OVERLOADED refusal for `why` (its message `REASON: DETAIL`), counted as a refusal
    /// and as an answer.
    pub fn shed(&self, service: u16, why: Shed, detail: &str) -> cohort_proto::ErrorPayload {
        self.refused(service, why);
        self.answered(service, ErrorCode::Overloaded.label(), Duration::ZERO);
        why.error(detail)
    }

    /// One request's time queued before `stage` of `engine` ran it, and the stage's time.
    pub fn stage(&self, engine: &str, stage: &str, wait: Duration, compute: Duration) {
        self.stage_hists(engine, stage).observe(wait, compute);
    }

    /// The queue-wait and compute histograms of (`engine`, `stage`), found once for a run of
    /// observations (a batch's rows: the lookup compares the names).
    pub fn stage_hists(&self, engine: &str, stage: &str) -> StageHists {
        if let Some((_, _, w, c)) = self
            .hot
            .stages
            .iter()
            .find(|(e, s, _, _)| *s == stage && e == engine)
        {
            return StageHists(w.clone(), c.clone());
        }
        let l = StageLabels {
            engine: engine.into(),
            stage: stage.into(),
        };
        StageHists(
            self.queue_wait.get_or_create(&l).clone(),
            self.compute.get_or_create(&l).clone(),
        )
    }

    pub fn dropped(&self, reason: &str) {
        self.dropped_datagrams
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn refused_connection(&self, reason: &str) {
        self.connections_refused
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn timed_out_connection(&self, reason: &str) {
        self.connections_timed_out
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    /// One more UDP io thread drives its socket through `path`.
    pub fn udp_io_thread(&self, path: &str) {
        self.udp_io_threads
            .get_or_create(&PathLabels { path: path.into() })
            .inc();
    }

    pub fn datagrams(&self, direction: &str, n: u64) {
        self.datagrams
            .get_or_create(&DirectionLabels {
                direction: direction.into(),
            })
            .inc_by(n);
    }

    /// Requests per batch an engine launched.
    pub fn cohort(&self, engine: &str, size: usize) {
        self.cohort_size
            .get_or_create(&EngineLabels {
                engine: engine.into(),
            })
            .observe(size as f64);
    }

    pub fn set_in_flight(&self, ingress: &str, n: usize) {
        self.in_flight
            .get_or_create(&IngressLabels {
                ingress: ingress.into(),
            })
            .set(n as i64);
    }

    /// Exports a metric of a layer above the engines (a cluster front end's per-node
    /// counters) with these.
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry
            .lock()
            .expect("registry lock")
            .register(name, help, metric);
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().expect("registry lock");
        prometheus_client::encoding::text::encode(&mut out, &r).expect("writing to a String");
        out
    }
}

#[cfg(test)]
mod stage_tests {
    use super::*;

    #[test]
    fn an_engine_exports_only_the_stage_it_reports() {
        let mut services = HashMap::new();
        services.insert(
            1,
            ServiceLabel {
                name: "echo".into(),
                engine: "cpu".into(),
            },
        );
        services.insert(
            2,
            ServiceLabel {
                name: "knn".into(),
                engine: "gpu-cohort".into(),
            },
        );
        let m = Metrics::new(services);
        let text = m.encode();
        assert!(text.contains(r#"engine="cpu",stage="execute""#), "{text}");
        assert!(
            text.contains(r#"engine="gpu-cohort",stage="gpu""#),
            "{text}"
        );
        assert!(!text.contains(r#"engine="cpu",stage="gpu""#), "{text}");
        assert!(
            !text.contains(r#"engine="gpu-cohort",stage="execute""#),
            "{text}"
        );
    }

    #[test]
    fn a_choice_is_exported_as_one_under_its_value() {
        let m = Metrics::new(HashMap::new());
        assert!(!m.encode().contains("cohort_service_choice{"));
        m.record_choice("knn", "precision", "u8");
        let text = m.encode();
        assert!(
            text.contains(
                r#"cohort_service_choice{service="knn",setting="precision",value="u8"} 1"#
            ),
            "{text}"
        );
    }
}

#[cfg(test)]
mod shed_tests {
    use super::*;
    use crate::wiring::Refusal;

    #[test]
    fn refusals_name_their_reason_in_the_message_and_in_the_metrics() {
        let mut services = HashMap::new();
        services.insert(
            1,
            ServiceLabel {
                name: "knn".into(),
                engine: "gpu-cohort".into(),
            },
        );
        let m = Metrics::new(services);
        let past = Refusal::PastDeadline {
            wait_us: 900,
            budget_us: 500,
        };
        let e = past.error(1);
        assert_eq!(e.code, ErrorCode::Overloaded);
        assert!(e.message.starts_with("deadline: "), "{}", e.message);
        assert_eq!(Shed::of_message(&e.message), past.shed());
        assert_eq!(past.shed(), Some(Shed::Deadline));
        m.refused(1, past.shed().unwrap());
        let q = Refusal::QueueFull { limit: 8 }.error(1);
        assert!(
            q.message.starts_with("queue: engine queue full: 8 rows"),
            "{}",
            q.message
        );
        assert_eq!(Refusal::QueueFull { limit: 8 }.shed(), Some(Shed::Queue));
        assert_eq!(
            Refusal::RingsFull { lanes: 1, slots: 2 }.shed(),
            Some(Shed::Queue)
        );
        assert_eq!(Refusal::UnknownService.shed(), None);
        let shed = m.shed(
            1,
            Shed::Quota,
            "client over its quota of 1 requests per second",
        );
        assert_eq!(shed.code, ErrorCode::Overloaded);
        assert_eq!(Shed::of_message(&shed.message), Some(Shed::Quota));
        // An unknown service still counts, under its own labels.
        m.refused(9, Shed::Queue);
        let text = m.encode();
        for (reason, n) in [("deadline", 1), ("quota", 1), ("queue", 0), ("nodes", 0)] {
            let line = format!(
                "cohort_requests_refused_total{{service=\"knn\",engine=\"gpu-cohort\",reason=\"{reason}\"}} {n}"
            );
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(text.contains(
            "cohort_requests_refused_total{service=\"unknown\",engine=\"none\",reason=\"queue\"} 1"
        ));
        assert!(text.contains(
            "cohort_requests_total{service=\"knn\",engine=\"gpu-cohort\",outcome=\"overloaded\"} 1"
        ));
    }
}
