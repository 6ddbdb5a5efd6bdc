//! Group search (`Collection::search_in`): concurrent searches of a collection served by a
//! device share device passes. The device here is a test one that answers with the CPU's
//! search (`search::search`) and records each pass; the real device is a twin of that
//! function, tested against it on a GPU machine.
//!
//! Every query vector carries its request's k and filter in its last two components, so the
//! test device can check that no pass mixes requests of different k or filter.

use cohort_collections::accel::{Accelerator, AcceleratorFactory, Ran, SearchRequest};
use cohort_collections::collection::MAX_PASS_QUERIES;
use cohort_collections::data::Data;
use cohort_collections::filter::Filter;
use cohort_collections::ops::{Op, Point};
use cohort_collections::schema::AttrValue;
use cohort_collections::search::{self, Plan};
use cohort_collections::{AttrType, Collection, Element, Metric, Settings};
use cohort_ivf::Neighbor;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DIM: usize = 6;
const N: u64 = 3000;

/// What the test device does with a pass.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Answer,
    Fail,
    Decline,
    Panic,
}

#[derive(Default)]
struct Log {
    /// Query vectors per pass, in order.
    passes: Mutex<Vec<usize>>,
    /// Passes that mixed requests of different k or filter (checked by the labels).
    mixed: AtomicUsize,
    /// While set, a pass waits (so that requests queue behind it).
    hold: AtomicBool,
}

struct CpuDevice {
    mode: Mode,
    log: Arc<Log>,
}

fn tag_of(f: Option<&Filter>) -> f32 {
    match f {
        None => 0.0,
        Some(Filter::Eq(_, AttrValue::Int(t))) => 1.0 + *t as f32,
        Some(_) => 9.0,
    }
}

impl Accelerator for CpuDevice {
    fn name(&self) -> String {
        "the CPU, as a device".into()
    }
    fn sync(&self, _d: &Data, _killed: &[u32]) -> Result<(), String> {
        Ok(())
    }
    #[allow(clippy::type_complexity)]
    fn search(
        &self,
        d: &Data,
        r: &SearchRequest<'_>,
    ) -> Result<Option<(Vec<Vec<Neighbor>>, Plan)>, String> {
        while self.log.hold.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.log.passes.lock().unwrap().push(r.queries.len());
        let (k, tag) = (r.k as f32, tag_of(r.filter));
        if r.queries
            .iter()
            .any(|q| q[DIM - 2] != k || q[DIM - 1] != tag)
        {
            self.log.mixed.fetch_add(1, Ordering::SeqCst);
        }
        match self.mode {
            Mode::Answer => Ok(Some(search::search(d, r.queries, r.k, r.nprobe, r.filter))),
            Mode::Fail => Err("the device's stream failed".into()),
            Mode::Decline => Ok(None),
            Mode::Panic => panic!("the device's driver panicked"),
        }
    }
}

struct Factory(Mode, Arc<Log>);

impl AcceleratorFactory for Factory {
    fn attach(&self, _c: &str, _s: &Settings) -> Result<Box<dyn Accelerator>, String> {
        Ok(Box::new(CpuDevice {
            mode: self.0,
            log: self.1.clone(),
        }))
    }
}

fn settings() -> Settings {
    let mut attributes = BTreeMap::new();
    attributes.insert("tag".to_string(), AttrType::Integer);
    Settings {
        dim: DIM,
        metric: Metric::L2,
        element: Element::F32,
        attributes,
    }
}

fn point(rng: &mut StdRng, id: u64) -> Point {
    Point {
        id,
        vector: (0..DIM).map(|_| rng.gen_range(-1.0..1.0)).collect(),
        attrs: vec![Some(AttrValue::Int((id % 3) as i64))],
    }
}

