//! API keys (`cohort serve --auth-keys FILE`): which clients may call which services.
//!
//! The file is TOML, one `[[key]]` table per client:
//!
//! ```toml
//! [[key]]
//! id = "alice"                    # 1-16 printable ASCII bytes, sent in UDP/TCP frames
//! secret = "a long random string" # at least 16 bytes; HTTP sends it as the bearer token
//! services = ["knn", "echo"]      # omitted: every service
//! ```
//!
//! HTTP requests carry `Authorization: Bearer SECRET` (send it over TLS); UDP and TCP frames
//! carry an HMAC trailer (`cohort_proto::encode_signed`: the secret never travels, a captured
//! frame is refused again). `SIGHUP` reloads the file; a file that does not load leaves the
//! keys in force as they were (and says why).

use arc_swap::ArcSwap;
use cohort_proto::{split_signed, verify_signed, ErrorCode, ErrorPayload, Header, KEY_ID_LEN};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// How far a frame's clock may be from the server's.
const CLOCK_WINDOW_MS: u64 = 30_000;
/// Nonces remembered (per shard below): a frame seen again within the window is refused.
const REPLAY_SHARDS: usize = 16;
const REPLAY_PER_SHARD: usize = 1 << 16;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    #[serde(default)]
    key: Vec<KeyEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    id: String,
    secret: String,
    services: Option<Vec<String>>,
}

struct Key {
    id: String,
    secret: Vec<u8>,
    /// None: every service.
    services: Option<HashSet<u16>>,
}

impl Key {
    fn allows(&self, service: u16) -> bool {
        self.services.as_ref().is_none_or(|s| s.contains(&service))
    }
}

#[derive(Default)]
struct Keys {
    keys: Vec<Key>,
    by_id: HashMap<[u8; KEY_ID_LEN], usize>,
    /// SHA-256 of each secret: a bearer token is looked up by its hash, never compared
    /// byte by byte.
    by_token: HashMap<[u8; 32], usize>,
}

fn parse(text: &str, services: &HashMap<String, u16>) -> anyhow::Result<Keys> {
    let file: KeyFile = toml::from_str(text)?;
    let mut keys = Keys::default();
    for (i, e) in file.key.into_iter().enumerate() {
        let id = cohort_proto::key_id_bytes(&e.id).ok_or_else(|| {
            anyhow::anyhow!("key {:?}: an id is 1-16 printable ASCII bytes", e.id)
        })?;
        anyhow::ensure!(
            e.secret.len() >= 16,
            "key {:?}: the secret must be at least 16 bytes",
            e.id
        );
        let allowed = match e.services {
            None => None,
            Some(names) if names.iter().any(|n| n == "*") => None,
            Some(names) => Some(
                names
                    .iter()
                    .map(|n| {
                        services.get(n).copied().ok_or_else(|| {
                            let mut served: Vec<_> = services.keys().cloned().collect();
                            served.sort();
                            anyhow::anyhow!(
                                "key {:?}: no service {n:?} here (served: {})",
                                e.id,
                                served.join(", ")
                            )
                        })
                    })
                    .collect::<anyhow::Result<_>>()?,
            ),
        };
        anyhow::ensure!(
            keys.by_id.insert(id, i).is_none(),
            "key id {:?} appears twice",
            e.id
        );
        let token: [u8; 32] = Sha256::digest(e.secret.as_bytes()).into();
        anyhow::ensure!(
            keys.by_token.insert(token, i).is_none(),
            "key {:?}: its secret is another key's",
            e.id
        );
        keys.keys.push(Key {
            id: e.id,
            secret: e.secret.into_bytes(),
            services: allowed,
        });
    }
    anyhow::ensure!(!keys.keys.is_empty(), "no [[key]] in the file");
    Ok(keys)
}

/// Recently seen (key, nonce) pairs, forgotten once older than the clock window.
#[derive(Default)]
struct Seen {
    set: HashSet<(usize, u64)>,
    order: VecDeque<(u64, usize, u64)>,
}

pub struct Auth {
    path: PathBuf,
    services: HashMap<String, u16>,
    keys: ArcSwap<Keys>,
    seen: Vec<Mutex<Seen>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn refuse(code: ErrorCode, msg: &str) -> ErrorPayload {
    ErrorPayload::new(code, msg)
}

impl Auth {
    /// Loads the keys file; `services` maps the served services' names to their ids.
    pub fn load(path: &Path, services: HashMap<String, u16>) -> anyhow::Result<Auth> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading keys {}: {e}", path.display()))?;
        let keys = parse(&text, &services)
            .map_err(|e| anyhow::anyhow!("keys {}: {e:#}", path.display()))?;
        Ok(Auth {
            path: path.to_path_buf(),
            services,
            keys: ArcSwap::from_pointee(keys),
            seen: (0..REPLAY_SHARDS).map(|_| Mutex::default()).collect(),
        })
    }

