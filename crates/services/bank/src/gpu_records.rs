//! The bank's stored records on the GPU path. Two placements besides computing them per
//! thread (Rhythm's Titan B and A):
//!
//! - [`RecordTable`]: every user's record in GPU memory behind an open-addressing hash table
//!   (keys by `mix(user)`, linear probing; built on the host, probed by `bank_fetch`);
//! - [`MemcachedStaging`]: per cohort, `bank_fetch` names the users whose records the
//!   requests read, the host fetches them from memcached in one multiget and copies them in
//!   beside the requests; the page kernels then read them as they read the table's.
//!
//! Either way a request whose record is missing gets the 503 page (`Refusal::Unavailable`).

use super::besim::mix;
use super::gpu::{CohortBuffers, DeviceRecords, Kernels};
use super::record;
use super::store::{Memcached, Placement};
use cohort_gpu::engine::Pinned;
use cohort_gpu::GpuError;
use cohort_service_api::memcached::ClientQueue;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use rayon::prelude::*;
use std::sync::Arc;

/// A record index no request has (the kernels' BANK_REC_NONE).
pub const NONE: u32 = u32::MAX;

/// Connections a device's slots share to memcached: the multiget pieces of several slots'
/// cohorts at once (each slot's fetcher splits its cohort into pieces on parallel
/// connections).
const FETCH_CONNECTIONS: u32 = 16;

/// Users whose records are encoded and copied up at a time while building the table.
const BUILD_CHUNK: usize = 1 << 16;

/// The host side of the hash table: `keys[s]` a user (0 empty), `vals[s]` its record index
/// (user - 1). At most half full: short probe runs.
pub fn host_table(users: u32) -> (Vec<u32>, Vec<u32>) {
    let cap = (2 * users as usize).next_power_of_two().max(1024);
    let (mut keys, mut vals) = (vec![0u32; cap], vec![NONE; cap]);
    for u in 1..=users {
        let mut s = mix(u as u64) as usize & (cap - 1);
        while keys[s] != 0 {
            s = (s + 1) & (cap - 1);
        }
        keys[s] = u;
        vals[s] = u - 1;
    }
    (keys, vals)
}

/// The probe `bank_fetch` runs, on the host (the CPU twin of the lookup).
pub fn lookup(keys: &[u32], vals: &[u32], user: u32) -> u32 {
    let cap = keys.len();
    let h = mix(user as u64) as usize & (cap - 1);
    for p in 0..cap {
        let s = (h + p) & (cap - 1);
        if keys[s] == user {
            return vals[s];
        }
        if keys[s] == 0 {
            break;
        }
    }
    NONE
}

/// Every user's record in GPU memory, behind the hash table.
pub struct RecordTable {
    pub(crate) keys: CudaSlice<u32>,
    pub(crate) vals: CudaSlice<u32>,
    pub(crate) cap: u64,
    pub(crate) recs: CudaSlice<u8>,
}

impl RecordTable {
    /// Encodes users 1..=users' records (in parallel, a chunk at a time) and copies them and
    /// the table to the device on `stream` (synchronised before it returns).
    pub fn build(stream: &Arc<CudaStream>, users: u32) -> Result<RecordTable, GpuError> {
        let (keys, vals) = host_table(users);
        let n = users as usize;
        let mut recs = stream.alloc_zeros::<u8>(n * record::BYTES)?;
        let mut host = vec![0u8; BUILD_CHUNK.min(n) * record::BYTES];
        for first in (0..n).step_by(BUILD_CHUNK) {
            let count = BUILD_CHUNK.min(n - first);
            let bytes = count * record::BYTES;
            host[..bytes]
                .par_chunks_mut(record::BYTES)
                .enumerate()
                .for_each(|(i, r)| record::encode((first + i + 1) as u32, r));
            let at = first * record::BYTES;
            stream.memcpy_htod(&host[..bytes], &mut recs.slice_mut(at..at + bytes))?;
            // The chunk's host bytes are reused next: wait for the copy.
            stream.synchronize()?;
        }
        let table = RecordTable {
            cap: keys.len() as u64,
            keys: stream.clone_htod(&keys)?,
            vals: stream.clone_htod(&vals)?,
            recs,
        };
        stream.synchronize()?;
        Ok(table)
    }

    pub fn device_bytes(&self) -> usize {
        self.cap as usize * 8 + self.recs.len()
    }
}

/// The host half of a cohort's memcached fetch: the wanted users (copied down), the
/// records found and their indices (staged for the copy in). It moves to the slot's fetcher
/// thread for the lookup and back, so the buffers have one user at a time.
struct HostStage {
    want: Pinned<u32>,
    recs: Pinned<u8>,
    at: Pinned<u32>,
    /// Requests in the cohort, and records staged for them.
    n: usize,
    staged: usize,
}

