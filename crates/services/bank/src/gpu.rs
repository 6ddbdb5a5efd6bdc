//! The bank on the GPU, a group of threads per request of a cohort (up to 32 to parse one and
//! to write its page, by the cohort's size: [`super::kernels::parse_lanes`],
//! [`super::kernels::page_lanes`]; one for sessions): parse (`kernels/bank_parse.cu`),
//! sessions and pages (`kernels/bank_serve.cu`, after `bank_records.cuh`, `bank_writer.cuh` and
//! `bank_page.cuh`), with requests and responses in row-major or transposed slots. CPU twins: [`super::parse`], [`super::session`], [`super::page`]
//! (together: [`super::Bank::serve`]). The parts - [`Kernels`], the device's [`SessionTable`],
//! a cohort's device buffers [`CohortBuffers`] - serve both the engine backend
//! ([`super::backend`], one set of cohort buffers per stream, one table per device) and
//! [`GpuParser`], the harness of the GPU tests and the in-process benchmarks.

use super::besim::NAME;
use super::gpu_records::{MemcachedStaging, RecordSource, RecordTable, SharedRecords};
use super::kernels::*;
use super::kinds::Kind;
use super::parse::{Cookie, Parsed, Refusal, MAX_REQUEST, NUMS, TEXTS};
use cohort_gpu::launch::{Dev, Kernel, Work};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

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

/// The bank's kernels on one device.
#[derive(Clone)]
pub struct Kernels {
    parse: Kernel<BankParseArgs>,
    sessions: Kernel<BankSessionsArgs>,
    pages: Kernel<BankPagesArgs>,
    pad: Kernel<BankPadArgs>,
    unpack: Kernel<BankUnpackArgs>,
    gather: Kernel<BankGatherArgs>,
    fetch: Kernel<BankFetchArgs>,
}

impl Kernels {
    pub fn load(ctx: &Arc<CudaContext>, dev: &DeviceInfo) -> Result<Kernels, GpuError> {
        let m = load_module(ctx, dev, source())?;
        Ok(Kernels {
            parse: Kernel::load(&m, &PARSE)?,
            sessions: Kernel::load(&m, &SESSIONS)?,
            pages: Kernel::load(&m, &PAGES)?,
            pad: Kernel::load(&m, &PAD)?,
            unpack: Kernel::load(&m, &UNPACK)?,
            gather: Kernel::load(&m, &GATHER)?,
            fetch: Kernel::load(&m, &FETCH)?,
        })
    }
}

/// The session table in GPU memory (the CPU twin: [`super::session::Sessions`]): open
/// addressing keyed by user id, tokens keyed by `secret`, per-user login counters, the live
/// count bounded by `max_live`. One per device, shared by every stream's cohorts: the kernels
/// change it with device-scope atomics only, and a client's next request on a session is sent
/// after the answer that opened it, so cohorts in flight never race on one session.
pub struct SessionTable {
    users: u32,
    secret: u64,
    max_live: u32,
    keys: CudaSlice<u32>,
    tokens: CudaSlice<u64>,
    cap: u64,
    logins: CudaSlice<u32>,
    live: CudaSlice<u32>,
}

impl SessionTable {
    pub fn new(
        stream: &Arc<CudaStream>,
        users: u32,
        max_live: u32,
        secret: u64,
    ) -> Result<SessionTable, GpuError> {
        // At most half full with every user in it: short probe runs.
        let cap = (2 * users as u64).next_power_of_two().max(1024);
        Ok(SessionTable {
            users,
            secret,
            max_live,
            keys: stream.alloc_zeros(cap as usize)?,
            tokens: stream.alloc_zeros(cap as usize)?,
            cap,
            logins: stream.alloc_zeros(users as usize)?,
            live: stream.alloc_zeros(1)?,
        })
    }

    pub fn device_bytes(&self) -> usize {
        self.cap as usize * 12 + self.users as usize * 4
    }

    pub fn users(&self) -> u32 {
        self.users
    }
}

/// A cohort's device buffers for up to `cap` requests: the request slots, the parser's and
/// the session stage's outputs (structure of arrays), the response slots.
pub struct CohortBuffers {
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
    status: CudaSlice<u8>,
    user: CudaSlice<u32>,
    change: CudaSlice<u8>,
    token: CudaSlice<u64>,
    out: CudaSlice<u8>,
    out_lens: CudaSlice<u32>,
    /// Per response: the whole words of padding [from, to) as from | to << 16.
    pad: CudaSlice<u32>,
    /// Per request: the user whose records it reads (0: none), and where they are.
    want: CudaSlice<u32>,
    rec_at: CudaSlice<u32>,
    /// Threads per page; None: by the cohort's size ([`super::kernels::page_lanes`]).
    page_lanes: Option<u32>,
    /// Threads per request parsed; None: by the cohort's size
    /// ([`super::kernels::parse_lanes`]).
    parse_lanes: Option<u32>,
}

