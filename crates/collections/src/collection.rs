//! One collection: its state in memory behind a read-write lock, its log, and the group
//! commit that orders writes.
//!
//! A write is checked whole, then queued. The first writer to find no commit in progress
//! becomes the leader: it takes every queued write, appends them to the log as one record,
//! syncs it once (the writers share one fsync), applies them in log order under the write
//! lock, then wakes their writers, whose acknowledgement follows. Writes queued meanwhile
//! form the next group. So a write is acknowledged only once durable, memory applies writes
//! in the order the log replays them, and a search that starts after an acknowledgement
//! (it takes the read lock) sees the write. Searches never wait for a sync, only for the
//! short apply.
//!
//! The leader also does the upkeep between groups: compaction of tombstones, a snapshot once
//! the log passes `SNAPSHOT_AT` bytes, and starting an IVF training when one is due. The
//! training runs on a thread of its own (`train`), holding no lock while k-means runs and the
//! read lock only a chunk of points at a time: writes and searches go on meanwhile (on the
//! old lists, or exact scans), and the new lists are installed under the write lock with the
//! points written meanwhile added.
//!
//! Searches served by a device are grouped the same way (`search_in`, group search): a
//! search joins a queue, the first caller to find no pass in progress leads, and one device
//! pass answers every queued request compatible with the first (see `search_in`).

use crate::accel::{Accelerator, AcceleratorFactory, Answer, Ran, SearchRequest};
use crate::data::Data;
use crate::error::{Error, Kind, Result};
use crate::group::GroupSearch;
use crate::ops::Op;
use crate::schema::Settings;
use crate::wal::{self, Wal};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};

/// Writes queued for one collection at most; more are refused (OVERLOADED) rather than held.
pub const MAX_PENDING: usize = 4096;
/// A snapshot is taken (and the log emptied) once the log is this long.
pub const SNAPSHOT_AT: u64 = 256 << 20;
pub use crate::group::{MAX_LEAD_PASSES, MAX_PASS_QUERIES, MAX_PENDING_SEARCHES};

pub struct Collection {
    pub name: String,
    pub settings: Settings,
    dir: PathBuf,
    data: RwLock<Data>,
    queue: Mutex<Queue>,
    wal: Mutex<Wal>,
    dropped: AtomicBool,
    snapshot_at: AtomicU64,
    /// Log records written and the writes they held (a record per commit group).
    records: AtomicU64,
    logged: AtomicU64,
    /// A training is running (compaction, which renumbers slots, waits for it).
    training: AtomicBool,
    trainer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The device copy that serves searches, if the server has a device (`accel`).
    accel: Option<Box<dyn Accelerator>>,
    /// Searches answered on the device and on the CPU.
    ran_device: AtomicU64,
    ran_cpu: AtomicU64,
    /// Of those on the CPU: exact searches of few matches sent there though a device was
    /// attached (`search`).
    ran_cpu_selective: AtomicU64,
    /// Searches waiting for a device pass, and the passes run (`search_in`, `group.rs`).
    group: GroupSearch,
}

/// Points one read-locked step of a background training assigns.
const TRAIN_CHUNK: usize = 65_536;

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    leader: bool,
}

struct Pending {
    op: Op,
    bytes: Vec<u8>,
    done: Arc<Done>,
}

#[derive(Default)]
struct Done {
    result: Mutex<Option<Result<usize>>>,
    cv: Condvar,
}

impl Done {
    fn set(&self, r: Result<usize>) {
        *self.result.lock().expect("done lock") = Some(r);
        self.cv.notify_all();
    }
    fn wait(&self) -> Result<usize> {
        let mut g = self.result.lock().expect("done lock");
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            g = self.cv.wait(g).expect("done lock");
        }
    }
}

/// Clears the leader flag even if a group's upkeep panicked, so that writers are not stuck
/// behind a leader that is gone.
struct Leading<'a>(&'a Mutex<Queue>);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
            q.leader = false;
            for p in q.pending.drain(..) {
                p.done.set(Err(Error::internal("the commit leader failed")));
            }
        }
    }
}

impl Collection {
    /// Opens the collection in `dir`: snapshot, then the log replayed over it.
    pub fn open(dir: &Path, name: &str, settings: Settings) -> Result<Collection> {
        Collection::open_with(dir, name, settings, None)
    }