impl HostStage {
    /// Fetches the wanted users' records (one multiget; the backend call goes through the
    /// host) and stages them. A record memcached does not give stays NONE (503 page).
    fn lookup(&mut self, memcached: &Memcached) {
        let want = &self.want.as_slice()[..self.n];
        let users: Vec<u32> = want.iter().copied().filter(|&u| u != 0).collect();
        let got = if users.is_empty() {
            Default::default()
        } else {
            memcached.get_many(&users).unwrap_or_else(|e| {
                tracing::debug!("bank backend: {e}");
                Default::default()
            })
        };
        let (recs, at) = (self.recs.as_mut_slice(), self.at.as_mut_slice());
        let mut staged = 0usize;
        for (r, &u) in want.iter().enumerate() {
            at[r] = match got.get(&u) {
                Some(v) if u != 0 => {
                    recs[staged * record::BYTES..(staged + 1) * record::BYTES].copy_from_slice(v);
                    staged += 1;
                    staged as u32 - 1
                }
                _ => NONE,
            };
        }
        self.staged = staged;
    }
}

/// One stream's cohorts' records fetched from memcached and staged beside their requests.
/// Per cohort: [`MemcachedStaging::ask`] copies the wanted users down, then either
/// [`MemcachedStaging::fetch_here`] (waits: the harness) or [`MemcachedStaging::start`] +
/// [`MemcachedStaging::poll`] (the slot's fetcher looks them up: the engines), then
/// [`MemcachedStaging::upload`] copies the records in.
pub struct MemcachedStaging {
    memcached: Arc<Memcached>,
    /// None while the fetcher holds it.
    host: Option<HostStage>,
    fetcher: ClientQueue<HostStage>,
    pub(crate) dev_recs: CudaSlice<u8>,
}

