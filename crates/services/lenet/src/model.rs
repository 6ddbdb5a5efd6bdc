//! The LeNet network the service runs, its weights file and its CPU forward pass (the twin of
//! every GPU backend).
//!
//! Architecture (Caffe's LeNet with tanh, as Lynx serves it), for one 28x28 8-bit image read
//! as `pixel / 255`:
//!
//! | layer | shape out | parameters |
//! | --- | --- | --- |
//! | conv 20 x 5x5, stride 1, no padding, + bias, tanh | 20 x 24 x 24 | 520 |
//! | max-pool 2x2, stride 2 | 20 x 12 x 12 | |
//! | conv 50 x 20 x 5x5 + bias, tanh | 50 x 8 x 8 | 25 050 |
//! | max-pool 2x2, stride 2 | 50 x 4 x 4 = 800 | |
//! | dense 800 -> 500 + bias, ReLU | 500 | 400 500 |
//! | dense 500 -> 10 + bias (the logits) | 10 | 5 010 |
//!
//! 431 080 parameters (1.72 MB as f32); about 2.3 M multiply-adds per image, 70% of them in
//! the second convolution. Tensors are row-major as PyTorch and candle lay them out: conv
//! weights `[out, in, ky, kx]`, dense weights `[out, in]`, the flattening after the second pool
//! channel-major (`c * 16 + y * 4 + x`).

use std::collections::BTreeMap;

pub const SIDE: usize = 28;
pub const IMAGE_BYTES: usize = SIDE * SIDE;
pub const KERNEL: usize = 5;
pub const C1: usize = 20;
pub const C1_SIDE: usize = SIDE - KERNEL + 1; // 24
pub const P1_SIDE: usize = C1_SIDE / 2; // 12
pub const C2: usize = 50;
pub const C2_SIDE: usize = P1_SIDE - KERNEL + 1; // 8
pub const P2_SIDE: usize = C2_SIDE / 2; // 4
pub const FLAT: usize = C2 * P2_SIDE * P2_SIDE; // 800
pub const HIDDEN: usize = 500;
pub const CLASSES: usize = 10;

/// The tensors of a weights file: name and shape, in the order the network uses them.
pub const TENSORS: [(&str, &[usize]); 8] = [
    ("conv1.weight", &[C1, 1, KERNEL, KERNEL]),
    ("conv1.bias", &[C1]),
    ("conv2.weight", &[C2, C1, KERNEL, KERNEL]),
    ("conv2.bias", &[C2]),
    ("fc1.weight", &[HIDDEN, FLAT]),
    ("fc1.bias", &[HIDDEN]),
    ("fc2.weight", &[CLASSES, HIDDEN]),
    ("fc2.bias", &[CLASSES]),
];

/// The model the repository ships (trained by `cohort-lab model train lenet` on the 60K MNIST
/// training images; its test-set accuracy is in docs/lenet.md). The service serves it unless
/// told another file.
pub static SHIPPED: &[u8] = include_bytes!("lenet.safetensors");

/// The network's parameters, f32, laid out as [`TENSORS`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    pub conv1_w: Vec<f32>,
    pub conv1_b: Vec<f32>,
    pub conv2_w: Vec<f32>,
    pub conv2_b: Vec<f32>,
    pub fc1_w: Vec<f32>,
    pub fc1_b: Vec<f32>,
    pub fc2_w: Vec<f32>,
    pub fc2_b: Vec<f32>,
}

