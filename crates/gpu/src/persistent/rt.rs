//! The persistent runtime's state on one GPU: the host mirror of `PRt`
//! (kernels/persistent.cuh), the slots, gpipes and counters in device memory, the TX ring and
//! stop flag in mapped memory. Allocated once per engine; reset (not reallocated) when the
//! watchdog restarts the kernels.

use super::mapped::MappedMemory;
use crate::prelude::Prelude;
use crate::GpuError;
use cohort_mq::{channel_in, Consumer, Layout};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg,
};
use std::sync::Arc;

crate::kernel_args! {
    /// Mirror of `PPipe`: every field 64 bits, so C and Rust agree without padding rules.
    pub struct PipeArgs as "PPipe" {
        ctr: u64,
        seq: u64,
        items: u64,
        cap: u64,
        /// 1: its ends are on two physical GPUs (system-scope atomics and orders).
        sys: u64,
    }
}

crate::kernel_args! {
    /// Mirror of `PRt`, field for field: the runtime's source ends with `static_assert`s of
    /// this layout (`layout_asserts`), so the two cannot drift apart and still compile.
    pub struct RtArgs as "PRt" {
        stop: u64,
        dev_stop: u64,
        rx: u64,
        nrx: u64,
        rx_slots: u64,
        rx_stride: u64,
        rx_copy: u64,
        /// Device u64[ntx]: the mapped TX rings' device addresses.
        tx: u64,
        ntx: u64,
        tx_slots: u64,
        tx_stride: u64,
        /// Device u32[ntx * TX_HEAD_WORDS]: per TX ring, the next position to reserve [0] and
        /// the host's tail as the GPU last read it [2].
        tx_head: u64,
        slots: u64,
        nslots: u64,
        payloads: u64,
        payload_cap: u64,
        stats: u64,
        batch: u64,
        prof: u64,
        prof_log: u64,
        prof_cap: u64,
        /// Device u32[64 * BAR_GROUPS]: per barrier group, arrivals [0] and generation [32].
        bar: u64,
        /// 1: a stage runs on another physical GPU than the lane's.
        sys: u64,
        free_slots: PipeArgs,
        pipes: [PipeArgs; PIPES],
    }
}

crate::kernel_args! {
    /// `p_layout`'s block: where it writes the layout the device compiler gave the runtime's
    /// structs (a GPU test reads it back).
    pub struct LayoutOut as "PLayoutOut" {
        out: crate::launch::Dev<u64>,
    }
}

/// The runtime's own kernels, each with the first block it takes: what a persistent unit
/// exports besides its service's stages (the kernel check holds the unit to the list).
pub fn runtime_kernels() -> Vec<(&'static str, crate::launch::ArgsLayout)> {
    use crate::launch::KernelArgs;
    vec![
        ("p_reset", RtArgs::LAYOUT),
        ("p_layout", LayoutOut::LAYOUT),
        // (PRt rt, SvcArgs svc): the service's block is asserted with its stages.
        ("cohort_ingress", RtArgs::LAYOUT),
    ]
}

/// `static_assert`s of the runtime's argument blocks as Rust lays them out (`PPipe`, `PRt`).
pub fn layout_asserts() -> String {
    use crate::launch::KernelArgs;
    format!(
        "\n// The runtime's blocks as Rust lays them out (rt.rs).\n{}{}",
        PipeArgs::LAYOUT.cuda_asserts(),
        RtArgs::LAYOUT.cuda_asserts()
    )
}

/// 64-bit fields a service's argument block may have.
pub const SVC_ARGS: usize = 40;

/// A service's kernel argument block (its `SvcArgs`, at most `SVC_ARGS` 64-bit fields; a
/// kernel whose struct is shorter reads only its first fields).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SvcArgs(pub [u64; SVC_ARGS]);

impl SvcArgs {
    /// The first fields set, the rest zero.
    pub fn new(fields: &[u64]) -> SvcArgs {
        assert!(fields.len() <= SVC_ARGS, "at most {SVC_ARGS} fields");
        let mut a = [0; SVC_ARGS];
        a[..fields.len()].copy_from_slice(fields);
        SvcArgs(a)
    }
}

// SAFETY: plain integers, passed by value.
unsafe impl DeviceRepr for SvcArgs {}

// The constants below are the runtime's single definition: the kernels receive them as
// `#define`s (`cuda_defines`, prepended by `persistent_source`), never a copy of their own.

