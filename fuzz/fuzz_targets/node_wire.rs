#![no_main]
//! The cluster's request and answer batches, ring messages and hellos: any bytes decode to records or an error, never a
//! panic, and what decodes re-encodes to the same bytes; any bytes opened as a sealed message
//! are refused or open to a message that decodes the same way.
use cohort_proto::node_wire::{self, Batch};
use libfuzzer_sys::fuzz_target;

fn round_trip(data: &[u8]) {
    let mut b = Batch::new(node_wire::REQUESTS);
    if node_wire::requests(data, |r| b.push_request(&r)).is_ok() {
        assert_eq!(b.take(), data);
    }
    let mut b = Batch::new(node_wire::ANSWERS);
    if node_wire::answers(data, |a| b.push_answer(&a)).is_ok() {
        assert_eq!(b.take(), data);
    }
    if let Ok(o) = node_wire::ring_offer(data) {
        let mut b = Batch::new(node_wire::RING_OFFER);
        b.push_ring_offer(&o);
        assert_eq!(b.take(), data);
    }
    if let Ok(c) = node_wire::ring_credit(data) {
        let mut b = Batch::new(node_wire::RING_CREDIT);
        b.push_ring_credit(c);
        assert_eq!(b.take(), data);
    }
    if let Ok(n) = node_wire::hello(data) {
        let mut b = Batch::new(node_wire::HELLO);
        b.push_hello(n);
        assert_eq!(b.take(), data);
    }
    if let Ok((n, id)) = node_wire::hello_ack(data) {
        let mut b = Batch::new(node_wire::HELLO_ACK);
        b.push_hello_ack(n, id);
        assert_eq!(b.take(), data);
    }
}

fuzz_target!(|data: &[u8]| {
    round_trip(data);
    if let Ok((_, inner)) = node_wire::open(data, b"a cluster key for the fuzzer") {
        round_trip(inner);
    }
});
