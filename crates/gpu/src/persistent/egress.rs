//! The host side of one GPU's persistent kernels: launches them, drains their first TX ring
//! into the lane's answer rings (further TX rings have threads of their own: drain.rs), and
//! is their watchdog. One thread serves one lane or several (`run_all`).
//!
//! Progress is judged from the rings alone: the RX tails the GPU publishes (requests taken)
//! and the TX answers read. The GPU holds `taken - answered` requests; when it holds some, or
//! a request waits in an RX ring, and neither count moves for the watchdog period, the kernels
//! are stopped (flag in mapped memory, obeyed at task boundaries), their TX answers drained,
//! the lane announces a restart (the ingresses answer INTERNAL what they still wait for) and
//! fresh kernels resume from the published RX tails.

use super::drain::{Drainer, TxDrain};
use super::mapped::device_address;
use super::profile;
use super::rt::{DeviceState, Geometry};
use super::rt::{STAT_ANSWERED, STAT_NO_SLOT, STAT_POPS, STAT_TAKEN, STAT_TASKS};
use super::{LaneStats, PersistentBackend, PersistentConfig, Prepared, Stage};
use crate::GpuError;
use cohort_engine::wiring::HealthGuard;
use cohort_engine::{Bell, LaneEnds};
use cohort_mq::Consumer;
use cudarc::driver::sys::{self, CUfunction_attribute, CUresult};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long stopping kernels may take before the lane gives up on them.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown keeps serving what is queued.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the blocks of a launch may take to become resident. They start within
/// microseconds on a GPU with room for them; the wait covers other work finishing first.
const RESIDENT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an idle egress thread polls before it parks.
const IDLE_SPIN: Duration = Duration::from_micros(50);

pub(super) struct Egress {
    backend: Arc<dyn PersistentBackend>,
    /// The request rings, bell and health; its answer rings moved into the drains.
    lane: LaneEnds,
    /// The first TX ring, drained on this thread.
    tx: TxDrain,
    /// The lane's other TX rings: set up here, running as `drainers` once launched, back
    /// here once stopped (they are freed with the rest of the lane's GPU state).
    spare: Vec<TxDrain>,
    drainers: Vec<Drainer>,
    dev: DeviceState,
    prepared: Prepared,
    /// The ingress warp, then the stages.
    kernels: Vec<(CudaFunction, Stage)>,
    streams: Vec<Arc<CudaStream>>,
    watchdog: Duration,
    stop: Arc<AtomicBool>,
    stats: Arc<LaneStats>,
    /// RX tails last seen (the GPU publishes them), per ring.
    rx_seen: Vec<u32>,
    /// Answers to log on the GPU (0 = off).
    profile: usize,
}

fn stream_state(s: &CudaStream) -> CUresult {
    // SAFETY: a query on a live stream handle.
    unsafe { sys::cuStreamQuery(s.cu_stream()) }
}

