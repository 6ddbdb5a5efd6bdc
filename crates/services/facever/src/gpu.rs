//! facever's GPU batch backend (gpu-direct, gpu-cohort), in Lynx's two designs (sec. 6.4):
//!
//! - host-centric ([`Design::Host`]): the host fetches each request's reference from memcached
//!   (one get per request, on the slot's client-queue thread), then queues the whole cohort's
//!   comparison (images in, `facever_lbp`, references in, `facever_chi2`, distances out);
//! - GPU-centric ([`Design::Gpu`]): the cohort goes to the GPU at once (images in,
//!   `facever_lbp`); meanwhile the slot's client-queue thread fetches every waiting request's
//!   reference in one multiget; they are copied in beside the probes' histograms and
//!   `facever_chi2` answers.
//!
//! Either way the engine's control thread never waits on memcached (`StreamBuffers::resume`
//! reports `Waiting`), and a request whose reference is missing or unreachable gets its own
//! NOT_FOUND or UNAVAILABLE while the rest of its cohort is answered.

use super::config::Design;
use super::db::{FaceDb, Miss};
use super::kernels::{FaceverChi2Args, FaceverLbpArgs, CHI2, LBP};
use super::lbp::{self, BINS, IMAGE_BYTES};
use super::service::miss_error;
use super::Verdict;
use cohort_engine::BatchBackend;
use cohort_gpu::engine::{GpuBackend, Pinned, Resume, StreamBuffers};
use cohort_gpu::launch::{Dev, Kernel, Work};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cohort_proto::ErrorPayload;
use cohort_service_api::memcached::ClientQueue;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

/// The kernels and the code -> bin table on one device.
pub struct DeviceKernels {
    lbp: Kernel<FaceverLbpArgs>,
    chi2: Kernel<FaceverChi2Args>,
    table: CudaSlice<u8>,
}

impl DeviceKernels {
    pub fn load(ctx: &Arc<CudaContext>, dev: &DeviceInfo) -> Result<DeviceKernels, GpuError> {
        let module = load_module(ctx, dev, super::kernels::source())?;
        let s = ctx.default_stream();
        let table = s.clone_htod(&lbp::uniform_table())?;
        s.synchronize()?;
        Ok(DeviceKernels {
            lbp: Kernel::load(&module, &LBP)?,
            chi2: Kernel::load(&module, &CHI2)?,
            table,
        })
    }

    /// Queues the histograms of `rows` images in `images` into `hists`.
    pub fn histograms(
        &self,
        s: &Arc<CudaStream>,
        images: &CudaSlice<u8>,
        hists: &mut CudaSlice<f32>,
        rows: usize,
    ) -> Result<(), GpuError> {
        let args = FaceverLbpArgs {
            images: Dev::of(images, s),
            table: Dev::of(&self.table, s),
            hists: Dev::of_mut(hists, s),
            rows: rows as u32,
        };
        // SAFETY: images holds rows x IMAGE_BYTES, hists rows x BINS, table 256.
        unsafe { self.lbp.launch(s, Work::Items(rows), 0, &args) }
    }

    /// Queues the distances of `rows` (probe, reference) pairs.
    pub fn distances(
        &self,
        s: &Arc<CudaStream>,
        probes: &CudaSlice<f32>,
        refs: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
        rows: usize,
    ) -> Result<(), GpuError> {
        let args = FaceverChi2Args {
            probes: Dev::of(probes, s),
            refs: Dev::of(refs, s),
            distances: Dev::of_mut(out, s),
            rows: rows as u32,
        };
        // SAFETY: probes and refs hold rows x BINS, out rows.
        unsafe { self.chi2.launch(s, Work::Items(rows), 0, &args) }
    }
}

pub struct FaceverGpu {
    ctx: Arc<CudaContext>,
    kernels: Arc<DeviceKernels>,
    db: Arc<FaceDb>,
    threshold: f32,
    design: Design,
}

