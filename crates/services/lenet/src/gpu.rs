//! LeNet's GPU batch backend (gpu-direct, gpu-cohort): the weights resident on the device; a
//! cohort's images staged in pinned memory, copied in as bytes (784 per image), run through
//! `kernels/lenet.cu` (the convolutions per image, the dense layers as two GEMMs over the
//! cohort; on the tensor cores or the CUDA cores as `lenet.math` says), and only the ten
//! logits per image copied back. The digit is taken from them on the host, by the same rule
//! as the CPU twin.

use super::config::Math;
use super::kernels::{
    LenetConvArgs, LenetDenseArgs, CONV, CONV_TC, DENSE, DENSE_TC, DENSE_TC_TILE, TILE,
};
use super::model::{self, Weights, CLASSES, FLAT, HIDDEN, IMAGE_BYTES};
use cohort_engine::BatchBackend;
use cohort_gpu::engine::{GpuBackend, Pinned, StreamBuffers};
use cohort_gpu::launch::{Dev, Kernel, Work};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cohort_proto::ErrorPayload;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

/// Below this many rows the dense layers take the FP32 tile kernel even under `Math::Tf32x3`:
/// a few rows make only a few 64-row blocks, each waiting on its loads in turn, where the
/// 16x16 tiles spread the same work over four times the blocks. Measured on an H100 (`cohort
/// bench lenet-kernels`): fc1 at 64 rows 26 us on the tiles, 113 us on the tensor cores; at
/// 1024 rows 147 vs 117 us. 256 lies between and was not measured.
pub const DENSE_TC_MIN_ROWS: usize = 256;

/// The network's kernels for one `Math`.
#[derive(Clone)]
pub(super) struct Net {
    conv: Kernel<LenetConvArgs>,
    /// FP32, 16x16 tiles.
    dense: Kernel<LenetDenseArgs>,
    /// Tensor cores, 64x64 tiles, and the fewest rows they take (`Math::Tf32x3` only).
    dense_tc: Option<(Kernel<LenetDenseArgs>, usize)>,
}

impl Net {
    pub(super) fn load(
        module: &Arc<cudarc::driver::CudaModule>,
        math: Math,
    ) -> Result<Net, GpuError> {
        let dense = Kernel::load(module, &DENSE)?;
        Ok(match math {
            Math::Tf32x3 => Net {
                conv: Kernel::load(module, &CONV_TC)?,
                dense,
                dense_tc: Some((Kernel::load(module, &DENSE_TC)?, DENSE_TC_MIN_ROWS)),
            },
            Math::Fp32 => Net {
                conv: Kernel::load(module, &CONV)?,
                dense,
                dense_tc: None,
            },
        })
    }

    /// The fewest rows the tensor-core dense kernel takes; None without one.
    pub(super) fn dense_tc_min_rows(&self) -> Option<usize> {
        self.dense_tc.as_ref().map(|(_, min)| *min)
    }

    /// The tensor-core dense kernel from `rows` rows on (the kernel benchmark's comparison);
    /// nothing without one.
    pub(super) fn set_dense_tc_min_rows(&mut self, rows: usize) {
        if let Some((_, min)) = &mut self.dense_tc {
            *min = rows;
        }
    }

    /// The dense kernel for `rows` rows, and its tile side.
    fn dense_for(&self, rows: usize) -> (&Kernel<LenetDenseArgs>, usize) {
        match &self.dense_tc {
            Some((tc, min)) if rows >= *min => (tc, DENSE_TC_TILE),
            _ => (&self.dense, TILE),
        }
    }
}

/// The weights in device memory, uploaded once per device.
pub(super) struct DeviceWeights {
    pub(super) w1: CudaSlice<f32>,
    pub(super) b1: CudaSlice<f32>,
    pub(super) w2: CudaSlice<f32>,
    pub(super) b2: CudaSlice<f32>,
    pub(super) f1w: CudaSlice<f32>,
    pub(super) f1b: CudaSlice<f32>,
    pub(super) f2w: CudaSlice<f32>,
    pub(super) f2b: CudaSlice<f32>,
}

