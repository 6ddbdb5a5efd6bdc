//! The bank as a backend of the GPU engines (gpu-cohort: Rhythm's cohorts; gpu-direct: one
//! request at a time). A request is the raw HTTP/1.1 request the HTTP port handed over; its
//! batch key is its page type read from the request line, so a cohort holds one type (the
//! threads of a warp then take the same branches and write the same offsets) - or every
//! type, with `Cohorts::Mixed`. Per cohort, on the slot's stream:
//!
//! copy in (requests packed end to end) -> `bank_unpack` (into slots, transposed or
//! row-major) -> `bank_parse` -> the records (`--bank-backend`: computed per thread; the
//! device's record table through `bank_fetch`; or memcached: `bank_fetch` names the users and
//! the cohort's first half ends; the slot's fetcher thread gets them in one multiget while
//! the control thread serves the other slots; `resume` copies them in and queues the rest) ->
//! `bank_sessions` (the device's one session table) ->
//! `bank_pages` + `bank_pad` -> `bank_gather` (responses back into rows of the cohort's
//! largest response) -> copy out (the rows and their lengths).
//!
//! Every answer is one memcpy from the copied-out rows; a response longer than its cohort's
//! bound would be an INTERNAL error, never a cut page.

use super::cuda::{HEADER_ROOM, RESP_SLOT};
use super::gpu::{CohortBuffers, Kernels, SessionTable};
use super::gpu_records::{RecordSource, SharedRecords};
use super::kinds::{Kind, KINDS};
use super::parse::MAX_REQUEST;
use super::store::Placement;
use bytes::Bytes;
use cohort_engine::BatchBackend;
use cohort_gpu::engine::{GpuBackend, PackedRows, Pinned, Resume, StreamBuffers};
use cohort_gpu::{DeviceInfo, GpuError};
use cohort_proto::{ErrorCode, ErrorPayload};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

/// How requests are grouped into cohorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cohorts {
    /// One page type per cohort (Rhythm).
    #[default]
    ByType,
    /// Any mix of types in a cohort (the baseline Rhythm's cohorts improve on).
    Mixed,
}

impl std::str::FromStr for Cohorts {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "type" => Ok(Cohorts::ByType),
            "mixed" => Ok(Cohorts::Mixed),
            _ => Err(format!("unknown cohort grouping {s:?} (type or mixed)")),
        }
    }
}

impl std::fmt::Display for Cohorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cohorts::ByType => "type",
            Cohorts::Mixed => "mixed",
        })
    }
}

#[derive(Debug, Clone)]
pub struct BankGpuConfig {
    pub users: u32,
    pub max_sessions: u32,
    /// The key of the session tokens (random per server unless given).
    pub secret: u64,
    /// Requests and responses transposed by words in GPU memory (Rhythm), else row-major.
    pub transposed: bool,
    pub cohorts: Cohorts,
    /// Where the records live.
    pub backend: Placement,
}

/// The page type a raw request's line names, read as the parser reads it (method, one
/// space, the path up to '?' or the next space); None for anything else, whose refusal
/// page the GPU parser writes.
pub fn route(req: &[u8]) -> Option<Kind> {
    let line = &req[..req.len().min(MAX_REQUEST)];
    let sp = line.iter().take(8).position(|&b| b == b' ')?;
    let target = &line[sp + 1..];
    let end = target
        .iter()
        .position(|&b| b == b' ' || b == b'?' || b == b'\r')?;
    Kind::from_path(&target[..end])
}

/// The largest response a request routed to `kind` can get, in whole words: its page and
/// header, which also covers every refusal page.
pub fn response_bound(kind: Option<Kind>) -> usize {
    kind.map_or(RESP_SLOT, |k| k.info().page_bytes + HEADER_ROOM)
}

/// The batch key of the cohort of `kind` (None: requests that name no page).
fn key_of(kind: Option<Kind>) -> u64 {
    kind.map_or(KINDS.len() as u64, |k| k as u64)
}