impl FaceverGpu {
    pub fn new(
        dev: &DeviceInfo,
        db: Arc<FaceDb>,
        threshold: f32,
        design: Design,
    ) -> Result<FaceverGpu, GpuError> {
        let ctx = cohort_gpu::launch::context(dev)?;
        Ok(FaceverGpu {
            kernels: Arc::new(DeviceKernels::load(&ctx, dev)?),
            ctx,
            db,
            threshold,
            design,
        })
    }
}

impl BatchBackend for FaceverGpu {
    fn batch_key(&self, payload: &[u8]) -> Result<u64, ErrorPayload> {
        super::decode(payload)?;
        Ok(0)
    }
}

impl GpuBackend for FaceverGpu {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn stream_buffers(
        &self,
        stream: &Arc<CudaStream>,
        cap: usize,
    ) -> Result<Box<dyn StreamBuffers>, GpuError> {
        Ok(Box::new(FaceverBuffers {
            kernels: self.kernels.clone(),
            threshold: self.threshold,
            design: self.design,
            host_in: Pinned::for_uploads(&self.ctx, cap * IMAGE_BYTES)?,
            host_dist: Pinned::for_reads(&self.ctx, cap)?,
            dev_in: stream.alloc_zeros(cap * IMAGE_BYTES)?,
            hists: stream.alloc_zeros(cap * BINS)?,
            dev_refs: stream.alloc_zeros(cap * BINS)?,
            dist: stream.alloc_zeros(cap)?,
            lookup: Some(Lookup {
                persons: vec![0; cap],
                refs: Pinned::for_uploads(&self.ctx, cap * BINS)?,
                found: vec![Ok(()); cap],
                rows: 0,
                design: self.design,
            }),
            queue: {
                let db = self.db.clone();
                ClientQueue::spawn("facever-fetch", move |l: &mut Lookup| l.run(&db))
                    .map_err(GpuError::Invalid)?
            },
            phase: Phase::Idle,
        }))
    }

    /// References come through the host per cohort: no graph replays a batch.
    fn graphable(&self) -> bool {
        false
    }
}

/// A cohort's references fetched on the host: the persons asked (staged with the requests),
/// the references found (pinned, for the copy in) and per row whether it was found. It moves
/// to the slot's client-queue thread for the fetch and back.
struct Lookup {
    persons: Vec<u32>,
    refs: Pinned<f32>,
    found: Vec<Result<(), Miss>>,
    rows: usize,
    design: Design,
}

impl Lookup {
    fn run(&mut self, db: &FaceDb) {
        let rows = self.rows;
        let refs = self.refs.as_mut_slice();
        let mut put = |row: usize, got: Result<&[f32], Miss>, found: &mut Vec<Result<(), Miss>>| {
            let dst = &mut refs[row * BINS..(row + 1) * BINS];
            match got {
                Ok(h) => dst.copy_from_slice(h),
                // The kernel still runs on the row; its distance is never read.
                Err(_) => dst.fill(0.0),
            }
            found[row] = got.map(|_| ());
        };
        match self.design {
            // Host-centric: each request's reference on its own.
            Design::Host => {
                for row in 0..rows {
                    let got = db.get(self.persons[row]);
                    put(row, got.as_deref().map_err(Clone::clone), &mut self.found);
                }
            }
            // GPU-centric: every waiting request's in one multiget.
            Design::Gpu => match db.get_many(&self.persons[..rows]) {
                Ok(map) => {
                    for row in 0..rows {
                        let got = map.get(&self.persons[row]).map(|h| &h[..]);
                        put(row, got.ok_or(Miss::NotFound), &mut self.found);
                    }
                }
                Err(e) => {
                    for row in 0..rows {
                        put(row, Err(Miss::Unavailable(e.clone())), &mut self.found);
                    }
                }
            },
        }
    }
}

/// Where a slot's cohort is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    /// Queued (GPU-centric: the histograms under way); the fetch is next.
    Started,
    /// The client queue holds the lookup.
    Fetching,
    /// The distances are being computed and copied out.
    Comparing,
}