impl DeviceWeights {
    pub(super) fn upload(ctx: &Arc<CudaContext>, w: &Weights) -> Result<DeviceWeights, GpuError> {
        let s = ctx.default_stream();
        let d = DeviceWeights {
            w1: s.clone_htod(&w.conv1_w)?,
            b1: s.clone_htod(&w.conv1_b)?,
            w2: s.clone_htod(&w.conv2_w)?,
            b2: s.clone_htod(&w.conv2_b)?,
            f1w: s.clone_htod(&w.fc1_w)?,
            f1b: s.clone_htod(&w.fc1_b)?,
            f2w: s.clone_htod(&w.fc2_w)?,
            f2b: s.clone_htod(&w.fc2_b)?,
        };
        s.synchronize()?;
        Ok(d)
    }
}

pub struct LenetGpu {
    ctx: Arc<CudaContext>,
    net: Net,
    weights: Arc<DeviceWeights>,
    bytes: usize,
}

impl LenetGpu {
    pub fn new(dev: &DeviceInfo, w: &Weights, math: Math) -> Result<LenetGpu, GpuError> {
        math.check_device(dev).map_err(GpuError::Invalid)?;
        let ctx = cohort_gpu::launch::context(dev)?;
        let module = load_module(&ctx, dev, super::kernels::batch())?;
        let weights = DeviceWeights::upload(&ctx, w)?;
        Ok(LenetGpu {
            net: Net::load(&module, math)?,
            bytes: 4 * w.tensors().iter().map(|t| t.len()).sum::<usize>(),
            ctx,
            weights: Arc::new(weights),
        })
    }
}

impl BatchBackend for LenetGpu {
    fn batch_key(&self, payload: &[u8]) -> Result<u64, ErrorPayload> {
        super::decode(payload)?;
        Ok(0)
    }
}

impl GpuBackend for LenetGpu {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn stream_buffers(
        &self,
        stream: &Arc<CudaStream>,
        cap: usize,
    ) -> Result<Box<dyn StreamBuffers>, GpuError> {
        Ok(Box::new(LenetBuffers {
            net: self.net.clone(),
            weights: self.weights.clone(),
            host_in: Pinned::for_uploads(&self.ctx, cap * IMAGE_BYTES)?,
            host_logits: Pinned::for_reads(&self.ctx, cap * CLASSES)?,
            act: Activations::new(stream, cap)?,
        }))
    }

    fn device_bytes(&self) -> usize {
        self.bytes
    }
}

struct LenetBuffers {
    net: Net,
    weights: Arc<DeviceWeights>,
    host_in: Pinned<u8>,
    host_logits: Pinned<f32>,
    act: Activations,
}

/// A cohort's device buffers: its images, and each layer's output.
pub(super) struct Activations {
    pub(super) images: CudaSlice<u8>,
    pub(super) features: CudaSlice<f32>,
    pub(super) hidden: CudaSlice<f32>,
    pub(super) logits: CudaSlice<f32>,
}

impl Activations {
    pub(super) fn new(s: &Arc<CudaStream>, cap: usize) -> Result<Activations, GpuError> {
        Ok(Activations {
            images: s.alloc_zeros(cap * IMAGE_BYTES)?,
            features: s.alloc_zeros(cap * FLAT)?,
            hidden: s.alloc_zeros(cap * HIDDEN)?,
            logits: s.alloc_zeros(cap * CLASSES)?,
        })
    }
}

