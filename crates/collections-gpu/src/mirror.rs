//! The device copy of one collection: its slots' vectors (and cosine's 1/|v|), the live
//! bitset, the attribute columns and the IVF lists, kept in step with `Data` write by write.
//!
//! Slots only grow between compactions, so a sync uploads the slots appended since the last
//! one (buffers grow by doubling, old contents copied on the device), rewrites the live-bitset
//! words the appended and the tombstoned slots touch, and appends the IVF lists' new entries
//! in place: each list has room (half its length again, at least `LIST_ROOM`), and only when
//! one overflows are the lists laid out again. A compaction (slots renumbered) or a training
//! (lists replaced) uploads the whole of what changed.

use crate::kernels::{ColDesc, CollScatterArgs, NO_SLOT};
use crate::program::kind_of;
use crate::Kernels;
use cohort_collections::columns::Column;
use cohort_collections::data::Data;
use cohort_collections::Metric;
use cohort_gpu::launch::{Dev, Work};
use cohort_gpu::GpuError;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use std::sync::Arc;

/// Free entries a list starts with (and at least this many after a relayout).
const LIST_ROOM: usize = 16;

/// A device buffer that grows by doubling, its first `len` elements kept.
pub struct Grow<T> {
    pub buf: CudaSlice<T>,
    pub len: usize,
}

impl<T: DeviceRepr + ValidAsZeroBits> Grow<T> {
    pub fn new(s: &Arc<CudaStream>) -> Result<Grow<T>, GpuError> {
        Ok(Grow {
            buf: s.alloc_zeros(64)?,
            len: 0,
        })
    }

    /// Makes room for `n` elements; true when the buffer moved (addresses changed).
    fn reserve(&mut self, s: &Arc<CudaStream>, n: usize) -> Result<bool, GpuError> {
        if n <= self.buf.len() {
            return Ok(false);
        }
        let mut bigger = s.alloc_zeros::<T>(n.max(2 * self.buf.len()))?;
        if self.len > 0 {
            s.memcpy_dtod(
                &self.buf.slice(0..self.len),
                &mut bigger.slice_mut(0..self.len),
            )?;
        }
        self.buf = bigger;
        Ok(true)
    }

    /// Writes `v` at `at` (growing as needed; `at` at most `len`); true when it moved.
    fn put(&mut self, s: &Arc<CudaStream>, at: usize, v: &[T]) -> Result<bool, GpuError> {
        assert!(at <= self.len, "writes leave no gap");
        let moved = self.reserve(s, at + v.len())?;
        if !v.is_empty() {
            s.memcpy_htod(v, &mut self.buf.slice_mut(at..at + v.len()))?;
        }
        self.len = self.len.max(at + v.len());
        Ok(moved)
    }
}

/// One attribute column on the device.
enum DevColumn {
    /// Values, and 1 where a slot has one.
    Int(Grow<i64>, Grow<u8>),
    /// NaN where a slot has no value (stored values are finite).
    Float(Grow<f64>),
    /// Dictionary codes (`NO_CODE`: none); the dictionary stays on the host (filters are
    /// compiled to codes there).
    Keyword(Grow<u32>),
}

impl DevColumn {
    fn new(s: &Arc<CudaStream>, c: &Column) -> Result<DevColumn, GpuError> {
        Ok(match c {
            Column::Int(_) => DevColumn::Int(Grow::new(s)?, Grow::new(s)?),
            Column::Float(_) => DevColumn::Float(Grow::new(s)?),
            Column::Keyword { .. } => DevColumn::Keyword(Grow::new(s)?),
        })
    }

    /// Uploads slots `from..to` of `c`; true when a buffer moved.
    fn append(
        &mut self,
        s: &Arc<CudaStream>,
        c: &Column,
        from: usize,
        to: usize,
    ) -> Result<bool, GpuError> {
        Ok(match (self, c) {
            (DevColumn::Int(v, has), Column::Int(h)) => {
                let part = &h[from..to];
                let vals: Vec<i64> = part.iter().map(|x| x.unwrap_or(0)).collect();
                let flags: Vec<u8> = part.iter().map(|x| x.is_some() as u8).collect();
                v.put(s, from, &vals)? | has.put(s, from, &flags)?
            }
            (DevColumn::Float(v), Column::Float(h)) => {
                let vals: Vec<f64> = h[from..to].iter().map(|x| x.unwrap_or(f64::NAN)).collect();
                v.put(s, from, &vals)?
            }
            (DevColumn::Keyword(v), Column::Keyword { codes, .. }) => {
                v.put(s, from, &codes[from..to])?
            }
            _ => unreachable!("a column keeps its type"),
        })
    }