/// Where a cohort's records are on the device.
#[derive(Clone, Copy)]
pub enum DeviceRecords<'a> {
    /// Computed from the user id by each thread.
    Computed,
    /// The device's record table.
    Table(&'a RecordTable),
    /// Staged beside the cohort from memcached.
    Staged(&'a MemcachedStaging),
}

impl DeviceRecords<'_> {
    /// The records' base address (null: computed).
    fn dev(&self, s: &CudaStream) -> Dev<u8> {
        match self {
            DeviceRecords::Computed => Dev::NULL,
            DeviceRecords::Table(t) => Dev::of(&t.recs, s),
            DeviceRecords::Staged(m) => Dev::of(&m.dev_recs, s),
        }
    }
}

impl CohortBuffers {
    pub fn new(s: &Arc<CudaStream>, cap: usize) -> Result<CohortBuffers, GpuError> {
        let cap = cap.max(1);
        Ok(CohortBuffers {
            cap,
            reqs: s.alloc_zeros(cap * MAX_REQUEST)?,
            lens: s.alloc_zeros(cap)?,
            refusal: s.alloc_zeros(cap)?,
            kind: s.alloc_zeros(cap)?,
            has_cookie: s.alloc_zeros(cap)?,
            cookie_user: s.alloc_zeros(cap)?,
            cookie_token: s.alloc_zeros(cap)?,
            nums: s.alloc_zeros(cap * NUMS)?,
            texts: s.alloc_zeros(cap * TEXTS * NAME)?,
            status: s.alloc_zeros(cap)?,
            user: s.alloc_zeros(cap)?,
            change: s.alloc_zeros(cap)?,
            token: s.alloc_zeros(cap)?,
            out: s.alloc_zeros(cap * super::cuda::RESP_SLOT)?,
            out_lens: s.alloc_zeros(cap)?,
            pad: s.alloc_zeros(cap)?,
            want: s.alloc_zeros(cap)?,
            rec_at: s.alloc_zeros(cap)?,
            page_lanes: None,
            parse_lanes: None,
        })
    }

    /// Fixes the threads per page (a power of two up to 32; None: by the cohort's size).
    pub fn set_page_lanes(&mut self, lanes: Option<u32>) -> Result<(), GpuError> {
        if let Some(l) = lanes {
            super::kernels::check_page_lanes(l).map_err(GpuError::Invalid)?;
        }
        self.page_lanes = lanes;
        Ok(())
    }