/// Queues the network over the first `rows` images of `a`, leaving their logits in
/// `a.logits`: what the backend, the GPU check and the kernel benchmark run. `after` is
/// called after each kernel is queued (the benchmark records an event there).
pub(super) fn enqueue_network(
    s: &Arc<CudaStream>,
    net: &Net,
    w: &DeviceWeights,
    a: &mut Activations,
    rows: usize,
    after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
) -> Result<(), GpuError> {
    let Activations {
        images,
        features,
        hidden,
        logits,
    } = a;
    let conv_args = LenetConvArgs {
        images: Dev::of(images, s),
        w1: Dev::of(&w.w1, s),
        b1: Dev::of(&w.b1, s),
        w2: Dev::of(&w.w2, s),
        b2: Dev::of(&w.b2, s),
        features: Dev::of_mut(features, s),
        rows: rows as u32,
    };
    // SAFETY: every buffer holds `rows` images' worth (the slot's capacity bounds rows).
    unsafe { net.conv.launch(s, Work::Items(rows), 0, &conv_args) }?;
    after("conv")?;
    let (dense, tile) = net.dense_for(rows);
    let tiles = |n: usize| n.div_ceil(tile) as u32;
    let fc1 = LenetDenseArgs {
        input: Dev::of(features, s),
        weight: Dev::of(&w.f1w, s),
        bias: Dev::of(&w.f1b, s),
        out: Dev::of_mut(hidden, s),
        rows: rows as u32,
        k: FLAT as u32,
        n: HIDDEN as u32,
        relu: 1,
    };
    // SAFETY: features rows x FLAT, f1w HIDDEN x FLAT, hidden rows x HIDDEN.
    unsafe { dense.launch(s, Work::Grid(tiles(HIDDEN), tiles(rows)), 0, &fc1) }?;
    after("fc1")?;
    let fc2 = LenetDenseArgs {
        input: Dev::of(hidden, s),
        weight: Dev::of(&w.f2w, s),
        bias: Dev::of(&w.f2b, s),
        out: Dev::of_mut(logits, s),
        rows: rows as u32,
        k: HIDDEN as u32,
        n: CLASSES as u32,
        relu: 0,
    };
    // SAFETY: hidden rows x HIDDEN, f2w CLASSES x HIDDEN, logits rows x CLASSES.
    unsafe { dense.launch(s, Work::Grid(tiles(CLASSES), tiles(rows)), 0, &fc2) }?;
    after("fc2")
}

impl StreamBuffers for LenetBuffers {
    fn stage(&mut self, _key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        // batch_key checked the length.
        self.host_in.as_mut_slice()[row * IMAGE_BYTES..(row + 1) * IMAGE_BYTES]
            .copy_from_slice(payload);
        Ok(())
    }

    fn enqueue(&mut self, s: &Arc<CudaStream>, _key: u64, rows: usize) -> Result<(), GpuError> {
        s.memcpy_htod(
            &self.host_in.as_slice()[..rows * IMAGE_BYTES],
            &mut self.act.images.slice_mut(0..rows * IMAGE_BYTES),
        )?;
        enqueue_network(
            s,
            &self.net,
            &self.weights,
            &mut self.act,
            rows,
            &mut |_| Ok(()),
        )?;
        s.memcpy_dtoh(
            &self.act.logits.slice(0..rows * CLASSES),
            &mut self.host_logits.as_mut_slice()[..rows * CLASSES],
        )?;
        Ok(())
    }

    fn answer(&mut self, _key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let mut logits = [0f32; CLASSES];
        logits.copy_from_slice(&self.host_logits.as_slice()[row * CLASSES..(row + 1) * CLASSES]);
        super::encode_answer(&logits, out);
        Ok(())
    }
}

/// The engines' selftest requests: MNIST digits (the 1000 built in, a shuffled 300), fresh
/// random images, and images of the wrong size (BAD_REQUEST on every engine).
pub fn selftest_payloads(seed: u64) -> Vec<Vec<u8>> {
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let digits = super::mnist::embedded_test_subset();
    let mut idx: Vec<usize> = (0..digits.len()).collect();
    idx.shuffle(&mut rng);
    let mut out: Vec<Vec<u8>> = idx[..300]
        .iter()
        .map(|&i| digits.image(i).to_vec())
        .collect();
    for _ in 0..100 {
        out.push((0..IMAGE_BYTES).map(|_| rng.gen()).collect());
    }
    for len in [0, 1, IMAGE_BYTES - 1, IMAGE_BYTES + 1, 2000] {
        out.push(vec![7; len]);
    }
    out.shuffle(&mut rng);
    out
}

