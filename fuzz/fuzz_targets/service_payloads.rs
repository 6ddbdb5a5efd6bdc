#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cohort_services::spin::decode(data);
    // k-NN request against a few index shapes, and the response decoder the load generator uses.
    for (dim, nlist, n) in [(4, 2, 10), (16, 64, 1000), (128, 1024, 1_000_000)] {
        if let Ok(r) = cohort_services::knn::decode_request(data, dim, nlist, n) {
            assert_eq!(r.vector.len(), dim);
            assert!(r.k >= 1 && r.k <= n && r.nprobe <= nlist);
            assert!(r.vector.iter().all(|x| x.is_finite()));
        }
    }
    if let Ok(ns) = cohort_services::knn::decode_response(data) {
        assert_eq!(data.len(), 4 + 8 * ns.len());
    }
});
