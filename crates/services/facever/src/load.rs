//! The load generator's facever workload: held-out faces (those the references were not made
//! from) claimed as their own person (genuine pairs) or another (impostors), alternately.
//! Every answer is checked against the CPU twin's distance for that pair (the references are
//! rebuilt here from the same faces the database was loaded from) and its verdict against
//! its own threshold; the share of right verdicts (genuine accepted, impostors rejected) is
//! reported.

use super::lbp::{self, Histogram};
use super::orl::{self, Faces, HELD_OUT};
use super::Verdict;
use cohort_service_api::workload::{AccuracyCount, LoadOptions, Workload};
use rayon::prelude::*;
use serde_json::Value;

/// How far a served distance may be from the CPU twin's, relative (the GPU sums in another
/// order).
pub const DISTANCE_TOLERANCE: f32 = 1e-3;

pub struct FaceverWorkload {
    faces: Faces,
    /// Every (held-out probe, claimed person) pair's distance, by [`FaceverWorkload::pair`].
    probes: Vec<Histogram>,
    refs: Vec<Histogram>,
    accuracy: AccuracyCount,
}

impl FaceverWorkload {
    pub fn from_options(o: &LoadOptions) -> Result<FaceverWorkload, String> {
        Ok(FaceverWorkload::new(orl::load(o.data.as_deref())?))
    }

    pub fn new(faces: Faces) -> FaceverWorkload {
        let table = lbp::uniform_table();
        let refs = (1..=faces.people)
            .into_par_iter()
            .map(|p| faces.reference(p, &table))
            .collect();
        let probes = (1..=faces.people)
            .flat_map(|p| HELD_OUT.map(move |i| (p, i)))
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|(p, i)| lbp::histogram(faces.image(p, i), &table))
            .collect();
        FaceverWorkload {
            faces,
            probes,
            refs,
            accuracy: AccuracyCount::default(),
        }
    }

    /// Request `seq`: (probe index, its person, its image, the person claimed). Even seqs are
    /// genuine, odd ones claim another person (which one varies with seq).
    fn pair(&self, seq: u64) -> (usize, u32, usize, u32) {
        let per = HELD_OUT.len() as u64;
        let people = self.faces.people as u64;
        let probe = (seq / 2) % (people * per);
        let person = (probe / per) as u32 + 1;
        let image = HELD_OUT.start + (probe % per) as usize;
        let claimed = if seq.is_multiple_of(2) {
            person
        } else {
            // 1..people-1 ahead, wrapping: never the person itself.
            let ahead = 1 + (seq / 2 / (people * per)) % (people - 1);
            ((person as u64 - 1 + ahead) % people) as u32 + 1
        };
        (probe as usize, person, image, claimed)
    }

    fn matches(&self, seq: u64, v: Verdict) -> bool {
        let (probe, person, _, claimed) = self.pair(seq);
        let want = lbp::chi_square(&self.probes[probe], &self.refs[claimed as usize - 1]);
        if (v.distance - want).abs() > DISTANCE_TOLERANCE * want.max(1.0) {
            return false;
        }
        self.accuracy.record(v.same == (person == claimed));
        true
    }
}

impl Workload for FaceverWorkload {
    fn service(&self) -> u16 {
        super::ID
    }
    fn service_name(&self) -> &'static str {
        "facever"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        let (_, person, image, claimed) = self.pair(seq);
        super::encode_request(claimed, self.faces.image(person, image), out);
    }
    fn json(&self, seq: u64) -> Value {
        let (_, person, image, claimed) = self.pair(seq);
        serde_json::json!({ "person": claimed, "image": self.faces.image(person, image) })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        Verdict::decode(payload).is_some_and(|v| self.matches(seq, v))
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        let f = |k: &str| v.get(k).and_then(Value::as_f64).map(|x| x as f32);
        match (
            v.get("match").and_then(Value::as_bool),
            f("distance"),
            f("threshold"),
        ) {
            (Some(same), Some(d), Some(t)) => {
                let verdict = Verdict::of(d, t);
                verdict.same == same && self.matches(seq, verdict)
            }
            _ => false,
        }
    }
    /// The share of right verdicts among the answers checked.
    fn extra(&self) -> serde_json::Map<String, Value> {
        self.accuracy.extra()
    }
    fn reset(&self) {
        self.accuracy.reset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_alternate_genuine_and_impostor_over_every_probe() {
        let w = FaceverWorkload::new(orl::embedded());
        let mut claimed_others = std::collections::HashSet::new();
        for seq in 0..2000u64 {
            let (probe, person, image, claimed) = w.pair(seq);
            assert!(HELD_OUT.contains(&image) && probe < w.probes.len());
            assert_eq!(seq % 2 == 0, person == claimed, "seq {seq}");
            assert!((1..=10).contains(&claimed));
            if person == 1 && claimed != 1 {
                claimed_others.insert(claimed);
            }
        }
        assert_eq!(claimed_others.len(), 9, "every other person is claimed");
        // The CPU twin's own answers pass the check.
        let table = lbp::uniform_table();
        for seq in 0..50u64 {
            let (_, person, image, claimed) = w.pair(seq);
            let h = lbp::histogram(w.faces.image(person, image), &table);
            let d = lbp::chi_square(&h, &w.faces.reference(claimed, &table));
            let mut out = Vec::new();
            Verdict::of(d, 1000.0).encode(&mut out);
            assert!(w.check(seq, &out));
            let mut off = Vec::new();
            Verdict::of(d * 1.1 + 1.0, 1000.0).encode(&mut off);
            assert!(!w.check(seq, &off));
        }
    }
}
