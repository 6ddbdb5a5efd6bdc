#![no_main]
//! The collections' native frames (`cohort_collections::frames`): any bytes decode to a
//! request or an error, never a panic; what decodes encodes back to the same bytes; the
//! answers' decoders likewise. Every op (search, upsert, delete, get) and every answer.
use cohort_collections::frames::{
    decode_delete_answer, decode_get_answer, decode_request, decode_search_answer,
    decode_upsert_answer, encode_delete_answer, encode_get_answer, encode_search_answer,
    encode_upsert_answer,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = decode_request(data) {
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(out, data);
    }
    if let Ok(hits) = decode_search_answer(data) {
        let mut out = Vec::new();
        encode_search_answer(hits.iter().map(|h| &h[..]), &mut out);
        assert_eq!(out, data);
    }
    if let Ok(n) = decode_upsert_answer(data) {
        let mut out = Vec::new();
        encode_upsert_answer(n, &mut out);
        assert_eq!(out, data);
    }
    if let Ok(n) = decode_delete_answer(data) {
        let mut out = Vec::new();
        encode_delete_answer(n, &mut out);
        assert_eq!(out, data);
    }
    if let Ok((dim, points)) = decode_get_answer(data) {
        let mut out = Vec::new();
        encode_get_answer(dim, &points, &mut out);
        assert_eq!(out, data);
    }
});