/// Devices, besides its own, that one lane's stages may run on (`Stage::elsewhere`): a
/// service whose data is split over devices (knn's sharded index) feeds each device's stage
/// through a gpipe of its own.
pub const MAX_STAGE_DEVICES: usize = 16;
/// Gpipes between stages (`P_PIPES`): three a service uses as it likes, then one per device
/// its stages may run on.
pub const PIPES: usize = 3 + MAX_STAGE_DEVICES;
/// The first gpipe of the per-device ones (`P_DEVICE_PIPE0`): device d's is this + d.
pub const DEVICE_PIPE0: usize = 3;
/// RX rings one runtime polls (`P_MAX_RX`: the ingress keeps a position per ring in shared
/// memory).
pub const MAX_RX: usize = 64;
/// TX rings one runtime writes (one egress thread drains each; RX ring r answers into TX
/// ring r % ntx).
pub const MAX_TX: usize = 16;
/// u32 words per TX ring's device counters (`P_TX_HEAD_WORDS`): one 128-byte line each, so
/// blocks answering into different rings do not contend for one line.
pub const TX_HEAD_WORDS: usize = 32;
/// Tasks a worker block pops from its gpipe at once (`P_MAX_BATCH`: staged in shared memory);
/// a service's `gpu_batch` is at most this.
pub const MAX_BATCH: usize = 32;
/// Independent block groups a kernel's barriers can serve (`P_BAR_GROUPS`).
pub const BAR_GROUPS: usize = 64;
/// sizeof(PSlot) in persistent.cuh: the 48-byte header and four u32.
pub const SLOT_BYTES: usize = 64;
/// Counter indices (`P_STAT_*`): requests taken off RX rings, answers committed to TX, ingress
/// passes that found a request but no free slot, tasks popped by workers, pops that returned
/// at least one task.
pub const STAT_TAKEN: usize = 0;
pub const STAT_ANSWERED: usize = 1;
pub const STAT_NO_SLOT: usize = 2;
pub const STAT_TASKS: usize = 3;
pub const STAT_POPS: usize = 4;
/// Profile records claimed (those past the log's capacity are dropped).
pub const STAT_PROF_N: usize = 5;
/// Blocks of the persistent kernels that have started (cumulative over launches): the host
/// checks after each launch that every block it launched is running.
pub const STAT_STARTED: usize = 6;
/// The ingress warp's SM cycles by phase (profile only; one writer, the warp's lane 0):
/// idle polls and back-off, polls that found requests (+ the acquire fence), free-slot pops,
/// copying over the bus, publishing the RX tail, the service's checks, the first gpipe push.
pub const STAT_CYC_IDLE: usize = 8;
pub const STAT_CYC_HIT: usize = 9;
pub const STAT_CYC_SLOTS: usize = 10;
pub const STAT_CYC_COPY: usize = 11;
pub const STAT_CYC_PUBLISH: usize = 12;
pub const STAT_CYC_ACCEPT: usize = 13;
pub const STAT_CYC_PUSH: usize = 14;
pub const STAT_CYC_FIRST: usize = STAT_CYC_IDLE;
/// Ring visits that took requests.
pub const STAT_VISITS: usize = 15;
/// The warp's lifetime in SM cycles and in %globaltimer ns (their ratio is the SM clock).
pub const STAT_CLK_CYC: usize = 16;
pub const STAT_CLK_NS: usize = 17;
pub const STATS: usize = 24;
/// Per-slot stamps while profiling (%globaltimer ns): the ingress poll saw the request, it was
/// copied (RX tail published), checked and queued, a first-stage worker popped it, the last
/// worker pop before the answer.
pub const PROF_SEEN: usize = 0;
pub const PROF_COPIED: usize = 1;
pub const PROF_QUEUED: usize = 2;
pub const PROF_FIRST_POP: usize = 3;
pub const PROF_LAST_POP: usize = 4;
/// u64 stamps per slot, and per log record (request_id, route, the five stamps, TX reserved,
/// committed).
pub const PROF_STAMPS: usize = 8;
pub const PROF_REC: usize = 10;

// The phase counters sit between the plain counters and the clock, inside STATS; the stamps
// inside a slot's stamp row.
const _: () = {
    assert!(STAT_STARTED < STAT_CYC_FIRST && STAT_CYC_PUSH < STAT_VISITS);
    assert!(STAT_VISITS < STAT_CLK_CYC && STAT_CLK_NS < STATS);
    assert!(PROF_LAST_POP < PROF_STAMPS && PROF_STAMPS < PROF_REC);
};