impl Egress {
    /// Everything but the launch: module functions, the backend's buffers, the device state.
    /// Set-up on a device can wait on persistent kernels already resident there, so engines
    /// sharing a device are all set up before any is launched (`PersistentEngine::start_all`).
    pub(super) fn set_up(
        backend: Arc<dyn PersistentBackend>,
        mut lane: LaneEnds,
        cfg: &PersistentConfig,
        stop: Arc<AtomicBool>,
        stats: Arc<LaneStats>,
    ) -> Result<Egress, GpuError> {
        let ctx = backend.loaded().ctx.clone();
        ctx.bind_to_thread()?;
        let n = lane.requests.len();
        let mut rx = Vec::with_capacity(n);
        for i in 0..n {
            let addr = device_address(&ctx, lane.requests.ring(i).region()).map_err(|_| {
                GpuError::Invalid(
                    "gpu-persistent needs its request rings in mapped memory (wire_in)".into(),
                )
            })?;
            rx.push(addr);
        }
        let rx_layout = lane.requests.ring(0).layout();
        let prepared = backend.prepare(super::Ask {
            slots: cfg.slots,
            rx_stride: rx_layout.slot_stride(),
            blocks: cfg.blocks.as_deref(),
        })?;
        let module = backend.loaded().module.clone();
        let reset = module.load_function("p_reset")?;
        let ingress = Stage {
            kernel: "cohort_ingress",
            blocks: n.min(super::MAX_INGRESS_WARPS),
            threads: 32,
            dyn_smem: 0,
            elsewhere: None,
        };
        if prepared.pipe_caps.len() > super::PIPES {
            return Err(GpuError::Invalid(format!(
                "a service uses at most {} gpipes; asked for {}",
                super::PIPES,
                prepared.pipe_caps.len()
            )));
        }
        let mut kernels = Vec::new();
        for st in std::iter::once(ingress).chain(prepared.stages.iter().cloned()) {
            let m = st.elsewhere.as_ref().map_or(&module, |e| &e.module);
            kernels.push((load_stage(m, &st)?, st));
        }
        // Each device's share: a stage elsewhere is checked against its own device's room
        // (beside what other lanes put there, which the launch's start count covers).
        let here: Vec<_> = kernels
            .iter()
            .filter(|(_, st)| st.elsewhere.is_none())
            .cloned()
            .collect();
        check_resident(&ctx, &here)?;
        for (f, st) in kernels.iter().filter(|(_, st)| st.elsewhere.is_some()) {
            let e = st.elsewhere.as_ref().expect("filtered");
            check_resident(&e.ctx, &[(f.clone(), st.clone())])?;
        }
        let system_scope = prepared
            .stages
            .iter()
            .any(|st| st.elsewhere.as_ref().is_some_and(|e| e.other_physical));
        let tx_rings = cfg.egress_threads.clamp(1, n.min(super::rt::MAX_TX));
        let geometry = Geometry {
            rx,
            rx_layout,
            rx_copy: prepared.rx_copy,
            nslots: cfg.slots,
            tx_slots: cfg.tx_slots,
            tx_rings,
            batch: cfg.batch,
            profile: cfg.profile,
            pipe_caps: prepared.pipe_caps.clone(),
            system_scope,
        };
        let (dev, tx) = DeviceState::new(&ctx, reset, &geometry)?;
        let streams = kernels
            .iter()
            .map(|(_, st)| st.elsewhere.as_ref().map_or(&ctx, |e| &e.ctx).new_stream())
            .collect::<Result<Vec<_>, _>>()?;
        let rx_seen = (0..n)
            .map(|i| lane.requests.ring(i).published_tail())
            .collect();
        tracing::info!(
            gpu = ctx.ordinal(),
            stages = ?kernels.iter().map(|(_, s)| format!("{}x{}", s.kernel, s.blocks)).collect::<Vec<_>>(),
            slots = cfg.slots,
            rings = n,
            egress_threads = tx_rings,
            system_scope = geometry.system_scope,
            "gpu-persistent kernels planned"
        );
        let answers = lane.answers.split(tx_rings);
        let mut drains = TxDrain::for_lane(tx, answers, n, &stats, cfg.profile).into_iter();
        let first = drains.next().expect("at least one TX ring");
        let e = Egress {
            backend,
            lane,
            tx: first,
            spare: drains.collect(),
            drainers: Vec::new(),
            dev,
            prepared,
            kernels,
            streams,
            watchdog: cfg.watchdog,
            stop,
            stats,
            rx_seen,
            profile: cfg.profile,
        };
        Ok(e)
    }

    /// Launched here, not on the egress thread: a launch that cannot run is the engine's start
    /// failing, with the reason, not a lane that dies later.
    pub(super) fn launched(mut self) -> Result<Egress, GpuError> {
        if let Err(err) = self.start_drainers() {
            self.stop_drainers();
            return Err(err);
        }
        if let Err(err) = self.launch() {
            tracing::error!(error = %err, "gpu-persistent: launch failed; stopping what started");
            self.abandon();
            return Err(err);
        }
        Ok(self)
    }

    /// A thread for each TX ring beyond the first, before any kernel can answer into one.
    fn start_drainers(&mut self) -> Result<(), GpuError> {
        let name = format!("gpu{}-persist", self.backend.loaded().ctx.ordinal());
        for d in std::mem::take(&mut self.spare) {
            let t = Drainer::spawn(d, &name)
                .map_err(|e| GpuError::Invalid(format!("spawning a TX drain thread: {e}")))?;
            self.drainers.push(t);
        }
        Ok(())
    }

    /// Stops the drain threads (each empties its ring first) and keeps their rings.
    fn stop_drainers(&mut self) {
        for t in std::mem::take(&mut self.drainers) {
            match t.join() {
                Some(d) => self.spare.push(d),
                None => tracing::error!("gpu-persistent: a TX drain thread panicked"),
            }
        }
    }

