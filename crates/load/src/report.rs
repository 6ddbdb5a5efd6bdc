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

/// The report field (in `extra`) with the workload's word on what a wrong answer may mean.
pub const WRONG_ANSWER_HINT: &str = "wrong_answer_hint";

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
    /// Latency of the refusals (OVERLOADED, TIMEOUT answers): how soon a refused client
    /// knew. Absent when nothing was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_refused_us: Option<Latency>,
    /// True when the generator could not send on schedule: then the numbers describe the
    /// generator, not the server.
    pub generator_saturated: bool,
    /// How late the generator sent, p99 and max, in microseconds.
    pub send_lag_us_p99: f64,
    pub send_lag_us_max: f64,
    /// How long answers waited in the generator's sockets before it read them (the kernel's
    /// receive stamp to the read), p99 and max, in microseconds: the generator's own share
    /// of the latencies. UDP only (absent where the kernel stamps nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_lag_us_p99: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_lag_us_max: Option<f64>,
    /// Answers that matched no outstanding request (duplicates or after their request was
    /// given up).
    pub unexpected_answers: u64,
    /// Whether the server announced shutdown (GOAWAY) during the run.
    pub goaway: bool,
    /// GPU board and host energy over the measured window, with answers per joule
    /// (`cohort_power::EnergyReport`); absent parts say why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<serde_json::Value>,
    /// Page services and workloads that name their requests' kinds (a collection's searches
    /// and writes): every answer's latency per request type (errors included) and the type's
    /// errors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_type: BTreeMap<String, TypeLatency>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Lateness, in microseconds at p99, past which the generator rather than the server set a
/// run's figures: sending past its schedule, or reading answers after they arrived.
pub const SEND_LAG_BOUND_US: f64 = 1000.0;
pub const READ_LAG_BOUND_US: f64 = 1000.0;

impl Report {
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The reports as a table on stdout, each with its errors and notes, then the columns'
    /// legend.
    pub fn print_table(reports: &[Report]) {
        println!("{}", Report::table_header());
        for r in reports {
            println!("{}", r.table_row());
            for note in r.table_notes() {
                println!("{:>10} {note}", "");
            }
        }
        println!("{}", Report::table_legend());
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
            "quality"
        )
    }

    /// What the table's columns mean, printed under it.
    pub fn table_legend() -> &'static str {
        "(offered/s: requests sent per second (c=N: N in flight, closed loop); answered/s: correct
 answers per second; p50/p99/p99.9: latency from send to answer, microseconds (- when
 nothing was answered); errors: error answers and requests never answered; gen_sat: true
 when the load generator itself fell behind its schedule (the row understates the server);
 quality: k-NN recall@k against the ground truth, or LeNet accuracy against MNIST's labels)"
    }

    /// Lines printed under a row: its errors, why the generator fell behind, and what wrong
    /// answers may mean for this service.
    pub fn table_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.errors.is_empty() {
            notes.push(format!("errors: {:?}", self.errors));
        }
        if self.generator_saturated {
            notes.push(format!(
                "gen_sat: the generator sent up to {:.1} ms late (p99 {:.1} ms){}: it, not the \
                 server, set this row's pace; give it more --connections or cores",
                self.send_lag_us_max / 1000.0,
                self.send_lag_us_p99 / 1000.0,
                match (self.read_lag_us_p99, self.read_lag_us_max) {
                    (Some(p99), Some(max)) if p99 > READ_LAG_BOUND_US => format!(
                        " and read answers up to {:.1} ms after they arrived (p99 {:.1} ms)",
                        max / 1000.0,
                        p99 / 1000.0
                    ),
                    _ => String::new(),
                }
            ));
        }
        if self.errors.get("wrong_answer").copied().unwrap_or(0) > 0 {
            if let Some(hint) = self.extra.get(WRONG_ANSWER_HINT).and_then(|h| h.as_str()) {
                notes.push(format!("wrong_answer: {hint}"));
            }
        }
        notes
    }

    pub fn table_row(&self) -> String {
        let offered = match (self.offered_rate, self.concurrency) {
            (Some(r), _) => format!("{r:.0}"),
            (None, Some(c)) => format!("c={c}"),
            _ => "-".into(),
        };
        let quality = ["recall_at_k", "accuracy"]
            .iter()
            .find_map(|k| self.extra.get(*k).and_then(|r| r.as_f64()))
            .map_or_else(|| "-".into(), |q| format!("{q:.4}"));
        // Latencies of no answer are no latencies, not zeros.
        let us = |v: f64| {
            if self.ok > 0 {
                format!("{v:.1}")
            } else {
                "-".into()
            }
        };
        format!(
            "{:>10} {:>10.0} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7}",
            offered,
            self.achieved_rate,
            us(self.latency_us.p50),
            us(self.latency_us.p99),
            us(self.latency_us.p999),
            self.error_total(),
            self.generator_saturated,
            quality
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            target: "udp://127.0.0.1:1".into(),
            service: "lenet".into(),
            mode: "open-poisson".into(),
            offered_rate: Some(1000.0),
            concurrency: None,
            connections: 1,
            duration_s: 1.0,
            warmup_s: 0.0,
            sent: 1000,
            ok: 0,
            errors: BTreeMap::from([("wrong_answer".to_string(), 1000)]),
            achieved_rate: 0.0,
            latency_us: Latency::default(),
            latency_all_us: Latency::default(),
            latency_refused_us: None,
            generator_saturated: true,
            send_lag_us_p99: 1500.0,
            send_lag_us_max: 4200.0,
            read_lag_us_p99: None,
            read_lag_us_max: None,
            unexpected_answers: 0,
            goaway: false,
            energy: None,
            per_type: BTreeMap::new(),
            extra: serde_json::Map::new(),
        }
    }

    #[test]
    fn a_row_with_nothing_answered_shows_no_latency() {
        let row = report().table_row();
        assert!(!row.contains("0.0"), "{row}");
        assert_eq!(
            row.matches(" -").count(),
            4,
            "three latencies and the quality: {row}"
        );
    }

    #[test]
    fn notes_say_why_the_generator_fell_behind_and_what_wrong_answers_may_mean() {
        let mut r = report();
        assert_eq!(
            r.table_notes().len(),
            2,
            "errors and gen_sat, no hint given"
        );
        r.extra
            .insert(WRONG_ANSWER_HINT.into(), "give it --model".into());
        let notes = r.table_notes();
        assert!(notes[1].contains("4.2 ms late"), "{notes:?}");
        assert_eq!(notes[2], "wrong_answer: give it --model");
        r.errors.clear();
        r.generator_saturated = false;
        assert!(r.table_notes().is_empty(), "a clean row has no notes");
    }

    #[test]
    fn the_quality_column_shows_recall_or_accuracy() {
        let mut r = report();
        r.ok = 10;
        r.extra.insert("accuracy".into(), 0.9912.into());
        assert!(r.table_row().ends_with(" 0.9912"), "{}", r.table_row());
        assert!(Report::table_legend().lines().all(|l| !l.contains("  ")));
    }
}