    /// As `open`, with a device copy from `factory` serving the searches (uploaded whole
    /// before the collection serves).
    pub fn open_with(
        dir: &Path,
        name: &str,
        settings: Settings,
        factory: Option<&dyn AcceleratorFactory>,
    ) -> Result<Collection> {
        let mut data = crate::snapshot::load(dir, name, &settings)?
            .unwrap_or_else(|| Data::new(settings.clone()));
        let (wal, replay) = Wal::open(&dir.join("wal"), name)?;
        let mut replayed = 0usize;
        for (seq, bytes) in &replay.writes {
            if *seq <= data.last_seq {
                continue; // in the snapshot already (a crash between it and the log's reset)
            }
            if *seq != data.last_seq + 1 {
                return Err(Error::internal(format!(
                    "collection {name}: the log jumps from write {} to {seq}; not served",
                    data.last_seq
                )));
            }
            let op = Op::decode(&settings, &mut crate::codec::Reader::new(bytes)).map_err(|e| {
                Error::internal(format!(
                    "collection {name}: logged write {seq}: {}",
                    e.message
                ))
            })?;
            data.apply(&op);
            data.last_seq = *seq;
            replayed += 1;
        }
        if data.wants_compaction() {
            data.compact();
        }
        if crate::search::needs_training(&data) {
            // An imported index's centroids, while the collection is near what they were
            // trained on; k-means otherwise.
            let ivf = match crate::centroids::seed(dir, name, &data)? {
                Some(mut ivf) => {
                    crate::search::assign(&mut ivf, &data, 0..data.slots());
                    ivf
                }
                None => crate::search::train(&data),
            };
            data.set_ivf(ivf);
        }
        data.take_killed(); // the device copy starts from the whole state
        let accel = match factory {
            None => None,
            Some(f) => {
                let a = f
                    .attach(name, &settings)
                    .map_err(|e| Error::internal(format!("collection {name}: device copy: {e}")))?;
                // A copy that cannot be uploaded (the device's memory full, say) leaves the
                // collection served by the CPU; the next write's sync tries again.
                match a.sync(&data, &[]) {
                    Ok(()) => {
                        tracing::info!(collection = name, device = %a.name(), "searches on the device")
                    }
                    Err(e) => tracing::warn!(collection = name, device = %a.name(), error = %e,
                        "device copy not uploaded; searches on the CPU until a write uploads it"),
                }
                Some(a)
            }
        };
        tracing::info!(
            collection = name,
            points = data.count(),
            replayed,
            "collection opened"
        );
        Ok(Collection {
            name: name.to_string(),
            settings,
            dir: dir.to_path_buf(),
            data: RwLock::new(data),
            queue: Mutex::new(Queue::default()),
            wal: Mutex::new(wal),
            dropped: AtomicBool::new(false),
            snapshot_at: AtomicU64::new(SNAPSHOT_AT),
            records: AtomicU64::new(0),
            logged: AtomicU64::new(0),
            training: AtomicBool::new(false),
            trainer: Mutex::new(None),
            accel,
            ran_device: AtomicU64::new(0),
            ran_cpu: AtomicU64::new(0),
            ran_cpu_selective: AtomicU64::new(0),
            group: GroupSearch::default(),
        })
    }

    /// The device serving this collection's searches, in words (None: the CPU).
    pub fn device(&self) -> Option<String> {
        self.accel.as_ref().map(|a| a.name())
    }

    /// (searches answered on the device, on the CPU) since open.
    pub fn search_stats(&self) -> (u64, u64) {
        (
            self.ran_device.load(Ordering::Relaxed),
            self.ran_cpu.load(Ordering::Relaxed),
        )
    }

    /// Of the searches answered on the CPU, those a device could have taken but whose few
    /// matching points the CPU scans faster (`search`).
    pub fn selective_on_cpu(&self) -> u64 {
        self.ran_cpu_selective.load(Ordering::Relaxed)
    }

    /// Combined device passes run (`search_in`) and the requests they carried, since open:
    /// the mean batch is their ratio. A pass that failed over to the CPU counts too.
    pub fn pass_stats(&self) -> (u64, u64) {
        self.group.pass_stats()
    }