    /// Launches every persistent kernel and waits until all their blocks run: one that never
    /// becomes resident (the GPU shared with other kernels, stage counts too high for the
    /// blocks to fit together) would leave its share of the work waiting forever.
    fn launch(&self) -> Result<(), GpuError> {
        let before = self.dev.started_blocks()?;
        // The ingress warps first: they are small, and launched after worker stages that fill
        // the SMs' registers they found no SM (measured: 520 cohort blocks at 4 per SM left
        // no room for one ingress warp). Work they queue before a stage runs waits in its
        // gpipe; a stage that never runs fails the start below.
        for ((f, st), s) in self.kernels.iter().zip(&self.streams) {
            let cfg = LaunchConfig {
                grid_dim: (st.blocks as u32, 1, 1),
                block_dim: (st.threads, 1, 1),
                shared_mem_bytes: st.dyn_smem,
            };
            let mut b = s.launch_builder(f);
            let args = st
                .elsewhere
                .as_ref()
                .map_or(&self.prepared.args, |e| &e.args);
            b.arg(&self.dev.args).arg(args);
            // SAFETY: every persistent kernel takes (PRt, SvcArgs) by value.
            unsafe { b.launch(cfg) }?;
        }
        let want: u64 = self.kernels.iter().map(|(_, st)| st.blocks as u64).sum();
        tracing::info!(
            blocks = want,
            "gpu-persistent: launched; waiting for every block to start"
        );
        let until = Instant::now() + RESIDENT_TIMEOUT;
        loop {
            let started = self.dev.started_blocks()? - before;
            if started >= want {
                assert_eq!(started, want, "each block counts itself once");
                tracing::info!(blocks = want, "gpu-persistent: every block resident");
                return Ok(());
            }
            self.kernels_running()?;
            if Instant::now() > until {
                return Err(GpuError::Invalid(format!(
                    "only {started} of the {want} persistent blocks became resident within {:?} ({}): \
                     the GPU is shared with other long-running kernels, or the stages need more \
                     of it than fits at once; lower the stage block counts",
                    RESIDENT_TIMEOUT,
                    self.stage_list()
                )));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn stage_list(&self) -> String {
        self.kernels
            .iter()
            .map(|(_, st)| format!("{} x{}", st.kernel, st.blocks))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// After a launch that failed: stops what runs. Freeing the state while blocks still wait
    /// to start would hand them freed memory, so unless every kernel ended it is leaked.
    fn abandon(mut self) {
        // Blocks that never started wait for room other kernels hold: no use waiting long.
        match self.stop_kernels(Duration::from_millis(200)) {
            Ok(()) => self.stop_drainers(),
            Err(e) => {
                tracing::error!(error = %e, "gpu-persistent: kernels of a failed launch did not stop; their state is leaked");
                self.leak();
            }
        }
    }

    /// One look at the lane: drains answers, watches progress (the watchdog and the kernels'
    /// health, once a millisecond), and says what it found. Never blocks.
    fn step(&mut self, w: &mut Watch) -> Verdict {
        if self.stop.load(Ordering::Acquire) {
            return Verdict::Stop;
        }
        // The RX tails first, every look: the drain threads park while the GPU holds
        // nothing, and are woken here when it takes requests.
        let took = self.observe_rx();
        let before = self.stats.answered.load(Ordering::Relaxed);
        if self.tx.drain(512) > 0 {
            w.last_progress = Instant::now();
            return Verdict::Worked;
        }
        if took || self.stats.answered.load(Ordering::Relaxed) != before {
            w.last_progress = Instant::now();
        }
        if !self.rx_waiting() && self.holding() == 0 {
            return Verdict::Idle;
        }
        let now = Instant::now();
        if now - w.last_check >= Duration::from_millis(1) {
            w.last_check = now;
            // A thread serving several GPUs leaves another's context current.
            let checked = self
                .backend
                .loaded()
                .ctx
                .bind_to_thread()
                .map_err(GpuError::from)
                .and_then(|()| self.kernels_running());
            if let Err(e) = checked {
                self.stats.faults.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "gpu-persistent: a kernel failed; the lane stops and its requests are answered INTERNAL");
                return Verdict::Failed;
            }
            if now - w.last_progress > self.watchdog {
                if let Err(e) = self.restart() {
                    tracing::error!(error = %e, "gpu-persistent: restart failed; the lane stops");
                    return Verdict::Failed;
                }
                w.last_progress = Instant::now();
            }
        }
        Verdict::Holding
    }

    /// Requests the GPU has taken and not answered.
    fn holding(&self) -> u64 {
        self.stats.holding()
    }

    /// Reads new RX tails; true if the GPU took anything since the last look (the drain
    /// threads are then woken: answers will follow).
    fn observe_rx(&mut self) -> bool {
        let mut took = 0u64;
        for (i, seen) in self.rx_seen.iter_mut().enumerate() {
            let t = self.lane.requests.ring(i).published_tail();
            if t != *seen {
                took += t.wrapping_sub(*seen) as u64;
                *seen = t;
            }
        }
        if took == 0 {
            return false;
        }
        self.stats.taken.fetch_add(took, Ordering::AcqRel);
        self.drainers.iter().for_each(Drainer::nudge);
        true
    }

    /// Moves answers from every TX ring this thread holds (all of them while no drain thread
    /// runs: at launch, after a stop).
    fn drain(&mut self, max: usize) -> usize {
        let mut n = self.tx.drain(max);
        for d in &mut self.spare {
            n += d.drain(max);
        }
        n
    }

    fn rx_waiting(&self) -> bool {
        (0..self.lane.requests.len()).any(|i| is_waiting(self.lane.requests.ring(i)))
    }

    /// Ok while every kernel still runs; an error for a fault or a kernel that returned.
    fn kernels_running(&self) -> Result<(), GpuError> {
        for ((_, st), s) in self.kernels.iter().zip(&self.streams) {
            match stream_state(s) {
                CUresult::CUDA_ERROR_NOT_READY => {}
                CUresult::CUDA_SUCCESS => {
                    return Err(GpuError::Invalid(format!("{} returned", st.kernel)))
                }
                e => return Err(GpuError::Invalid(format!("{}: {e:?}", st.kernel))),
            }
        }
        Ok(())
    }

    /// Raises the stop flag and waits (draining TX) until every kernel has returned.
    fn stop_kernels(&mut self, within: Duration) -> Result<(), GpuError> {
        self.dev.set_stop(true)?;
        let until = Instant::now() + within;
        loop {
            self.drain(usize::MAX);
            let mut running = false;
            for ((_, st), s) in self.kernels.iter().zip(&self.streams) {
                match stream_state(s) {
                    CUresult::CUDA_SUCCESS => {}
                    CUresult::CUDA_ERROR_NOT_READY => running = true,
                    e => return Err(GpuError::Invalid(format!("{}: {e:?}", st.kernel))),
                }
            }
            if !running {
                break;
            }
            if Instant::now() > until {
                return Err(GpuError::Invalid(
                    "persistent kernels ignored the stop flag".into(),
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        self.drain(usize::MAX);
        // Every answer the GPU committed read from every TX ring (the drain threads empty
        // theirs): only then is what is still held truly lost.
        let committed = self.dev.stats()?[STAT_ANSWERED];
        while self.stats.answered.load(Ordering::Acquire) < committed {
            if Instant::now() > until {
                return Err(GpuError::Invalid(format!(
                    "the TX drain threads read {} of the {committed} answers committed",
                    self.stats.answered.load(Ordering::Acquire)
                )));
            }
            self.drainers.iter().for_each(Drainer::nudge);
            std::thread::sleep(Duration::from_micros(50));
        }
        self.observe_rx();
        Ok(())
    }

    fn restart(&mut self) -> Result<(), GpuError> {
        tracing::error!(
            holding = self.holding(),
            waiting = self.rx_waiting(),
            watchdog_ms = self.watchdog.as_millis() as u64,
            "gpu-persistent: no progress; restarting the kernels"
        );
        self.stop_kernels(STOP_TIMEOUT)?;
        // What the GPU still held is lost: the ingresses answer it INTERNAL.
        self.lane.announce_restart();
        self.stats
            .forgiven
            .fetch_add(self.holding(), Ordering::AcqRel);
        self.dev.reset()?;
        self.launch()?;
        self.stats.restarts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn shutdown(mut self) -> Option<Egress> {
        match self.dev.stats() {
            Ok(c) => tracing::info!(
                taken = c[STAT_TAKEN],
                answered = c[STAT_ANSWERED],
                no_slot = c[STAT_NO_SLOT],
                tasks = c[STAT_TASKS],
                pops = c[STAT_POPS],
                "gpu-persistent device counters (tasks per pop: batching inside the GPU)"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "gpu-persistent: reading the device counters failed")
            }
        }
        let until = Instant::now() + DRAIN_TIMEOUT;
        while (self.holding() > 0 || self.rx_waiting()) && Instant::now() < until {
            if self.drain(usize::MAX) == 0 {
                self.observe_rx();
                std::thread::yield_now();
            }
        }
        if let Err(e) = self.stop_kernels(STOP_TIMEOUT) {
            tracing::error!(error = %e, "gpu-persistent: kernels did not stop at shutdown");
            self.leak();
            return None;
        }
        self.stop_drainers();
        let mut h = self.tx.ring_to_ring.clone();
        for d in &self.spare {
            let _ = h.add(&d.ring_to_ring);
        }
        tracing::info!(
            answered = self.stats.answered.load(Ordering::Relaxed),
            restarts = self.stats.restarts.load(Ordering::Relaxed),
            egress_threads = 1 + self.spare.len(),
            p50_us = h.value_at_quantile(0.5) as f64 / 1e3,
            p99_us = h.value_at_quantile(0.99) as f64 / 1e3,
            "gpu-persistent ring-to-ring latency (ingress arrival to TX answer read)"
        );
        // Stopped (the state is freed when the caller drops it); the ingress warp flushed its
        // clock.
        if self.profile > 0 {
            self.report_profile();
        }
        Some(self)
    }

    fn report_profile(&self) {
        let read = self
            .dev
            .stats()
            .and_then(|st| Ok((st, self.dev.profile_log()?)));
        match read {
            Ok((st, log)) => {
                let mut stamps = self.tx.host_stamps.clone();
                for d in &self.spare {
                    stamps.extend(d.host_stamps.iter().map(|(k, v)| (*k, *v)));
                }
                let p = profile::reduce(&log, &stamps, &st);
                tracing::info!(
                    profile = %serde_json::to_string(&p).unwrap_or_default(),
                    "gpu-persistent profile"
                );
                *self.stats.profile.lock().expect("profile lock") = Some(p);
            }
            Err(e) => tracing::warn!(error = %e, "gpu-persistent: reading the profile failed"),
        }
    }

    /// Kernels may still run or wait to start (or the context is poisoned): freeing memory or
    /// unloading the module they use could block forever or fault, so everything the lane
    /// holds on the GPU (state, streams, TX rings, the service's buffers and module) is leaked
    /// instead, once its drain threads have stopped.
    fn leak(mut self) {
        self.stop_drainers();
        std::mem::forget(self);
    }
}

/// Whether a request sits in `ring` that its device consumer has not taken.
/// What one look at a lane found.
enum Verdict {
    /// Answers moved.
    Worked,
    /// The GPU holds requests, or some wait in the rings: look again soon.
    Holding,
    /// Nothing held, nothing waiting.
    Idle,
    /// Told to stop.
    Stop,
    /// A kernel failed, or a restart did: the lane is lost.
    Failed,
}

/// A lane's progress clock.
struct Watch {
    last_progress: Instant,
    last_check: Instant,
}

/// Serves `lanes` (one GPU each, or virtual GPUs) on the calling thread until told to stop,
/// a look at each in turn: Centaur's one host core for many GPUs. Each lane then stops its
/// kernels and hands its GPU state back unfreed, in order (None where it had to be leaked):
/// the caller frees them once every engine of the device has stopped its kernels, since a free
/// waits for every kernel of the device and would block another engine's thread before it
/// could stop its own. A lane that fails ends alone: its ingresses learn it at once (its
/// health guard drops) and the others go on.
pub(super) fn run_all(lanes: Vec<Egress>) -> Vec<Option<Egress>> {
    let n = lanes.len();
    let mut guards: Vec<Option<HealthGuard>> =
        lanes.iter().map(|e| Some(e.lane.health_guard())).collect();
    let mut ended: Vec<Option<Option<Egress>>> = (0..n).map(|_| None).collect();
    let mut live: Vec<Option<(Egress, Watch)>> = Vec::with_capacity(n);
    for (i, e) in lanes.into_iter().enumerate() {
        e.lane.bell.bind_current();
        if let Err(err) = e.backend.loaded().ctx.bind_to_thread() {
            tracing::error!(error = %err, "gpu-persistent: binding the context failed");
            ended[i] = Some(Some(e));
            guards[i] = None;
            live.push(None);
            continue;
        }
        let now = Instant::now();
        let w = Watch {
            last_progress: now,
            last_check: now,
        };
        live.push(Some((e, w)));
    }
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
    loop {
        let (mut worked, mut idle) = (false, true);
        for i in 0..n {
            let Some((e, w)) = &mut live[i] else {
                continue;
            };
            match e.step(w) {
                Verdict::Worked => (worked, idle) = (true, false),
                Verdict::Holding => idle = false,
                Verdict::Idle => {}
                Verdict::Stop => {
                    let (e, _) = live[i].take().expect("live");
                    if let Err(err) = e.backend.loaded().ctx.bind_to_thread() {
                        tracing::error!(error = %err, "gpu-persistent: binding the context failed");
                    }
                    ended[i] = Some(e.shutdown());
                    guards[i] = None;
                }
                Verdict::Failed => {
                    let (e, _) = live[i].take().expect("live");
                    e.leak();
                    ended[i] = Some(None);
                    guards[i] = None;
                }
            }
        }
        if live.iter().all(Option::is_none) {
            return ended
                .into_iter()
                .map(|e| e.expect("every lane ended"))
                .collect();
        }
        if worked {
            idle_since = None;
            spins = 0;
            continue;
        }
        if idle {
            // Poll a little before parking: a thread wake-up costs more than the GPU's whole
            // round trip.
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() < IDLE_SPIN {
                std::hint::spin_loop();
                continue;
            }
            let lanes: Vec<&Egress> = live.iter().flatten().map(|(e, _)| e).collect();
            let bells: Vec<&Bell> = lanes.iter().map(|e| &*e.lane.bell).collect();
            let rx_written = || lanes.iter().any(|e| e.rx_waiting());
            cohort_engine::bell::sleep_on(&bells, Duration::from_millis(2), rx_written);
            // Asleep is not stuck: the watchdogs count from the wake-up.
            let now = Instant::now();
            for (_, w) in live.iter_mut().flatten() {
                w.last_progress = now;
            }
            continue;
        }
        idle_since = None;
        spins += 1;
        if spins < 256 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

fn is_waiting(ring: &Consumer) -> bool {
    ring.is_written(ring.published_tail())
}

/// A stage's kernel, with the launch attributes every persistent kernel shares.
pub(super) fn load_stage(
    module: &Arc<cudarc::driver::CudaModule>,
    st: &Stage,
) -> Result<CudaFunction, GpuError> {
    let f = module.load_function(st.kernel)?;
    // One shared-memory carveout for every persistent kernel: an SM configured for one
    // kernel's carveout cannot take blocks of a kernel that asks for another until it drains -
    // which persistent blocks never do - so mixed preferences can leave blocks with nowhere
    // to run although the occupancy sums say they fit.
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
        100,
    )?;
    if st.dyn_smem > 0 {
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            st.dyn_smem as i32,
        )?;
    }
    Ok(f)
}

/// How many blocks of `st` the context's SMs (the whole GPU, or a virtual GPU's) hold at once (nothing else running).
pub(super) fn capacity(
    ctx: &Arc<cudarc::driver::CudaContext>,
    f: &CudaFunction,
    st: &Stage,
) -> Result<usize, GpuError> {
    // A virtual GPU's group, not the device's.
    let sms = crate::green::context_sms(ctx)?;
    let per_sm =
        f.occupancy_max_active_blocks_per_multiprocessor(st.threads, st.dyn_smem as usize, None)?;
    Ok(per_sm as usize * sms)
}

/// Checks that every persistent block can be resident at once (a block waiting for an SM
/// that a never-ending block holds would wait forever): the fractions of the GPU each
/// kernel's blocks need must sum to at most one. Necessary, not sufficient (blocks of
/// several kernels share SMs by several resources at once): the launch itself then counts
/// the blocks that started.
fn check_resident(
    ctx: &Arc<cudarc::driver::CudaContext>,
    kernels: &[(CudaFunction, Stage)],
) -> Result<(), GpuError> {
    let mut used = 0.0;
    let mut parts = Vec::new();
    for (f, st) in kernels {
        let cap = capacity(ctx, f, st)?;
        if cap == 0 {
            return Err(GpuError::Invalid(format!(
                "{} cannot run at all",
                st.kernel
            )));
        }
        used += st.blocks as f64 / cap as f64;
        parts.push(format!("{} {} blocks (of {cap})", st.kernel, st.blocks));
    }
    if used > 1.0 {
        return Err(GpuError::Invalid(format!(
            "the persistent blocks need {:.0}% of the GPU at once ({}); lower the stage block counts",
            used * 100.0,
            parts.join(", ")
        )));
    }
    Ok(())
}