/// A GPU answer agrees with the CPU's: every logit within [`LOGIT_TOLERANCE`], and the same
/// digit unless the CPU's two candidates are themselves that close (a near tie on a random
/// image, which the order of sums may break either way).
pub fn same_answer(gpu: &[u8], cpu: &[u8]) -> Result<(), String> {
    let (Some((gd, gl)), Some((cd, cl))) = (super::decode_answer(gpu), super::decode_answer(cpu))
    else {
        return Err(format!("answers of {} and {} bytes", gpu.len(), cpu.len()));
    };
    let close = gl
        .iter()
        .zip(&cl)
        .all(|(g, c)| (g - c).abs() <= LOGIT_TOLERANCE * (1.0 + c.abs()));
    let tie = (cl[gd as usize] - cl[cd as usize]).abs()
        <= 2.0 * LOGIT_TOLERANCE * (1.0 + cl[cd as usize].abs());
    if !close || (gd != cd && !tie) {
        return Err(format!("GPU digit {gd} {gl:?}, CPU digit {cd} {cl:?}"));
    }
    Ok(())
}

/// How far a GPU logit may be from the CPU twin's (the sums run in another order, with FMA).
pub const LOGIT_TOLERANCE: f32 = 1e-3;

/// The kernels against the CPU forward pass on the repository's 1000 MNIST test digits and on
/// fresh random images from `seed`, in each `Math` the device has: every logit within
/// [`LOGIT_TOLERANCE`] (relative to its size, plus that much absolute) and the digit
/// identical on the MNIST digits.
pub fn check(devs: &[DeviceInfo], seed: u64) -> Result<Vec<String>, String> {
    let dev = &devs[0];
    use rand::{Rng, SeedableRng};
    let w = Weights::load(None)?;
    let digits = super::mnist::embedded_test_subset();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let random = 1000;
    let mut images = digits.images.clone();
    images.extend((0..random * IMAGE_BYTES).map(|_| rng.gen::<u8>()));
    let rows = digits.len() + random;
    let mut scratch = model::Scratch::default();
    let want: Vec<[f32; CLASSES]> = (0..rows)
        .map(|r| {
            model::forward(
                &w,
                &images[r * IMAGE_BYTES..(r + 1) * IMAGE_BYTES],
                &mut scratch,
            )
        })
        .collect();
    let mut lines = Vec::new();
    for math in [Math::Fp32, Math::Tf32x3] {
        if let Err(why) = math.check_device(dev) {
            cohort_gpu::report_skip(&format!("lenet math {math}"), &why);
            lines.push(format!("SKIPPED lenet math {math}: {why}"));
            continue;
        }
        let gpu = LenetGpu::new(dev, &w, math).map_err(|e| e.to_string())?;
        let run = || -> Result<Vec<f32>, GpuError> {
            let s = gpu.ctx.new_stream()?;
            let mut act = Activations::new(&s, rows)?;
            s.memcpy_htod(&images, &mut act.images)?;
            enqueue_network(&s, &gpu.net, &gpu.weights, &mut act, rows, &mut |_| Ok(()))?;
            let out = s.clone_dtoh(&act.logits)?;
            s.synchronize()?;
            Ok(out)
        };
        let got = run().map_err(|e| format!("lenet math {math}: {e}"))?;
        let mut worst = 0f32;
        for (r, want) in want.iter().enumerate() {
            let g: [f32; CLASSES] = got[r * CLASSES..(r + 1) * CLASSES]
                .try_into()
                .expect("ten logits");
            for (a, b) in g.iter().zip(want) {
                let err = (a - b).abs() / (1.0 + b.abs());
                worst = worst.max(err);
                assert!(
                    err <= LOGIT_TOLERANCE,
                    "lenet math {math}, image {r}: GPU logits {g:?}, CPU {want:?}"
                );
            }
            if r < digits.len() {
                assert_eq!(
                    model::argmax(&g),
                    model::argmax(want),
                    "lenet math {math}: digit of image {r}"
                );
            }
        }
        lines.push(format!(
            "lenet math {math}: {} MNIST + {random} random images: GPU logits = CPU twin's (worst relative error {worst:.2e}), digits identical",
            digits.len()
        ));
    }
    Ok(lines)
}