    /// Fixes the threads per request parsed (a power of two up to 32; None: by the cohort's
    /// size).
    pub fn set_parse_lanes(&mut self, lanes: Option<u32>) -> Result<(), GpuError> {
        if let Some(l) = lanes {
            super::kernels::check_page_lanes(l).map_err(GpuError::Invalid)?;
        }
        self.parse_lanes = lanes;
        Ok(())
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn device_bytes(&self) -> usize {
        self.cap * (MAX_REQUEST + super::cuda::RESP_SLOT + 64 + NUMS * 8 + TEXTS * NAME)
    }

    /// Spreads `n` requests packed end to end (`packed` at `offs`, true lengths `lens`, on
    /// the device) into the request slots.
    pub fn unpack(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        n: usize,
        packed: &CudaSlice<u8>,
        offs: &CudaSlice<u32>,
        transposed: bool,
    ) -> Result<(), GpuError> {
        assert!(n <= self.cap, "a cohort over its buffers' capacity");
        if n == 0 {
            return Ok(());
        }
        let args = BankUnpackArgs {
            n: n as u32,
            packed: Dev::of(packed, s),
            offs: Dev::of(offs, s),
            lens: Dev::of(&self.lens, s),
            transposed: transposed as i32,
            reqs: Dev::of_mut(&mut self.reqs, s),
        };
        let grid = Work::Grid((MAX_REQUEST / 4).div_ceil(128) as u32, n as u32);
        // SAFETY: the caller's offs + min(len, MAX_REQUEST) of every row lie inside
        // `packed`; the slots hold cap >= n requests.
        unsafe { k.unpack.launch(s, grid, 0, &args) }?;
        Ok(())
    }

    /// Copies a cohort already in the slot layout ([`pack`]'s first [`upload_bytes`] bytes,
    /// from host memory the caller keeps) and its true lengths into the slots.
    pub fn upload_slots(
        &mut self,
        s: &Arc<CudaStream>,
        slots: &[u8],
        lens: &[u32],
    ) -> Result<(), GpuError> {
        assert!(
            lens.len() <= self.cap,
            "a cohort over its buffers' capacity"
        );
        if !lens.is_empty() {
            s.memcpy_htod(slots, &mut self.reqs.slice_mut(0..slots.len()))?;
            s.memcpy_htod(lens, &mut self.lens.slice_mut(0..lens.len()))?;
        }
        Ok(())
    }

    /// Copies the first `host.len()` bytes of the response slots to the host (as a server
    /// would before sending, transposed or not), without reading them.
    pub fn copy_out(&self, s: &Arc<CudaStream>, host: &mut [u8]) -> Result<(), GpuError> {
        let bytes = host.len().min(self.out.len());
        if bytes > 0 {
            s.memcpy_dtoh(&self.out.slice(0..bytes), &mut host[..bytes])?;
        }
        Ok(())
    }

    /// The true lengths of a cohort's requests, on the device (copied in by the caller).
    pub fn lens_mut(&mut self) -> &mut CudaSlice<u32> {
        &mut self.lens
    }

    /// Parses `n` requests in their slots.
    pub fn parse(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        n: usize,
        transposed: bool,
    ) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        let lanes = self
            .parse_lanes
            .unwrap_or_else(|| super::kernels::parse_lanes(n));
        let args = BankParseArgs {
            reqs: Dev::of(&self.reqs, s),
            lens: Dev::of(&self.lens, s),
            n: n as u32,
            transposed: transposed as i32,
            refusal: Dev::of_mut(&mut self.refusal, s),
            kind: Dev::of_mut(&mut self.kind, s),
            has_cookie: Dev::of_mut(&mut self.has_cookie, s),
            cookie_user: Dev::of_mut(&mut self.cookie_user, s),
            cookie_token: Dev::of_mut(&mut self.cookie_token, s),
            nums: Dev::of_mut(&mut self.nums, s),
            texts: Dev::of_mut(&mut self.texts, s),
            lanes,
        };
        // SAFETY: every buffer holds cap >= n entries; a group of `lanes` threads a request.
        unsafe { k.parse.launch(s, Work::Items(n * lanes as usize), 0, &args) }?;
        Ok(())
    }