    /// Searches queued for a device pass now (the one a pass is running for excluded).
    pub fn searches_waiting(&self) -> usize {
        self.group.waiting()
    }

    /// A search over `d` (this collection's state, read-locked by the caller) where it is
    /// fastest: a filtered search whose plan is the exact scan of few matches
    /// (`search::cpu_takes`) on the CPU, everything else as `search_in`. The filter's matches
    /// are estimated from a sample first (`search::may_be_selective`), so a request that goes
    /// to the device pays no host-side filter pass; one that may be selective is counted
    /// exactly, and goes to the device after all if it matches more. The answers are the
    /// same either way (the same plan, exact on both). Refused (OVERLOADED) when
    /// `MAX_PENDING_SEARCHES` searches already wait for a device pass.
    pub fn search(&self, d: &Data, r: &SearchRequest<'_>) -> Result<Answer> {
        if let (Some(_), Some(f)) = (&self.accel, r.filter) {
            if crate::search::may_be_selective(d, f) {
                let (bits, n) = d.matching_bits(f);
                if crate::search::cpu_takes(d, r.k, r.nprobe, n) {
                    self.ran_cpu.fetch_add(1, Ordering::Relaxed);
                    self.ran_cpu_selective.fetch_add(1, Ordering::Relaxed);
                    let (answers, plan) =
                        crate::search::search_matched(d, r.queries, r.k, r.nprobe, Some((bits, n)));
                    return Ok((answers, plan, Ran::Cpu));
                }
            }
        }
        self.search_grouped(d, r)
    }

    /// A search over `d` (this collection's state, read-locked by the caller): on the device
    /// when there is one and it takes the request, else on the CPU; the same answers either
    /// way. `Neighbor::id` is the slot. (Benchmarks and tests of the device call this; the
    /// served path calls `search`.)
    ///
    /// Group search: concurrent requests share device passes. The request joins a queue
    /// (`MAX_PENDING_SEARCHES` at most; past it, this runs it alone as its own pass, while
    /// `search` refuses it). A caller that finds no leader leads: it takes the oldest request
    /// and every queued one compatible with it (the same `d`, k, nprobe and an equal filter,
    /// so the same plan) up to `MAX_PASS_QUERIES` queries, concatenates their queries, runs
    /// one `Accelerator::search` on its own `d`, hands each request its answers (in order)
    /// and wakes its caller; it goes on while requests wait, for `MAX_LEAD_PASSES` passes,
    /// then hands the lead to the oldest waiting caller. A pass the device fails or declines
    /// sends each of its requests back to its caller, which answers it on the CPU, as does a
    /// leader's panic (`SearchLead`).
    ///
    /// Why a follower's answers are those of its own `d`: a request is combined only with
    /// requests of the same `d` (same address), and every caller keeps its `&Data` (in the
    /// served path its own read guard of `data`, taken in `api.rs` before `search`) until it
    /// has its answers. Two shared borrows of one `Data` live at once, so nothing writes it
    /// from the follower's start to the leader's pass: a write takes the write lock, which
    /// waits for every reader to leave, and applies and syncs the device before it is
    /// acknowledged, so a search started after an acknowledgement sees it (read-your-writes).
    /// No deadlock: the leader takes no lock of `data` (it already reads it), only the queue's
    /// and the waiters' mutexes, never held while it waits or searches; followers hold only
    /// read locks, which a waiting writer cannot take from them.
    pub fn search_in(&self, d: &Data, r: &SearchRequest<'_>) -> Answer {
        match self.search_grouped(d, r) {
            Ok(a) => a,
            Err(_) => self.search_alone(d, r), // the queue is full: a pass of its own
        }
    }

    /// `search_in`, refusing (OVERLOADED) a request when the queue is full.
    fn search_grouped(&self, d: &Data, r: &SearchRequest<'_>) -> Result<Answer> {
        let Some(a) = &self.accel else {
            return Ok(self.on_cpu(d, r));
        };
        match self
            .group
            .search(a.as_ref(), d, r, &self.name, &self.ran_device)?
        {
            Some(answer) => Ok(answer),
            None => Ok(self.on_cpu(d, r)),
        }
    }

