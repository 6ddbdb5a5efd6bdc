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
        // Several queries a request: a count the ingress accepts splits into that many
        // one-query requests, each of the one-query form (the engines' decoder sees no count).
        if let Ok(q) = cohort_services::knn::parse_queries(data, dim, nlist, n) {
            assert!((1..=cohort_services::knn::MAX_QUERIES).contains(&q));
            let mut one = Vec::new();
            for i in 0..q {
                one.clear();
                cohort_services::knn::query_request(data, i, &mut one);
                assert_eq!(cohort_services::knn::queries_field(&one), 0);
                let _ = cohort_services::knn::decode_request(&one, dim, nlist, n);
            }
        }
    }
    if let Ok(rs) = cohort_services::knn::decode_responses(data, 3) {
        assert_eq!(rs.len(), 3);
    }
    if let Ok(ns) = cohort_services::knn::decode_response(data) {
        assert_eq!(data.len(), 4 + 8 * ns.len());
    }
});
