//! Where the bank's records live (Rhythm's Besim placements): computed from the user id in
//! the serving process (the default: no set-up), a real memcached on the host (Titan A: one
//! get per backend call on the cpu engine, one multiget per cohort on the GPU path), or the
//! GPU's memory as a hash table (Titan B: `bank/gpu.rs`'s `RecordTable`). The stored
//! placements hold [`record`] blobs, loaded from the same computed records, so every
//! placement shows the same pages.

use super::record;
use rayon::prelude::*;
use std::collections::HashMap;

/// A backend placement, as `--bank-backend` names it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Placement {
    #[default]
    Computed,
    /// Hash tables in the GPU's memory (GPU engines only).
    Gpu,
    /// A memcached at HOST:PORT.
    Memcached(String),
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "computed" => Ok(Placement::Computed),
            "gpu" => Ok(Placement::Gpu),
            _ => match s.strip_prefix("memcached://") {
                Some(addr)
                    if addr.rsplit_once(':').is_some_and(|(h, p)| {
                        !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0)
                    }) =>
                {
                    Ok(Placement::Memcached(addr.to_string()))
                }
                _ => Err(format!(
                    "unknown bank backend {s:?} (computed, gpu, or memcached://HOST:PORT)"
                )),
            },
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::Computed => f.write_str("computed"),
            Placement::Gpu => f.write_str("gpu"),
            Placement::Memcached(a) => write!(f, "memcached://{a}"),
        }
    }
}

/// Users' records in a memcached: key `bank<BYTES>:<user>` (the layout's size in the key,
/// so a server never reads records of another layout), value the record blob.
pub struct Memcached {
    client: memcache::Client,
    addr: String,
}

/// Keys per piece of a multiget (pieces go out on parallel connections).
const MULTIGET_PIECE: usize = 512;
/// Records set per batch while loading (one progress step).
const LOAD_CHUNK: usize = 4096;

fn key(user: u32) -> String {
    format!("bank{}:{user}", record::BYTES)
}

fn loaded_key() -> String {
    format!("bank{}:users", record::BYTES)
}