struct FaceverBuffers {
    kernels: Arc<DeviceKernels>,
    threshold: f32,
    design: Design,
    host_in: Pinned<u8>,
    host_dist: Pinned<f32>,
    dev_in: CudaSlice<u8>,
    hists: CudaSlice<f32>,
    dev_refs: CudaSlice<f32>,
    dist: CudaSlice<f32>,
    /// None while the client queue holds it.
    lookup: Option<Lookup>,
    queue: ClientQueue<Lookup>,
    phase: Phase,
}

impl FaceverBuffers {
    fn lookup(&mut self) -> Result<&mut Lookup, GpuError> {
        self.lookup
            .as_mut()
            .ok_or_else(|| GpuError::Invalid("the memcached client queue kept a cohort".into()))
    }

    fn images_and_histograms(&mut self, s: &Arc<CudaStream>, rows: usize) -> Result<(), GpuError> {
        s.memcpy_htod(
            &self.host_in.as_slice()[..rows * IMAGE_BYTES],
            &mut self.dev_in.slice_mut(0..rows * IMAGE_BYTES),
        )?;
        self.kernels
            .histograms(s, &self.dev_in, &mut self.hists, rows)
    }

    /// The references in, the distances computed and copied out.
    fn compare(&mut self, s: &Arc<CudaStream>) -> Result<(), GpuError> {
        let (rows, design) = (self.lookup()?.rows, self.design);
        if design == Design::Host {
            self.images_and_histograms(s, rows)?;
        }
        let l = self.lookup.as_ref().expect("checked above");
        s.memcpy_htod(
            &l.refs.as_slice()[..rows * BINS],
            &mut self.dev_refs.slice_mut(0..rows * BINS),
        )?;
        self.kernels
            .distances(s, &self.hists, &self.dev_refs, &mut self.dist, rows)?;
        s.memcpy_dtoh(
            &self.dist.slice(0..rows),
            &mut self.host_dist.as_mut_slice()[..rows],
        )?;
        Ok(())
    }
}

impl StreamBuffers for FaceverBuffers {
    fn stage(&mut self, _key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        let (person, image) = super::decode(payload)?;
        self.host_in.as_mut_slice()[row * IMAGE_BYTES..(row + 1) * IMAGE_BYTES]
            .copy_from_slice(image);
        let l = self.lookup.as_mut().ok_or_else(|| {
            ErrorPayload::new(
                cohort_proto::ErrorCode::Internal,
                "facever: a slot lost its cohort to a failed memcached client queue",
            )
        })?;
        l.persons[row] = person;
        Ok(())
    }

    fn enqueue(&mut self, s: &Arc<CudaStream>, _key: u64, rows: usize) -> Result<(), GpuError> {
        self.lookup()?.rows = rows;
        if self.design == Design::Gpu {
            self.images_and_histograms(s, rows)?;
        }
        self.phase = Phase::Started;
        Ok(())
    }

    fn resume(&mut self, s: &Arc<CudaStream>) -> Result<Resume, GpuError> {
        match self.phase {
            Phase::Idle => Ok(Resume::Done),
            Phase::Started => {
                let l = self.lookup.take().expect("held until started");
                if let Err((l, msg)) = self.queue.start(l) {
                    self.lookup = Some(l);
                    self.phase = Phase::Idle;
                    return Err(GpuError::Invalid(format!(
                        "the memcached client queue is {msg}"
                    )));
                }
                self.phase = Phase::Fetching;
                Ok(Resume::Waiting)
            }
            Phase::Fetching => match self.queue.poll().map_err(GpuError::Invalid)? {
                Some(l) => {
                    self.lookup = Some(l);
                    self.compare(s)?;
                    self.phase = Phase::Comparing;
                    Ok(Resume::Enqueued)
                }
                None => Ok(Resume::Waiting),
            },
            Phase::Comparing => {
                self.phase = Phase::Idle;
                Ok(Resume::Done)
            }
        }
    }

