//! Requests of several rows through the ingress and a real cpu engine: split into one request
//! per row, joined in row order, answered exactly once (the first error when any row fails,
//! after every row sent came back), each row one place of the engine's queue.

use crate::common;
use cohort_engine::rows::{RowAnswers, RowSplit};
use cohort_engine::*;
use cohort_proto::{ErrorCode, ErrorPayload};
use common::*;
use std::sync::Arc;
use std::time::Duration;

/// Rev's requests, several at once: byte 0 the row count (0: a plain Rev request, not
/// split), then the rows, 2 bytes each. The joined answer: the count, then each row's answer.
struct Rows;
impl Service for Rows {
    fn id(&self) -> u16 {
        SERVICE
    }
    fn name(&self) -> &'static str {
        "rows"
    }
    fn execute_cpu(&self, p: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        Rev.execute_cpu(p, out)
    }
    fn json_to_payload(&self, _: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        Ok(vec![])
    }
    fn payload_to_json(&self, _: &[u8]) -> serde_json::Value {
        serde_json::Value::Null
    }
    fn row_split(&self) -> Option<&dyn RowSplit> {
        Some(self)
    }
}

impl RowSplit for Rows {
    fn rows(&self, p: &[u8]) -> Result<Option<usize>, ErrorPayload> {
        match p.first() {
            Some(0) | None => Ok(None),
            Some(&n) if p.len() == 1 + 2 * n as usize => Ok(Some(n as usize)),
            Some(_) => Err(ErrorPayload::new(ErrorCode::BadRequest, "rows and length")),
        }
    }
    fn row(&self, p: &[u8], i: usize, out: &mut Vec<u8>) {
        let r = &p[1 + 2 * i..3 + 2 * i];
        // Rev's special payloads, two bytes long: "ba" (bad), "sl" (sleep).
        out.extend_from_slice(match r {
            b"ba" => b"bad",
            b"sl" => b"sleep",
            r => r,
        });
    }
    fn join(&self, a: &RowAnswers<'_>, out: &mut Vec<u8>) {
        out.push(a.len() as u8);
        (0..a.len()).for_each(|i| out.extend_from_slice(a.get(i)));
    }
}

fn rig(max_queued: Option<usize>, table: usize) -> (CpuEngine, Client) {
    let m = metrics("cpu");
    let mut reg = Registry::new();
    reg.add(Arc::new(Rows)).unwrap();
    let mut s = spec("cpu", 2, 64);
    s.max_queued = max_queued;
    let mut w = wire(1, &[s]);
    let cfg = CpuEngineConfig {
        cpus: vec![],
        spin: Duration::ZERO,
        fair: true,
    };
    let eng = CpuEngine::start(&cfg, w.engines.pop().unwrap(), reg.clone(), m.clone()).unwrap();
    let ends = w.ingresses.pop().unwrap();
    let bell = Bell::new();
    ends.set_wake(bell.clone());
    let c = Client {
        ingress: Ingress::new(ends, table, m, Duration::from_secs(5)).with_rows(reg.all().cloned()),
        bell,
        answers: Default::default(),
    };
    (eng, c)
}

#[test]
fn rows_are_split_and_joined_in_order_and_one_row_requests_pass_unchanged() {
    let _shared = shared();
    let (eng, mut c) = rig(None, 1 << 10);
    c.send(1, b"\x03abcdef", Duration::from_secs(5));
    c.send(2, b"\x00xyz", Duration::from_secs(5));
    c.send(3, b"\x01ab", Duration::from_secs(5));
    c.collect(Duration::from_secs(5));
    eng.shutdown();
    assert_eq!(c.answers[&1], vec![Ok(b"\x03badcfe".to_vec())]);
    assert_eq!(c.answers[&2], vec![Ok(b"zyx\x00".to_vec())], "not split");
    assert_eq!(c.answers[&3], vec![Ok(b"\x01ba".to_vec())]);
    assert_eq!((c.ingress.in_flight(), c.ingress.split_pending()), (0, 0));
}

