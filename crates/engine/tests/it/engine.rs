//! The cpu engine behind real rings: every admitted request answered once, OVERLOADED when
//! its rings are full, TIMEOUT past its deadline, one service's full queue refusing only it.

use crate::common;
use cohort_engine::*;
use cohort_proto::ErrorCode;
use common::*;
use std::sync::Arc;
use std::time::Duration;

fn cpu(workers: usize, ring_slots: usize) -> (CpuEngine, Client) {
    let m = metrics("cpu");
    let mut reg = Registry::new();
    reg.add(Arc::new(Rev)).unwrap();
    let mut w = wire(1, &[spec("cpu", workers, ring_slots)]);
    let cfg = CpuEngineConfig {
        cpus: vec![],
        spin: Duration::from_micros(20),
        fair: true,
    };
    let eng = CpuEngine::start(&cfg, w.engines.pop().unwrap(), reg, m.clone()).unwrap();
    let client = Client::new(w.ingresses.pop().unwrap(), &m);
    (eng, client)
}

#[test]
fn every_request_gets_exactly_one_answer() {
    let _shared = shared();
    let (eng, mut c) = cpu(2, 64);
    for (i, p) in [&b"ab"[..], b"panic", b"bad", b""].iter().enumerate() {
        c.send(i as u64, p, Duration::from_secs(5));
    }
    c.collect(Duration::from_secs(5));
    eng.shutdown();
    assert_eq!(c.answers[&0], vec![Ok(b"ba".to_vec())]);
    assert_eq!(
        c.code(1),
        Some(ErrorCode::Internal),
        "a service panic is INTERNAL"
    );
    assert_eq!(c.code(2), Some(ErrorCode::BadRequest));
    assert_eq!(c.answers[&3], vec![Ok(vec![])]);
    assert_eq!(c.ingress.in_flight(), 0);
}

#[test]
fn full_rings_answer_overloaded_and_expired_requests_time_out() {
    let _shared = shared();
    let (eng, mut c) = cpu(1, 64);
    // The first request occupies the worker for 30 ms; 64 more fill the ring; the rest
    // overload. Those queued behind with a 20 ms deadline expire before they run.
    c.send(0, b"sleep", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(5));
    for i in 1..100 {
        c.send(i, b"xy", Duration::from_millis(20));
    }
    c.collect(Duration::from_secs(5));
    eng.shutdown();
    let count = |code| (0..100).filter(|&i| c.code(i) == code).count();
    assert_eq!(c.answers.len(), 100, "every request answered");
    assert!(
        count(Some(ErrorCode::Overloaded)) >= 30,
        "{}",
        count(Some(ErrorCode::Overloaded))
    );
    assert!(
        count(Some(ErrorCode::Timeout)) >= 1,
        "queued past the deadline"
    );
    assert_eq!(c.code(0), None);
}

#[test]
fn a_full_service_refuses_only_itself() {
    let _shared = shared();
    // Two services, each on its own cpu engine of one worker: the first is blocked and its
    // ring fills; the second still answers.
    struct Other;
    impl Service for Other {
        fn id(&self) -> u16 {
            10
        }
        fn name(&self) -> &'static str {
            "other"
        }
        fn execute_cpu(
            &self,
            p: &[u8],
            out: &mut Vec<u8>,
        ) -> Result<(), cohort_proto::ErrorPayload> {
            out.extend_from_slice(p);
            Ok(())
        }
        fn json_to_payload(
            &self,
            _: &serde_json::Value,
        ) -> Result<Vec<u8>, cohort_proto::ErrorPayload> {
            Ok(vec![])
        }
        fn payload_to_json(&self, _: &[u8]) -> serde_json::Value {
            serde_json::Value::Null
        }
    }
    let m = metrics("cpu");
    let mut reg = Registry::new();
    reg.add(Arc::new(Rev)).unwrap();
    reg.add(Arc::new(Other)).unwrap();
    let mut other = spec("cpu", 1, 64);
    other.services = vec![10];
    // The blocked service holds at most 64 (as `--max-queue` bounds a served one: its
    // worker takes requests out of the ring into its fair queue, so the ring alone does not).
    let mut blocked = spec("cpu", 1, 64);
    blocked.max_queued = Some(64);
    let mut w = wire(1, &[blocked, other]);
    let cfg = CpuEngineConfig {
        cpus: vec![],
        spin: Duration::ZERO,
        fair: true,
    };
    let e2 = CpuEngine::start(&cfg, w.engines.pop().unwrap(), reg.clone(), m.clone()).unwrap();
    let e1 = CpuEngine::start(&cfg, w.engines.pop().unwrap(), reg, m.clone()).unwrap();
    let mut c = Client::new(w.ingresses.pop().unwrap(), &m);
    for i in 0..100 {
        c.send(i, b"sleep", Duration::from_secs(10));
    }
    for i in 100..110 {
        if let Err((id, e)) = c.ingress.submit(i, 10, i, 0, b"hi") {
            c.answers.entry(id).or_default().push(Err(e));
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut early = Answers::new();
    c.ingress.drain(usize::MAX, |id, _, a| {
        early.entry(id).or_default().push(a.map(|p| p.to_vec()))
    });
    for i in 100..110 {
        assert_eq!(
            early.get(&i),
            Some(&vec![Ok(b"hi".to_vec())]),
            "other service answered at once"
        );
    }
    let refused = (0..100).filter(|i| matches!(c.answers.get(i).map(|v| &v[..]), Some([Err(e)]) if e.code == ErrorCode::Overloaded)).count();
    assert!(refused >= 30, "the blocked service overloads: {refused}");
    c.answers.extend(early);
    c.collect(Duration::from_secs(10));
    e1.shutdown();
    e2.shutdown();
    assert_eq!(c.ingress.in_flight(), 0);
}

#[test]
fn an_unrouted_service_is_refused_at_the_ingress() {
    let _shared = shared();
    let (eng, mut c) = cpu(1, 64);
    let e = c.ingress.submit(1, 77, 1, 0, b"").unwrap_err().1;
    assert_eq!(e.code, ErrorCode::UnknownService);
    eng.shutdown();
}
