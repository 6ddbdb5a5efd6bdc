use cohort_engine::*;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Collect(Mutex<Vec<(u32, Response)>>);
impl ReplyPort for Collect {
    fn deliver(&self, token: u32, r: Response) {
        self.0.lock().unwrap().push((token, r));
    }
}

/// Doubles every byte; sleeps when the payload says so; panics on 0xFF.
struct Test;
impl Service for Test {
    fn id(&self) -> u16 {
        9
    }
    fn name(&self) -> &'static str {
        "test"
    }
    fn execute_cpu(&self, p: &[u8]) -> Result<Vec<u8>, ErrorPayload> {
        match p.first() {
            Some(0xFF) => panic!("boom"),
            Some(0xEE) => Err(ErrorPayload::new(ErrorCode::BadRequest, "bad")),
            Some(0xDD) => {
                std::thread::sleep(Duration::from_millis(30));
                Ok(vec![])
            }
            _ => Ok(p.iter().map(|b| b.wrapping_mul(2)).collect()),
        }
    }
    fn json_to_payload(&self, _: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        Ok(vec![])
    }
    fn payload_to_json(&self, _: &[u8]) -> serde_json::Value {
        serde_json::Value::Null
    }
}

fn setup(workers: usize, max_queue: usize) -> (CpuEngine, Dispatcher, Arc<Collect>) {
    let mut reg = Registry::new();
    reg.add(Arc::new(Test));
    let eng = CpuEngine::start(
        &CpuEngineConfig {
            workers,
            max_queue,
            cpus: vec![],
            spin: Duration::from_micros(20),
        },
        reg,
        Arc::new(Metrics::new("cpu", [(9, "test".to_string())].into())),
    );
    let d = Dispatcher::new(eng.lanes(), DispatchPolicy::LeastLoaded);
    (eng, d, Arc::new(Collect(Mutex::new(vec![]))))
}

fn req(id: u64, service: u16, p: Vec<u8>, port: &Arc<Collect>, timeout: Duration) -> Request {
    let now = Instant::now();
    Request::new(
        service,
        id,
        p,
        now,
        now + timeout,
        Reply {
            port: port.clone(),
            token: id as u32,
        },
    )
}

#[test]
fn every_request_gets_exactly_one_answer() {
    let (eng, d, port) = setup(2, 64);
    let payloads: Vec<Vec<u8>> = vec![vec![1, 2], vec![0xFF], vec![0xEE], vec![]];
    for (i, p) in payloads.iter().enumerate() {
        assert_eq!(
            d.submit(req(i as u64, 9, p.clone(), &port, Duration::from_secs(5))),
            Submit::Queued
        );
    }
    d.submit(req(10, 77, vec![], &port, Duration::from_secs(5)));
    eng.shutdown();
    let mut got = port.0.lock().unwrap().clone();
    got.sort_by_key(|(t, _)| *t);
    assert_eq!(got.len(), 5);
    assert_eq!(got[0].1.body, ResponseBody::Ok(vec![2, 4]));
    let code = |i: usize| match &got[i].1.body {
        ResponseBody::Err(e) => e.code,
        _ => panic!("expected error"),
    };
    assert_eq!(code(1), ErrorCode::Internal);
    assert_eq!(code(2), ErrorCode::BadRequest);
    assert_eq!(got[3].1.body, ResponseBody::Ok(vec![]));
    assert_eq!(code(4), ErrorCode::UnknownService);
}

#[test]
fn full_queue_answers_overloaded_and_expired_answers_timeout() {
    let (eng, d, port) = setup(1, 2);
    // The first request occupies the worker; then the queue (2) fills; the rest overload.
    let mut outcomes = vec![];
    for i in 0..8 {
        outcomes.push(d.submit(req(i, 9, vec![0xDD], &port, Duration::from_millis(45))));
        if i == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let overloaded = outcomes
        .iter()
        .filter(|o| **o == Submit::Overloaded)
        .count();
    assert!(overloaded >= 5, "{outcomes:?}");
    eng.shutdown();
    let got = port.0.lock().unwrap();
    assert_eq!(got.len(), 8, "every request answered once");
    let timeouts = got
        .iter()
        .filter(|(_, r)| matches!(&r.body, ResponseBody::Err(e) if e.code == ErrorCode::Timeout))
        .count();
    // Requests 2 and 3 wait >= 30 ms behind request 1 with a 45 ms deadline: one at least expires.
    assert!(
        timeouts >= 1,
        "queued requests past their deadline must time out"
    );
}

#[test]
fn dropped_request_answers_unavailable() {
    let port = Arc::new(Collect(Mutex::new(vec![])));
    drop(req(1, 9, vec![], &port, Duration::from_secs(1)));
    let got = port.0.lock().unwrap();
    assert!(matches!(&got[0].1.body, ResponseBody::Err(e) if e.code == ErrorCode::Unavailable));
}
