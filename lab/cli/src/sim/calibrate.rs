//! `cohort-lab sim numa calibrate`: the simulator against two real GPUs. A triad and a 5-point
//! stencil (cohort-gpu's numa_calib.cu) run on one GPU, then split over two (contiguous
//! blocks on local data, contiguous blocks on the peer's data, interleaved chunks); the
//! speedups over one GPU are set beside what the simulator predicts for the same kernels,
//! layout and schedules on a 2-socket configuration (configs/sim/h200x2.toml, its DRAM and
//! link bandwidth replaced by the copy rates measured in the same run).

use super::NumaArgs;
use anyhow::{bail, Context as _, Result};
use cohort_experiments::numa_calib::{Calibration, Kind, Measured, Split, SPLITS};
use cohort_sim::config::{CtaSchedule, Placement};
use cohort_sim::workloads::calibration;
use cohort_sim::{simulate, SimConfig};
use serde::{Deserialize, Serialize};

// The GPU kernels and the simulator's workloads share one geometry.
const _: () = {
    use cohort_experiments::{CALIB_CHUNK_FLOATS, CALIB_ROW_FLOATS, CALIB_TILE_ROWS};
    use cohort_sim::workloads::stencil_geometry as g;
    assert!(CALIB_CHUNK_FLOATS as u64 * 4 == g::TILE_LINES * 128);
    assert!(CALIB_ROW_FLOATS as u64 * 4 == g::ROW_LINES * 128);
    assert!(CALIB_TILE_ROWS as u64 == g::TILE_ROWS);
};

/// Floats per array on the GPUs: 1 GiB arrays (20x the H200's L2).
const GPU_FLOATS: usize = 256 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hardware {
    devices: Vec<String>,
    /// GPU 0's device-to-device copy, read + write bytes per second.
    local_copy_gbps: f64,
    /// GPU 0 reading GPU 1's memory (a peer copy), bytes per second.
    peer_copy_gbps: f64,
    floats: usize,
    runs: Vec<MeasuredRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct MeasuredRow {
    kind: String,
    split: String,
    seconds: f64,
    gb_per_s: f64,
    checked: u64,
}

impl From<&Measured> for MeasuredRow {
    fn from(m: &Measured) -> Self {
        MeasuredRow {
            kind: name(&m.kind),
            split: name(&m.split),
            seconds: m.seconds,
            gb_per_s: m.gb_per_s,
            checked: m.checked,
        }
    }
}

fn name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[derive(Debug, Serialize)]
struct Row {
    kind: String,
    split: String,
    measured_seconds: f64,
    measured_speedup: f64,
    predicted_cycles: f64,
    predicted_seconds: f64,
    predicted_speedup: f64,
    /// predicted / measured speedup - 1.
    speedup_error: f64,
}

pub fn run(a: &NumaArgs) -> Result<()> {
    let hw = match &a.measured {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            serde_json::from_value(
                v.pointer("/results/hardware")
                    .cloned()
                    .context("no results.hardware in the file (not a calibration result)")?,
            )?
        }
        None => measure(a.seed)?,
    };
    let mut cfg = match &a.config {
        Some(p) => SimConfig::load(p)?,
        None => SimConfig::from_toml(
            include_str!("../../../../configs/sim/h200x2.toml"),
            "configs/sim/h200x2.toml",
        )?,
    };
    if cfg.sockets != 2 {
        bail!("calibration compares two GPUs: the configuration needs sockets = 2");
    }
    cfg.dram_gbps_per_socket = hw.local_copy_gbps / 1e9;
    cfg.lane_gbps = hw.peer_copy_gbps / 1e9 / (cfg.link_lanes / 2) as f64;
    // The simulated arrays: the real ones scaled by --scale (cold-cache streaming scales
    // linearly; ratios are what is compared).
    let unit = 2 * 8 * 4096;
    let floats = (((hw.floats as f64 * a.scale.min(1.0)) as usize) / unit).max(1) * unit;
    let mut rows = Vec::new();
    println!(
        "{:<8} {:<17} {:>10} {:>9} {:>11} {:>9} {:>7}",
        "kernel", "split", "real ms", "real x", "sim ms", "sim x", "error"
    );
    let mut worst: f64 = 0.0;
    for kind in ["triad", "stencil"] {
        let w = match kind {
            "triad" => calibration::triad(floats as u64),
            _ => calibration::stencil(floats as u64),
        };
        let sim_scale = hw.floats as f64 / floats as f64;
        let mut single: Option<(f64, f64)> = None;
        for split in SPLITS {
            let sname = name(&split);
            let m = hw
                .runs
                .iter()
                .find(|r| r.kind == kind && r.split == sname)
                .with_context(|| format!("no measured {kind} {sname}"))?;
            let c = sim_config(&cfg, split);
            let st = simulate(&c, &w);
            let predicted_seconds = st.cycles / (cfg.clock_ghz * 1e9) * sim_scale;
            let (m1, p1) = *single.get_or_insert((m.seconds, predicted_seconds));
            let (ms, ps) = (m1 / m.seconds, p1 / predicted_seconds);
            let err = ps / ms - 1.0;
            if split != Split::Single {
                worst = worst.max(err.abs());
            }
            println!(
                "{:<8} {:<17} {:>10.3} {:>8.2}x {:>11.3} {:>8.2}x {:>+6.1}%",
                kind,
                sname,
                m.seconds * 1e3,
                ms,
                predicted_seconds * 1e3,
                ps,
                err * 100.0
            );
            rows.push(Row {
                kind: kind.into(),
                split: sname,
                measured_seconds: m.seconds,
                measured_speedup: ms,
                predicted_cycles: st.cycles,
                predicted_seconds,
                predicted_speedup: ps,
                speedup_error: err,
            });
        }
    }
    println!(
        "largest speedup error {:.1}% (goal 20%); local copy {:.0} GB/s, peer {:.0} GB/s",
        worst * 100.0,
        hw.local_copy_gbps / 1e9,
        hw.peer_copy_gbps / 1e9
    );
    let stem = match &a.tag {
        Some(t) => format!("sim-numa-calibrate-{t}"),
        None => "sim-numa-calibrate".into(),
    };
    cohort_experiments::bench::write_result(
        &a.out.join(format!("{stem}.json")),
        serde_json::json!({
            "hardware": hw,
            "config": cfg,
            "simulated_floats_per_array": floats,
            "rows": rows,
            "largest_speedup_error": worst,
        }),
    )
}

