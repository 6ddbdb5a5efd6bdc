//! The bank on the GPU, one thread per request of a cohort: parse (`kernels/bank_parse.cu`),
//! sessions and pages (`kernels/bank_serve.cu`), with requests and responses in row-major or
//! transposed slots. CPU twins: [`super::parse`], [`super::session`], [`super::page`]
//! (together: [`super::Bank::serve`]). Used by the GPU tests (every byte compared with the
//! twins on random session mixes) and the benchmarks; the engine backend is not built yet.

use super::besim::NAME;
use super::kinds::Kind;
use super::parse::{Cookie, Parsed, Refusal, MAX_REQUEST, NUMS, TEXTS};
use cohort_gpu::{load_module, DeviceInfo, GpuError, KernelSource};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// The bank's kernels: the generated prelude (bank/cuda.rs), the parser, sessions and pages.
pub fn source() -> &'static KernelSource {
    static SRC: std::sync::OnceLock<KernelSource> = std::sync::OnceLock::new();
    SRC.get_or_init(|| KernelSource {
        name: "bank.cu",
        source: Box::leak(
            format!(
                "{}{}{}",
                super::cuda::prelude(),
                include_str!("../../kernels/bank_parse.cu"),
                include_str!("../../kernels/bank_serve.cu")
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

/// The packed bytes a cohort needs on the GPU: transposed, only the words its longest request
/// fills (every request's first words come first); row-major, every slot whole.
pub fn upload_bytes(lens: &[u32], transposed: bool) -> usize {
    if transposed {
        let longest = lens.iter().map(|&l| l as usize).max().unwrap_or(0);
        longest.min(MAX_REQUEST).div_ceil(4) * 4 * lens.len()
    } else {
        lens.len() * MAX_REQUEST
    }
}

/// Device buffers for a cohort of up to `cap` requests, and the session table.
pub struct GpuParser {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    module: Arc<cudarc::driver::CudaModule>,
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
    /// Bytes the last upload copied (requests and lengths).
    pub uploaded: usize,
    serve: Option<Serve>,
}

/// The session table and the sessions/pages outputs.
struct Serve {
    sessions_fn: CudaFunction,
    pages_fn: CudaFunction,
    pad_fn: CudaFunction,
    users: u32,
    secret: u64,
    max_live: u32,
    keys: CudaSlice<u32>,
    tokens: CudaSlice<u64>,
    table_cap: u64,
    logins: CudaSlice<u32>,
    live: CudaSlice<u32>,
    status: CudaSlice<u8>,
    user: CudaSlice<u32>,
    change: CudaSlice<u8>,
    token: CudaSlice<u64>,
    out: CudaSlice<u8>,
    lens: CudaSlice<u32>,
    /// Per response: the whole words of padding [from, to) as from | to << 16.
    pad: CudaSlice<u32>,
}

impl GpuParser {
    pub fn new(dev: &DeviceInfo, cap: usize) -> Result<GpuParser, GpuError> {
        let ctx = CudaContext::new(dev.ordinal)?;
        let module = load_module(&ctx, dev, source())?;
        let func = module.load_function("bank_parse")?;
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
            module,
            cap,
            n: 0,
            transposed: false,
            uploaded: 0,
            serve: None,
        })
    }

    /// Adds the session table (`users` users, at most `max_sessions` live, tokens keyed by
    /// `secret`) and the response slots: what [`GpuParser::serve`] needs.
    pub fn with_sessions(
        mut self,
        users: u32,
        max_sessions: u32,
        secret: u64,
    ) -> Result<GpuParser, GpuError> {
        let s = &self.stream;
        let table_cap = (2 * users as u64).next_power_of_two().max(1024);
        let cap = self.cap;
        self.serve = Some(Serve {
            sessions_fn: self.module.load_function("bank_sessions")?,
            pages_fn: self.module.load_function("bank_pages")?,
            pad_fn: self.module.load_function("bank_pad")?,
            users,
            secret,
            max_live: max_sessions,
            keys: s.alloc_zeros(table_cap as usize)?,
            tokens: s.alloc_zeros(table_cap as usize)?,
            table_cap,
            logins: s.alloc_zeros(users as usize)?,
            live: s.alloc_zeros(1)?,
            status: s.alloc_zeros(cap)?,
            user: s.alloc_zeros(cap)?,
            change: s.alloc_zeros(cap)?,
            token: s.alloc_zeros(cap)?,
            out: s.alloc_zeros(cap * super::cuda::RESP_SLOT)?,
            lens: s.alloc_zeros(cap)?,
            pad: s.alloc_zeros(cap)?,
        });
        Ok(self)
    }

    /// Sessions then pages for the parsed cohort (after [`GpuParser::launch`]), leaving the
    /// responses in GPU memory in the request layout.
    pub fn serve(&mut self) -> Result<(), GpuError> {
        let n = self.n as u32;
        let sv = self.serve.as_mut().expect("with_sessions first");
        if n == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(128), 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&sv.sessions_fn);
        b.arg(&n)
            .arg(&self.refusal)
            .arg(&self.kind)
            .arg(&self.has_cookie)
            .arg(&self.cookie_user)
            .arg(&self.cookie_token)
            .arg(&self.nums)
            .arg(&sv.users)
            .arg(&sv.secret)
            .arg(&mut sv.keys)
            .arg(&mut sv.tokens)
            .arg(&sv.table_cap)
            .arg(&mut sv.logins)
            .arg(&mut sv.live)
            .arg(&sv.max_live)
            .arg(&mut sv.status)
            .arg(&mut sv.user)
            .arg(&mut sv.change)
            .arg(&mut sv.token);
        // SAFETY: the arguments match bank_sessions'; every per-request buffer holds cap >= n.
        unsafe { b.launch(cfg) }?;
        let tr = self.transposed as i32;
        let mut b = self.stream.launch_builder(&sv.pages_fn);
        b.arg(&n)
            .arg(&sv.status)
            .arg(&self.kind)
            .arg(&sv.user)
            .arg(&sv.change)
            .arg(&sv.token)
            .arg(&self.nums)
            .arg(&self.texts)
            .arg(&mut sv.out)
            .arg(&mut sv.lens);
        b.arg(&tr).arg(&mut sv.pad);
        // SAFETY: the arguments match bank_pages'; the response slots hold cap x RESP_SLOT.
        unsafe { b.launch(cfg) }?;
        // The padding: a few threads per response (a warp per response row-major).
        let lanes: u32 = if self.transposed { 8 } else { 32 };
        let threads = n as u64 * lanes as u64;
        let mut b = self.stream.launch_builder(&sv.pad_fn);
        b.arg(&n).arg(&sv.pad).arg(&mut sv.out).arg(&tr).arg(&lanes);
        let pad_cfg = LaunchConfig {
            grid_dim: (threads.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match bank_pad's; it writes inside the n response slots.
        unsafe { b.launch(pad_cfg) }?;
        Ok(())
    }

    /// The response bytes a cohort whose responses are at most `longest` bytes occupies:
    /// transposed, only those words of every slot; row-major, every slot whole.
    pub fn response_bytes(&self, longest: usize) -> usize {
        let slot = super::cuda::RESP_SLOT;
        if self.transposed {
            longest.min(slot).div_ceil(4) * 4 * self.n
        } else {
            self.n * slot
        }
    }

    /// Copies the cohort's first `host.len()` response bytes to the host (as a server would
    /// before sending) without reading them: the D2H cost of a cohort.
    pub fn copy_out(&self, host: &mut [u8]) -> Result<(), GpuError> {
        let sv = self.serve.as_ref().expect("with_sessions first");
        let bytes = host.len().min(self.n * super::cuda::RESP_SLOT);
        if bytes > 0 {
            self.stream
                .memcpy_dtoh(&sv.out.slice(0..bytes), &mut host[..bytes])?;
        }
        Ok(())
    }

    /// The cohort's responses, each as one byte string (un-transposed).
    pub fn responses(&self) -> Result<Vec<Vec<u8>>, GpuError> {
        let sv = self.serve.as_ref().expect("with_sessions first");
        let n = self.n;
        let slot = super::cuda::RESP_SLOT;
        let lens = self.stream.clone_dtoh(&sv.lens.slice(0..n))?;
        let all = self.stream.clone_dtoh(&sv.out.slice(0..n * slot))?;
        Ok((0..n)
            .map(|r| {
                let len = (lens[r] as usize).min(slot);
                (0..len)
                    .map(|i| {
                        if self.transposed {
                            all[((i / 4) * n + r) * 4 + i % 4]
                        } else {
                            all[r * slot + i]
                        }
                    })
                    .collect()
            })
            .collect())
    }

    /// Uploads a cohort (at most `cap` requests).
    pub fn upload(&mut self, reqs: &[Vec<u8>], transposed: bool) -> Result<(), GpuError> {
        let (slots, lens) = pack(reqs, transposed);
        let bytes = upload_bytes(&lens, transposed);
        self.upload_packed(&slots[..bytes], &lens, transposed)
    }

    /// Uploads a cohort packed by [`pack`] (its first [`upload_bytes`] bytes are enough),
    /// from host memory the caller keeps (pinned, in a server).
    pub fn upload_packed(
        &mut self,
        slots: &[u8],
        lens: &[u32],
        transposed: bool,
    ) -> Result<(), GpuError> {
        assert!(
            lens.len() <= self.cap,
            "a cohort over the parser's capacity"
        );
        if !lens.is_empty() {
            self.stream
                .memcpy_htod(slots, &mut self.reqs.slice_mut(0..slots.len()))?;
            self.stream
                .memcpy_htod(lens, &mut self.lens.slice_mut(0..lens.len()))?;
        }
        self.n = lens.len();
        self.transposed = transposed;
        self.uploaded = slots.len() + 4 * lens.len();
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
