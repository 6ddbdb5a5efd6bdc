//! PNG charts for the benchmarks and the load generator: lines and grouped bars. Text needs a
//! TrueType font: the system's, else an embedded DejaVu Sans (the GPU machines have none).

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;
/// Fonts looked for to label the plot (plotters' ab_glyph backend needs one registered).
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// DejaVu Sans (license in assets/DejaVuSans.LICENSE), for machines without a system font:
/// the GPU machines have none, and unlabelled plots are of little use.
const EMBEDDED_FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Registers a font for plotters' text once; false: none could be (charts go without text).
pub fn register_font() -> bool {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DONE.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        plotters::style::register_font("sans-serif", FontStyle::Normal, EMBEDDED_FONT).is_ok()
    })
}

/// The series' legend, boxed, where the chart has text at all (`labels`: a font registered).
pub fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    labels: bool,
) -> Result<()> {
    if labels {
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// Lines of (x, y) points, one per series, on a linear y axis from 0 and a log-2 x axis
/// where `log_x` (stream counts, loop counts). Without a system font, no text (as above).
pub fn plot_lines(
    series: &[(String, Vec<(f64, f64)>)],
    title: &str,
    (x_desc, y_desc): (&str, &str),
    log_x: bool,
    out: &Path,
) -> Result<()> {
    let labels = register_font();
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let max_x = pts.clone().map(|p| p.0).fold(1.0, f64::max);
    let min_x = pts.clone().map(|p| p.0).fold(max_x, f64::min);
    let max_y = pts.map(|p| p.1).fold(1e-9, f64::max) * 1.1;
    let root = BitMapBackend::new(out, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20)
        .x_label_area_size(if labels { 45 } else { 5 })
        .y_label_area_size(if labels { 80 } else { 5 });
    if labels {
        b.caption(title, ("sans-serif", 22));
    }
    // The two axis kinds are different types: one body, instantiated for each.
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            if labels {
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .y_label_formatter(&|y| tick(*y))
                    .draw()
                    .map_err(|e| anyhow!("{e}"))?;
            }
            for (i, (name, p)) in series.iter().enumerate() {
                let style = ShapeStyle {
                    color: Palette99::pick(i).to_rgba(),
                    filled: true,
                    stroke_width: 2,
                };
                let s = chart
                    .draw_series(LineSeries::new(p.clone(), style).point_size(3))
                    .map_err(|e| anyhow!("{e}"))?;
                if labels {
                    s.label(name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                }
            }
            legend(&mut chart, labels)?;
        }};
    }
    if log_x {
        body!(b
            .build_cartesian_2d((min_x.max(1e-9)..max_x * 1.2).log_scale(), 0.0..max_y)
            .map_err(|e| anyhow!("{e}"))?);
    } else {
        body!(b
            .build_cartesian_2d(min_x..max_x * 1.05, 0.0..max_y)
            .map_err(|e| anyhow!("{e}"))?);
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Grouped bars: one group per category (x), one bar per series within it, a linear y axis
/// from 0 with an optional dashed reference line (a speedup of 1). Without a system font the
/// chart has no text (as above).
pub fn plot_bars(
    categories: &[String],
    series: &[(String, Vec<f64>)],
    title: &str,
    y_desc: &str,
    reference: Option<f64>,
    out: &Path,
) -> Result<()> {
    let labels = register_font();
    let groups = categories.len().max(1);
    let bars = series.len().max(1);
    let tallest = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(reference.unwrap_or(1e-9), f64::max);
    // Room above the tallest bar for the legend (a line per series), so that it covers no
    // group: the bars take the plot's height less the legend's.
    const HEIGHT: u32 = 700;
    let plot_px = f64::from(HEIGHT) - if labels { 150.0 + 60.0 } else { 50.0 };
    let legend_px = if labels {
        12.0 * bars as f64 + 16.0
    } else {
        0.0
    };
    let max_y = tallest * 1.05 / (1.0 - (legend_px / plot_px).min(0.6));
    let width = (140 + groups * (bars * 14 + 16)).clamp(900, 2400) as u32;
    let root = BitMapBackend::new(out, (width, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20)
        .x_label_area_size(if labels { 150 } else { 5 })
        .y_label_area_size(if labels { 70 } else { 5 });
    if labels {
        b.caption(title, ("sans-serif", 20));
    }
    // x in bar slots: group g, bar i at g * (bars + 1) + i (one empty slot between groups).
    let slots = (groups * (bars + 1)) as f64;
    let mut chart = b
        .build_cartesian_2d(0.0..slots, 0.0..max_y)
        .map_err(|e| anyhow!("{e}"))?;
    if labels {
        chart
            .configure_mesh()
            .disable_x_mesh()
            // The groups are named below, one name under each (the mesh would put its
            // labels at "nice" positions, not under the groups).
            .x_labels(0)
            .y_desc(y_desc)
            .y_label_formatter(&|y| tick(*y))
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        let style = ("sans-serif", 13)
            .into_font()
            .transform(FontTransform::Rotate90);
        for (g, name) in categories.iter().enumerate() {
            let mid = (g * (bars + 1)) as f64 + bars as f64 / 2.0;
            let (px, py) = chart.backend_coord(&(mid, 0.0));
            root.draw(&Text::new(name.clone(), (px - 7, py + 8), style.clone()))
                .map_err(|e| anyhow!("{e}"))?;
        }
    }
    for (i, (name, values)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let rects = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(g, v)| {
                let x0 = (g * (bars + 1) + i) as f64;
                Rectangle::new([(x0, 0.0), (x0 + 0.9, *v)], color.filled())
            });
        let s = chart.draw_series(rects).map_err(|e| anyhow!("{e}"))?;
        if labels {
            s.label(name.clone()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
            });
        }
    }
    if let Some(r) = reference {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, r), (slots, r)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(|e| anyhow!("{e}"))?;
    }
    if labels {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// A tick label a reader takes in at a glance: 1.5M, 250K, 12, 0.25 (not `1000000.0`).
pub fn tick(v: f64) -> String {
    let a = v.abs();
    let trim = |x: f64, places: usize, unit: &str| {
        let t = format!("{x:.places$}");
        let t = if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.')
        } else {
            &t
        };
        format!("{t}{unit}")
    };
    if a >= 1e9 {
        trim(v / 1e9, 2, "G")
    } else if a >= 1e6 {
        trim(v / 1e6, 2, "M")
    } else if a >= 1e4 {
        trim(v / 1e3, 2, "K")
    } else if a >= 1.0 || a == 0.0 {
        trim(v, 2, "")
    } else {
        trim(v, 4, "")
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(super::tick(1_000_000.0), "1M");
        assert_eq!(super::tick(2_500_000.0), "2.5M");
        assert_eq!(super::tick(250_000.0), "250K");
        assert_eq!(super::tick(8000.0), "8000");
        assert_eq!(super::tick(0.25), "0.25");
        assert_eq!(super::tick(0.0), "0");
        assert_eq!(super::tick(3.0e9), "3G");
        assert_eq!(super::tick(0.0005), "0.0005");
        assert_eq!(super::tick(100.0), "100");
    }

    use super::*;

    #[test]
    fn lines_and_bars_write_pngs() {
        let dir = std::env::temp_dir().join(format!("cohort-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lines = dir.join("lines.png");
        let series = vec![("a".to_string(), vec![(1.0, 2.0), (2.0, 3.0), (4.0, 1.0)])];
        plot_lines(&series, "t", ("x", "y"), true, &lines).unwrap();
        let bars = dir.join("bars.png");
        let cats = vec!["p".to_string(), "q".to_string()];
        plot_bars(
            &cats,
            &[("s".to_string(), vec![1.0, 2.5])],
            "t",
            "y",
            Some(1.0),
            &bars,
        )
        .unwrap();
        for f in [&lines, &bars] {
            let bytes = std::fs::read(f).unwrap();
            assert!(
                bytes.starts_with(b"\x89PNG"),
                "{} is not a PNG",
                f.display()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