    /// Names the users whose records the `n` parsed requests read and, with a record table,
    /// finds them there (else the caller stages them: [`MemcachedStaging::fetch`]).
    pub fn fetch(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        n: usize,
        users: u32,
        table: Option<&RecordTable>,
    ) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        let args = BankFetchArgs {
            n: n as u32,
            refusal: Dev::of(&self.refusal, s),
            kind: Dev::of(&self.kind, s),
            has_cookie: Dev::of(&self.has_cookie, s),
            cookie_user: Dev::of(&self.cookie_user, s),
            nums: Dev::of(&self.nums, s),
            users,
            table_keys: table.map_or(Dev::NULL, |t| Dev::of(&t.keys, s)),
            table_vals: table.map_or(Dev::NULL, |t| Dev::of(&t.vals, s)),
            table_cap: table.map_or(0, |t| t.cap),
            want: Dev::of_mut(&mut self.want, s),
            rec_at: Dev::of_mut(&mut self.rec_at, s),
        };
        // SAFETY: a null table has cap 0 and is not read; every per-request buffer holds
        // cap >= n.
        unsafe { k.fetch.launch(s, Work::Items(n), 0, &args) }?;
        Ok(())
    }

    pub(crate) fn want(&self) -> &CudaSlice<u32> {
        &self.want
    }

    pub(crate) fn rec_at_mut(&mut self) -> &mut CudaSlice<u32> {
        &mut self.rec_at
    }

    /// Sessions, pages and padding for `n` parsed requests (records found by
    /// [`CohortBuffers::fetch`] unless computed): the responses in their slots.
    #[allow(clippy::too_many_arguments)]
    pub fn serve(
        &mut self,
        k: &Kernels,
        t: &SessionTable,
        s: &Arc<CudaStream>,
        n: usize,
        transposed: bool,
        recs: DeviceRecords,
    ) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        let (n32, tr, recs) = (n as u32, transposed as i32, recs.dev(s));
        let page_lanes = self
            .page_lanes
            .unwrap_or_else(|| super::kernels::page_lanes(n));
        // The table is written through shared references: it is shared by every stream of
        // the device (see SessionTable), and event tracking is off where streams share it.
        let args = BankSessionsArgs {
            n: n32,
            refusal_in: Dev::of(&self.refusal, s),
            kind: Dev::of(&self.kind, s),
            has_cookie: Dev::of(&self.has_cookie, s),
            cookie_user: Dev::of(&self.cookie_user, s),
            cookie_token: Dev::of(&self.cookie_token, s),
            nums: Dev::of(&self.nums, s),
            recs,
            rec_at: Dev::of(&self.rec_at, s),
            users: t.users,
            secret: t.secret,
            keys: Dev::of(&t.keys, s),
            tokens: Dev::of(&t.tokens, s),
            cap: t.cap,
            logins: Dev::of(&t.logins, s),
            live: Dev::of(&t.live, s),
            max_live: t.max_live,
            status: Dev::of_mut(&mut self.status, s),
            user_out: Dev::of_mut(&mut self.user, s),
            change: Dev::of_mut(&mut self.change, s),
            token_out: Dev::of_mut(&mut self.token, s),
        };
        // SAFETY: every per-request buffer holds cap >= n; the table holds `cap` slots and
        // `users` counters.
        unsafe { k.sessions.launch(s, Work::Items(n), 0, &args) }?;
        let args = BankPagesArgs {
            n: n32,
            status: Dev::of(&self.status, s),
            kind: Dev::of(&self.kind, s),
            user: Dev::of(&self.user, s),
            change: Dev::of(&self.change, s),
            token: Dev::of(&self.token, s),
            nums: Dev::of(&self.nums, s),
            texts: Dev::of(&self.texts, s),
            recs,
            rec_at: Dev::of(&self.rec_at, s),
            out: Dev::of_mut(&mut self.out, s),
            lens: Dev::of_mut(&mut self.out_lens, s),
            transposed: tr,
            pad: Dev::of_mut(&mut self.pad, s),
            lanes: page_lanes,
        };
        // SAFETY: the response slots hold cap x RESP_SLOT, the rest cap >= n entries; a
        // group of `page_lanes` threads per response.
        unsafe {
            k.pages
                .launch(s, Work::Items(n * page_lanes as usize), 0, &args)
        }?;
        // The padding: a few threads per response (a warp per response row-major).
        let lanes: u32 = if transposed { 8 } else { 32 };
        let args = BankPadArgs {
            n: n32,
            pad: Dev::of(&self.pad, s),
            out: Dev::of_mut(&mut self.out, s),
            transposed: tr,
            lanes,
        };
        // SAFETY: it writes inside the n response slots.
        unsafe { k.pad.launch(s, Work::Items(n * lanes as usize), 0, &args) }?;
        Ok(())
    }

    /// The `n` responses out of their slots into `rows` (on the device), one row of `row_bytes`
    /// (a multiple of 4, at most RESP_SLOT) per response, transposed back if need be.
    pub fn gather(
        &self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        n: usize,
        transposed: bool,
        row_bytes: usize,
        rows: &mut CudaSlice<u8>,
    ) -> Result<(), GpuError> {
        assert!(row_bytes.is_multiple_of(4) && row_bytes <= super::cuda::RESP_SLOT);
        assert!(rows.len() >= n * row_bytes);
        if n == 0 {
            return Ok(());
        }
        let words = (row_bytes / 4) as u32;
        let args = BankGatherArgs {
            n: n as u32,
            out: Dev::of(&self.out, s).cast(),
            transposed: transposed as i32,
            words,
            packed: Dev::of_mut(rows, s).cast(),
        };
        let grid = Work::Grid(words.div_ceil(32), (n as u32).div_ceil(32));
        // SAFETY: `rows` holds n x row_bytes (asserted above); the slots n responses.
        unsafe { k.gather.launch(s, grid, 0, &args) }?;
        Ok(())
    }

    /// The response lengths, on the device.
    pub fn out_lens(&self) -> &CudaSlice<u32> {
        &self.out_lens
    }
}

/// A harness over the parts for one cohort at a time on the context's default stream: the
/// GPU tests (results and responses read back and compared with the CPU twins) and the
/// in-process benchmarks (requests uploaded in the slot layout, as Rhythm's emulation).
pub struct GpuParser {
    stream: Arc<CudaStream>,
    kernels: Kernels,
    bufs: CohortBuffers,
    table: Option<SessionTable>,
    records: RecordSource,
    /// Requests uploaded, and their layout.
    n: usize,
    transposed: bool,
    /// Bytes the last upload copied (requests and lengths).
    pub uploaded: usize,
}

