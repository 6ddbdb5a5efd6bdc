//! Throughput-latency plot of a sweep (PNG); the chart kinds every caller shares are in
//! `cohort-plot`.

use crate::report::Report;
use anyhow::{anyhow, Result};
use cohort_plot::register_font;
use plotters::prelude::*;
use std::path::Path;

/// Achieved throughput (x) against p50/p99 latency (y, log scale), one line per series,
/// written atomically (drawn beside `out`, then renamed). Without a system font the plot is
/// drawn without text (and says so on stderr).
pub fn plot_sweep(series: &[(String, Vec<Report>)], title: &str, out: &Path) -> Result<()> {
    // A sibling name that keeps the extension: plotters picks the format from it.
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned());
    let ext = out.extension().map(|e| e.to_string_lossy().into_owned());
    let tmp = out.with_file_name(format!(
        ".{}.{}.tmp.{}",
        name.unwrap_or_default(),
        std::process::id(),
        ext.unwrap_or_else(|| "png".into())
    ));
    draw_sweep(series, title, &tmp)?;
    std::fs::rename(&tmp, out).map_err(|e| anyhow!("writing {}: {e}", out.display()))
}

/// The points a line joins and the points marked apart. The line joins the clean points in
/// order of throughput: past saturation the answered rate falls as the offered one rises,
/// and joining in sweep order would zigzag back. Points with errors (drawn as x) or with a
/// generator behind its schedule (triangle) are marked, not joined: their latency is not the
/// server's at that rate. Points with no answer have no latency and are left out.
fn split_points(reports: &[Report]) -> (Vec<&Report>, Vec<&Report>) {
    let clean = |r: &&Report| r.error_total() == 0 && !r.generator_saturated;
    let (mut joined, flagged): (Vec<&Report>, Vec<&Report>) =
        reports.iter().filter(|r| r.ok > 0).partition(clean);
    joined.sort_by(|a, b| a.achieved_rate.total_cmp(&b.achieved_rate));
    (joined, flagged)
}

fn draw_sweep(series: &[(String, Vec<Report>)], title: &str, out: &Path) -> Result<()> {
    let labels = register_font();
    if !labels {
        eprintln!("warning: no TrueType font found; plotting without labels");
    }
    let pts = series.iter().flat_map(|(_, r)| r.iter());
    let max_x = pts.clone().map(|r| r.achieved_rate).fold(1.0, f64::max) * 1.05;
    let max_y = pts.clone().map(|r| r.latency_us.p99).fold(10.0, f64::max) * 1.5;
    let min_y = pts
        .map(|r| r.latency_us.p50)
        .filter(|v| *v > 0.0)
        .fold(max_y, f64::min)
        .max(1.0)
        / 1.5;
    let root = BitMapBackend::new(out, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20)
        .x_label_area_size(if labels { 45 } else { 5 })
        .y_label_area_size(if labels { 70 } else { 5 });
    if labels {
        b.caption(title, ("sans-serif", 24));
    }
    let mut chart = b
        .build_cartesian_2d(0.0..max_x, (min_y..max_y).log_scale())
        .map_err(|e| anyhow!("{e}"))?;
    if labels {
        chart
            .configure_mesh()
            .x_desc("achieved requests/s")
            .y_desc("latency (us)")
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
    }
    let mut marked = false;
    for (i, (name, reports)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let (joined, flagged) = split_points(reports);
        for (q, dashed) in [("p50", false), ("p99", true)] {
            let at = |r: &Report| {
                let v = if dashed {
                    r.latency_us.p99
                } else {
                    r.latency_us.p50
                };
                (r.achieved_rate, v.max(min_y))
            };
            let style = ShapeStyle {
                color,
                filled: !dashed,
                stroke_width: if dashed { 1 } else { 2 },
            };
            let s = chart
                .draw_series(LineSeries::new(joined.iter().map(|r| at(r)), style).point_size(3))
                .map_err(|e| anyhow!("{e}"))?;
            if labels {
                let label = format!("{name} {q}");
                s.label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
            chart
                .draw_series(flagged.iter().map(|r| {
                    let xy = at(r);
                    if r.generator_saturated {
                        TriangleMarker::new(xy, 6, style.stroke_width(2)).into_dyn()
                    } else {
                        Cross::new(xy, 6, style.stroke_width(2)).into_dyn()
                    }
                }))
                .map_err(|e| anyhow!("{e}"))?;
            marked |= !flagged.is_empty();
        }
    }
    if labels && marked {
        // One legend entry for what the marks mean.
        let grey = ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(2);
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(|e| anyhow!("{e}"))?
            .label("x: errors, triangle: generator behind (not joined)")
            .legend(move |(x, y)| Cross::new((x + 10, y), 5, grey));
    }
    cohort_plot::legend(&mut chart, labels)?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(offered: f64, achieved: f64, errors: u64, behind: bool) -> Report {
        let mut r: Report = serde_json::from_value(serde_json::json!({
            "target": "udp://127.0.0.1:1", "service": "echo", "mode": "open-poisson",
            "offered_rate": offered, "concurrency": null, "connections": 1,
            "duration_s": 1.0, "warmup_s": 0.0, "sent": offered as u64, "ok": achieved as u64,
            "errors": {}, "achieved_rate": achieved,
            "latency_us": {"p50": 50.0, "p90": 80.0, "p99": 100.0, "p999": 200.0, "max": 300.0, "mean": 60.0},
            "latency_all_us": {"p50": 50.0, "p90": 80.0, "p99": 100.0, "p999": 200.0, "max": 300.0, "mean": 60.0},
            "generator_saturated": behind, "send_lag_us_p99": 0.0, "send_lag_us_max": 0.0,
            "unexpected_answers": 0, "goaway": false
        }))
        .expect("a report");
        if errors > 0 {
            r.errors.insert("overloaded".into(), errors);
        }
        r
    }

    #[test]
    fn past_saturation_the_line_does_not_zigzag_and_bad_points_are_marked_apart() {
        // A sweep in offered order whose last clean point answers less than the one before.
        let sweep = vec![
            point(100.0, 100.0, 0, false),
            point(300.0, 290.0, 0, false),
            point(200.0, 200.0, 0, false),
            point(400.0, 250.0, 0, false),
            point(500.0, 240.0, 9, false),
            point(600.0, 230.0, 0, true),
            point(700.0, 0.0, 700, false),
        ];
        let (joined, flagged) = split_points(&sweep);
        let xs: Vec<f64> = joined.iter().map(|r| r.achieved_rate).collect();
        assert_eq!(xs, vec![100.0, 200.0, 250.0, 290.0]);
        assert_eq!(
            flagged.len(),
            2,
            "the errors and the generator behind; no answer: left out"
        );
        let dir = std::env::temp_dir().join(format!("cohort-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let out = dir.join("sweep.png");
        plot_sweep(&[("echo".into(), sweep)], "a sweep", &out).expect("plotted");
        let png = std::fs::read(&out).expect("written");
        assert_eq!(&png[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).ok();
    }
}
