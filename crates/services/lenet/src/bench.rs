//! `cohort-lab bench lenet-kernels`: the network's kernels alone on one GPU, per `lenet.math` and
//! batch size: each kernel's GPU time (events around it) and the images/s the GPU gives
//! without host, copies or engine. What the served and in-process figures could reach.

use super::config::Math;
use super::gpu::{enqueue_network, Activations, DeviceWeights, Net};
use super::model::{Weights, IMAGE_BYTES};
use clap::Args;
use cohort_gpu::{load_module, GpuError};
use cohort_service_api::tools::{args_command, parsed, Record, ServiceCommand};
use serde_json::json;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct LenetKernelBench {
    /// Images per launch of the network.
    #[arg(long, value_delimiter = ',', default_value = "1,64,1024,8192")]
    pub batches: Vec<usize>,
    /// Networks timed per point (after one untimed).
    #[arg(long, default_value_t = 20)]
    pub iters: usize,
    /// GPU (CUDA ordinal).
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    #[arg(long, default_value = "lab/results/lenet-kernels.json")]
    pub out: PathBuf,
}

pub const BENCHES: &[ServiceCommand] = &[ServiceCommand {
    name: "lenet-kernels",
    command: || {
        args_command::<LenetKernelBench>(
            "lenet-kernels",
            "LeNet's kernels alone on one GPU: per math and batch, each kernel's time and images/s",
        )
    },
    run: |m, record| parsed(m, |a: &LenetKernelBench| run(a, record)),
}];

fn run(a: &LenetKernelBench, record: Record) -> Result<(), String> {
    let max = *a.batches.iter().max().ok_or("--batches is empty")?;
    if max == 0 || a.iters == 0 {
        return Err("batches and iters must be positive".into());
    }
    let devs = cohort_gpu::probe().map_err(|e| format!("lenet-kernels needs a GPU: {e}"))?;
    let dev = devs
        .get(a.gpu)
        .ok_or_else(|| format!("no GPU {} ({} found)", a.gpu, devs.len()))?;
    let w = Weights::load(None)?;
    // MNIST test digits, repeated to the largest batch.
    let digits = super::mnist::embedded_test_subset();
    let images: Vec<u8> = (0..max)
        .flat_map(|i| digits.image(i % digits.len()).iter().copied())
        .collect();
    let mut points = Vec::new();
    // tf32x3 as served (FP32 dense tiles below DENSE_TC_MIN_ROWS), tf32x3 with the tensor-core
    // dense kernel at every batch (what that threshold is chosen from), fp32.
    for (math, tc_min_rows) in [
        (Math::Tf32x3, None),
        (Math::Tf32x3, Some(0)),
        (Math::Fp32, None),
    ] {
        if let Err(why) = math.check_device(dev) {
            cohort_gpu::report_skip(&format!("lenet-kernels math {math}"), &why);
            continue;
        }
        let p = time_math(dev, &w, math, tc_min_rows, &images, a)
            .map_err(|e| format!("math {math}: {e}"))?;
        points.extend(p);
    }
    record(
        &a.out,
        json!({ "gpu": dev.name, "iters": a.iters, "points": points }),
    )
}

fn time_math(
    dev: &cohort_gpu::DeviceInfo,
    w: &Weights,
    math: Math,
    tc_min_rows: Option<usize>,
    images: &[u8],
    a: &LenetKernelBench,
) -> Result<Vec<serde_json::Value>, GpuError> {
    let ctx = cohort_gpu::launch::context(dev)?;
    let module = load_module(&ctx, dev, super::kernels::batch())?;
    let mut net = Net::load(&module, math)?;
    if let Some(m) = tc_min_rows {
        net.set_dense_tc_min_rows(m);
    }
    let label = match tc_min_rows {
        Some(0) => format!("{math}, dense on tensor cores at every batch"),
        _ => math.to_string(),
    };
    let weights = DeviceWeights::upload(&ctx, w)?;
    let s = ctx.new_stream()?;
    let max = images.len() / IMAGE_BYTES;
    let mut act = Activations::new(&s, max)?;
    s.memcpy_htod(images, &mut act.images)?;
    let mut points = Vec::new();
    for &rows in &a.batches {
        enqueue_network(&s, &net, &weights, &mut act, rows, &mut |_| Ok(()))?;
        let mut per_kernel: Vec<(&'static str, f64)> = Vec::new();
        let mut total_ms = 0f64;
        for _ in 0..a.iters {
            let mut timer = cohort_gpu::StageTimer::start(&s)?;
            enqueue_network(&s, &net, &weights, &mut act, rows, &mut |stage| {
                timer.mark(stage)
            })?;
            for (i, (stage, ms)) in timer.finish()?.into_iter().enumerate() {
                if per_kernel.len() <= i {
                    per_kernel.push((stage, 0.0));
                }
                per_kernel[i].1 += ms as f64;
                total_ms += ms as f64;
            }
        }
        let us = |ms: f64| 1e3 * ms / a.iters as f64;
        let rate = rows as f64 / (total_ms / a.iters as f64 / 1e3);
        println!(
            "lenet {label} batch {rows:>5}: {:>9.1} us per network ({}), {:>6.2} M images/s",
            us(total_ms),
            per_kernel
                .iter()
                .map(|(k, ms)| format!("{k} {:.1}", us(*ms)))
                .collect::<Vec<_>>()
                .join(", "),
            rate / 1e6
        );
        let kernels: serde_json::Map<String, serde_json::Value> = per_kernel
            .iter()
            .map(|(k, ms)| (format!("{k}_us"), json!(us(*ms))))
            .collect();
        points.push(json!({
            "math": math.to_string(), "variant": label, "dense_tc_min_rows": net.dense_tc_min_rows(),
            "batch": rows, "network_us": us(total_ms),
            "images_per_s": rate, "kernels": kernels,
        }));
    }
    Ok(points)
}