pub struct BankGpu {
    ctx: Arc<CudaContext>,
    kernels: Kernels,
    table: Arc<SessionTable>,
    records: SharedRecords,
    cfg: BankGpuConfig,
}

impl BankGpu {
    pub fn new(dev: &DeviceInfo, cfg: BankGpuConfig) -> Result<BankGpu, String> {
        let gpu = |e: GpuError| format!("bank on GPU {}: {e}", dev.ordinal);
        let ctx = cohort_gpu::launch::context(dev).map_err(gpu)?;
        let kernels = Kernels::load(&ctx, dev).map_err(gpu)?;
        let s = ctx.default_stream();
        let table = SessionTable::new(&s, cfg.users, cfg.max_sessions, cfg.secret).map_err(gpu)?;
        let records = SharedRecords::new(&cfg.backend, &s, cfg.users)?;
        // The tables are written on this stream and then used from the slots' streams.
        s.synchronize().map_err(|e| gpu(e.into()))?;
        Ok(BankGpu {
            ctx,
            kernels,
            table: Arc::new(table),
            records,
            cfg,
        })
    }
}

impl BatchBackend for BankGpu {
    /// Every request is taken: whatever is wrong with it is the GPU parser's to answer with
    /// its 4xx page (an over-long request is staged cut, with its true length).
    fn batch_key(&self, payload: &[u8]) -> Result<u64, ErrorPayload> {
        Ok(match self.cfg.cohorts {
            Cohorts::ByType => key_of(route(payload)),
            Cohorts::Mixed => 0,
        })
    }
}

impl GpuBackend for BankGpu {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn stream_buffers(
        &self,
        stream: &Arc<CudaStream>,
        cap: usize,
    ) -> Result<Box<dyn StreamBuffers>, GpuError> {
        let cap = cap.max(1);
        Ok(Box::new(BankSlot {
            kernels: self.kernels.clone(),
            table: self.table.clone(),
            records: self.records.for_stream(&self.ctx, stream, cap)?,
            transposed: self.cfg.transposed,
            requests: PackedRows::new(&self.ctx, stream, cap, MAX_REQUEST)?,
            bufs: CohortBuffers::new(stream, cap)?,
            dev_rows: stream.alloc_zeros(cap * RESP_SLOT)?,
            rows: (0..ROW_BUFFERS)
                .map(|_| {
                    Ok(Arc::new(SharedRows(Pinned::for_reads(
                        &self.ctx,
                        cap * RESP_SLOT,
                    )?)))
                })
                .collect::<Result<_, GpuError>>()?,
            current: 0,
            host_out_lens: Pinned::for_reads(&self.ctx, cap)?,
            row_bytes: 0,
            half: Half::Idle,
        }))
    }

    fn device_bytes(&self) -> usize {
        self.table.device_bytes() + self.records.device_bytes()
    }

    /// One key per page type, and one for requests that name no page.
    fn batch_keys(&self) -> usize {
        match self.cfg.cohorts {
            Cohorts::ByType => KINDS.len() + 1,
            Cohorts::Mixed => 1,
        }
    }

    /// The bytes copied in and out vary per cohort: no graph replays them.
    fn graphable(&self) -> bool {
        false
    }
}

/// Pinned result buffers per slot: one being copied into, pages of earlier cohorts still
/// being written to their sockets in the others. With fewer free than two, pages are copied
/// out instead of lent, so a client that does not read its page never stalls the slot.
const ROW_BUFFERS: usize = 3;

/// Copied-out responses, lent to the HTTP side as `Bytes` that keep the buffer alive.
struct SharedRows(Pinned<u8>);

// SAFETY: a `SharedRows` behind an `Arc` is only read (`&`): the pages it lends are the bytes
// a completed copy-out wrote. It is written only through `Arc::get_mut`, i.e. while no page
// refers to it.
unsafe impl Sync for SharedRows {}

/// One page inside a result buffer: the owner `Bytes` keeps while the page is sent.
struct Page {
    rows: Arc<SharedRows>,
    at: usize,
    len: usize,
}