    /// One request as its own device pass (as every search ran before group search).
    fn search_alone(&self, d: &Data, r: &SearchRequest<'_>) -> Answer {
        if let Some(a) = &self.accel {
            match a.search(d, r) {
                Ok(Some((answers, plan))) => {
                    self.ran_device.fetch_add(1, Ordering::Relaxed);
                    return (answers, plan, Ran::Device);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(collection = %self.name, error = %e, "device search failed; answered on the CPU")
                }
            }
        }
        self.on_cpu(d, r)
    }

    fn on_cpu(&self, d: &Data, r: &SearchRequest<'_>) -> Answer {
        self.ran_cpu.fetch_add(1, Ordering::Relaxed);
        let (answers, plan) = crate::search::search(d, r.queries, r.k, r.nprobe, r.filter);
        (answers, plan, Ran::Cpu)
    }

    /// Hands `d`'s changes to the device copy (write lock held by the caller). A failure is
    /// logged; the copy then answers no searches until a later sync uploads it whole.
    fn sync_device(&self, d: &mut Data) {
        let killed = d.take_killed();
        if let Some(a) = &self.accel {
            if let Err(e) = a.sync(d, &killed) {
                tracing::warn!(collection = %self.name, device = %a.name(), error = %e,
                    "device copy out of step; searches on the CPU until it is uploaded again");
            }
        }
    }

    /// The snapshot threshold in log bytes (tests make it small).
    pub fn set_snapshot_at(&self, bytes: u64) {
        self.snapshot_at.store(bytes, Ordering::Relaxed);
    }

    /// Puts the log on another file (tests: /dev/full, a disk that is full).
    #[doc(hidden)]
    pub fn swap_log_file(&self, f: std::fs::File) {
        *self.wal.lock().expect("log lock") = Wal::from_file(f);
    }

    /// The state, for reading (searches, gets, counts).
    pub fn read(&self) -> RwLockReadGuard<'_, Data> {
        self.data.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn count(&self) -> usize {
        self.read().count()
    }

    /// Logs `op` (checked whole by the caller), applies it, and answers once it is durable
    /// and visible: the points written or deleted.
    pub fn write(self: &Arc<Self>, op: Op) -> Result<usize> {
        let mut w = crate::codec::Writer::default();
        op.encode(&self.settings, &mut w);
        let done = Arc::new(Done::default());
        let mut q = self.queue.lock().expect("queue lock");
        if self.dropped.load(Ordering::Acquire) {
            return Err(Error::not_found(&self.name));
        }
        if q.pending.len() >= MAX_PENDING {
            return Err(Error::new(
                Kind::Overloaded,
                format!(
                    "{} writes already queued for collection {}; retry",
                    MAX_PENDING, self.name
                ),
            ));
        }
        q.pending.push(Pending {
            op,
            bytes: w.buf,
            done: done.clone(),
        });
        if q.leader {
            drop(q);
            return done.wait();
        }
        q.leader = true;
        let _leading = Leading(&self.queue);
        loop {
            let group = std::mem::take(&mut q.pending);
            drop(q);
            self.commit(group);
            self.upkeep();
            q = self.queue.lock().expect("queue lock");
            if q.pending.is_empty() {
                q.leader = false;
                break;
            }
        }
        drop(q);
        done.wait()
    }

    /// One group: logged as one record, synced once, applied in order, answered.
    fn commit(&self, group: Vec<Pending>) {
        let mut wal = self.wal.lock().expect("log lock");
        let fail = |group: Vec<Pending>, e: Error| {
            group.into_iter().for_each(|p| p.done.set(Err(e.clone())))
        };
        if self.dropped.load(Ordering::Acquire) {
            return fail(group, Error::not_found(&self.name));
        }
        let first = self.read().last_seq + 1;
        let refs: Vec<&[u8]> = group.iter().map(|p| p.bytes.as_slice()).collect();
        if let Err(e) = wal.append(&wal::encode(first, &refs)) {
            tracing::warn!(collection = %self.name, error = %e, "writes refused");
            return fail(group, e);
        }
        drop(wal);
        self.records.fetch_add(1, Ordering::Relaxed);
        self.logged.fetch_add(group.len() as u64, Ordering::Relaxed);
        let mut results = Vec::with_capacity(group.len());
        {
            let mut d = self.data.write().unwrap_or_else(|p| p.into_inner());
            for (i, p) in group.iter().enumerate() {
                results.push(d.apply(&p.op));
                d.last_seq = first + i as u64;
            }
            // Before the acknowledgements: a search after one finds the device current.
            self.sync_device(&mut d);
        }
        for (p, n) in group.into_iter().zip(results) {
            p.done.set(Ok(n));
        }
    }