    /// Reads the file again; on success the new keys are in force for the next request.
    pub fn reload(&self) -> anyhow::Result<usize> {
        let text = std::fs::read_to_string(&self.path)?;
        let keys = parse(&text, &self.services)?;
        let n = keys.keys.len();
        self.keys.store(Arc::new(keys));
        Ok(n)
    }

    pub fn key_count(&self) -> usize {
        self.keys.load().keys.len()
    }

    /// Checks an authenticated frame for `header.service`; returns the service payload (the
    /// trailer removed) and the key's id, or the error to answer.
    pub fn frame<'a>(
        &self,
        header: &Header,
        payload: &'a [u8],
    ) -> Result<(&'a [u8], [u8; KEY_ID_LEN]), ErrorPayload> {
        let Some((app, t)) = split_signed(header, payload) else {
            return Err(refuse(
                ErrorCode::Unauthorized,
                "this server needs an API key: sign the frame (docs/protocol.md, Authentication)",
            ));
        };
        let keys = self.keys.load();
        let Some(&k) = keys.by_id.get(&t.key_id) else {
            return Err(refuse(ErrorCode::Unauthorized, "unknown key"));
        };
        let key = &keys.keys[k];
        if !verify_signed(header, payload, &key.secret) {
            return Err(refuse(ErrorCode::Unauthorized, "bad signature"));
        }
        let now = now_ms();
        if t.time_ms.abs_diff(now) > CLOCK_WINDOW_MS {
            return Err(refuse(
                ErrorCode::Unauthorized,
                "the frame's time is more than 30 s from the server's clock",
            ));
        }
        if !key.allows(header.service) {
            return Err(refuse(
                ErrorCode::Forbidden,
                &format!("key {:?} may not call this service", key.id),
            ));
        }
        self.first_time(k, t.nonce, now)?;
        Ok((app, t.key_id))
    }

    /// Remembers (key, nonce); a pair seen within the clock window is a replay.
    fn first_time(&self, key: usize, nonce: u64, now: u64) -> Result<(), ErrorPayload> {
        let shard = (nonce as usize ^ key) % REPLAY_SHARDS;
        let mut seen = self.seen[shard].lock().expect("replay lock");
        while let Some(&(t, k, n)) = seen.order.front() {
            if now.saturating_sub(t) <= 2 * CLOCK_WINDOW_MS {
                break;
            }
            seen.order.pop_front();
            seen.set.remove(&(k, n));
        }
        if seen.set.contains(&(key, nonce)) {
            return Err(refuse(ErrorCode::Unauthorized, "replayed frame"));
        }
        if seen.order.len() >= REPLAY_PER_SHARD {
            return Err(refuse(
                ErrorCode::Overloaded,
                "too many signed frames in the replay window; try again",
            ));
        }
        seen.set.insert((key, nonce));
        seen.order.push_back((now, key, nonce));
        Ok(())
    }

    /// Checks an HTTP `Authorization: Bearer SECRET` header for `service` (None: any valid
    /// key will do, for `/metrics`); returns the key's id.
    pub fn bearer(
        &self,
        value: Option<&[u8]>,
        service: Option<u16>,
    ) -> Result<[u8; KEY_ID_LEN], ErrorPayload> {
        let token = value
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .ok_or_else(|| {
                refuse(
                    ErrorCode::Unauthorized,
                    "this server needs an API key: Authorization: Bearer KEY",
                )
            })?;
        let hash: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        let keys = self.keys.load();
        let key = keys
            .by_token
            .get(&hash)
            .map(|&i| &keys.keys[i])
            .ok_or_else(|| refuse(ErrorCode::Unauthorized, "unknown key"))?;
        match service {
            Some(s) if !key.allows(s) => Err(refuse(
                ErrorCode::Forbidden,
                &format!("key {:?} may not call this service", key.id),
            )),
            _ => Ok(cohort_proto::key_id_bytes(&key.id).expect("checked at load")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_proto::{encode_signed, key_id_bytes, Frame};

    fn services() -> HashMap<String, u16> {
        [("echo".to_string(), 1), ("knn".to_string(), 3)].into()
    }

    /// An `Auth` over a keys file of its own, removed when the test drops it.
    struct Keys(Auth);

    impl std::ops::Deref for Keys {
        type Target = Auth;
        fn deref(&self) -> &Auth {
            &self.0
        }
    }

    impl Drop for Keys {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0.path);
        }
    }

    fn auth(text: &str) -> Keys {
        // A file of its own per call: tests run in parallel and one rewrites its file.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("cohort-auth-{}-{n}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        Keys(Auth::load(&p, services()).unwrap())
    }

    const FILE: &str = "[[key]]\nid = \"alice\"\nsecret = \"alice-secret-0123\"\nservices = [\"echo\"]\n[[key]]\nid = \"bob\"\nsecret = \"bob-secret-456789\"\n";

    fn signed(service: u16, id: &str, secret: &str, time_ms: u64, nonce: u64) -> Vec<u8> {
        let mut f = Vec::new();
        let h = Header::request(service, 1, 0);
        let id = key_id_bytes(id).unwrap();
        encode_signed(h, b"hi", &id, secret.as_bytes(), time_ms, nonce, &mut f);
        f
    }

    fn check(a: &Auth, f: &[u8]) -> Result<Vec<u8>, ErrorCode> {
        let d = Frame::decode_datagram(f, 65_000).unwrap();
        a.frame(&d.header, d.payload)
            .map(|(p, _)| p.to_vec())
            .map_err(|e| e.code)
    }

    #[test]
    fn frames_are_checked_for_key_signature_time_service_and_replay() {
        let a = auth(FILE);
        let now = now_ms();
        assert_eq!(
            check(&a, &signed(1, "alice", "alice-secret-0123", now, 1)),
            Ok(b"hi".to_vec())
        );
        assert_eq!(
            check(&a, &signed(1, "alice", "alice-secret-0123", now, 1)),
            Err(ErrorCode::Unauthorized),
            "replay"
        );
        assert_eq!(
            check(&a, &signed(3, "alice", "alice-secret-0123", now, 2)),
            Err(ErrorCode::Forbidden)
        );
        assert_eq!(
            check(&a, &signed(3, "bob", "bob-secret-456789", now, 2)),
            Ok(b"hi".to_vec())
        );
        assert_eq!(
            check(&a, &signed(1, "alice", "wrong-secret-0123", now, 3)),
            Err(ErrorCode::Unauthorized)
        );
        assert_eq!(
            check(&a, &signed(1, "carol", "carol-secret-0123", now, 3)),
            Err(ErrorCode::Unauthorized)
        );
        assert_eq!(
            check(
                &a,
                &signed(1, "alice", "alice-secret-0123", now - 60_000, 4)
            ),
            Err(ErrorCode::Unauthorized)
        );
        let mut plain = Vec::new();
        cohort_proto::encode_frame(Header::request(1, 1, 2), b"hi", &mut plain);
        assert_eq!(check(&a, &plain), Err(ErrorCode::Unauthorized));
    }

    #[test]
    fn bearer_tokens_and_reload() {
        let a = auth(FILE);
        let v = |s: &'static str| s.as_bytes();
        assert!(a
            .bearer(Some(v("Bearer alice-secret-0123")), Some(1))
            .is_ok());
        assert_eq!(
            a.bearer(Some(v("Bearer alice-secret-0123")), Some(3))
                .unwrap_err()
                .code,
            ErrorCode::Forbidden
        );
        assert_eq!(
            a.bearer(Some(v("Bearer nope-nope-nope-nope")), None)
                .unwrap_err()
                .code,
            ErrorCode::Unauthorized
        );
        assert_eq!(
            a.bearer(None, None).unwrap_err().code,
            ErrorCode::Unauthorized
        );
        std::fs::write(
            &a.path,
            "[[key]]\nid = \"carol\"\nsecret = \"carol-secret-0123\"\n",
        )
        .unwrap();
        assert_eq!(a.reload().unwrap(), 1);
        assert!(a
            .bearer(Some(v("Bearer carol-secret-0123")), Some(3))
            .is_ok());
        assert!(a
            .bearer(Some(v("Bearer alice-secret-0123")), Some(1))
            .is_err());
        std::fs::write(&a.path, "[[key]]\nid = \"x\"\nsecret = \"short\"\n").unwrap();
        assert!(a.reload().is_err(), "a bad file is refused");
        assert!(
            a.bearer(Some(v("Bearer carol-secret-0123")), Some(3))
                .is_ok(),
            "old keys stay"
        );
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let s = services();
        let err = |t: &str| parse(t, &s).err().unwrap().to_string();
        assert!(err("[[key]]\nid = \"a\"\nsecret = \"x\"\n").contains("at least 16"));
        assert!(
            err("[[key]]\nid = \"a\"\nsecret = \"0123456789abcdef\"\nservices = [\"nope\"]\n")
                .contains("no service \"nope\"")
        );
        assert!(err("").contains("no [[key]]"));
        assert!(
            err("[[key]]\nid = \"a\"\nsecret = \"0123456789abcdef\"\nextra = 1\n")
                .contains("unknown field")
        );
    }
}