impl AsRef<[u8]> for Page {
    fn as_ref(&self) -> &[u8] {
        &self.rows.0.as_slice()[self.at..self.at + self.len]
    }
}

/// One stream's cohort: pinned staging, the device buffers, the copied-out rows.
struct BankSlot {
    kernels: Kernels,
    table: Arc<SessionTable>,
    records: RecordSource,
    transposed: bool,
    requests: PackedRows,
    bufs: CohortBuffers,
    dev_rows: CudaSlice<u8>,
    /// Pinned buffers the responses are copied out into, `current` the one of the cohort in
    /// the slot: its pages are sent from there by reference while the next cohort copies
    /// out into a buffer no page holds any more.
    rows: Vec<Arc<SharedRows>>,
    current: usize,
    host_out_lens: Pinned<u32>,
    /// The largest response bound among the staged requests: a row's bytes.
    row_bytes: usize,
    /// Where a cohort whose records come through the host stands.
    half: Half,
}

/// A cohort between its two halves (memcached records only).
#[derive(Clone, Copy)]
enum Half {
    /// Nothing pending: `resume` has nothing to do.
    Idle,
    /// Parsed, the wanted users on their way down.
    Asked { rows: usize },
    /// The slot's fetcher is looking the users up.
    LookingUp { rows: usize },
}

impl StreamBuffers for BankSlot {
    fn stage(&mut self, _key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        if row == 0 {
            self.row_bytes = 0;
        }
        // At most a slot's bytes per request, so a full cohort fits cap x MAX_REQUEST; the
        // length recorded is the whole request's, which the parser refuses as too long.
        let take = payload.len().min(MAX_REQUEST);
        let len = payload.len().min(u32::MAX as usize) as u32;
        self.requests.stage(row, &payload[..take], len);
        self.row_bytes = self.row_bytes.max(response_bound(route(payload)));
        Ok(())
    }

    fn enqueue(&mut self, s: &Arc<CudaStream>, _key: u64, rows: usize) -> Result<(), GpuError> {
        self.requests.upload(s, rows, self.bufs.lens_mut())?;
        let (k, tr) = (&self.kernels, self.transposed);
        let (bytes, offs) = (self.requests.dev_bytes(), self.requests.dev_offs());
        self.bufs.unpack(k, s, rows, bytes, offs, tr)?;
        self.bufs.parse(k, s, rows, tr)?;
        let users = self.table.users();
        self.half = Half::Idle;
        if self.records.begin(k, &mut self.bufs, s, rows, users)? {
            // The records come through the host: `resume` goes on once the wanted users
            // are down.
            self.half = Half::Asked { rows };
            return Ok(());
        }
        self.finish(s, rows)
    }

    fn resume(&mut self, s: &Arc<CudaStream>) -> Result<Resume, GpuError> {
        let Some(m) = self.records.memcached() else {
            return Ok(Resume::Done);
        };
        match self.half {
            Half::Idle => Ok(Resume::Done),
            Half::Asked { rows } => {
                m.start()?;
                self.half = Half::LookingUp { rows };
                Ok(Resume::Waiting)
            }
            Half::LookingUp { rows } => {
                if !m.poll()? {
                    return Ok(Resume::Waiting);
                }
                m.upload(&mut self.bufs, s)?;
                self.half = Half::Idle;
                self.finish(s, rows)?;
                Ok(Resume::Enqueued)
            }
        }
    }

    fn answer(&mut self, _key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let (at, len) = self.row_span(row)?;
        out.extend_from_slice(&self.rows[self.current].0.as_slice()[at..at + len]);
        Ok(())
    }

    /// The page lent from the pinned buffer the GPU's copy wrote, while another buffer is
    /// free for the slot's next cohort (no page can take that one before then: only this
    /// thread lends).
    fn answer_shared(&mut self, _key: u64, row: usize) -> Option<Result<Bytes, ErrorPayload>> {
        let spare = (0..self.rows.len())
            .any(|i| i != self.current && Arc::strong_count(&self.rows[i]) == 1);
        if !spare {
            return None;
        }
        Some(self.row_span(row).map(|(at, len)| {
            Bytes::from_owner(Page {
                rows: self.rows[self.current].clone(),
                at,
                len,
            })
        }))
    }
}