/// The `#define`s of the constants above, for the kernels.
pub fn prelude() -> Prelude {
    let defs: [(&str, usize); 29] = [
        ("P_PIPES", PIPES),
        ("P_TX_HEAD_WORDS", TX_HEAD_WORDS),
        ("P_DEVICE_PIPE0", DEVICE_PIPE0),
        ("P_MAX_RX", MAX_RX),
        ("P_MAX_BATCH", MAX_BATCH),
        ("P_BAR_GROUPS", BAR_GROUPS),
        ("P_STAT_TAKEN", STAT_TAKEN),
        ("P_STAT_ANSWERED", STAT_ANSWERED),
        ("P_STAT_NO_SLOT", STAT_NO_SLOT),
        ("P_STAT_TASKS", STAT_TASKS),
        ("P_STAT_POPS", STAT_POPS),
        ("P_STAT_PROF_N", STAT_PROF_N),
        ("P_STAT_STARTED", STAT_STARTED),
        ("P_STAT_CYC_IDLE", STAT_CYC_IDLE),
        ("P_STAT_CYC_HIT", STAT_CYC_HIT),
        ("P_STAT_CYC_SLOTS", STAT_CYC_SLOTS),
        ("P_STAT_CYC_COPY", STAT_CYC_COPY),
        ("P_STAT_CYC_PUBLISH", STAT_CYC_PUBLISH),
        ("P_STAT_CYC_ACCEPT", STAT_CYC_ACCEPT),
        ("P_STAT_CYC_PUSH", STAT_CYC_PUSH),
        ("P_STAT_VISITS", STAT_VISITS),
        ("P_STAT_CLK_CYC", STAT_CLK_CYC),
        ("P_STAT_CLK_NS", STAT_CLK_NS),
        ("P_STATS", STATS),
        ("P_PROF_SEEN", PROF_SEEN),
        ("P_PROF_COPIED", PROF_COPIED),
        ("P_PROF_QUEUED", PROF_QUEUED),
        ("P_PROF_FIRST_POP", PROF_FIRST_POP),
        ("P_PROF_LAST_POP", PROF_LAST_POP),
    ];
    defs.into_iter()
        .chain([("P_PROF_STAMPS", PROF_STAMPS), ("P_PROF_REC", PROF_REC)])
        .fold(
            Prelude::new("crates/gpu/src/persistent/rt.rs").error_codes(),
            |p, (name, v)| p.int(name, v),
        )
}

/// TX slots hold answers up to 2000 bytes (k-NN: 4 + 8 k for k <= 128 is 1028).
pub const TX_STRIDE: usize = 2048;

struct Pipe {
    ctr: CudaSlice<u32>,
    seq: CudaSlice<u32>,
    items: CudaSlice<u32>,
    cap: usize,
}

impl Pipe {
    fn new(s: &Arc<CudaStream>, cap: usize) -> Result<Pipe, GpuError> {
        let cap = cap.max(2).next_power_of_two();
        Ok(Pipe {
            ctr: s.alloc_zeros(64)?,
            seq: s.alloc_zeros(cap)?,
            items: s.alloc_zeros(cap * 4)?,
            cap,
        })
    }

    fn args(&self, s: &Arc<CudaStream>, sys: bool) -> PipeArgs {
        PipeArgs {
            ctr: addr(&self.ctr, s),
            seq: addr(&self.seq, s),
            items: addr(&self.items, s),
            cap: self.cap as u64,
            sys: sys as u64,
        }
    }
}

/// The raw device address of a buffer. Persistent kernels get raw addresses: cudarc's
/// per-buffer stream events would make any later use wait for a kernel that never ends.
pub fn addr<T>(b: &CudaSlice<T>, s: &Arc<CudaStream>) -> u64 {
    let (p, _sync) = b.device_ptr(s);
    p
}

/// Geometry asked of the runtime.
pub struct Geometry {
    /// RX rings' device addresses, one per ingress.
    pub rx: Vec<u64>,
    pub rx_layout: Layout,
    /// Bytes of an RX slot (header included) the ingress warp copies.
    pub rx_copy: usize,
    pub nslots: usize,
    /// Slots of each TX ring.
    pub tx_slots: usize,
    /// TX rings (1..=MAX_TX, at most one per RX ring).
    pub tx_rings: usize,
    pub batch: usize,
    /// Requests whose stage stamps are logged (0: no profile).
    pub profile: usize,
    /// Capacity of each gpipe the service uses, in order (its bound on tasks in flight); at
    /// most `PIPES`, the rest get the smallest.
    pub pipe_caps: Vec<usize>,
    /// Some stage runs on another physical GPU: the runtime's shared state at system scope.
    pub system_scope: bool,
}