impl Memcached {
    /// Connects with up to `connections` pooled connections (one per thread that calls).
    pub fn connect(addr: &str, connections: u32) -> Result<Memcached, String> {
        Ok(Memcached {
            client: cohort_service_api::memcached::connect(addr, connections)?,
            addr: addr.to_string(),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Stores the records of users 1..=users, unless this memcached already holds them
    /// (its marker names the same count), then checks a sample of them is there (a memcached
    /// with too little memory evicts records: an error now, not 503 pages later). Returns
    /// whether it loaded.
    pub fn load(&self, users: u32) -> Result<bool, String> {
        let fail = |e: memcache::MemcacheError| format!("loading memcached at {}: {e}", self.addr);
        let loaded = self.client.get::<u32>(&loaded_key()).map_err(fail)? != Some(users);
        if loaded {
            let t = std::time::Instant::now();
            self.store_all(users)?;
            tracing::info!(
                users,
                secs = t.elapsed().as_secs_f64(),
                "bank: records stored in memcached at {}",
                self.addr
            );
        }
        let mut sample: Vec<u32> = (1..=users)
            .step_by((users as usize / 1000).max(1))
            .chain([users])
            .collect();
        sample.dedup();
        let got = self.get_many(&sample)?;
        if got.len() < sample.len() {
            return Err(format!(
                "memcached at {} keeps only part of the records ({} of {} sampled): give it more memory (-m; {users} users need about {} MB)",
                self.addr,
                got.len(),
                sample.len(),
                users as usize * (record::BYTES + 100) / 1_000_000 + 64
            ));
        }
        Ok(loaded)
    }

    fn store_all(&self, users: u32) -> Result<(), String> {
        let fail = |e: memcache::MemcacheError| format!("loading memcached at {}: {e}", self.addr);
        let all: Vec<u32> = (1..=users).collect();
        all.par_chunks(LOAD_CHUNK).try_for_each(|chunk| {
            let mut blob = vec![0u8; record::BYTES];
            for &u in chunk {
                record::encode(u, &mut blob);
                self.client.set(&key(u), &blob[..], 0).map_err(fail)?;
            }
            Ok::<(), String>(())
        })?;
        // The marker last: a load cut short is redone.
        self.client.set(&loaded_key(), users, 0).map_err(fail)
    }

    /// The record of `user`; Err when memcached cannot be reached or the value is missing
    /// or not a record.
    pub fn get(&self, user: u32) -> Result<Vec<u8>, String> {
        match self.client.get::<Vec<u8>>(&key(user)) {
            Ok(Some(v)) if record::valid(&v) => Ok(v),
            Ok(Some(_)) => Err(format!("user {user}'s record is damaged")),
            Ok(None) => Err(format!("user {user}'s record is missing")),
            Err(e) => Err(format!("memcached at {}: {e}", self.addr)),
        }
    }

    /// Removes `user`'s record (an operator's repair, and the tests' missing record).
    pub fn remove(&self, user: u32) -> Result<bool, String> {
        self.client
            .delete(&key(user))
            .map_err(|e| format!("memcached at {}: {e}", self.addr))
    }

    /// The valid records of `users` (one multiget; duplicates asked once). Missing or
    /// damaged records are absent from the map; Err when memcached cannot be reached.
    pub fn get_many(&self, users: &[u32]) -> Result<HashMap<u32, Vec<u8>>, String> {
        let mut keys: Vec<(u32, String)> = users.iter().map(|&u| (u, key(u))).collect();
        keys.sort_unstable_by_key(|k| k.0);
        keys.dedup_by_key(|k| k.0);
        let names: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
        // Pieces of a large multiget on several pooled connections at once (memcached
        // serves each connection on one of its threads); one piece on this thread (a served
        // cohort is usually small: handing it to the pool costs two thread wake-ups).
        let fail = |e: memcache::MemcacheError| format!("memcached at {}: {e}", self.addr);
        let mut got: HashMap<String, Vec<u8>> = if names.len() <= MULTIGET_PIECE {
            self.client.gets::<Vec<u8>>(&names).map_err(fail)?
        } else {
            names
                .par_chunks(MULTIGET_PIECE)
                .map(|piece| self.client.gets::<Vec<u8>>(piece))
                .try_reduce(HashMap::new, |mut a, b| {
                    a.extend(b);
                    Ok(a)
                })
                .map_err(fail)?
        };
        Ok(keys
            .into_iter()
            .filter_map(|(u, k)| got.remove(&k).filter(|v| record::valid(v)).map(|v| (u, v)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_service_api::memcached::spawn_for_test;

    #[test]
    fn placements_parse_and_print() {
        for s in [
            "computed",
            "gpu",
            "memcached://127.0.0.1:11211",
            "memcached://mc:1",
        ] {
            assert_eq!(s.parse::<Placement>().unwrap().to_string(), s);
        }
        for bad in [
            "",
            "cpu",
            "memcached://",
            "memcached://host",
            "memcached://:11211",
            "memcached://h:0",
            "memcached://h:99999",
            "memcache://h:1",
        ] {
            assert!(bad.parse::<Placement>().is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unreachable_memcached_is_a_clear_error() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = Memcached::connect(&format!("127.0.0.1:{port}"), 1)
            .err()
            .expect("nothing listens there");
        assert!(e.contains("memcached at 127.0.0.1"), "{e}");
    }

    /// Loading, the marker that skips a second load, gets and multigets against a real
    /// memcached; a damaged value reads as missing.
    #[test]
    fn records_round_trip_through_a_real_memcached() {
        let Some(mut mc) = spawn_for_test(64) else {
            return;
        };
        let m = Memcached::connect(&mc.addr, 4).unwrap();
        assert!(m.load(3000).unwrap());
        assert!(!m.load(3000).unwrap(), "a second load is skipped");
        for u in [1, 2, 1500, 3000] {
            assert_eq!(m.get(u).unwrap(), record::of(u));
        }
        assert!(m.get(3001).unwrap_err().contains("missing"));
        let got = m.get_many(&[5, 7, 5, 9000, 3000]).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[&7], record::of(7));
        m.client.set(&key(8), &b"short"[..], 0).unwrap();
        assert!(m.get(8).unwrap_err().contains("damaged"));
        assert!(!m.get_many(&[8]).unwrap().contains_key(&8));
        mc.kill();
        assert!(m.get(1).is_err());
        assert!(m.get_many(&[1]).is_err());
    }

    /// A memcached too small for the records is a clear error at start-up, not 503 pages.
    #[test]
    fn a_memcached_too_small_for_the_records_is_refused() {
        let Some(mc) = spawn_for_test(2) else {
            return;
        };
        let m = Memcached::connect(&mc.addr, 4).unwrap();
        let e = m.load(20_000).unwrap_err();
        assert!(e.contains("more memory"), "{e}");
    }
}