impl Weights {
    /// Reads a safetensors file's bytes: every tensor of [`TENSORS`] present, f32, of its
    /// shape; anything else is an error naming the tensor.
    pub fn from_safetensors(bytes: &[u8]) -> Result<Weights, String> {
        let st = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| format!("not a safetensors file: {e}"))?;
        let mut t = BTreeMap::new();
        for (name, shape) in TENSORS {
            let v = st
                .tensor(name)
                .map_err(|_| format!("the weights have no tensor {name:?}"))?;
            if v.dtype() != safetensors::Dtype::F32 {
                return Err(format!("tensor {name:?} is {:?}, not F32", v.dtype()));
            }
            if v.shape() != shape {
                return Err(format!(
                    "tensor {name:?} has shape {:?}, LeNet's is {shape:?}",
                    v.shape()
                ));
            }
            let data: Vec<f32> = v
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if let Some(i) = data.iter().position(|x| !x.is_finite()) {
                return Err(format!("tensor {name:?} holds a non-finite value at {i}"));
            }
            t.insert(name, data);
        }
        let mut take = |n: &str| t.remove(n).expect("read above");
        Ok(Weights {
            conv1_w: take("conv1.weight"),
            conv1_b: take("conv1.bias"),
            conv2_w: take("conv2.weight"),
            conv2_b: take("conv2.bias"),
            fc1_w: take("fc1.weight"),
            fc1_b: take("fc1.bias"),
            fc2_w: take("fc2.weight"),
            fc2_b: take("fc2.bias"),
        })
    }

    /// Reads a weights file (`None`: the shipped model).
    pub fn load(path: Option<&std::path::Path>) -> Result<Weights, String> {
        match path {
            None => Weights::from_safetensors(SHIPPED),
            Some(p) => {
                let bytes =
                    std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
                Weights::from_safetensors(&bytes).map_err(|e| format!("{}: {e}", p.display()))
            }
        }
    }

    /// The tensors in [`TENSORS`] order.
    pub fn tensors(&self) -> [&[f32]; 8] {
        [
            &self.conv1_w,
            &self.conv1_b,
            &self.conv2_w,
            &self.conv2_b,
            &self.fc1_w,
            &self.fc1_b,
            &self.fc2_w,
            &self.fc2_b,
        ]
    }

    /// As a safetensors file's bytes.
    pub fn to_safetensors(&self) -> Vec<u8> {
        let bytes: Vec<Vec<u8>> = self
            .tensors()
            .iter()
            .map(|t| t.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
        let views: Vec<(&str, safetensors::tensor::TensorView)> = TENSORS
            .iter()
            .zip(&bytes)
            .map(|((name, shape), b)| {
                let v = safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape.to_vec(),
                    b,
                )
                .expect("shape and bytes agree");
                (*name, v)
            })
            .collect();
        safetensors::serialize(views, None).expect("f32 tensors serialize")
    }
}

/// Scratch space of one forward pass (kept by a worker: no allocation per request).
pub struct Scratch {
    /// A convolution's input patches, one column per output position (im2col).
    cols: Vec<f32>,
    c1: Vec<f32>,
    p1: Vec<f32>,
    c2: Vec<f32>,
    flat: Vec<f32>,
    hidden: Vec<f32>,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            cols: vec![
                0.0;
                (KERNEL * KERNEL * C1 * C2_SIDE * C2_SIDE)
                    .max(KERNEL * KERNEL * C1_SIDE * C1_SIDE)
            ],
            c1: vec![0.0; C1 * C1_SIDE * C1_SIDE],
            p1: vec![0.0; C1 * P1_SIDE * P1_SIDE],
            c2: vec![0.0; C2 * C2_SIDE * C2_SIDE],
            flat: vec![0.0; FLAT],
            hidden: vec![0.0; HIDDEN],
        }
    }
}

/// The logits of one image; the CPU twin of the kernels (the same sums, in another order:
/// the GPU checks compare within a tolerance).
pub fn forward(w: &Weights, image: &[u8], s: &mut Scratch) -> [f32; CLASSES] {
    assert_eq!(image.len(), IMAGE_BYTES, "a LeNet image is 28x28 bytes");
    let mut x = [0f32; IMAGE_BYTES];
    for (o, &p) in x.iter_mut().zip(image) {
        *o = p as f32 * (1.0 / 255.0);
    }
    conv_tanh(
        &x,
        1,
        SIDE,
        &w.conv1_w,
        &w.conv1_b,
        C1,
        &mut s.cols,
        &mut s.c1,
    );
    max_pool(&s.c1, C1, C1_SIDE, &mut s.p1);
    conv_tanh(
        &s.p1,
        C1,
        P1_SIDE,
        &w.conv2_w,
        &w.conv2_b,
        C2,
        &mut s.cols,
        &mut s.c2,
    );
    max_pool(&s.c2, C2, C2_SIDE, &mut s.flat);
    for (j, h) in s.hidden.iter_mut().enumerate() {
        let row = &w.fc1_w[j * FLAT..(j + 1) * FLAT];
        *h = (w.fc1_b[j] + dot(row, &s.flat)).max(0.0);
    }
    let mut logits = [0f32; CLASSES];
    for (j, l) in logits.iter_mut().enumerate() {
        *l = w.fc2_b[j] + dot(&w.fc2_w[j * HIDDEN..(j + 1) * HIDDEN], &s.hidden);
    }
    logits
}

