//! facever on the persistent engine: Lynx's GPU-centric face verification (sec. 6.4) with no
//! launch per request (`kernels/facever_persistent.cu` states the GPU's half).
//!
//! The GPU's worker posts each request's fetch into the slot's mailbox in mapped host memory;
//! this module's client-queue thread (one host core, as Lynx's) scans the mailboxes, fetches
//! every waiting person's reference in one memcached multiget, writes each into its slot's
//! row of mapped memory and appends a reply {slot, fetch number, status} to a ring that one
//! relay warp on the GPU hands on in device memory. Every index in host memory has one
//! writer (the H200 has no atomics on mapped memory the host also touches): a mailbox its
//! slot's worker, the reply ring and the references this thread, the relay's progress the
//! relay. A missing person gets NOT_FOUND, memcached gone UNAVAILABLE, request by request.
//! Only the GPU-centric design runs here: a host-centric persistent kernel would wait for the
//! host before it could start, which is the gpu engines' host design.

use super::db::FaceDb;
pub use super::kernels::FaceverArgs;
use super::kernels::{RELAY, THREADS, WORKER};
use super::lbp::{self, BINS};
use cohort_gpu::persistent::rt::addr;
use cohort_gpu::persistent::{
    one_stage_blocks, rx_copy_bytes, Ask, Loaded, MappedMemory, PersistentBackend, Prepared, Stage,
};
use cohort_gpu::{DeviceInfo, GpuError};
use cohort_mq::RingMemory;
use cohort_proto::ErrorCode;
use cudarc::driver::{CudaContext, CudaSlice};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct FaceverPersistent {
    loaded: Loaded,
    db: Arc<FaceDb>,
    threshold: f32,
    sms: usize,
}

impl FaceverPersistent {
    pub fn new(
        dev: &DeviceInfo,
        db: Arc<FaceDb>,
        threshold: f32,
    ) -> Result<FaceverPersistent, GpuError> {
        Ok(FaceverPersistent {
            loaded: Loaded::open(dev, super::kernels::persistent())?,
            db,
            threshold,
            sms: dev.sms.max(1) as usize,
        })
    }
}

/// What the kernels point to, kept alive with the engine; dropping it stops the client queue
/// (after the engine has stopped the kernels).
struct Held {
    _device: Vec<CudaSlice<u32>>,
    _probes: CudaSlice<f32>,
    _table: CudaSlice<u8>,
    _client: ClientQueueThread,
}

impl PersistentBackend for FaceverPersistent {
    fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    fn prepare(&self, ask: Ask) -> Result<Prepared, GpuError> {
        // Four workers per SM by default: each waits a memcached round trip per batch, so
        // the requests in flight, not the SMs' arithmetic, bound the rate.
        let workers = one_stage_blocks(ask.blocks, 4 * self.sms, "facever")?;
        let rx_copy = rx_copy_bytes("facever", super::REQUEST_BYTES, ask.rx_stride)?;
        let s = self.loaded.ctx.default_stream();
        let table = s.clone_htod(&lbp::uniform_table())?;
        let probes = s.alloc_zeros::<f32>(ask.slots * BINS)?;
        // fetches, ready, status (per slot), the relay's tail.
        let device: Vec<CudaSlice<u32>> = vec![
            s.alloc_zeros::<u32>(ask.slots)?,
            s.alloc_zeros::<u32>(ask.slots)?,
            s.alloc_zeros::<u32>(ask.slots)?,
            s.alloc_zeros::<u32>(1)?,
        ];
        s.synchronize()?;
        let mailboxes = Mailboxes::new(&self.loaded.ctx, ask.slots)?;
        let args = FaceverArgs {
            table: addr(&table, &s),
            probes: addr(&probes, &s),
            fetches: addr(&device[0], &s),
            ready: addr(&device[1], &s),
            status: addr(&device[2], &s),
            relay_tail: addr(&device[3], &s),
            ask_person: mailboxes.persons.device_ptr(),
            ask_fetch: mailboxes.fetches.device_ptr(),
            refs: mailboxes.refs.device_ptr(),
            replies: mailboxes.replies.device_ptr(),
            replies_cap: mailboxes.replies_cap as u64,
            relay_seen: mailboxes.relay_seen.device_ptr(),
            threshold: self.threshold.to_bits() as u64,
        };
        let client = ClientQueueThread::spawn(mailboxes, self.db.clone())?;
        Ok(Prepared {
            args: args.to_svc_args(),
            stages: vec![
                Stage {
                    kernel: WORKER.name,
                    blocks: workers,
                    threads: THREADS as u32,
                    dyn_smem: 0,
                    elsewhere: None,
                },
                Stage {
                    kernel: RELAY.name,
                    blocks: 1,
                    threads: 32,
                    dyn_smem: 0,
                    elsewhere: None,
                },
            ],
            pipe_caps: vec![ask.slots],
            rx_copy,
            keep: Box::new(Held {
                _device: device,
                _probes: probes,
                _table: table,
                _client: client,
            }),
        })
    }
}

/// The mapped memory the GPU and the client-queue thread share.
struct Mailboxes {
    slots: usize,
    /// Per slot: the person its fetch asks for, then the fetch number (the GPU's writes).
    persons: MappedMemory,
    fetches: MappedMemory,
    /// Per slot: [`BINS`] f32, the reference (this thread's writes).
    refs: MappedMemory,
    /// `replies_cap` x {stamp, slot, fetch, status} (this thread's writes; stamp last).
    replies: MappedMemory,
    replies_cap: usize,
    /// Replies the relay warp has taken (its write).
    relay_seen: MappedMemory,
}