pub struct DeviceState {
    pub args: RtArgs,
    stop: MappedMemory,
    _rx: CudaSlice<u64>,
    _slots: CudaSlice<u8>,
    _payloads: CudaSlice<u8>,
    stats: CudaSlice<u64>,
    _prof: CudaSlice<u64>,
    prof_log: CudaSlice<u64>,
    _tx: CudaSlice<u64>,
    /// Per TX ring: [0] the reservation counter, [2] the host's TX tail as last read by the
    /// GPU (kept across restarts, like [0]: never ahead of it).
    _tx_head: CudaSlice<u32>,
    /// [0] the device copy of the stop flag.
    _dev_stop: CudaSlice<u32>,
    _bar: CudaSlice<u32>,
    _pipes: Vec<Pipe>,
    reset: CudaFunction,
    stream: Arc<CudaStream>,
}

impl DeviceState {
    /// Allocates everything and returns it with the host's ends of the TX rings.
    pub fn new(
        ctx: &Arc<CudaContext>,
        reset: CudaFunction,
        g: &Geometry,
    ) -> Result<(DeviceState, Vec<Consumer>), GpuError> {
        assert!(g.rx_copy >= cohort_mq::SLOT_HEADER_BYTES && g.rx_copy.is_multiple_of(16));
        assert!(g.rx_copy <= g.rx_layout.slot_stride());
        assert!(
            !g.rx.is_empty() && g.rx.len() <= MAX_RX,
            "1..={MAX_RX} RX rings"
        );
        let s = ctx.new_stream()?;
        let stop = MappedMemory::zeroed(ctx, 64)?;
        assert!(
            (1..=MAX_TX.min(g.rx.len())).contains(&g.tx_rings),
            "1..=min({MAX_TX}, RX rings) TX rings"
        );
        let tx_layout = Layout::with_stride(g.tx_slots, TX_STRIDE);
        let mut tx_dev = Vec::with_capacity(g.tx_rings);
        let mut tx = Vec::with_capacity(g.tx_rings);
        for _ in 0..g.tx_rings {
            let mem = MappedMemory::zeroed(ctx, tx_layout.bytes())?;
            tx_dev.push(mem.device_ptr());
            let (_unused_producer, consumer) = channel_in(Box::new(mem), tx_layout, 1, false);
            tx.push(consumer);
        }
        let tx_rings = s.clone_htod(&tx_dev)?;
        let payload_cap = g.rx_copy - cohort_mq::SLOT_HEADER_BYTES;
        let rx = s.clone_htod(&g.rx)?;
        let slots = s.alloc_zeros::<u8>(g.nslots * SLOT_BYTES)?;
        let payloads = s.alloc_zeros::<u8>(g.nslots * payload_cap)?;
        let stats = s.alloc_zeros::<u64>(STATS)?;
        let tx_head = s.alloc_zeros::<u32>(g.tx_rings * TX_HEAD_WORDS)?;
        let dev_stop = s.alloc_zeros::<u32>(4)?;
        let bar = s.alloc_zeros::<u32>(64 * BAR_GROUPS)?;
        // Zero-sized buffers are not allocated: one element keeps the addresses valid.
        let prof_slots = if g.profile > 0 { g.nslots } else { 0 };
        let prof = s.alloc_zeros::<u64>((prof_slots * PROF_STAMPS).max(1))?;
        let prof_log = s.alloc_zeros::<u64>((g.profile * PROF_REC).max(1))?;
        assert!(g.pipe_caps.len() <= PIPES, "at most {PIPES} gpipes");
        let free = Pipe::new(&s, g.nslots)?;
        let pipes: Vec<Pipe> = (0..PIPES)
            .map(|i| Pipe::new(&s, g.pipe_caps.get(i).copied().unwrap_or(0)))
            .collect::<Result<_, _>>()?;
        let sys = g.system_scope;
        let args = RtArgs {
            stop: stop.device_ptr(),
            dev_stop: addr(&dev_stop, &s),
            rx: addr(&rx, &s),
            nrx: g.rx.len() as u64,
            rx_slots: g.rx_layout.slots as u64,
            rx_stride: g.rx_layout.slot_stride() as u64,
            rx_copy: g.rx_copy as u64,
            tx: addr(&tx_rings, &s),
            ntx: g.tx_rings as u64,
            tx_slots: g.tx_slots as u64,
            tx_stride: TX_STRIDE as u64,
            tx_head: addr(&tx_head, &s),
            slots: addr(&slots, &s),
            nslots: g.nslots as u64,
            payloads: addr(&payloads, &s),
            payload_cap: payload_cap as u64,
            stats: addr(&stats, &s),
            batch: g.batch.clamp(1, MAX_BATCH) as u64,
            prof: addr(&prof, &s),
            prof_log: addr(&prof_log, &s),
            prof_cap: g.profile as u64,
            bar: addr(&bar, &s),
            sys: sys as u64,
            free_slots: free.args(&s, sys),
            pipes: std::array::from_fn(|i| pipes[i].args(&s, sys)),
        };
        let mut all = vec![free];
        all.extend(pipes);
        let st = DeviceState {
            args,
            stop,
            _rx: rx,
            _slots: slots,
            _payloads: payloads,
            stats,
            _prof: prof,
            prof_log,
            _tx: tx_rings,
            _tx_head: tx_head,
            _dev_stop: dev_stop,
            _bar: bar,
            _pipes: all,
            reset,
            stream: s,
        };
        st.reset()?;
        Ok((st, tx))
    }

