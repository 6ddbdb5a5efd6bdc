//! What a run measured; serialised as the `--json` output.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    /// From a histogram of nanoseconds, in microseconds.
    pub fn from_ns(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |v: u64| v as f64 / 1000.0;
        Latency {
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TypeLatency {
    pub answers: u64,
    pub errors: u64,
    pub latency_us: Latency,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub target: String,
    pub service: String,
    /// "open-constant", "open-poisson" or "closed".
    pub mode: String,
    pub offered_rate: Option<f64>,
    pub concurrency: Option<usize>,
    pub connections: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// Requests sent inside the measured window.
    pub sent: u64,
    pub ok: u64,
    /// Error answers by code name, plus `no_answer`, `wrong_answer` and `GOAWAY` (sent but not
    /// read by a server that announced shutdown).
    pub errors: BTreeMap<String, u64>,
    /// Correct answers per second over the measured window.
    pub achieved_rate: f64,
    /// Latency of correct answers from their intended send time.
    pub latency_us: Latency,
    /// Latency of every answer (errors included).
    pub latency_all_us: Latency,
    /// True when the generator could not send on schedule: then the numbers describe the
    /// generator, not the server.
    pub generator_saturated: bool,
    /// How late the generator sent, p99 and max, in microseconds.
    pub send_lag_us_p99: f64,
    pub send_lag_us_max: f64,
    /// Answers that matched no outstanding request (duplicates or after their request was
    /// given up).
    pub unexpected_answers: u64,
    /// Whether the server announced shutdown (GOAWAY) during the run.
    pub goaway: bool,
    /// GPU board and host energy over the measured window, with answers per joule
    /// (`cohort_power::EnergyReport`); absent parts say why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<serde_json::Value>,
    /// Page services: every answer's latency per request type (errors included) and the
    /// type's errors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_type: BTreeMap<String, TypeLatency>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Report {
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The reports as a table on stdout, each with its errors, then the columns' legend.
    pub fn print_table(reports: &[Report]) {
        println!("{}", Report::table_header());
        for r in reports {
            println!("{}", r.table_row());
            if !r.errors.is_empty() {
                println!("{:>10} errors: {:?}", "", r.errors);
            }
        }
        println!("({})", Report::table_legend());
    }

    pub fn table_header() -> String {
        format!(
            "{:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7}",
            "offered/s",
            "answered/s",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "errors",
            "gen_sat",
            "recall"
        )
    }

    /// What the table's columns mean, printed under it.
    pub fn table_legend() -> &'static str {
        "offered/s: requests sent per second (c=N: N in flight, closed loop); answered/s:          answers per second; p50/p99/p99.9: latency from send to answer, microseconds;          errors: error answers and requests never answered; gen_sat: true when the load          generator itself fell behind its schedule (the row understates the server);          recall: k-NN recall@k against the ground truth"
    }

    pub fn table_row(&self) -> String {
        let offered = match (self.offered_rate, self.concurrency) {
            (Some(r), _) => format!("{r:.0}"),
            (None, Some(c)) => format!("c={c}"),
            _ => "-".into(),
        };
        let recall = match self.extra.get("recall_at_k").and_then(|r| r.as_f64()) {
            Some(r) => format!("{r:.4}"),
            None => "-".into(),
        };
        format!(
            "{:>10} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>8} {:>7}",
            offered,
            self.achieved_rate,
            self.latency_us.p50,
            self.latency_us.p99,
            self.latency_us.p999,
            self.error_total(),
            self.generator_saturated,
            recall
        )
    }
}
