#![no_main]
//! The cluster's request and answer batches: any bytes decode to records or an error, never a
//! panic, and what decodes re-encodes to the same bytes.
use cohort_proto::node_wire::{self, Batch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut b = Batch::new(node_wire::REQUESTS);
    if node_wire::requests(data, |r| b.push_request(&r)).is_ok() {
        assert_eq!(b.take(), data);
    }
    let mut b = Batch::new(node_wire::ANSWERS);
    if node_wire::answers(data, |a| b.push_answer(&a)).is_ok() {
        assert_eq!(b.take(), data);
    }
});
