//! `cohort-lab bench regress`: a suite's results held against the figures last recorded on the
//! same kind of machine. A baseline names each figure by the result file it lives in, the
//! fields that pick its row (`{"engine": "gpu-persistent", "window": 8192}`) and the metric;
//! a figure more than `--tolerance` below its recorded value is a regression, and so is a
//! stall: a served sweep point that missed its p99 bound or answered errors while a higher
//! offered rate of the same sweep was clean (the engine stopped, it was not overloaded).
//! Any regression or stall makes the command exit non-zero; `--update` writes the measured
//! figures as the new baseline instead.
//!
//! Served figures ride on the host's network path, which differs from lease to lease of the
//! same kind of machine (the inline engine's UDP echo, nothing of Cohort's engines between it
//! and the socket, kept p99 <= 1 ms to 900 K on one H200 lease and to 700 K on another). A
//! baseline may name a figure the *anchor* of the run (`is_anchor`: the echo) and give served
//! figures their `anchor`: a served figure below tolerance is then judged against its anchor's
//! ratio in the same run (it regressed only if it fell further than the anchor did), and the
//! anchor's own fall is reported as the lease's (ANCHOR), failing nothing.

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct RegressArgs {
    /// The folder the suite wrote its results to.
    #[arg(long)]
    pub results: PathBuf,
    /// The recorded figures (JSON: machine, commit, figures).
    #[arg(long)]
    pub baseline: PathBuf,
    /// A figure this fraction below its recorded value is a regression.
    #[arg(long, default_value_t = 0.15)]
    pub tolerance: f64,
    /// Compare even where the results' machine is not the baseline's kind.
    #[arg(long)]
    pub any_machine: bool,
    /// Write the measured figures into the baseline (same names and selectors) and compare
    /// nothing.
    #[arg(long)]
    pub update: bool,
    /// The comparison as JSON (machine, commit and command beside it).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A baseline: what was measured where.
#[derive(Serialize, Deserialize, Debug)]
pub struct Baseline {
    /// The kind of machine (its GPUs' names and CPU count, as results record them).
    pub machine: MachineKind,
    /// The commit the figures were measured at.
    pub commit: String,
    pub figures: Vec<Figure>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct MachineKind {
    pub gpus: Vec<String>,
    pub cpus: u64,
}

/// One recorded figure; higher is better.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Figure {
    pub name: String,
    /// The result file, relative to --results.
    pub file: String,
    /// Where the rows are in it: `results` (bench engine) or `results.points` (bench served).
    pub rows: String,
    /// Fields a row must equal.
    pub select: serde_json::Map<String, Value>,
    /// The metric's path in the row (`queries_per_s`, `best_at_p99_bound`).
    pub metric: String,
    pub value: f64,
    /// Where the recorded value comes from (a run's folder, an issue's figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The figure (by name) of the same run whose path this one rides on: below tolerance,
    /// this one is judged relative to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
    /// The run's physical anchor: its fall is the lease's, reported and not failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_anchor: bool,
}

/// A figure's verdict from its ratio to the record, and (where it has an anchor) the anchor's
/// ratio in the same run; the verdict and why.
fn verdict(
    ratio: f64,
    is_anchor: bool,
    anchor_ratio: Option<f64>,
    tolerance: f64,
) -> (&'static str, Option<String>) {
    let floor = 1.0 - tolerance;
    if ratio >= floor {
        return ("ok", None);
    }
    if is_anchor {
        return (
            "ANCHOR",
            Some(format!(
                "this lease's own path is x{ratio:.2} of the record: the served figures are \
                 judged relative to it"
            )),
        );
    }
    match anchor_ratio {
        Some(ar) if ar > 0.0 && ar < 1.0 && ratio / ar >= floor => (
            "ok",
            Some(format!(
                "the run's anchor measured x{ar:.2} of its record; this figure x{:.2} \
                 relative to it",
                ratio / ar
            )),
        ),
        _ => ("REGRESSED", None),
    }
}

/// `path` (dot-separated) in `v`.
fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn machine_of(doc: &Value) -> MachineKind {
    let m = doc.get("machine");
    MachineKind {
        gpus: m
            .and_then(|m| m.get("gpus"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        cpus: m
            .and_then(|m| m.get("cpus"))
            .and_then(Value::as_u64)
            .unwrap_or(0),
    }
}

/// The row `f` names in `doc`, and its metric.
pub fn measure(doc: &Value, f: &Figure) -> Result<f64> {
    let rows = at(doc, &f.rows)
        .and_then(Value::as_array)
        .with_context(|| format!("{}: no array at {}", f.file, f.rows))?;
    let hits: Vec<&Value> = rows
        .iter()
        .filter(|r| f.select.iter().all(|(k, v)| r.get(k) == Some(v)))
        .collect();
    match hits.as_slice() {
        [row] => at(row, &f.metric)
            .and_then(Value::as_f64)
            .with_context(|| format!("{}: the row has no number at {}", f.file, f.metric)),
        [] => bail!("{}: no row with {:?}", f.file, f.select),
        _ => bail!("{}: {} rows with {:?}", f.file, hits.len(), f.select),
    }
}

/// A served sweep point that broke its bound below a clean higher rate: (engine, cores,
/// offered, p99 us, errors).
#[derive(Serialize, Debug, PartialEq)]
pub struct Stall {
    pub file: String,
    pub engine: String,
    pub server_cores: u64,
    pub offered: f64,
    pub p99_us: f64,
    pub errors: u64,
}

/// Every stall in a `bench served` result.
pub fn stalls(file: &str, doc: &Value) -> Vec<Stall> {
    let bound = at(doc, "results.p99_bound_us")
        .and_then(Value::as_f64)
        .unwrap_or(1000.0);
    let mut out = Vec::new();
    let points = at(doc, "results.points").and_then(Value::as_array);
    for p in points.into_iter().flatten() {
        let runs: Vec<(f64, f64, u64, bool)> = p
            .get("runs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r.get("offered").and_then(Value::as_f64).unwrap_or(0.0),
                    r.get("p99_us").and_then(Value::as_f64).unwrap_or(f64::MAX),
                    r.get("errors").and_then(Value::as_u64).unwrap_or(0),
                    r.get("generator_saturated")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                )
            })
            .collect();
        // Two tests of the same shape: a point that missed its p99 bound below one that kept
        // it, and a broken point (errors, or a p99 past five bounds) below a whole one.
        type Run = (f64, f64, u64, bool);
        let clean = |&(_, p99, errors, sat): &Run| p99 <= bound && errors == 0 && !sat;
        let whole = |&(_, p99, errors, sat): &Run| p99 <= 5.0 * bound && errors == 0 && !sat;
        let top = |ok: &dyn Fn(&Run) -> bool| {
            runs.iter()
                .filter(|r| ok(r))
                .map(|r| r.0)
                .fold(f64::NEG_INFINITY, f64::max)
        };
        let (top_clean, top_whole) = (top(&clean), top(&whole));
        let stalled =
            |r: &&Run| !r.3 && ((!clean(r) && r.0 < top_clean) || (!whole(r) && r.0 < top_whole));
        for r in runs.iter().filter(stalled) {
            out.push(Stall {
                file: file.to_string(),
                engine: p
                    .get("engine")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .into(),
                server_cores: p.get("server_cores").and_then(Value::as_u64).unwrap_or(0),
                offered: r.0,
                p99_us: r.1,
                errors: r.2,
            });
        }
    }
    out
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// One figure held against its baseline.
#[derive(Serialize, Debug)]
struct Row {
    name: String,
    recorded: f64,
    measured: Option<f64>,
    ratio: Option<f64>,
    verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

pub fn run(a: &RegressArgs) -> Result<()> {
    let mut base: Baseline = serde_json::from_value(read_json(&a.baseline)?)
        .with_context(|| format!("{} is no baseline", a.baseline.display()))?;
    let mut docs = std::collections::BTreeMap::new();
    for f in &base.figures {
        if !docs.contains_key(&f.file) {
            docs.insert(f.file.clone(), read_json(&a.results.join(&f.file)));
        }
    }
    let here = docs
        .values()
        .find_map(|d| d.as_ref().ok())
        .map(machine_of)
        .context("no result file of the baseline could be read")?;
    if here != base.machine && !a.any_machine {
        bail!(
            "the results come from {:?}, the baseline from {:?}: compare only within one kind \
             (--any-machine to compare anyway)",
            here,
            base.machine
        );
    }
    if a.update {
        for f in &mut base.figures {
            let doc = docs[&f.file]
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{e:#}"))?;
            f.value = measure(doc, f)?;
            f.source = Some(format!("measured in {}", a.results.display()));
        }
        base.machine = here;
        base.commit = docs
            .values()
            .find_map(|d| d.as_ref().ok())
            .and_then(|d| d.get("commit"))
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        cohort_server::util::write_atomic(
            &a.baseline,
            serde_json::to_string_pretty(&base)?.as_bytes(),
        )?;
        eprintln!("wrote {}", a.baseline.display());
        return Ok(());
    }
    let ratio_of = |f: &Figure| -> Result<(f64, f64)> {
        let m = docs[&f.file]
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e:#}"))
            .and_then(|d| measure(d, f))?;
        Ok((m, if f.value > 0.0 { m / f.value } else { 1.0 }))
    };
    let mut rows = Vec::new();
    for f in &base.figures {
        let anchor_ratio = f.anchor.as_ref().and_then(|name| {
            let a = base.figures.iter().find(|g| &g.name == name)?;
            ratio_of(a).ok().map(|(_, r)| r)
        });
        let row = match ratio_of(f) {
            Ok((m, ratio)) => {
                let (verdict, why) = verdict(ratio, f.is_anchor, anchor_ratio, a.tolerance);
                Row {
                    name: f.name.clone(),
                    recorded: f.value,
                    measured: Some(m),
                    ratio: Some(ratio),
                    verdict,
                    why,
                }
            }
            Err(e) => Row {
                name: f.name.clone(),
                recorded: f.value,
                measured: None,
                ratio: None,
                verdict: "MISSING",
                why: Some(format!("{e:#}")),
            },
        };
        rows.push(row);
    }
    let mut all_stalls = Vec::new();
    for (file, doc) in &docs {
        if let Ok(doc) = doc {
            all_stalls.extend(stalls(file, doc));
        }
    }
    println!(
        "{:<58} {:>12} {:>12} {:>7}  verdict",
        "figure", "recorded", "measured", "ratio"
    );
    for r in &rows {
        println!(
            "{:<58} {:>12.0} {:>12} {:>7}  {}{}",
            r.name,
            r.recorded,
            r.measured.map_or("-".into(), |m| format!("{m:.0}")),
            r.ratio.map_or("-".into(), |x| format!("{x:.3}")),
            r.verdict,
            r.why
                .as_deref()
                .map_or(String::new(), |w| format!(" ({w})"))
        );
    }
    for s in &all_stalls {
        println!(
            "STALL {} {} on {} cores at {:.0}/s: p99 {:.0} us, {} errors (a higher rate was clean)",
            s.file, s.engine, s.server_cores, s.offered, s.p99_us, s.errors
        );
    }
    let bad = rows
        .iter()
        .filter(|r| matches!(r.verdict, "REGRESSED" | "MISSING"))
        .count()
        + all_stalls.len();
    if let Some(out) = &a.out {
        super::write_result(
            out,
            serde_json::json!({"baseline": a.baseline, "baseline_commit": base.commit,
                "tolerance": a.tolerance, "figures": rows, "stalls": all_stalls}),
        )?;
    }
    if bad > 0 {
        bail!(
            "{bad} figure(s) regressed, missing or stalled against {}",
            a.baseline.display()
        );
    }
    println!("no regression beyond {:.0}%", a.tolerance * 100.0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn served(runs: Value) -> Value {
        json!({"results": {"p99_bound_us": 1000.0, "points": [
            {"engine": "gpu-persistent", "server_cores": 8, "best_at_p99_bound": 5.0e5, "runs": runs}
        ]}})
    }

    #[test]
    fn a_bad_point_below_a_clean_one_is_a_stall_and_overload_is_not() {
        let doc = served(json!([
            {"offered": 2e5, "p99_us": 520.0, "errors": 0},
            {"offered": 3e5, "p99_us": 110000.0, "errors": 5768},
            {"offered": 5e5, "p99_us": 860.0, "errors": 0},
            {"offered": 9e5, "p99_us": 9000.0, "errors": 0},
        ]));
        let s = stalls("served.json", &doc);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].offered, 3e5);
        assert_eq!(s[0].errors, 5768);
    }

    #[test]
    fn lost_answers_below_a_whole_higher_rate_are_a_stall_past_the_p99_bound_too() {
        // H200, f3fe223: 55 616 answers lost at 700 K, none at 800 K (p99 2.1 ms).
        let doc = served(json!([
            {"offered": 4e5, "p99_us": 820.0, "errors": 0},
            {"offered": 7e5, "p99_us": 16515.0, "errors": 55616},
            {"offered": 8e5, "p99_us": 2109.0, "errors": 0},
            {"offered": 9e5, "p99_us": 15999.0, "errors": 6061},
        ]));
        let s = stalls("served.json", &doc);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].offered, 7e5);
    }

    #[test]
    fn a_figure_is_read_from_the_one_row_its_fields_pick() {
        let doc = json!({"results": [
            {"engine": "gpu-cohort", "window": 8192, "queries_per_s": 2.1e6},
            {"engine": "gpu-persistent", "window": 8192, "queries_per_s": 0.93e6},
        ]});
        let mut f = Figure {
            name: "x".into(),
            file: "e.json".into(),
            rows: "results".into(),
            select: json!({"engine": "gpu-persistent", "window": 8192})
                .as_object()
                .unwrap()
                .clone(),
            metric: "queries_per_s".into(),
            value: 1.65e6,
            source: None,
            anchor: None,
            is_anchor: false,
        };
        assert_eq!(measure(&doc, &f).unwrap(), 0.93e6);
        f.select.remove("engine");
        assert!(measure(&doc, &f).is_err(), "two rows match: ambiguous");
        f.select.insert("engine".into(), json!("cpu"));
        assert!(measure(&doc, &f).is_err(), "no row matches");
    }

    #[test]
    fn a_served_figure_is_found_by_its_nested_path() {
        let doc = served(json!([]));
        let f = Figure {
            name: "s".into(),
            file: "s.json".into(),
            rows: "results.points".into(),
            select: json!({"engine": "gpu-persistent", "server_cores": 8})
                .as_object()
                .unwrap()
                .clone(),
            metric: "best_at_p99_bound".into(),
            value: 1.0,
            source: None,
            anchor: None,
            is_anchor: false,
        };
        assert_eq!(measure(&doc, &f).unwrap(), 5.0e5);
    }

    #[test]
    fn a_served_figure_is_judged_against_the_same_run_s_anchor() {
        let t = 0.15;
        // Within tolerance: ok, whatever the anchor did.
        assert_eq!(verdict(0.9, false, Some(0.5), t).0, "ok");
        // The lease's anchor fell to 0.78 and the figure with it (0.83): the lease, not a
        // regression (H200, 6bed9e1: inline echo 700 K against 900 K).
        let (v, why) = verdict(0.83, false, Some(0.78), t);
        assert_eq!(v, "ok");
        assert!(why.unwrap().contains("x0.78"));
        // The figure fell further than its anchor: a regression.
        assert_eq!(verdict(0.6, false, Some(0.78), t).0, "REGRESSED");
        // No anchor, or an anchor that did not fall: judged alone.
        assert_eq!(verdict(0.83, false, None, t).0, "REGRESSED");
        assert_eq!(verdict(0.83, false, Some(1.1), t).0, "REGRESSED");
        // The anchor's own fall is reported, never failed.
        assert_eq!(verdict(0.78, true, None, t).0, "ANCHOR");
    }
}
