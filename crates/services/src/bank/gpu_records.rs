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
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use rayon::prelude::*;
use std::sync::Arc;

/// A record index no request has (the kernels' BANK_REC_NONE).
pub const NONE: u32 = u32::MAX;

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

/// One cohort's records fetched from memcached and staged beside its requests.
pub struct MemcachedStaging {
    memcached: Arc<Memcached>,
    host_want: Pinned<u32>,
    host_recs: Pinned<u8>,
    host_at: Pinned<u32>,
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
            memcached,
            host_want: Pinned::for_reads(ctx, cap)?,
            host_recs: Pinned::for_uploads(ctx, cap * record::BYTES)?,
            host_at: Pinned::for_uploads(ctx, cap)?,
            dev_recs: stream.alloc_zeros(cap * record::BYTES)?,
        })
    }

    /// After `bank_fetch` on `s`: waits for the cohort's wanted users, fetches their records
    /// (one multiget; the backend call goes through the host), stages them and copies them
    /// and their indices in on `s`. A record memcached does not give stays NONE (503 page).
    pub fn fetch(
        &mut self,
        bufs: &mut CohortBuffers,
        s: &Arc<CudaStream>,
        n: usize,
    ) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        s.memcpy_dtoh(
            &bufs.want().slice(0..n),
            &mut self.host_want.as_mut_slice()[..n],
        )?;
        s.synchronize()?;
        let want = &self.host_want.as_slice()[..n];
        let users: Vec<u32> = want.iter().copied().filter(|&u| u != 0).collect();
        let got = if users.is_empty() {
            Default::default()
        } else {
            self.memcached.get_many(&users).unwrap_or_else(|e| {
                tracing::debug!("bank backend: {e}");
                Default::default()
            })
        };
        let (recs, at) = (self.host_recs.as_mut_slice(), self.host_at.as_mut_slice());
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
        let bytes = staged * record::BYTES;
        if bytes > 0 {
            s.memcpy_htod(
                &self.host_recs.as_slice()[..bytes],
                &mut self.dev_recs.slice_mut(0..bytes),
            )?;
        }
        s.memcpy_htod(
            &self.host_at.as_slice()[..n],
            &mut bufs.rec_at_mut().slice_mut(0..n),
        )?;
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
                let m = Memcached::connect(addr, 4).map_err(|e| format!("bank: {e}"))?;
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
            SharedRecords::Memcached(m) => {
                RecordSource::Memcached(MemcachedStaging::new(ctx, stream, m.clone(), cap)?)
            }
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
    Memcached(MemcachedStaging),
}

impl RecordSource {
    /// The fetch stage of `n` parsed requests on `s`: nothing (computed), the table lookup,
    /// or the wanted users' records fetched from memcached and copied in (this waits for
    /// the parse: the backend call goes through the host).
    pub fn fetch(
        &mut self,
        k: &Kernels,
        bufs: &mut CohortBuffers,
        s: &Arc<CudaStream>,
        n: usize,
        users: u32,
    ) -> Result<(), GpuError> {
        match self {
            RecordSource::Computed => Ok(()),
            RecordSource::Table(t) => bufs.fetch(k, s, n, users, Some(t)),
            RecordSource::Memcached(m) => {
                bufs.fetch(k, s, n, users, None)?;
                m.fetch(bufs, s, n)
            }
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
