//! The HTTP path beside nginx as bars (`scripts/http-served.sh`'s JSON): one group per
//! (server cores, body size), one bar per server and variant, requests/s.

use anyhow::{Context as _, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct HttpPlotArgs {
    /// The JSON `scripts/http-served.sh` wrote.
    #[arg(long)]
    pub json: PathBuf,
    /// The PNG to write.
    #[arg(long)]
    pub out: PathBuf,
}

/// A bar chart's group labels and its series (name, one value per group).
type Bars = (Vec<String>, Vec<(String, Vec<f64>)>);

/// (groups, series) of the points: a group per (cores, bytes), a series per server/variant;
/// a series without a point in a group gets 0 there.
fn bars(points: &[serde_json::Value]) -> Result<Bars> {
    let mut groups: Vec<(u64, u64)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let key = |p: &serde_json::Value| -> Result<((u64, u64), String)> {
        let n = |k: &str| p[k].as_u64().with_context(|| format!("point without {k}"));
        let server = p["server"].as_str().context("point without server")?;
        let variant = p["variant"].as_str().unwrap_or("default");
        let name = match variant {
            "default" | "file" => server.to_string(),
            v => format!("{server} {v}"),
        };
        Ok(((n("server_cores")?, n("body_bytes")?), name))
    };
    for p in points {
        let (g, name) = key(p)?;
        if !groups.contains(&g) {
            groups.push(g);
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    groups.sort();
    let mut series: Vec<(String, Vec<f64>)> = names
        .iter()
        .map(|n| (n.clone(), vec![0.0; groups.len()]))
        .collect();
    for p in points {
        let (g, name) = key(p)?;
        let gi = groups.iter().position(|x| *x == g).expect("listed");
        let si = names.iter().position(|x| *x == name).expect("listed");
        series[si].1[gi] = p["rate"].as_f64().unwrap_or(0.0) / 1e3;
    }
    let labels = groups
        .iter()
        .map(|(c, b)| format!("{c} cores, {b} B"))
        .collect();
    Ok((labels, series))
}

pub fn run(a: &HttpPlotArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.json)
        .with_context(|| format!("reading {}", a.json.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", a.json.display()))?;
    let points = v["points"]
        .as_array()
        .context("no \"points\" (not an http-served result)")?;
    let (groups, series) = bars(points)?;
    let title = format!(
        "HTTP: nginx file vs Cohort gateway echo, {} ({})",
        v["machine"]["gpu"].as_str().unwrap_or("?"),
        v["commit"].as_str().unwrap_or("?")
    );
    cohort_load::plot_bars(&groups, &series, &title, "K requests/s", None, &a.out)?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_become_groups_and_series() {
        let p = serde_json::json!([
            {"server": "nginx", "variant": "file", "server_cores": 8, "body_bytes": 16384, "rate": 600000.0},
            {"server": "after", "variant": "default", "server_cores": 8, "body_bytes": 16384, "rate": 240000.0},
            {"server": "nginx", "variant": "file", "server_cores": 1, "body_bytes": 1024, "rate": 140000.0},
            {"server": "after", "variant": "--io-threads 4", "server_cores": 8, "body_bytes": 1024, "rate": 1.0}
        ]);
        let (g, s) = bars(p.as_array().unwrap()).unwrap();
        assert_eq!(
            g,
            ["1 cores, 1024 B", "8 cores, 1024 B", "8 cores, 16384 B"]
        );
        let names: Vec<_> = s.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["nginx", "after", "after --io-threads 4"]);
        assert_eq!(s[0].1, vec![140.0, 0.0, 600.0]);
        assert_eq!(s[1].1, vec![0.0, 0.0, 240.0]);
        assert!(bars(&[serde_json::json!({"server": "x"})]).is_err());
    }
}