    fn answer(&mut self, _key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let l = self.lookup.as_ref().ok_or_else(|| {
            ErrorPayload::new(
                cohort_proto::ErrorCode::Internal,
                "facever: answers asked before the references came back",
            )
        })?;
        match &l.found[row] {
            Ok(()) => {
                Verdict::of(self.host_dist.as_slice()[row], self.threshold).encode(out);
                Ok(())
            }
            Err(m) => Err(miss_error(l.persons[row], m)),
        }
    }
}

/// How far a GPU distance may be from the CPU twin's, relative (the bins are summed in
/// another order; every term is the same).
pub const DISTANCE_TOLERANCE: f32 = 1e-4;

/// The kernels against the CPU twin: the built-in faces' histograms exactly, and the distance
/// of every (held-out probe, person) pair of them plus fresh random images from `seed` within
/// [`DISTANCE_TOLERANCE`]. No memcached: the references are computed here.
pub fn check(devs: &[DeviceInfo], seed: u64) -> Result<Vec<String>, String> {
    let dev = &devs[0];
    use rand::{Rng, SeedableRng};
    let ctx = cohort_gpu::launch::context(dev).map_err(|e| e.to_string())?;
    let k = DeviceKernels::load(&ctx, dev).map_err(|e| e.to_string())?;
    let faces = super::orl::embedded();
    let table = lbp::uniform_table();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    // Rows: every built-in image against every person's reference, then random images
    // against random references.
    let (mut images, mut refs) = (Vec::new(), Vec::new());
    let people_refs: Vec<_> = (1..=faces.people)
        .map(|p| faces.reference(p, &table))
        .collect();
    for p in 1..=faces.people {
        for i in 0..super::orl::IMAGES_PER_PERSON {
            for r in &people_refs {
                images.extend_from_slice(faces.image(p, i));
                refs.extend_from_slice(r);
            }
        }
    }
    for _ in 0..500 {
        images.extend((0..IMAGE_BYTES).map(|_| rng.gen::<u8>()));
        refs.extend_from_slice(&people_refs[rng.gen_range(0..people_refs.len())]);
    }
    let rows = images.len() / IMAGE_BYTES;
    let run = || -> Result<(Vec<f32>, Vec<f32>), GpuError> {
        let s = ctx.new_stream()?;
        let dev_in = s.clone_htod(&images)?;
        let dev_refs = s.clone_htod(&refs)?;
        let mut hists = s.alloc_zeros::<f32>(rows * BINS)?;
        let mut dist = s.alloc_zeros::<f32>(rows)?;
        k.histograms(&s, &dev_in, &mut hists, rows)?;
        k.distances(&s, &hists, &dev_refs, &mut dist, rows)?;
        let out = (s.clone_dtoh(&hists)?, s.clone_dtoh(&dist)?);
        s.synchronize()?;
        Ok(out)
    };
    let (hists, dist) = run().map_err(|e| e.to_string())?;
    let mut worst = 0f32;
    for r in 0..rows {
        let img = &images[r * IMAGE_BYTES..(r + 1) * IMAGE_BYTES];
        let want_h = lbp::histogram(img, &table);
        assert_eq!(
            &hists[r * BINS..(r + 1) * BINS],
            &want_h[..],
            "histogram of row {r}"
        );
        let want = lbp::chi_square(&want_h, &refs[r * BINS..(r + 1) * BINS]);
        let err = (dist[r] - want).abs() / want.max(1.0);
        worst = worst.max(err);
        assert!(
            err <= DISTANCE_TOLERANCE,
            "row {r}: GPU distance {}, CPU {want}",
            dist[r]
        );
    }
    Ok(vec![format!(
        "facever: {rows} (face, reference) pairs: GPU histograms = CPU twin's exactly, distances within {worst:.2e} relative"
    )])
}
