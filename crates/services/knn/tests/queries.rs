//! Several queries a request: the CPU function's answer to a request of q queries is the
//! concatenation of its answers to each query alone (behind q), and the ingress's split and
//! join (the service's RowSplit) give the same bytes; bad batches are refused clearly.

use cohort_engine::rows::RowSplit;
use cohort_engine::Service;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::{IvfIndex, Metric};
use cohort_proto::ErrorCode;
use cohort_service_knn::*;
use proptest::prelude::*;
use std::sync::{Arc, OnceLock};

const DIM: usize = 16;

fn service() -> &'static Knn {
    static S: OnceLock<Knn> = OnceLock::new();
    S.get_or_init(|| {
        let base = Model::new(SynthConfig {
            dim: DIM,
            clusters: 16,
            latent_dim: 6,
            noise: 0.05,
            seed: 3,
        })
        .sample(2000, 1);
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

/// The answer as the ingress makes it: each query's own request answered alone, joined.
fn split_and_joined(s: &Knn, p: &[u8]) -> Vec<u8> {
    let q = s.rows(p).unwrap().expect("a request of queries");
    let answers: Vec<Vec<u8>> = (0..q)
        .map(|i| {
            let mut one = Vec::new();
            s.row(p, i, &mut one);
            assert_eq!(queries_field(&one), 0, "rows are one-query requests");
            s.call_cpu(&one).unwrap()
        })
        .collect();
    let mut out = Vec::new();
    join_answers(answers.iter().map(|a| &a[..]), &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn a_request_of_queries_answers_as_its_queries_alone(
        q in 1usize..12,
        k in 1u16..40,
        nprobe in 0u16..17,
        u8s in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let s = service();
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
        let mut out = Vec::new();
        let singles: Vec<Vec<u8>> = if u8s {
            let v: Vec<u8> = (0..q * DIM).map(|_| rand::Rng::gen(&mut rng)).collect();
            encode_queries(k, nprobe, DIM, Elems::U8(&v), &mut out);
            v.chunks(DIM).map(|x| { let mut o = Vec::new(); encode_request(k, nprobe, Elems::U8(x), &mut o); o }).collect()
        } else {
            let v: Vec<f32> = (0..q * DIM).map(|_| rand::Rng::gen_range(&mut rng, -3.0..3.0)).collect();
            encode_queries(k, nprobe, DIM, Elems::F32(&v), &mut out);
            v.chunks(DIM).map(|x| { let mut o = Vec::new(); encode_request(k, nprobe, Elems::F32(x), &mut o); o }).collect()
        };
        let whole = s.call_cpu(&out).unwrap();
        let alone: Vec<Vec<u8>> = singles.iter().map(|p| s.call_cpu(p).unwrap()).collect();
        let mut expect = Vec::new();
        join_answers(alone.iter().map(|a| &a[..]), &mut expect);
        prop_assert_eq!(&whole, &expect);
        if q == 1 {
            prop_assert_eq!(&out, &singles[0], "one query: today's request");
            prop_assert_eq!(&whole, &alone[0], "and today's answer");
            prop_assert_eq!(s.rows(&out).unwrap(), None, "not split");
        } else {
            prop_assert_eq!(split_and_joined(s, &out), expect.clone());
        }
        let decoded = decode_responses(&whole, q).unwrap();
        prop_assert_eq!(decoded.len(), q);
        for (d, a) in decoded.iter().zip(&alone) {
            prop_assert_eq!(d, &decode_response(a).unwrap());
        }
    }
}

fn code(p: &[u8]) -> ErrorCode {
    service().rows(p).unwrap_err().code
}

#[test]
fn a_count_of_one_is_one_query_with_the_one_query_answer() {
    let s = service();
    let v = vec![0.5f32; DIM];
    let mut today = Vec::new();
    encode_request(5, 0, Elems::F32(&v), &mut today);
    let mut counted = today.clone();
    counted[5] = 1;
    assert_eq!(s.rows(&counted).unwrap(), Some(1));
    assert_eq!(split_and_joined(s, &counted), s.call_cpu(&today).unwrap());
    assert_eq!(s.call_cpu(&counted).unwrap(), s.call_cpu(&today).unwrap());
}

#[test]
fn bad_batches_are_refused_before_any_query_runs() {
    let v = vec![0.5f32; DIM * 3];
    let mut p = Vec::new();
    encode_queries(5, 0, DIM, Elems::F32(&v), &mut p);
    assert_eq!(queries_field(&p), 3);
    let mut short = p.clone();
    short.truncate(p.len() - 4);
    assert_eq!(
        code(&short),
        ErrorCode::BadRequest,
        "length disagrees with count"
    );
    let mut long = p.clone();
    long.extend_from_slice(&[0; 4 * DIM]);
    assert_eq!(code(&long), ErrorCode::BadRequest);
    let mut many = p.clone();
    many[5..7].copy_from_slice(&(MAX_QUERIES as u16 + 1).to_le_bytes());
    let e = service().rows(&many).unwrap_err();
    assert!(
        e.code == ErrorCode::BadRequest && e.message.contains("at most 1024"),
        "{e:?}"
    );
    let mut reserved = p.clone();
    reserved[7] = 1;
    assert_eq!(code(&reserved), ErrorCode::BadRequest);
    let mut k0 = p.clone();
    k0[0..2].fill(0);
    assert_eq!(code(&k0), ErrorCode::BadRequest, "k checked once for all");
    // 1 024 u8 queries of k = 1024: the answer could not fit a frame.
    let mut big = Vec::new();
    encode_queries(1024, 0, DIM, Elems::U8(&vec![1u8; DIM * 1024]), &mut big);
    let mut idx = big.clone();
    idx[0..2].copy_from_slice(&1000u16.to_le_bytes());
    assert_eq!(code(&idx), ErrorCode::TooLarge);
    // The engines' own parse refuses a request of several queries that was not split.
    let e = decode_request(&p, DIM, 16, 2000).unwrap_err();
    assert!(e.message.contains("several queries"), "{e:?}");
}
