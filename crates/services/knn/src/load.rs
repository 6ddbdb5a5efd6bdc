//! The load generator's k-NN workload.

use cohort_service_api::workload::Workload;
use serde_json::Value;

/// k-NN queries from a vector file; answers are checked for shape and order, and scored
/// against ground truth when given (`recall_at_k` in the report).
pub struct KnnWorkload {
    pub queries: cohort_ivf::Vectors,
    /// (ids per row, ids) of the exact neighbours, row i for query i.
    pub gt: Option<(usize, Vec<i32>)>,
    pub k: usize,
    pub nprobe: u16,
    /// Queries each request carries (request `seq` carries queries seq x this + 0.. of the
    /// file's order, wrapping around); 1: today's one-query request.
    pub per_request: usize,
    hits: std::sync::atomic::AtomicU64,
    scored: std::sync::atomic::AtomicU64,
}

impl KnnWorkload {
    /// The workload `cohort load --service knn` drives: queries (and ground truth) from files.
    pub fn from_options(
        o: &cohort_service_api::workload::LoadOptions,
    ) -> Result<KnnWorkload, String> {
        let q = o.queries.as_ref().ok_or("knn load needs --queries FILE")?;
        let queries = cohort_ivf::vecfile::read_vectors(q).map_err(|e| format!("{e:#}"))?;
        let gt = match &o.gt {
            Some(p) => {
                let (n, dim, ids) =
                    cohort_ivf::vecfile::read_ivecs(p).map_err(|e| format!("{e:#}"))?;
                if n < queries.n {
                    return Err(format!(
                        "ground truth has {n} rows for {} queries",
                        queries.n
                    ));
                }
                if o.k > dim {
                    return Err(format!("--k {} exceeds the ground-truth depth {dim}", o.k));
                }
                Some((dim, ids))
            }
            None => None,
        };
        if !(1..=super::MAX_K).contains(&o.k) {
            return Err(format!("--k must be in 1..={}", super::MAX_K));
        }
        if queries.n == 0 {
            return Err("the query file holds no vectors".into());
        }
        let per = o.queries_per_request;
        if !(1..=super::MAX_QUERIES).contains(&per) {
            return Err(format!(
                "--queries-per-request must be in 1..={}",
                super::MAX_QUERIES
            ));
        }
        let (request, answer) = (
            cohort_ivf::QUERY_HEAD + per * queries.dim * 4,
            4 + per * (4 + 8 * o.k),
        );
        if request.max(answer) > cohort_proto::MAX_PAYLOAD {
            return Err(format!(
                "{per} queries of dimension {} (k {}) take {request} bytes a request and \
                 {answer} an answer: a frame holds {}",
                queries.dim,
                o.k,
                cohort_proto::MAX_PAYLOAD
            ));
        }
        Ok(KnnWorkload::new(queries, gt, o.k, o.nprobe).per_request(per))
    }

    pub fn new(
        queries: cohort_ivf::Vectors,
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
            per_request: 1,
            hits: Default::default(),
            scored: Default::default(),
        }
    }

    /// Sends `n` queries a request.
    pub fn per_request(mut self, n: usize) -> KnnWorkload {
        assert!((1..=super::MAX_QUERIES).contains(&n));
        self.per_request = n;
        self
    }

    /// The file's row of query `j` of request `seq`.
    fn query_of(&self, seq: u64, j: usize) -> usize {
        let i = seq
            .wrapping_mul(self.per_request as u64)
            .wrapping_add(j as u64);
        (i % self.queries.n as u64) as usize
    }

    fn query(&self, seq: u64) -> usize {
        self.query_of(seq, 0)
    }

    /// Whether `r` is a right answer to query `j` of request `seq` (sorted, k distinct ids,
    /// scored against the ground truth).
    fn check_one(&self, seq: u64, j: usize, r: &[cohort_ivf::Neighbor]) -> bool {
        r.windows(2).all(|w| w[0].distance <= w[1].distance)
            && self.score(
                self.query_of(seq, j),
                &r.iter().map(|n| n.id).collect::<Vec<_>>(),
            )
    }

    /// `q`: the query's row in the file.
    fn score(&self, q: usize, ids: &[u32]) -> bool {
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
        crate::ID
    }
    fn service_name(&self) -> &'static str {
        "knn"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        let at = out.len();
        let q = self.queries.row(self.query(seq));
        crate::encode_request(self.k as u16, self.nprobe, crate::Elems::F32(q), out);
        if self.per_request > 1 {
            // The rows may wrap around the file: written one by one, not as one slice.
            out[at + 5..at + 7].copy_from_slice(&(self.per_request as u16).to_le_bytes());
            for j in 1..self.per_request {
                let v = self.queries.row(self.query_of(seq, j));
                v.iter()
                    .for_each(|f| out.extend_from_slice(&f.to_le_bytes()));
            }
        }
    }
    fn json(&self, seq: u64) -> Value {
        serde_json::json!({ "vector": self.queries.row(self.query(seq)), "k": self.k, "nprobe": self.nprobe })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        match crate::decode_responses(payload, self.per_request) {
            // Every query scored (recall counts each), then all must be right.
            Ok(rs) => rs
                .iter()
                .enumerate()
                .fold(true, |ok, (j, r)| self.check_one(seq, j, r) & ok),
            Err(_) => false,
        }
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        let ids: Option<Vec<u32>> = v
            .get("ids")
            .and_then(|a| a.as_array())
            .and_then(|a| a.iter().map(|x| x.as_u64().map(|i| i as u32)).collect());
        ids.is_some_and(|ids| self.score(self.query(seq), &ids))
    }
    fn extra(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("k".into(), self.k.into());
        if self.per_request > 1 {
            m.insert("queries_per_request".into(), self.per_request.into());
        }
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
