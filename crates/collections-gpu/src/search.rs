//! A search on the device, the twin of `cohort_collections::search::search`: the same plan
//! (`search::plan`, from the filter's match count), then
//!
//! 1. the filter (`coll_filter`) over every slot into a mask of the live matching slots and
//!    their count, or the live bitset itself without a filter;
//! 2. the IVF plan: the nprobe nearest lists of each query (`coll_coarse`), then a scan block
//!    per (query, list); the exact plan: a scan block per (query, segment of the slots);
//! 3. `coll_reduce` rounds until one k-list a query is left; its slots and distances back.
//!
//! Queries go through in chunks so that the partial lists stay within `PARTIAL_CAP`.

use crate::kernels::{
    CollCoarseArgs, CollFilterArgs, CollReduceArgs, CollScanArgs, Instr, MAX_CAND, MAX_DIM, MAX_K,
    MAX_NLIST, NO_SLOT, SEGMENT,
};
use crate::mirror::Mirror;
use crate::program::Program;
use crate::Kernels;
use cohort_collections::accel::SearchRequest;
use cohort_collections::data::Data;
use cohort_collections::search::{self, Plan};
use cohort_collections::Metric;
use cohort_gpu::launch::{Dev, Work};
use cohort_gpu::GpuError;
use cohort_ivf::Neighbor;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use std::sync::Arc;

/// Partial (slot, distance) entries one chunk of queries may make (128 MiB of them).
const PARTIAL_CAP: usize = 1 << 24;

/// One search's device buffers and stream (a pool keeps them between searches).
pub struct Scratch {
    pub stream: Arc<CudaStream>,
    queries: CudaSlice<f32>,
    prog: CudaSlice<Instr>,
    table: CudaSlice<u64>,
    mask: CudaSlice<u32>,
    count: CudaSlice<u32>,
    probes: CudaSlice<u32>,
    part: [(CudaSlice<u32>, CudaSlice<f32>); 2],
}

/// `b` with room for `n` (reallocated, contents dropped, when smaller).
fn room<T: DeviceRepr + ValidAsZeroBits>(
    s: &Arc<CudaStream>,
    b: &mut CudaSlice<T>,
    n: usize,
) -> Result<(), GpuError> {
    if b.len() < n {
        *b = s.alloc_zeros(n.next_power_of_two())?;
    }
    Ok(())
}

impl Scratch {
    pub fn new(stream: Arc<CudaStream>) -> Result<Scratch, GpuError> {
        let s = &stream;
        Ok(Scratch {
            queries: s.alloc_zeros(1)?,
            prog: s.alloc_zeros(1)?,
            table: s.alloc_zeros(1)?,
            mask: s.alloc_zeros(1)?,
            count: s.alloc_zeros(1)?,
            probes: s.alloc_zeros(1)?,
            part: [
                (s.alloc_zeros(1)?, s.alloc_zeros(1)?),
                (s.alloc_zeros(1)?, s.alloc_zeros(1)?),
            ],
            stream,
        })
    }
}

/// Whether the device takes this request at all (else the CPU answers it).
pub fn takes(d: &Data, r: &SearchRequest<'_>) -> bool {
    r.k <= MAX_K && d.dim() <= MAX_DIM && d.ivf().is_none_or(|i| i.nlist <= MAX_NLIST)
}

/// The search (see the module's text); `None` when the filter's program does not fit the
/// device (the CPU answers).
#[allow(clippy::type_complexity)]
pub fn run(
    k: &Kernels,
    m: &Mirror,
    x: &mut Scratch,
    d: &Data,
    r: &SearchRequest<'_>,
) -> Result<Option<(Vec<Vec<Neighbor>>, Plan)>, GpuError> {
    let s = x.stream.clone();
    let slots = d.slots();
    let words = slots.div_ceil(32).max(1);
    // 1. The mask: the live bitset, or the live slots the filter matches.
    let matches = match r.filter {
        None => None,
        Some(f) => {
            let Some(p) = Program::compile(&f.compile(d.columns()), d.columns()) else {
                return Ok(None);
            };
            room(&s, &mut x.prog, p.code.len())?;
            s.memcpy_htod(&p.code, &mut x.prog)?;
            room(&s, &mut x.table, p.table.len().max(1))?;
            if !p.table.is_empty() {
                s.memcpy_htod(&p.table, &mut x.table)?;
            }
            room(&s, &mut x.mask, words)?;
            s.memset_zeros(&mut x.count)?;
            let args = CollFilterArgs {
                prog: Dev::of(&x.prog, &s),
                cols: Dev::of(&m.col_descs, &s),
                table: Dev::of(&x.table, &s),
                live: Dev::of(&m.live.buf, &s),
                slots: slots as u64,
                len: p.code.len() as i32,
                pad: 0,
                mask: Dev::of_mut(&mut x.mask, &s),
                count: Dev::of_mut(&mut x.count, &s),
            };
            // SAFETY: the program, table and columns hold what it reads; mask has a word
            // per 32 slots; the live bitset covers every slot (the mirror is current).
            unsafe { k.filter.launch(&s, Work::Items(slots.max(1)), 0, &args) }?;
            let mut n = [0u32];
            s.memcpy_dtoh(&x.count.slice(0..1), &mut n)?;
            s.synchronize()?;
            Some(n[0] as usize)
        }
    };
    let plan = search::plan(d, r.k, r.nprobe, matches);
    let nq = r.queries.len();
    let mut answers = Vec::with_capacity(nq);
    if slots == 0 || matches == Some(0) {
        answers.resize(nq, Vec::new());
        return Ok(Some((answers, plan)));
    }
    let per_query = match plan {
        Plan::Exact => slots.div_ceil(SEGMENT),
        Plan::Ivf { nprobe } => nprobe,
    };
    let chunk = (PARTIAL_CAP / (per_query * r.k)).clamp(1, nq);
    let metric = d.settings.metric;
    for q0 in (0..nq).step_by(chunk) {
        let qs = &r.queries[q0..(q0 + chunk).min(nq)];
        answers.extend(run_chunk(
            k,
            m,
            x,
            d,
            qs,
            r.k,
            plan,
            per_query,
            metric,
            matches.is_some(),
        )?);
    }
    Ok(Some((answers, plan)))
}

