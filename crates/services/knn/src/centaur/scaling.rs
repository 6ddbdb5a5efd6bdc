//! Centaur's Fig. 7 shape on physical GPUs: the rate against GPUs for each engine and layout,
//! in process and served, each measured point beside the model's prediction for it.
//!
//! In process the prediction is eq. 1 with the engine's own inputs (`super::Inputs`, its
//! cohort time fitted to its own one-GPU runs). Served, a request also crosses the network
//! path (sockets, the io threads, the codec), whose ceiling on the server's cores an echo
//! served on them measures in the same run (the anchor: the inline engine's, answered on the
//! io threads): the served prediction is the
//! smaller of the two, eq. 1 on the server's cores (C of eq. 2) and that anchor.

use super::{Inputs, Layout, Prediction};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// One engine's highest served rate at the run's p99 bound, from a `cohort-lab bench served` result.
#[derive(Clone, Debug, Serialize)]
pub struct Served {
    pub file: String,
    pub engine: String,
    pub devices: usize,
    pub layout: Layout,
    pub server_cores: usize,
    pub p99_bound_us: f64,
    /// 0 where no offered rate met the bound.
    pub rate: f64,
}

/// The points of a `bench served` JSON (the GPUs and layout read from each point's `serve`
/// arguments: `--gpus=LIST` and `knn.placement=shard`; no `--gpus`: one device).
pub fn read_served(path: &Path) -> Result<Vec<Served>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let what = |k: &str| {
        format!(
            "{}: no {k} (a `cohort-lab bench served` result?)",
            path.display()
        )
    };
    let res = v.get("results").ok_or_else(|| what("results"))?;
    let bound = res
        .get("p99_bound_us")
        .and_then(Value::as_f64)
        .ok_or_else(|| what("p99_bound_us"))?;
    let points = res
        .get("points")
        .and_then(Value::as_array)
        .ok_or_else(|| what("points"))?;
    points
        .iter()
        .map(|p| {
            let args: Vec<&str> = p
                .get("serve")
                .and_then(Value::as_array)
                .ok_or_else(|| what("serve"))?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            Ok(Served {
                file: path.display().to_string(),
                engine: p
                    .get("engine")
                    .and_then(Value::as_str)
                    .ok_or_else(|| what("engine"))?
                    .to_string(),
                devices: gpus_in(&args),
                layout: if args.iter().any(|a| a.ends_with("knn.placement=shard")) {
                    Layout::Shard
                } else {
                    Layout::Replicate
                },
                server_cores: p
                    .get("server_cores")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| what("server_cores"))? as usize,
                p99_bound_us: bound,
                rate: p
                    .get("best_at_p99_bound")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| what("best_at_p99_bound"))?,
            })
        })
        .collect()
}

/// The devices a `serve` command line names (`--gpus=0,1` or `--gpus 0,1`); one without.
fn gpus_in(args: &[&str]) -> usize {
    let list = args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--gpus=")
            .or_else(|| (*a == "--gpus").then(|| args.get(i + 1).copied()).flatten())
    });
    list.map_or(1, |l| l.split(',').filter(|s| !s.is_empty()).count().max(1))
}

/// One measured point and the model's prediction for it.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub engine: String,
    pub layout: Layout,
    pub devices: usize,
    pub measured: f64,
    pub predicted: f64,
    pub error: f64,
    pub file: String,
}

/// The served prediction (module doc): eq. 1 on `cores` server cores, capped by the anchor.
pub fn predict_served(inputs: &Inputs, s: &Served, anchor: f64, skew: f64) -> Prediction {
    let on_server = Inputs {
        host_cores: s.server_cores as f64,
        ..inputs.clone()
    };
    let mut p = on_server.predict(s.devices, s.layout, skew);
    if anchor > 0.0 && anchor < p.rate {
        p.rate = anchor;
        p.bound = "network".into();
    }
    p
}

/// The figure's series: per engine and layout, the measured points and the model's, in order
/// of devices.
pub fn series(points: &[Point], what: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut keys: Vec<(String, Layout)> = Vec::new();
    for p in points {
        if !keys.contains(&(p.engine.clone(), p.layout)) {
            keys.push((p.engine.clone(), p.layout));
        }
    }
    let mut out = Vec::new();
    for (engine, layout) in keys {
        let mut mine: Vec<&Point> = points
            .iter()
            .filter(|p| p.engine == engine && p.layout == layout)
            .collect();
        mine.sort_by_key(|p| p.devices);
        let name = format!("{engine} {}", format!("{layout:?}").to_lowercase());
        let line = |f: fn(&Point) -> f64| mine.iter().map(|p| (p.devices as f64, f(p))).collect();
        out.push((format!("{name}, {what}"), line(|p| p.measured)));
        out.push((format!("{name}, model"), line(|p| p.predicted)));
    }
    out
}

/// Keeps, per engine, layout and device count, the point with the highest measured rate (the
/// runs at several windows: the figure shows each configuration's best).
pub fn best_points(points: Vec<Point>) -> Vec<Point> {
    let mut best: Vec<Point> = Vec::new();
    for p in points {
        match best
            .iter_mut()
            .find(|b| b.engine == p.engine && b.layout == p.layout && b.devices == p.devices)
        {
            Some(b) if b.measured >= p.measured => {}
            Some(b) => *b = p,
            None => best.push(p),
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpus_of_a_serve_command_line_are_counted() {
        assert_eq!(gpus_in(&["serve", "--gpus=0,1,2,3"]), 4);
        assert_eq!(gpus_in(&["serve", "--gpus", "1"]), 1);
        assert_eq!(gpus_in(&["serve", "--udp", "x"]), 1);
    }

    fn point(engine: &str, devices: usize, measured: f64) -> Point {
        Point {
            engine: engine.into(),
            layout: Layout::Replicate,
            devices,
            measured,
            predicted: measured * 1.1,
            error: 0.1,
            file: String::new(),
        }
    }

    #[test]
    fn each_configuration_keeps_its_best_run_and_gets_a_model_line() {
        let pts = best_points(vec![
            point("gpu-cohort", 2, 1.0),
            point("gpu-cohort", 1, 5.0),
            point("gpu-cohort", 2, 3.0),
            point("gpu-persistent", 1, 2.0),
        ]);
        assert_eq!(pts.len(), 3);
        let s = series(&pts, "measured");
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].0, "gpu-cohort replicate, measured");
        assert_eq!(s[0].1, vec![(1.0, 5.0), (2.0, 3.0)]);
        assert_eq!(s[1].0, "gpu-cohort replicate, model");
    }
}