    /// Every slot free, every gpipe empty, the stop flag down (kernels must not be running).
    /// The TX reservation counter is kept: it continues where the host's reading stands.
    pub fn reset(&self) -> Result<(), GpuError> {
        self.set_stop(false)?;
        let cfg = LaunchConfig {
            grid_dim: (256, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.reset);
        b.arg(&self.args);
        // SAFETY: p_reset(PRt) takes exactly this argument.
        unsafe { b.launch(cfg) }?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Raises or lowers the host's stop flag (mapped memory; the ingress warp polls it). A raised
    /// flag is also written into the device copy the workers poll, so workers stop even when
    /// the ingress warp is not running (a block that never became resident, a stuck warp).
    pub fn set_stop(&self, on: bool) -> Result<(), GpuError> {
        // SAFETY: the flag is 4 aligned bytes of mapped memory owned by self; the GPU only
        // reads it (system-scope acquire loads).
        unsafe {
            let p = self.stop.host_ptr() as *const std::sync::atomic::AtomicU32;
            (*p).store(on as u32, std::sync::atomic::Ordering::Release);
        }
        if on {
            // A copy, not a memset: a memset is a kernel, and with every SM held by persistent
            // blocks it would never run (measured: 1900 worker blocks, the stop never landed).
            // The copy engine needs no SM.
            let one: u32 = 1;
            // SAFETY: dev_stop is the first u32 of `_dev_stop`, owned by self; `one` outlives the
            // copy (the stream is synchronized before returning).
            let r = unsafe {
                cudarc::driver::sys::cuMemcpyHtoDAsync_v2(
                    self.args.dev_stop,
                    &one as *const u32 as *const std::ffi::c_void,
                    4,
                    self.stream.cu_stream(),
                )
            };
            r.result()?;
            self.stream.synchronize()?;
        }
        Ok(())
    }

    /// Blocks of persistent kernels started since the state was created (`STAT_STARTED`).
    pub fn started_blocks(&self) -> Result<u64, GpuError> {
        Ok(self.stats()?[STAT_STARTED])
    }

    /// The device counters (`STAT_*`), read with a copy on the runtime's own stream.
    pub fn stats(&self) -> Result<[u64; STATS], GpuError> {
        let v = self.stream.clone_dtoh(&self.stats)?;
        let mut out = [0; STATS];
        out.copy_from_slice(&v);
        Ok(out)
    }

    /// The profile log: `PROF_REC` u64 per answered request, the first `profile` answered
    /// (read after the kernels stopped).
    pub fn profile_log(&self) -> Result<Vec<u64>, GpuError> {
        Ok(self.stream.clone_dtoh(&self.prof_log)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_get_the_runtime_constants_from_here_only() {
        let defs = prelude();
        let text = defs.text();
        assert!(text.contains(&format!("#define P_STAT_STARTED {STAT_STARTED}\n")));
        assert!(text.contains(&format!("#define P_PROF_REC {PROF_REC}\n")));
        assert!(text.contains("#define P_MAX_BATCH "));
        let src = super::super::persistent_source(
            "runtime-alone.cu",
            &Prelude::new("a test"),
            &[],
            &[("svc.cu", concat!(
            "struct SvcArgs { unsigned long long f[16]; };\n",
            "__device__ bool service_accept(const PRt&, const SvcArgs&, unsigned int) { return false; }\n"
        ))],
            Vec::new(),
        );
        assert!(src.restated().is_empty(), "{:?}", src.restated());
    }
}