#[test]
fn a_failing_row_answers_the_request_once_with_its_error() {
    let _shared = shared();
    let (eng, mut c) = rig(None, 1 << 10);
    c.send(1, b"\x04abbaslcd", Duration::from_secs(5));
    c.send(2, b"\x02ab", Duration::from_secs(5));
    c.collect(Duration::from_secs(5));
    eng.shutdown();
    assert_eq!(c.code(1), Some(ErrorCode::BadRequest));
    assert_eq!(
        c.code(2),
        Some(ErrorCode::BadRequest),
        "malformed: refused whole"
    );
    assert_eq!((c.ingress.in_flight(), c.ingress.split_pending()), (0, 0));
}

#[test]
fn each_row_takes_a_place_of_the_queue_and_of_the_table() {
    let _shared = shared();
    // max_queued 6: a request of 8 slow rows sends 6, is refused the 7th and answers
    // OVERLOADED once its 6 rows are back; while they run a one-row request finds no place.
    let (eng, mut c) = rig(Some(6), 1 << 10);
    c.send(1, b"\x08slslslslslslslsl", Duration::from_secs(5));
    c.send(2, b"\x00one", Duration::from_secs(5));
    assert_eq!(c.code(2), Some(ErrorCode::Overloaded));
    assert!(
        !c.answers.contains_key(&1),
        "answered only once its sent rows are back"
    );
    c.collect(Duration::from_secs(5));
    assert_eq!(c.code(1), Some(ErrorCode::Overloaded));
    c.send(3, b"\x06slslslslslsl", Duration::from_secs(5));
    c.collect(Duration::from_secs(5));
    eng.shutdown();
    assert_eq!(c.answers[&3], vec![Ok(b"\x06".to_vec())], "6 rows fit");
    // A table of 4 places refuses a request of 5 rows whole, at once.
    let (eng, mut c) = rig(None, 4);
    c.send(4, b"\x05abababab", Duration::from_secs(5));
    c.send(4, b"\x05ababababab", Duration::from_secs(5));
    eng.shutdown();
    let codes: Vec<_> = c.answers[&4]
        .iter()
        .map(|a| a.as_ref().unwrap_err().code)
        .collect();
    assert_eq!(codes, [ErrorCode::BadRequest, ErrorCode::Overloaded]);
    assert_eq!(c.ingress.in_flight(), 0);
}

#[test]
fn rows_of_an_inline_service_run_in_order_on_the_ingress_thread() {
    let _shared = shared();
    let m = metrics("inline");
    let svc: Arc<dyn Service> = Arc::new(Rows);
    // No lane serves it: an ingress with the inline engine runs it.
    let mut w = wire(1, &[spec("cpu", 1, 8)]);
    let inline = Arc::new(InlineEngine::new([svc.clone()]));
    let mut ing: Ingress<u64> =
        Ingress::new(w.ingresses.pop().unwrap(), 16, m, Duration::from_secs(1))
            .with_inline(Some(inline))
            .with_rows([svc]);
    let mut got = Vec::new();
    for (id, p) in [
        (1u64, &b"\x02abcd"[..]),
        (2, b"\x03abbacd"),
        (3, b"\x00xy"),
        (4, b"\x02a"),
    ] {
        let r = ing.admit(id, SERVICE, id, 0, p, |who, _, a| {
            got.push((who, a.map(|b| b.to_vec()).map_err(|e| e.code)))
        });
        if let Err((who, e)) = r {
            got.push((who, Err(e.code)));
        }
    }
    assert_eq!(
        got,
        vec![
            (1, Ok(b"\x02badc".to_vec())),
            (2, Err(ErrorCode::BadRequest)),
            (3, Ok(b"yx\x00".to_vec())),
            (4, Err(ErrorCode::BadRequest)),
        ]
    );
    assert_eq!(ing.in_flight(), 0);
}