    fn desc(&self, s: &CudaStream, c: &Column) -> ColDesc {
        let (data, has) = match self {
            DevColumn::Int(v, h) => (Dev::of(&v.buf, s).addr(), Dev::of(&h.buf, s).addr()),
            DevColumn::Float(v) => (Dev::of(&v.buf, s).addr(), 0),
            DevColumn::Keyword(v) => (Dev::of(&v.buf, s).addr(), 0),
        };
        ColDesc {
            data,
            has,
            kind: kind_of(c),
            pad: 0,
        }
    }
}

/// The IVF lists on the device: list l's slots at `off[l]..off[l] + len[l]` of `slots`, with
/// room up to `off[l + 1]`.
pub struct DevIvf {
    pub nlist: usize,
    pub ip: bool,
    pub centroids: CudaSlice<f32>,
    pub slots: CudaSlice<u32>,
    pub off: CudaSlice<u32>,
    pub len: CudaSlice<u32>,
    host_off: Vec<u32>,
    host_len: Vec<u32>,
}

impl DevIvf {
    /// Lays the lists out again, each with room.
    fn upload(s: &Arc<CudaStream>, ivf: &cohort_collections::ivf::Ivf) -> Result<DevIvf, GpuError> {
        let lists = ivf.lists();
        let mut host_off = Vec::with_capacity(lists.len() + 1);
        let mut flat = Vec::new();
        for l in lists {
            host_off.push(flat.len() as u32);
            flat.extend_from_slice(l);
            let room = (l.len() / 2).max(LIST_ROOM);
            flat.resize(flat.len() + room, NO_SLOT);
        }
        host_off.push(flat.len() as u32);
        let host_len: Vec<u32> = lists.iter().map(|l| l.len() as u32).collect();
        Ok(DevIvf {
            nlist: ivf.nlist,
            ip: ivf.coarse_ip(),
            centroids: s.clone_htod(ivf.centroids())?,
            slots: s.clone_htod(&flat)?,
            off: s.clone_htod(&host_off[..lists.len()])?,
            len: s.clone_htod(&host_len)?,
            host_off,
            host_len,
        })
    }
}

/// What a sync leaves: the device copy of one `Data` state.
pub struct Mirror {
    pub stream: Arc<CudaStream>,
    /// In step with the collection (false after a failed sync: searches decline until a
    /// sync uploads everything again).
    pub fresh: bool,
    pub layout_epoch: u64,
    pub ivf_epoch: u64,
    /// Slots uploaded.
    pub slots: usize,
    pub dim: usize,
    pub metric: Metric,
    pub vectors: Grow<f32>,
    pub inv_norms: Grow<f32>,
    pub live: Grow<u32>,
    host_live: Vec<u32>,
    cols: Vec<DevColumn>,
    /// One `ColDesc` a column (rewritten when a column's buffers move).
    pub col_descs: CudaSlice<ColDesc>,
    pub ivf: Option<DevIvf>,
    /// Scatter arguments (list entries, live words), reused.
    scatter_idx: Grow<u32>,
    scatter_val: Grow<u32>,
}

