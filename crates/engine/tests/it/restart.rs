//! A lane that restarts (the persistent GPU engine's watchdog) loses what it held: each
//! ingress answers those requests INTERNAL exactly once, keeps answers the lane wrote before,
//! drops the lane's late answers as stale, and goes on sending it new requests.

use crate::common;

use cohort_engine::*;
use cohort_proto::ErrorCode;
use common::{shared, spec, SERVICE};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_restarted_lane_has_its_requests_failed_once_and_keeps_serving() {
    let _shared = shared();
    let mut w = wire(1, &[spec("gpu-persistent", 1, 16)]);
    let mut lane = w.engines[0].pop().expect("one lane");
    let labels = [(
        SERVICE,
        ServiceLabel {
            name: "rev".into(),
            engine: "gpu-persistent".into(),
        },
    )];
    let metrics = Arc::new(Metrics::new(labels.into()));
    let mut ing: Ingress<u32> = Ingress::new(
        w.ingresses.pop().expect("one ingress"),
        64,
        metrics,
        Duration::from_secs(5),
    );
    for i in 0..3u32 {
        ing.submit(i, SERVICE, i as u64, 0, b"x").expect("room");
    }
    // The lane takes all three; answers the first; then "restarts" holding the other two.
    let mut held = Vec::new();
    while let Some(env) = lane.requests.poll(|_, m| m.env) {
        held.push(env);
    }
    assert_eq!(held.len(), 3);
    lane.answers.send(0, held[0], b"first");
    lane.announce_restart();
    let mut got = Vec::new();
    let mut record = |who: u32, _: &Meta, a: Answer<'_>| got.push((who, a.map(|p| p.to_vec())));
    ing.drain(usize::MAX, &mut record);
    let failed = ing.reap_dead_lanes(&mut record);
    assert_eq!(failed, 2);
    assert_eq!(got[0], (0, Ok(b"first".to_vec())));
    for (who, a) in &got[1..] {
        assert!(*who == 1 || *who == 2);
        assert_eq!(a.as_ref().unwrap_err().code, ErrorCode::Internal);
    }
    assert_eq!(ing.in_flight(), 0);
    // A late answer from before the restart is stale: counted, never delivered.
    lane.answers.send(0, held[1], b"late");
    let mut delivered = 0;
    ing.drain(usize::MAX, |_, _, _| delivered += 1);
    assert_eq!((delivered, ing.stale_answers), (0, 1));
    // Nothing more to reap, and the lane still takes and answers new requests.
    assert_eq!(ing.reap_dead_lanes(|_, _, _| {}), 0);
    ing.submit(7, SERVICE, 7, 0, b"y").expect("room");
    let env = lane.requests.poll(|_, m| m.env).expect("sent to the lane");
    lane.answers.send(0, env, b"again");
    let mut again = Vec::new();
    ing.drain(usize::MAX, |who, _, a| {
        again.push((who, a.map(|p| p.to_vec())))
    });
    assert_eq!(again, vec![(7, Ok(b"again".to_vec()))]);
}
