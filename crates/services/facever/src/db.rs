//! The face database: every person's reference histogram in a real memcached (key
//! `facever<BINS>:<person>`, value [`lbp::BINS`] little-endian f32), and the verification
//! threshold chosen on the training pairs (key `facever<BINS>:threshold`). `cohort facever
//! load-db` fills it; the server reads it (the cpu engine one get per request, the
//! GPU engines per cohort: one get per request host-centric, one multiget GPU-centric).

use super::lbp::{self, Histogram, BINS};
use super::orl::Faces;
use std::collections::HashMap;

fn key(person: u32) -> String {
    format!("facever{BINS}:{person}")
}

fn threshold_key() -> String {
    format!("facever{BINS}:threshold")
}

/// A reference as stored.
pub fn encode(h: &[f32]) -> Vec<u8> {
    h.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A stored reference read back; None if the value is not one (damaged or another layout).
pub fn decode(v: &[u8]) -> Option<Histogram> {
    if v.len() != 4 * BINS {
        return None;
    }
    let h: Histogram = v
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    h.iter().all(|x| x.is_finite() && *x >= 0.0).then_some(h)
}

/// Why a reference could not be had.
#[derive(Debug, Clone, PartialEq)]
pub enum Miss {
    /// memcached answered: no such person (or a damaged value).
    NotFound,
    /// memcached could not be reached or failed.
    Unavailable(String),
}

pub struct FaceDb {
    client: memcache::Client,
    addr: String,
}

impl FaceDb {
    /// Connects with up to `connections` pooled connections.
    pub fn connect(addr: &str, connections: u32) -> Result<FaceDb, String> {
        Ok(FaceDb {
            client: cohort_service_api::memcached::connect(addr, connections)?,
            addr: addr.to_string(),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn fail(&self, e: memcache::MemcacheError) -> String {
        format!("memcached at {}: {e}", self.addr)
    }

    /// Stores every person's reference and `threshold` (the threshold last: a load cut
    /// short is not taken for a database).
    pub fn load(&self, faces: &Faces, threshold: f32) -> Result<(), String> {
        let table = lbp::uniform_table();
        for p in 1..=faces.people {
            let v = encode(&faces.reference(p, &table));
            self.client
                .set(&key(p), &v[..], 0)
                .map_err(|e| self.fail(e))?;
        }
        self.client
            .set(&threshold_key(), threshold.to_string().as_str(), 0)
            .map_err(|e| self.fail(e))
    }

    /// The threshold `load` stored; Err naming the tool when there is none.
    pub fn threshold(&self) -> Result<f32, String> {
        match self.client.get::<String>(&threshold_key()) {
            Ok(Some(s)) => s
                .parse::<f32>()
                .ok()
                .filter(|t| t.is_finite() && *t > 0.0)
                .ok_or_else(|| format!("memcached at {}: a damaged threshold {s:?}", self.addr)),
            Ok(None) => Err(format!(
                "memcached at {} holds no face database: fill it with `cohort facever load-db --memcached {}`",
                self.addr, self.addr
            )),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Person `person`'s reference (one get).
    pub fn get(&self, person: u32) -> Result<Histogram, Miss> {
        match self.client.get::<Vec<u8>>(&key(person)) {
            Ok(Some(v)) => decode(&v).ok_or(Miss::NotFound),
            Ok(None) => Err(Miss::NotFound),
            Err(e) => Err(Miss::Unavailable(self.fail(e))),
        }
    }

    /// The references of `persons` (one multiget; duplicates asked once). A person memcached
    /// does not hold is absent from the map; Err when memcached cannot be reached.
    pub fn get_many(&self, persons: &[u32]) -> Result<HashMap<u32, Histogram>, String> {
        let mut keys: Vec<(u32, String)> = persons.iter().map(|&p| (p, key(p))).collect();
        keys.sort_unstable_by_key(|k| k.0);
        keys.dedup_by_key(|k| k.0);
        let names: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
        let mut got = self
            .client
            .gets::<Vec<u8>>(&names)
            .map_err(|e| self.fail(e))?;
        Ok(keys
            .into_iter()
            .filter_map(|(p, k)| got.remove(&k).and_then(|v| decode(&v)).map(|h| (p, h)))
            .collect())
    }

    /// Removes a person's reference (the tests' missing person).
    pub fn remove(&self, person: u32) -> Result<bool, String> {
        self.client.delete(&key(person)).map_err(|e| self.fail(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_service_api::memcached::spawn_for_test;

    #[test]
    fn references_round_trip_and_damage_reads_as_missing() {
        let h: Histogram = (0..BINS).map(|i| i as f32 / 3.0).collect();
        assert_eq!(decode(&encode(&h)).unwrap(), h);
        assert!(decode(&encode(&h)[1..]).is_none());
        let mut bad = h.clone();
        bad[7] = f32::NAN;
        assert!(decode(&encode(&bad)).is_none());
    }

    /// Loading the built-in faces into a real memcached, reading them back one by one and
    /// many at once; a missing person, then memcached gone.
    #[test]
    fn the_database_lives_in_a_real_memcached() {
        let Some(mut mc) = spawn_for_test(16) else {
            return;
        };
        let db = FaceDb::connect(&mc.addr, 2).unwrap();
        assert!(db.threshold().unwrap_err().contains("load-db"));
        let faces = super::super::orl::embedded();
        db.load(&faces, 123.5).unwrap();
        assert_eq!(db.threshold().unwrap(), 123.5);
        let table = lbp::uniform_table();
        assert_eq!(db.get(4).unwrap(), faces.reference(4, &table));
        assert_eq!(db.get(11), Err(Miss::NotFound));
        let many = db.get_many(&[1, 3, 3, 99]).unwrap();
        assert_eq!(many.len(), 2);
        assert!(db.remove(3).unwrap());
        assert_eq!(db.get(3), Err(Miss::NotFound));
        mc.kill();
        assert!(matches!(db.get(1), Err(Miss::Unavailable(_))));
        assert!(db.get_many(&[1]).is_err());
    }
}