impl Mirror {
    pub fn new(stream: Arc<CudaStream>, d: &Data) -> Result<Mirror, GpuError> {
        let s = &stream;
        let cols = d
            .columns()
            .iter()
            .map(|c| DevColumn::new(s, c))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Mirror {
            fresh: false,
            layout_epoch: d.layout_epoch(),
            ivf_epoch: d.ivf_epoch(),
            slots: 0,
            dim: d.dim(),
            metric: d.settings.metric,
            vectors: Grow::new(s)?,
            inv_norms: Grow::new(s)?,
            live: Grow::new(s)?,
            host_live: Vec::new(),
            cols,
            col_descs: s.alloc_zeros(d.columns().len().max(1))?,
            ivf: None,
            scatter_idx: Grow::new(s)?,
            scatter_val: Grow::new(s)?,
            stream,
        })
    }

    /// Whether this copy is `d` (searches check it under the collection's read lock).
    pub fn mirrors(&self, d: &Data) -> bool {
        self.fresh
            && self.slots == d.slots()
            && self.layout_epoch == d.layout_epoch()
            && self.ivf_epoch == d.ivf_epoch()
            && self.ivf.is_some() == d.ivf().is_some()
    }

    /// Brings the copy up to `d` (see the module's text). On an error the copy is stale.
    pub fn sync(&mut self, k: &Kernels, d: &Data, killed: &[u32]) -> Result<(), GpuError> {
        let r = self.sync_inner(k, d, killed);
        self.fresh = r.is_ok();
        r
    }

    fn sync_inner(&mut self, k: &Kernels, d: &Data, killed: &[u32]) -> Result<(), GpuError> {
        let s = self.stream.clone();
        let whole = !self.fresh || self.layout_epoch != d.layout_epoch() || d.slots() < self.slots;
        if whole {
            self.slots = 0;
            self.vectors.len = 0;
            self.inv_norms.len = 0;
            self.live.len = 0;
            self.host_live.clear();
            for c in &mut self.cols {
                match c {
                    DevColumn::Int(v, h) => (v.len, h.len) = (0, 0),
                    DevColumn::Float(v) => v.len = 0,
                    DevColumn::Keyword(v) => v.len = 0,
                }
            }
            self.ivf = None;
        }
        let (from, to, dim) = (self.slots, d.slots(), self.dim);
        let mut dirty: Vec<u32> = Vec::new(); // live words outside the appended range
        if to > from {
            self.vectors
                .put(&s, from * dim, &d.vectors()[from * dim..to * dim])?;
            if self.metric == Metric::Cosine {
                self.inv_norms.put(&s, from, &d.inv_norms()[from..to])?;
            }
            let mut moved = whole;
            for (dc, c) in self.cols.iter_mut().zip(d.columns()) {
                moved |= dc.append(&s, c, from, to)?;
            }
            if moved {
                let descs: Vec<ColDesc> = self
                    .cols
                    .iter()
                    .zip(d.columns())
                    .map(|(dc, c)| dc.desc(&s, c))
                    .collect();
                if !descs.is_empty() {
                    s.memcpy_htod(&descs, &mut self.col_descs)?;
                }
            }
            // The words the new slots fall in, read from `live` whole (a tombstone of an
            // older slot in the first word is in it too).
            let (w0, w1) = (from / 32, to.div_ceil(32));
            self.host_live.resize(w1, 0);
            let live = d.live();
            for w in w0..w1 {
                let mut word = 0u32;
                for (b, s) in (w * 32..((w + 1) * 32).min(to)).enumerate() {
                    word |= (live[s] as u32) << b;
                }
                self.host_live[w] = word;
            }
            self.live.put(&s, w0, &self.host_live[w0..w1])?;
        }
        for &slot in killed {
            let slot = slot as usize;
            if slot < from {
                let w = slot / 32;
                self.host_live[w] &= !(1 << (slot % 32));
                dirty.push(w as u32);
            }
        }
        if !dirty.is_empty() {
            dirty.sort_unstable();
            dirty.dedup();
            let vals: Vec<u32> = dirty.iter().map(|&w| self.host_live[w as usize]).collect();
            let dst = Dev::of_mut(&mut self.live.buf, &s);
            self.scatter(k, dst, &dirty, &vals)?;
        }
        self.sync_ivf(k, d)?;
        s.synchronize()?;
        self.slots = to;
        self.layout_epoch = d.layout_epoch();
        self.ivf_epoch = d.ivf_epoch();
        Ok(())
    }

    fn sync_ivf(&mut self, k: &Kernels, d: &Data) -> Result<(), GpuError> {
        let s = self.stream.clone();
        let Some(ivf) = d.ivf() else {
            self.ivf = None;
            return Ok(());
        };
        if self.ivf.is_none() || self.ivf_epoch != d.ivf_epoch() {
            self.ivf = Some(DevIvf::upload(&s, ivf)?);
            return Ok(());
        }
        let dev = self.ivf.as_mut().expect("checked above");
        let (mut idx, mut val) = (Vec::new(), Vec::new());
        for (l, list) in ivf.lists().iter().enumerate() {
            let have = dev.host_len[l] as usize;
            if list.len() == have {
                continue;
            }
            let room = (dev.host_off[l + 1] - dev.host_off[l]) as usize;
            if list.len() > room || list.len() < have {
                // A list outgrew its room: lay every list out again.
                self.ivf = Some(DevIvf::upload(&s, ivf)?);
                return Ok(());
            }
            for (j, &slot) in list.iter().enumerate().skip(have) {
                idx.push(dev.host_off[l] + j as u32);
                val.push(slot);
            }
            dev.host_len[l] = list.len() as u32;
        }
        if !idx.is_empty() {
            s.memcpy_htod(&dev.host_len, &mut dev.len)?;
            let dst = Dev::of_mut(&mut dev.slots, &s);
            self.scatter(k, dst, &idx, &val)?;
        }
        Ok(())
    }

    /// dst[idx[i]] = val[i] on the device.
    fn scatter(
        &mut self,
        k: &Kernels,
        dst: Dev<u32>,
        idx: &[u32],
        val: &[u32],
    ) -> Result<(), GpuError> {
        let s = self.stream.clone();
        self.scatter_idx.len = 0;
        self.scatter_val.len = 0;
        self.scatter_idx.put(&s, 0, idx)?;
        self.scatter_val.put(&s, 0, val)?;
        let args = CollScatterArgs {
            dst,
            index: Dev::of(&self.scatter_idx.buf, &s),
            value: Dev::of(&self.scatter_val.buf, &s),
            n: idx.len() as u64,
        };
        // SAFETY: idx and val hold n entries; every index is inside dst (list positions
        // below the lists' room, live words below the words uploaded).
        unsafe { k.scatter.launch(&s, Work::Items(idx.len()), 0, &args) }
    }
}