/// The simulator's placement and schedule for a real split (data halves = `Blocked`).
fn sim_config(cfg: &SimConfig, split: Split) -> SimConfig {
    let (sockets, cta_schedule) = match split {
        Split::Single => (1, CtaSchedule::Contiguous),
        Split::ContiguousLocal => (2, CtaSchedule::Contiguous),
        Split::ContiguousPeer => (2, CtaSchedule::ContiguousReversed),
        Split::Interleaved => (2, CtaSchedule::RoundRobin),
    };
    SimConfig {
        sockets,
        placement: Placement::Blocked,
        cta_schedule,
        ..cfg.clone()
    }
}

fn measure(seed: u64) -> Result<Hardware> {
    let devs = cohort_gpu::probe()?;
    if devs.len() < 2 {
        bail!(
            "calibration needs two GPUs with peer access ({} found); --measured FILE redoes the prediction from an earlier run",
            devs.len()
        );
    }
    let cal = Calibration::open(&devs[..2])?;
    let (local, peer) = cal.copy_rates(1 << 30, 10)?;
    let peer = peer.context("a peer copy rate with two GPUs")?;
    eprintln!(
        "local copy {:.0} GB/s, peer {:.0} GB/s",
        local / 1e9,
        peer / 1e9
    );
    let mut runs = Vec::new();
    for kind in [Kind::Triad, Kind::Stencil] {
        for split in SPLITS {
            let m = cal.run(kind, split, GPU_FLOATS, 10, seed)?;
            eprintln!(
                "{kind:?} {split:?}: {:.3} ms, {:.0} GB/s, {} outputs equal the twin",
                m.seconds * 1e3,
                m.gb_per_s,
                m.checked
            );
            runs.push(MeasuredRow::from(&m));
        }
    }
    Ok(Hardware {
        devices: cal.devices.iter().map(|d| d.name.clone()).collect(),
        local_copy_gbps: local,
        peer_copy_gbps: peer,
        floats: GPU_FLOATS,
        runs,
    })
}