impl Mailboxes {
    fn new(ctx: &Arc<CudaContext>, slots: usize) -> Result<Mailboxes, GpuError> {
        // A slot has at most one reply unread (its next request waits for it): `slots`
        // entries never fill unless a restart abandons some, and then the thread waits for
        // the relay.
        let replies_cap = slots.next_power_of_two();
        Ok(Mailboxes {
            slots,
            persons: MappedMemory::zeroed(ctx, 4 * slots)?,
            fetches: MappedMemory::zeroed(ctx, 4 * slots)?,
            refs: MappedMemory::zeroed(ctx, 4 * BINS * slots)?,
            replies: MappedMemory::zeroed(ctx, 16 * replies_cap)?,
            replies_cap,
            relay_seen: MappedMemory::zeroed(ctx, 64)?,
        })
    }

    fn word(m: &MappedMemory, i: usize) -> &AtomicU32 {
        debug_assert!(4 * (i + 1) <= m.len());
        // SAFETY: in bounds (asserted by the callers' geometry), 4-aligned (page-aligned
        // base); AtomicU32 has u32's layout, and the memory lives as long as `m`.
        unsafe { &*(m.host_ptr() as *const AtomicU32).add(i) }
    }

    /// Slot `s`'s reference row.
    fn write_ref(&self, s: usize, h: &[f32]) {
        assert!(s < self.slots && h.len() == BINS);
        // SAFETY: row `s` of `refs` is in bounds; the GPU reads it only after the reply
        // naming this fetch is released below.
        unsafe {
            std::ptr::copy_nonoverlapping(
                h.as_ptr(),
                (self.refs.host_ptr() as *mut f32).add(s * BINS),
                BINS,
            )
        }
    }
}

/// Lynx's client-queue thread for one device: the memcached I/O of every fetch the GPU posts.
struct ClientQueueThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ClientQueueThread {
    fn spawn(m: Mailboxes, db: Arc<FaceDb>) -> Result<ClientQueueThread, GpuError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("facever-client-queue".into())
            .spawn(move || serve_fetches(&m, &db, &flag))
            .map_err(|e| GpuError::Invalid(format!("spawning the client-queue thread: {e}")))?;
        Ok(ClientQueueThread {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ClientQueueThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// After memcached failed, fetches are answered UNAVAILABLE at once for this long before it
/// is tried again: a failing call costs up to the pool's connect timeout, and a thread that
/// paid it on every batch would hold the waiting requests for seconds (measured on the H200:
/// 24622 of 800000 requests went unanswered within the client's 2 s while memcached was
/// killed under 100 K/s, before this).
const RETRY_AFTER: Duration = Duration::from_millis(50);

/// Polls for this long after the last fetch before sleeping between scans.
const SPIN: Duration = Duration::from_millis(2);
const NAP: Duration = Duration::from_micros(50);

fn serve_fetches(m: &Mailboxes, db: &FaceDb, stop: &AtomicBool) {
    // The fetch number last taken per slot: a mailbox holding another is a new fetch.
    let mut taken = vec![0u32; m.slots];
    let mut pending: Vec<(usize, u32, u32)> = Vec::with_capacity(m.slots);
    let mut persons = Vec::with_capacity(m.slots);
    let mut head: u32 = 0;
    let mut last_work = Instant::now();
    let mut failing = false;
    let mut retry_at = Instant::now();
    while !stop.load(Ordering::Acquire) {
        pending.clear();
        for (s, seen) in taken.iter_mut().enumerate() {
            let f = Mailboxes::word(&m.fetches, s).load(Ordering::Acquire);
            if f != *seen {
                *seen = f;
                let person = Mailboxes::word(&m.persons, s).load(Ordering::Relaxed);
                pending.push((s, f, person));
            }
        }
        if pending.is_empty() {
            if last_work.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(NAP);
            }
            continue;
        }
        last_work = Instant::now();
        persons.clear();
        persons.extend(pending.iter().map(|p| p.2));
        let got = if failing && Instant::now() < retry_at {
            Err("memcached failed moments ago; not retried yet".to_string())
        } else {
            db.get_many(&persons)
        };
        if got.is_err() && Instant::now() >= retry_at {
            retry_at = Instant::now() + RETRY_AFTER;
        }
        match (&got, failing) {
            (Err(e), false) => {
                tracing::warn!(error = %e, "facever: memcached unreachable; answering UNAVAILABLE")
            }
            (Ok(_), true) => tracing::info!("facever: memcached reachable again"),
            _ => {}
        }
        failing = got.is_err();
        for &(s, fetch, person) in &pending {
            let status = match &got {
                Ok(map) => match map.get(&person) {
                    Some(h) => {
                        m.write_ref(s, h);
                        0
                    }
                    None => ErrorCode::NotFound as u32,
                },
                Err(_) => ErrorCode::Unavailable as u32,
            };
            // Room in the ring: the relay must have taken the entry this one replaces.
            while head.wrapping_sub(Mailboxes::word(&m.relay_seen, 0).load(Ordering::Acquire))
                >= m.replies_cap as u32
            {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                std::hint::spin_loop();
            }
            let e = 4 * (head as usize & (m.replies_cap - 1));
            Mailboxes::word(&m.replies, e + 1).store(s as u32, Ordering::Relaxed);
            Mailboxes::word(&m.replies, e + 2).store(fetch, Ordering::Relaxed);
            Mailboxes::word(&m.replies, e + 3).store(status, Ordering::Relaxed);
            // Last, released: the reference and the entry before the stamp.
            Mailboxes::word(&m.replies, e).store(head.wrapping_add(1), Ordering::Release);
            head = head.wrapping_add(1);
        }
    }
}
