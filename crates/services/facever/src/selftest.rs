//! facever's case for the engines' selftest (`crate::selftest`): every built-in face against
//! random persons' references, fresh random faces, a person memcached holds no reference for
//! and malformed requests, through every GPU engine and a real memcached this module starts
//! and fills, each answer compared with the CPU function's.

use super::db::FaceDb;
use super::gpu::DISTANCE_TOLERANCE;
use super::lbp::IMAGE_BYTES;
use super::{encode_request, orl, verify, Verdict, REQUEST_BYTES};
use cohort_service_api::checks::SelftestSettings;
use cohort_service_api::config::Settings;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Built-in people whose reference the setup deletes again: NOT_FOUND from every engine.
const REMOVED: u32 = 7;
/// A person never stored.
const UNKNOWN: u32 = 4321;

/// A memcached started and filled with the built-in faces (None where there is none: the
/// skip is logged by `spawn_for_test`, a failure when COHORT_REQUIRE_MEMCACHED=1).
pub fn setup() -> Result<Option<SelftestSettings>, String> {
    let Some(mc) = cohort_service_api::memcached::spawn_for_test(64) else {
        return Ok(None);
    };
    let faces = orl::embedded();
    let (train, _) = verify::evaluate(&faces);
    let db = FaceDb::connect(&mc.addr, 1)?;
    db.load(&faces, train.threshold)?;
    db.remove(REMOVED)?;
    let mut s = Settings::new();
    s.insert("memcached".into(), mc.addr.clone().into());
    Ok(Some((s, Box::new(mc))))
}

pub fn payloads(seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let faces = orl::embedded();
    let mut out = Vec::new();
    let mut push = |person: u32, image: &[u8]| {
        let mut p = Vec::with_capacity(REQUEST_BYTES);
        encode_request(person, image, &mut p);
        out.push(p);
    };
    for p in 1..=faces.people {
        for i in 0..orl::IMAGES_PER_PERSON {
            // Genuine and impostor pairs alike, the removed person among them.
            push(rng.gen_range(1..=faces.people), faces.image(p, i));
            push(p, faces.image(p, i));
        }
    }
    for _ in 0..100 {
        let image: Vec<u8> = (0..IMAGE_BYTES).map(|_| rng.gen()).collect();
        push(rng.gen_range(1..=faces.people), &image);
    }
    push(UNKNOWN, faces.image(1, 0));
    push(REMOVED, faces.image(REMOVED, 4));
    // Malformed: sizes around the right one, and person 0.
    for len in [0, 3, REQUEST_BYTES - 1, REQUEST_BYTES + 1] {
        out.push(vec![9; len]);
    }
    let mut zero = Vec::new();
    encode_request(0, faces.image(2, 2), &mut zero);
    out.push(zero);
    out.shuffle(&mut rng);
    out
}

/// The same verdict and threshold, the distance within [`DISTANCE_TOLERANCE`] (relative); the
/// verdict may differ only when the distance is that close to the threshold.
pub fn same_verdict(gpu: &[u8], cpu: &[u8]) -> Result<(), String> {
    let (Some(g), Some(c)) = (Verdict::decode(gpu), Verdict::decode(cpu)) else {
        return Err(format!("answers of {} and {} bytes", gpu.len(), cpu.len()));
    };
    let tol = DISTANCE_TOLERANCE * c.distance.max(1.0);
    let close = (g.distance - c.distance).abs() <= tol;
    let edge = (c.distance - c.threshold).abs() <= tol;
    if !close || g.threshold != c.threshold || (g.same != c.same && !edge) {
        return Err(format!("GPU {g:?}, CPU {c:?}"));
    }
    Ok(())
}