impl GpuParser {
    pub fn new(dev: &DeviceInfo, cap: usize) -> Result<GpuParser, GpuError> {
        let ctx = cohort_gpu::launch::context(dev)?;
        let kernels = Kernels::load(&ctx, dev)?;
        let stream = ctx.default_stream();
        Ok(GpuParser {
            bufs: CohortBuffers::new(&stream, cap)?,
            stream,
            kernels,
            table: None,
            records: RecordSource::Computed,
            n: 0,
            transposed: false,
            uploaded: 0,
        })
    }

    /// Adds the session table (`users` users, at most `max_sessions` live, tokens keyed by
    /// `secret`): what [`GpuParser::serve`] needs.
    pub fn with_sessions(
        mut self,
        users: u32,
        max_sessions: u32,
        secret: u64,
    ) -> Result<GpuParser, GpuError> {
        self.table = Some(SessionTable::new(
            &self.stream,
            users,
            max_sessions,
            secret,
        )?);
        Ok(self)
    }

    /// Reads the records from `records` (a placement's, built on this device) instead of
    /// computing them.
    pub fn with_records(mut self, records: &SharedRecords) -> Result<GpuParser, GpuError> {
        let cap = self.bufs.capacity();
        self.records = records.for_stream(self.stream.context(), &self.stream, cap)?;
        Ok(self)
    }

    /// Fixes the threads per page (None: by the cohort's size).
    pub fn set_page_lanes(&mut self, lanes: Option<u32>) -> Result<(), GpuError> {
        self.bufs.set_page_lanes(lanes)
    }

    /// Fixes the threads per request parsed (None: by the cohort's size).
    pub fn set_parse_lanes(&mut self, lanes: Option<u32>) -> Result<(), GpuError> {
        self.bufs.set_parse_lanes(lanes)
    }

    /// Records, sessions then pages for the parsed cohort (after [`GpuParser::launch`]),
    /// leaving the responses in GPU memory in the request layout.
    pub fn serve(&mut self) -> Result<(), GpuError> {
        let t = self.table.as_ref().expect("with_sessions first");
        let (k, s, n) = (&self.kernels, &self.stream, self.n);
        self.records.fetch(k, &mut self.bufs, s, n, t.users())?;
        self.bufs
            .serve(k, t, s, n, self.transposed, self.records.on_device())
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
        let bytes = host.len().min(self.n * super::cuda::RESP_SLOT);
        self.bufs.copy_out(&self.stream, &mut host[..bytes])
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        self.stream.context()
    }

    /// The kernels and the session table, for benchmarks that run cohorts of their own on
    /// other streams against the same sessions.
    pub fn parts(&self) -> (&Kernels, Option<&SessionTable>) {
        (&self.kernels, self.table.as_ref())
    }

    /// The cohort's responses, each as one byte string (un-transposed).
    pub fn responses(&self) -> Result<Vec<Vec<u8>>, GpuError> {
        let n = self.n;
        let slot = super::cuda::RESP_SLOT;
        let lens = self.stream.clone_dtoh(&self.bufs.out_lens.slice(0..n))?;
        let all = self.stream.clone_dtoh(&self.bufs.out.slice(0..n * slot))?;
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
        self.bufs.upload_slots(&self.stream, slots, lens)?;
        self.n = lens.len();
        self.transposed = transposed;
        self.uploaded = slots.len() + 4 * lens.len();
        Ok(())
    }

    /// Parses the uploaded cohort (asynchronously on the stream).
    pub fn launch(&mut self) -> Result<(), GpuError> {
        self.bufs
            .parse(&self.kernels, &self.stream, self.n, self.transposed)
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        Ok(self.stream.synchronize()?)
    }

    /// The parsed cohort, as the CPU twin returns it.
    pub fn results(&self) -> Result<Vec<Result<Parsed, Refusal>>, GpuError> {
        let n = self.n;
        let s = &self.stream;
        let b = &self.bufs;
        let refusal = s.clone_dtoh(&b.refusal.slice(0..n))?;
        let kind = s.clone_dtoh(&b.kind.slice(0..n))?;
        let has = s.clone_dtoh(&b.has_cookie.slice(0..n))?;
        let user = s.clone_dtoh(&b.cookie_user.slice(0..n))?;
        let token = s.clone_dtoh(&b.cookie_token.slice(0..n))?;
        let nums = s.clone_dtoh(&b.nums.slice(0..n * NUMS))?;
        let texts = s.clone_dtoh(&b.texts.slice(0..n * TEXTS * NAME))?;
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
