//! The bank's HTTP parser on the GPU (`kernels/bank_parse.cu`, one thread per request),
//! with the requests in row-major or transposed slots; its CPU twin is [`super::parse`].
//! Used by the GPU tests (every field compared with the twin on random mixes) and the
//! parser-alone benchmark.

use super::besim::NAME;
use super::kinds::Kind;
use super::parse::{Cookie, Parsed, Refusal, MAX_REQUEST, NUMS, TEXTS};
use cohort_gpu::{load_module, DeviceInfo, GpuError, KernelSource};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// The parser's source: the generated prelude (bank/cuda.rs), then the kernel file.
pub fn source() -> &'static KernelSource {
    static SRC: std::sync::OnceLock<KernelSource> = std::sync::OnceLock::new();
    SRC.get_or_init(|| KernelSource {
        name: "bank_parse.cu",
        source: Box::leak(
            format!(
                "{}{}",
                super::cuda::prelude(),
                include_str!("../../kernels/bank_parse.cu")
            )
            .into_boxed_str(),
        ),
    })
}

/// Requests packed into slots of MAX_REQUEST bytes: row-major, or transposed by 4-byte
/// words. A request over the slot keeps its true length (the kernel refuses it unread).
pub fn pack(reqs: &[Vec<u8>], transposed: bool) -> (Vec<u8>, Vec<u32>) {
    let n = reqs.len();
    let mut slots = vec![0u8; n * MAX_REQUEST];
    for (r, q) in reqs.iter().enumerate() {
        for (i, &b) in q.iter().take(MAX_REQUEST).enumerate() {
            let at = if transposed {
                ((i / 4) * n + r) * 4 + i % 4
            } else {
                r * MAX_REQUEST + i
            };
            slots[at] = b;
        }
    }
    let lens = reqs
        .iter()
        .map(|q| q.len().min(u32::MAX as usize) as u32)
        .collect();
    (slots, lens)
}

/// Device buffers for a cohort of up to `cap` requests.
pub struct GpuParser {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    cap: usize,
    reqs: CudaSlice<u8>,
    lens: CudaSlice<u32>,
    refusal: CudaSlice<u8>,
    kind: CudaSlice<u8>,
    has_cookie: CudaSlice<u8>,
    cookie_user: CudaSlice<u32>,
    cookie_token: CudaSlice<u64>,
    nums: CudaSlice<u64>,
    texts: CudaSlice<u8>,
    /// Requests uploaded, and their layout.
    n: usize,
    transposed: bool,
}

impl GpuParser {
    pub fn new(dev: &DeviceInfo, cap: usize) -> Result<GpuParser, GpuError> {
        let ctx = CudaContext::new(dev.ordinal)?;
        let func = load_module(&ctx, dev, source())?.load_function("bank_parse")?;
        let stream = ctx.default_stream();
        let cap = cap.max(1);
        Ok(GpuParser {
            reqs: stream.alloc_zeros(cap * MAX_REQUEST)?,
            lens: stream.alloc_zeros(cap)?,
            refusal: stream.alloc_zeros(cap)?,
            kind: stream.alloc_zeros(cap)?,
            has_cookie: stream.alloc_zeros(cap)?,
            cookie_user: stream.alloc_zeros(cap)?,
            cookie_token: stream.alloc_zeros(cap)?,
            nums: stream.alloc_zeros(cap * NUMS)?,
            texts: stream.alloc_zeros(cap * TEXTS * NAME)?,
            stream,
            func,
            cap,
            n: 0,
            transposed: false,
        })
    }

    /// Uploads a cohort (at most `cap` requests).
    pub fn upload(&mut self, reqs: &[Vec<u8>], transposed: bool) -> Result<(), GpuError> {
        assert!(
            reqs.len() <= self.cap,
            "a cohort over the parser's capacity"
        );
        let (slots, lens) = pack(reqs, transposed);
        self.stream
            .memcpy_htod(&slots, &mut self.reqs.slice_mut(0..slots.len()))?;
        self.stream
            .memcpy_htod(&lens, &mut self.lens.slice_mut(0..lens.len()))?;
        self.n = reqs.len();
        self.transposed = transposed;
        Ok(())
    }

    /// Parses the uploaded cohort (asynchronously on the stream).
    pub fn launch(&mut self) -> Result<(), GpuError> {
        let n = self.n as u32;
        if n == 0 {
            return Ok(());
        }
        let tr = self.transposed as i32;
        let mut b = self.stream.launch_builder(&self.func);
        b.arg(&self.reqs)
            .arg(&self.lens)
            .arg(&n)
            .arg(&tr)
            .arg(&mut self.refusal)
            .arg(&mut self.kind)
            .arg(&mut self.has_cookie)
            .arg(&mut self.cookie_user)
            .arg(&mut self.cookie_token)
            .arg(&mut self.nums)
            .arg(&mut self.texts);
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(128), 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match bank_parse's; every buffer holds cap >= n entries.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        Ok(self.stream.synchronize()?)
    }

    /// The parsed cohort, as the CPU twin returns it.
    pub fn results(&self) -> Result<Vec<Result<Parsed, Refusal>>, GpuError> {
        let n = self.n;
        let s = &self.stream;
        let refusal = s.clone_dtoh(&self.refusal.slice(0..n))?;
        let kind = s.clone_dtoh(&self.kind.slice(0..n))?;
        let has = s.clone_dtoh(&self.has_cookie.slice(0..n))?;
        let user = s.clone_dtoh(&self.cookie_user.slice(0..n))?;
        let token = s.clone_dtoh(&self.cookie_token.slice(0..n))?;
        let nums = s.clone_dtoh(&self.nums.slice(0..n * NUMS))?;
        let texts = s.clone_dtoh(&self.texts.slice(0..n * TEXTS * NAME))?;
        Ok((0..n)
            .map(|r| {
                if refusal[r] != 0 {
                    return Err(*Refusal::ALL
                        .iter()
                        .find(|x| **x as u8 == refusal[r])
                        .expect("the kernel writes a known refusal code"));
                }
                let mut p = Parsed {
                    kind: Kind::from_index(kind[r] as usize).expect("a kind index"),
                    cookie: (has[r] != 0).then_some(Cookie {
                        user: user[r],
                        token: token[r],
                    }),
                    nums: [0; NUMS],
                    texts: [[b' '; NAME]; TEXTS],
                };
                for i in 0..NUMS {
                    p.nums[i] = nums[i * n + r];
                }
                for t in 0..TEXTS {
                    for j in 0..NAME {
                        p.texts[t][j] = texts[(t * NAME + j) * n + r];
                    }
                }
                Ok(p)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_transposes_words() {
        let reqs = vec![b"abcdefgh".to_vec(), b"ABCDE".to_vec()];
        let (rows, lens) = pack(&reqs, false);
        assert_eq!(lens, vec![8, 5]);
        assert_eq!(&rows[..8], b"abcdefgh");
        assert_eq!(&rows[MAX_REQUEST..MAX_REQUEST + 5], b"ABCDE");
        let (tr, _) = pack(&reqs, true);
        // Word 0 of both, then word 1 of both.
        assert_eq!(&tr[..16], b"abcdABCDefghE\0\0\0");
    }
}