impl BankSlot {
    /// Where row `row`'s response lies in the current result buffer.
    fn row_span(&self, row: usize) -> Result<(usize, usize), ErrorPayload> {
        let len = self.host_out_lens.as_slice()[row] as usize;
        if len > self.row_bytes {
            return Err(ErrorPayload::new(
                ErrorCode::Internal,
                format!(
                    "a {len}-byte response over its cohort's {}-byte bound",
                    self.row_bytes
                ),
            ));
        }
        Ok((row * self.row_bytes, len))
    }

    /// The cohort's second half on `s`, its records found: sessions, pages, the gather,
    /// the copies out.
    fn finish(&mut self, s: &Arc<CudaStream>, rows: usize) -> Result<(), GpuError> {
        let (k, tr) = (&self.kernels, self.transposed);
        let recs = self.records.on_device();
        self.bufs.serve(k, &self.table, s, rows, tr, recs)?;
        let out = rows * self.row_bytes;
        self.bufs
            .gather(k, s, rows, tr, self.row_bytes, &mut self.dev_rows)?;
        s.memcpy_dtoh(
            &self.bufs.out_lens().slice(0..rows),
            &mut self.host_out_lens.as_mut_slice()[..rows],
        )?;
        // A buffer no page refers to any more (`answer_shared` lends only while one exists).
        let free = (0..self.rows.len())
            .find(|&i| Arc::strong_count(&self.rows[i]) == 1)
            .ok_or_else(|| GpuError::Invalid("every result buffer is lent out".into()))?;
        self.current = free;
        let rows = Arc::get_mut(&mut self.rows[free]).expect("no page refers to it");
        s.memcpy_dtoh(
            &self.dev_rows.slice(0..out),
            &mut rows.0.as_mut_slice()[..out],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_route_by_their_request_line() {
        let r = |s: &str| route(s.as_bytes());
        assert_eq!(r("GET /bank/profile HTTP/1.1\r\n\r\n"), Some(Kind::Profile));
        assert_eq!(
            r("GET /bank/transfer?x=1 HTTP/1.1\r\n"),
            Some(Kind::Transfer)
        );
        assert_eq!(r("POST /bank/login HTTP/1.1\r\n"), Some(Kind::Login));
        assert_eq!(r("GET /bank/nope HTTP/1.1\r\n"), None);
        assert_eq!(r("garbage"), None);
        assert_eq!(r(""), None);
        assert_eq!(r("GET /bank/profile"), None);
        // The cohort of a request that names no page holds the largest responses.
        assert_eq!(response_bound(None), RESP_SLOT);
        for k in Kind::all() {
            let b = response_bound(Some(k));
            assert!(b.is_multiple_of(4) && b <= RESP_SLOT);
        }
    }

    /// Whatever the parser makes of a request, its response fits the bound of the cohort
    /// the request line routed it to (the CPU twin's responses over random requests).
    #[test]
    fn every_response_fits_its_cohorts_bound() {
        use rand::{Rng, SeedableRng};
        let bank = super::super::Bank::new(&super::super::BankConfig {
            users: 100,
            max_sessions: 100,
            secret: 7,
        });
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut out = Vec::new();
        for i in 0..3000u32 {
            let kind = super::super::client::draw(&mut rng);
            let user = 1 + i % 100;
            let cookie = bank.sessions.login(user).ok();
            let mut req = super::super::client::step(kind, user, &mut rng).raw(cookie);
            if rng.gen_bool(0.3) {
                let at = rng.gen_range(0..req.len());
                req[at] = rng.gen();
            }
            bank.serve(&req, &mut out);
            assert!(
                out.len() <= response_bound(route(&req)),
                "{} bytes for {:?}",
                out.len(),
                String::from_utf8_lossy(&req[..req.len().min(60)])
            );
        }
    }
}
