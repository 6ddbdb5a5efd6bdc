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
    for (i, (name, reports)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        for (q, dashed) in [("p50", false), ("p99", true)] {
            let line: Vec<(f64, f64)> = reports
                .iter()
                .map(|r| {
                    (
                        r.achieved_rate,
                        if dashed {
                            r.latency_us.p99
                        } else {
                            r.latency_us.p50
                        }
                        .max(min_y),
                    )
                })
                .collect();
            let style = ShapeStyle {
                color,
                filled: !dashed,
                stroke_width: if dashed { 1 } else { 2 },
            };
            let s = chart
                .draw_series(LineSeries::new(line.clone(), style).point_size(3))
                .map_err(|e| anyhow!("{e}"))?;
            if labels {
                let label = format!("{name} {q}");
                s.label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
        }
    }
    cohort_plot::legend(&mut chart, labels)?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