/// A dot product in eight independent lanes (so the compiler can keep them in one SIMD
/// register; a single running sum would serialise every add), then the lanes summed.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// c (m x n) = a (m x k) . b (k x n), all row-major (matrixmultiply's blocked SIMD kernel).
fn gemm(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: the three buffers hold the shapes asserted above, row-major, and do not alias
    // (c is borrowed mutably).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// The predicted digit: the largest logit, the smaller digit on a tie.
pub fn argmax(logits: &[f32; CLASSES]) -> u8 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u8
}

/// Valid 5x5 convolution of `cin` planes of `side` x `side`, plus bias, then tanh: the
/// patches unrolled into `cols` (one column per output position), then one GEMM of the
/// weights (`cout` x `cin`*25) with them.
#[allow(clippy::too_many_arguments)]
fn conv_tanh(
    input: &[f32],
    cin: usize,
    side: usize,
    weight: &[f32],
    bias: &[f32],
    cout: usize,
    cols: &mut [f32],
    out: &mut [f32],
) {
    let os = side - KERNEL + 1;
    let positions = os * os;
    for ci in 0..cin {
        let plane = &input[ci * side * side..(ci + 1) * side * side];
        for ky in 0..KERNEL {
            for kx in 0..KERNEL {
                let row = &mut cols[((ci * KERNEL + ky) * KERNEL + kx) * positions..][..positions];
                for y in 0..os {
                    row[y * os..(y + 1) * os].copy_from_slice(&plane[(y + ky) * side + kx..][..os]);
                }
            }
        }
    }
    let k = cin * KERNEL * KERNEL;
    gemm(
        cout,
        k,
        positions,
        weight,
        &cols[..k * positions],
        &mut out[..cout * positions],
    );
    for co in 0..cout {
        for v in &mut out[co * positions..(co + 1) * positions] {
            *v = (*v + bias[co]).tanh();
        }
    }
}

/// 2x2 max-pool, stride 2, of `c` planes of `side` x `side`.
fn max_pool(input: &[f32], c: usize, side: usize, out: &mut [f32]) {
    let os = side / 2;
    for ch in 0..c {
        let inp = &input[ch * side * side..];
        for y in 0..os {
            for x in 0..os {
                let at = |dy: usize, dx: usize| inp[(2 * y + dy) * side + 2 * x + dx];
                out[ch * os * os + y * os + x] = at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_model_reads_and_writes_back_alike() {
        let w = Weights::load(None).unwrap();
        let sizes: Vec<usize> = w.tensors().iter().map(|t| t.len()).collect();
        let want: Vec<usize> = TENSORS.iter().map(|(_, s)| s.iter().product()).collect();
        assert_eq!(sizes, want);
        assert_eq!(sizes.iter().sum::<usize>(), 431_080);
        let again = Weights::from_safetensors(&w.to_safetensors()).unwrap();
        assert_eq!(again, w);
    }

    #[test]
    fn a_wrong_file_is_refused_naming_what_is_wrong() {
        assert!(Weights::from_safetensors(b"nonsense")
            .unwrap_err()
            .contains("not a safetensors"));
        let mut w = Weights::load(None).unwrap();
        w.fc2_b[3] = f32::NAN;
        let e = Weights::from_safetensors(&w.to_safetensors()).unwrap_err();
        assert!(e.contains("fc2.bias") && e.contains("non-finite"), "{e}");
    }

    /// The convolution against a direct sum written out per output element.
    #[test]
    fn the_convolution_is_the_textbook_sum() {
        let side = 9;
        let (cin, cout) = (3, 2);
        let input: Vec<f32> = (0..cin * side * side)
            .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
            .collect();
        let weight: Vec<f32> = (0..cout * cin * 25)
            .map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let bias = [0.1, -0.2];
        let os = side - 4;
        let mut out = vec![0.0; cout * os * os];
        let mut cols = vec![0.0; cin * 25 * os * os];
        conv_tanh(&input, cin, side, &weight, &bias, cout, &mut cols, &mut out);
        for co in 0..cout {
            for y in 0..os {
                for x in 0..os {
                    let mut s = bias[co] as f64;
                    for ci in 0..cin {
                        for ky in 0..5 {
                            for kx in 0..5 {
                                s += weight[((co * cin + ci) * 5 + ky) * 5 + kx] as f64
                                    * input[ci * side * side + (y + ky) * side + x + kx] as f64;
                            }
                        }
                    }
                    let got = out[co * os * os + y * os + x] as f64;
                    assert!((got - s.tanh()).abs() < 1e-5, "{co} {y} {x}");
                }
            }
        }
    }
}