/// A collection of `N` random points served by the test device.
fn open(name: &str, mode: Mode) -> (Arc<Collection>, Arc<Log>, std::path::PathBuf) {
    let dir =
        std::env::temp_dir().join(format!("cohort-group-search-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = Arc::new(Log::default());
    let f = Factory(mode, log.clone());
    let c = Arc::new(Collection::open_with(&dir, "c", settings(), Some(&f)).unwrap());
    let mut rng = StdRng::seed_from_u64(7);
    let points: Vec<Point> = (0..N).map(|id| point(&mut rng, id)).collect();
    c.write(Op::Upsert(points)).unwrap();
    (c, log, dir)
}

/// One request: random queries labelled with their k and filter.
struct Req {
    queries: Vec<Vec<f32>>,
    k: usize,
    nprobe: Option<usize>,
    filter: Option<Filter>,
}

fn random_req(rng: &mut StdRng, s: &Settings) -> Req {
    let k = [1, 3, 10][rng.gen_range(0..3)];
    let filter = match rng.gen_range(0..4) {
        0 | 1 => None,
        t => Some(Filter::parse(&json!({"eq": ["tag", t - 2]}), s).unwrap()),
    };
    let tag = tag_of(filter.as_ref());
    let queries = (0..rng.gen_range(1..4))
        .map(|_| {
            let mut q: Vec<f32> = (0..DIM - 2).map(|_| rng.gen_range(-1.0..1.0)).collect();
            q.extend([k as f32, tag]);
            q
        })
        .collect();
    let nprobe = [None, Some(4)][rng.gen_range(0..2)];
    Req {
        queries,
        k,
        nprobe,
        filter,
    }
}

/// Searches `r` through the collection and checks it against the CPU on the same state.
fn check(c: &Collection, r: &Req) -> Ran {
    let d = c.read();
    let sr = SearchRequest {
        queries: &r.queries,
        k: r.k,
        nprobe: r.nprobe,
        filter: r.filter.as_ref(),
    };
    let (got, plan, ran) = c.search_in(&d, &sr);
    let want = search::search(&d, &r.queries, r.k, r.nprobe, r.filter.as_ref());
    assert_eq!((got, plan), want, "k {} filter {:?}", r.k, r.filter);
    ran
}

/// Waits until `n` searches are queued behind the pass in progress.
fn wait_queued(c: &Collection, n: usize) {
    while c.searches_waiting() < n {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `threads` threads, each searching `each` random requests; every answer checked.
fn hammer(c: &Arc<Collection>, threads: u64, each: usize) -> Vec<Ran> {
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + t);
                let s = settings();
                (0..each)
                    .map(|_| check(&c, &random_req(&mut rng, &s)))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
}

#[test]
fn concurrent_searches_get_the_cpus_answers_for_their_own_queries() {
    let (c, log, dir) = open("answers", Mode::Answer);
    let ran = hammer(&c, 12, 40);
    assert!(ran.iter().all(|&r| r == Ran::Device));
    let (passes, requests) = c.pass_stats();
    assert_eq!(requests, 12 * 40, "every request in a pass");
    assert_eq!(c.search_stats(), (12 * 40, 0));
    assert_eq!(log.passes.lock().unwrap().len() as u64, passes);
    assert_eq!(
        log.mixed.load(Ordering::SeqCst),
        0,
        "a pass mixed k or filters"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn compatible_requests_share_a_pass_and_incompatible_ones_never_do() {
    let (c, log, dir) = open("combined", Mode::Answer);
    let s = settings();
    // The first pass is held on the device while 24 requests queue behind it: 8 of each
    // of three kinds (k 10 unfiltered, k 3 unfiltered, k 10 with a filter).
    log.hold.store(true, Ordering::SeqCst);
    let kinds = [(10, None), (3, None), (10, Some(0))];
    let spawn = |kind: usize, seed: u64| {
        let c = c.clone();
        let s = s.clone();
        let (k, t) = kinds[kind];
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let filter = t.map(|t: i64| Filter::parse(&json!({"eq": ["tag", t]}), &s).unwrap());
            let tag = tag_of(filter.as_ref());
            let mut q: Vec<f32> = (0..DIM - 2).map(|_| rng.gen_range(-1.0..1.0)).collect();
            q.extend([k as f32, tag]);
            let r = Req {
                queries: vec![q],
                k,
                nprobe: None,
                filter,
            };
            check(&c, &r)
        })
    };
    let first = spawn(0, 1);
    while c.pass_stats().0 == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let rest: Vec<_> = (0..24).map(|i| spawn(i % 3, 10 + i as u64)).collect();
    wait_queued(&c, 24); // they queue behind the held pass
    log.hold.store(false, Ordering::SeqCst);
    assert_eq!(first.join().unwrap(), Ran::Device);
    for h in rest {
        assert_eq!(h.join().unwrap(), Ran::Device);
    }
    let passes = log.passes.lock().unwrap().clone();
    assert_eq!(passes.iter().sum::<usize>(), 25);
    assert!(
        passes.iter().any(|&n| n > 1),
        "no pass combined requests: {passes:?}"
    );
    // Each kind's 8 queued requests in one pass: the held one, then one pass per kind.
    assert_eq!(passes, vec![1, 8, 8, 8], "passes' queries");
    assert_eq!(c.pass_stats(), (4, 25));
    assert_eq!(
        log.mixed.load(Ordering::SeqCst),
        0,
        "a pass mixed k or filters"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_pass_carries_at_most_the_bound_of_queries() {
    let (c, log, dir) = open("bound", Mode::Answer);
    log.hold.store(true, Ordering::SeqCst);
    let ask = |n: usize| {
        let c = c.clone();
        std::thread::spawn(move || {
            let q = vec![0.5, 0.5, 0.5, 0.5, 10.0, 0.0];
            let r = Req {
                queries: vec![q; n],
                k: 10,
                nprobe: None,
                filter: None,
            };
            check(&c, &r)
        })
    };
    let first = ask(1);
    while c.pass_stats().0 == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Three requests of 400 queries: two fit a pass of MAX_PASS_QUERIES, the third waits.
    let rest: Vec<_> = (0..3).map(|_| ask(400)).collect();
    wait_queued(&c, 3);
    log.hold.store(false, Ordering::SeqCst);
    first.join().unwrap();
    rest.into_iter()
        .for_each(|h| assert_eq!(h.join().unwrap(), Ran::Device));
    assert_eq!(MAX_PASS_QUERIES, 1024);
    assert_eq!(*log.passes.lock().unwrap(), vec![1, 800, 400]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failing_or_declining_device_sends_each_request_of_the_pass_to_the_cpu() {
    for mode in [Mode::Fail, Mode::Decline] {
        let (c, log, dir) = open(
            if mode == Mode::Fail {
                "fail"
            } else {
                "decline"
            },
            mode,
        );
        let ran = hammer(&c, 8, 20);
        assert!(ran.iter().all(|&r| r == Ran::Cpu));
        assert_eq!(c.search_stats(), (0, 8 * 20));
        let (passes, requests) = c.pass_stats();
        assert_eq!(requests, 8 * 20);
        assert_eq!(log.passes.lock().unwrap().len() as u64, passes);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_leader_that_panics_leaves_no_caller_waiting() {
    let (c, log, dir) = open("panic", Mode::Panic);
    log.hold.store(true, Ordering::SeqCst);
    let spawn = |seed: u64| {
        let c = c.clone();
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut q: Vec<f32> = (0..DIM - 2).map(|_| rng.gen_range(-1.0..1.0)).collect();
            q.extend([10.0, 0.0]);
            let r = Req {
                queries: vec![q],
                k: 10,
                nprobe: None,
                filter: None,
            };
            check(&c, &r)
        })
    };
    let first = spawn(1);
    while c.pass_stats().0 == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let rest: Vec<_> = (0..6).map(|i| spawn(10 + i)).collect();
    wait_queued(&c, 6);
    log.hold.store(false, Ordering::SeqCst);
    // The first caller led and its device panicked: it unwinds. The queued six are one
    // pass, led by the oldest of them (handed the lead): it panics too, and the other five
    // are answered on the CPU. A hang here fails by the timeout, not by hanging the test.
    assert!(first.join().is_err(), "the leader's device panicked");
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut panicked, mut on_cpu) = (0, 0);
        for h in rest {
            match h.join() {
                Ok(Ran::Cpu) => on_cpu += 1,
                Ok(Ran::Device) => {}
                Err(_) => panicked += 1,
            }
        }
        done.send((panicked, on_cpu)).unwrap();
    });
    let got = outcome
        .recv_timeout(Duration::from_secs(60))
        .expect("callers left waiting for a leader that panicked");
    assert_eq!(got, (1, 5), "(panicked, answered on the CPU)");
    assert_eq!(*log.passes.lock().unwrap(), vec![1, 6]);
    assert_eq!(c.pass_stats(), (2, 7));
    assert_eq!(c.search_stats(), (0, 5));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_search_after_an_acknowledged_upsert_sees_it_while_others_search() {
    let (c, log, dir) = open("ryw", Mode::Answer);
    let stop = Arc::new(AtomicBool::new(false));
    let searchers: Vec<_> = (0..6)
        .map(|t| {
            let (c, stop) = (c.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(200 + t);
                let s = settings();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    check(&c, &random_req(&mut rng, &s));
                    n += 1;
                }
                n
            })
        })
        .collect();
    for i in 0..60u64 {
        // A new point far from every other, then a point replaced (moved far away).
        let id = if i % 2 == 0 { N + i } else { i };
        let far = 100.0 + i as f32;
        let p = Point {
            id,
            vector: vec![far, far, far, far, 10.0, 0.0],
            attrs: vec![Some(AttrValue::Int(0))],
        };
        assert_eq!(c.write(Op::Upsert(vec![p])).unwrap(), 1);
        let q = vec![vec![far, far, far, far, 10.0, 0.0]];
        let d = c.read();
        let r = SearchRequest {
            queries: &q,
            k: 10,
            nprobe: None,
            filter: None,
        };
        let (got, _, ran) = c.search_in(&d, &r);
        assert_eq!(ran, Ran::Device);
        assert_eq!(d.id_of(got[0][0].id as usize), id, "write {i} not seen");
        assert_eq!(got[0][0].distance, 0.0);
    }
    stop.store(true, Ordering::SeqCst);
    let searched: usize = searchers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(searched > 0);
    assert_eq!(log.mixed.load(Ordering::SeqCst), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