impl MemcachedStaging {
    pub fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        memcached: Arc<Memcached>,
        cap: usize,
    ) -> Result<MemcachedStaging, GpuError> {
        Ok(MemcachedStaging {
            fetcher: {
                let m = memcached.clone();
                ClientQueue::spawn("bank-fetch", move |stage: &mut HostStage| stage.lookup(&m))
                    .map_err(GpuError::Invalid)?
            },
            memcached,
            host: Some(HostStage {
                want: Pinned::for_reads(ctx, cap)?,
                recs: Pinned::for_uploads(ctx, cap * record::BYTES)?,
                at: Pinned::for_uploads(ctx, cap)?,
                n: 0,
                staged: 0,
            }),
            dev_recs: stream.alloc_zeros(cap * record::BYTES)?,
        })
    }

    fn host(&mut self) -> Result<&mut HostStage, GpuError> {
        self.host
            .as_mut()
            .ok_or_else(|| GpuError::Invalid("the memcached fetcher kept a cohort".into()))
    }

    /// After `bank_fetch` on `s`: copies the `n` wanted users down (asynchronously).
    pub fn ask(
        &mut self,
        bufs: &CohortBuffers,
        s: &Arc<CudaStream>,
        n: usize,
    ) -> Result<(), GpuError> {
        let host = self.host()?;
        host.n = n;
        host.staged = 0;
        if n > 0 {
            s.memcpy_dtoh(&bufs.want().slice(0..n), &mut host.want.as_mut_slice()[..n])?;
        }
        Ok(())
    }

    /// Waits for the copy `ask` queued on `s`, looks the users up on this thread and copies
    /// the records in.
    pub fn fetch_here(
        &mut self,
        bufs: &mut CohortBuffers,
        s: &Arc<CudaStream>,
    ) -> Result<(), GpuError> {
        s.synchronize()?;
        let m = self.memcached.clone();
        self.host()?.lookup(&m);
        self.upload(bufs, s)
    }

    /// Hands the cohort's lookup to the slot's fetcher (after the copy `ask` queued has
    /// completed).
    pub fn start(&mut self) -> Result<(), GpuError> {
        let host = self.host.take().ok_or_else(|| {
            GpuError::Invalid("a memcached lookup started twice for one cohort".into())
        })?;
        self.fetcher.start(host).map_err(|(stage, msg)| {
            // The stage comes back with the error: the slot stays usable.
            self.host = Some(stage);
            GpuError::Invalid(format!("the memcached fetcher is {msg}"))
        })
    }

    /// Whether the lookup `start` handed over is done (never blocks).
    pub fn poll(&mut self) -> Result<bool, GpuError> {
        if self.host.is_some() {
            return Ok(true);
        }
        match self.fetcher.poll().map_err(GpuError::Invalid)? {
            Some(stage) => {
                self.host = Some(stage);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Copies the looked-up records and their indices in on `s`.
    pub fn upload(
        &mut self,
        bufs: &mut CohortBuffers,
        s: &Arc<CudaStream>,
    ) -> Result<(), GpuError> {
        let host = self
            .host
            .as_ref()
            .ok_or_else(|| GpuError::Invalid("uploading records still being looked up".into()))?;
        let (n, bytes) = (host.n, host.staged * record::BYTES);
        if bytes > 0 {
            s.memcpy_htod(
                &host.recs.as_slice()[..bytes],
                &mut self.dev_recs.slice_mut(0..bytes),
            )?;
        }
        if n > 0 {
            s.memcpy_htod(
                &host.at.as_slice()[..n],
                &mut bufs.rec_at_mut().slice_mut(0..n),
            )?;
        }
        Ok(())
    }
}

/// A placement's records as a device holds them for all its streams.
#[derive(Clone)]
pub enum SharedRecords {
    Computed,
    Table(Arc<RecordTable>),
    Memcached(Arc<Memcached>),
}

impl SharedRecords {
    /// Builds the table (gpu) or connects to memcached and loads it unless it holds the
    /// records already.
    pub fn new(
        placement: &Placement,
        stream: &Arc<CudaStream>,
        users: u32,
    ) -> Result<SharedRecords, String> {
        Ok(match placement {
            Placement::Computed => SharedRecords::Computed,
            Placement::Gpu => SharedRecords::Table(Arc::new(
                RecordTable::build(stream, users)
                    .map_err(|e| format!("bank: building the GPU record table: {e}"))?,
            )),
            Placement::Memcached(addr) => {
                let m = Memcached::connect(addr, FETCH_CONNECTIONS)
                    .map_err(|e| format!("bank: {e}"))?;
                m.load(users).map_err(|e| format!("bank: {e}"))?;
                SharedRecords::Memcached(Arc::new(m))
            }
        })
    }

    /// One stream's view (memcached: its own staging for cohorts of up to `cap`).
    pub fn for_stream(
        &self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        cap: usize,
    ) -> Result<RecordSource, GpuError> {
        Ok(match self {
            SharedRecords::Computed => RecordSource::Computed,
            SharedRecords::Table(t) => RecordSource::Table(t.clone()),
            SharedRecords::Memcached(m) => RecordSource::Memcached(Box::new(
                MemcachedStaging::new(ctx, stream, m.clone(), cap)?,
            )),
        })
    }

    pub fn device_bytes(&self) -> usize {
        match self {
            SharedRecords::Table(t) => t.device_bytes(),
            _ => 0,
        }
    }
}

/// Where one stream's cohorts find their records.
pub enum RecordSource {
    Computed,
    Table(Arc<RecordTable>),
    Memcached(Box<MemcachedStaging>),
}

impl RecordSource {
    /// The fetch stage of `n` parsed requests on `s`, waiting for memcached on this thread
    /// (the harness): nothing (computed), the table lookup, or the wanted users' records
    /// fetched from memcached and copied in.
    pub fn fetch(
        &mut self,
        k: &Kernels,
        bufs: &mut CohortBuffers,
        s: &Arc<CudaStream>,
        n: usize,
        users: u32,
    ) -> Result<(), GpuError> {
        if self.begin(k, bufs, s, n, users)? {
            if let Some(m) = self.memcached() {
                m.fetch_here(bufs, s)?;
            }
        }
        Ok(())
    }

    /// Queues the fetch stage's GPU part of `n` parsed requests on `s`. True when the
    /// records must still come through the host (memcached: the wanted users are being
    /// copied down; continue with [`RecordSource::memcached`]'s `start`, `poll`, `upload`).
    pub fn begin(
        &mut self,
        k: &Kernels,
        bufs: &mut CohortBuffers,
        s: &Arc<CudaStream>,
        n: usize,
        users: u32,
    ) -> Result<bool, GpuError> {
        match self {
            RecordSource::Computed => Ok(false),
            RecordSource::Table(t) => bufs.fetch(k, s, n, users, Some(t)).map(|()| false),
            RecordSource::Memcached(m) => {
                bufs.fetch(k, s, n, users, None)?;
                m.ask(bufs, s, n)?;
                Ok(true)
            }
        }
    }

    pub fn memcached(&mut self) -> Option<&mut MemcachedStaging> {
        match self {
            RecordSource::Memcached(m) => Some(m),
            _ => None,
        }
    }

    pub fn on_device(&self) -> DeviceRecords<'_> {
        match self {
            RecordSource::Computed => DeviceRecords::Computed,
            RecordSource::Table(t) => DeviceRecords::Table(t),
            RecordSource::Memcached(m) => DeviceRecords::Staged(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_finds_every_user_and_no_other() {
        for users in [1u32, 7, 1000, 50_000] {
            let (keys, vals) = host_table(users);
            assert!(keys.len().is_power_of_two() && keys.len() >= 2 * users as usize);
            for u in 1..=users {
                assert_eq!(lookup(&keys, &vals, u), u - 1, "user {u} of {users}");
            }
            for u in [users + 1, users + 1000, u32::MAX] {
                assert_eq!(lookup(&keys, &vals, u), NONE);
            }
        }
    }
}
