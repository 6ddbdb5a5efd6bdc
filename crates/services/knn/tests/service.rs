use cohort_engine::Service;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::{IvfIndex, Metric};
use cohort_proto::ErrorCode;
use cohort_service_knn::*;
use proptest::prelude::*;
use std::sync::{Arc, OnceLock};

fn service() -> &'static Knn {
    static S: OnceLock<Knn> = OnceLock::new();
    S.get_or_init(|| {
        let base = Model::new(SynthConfig {
            dim: 16,
            clusters: 16,
            latent_dim: 6,
            noise: 0.05,
            seed: 2,
        })
        .sample(3000, 1);
        Knn {
            index: Arc::new(IvfIndex::build(
                &base,
                16,
                Metric::L2,
                &KMeansConfig::new(16),
            )),
        }
    })
}

fn req(k: u16, nprobe: u16, v: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(k, nprobe, Elems::F32(v), &mut out);
    out
}

#[test]
fn answers_match_exact_search_with_all_cells() {
    let s = service();
    let q = Model::new(SynthConfig {
        dim: 16,
        clusters: 16,
        latent_dim: 6,
        noise: 0.05,
        seed: 2,
    })
    .sample(20, 7);
    let base_ix = &s.index;
    for i in 0..q.n {
        let got = decode_response(&s.call_cpu(&req(10, 16, q.row(i))).unwrap()).unwrap();
        // Exact over the index's own vectors (cell-major order, original ids).
        let mut t = cohort_ivf::TopK::new(10);
        for (r, v) in base_ix.vectors().chunks_exact(16).enumerate() {
            t.push(base_ix.ids()[r], Metric::L2.distance(q.row(i), v));
        }
        assert_eq!(got, t.into_sorted());
    }
}

#[test]
fn u8_vectors_are_accepted() {
    let s = service();
    let mut p = Vec::new();
    encode_request(5, 0, Elems::U8(&[10u8; 16]), &mut p);
    assert_eq!(decode_response(&s.call_cpu(&p).unwrap()).unwrap().len(), 5);
}

#[test]
fn bad_requests_are_rejected_with_a_message() {
    let s = service();
    let v = [1.0f32; 16];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (req(10, 0, &[1.0; 15]), "dimension"),
        (req(0, 0, &v), "k must be"),
        (req(5000, 0, &v), "k must be"),
        (req(10, 17, &v), "nprobe"),
        (req(10, 0, &[f32::NAN; 16]), "NaN"),
        // Finite but so large that squared distances overflow f32: refused, not ranked.
        (req(10, 0, &[1e30; 16]), "magnitude"),
        (req(10, 0, &[-2e16; 16]), "magnitude"),
        (req(10, 0, &v)[..20].to_vec(), "do not match"),
        (vec![1, 2, 3], "header bytes"),
    ];
    for (p, msg) in cases {
        let e = s.call_cpu(&p).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(
            e.message.contains(msg),
            "{} does not mention {msg}",
            e.message
        );
    }
    let mut p = req(10, 0, &v);
    p[4] = 7;
    assert!(s.call_cpu(&p).unwrap_err().message.contains("element type"));
}

#[test]
fn json_mapping() {
    let s = service();
    let body = serde_json::json!({"vector": vec![3.0; 16], "k": 4});
    let p = s.json_to_payload(&body).unwrap();
    let out = s.payload_to_json(&s.call_cpu(&p).unwrap());
    assert_eq!(out["ids"].as_array().unwrap().len(), 4);
    assert!(s
        .json_to_payload(&serde_json::json!({"vector": ["x"]}))
        .is_err());
    assert!(s.json_to_payload(&serde_json::json!({"k": 3})).is_err());
    assert!(s
        .json_to_payload(&serde_json::json!({"vector": [1.0], "k": -1}))
        .is_err());
}

proptest! {
    #[test]
    fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_request(&b, 16, 16, 3000);
        let _ = decode_response(&b);
    }
}