    /// Compaction, training and snapshots, between groups (the leader holds the writes).
    fn upkeep(self: &Arc<Self>) {
        let training = self.training.load(Ordering::Acquire);
        if !training && self.read().wants_compaction() {
            let mut d = self.data.write().unwrap_or_else(|p| p.into_inner());
            d.compact();
            self.sync_device(&mut d);
        }
        if !training && crate::search::needs_training(&self.read()) {
            self.training.store(true, Ordering::Release);
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("train-{}", self.name))
                .spawn(move || me.train());
            match spawned {
                Ok(h) => *self.trainer.lock().expect("trainer lock") = Some(h),
                Err(e) => {
                    // Searches keep their plan; the next group tries again.
                    tracing::warn!(collection = %self.name, error = %e, "no thread for training");
                    self.training.store(false, Ordering::Release);
                }
            }
        }
        let long =
            self.wal.lock().expect("log lock").len() >= self.snapshot_at.load(Ordering::Relaxed);
        if long {
            if let Err(e) = self.snapshot() {
                // The log still holds every write: nothing is lost, the next group tries again.
                tracing::warn!(collection = %self.name, error = %e, "snapshot failed; the log keeps growing");
            }
        }
    }

    /// Writes a snapshot of the current state and empties the log. Only the commit leader (or
    /// a caller with no writer running) calls this: no write may land in between.
    pub fn snapshot(&self) -> Result<()> {
        let bytes = crate::snapshot::encode(&self.read());
        let mut wal = self.wal.lock().expect("log lock");
        if self.dropped.load(Ordering::Acquire) {
            return Err(Error::not_found(&self.name));
        }
        crate::snapshot::write(&self.dir, &bytes)?;
        wal.reset()
    }

    /// (log records written, writes they held) since open: the writes sharing a sync.
    pub fn commit_stats(&self) -> (u64, u64) {
        (
            self.records.load(Ordering::Relaxed),
            self.logged.load(Ordering::Relaxed),
        )
    }

    /// The background training (see the module's text).
    fn train(&self) {
        let started = std::time::Instant::now();
        let mut ivf = crate::search::Trainer::sample(&self.read()).centroids();
        let mut at = 0;
        loop {
            if self.dropped.load(Ordering::Acquire) {
                self.training.store(false, Ordering::Release);
                return;
            }
            let d = self.read();
            if d.slots() - at <= TRAIN_CHUNK {
                break;
            }
            crate::search::assign(&mut ivf, &d, at..at + TRAIN_CHUNK);
            at += TRAIN_CHUNK;
        }
        let mut d = self.data.write().unwrap_or_else(|p| p.into_inner());
        let end = d.slots();
        crate::search::assign(&mut ivf, &d, at..end);
        ivf.trained_at = d.count();
        let nlist = ivf.nlist;
        d.set_ivf(ivf);
        self.sync_device(&mut d);
        drop(d);
        self.training.store(false, Ordering::Release);
        tracing::info!(collection = %self.name, nlist, seconds = started.elapsed().as_secs_f64(), "IVF trained");
    }

    /// Waits for a background training in progress, if any (tests, benchmarks).
    pub fn wait_for_training(&self) {
        let h = self.trainer.lock().expect("trainer lock").take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// Log bytes not yet in a snapshot.
    pub fn log_len(&self) -> u64 {
        self.wal.lock().expect("log lock").len()
    }

    /// Refuses every later write, and waits out a log append in progress: after this the
    /// directory can go.
    pub(crate) fn mark_dropped(&self) {
        {
            let _q = self.queue.lock().expect("queue lock");
            self.dropped.store(true, Ordering::Release);
        }
        drop(self.wal.lock().expect("log lock"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::Waiting;
    use crate::ops::Point;
    use crate::search::Plan;
    use cohort_ivf::Neighbor;

    /// Writers that arrive while a group is being logged share the next record and its sync.
    #[test]
    fn writes_queued_during_a_commit_share_one_record() {
        let dir = std::env::temp_dir().join(format!("cohort-group-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let settings: Settings = serde_json::from_str(r#"{"dim": 2}"#).unwrap();
        let c = Arc::new(Collection::open(&dir, "g", settings.clone()).unwrap());
        let put = |c: &Arc<Collection>, id: u64| {
            let c = c.clone();
            std::thread::spawn(move || {
                let p = Point {
                    id,
                    vector: vec![id as f32, 0.0],
                    attrs: vec![],
                };
                c.write(Op::Upsert(vec![p])).unwrap()
            })
        };
        // The log held: the first writer leads and waits on it with its group of one.
        let held = c.wal.lock().unwrap();
        let first = put(&c, 1);
        while !c.queue.lock().unwrap().leader {
            std::thread::yield_now();
        }
        let rest: Vec<_> = (2..=5).map(|id| put(&c, id)).collect();
        while c.queue.lock().unwrap().pending.len() < 4 {
            std::thread::yield_now();
        }
        drop(held);
        assert_eq!(first.join().unwrap(), 1);
        for w in rest {
            assert_eq!(w.join().unwrap(), 1);
        }
        assert_eq!(c.commit_stats(), (2, 5), "five writes, two records");
        assert_eq!(c.count(), 5);
        drop(c);
        let c = Collection::open(&dir, "g", settings).unwrap();
        assert_eq!(c.count(), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Answers with the CPU's search (a stand-in device).
    struct Cpu;

    impl Accelerator for Cpu {
        fn name(&self) -> String {
            "cpu".into()
        }
        fn sync(&self, _d: &Data, _killed: &[u32]) -> std::result::Result<(), String> {
            Ok(())
        }
        #[allow(clippy::type_complexity)]
        fn search(
            &self,
            d: &Data,
            r: &SearchRequest<'_>,
        ) -> std::result::Result<Option<(Vec<Vec<Neighbor>>, Plan)>, String> {
            Ok(Some(crate::search::search(
                d, r.queries, r.k, r.nprobe, r.filter,
            )))
        }
    }

    struct CpuFactory;

    impl AcceleratorFactory for CpuFactory {
        fn attach(
            &self,
            _c: &str,
            _s: &Settings,
        ) -> std::result::Result<Box<dyn Accelerator>, String> {
            Ok(Box::new(Cpu))
        }
    }

    /// A full search queue: `search` refuses (OVERLOADED), `search_in` runs the request as
    /// a pass of its own.
    #[test]
    fn searches_past_the_queue_bound_are_refused() {
        let dir = std::env::temp_dir().join(format!("cohort-search-q-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let settings: Settings = serde_json::from_str(r#"{"dim": 2}"#).unwrap();
        let c = Collection::open_with(&dir, "q", settings, Some(&CpuFactory)).unwrap();
        let p = Point {
            id: 1,
            vector: vec![1.0, 0.0],
            attrs: vec![],
        };
        c.data.write().unwrap().apply(&Op::Upsert(vec![p]));
        let q = vec![vec![1.0, 0.0]];
        let r = SearchRequest {
            queries: &q,
            k: 1,
            nprobe: None,
            filter: None,
        };
        let d = c.read();
        assert_eq!(c.search(&d, &r).unwrap().2, Ran::Device);
        {
            // Stand-ins for queued searches (never read: the lead is taken, no pass runs).
            let mut s = c.group.searches.lock().unwrap();
            s.leader = true;
            for _ in 0..MAX_PENDING_SEARCHES {
                s.pending.push_back(Arc::new(Waiting::new(&d, &r)));
            }
        }
        let e = c.search(&d, &r).unwrap_err();
        assert_eq!(e.kind, Kind::Overloaded);
        let (got, _, ran) = c.search_in(&d, &r);
        assert_eq!((got[0][0].id, ran), (0, Ran::Device));
        assert_eq!(c.pass_stats(), (1, 1), "the one alone is no combined pass");
        {
            let mut s = c.group.searches.lock().unwrap();
            s.pending.clear();
            s.leader = false;
        }
        assert_eq!(c.search(&d, &r).unwrap().2, Ran::Device);
        assert_eq!(c.pass_stats(), (2, 2));
        drop(d);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