#[allow(clippy::too_many_arguments)]
fn run_chunk(
    k: &Kernels,
    m: &Mirror,
    x: &mut Scratch,
    d: &Data,
    queries: &[Vec<f32>],
    kk: usize,
    plan: Plan,
    mut per_query: usize,
    metric: Metric,
    filtered: bool,
) -> Result<Vec<Vec<Neighbor>>, GpuError> {
    let s = x.stream.clone();
    let (nq, dim) = (queries.len(), d.dim());
    let flat: Vec<f32> = queries
        .iter()
        .flat_map(|q| search::prepared_query(metric, q))
        .collect();
    room(&s, &mut x.queries, flat.len())?;
    s.memcpy_htod(&flat, &mut x.queries)?;
    let items = nq * per_query;
    room(&s, &mut x.part[0].0, items * kk)?;
    room(&s, &mut x.part[0].1, items * kk)?;
    let mask = if filtered {
        Dev::of(&x.mask, &s)
    } else {
        Dev::of(&m.live.buf, &s)
    };
    let mut args = CollScanArgs {
        queries: Dev::of(&x.queries, &s),
        vectors: Dev::of(&m.vectors.buf, &s),
        inv_norms: if metric == Metric::Cosine {
            Dev::of(&m.inv_norms.buf, &s)
        } else {
            Dev::NULL
        },
        mask,
        slots: d.slots() as u64,
        per_query: per_query as i32,
        seg: SEGMENT as i32,
        dim: dim as i32,
        k: kk as i32,
        metric: match metric {
            Metric::L2 => 0,
            Metric::Ip => 1,
            Metric::Cosine => 2,
        },
        ..CollScanArgs::default()
    };
    if let Plan::Ivf { nprobe } = plan {
        let ivf = m.ivf.as_ref().expect("an IVF plan has device lists");
        room(&s, &mut x.probes, nq * nprobe)?;
        let c = CollCoarseArgs {
            queries: Dev::of(&x.queries, &s),
            centroids: Dev::of(&ivf.centroids, &s),
            nlist: ivf.nlist as i32,
            dim: dim as i32,
            nprobe: nprobe as i32,
            ip: ivf.ip as i32,
            probes: Dev::of_mut(&mut x.probes, &s),
        };
        // SAFETY: queries nq x dim, centroids nlist x dim, probes nq x nprobe (nprobe <=
        // nlist <= MAX_NLIST, dim <= MAX_DIM: checked by `takes` and the plan).
        unsafe { k.coarse.launch(&s, Work::Items(nq), 0, &c) }?;
        args.probes = Dev::of(&x.probes, &s);
        args.list_slots = Dev::of(&ivf.slots, &s);
        args.list_off = Dev::of(&ivf.off, &s);
        args.list_len = Dev::of(&ivf.len, &s);
    }
    {
        let (a, b) = &mut x.part[0];
        args.out_slots = Dev::of_mut(a, &s);
        args.out_dist = Dev::of_mut(b, &s);
    }
    // SAFETY: every buffer sized above for `items` blocks of k results; the vectors, mask
    // and lists are the mirror's, current for `d`.
    unsafe { k.scan.launch(&s, Work::Items(items), 0, &args) }?;
    // 3. Reduce until one list a query is left.
    let group = MAX_CAND / kk;
    let mut cur = 0;
    while per_query > 1 {
        let groups = per_query.div_ceil(group);
        let (src, dst) = if cur == 0 {
            let [a, b] = &mut x.part;
            (a, b)
        } else {
            let [a, b] = &mut x.part;
            (b, a)
        };
        room(&s, &mut dst.0, nq * groups * kk)?;
        room(&s, &mut dst.1, nq * groups * kk)?;
        let ra = CollReduceArgs {
            in_slots: Dev::of(&src.0, &s),
            in_dist: Dev::of(&src.1, &s),
            per_query: per_query as i32,
            group: group as i32,
            k: kk as i32,
            groups: groups as i32,
            out_slots: Dev::of_mut(&mut dst.0, &s),
            out_dist: Dev::of_mut(&mut dst.1, &s),
        };
        // SAFETY: src holds nq x per_query x k, dst nq x groups x k; group * k <= MAX_CAND.
        unsafe { k.reduce.launch(&s, Work::Items(nq * groups), 0, &ra) }?;
        per_query = groups;
        cur ^= 1;
    }
    let mut ids = vec![0u32; nq * kk];
    let mut dist = vec![0f32; nq * kk];
    s.memcpy_dtoh(&x.part[cur].0.slice(0..nq * kk), &mut ids)?;
    s.memcpy_dtoh(&x.part[cur].1.slice(0..nq * kk), &mut dist)?;
    s.synchronize()?;
    Ok((0..nq)
        .map(|q| {
            (q * kk..(q + 1) * kk)
                .filter(|&i| ids[i] != NO_SLOT)
                .map(|i| Neighbor {
                    id: ids[i],
                    distance: dist[i],
                })
                .collect()
        })
        .collect())
}
