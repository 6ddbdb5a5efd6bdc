//! What requests to send and how to check their answers.

use serde_json::Value;

pub trait Workload: Send + Sync {
    fn service(&self) -> u16;
    fn service_name(&self) -> &'static str;
    /// Appends the wire payload of request `seq` to `out`.
    fn payload(&self, seq: u64, out: &mut Vec<u8>);
    /// The JSON body of request `seq` (HTTP).
    fn json(&self, seq: u64) -> Value;
    /// Whether `payload` is the right answer to request `seq`.
    fn check(&self, seq: u64, payload: &[u8]) -> bool;
    fn check_json(&self, seq: u64, v: &Value) -> bool;
    /// Extra report fields measured over the checked answers (e.g. recall_at_k).
    fn extra(&self) -> serde_json::Map<String, Value> {
        serde_json::Map::new()
    }
    /// Forgets what `extra` measured (between the points of a sweep).
    fn reset(&self) {}
    /// The bank's session workload (served as pages over HTTP only).
    fn as_bank(&self) -> Option<&crate::bank::BankWorkload> {
        None
    }
}

/// Payload bytes derived from the sequence number, so every answer can be checked.
fn pattern(seq: u64, len: usize, out: &mut Vec<u8>) {
    let s = seq.to_le_bytes();
    out.extend((0..len).map(|i| s[i % 8] ^ (i / 8) as u8));
}

fn text_pattern(seq: u64, len: usize) -> String {
    let s = format!("{seq:x}-");
    s.chars().cycle().take(len).collect()
}

pub struct EchoWorkload {
    pub payload_bytes: usize,
}

impl Workload for EchoWorkload {
    fn service(&self) -> u16 {
        cohort_services::echo::ID
    }
    fn service_name(&self) -> &'static str {
        "echo"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        pattern(seq, self.payload_bytes, out);
    }
    fn json(&self, seq: u64) -> Value {
        serde_json::json!({ "data": text_pattern(seq, self.payload_bytes) })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        let mut want = Vec::with_capacity(self.payload_bytes);
        pattern(seq, self.payload_bytes, &mut want);
        payload == want
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        v.get("data").and_then(|d| d.as_str()) == Some(&text_pattern(seq, self.payload_bytes))
    }
}

pub struct SpinWorkload {
    pub spin_us: u32,
    pub payload_bytes: usize,
}

impl Workload for SpinWorkload {
    fn service(&self) -> u16 {
        cohort_services::spin::ID
    }
    fn service_name(&self) -> &'static str {
        "spin"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.spin_us.to_le_bytes());
        pattern(seq, self.payload_bytes, out);
    }
    fn json(&self, seq: u64) -> Value {
        serde_json::json!({ "spin_us": self.spin_us, "data": text_pattern(seq, self.payload_bytes) })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        let mut want = Vec::new();
        self.payload(seq, &mut want);
        payload == want
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        v.get("data").and_then(|d| d.as_str()) == Some(&text_pattern(seq, self.payload_bytes))
            && v.get("spin_us").and_then(|d| d.as_u64()) == Some(self.spin_us as u64)
    }
}

/// k-NN queries from a vector file; answers are checked for shape and order, and scored
/// against ground truth when given (`recall_at_k` in the report).
pub struct KnnWorkload {
    pub queries: cohort_knn::Vectors,
    /// (ids per row, ids) of the exact neighbours, row i for query i.
    pub gt: Option<(usize, Vec<i32>)>,
    pub k: usize,
    pub nprobe: u16,
    hits: std::sync::atomic::AtomicU64,
    scored: std::sync::atomic::AtomicU64,
}

impl KnnWorkload {
    pub fn new(
        queries: cohort_knn::Vectors,
        gt: Option<(usize, Vec<i32>)>,
        k: usize,
        nprobe: u16,
    ) -> KnnWorkload {
        assert!(queries.n > 0, "no queries");
        KnnWorkload {
            queries,
            gt,
            k,
            nprobe,
            hits: Default::default(),
            scored: Default::default(),
        }
    }

    fn query(&self, seq: u64) -> usize {
        (seq % self.queries.n as u64) as usize
    }

    fn score(&self, seq: u64, ids: &[u32]) -> bool {
        if ids.len() != self.k {
            return false;
        }
        // The same neighbour twice is a wrong answer, whatever the recall.
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return false;
        }
        if let Some((gt_dim, gt)) = &self.gt {
            let q = self.query(seq);
            let truth = &gt[q * gt_dim..q * gt_dim + self.k.min(*gt_dim)];
            let hits = ids
                .iter()
                .filter(|id| truth.contains(&(**id as i32)))
                .count();
            self.hits
                .fetch_add(hits as u64, std::sync::atomic::Ordering::Relaxed);
            self.scored
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        true
    }
}

impl Workload for KnnWorkload {
    fn service(&self) -> u16 {
        cohort_services::knn::ID
    }
    fn service_name(&self) -> &'static str {
        "knn"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        let q = self.queries.row(self.query(seq));
        cohort_services::knn::encode_request(
            self.k as u16,
            self.nprobe,
            cohort_services::knn::Elems::F32(q),
            out,
        );
    }
    fn json(&self, seq: u64) -> Value {
        serde_json::json!({ "vector": self.queries.row(self.query(seq)), "k": self.k, "nprobe": self.nprobe })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        match cohort_services::knn::decode_response(payload) {
            Ok(r) if r.windows(2).all(|w| w[0].distance <= w[1].distance) => {
                self.score(seq, &r.iter().map(|n| n.id).collect::<Vec<_>>())
            }
            _ => false,
        }
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        let ids: Option<Vec<u32>> = v
            .get("ids")
            .and_then(|a| a.as_array())
            .and_then(|a| a.iter().map(|x| x.as_u64().map(|i| i as u32)).collect());
        ids.is_some_and(|ids| self.score(seq, &ids))
    }
    fn extra(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("k".into(), self.k.into());
        let scored = self.scored.load(std::sync::atomic::Ordering::Relaxed);
        if scored > 0 {
            let r = self.hits.load(std::sync::atomic::Ordering::Relaxed) as f64
                / (scored as f64 * self.k as f64);
            m.insert("recall_at_k".into(), r.into());
        }
        m
    }
    fn reset(&self) {
        self.hits.store(0, std::sync::atomic::Ordering::Relaxed);
        self.scored.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}
