//! What keeps a front end's and a node's messages to each other honest: with a cluster key
//! (`--cluster-key FILE`, the same file on every node and front end) every message is sealed
//! (`cohort_proto::node_wire`: HMAC-SHA256 over it, a sender session, a sequence number and
//! the sender's clock) and the receiver refuses one that is altered, sealed under another key,
//! older than the clock window, or seen before; without a key messages travel plain and a
//! sealed one is refused (the two ends disagree). The secret never travels.

use crate::wire::{self, Batch, Seal};
use anyhow::{bail, Context as _};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The shared secret.
#[derive(Clone)]
pub struct ClusterKey(Arc<[u8]>);

/// Fewest bytes of secret accepted.
pub const MIN_KEY_BYTES: usize = 16;
/// How far a message's clock may be from the receiver's (machines' clocks differ a little).
pub const WINDOW_MS: u64 = 30_000;
/// Senders a receiver remembers within the window; past it, new senders are refused.
const MAX_SESSIONS: usize = 65_536;

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterKey({} bytes, not shown)", self.0.len())
    }
}

impl ClusterKey {
    /// The secret in `path`: hex (64 characters or more, as `openssl rand -hex 32` writes),
    /// else the file's bytes; surrounding whitespace ignored; at least 16 bytes.
    pub fn load(path: &Path) -> anyhow::Result<ClusterKey> {
        let raw = std::fs::read(path)
            .with_context(|| format!("--cluster-key {}: cannot read it", path.display()))?;
        let text = String::from_utf8_lossy(&raw);
        let trimmed = text.trim();
        let key: Vec<u8> = match hex(trimmed) {
            Some(k) if trimmed.len() >= 64 => k,
            _ => raw.trim_ascii().to_vec(),
        };
        if key.len() < MIN_KEY_BYTES {
            bail!(
                "--cluster-key {}: {} bytes of secret, want at least {MIN_KEY_BYTES} \
                 (for instance `openssl rand -hex 32 > {}`)",
                path.display(),
                key.len(),
                path.display()
            );
        }
        Ok(ClusterKey(key.into()))
    }

    pub fn from_bytes(k: &[u8]) -> ClusterKey {
        assert!(
            k.len() >= MIN_KEY_BYTES,
            "a cluster key of {} bytes",
            k.len()
        );
        ClusterKey(k.into())
    }
}

fn hex(t: &str) -> Option<Vec<u8>> {
    if !t.len().is_multiple_of(2) || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).ok())
        .collect()
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One thread's end of the links it holds (a front-end lane, a node's ingress): seals what it
/// sends, checks what it receives.
pub struct Link {
    key: Option<ClusterKey>,
    /// This sender's session (random) and its next sequence number.
    session: u64,
    seq: u64,
    /// Each sender's last sequence number and when it was last seen (ms).
    seen: HashMap<u64, (u64, u64)>,
}

impl Link {
    pub fn new(key: Option<ClusterKey>) -> Link {
        Link {
            key,
            session: rand::random(),
            seq: 0,
            seen: HashMap::new(),
        }
    }

    pub fn sealed(&self) -> bool {
        self.key.is_some()
    }

    /// A batch to fill and `take`.
    pub fn batch(&self, kind: u8) -> Batch {
        if self.sealed() {
            Batch::with_seal_room(kind)
        } else {
            Batch::new(kind)
        }
    }

    /// The message of `b` (sealed where there is a key), and a fresh batch in its place.
    pub fn take(&mut self, b: &mut Batch) -> Vec<u8> {
        let Some(key) = &self.key else {
            return b.take();
        };
        self.seq += 1;
        let seal = Seal {
            session: self.session,
            seq: self.seq,
            time_ms: unix_ms(),
        };
        b.take_sealed(&key.0, seal)
    }

    /// The plain message inside `msg`, or why it is refused.
    pub fn open<'a>(&mut self, msg: &'a [u8]) -> Result<&'a [u8], String> {
        self.open_at(msg, unix_ms())
    }

    fn open_at<'a>(&mut self, msg: &'a [u8], now: u64) -> Result<&'a [u8], String> {
        let Some(key) = &self.key else {
            if wire::is_sealed(msg) {
                return Err("a sealed message, and this end has no --cluster-key".into());
            }
            return Ok(msg);
        };
        if !wire::is_sealed(msg) {
            return Err("an unsealed message, and this end has a --cluster-key".into());
        }
        let (seal, inner) = wire::open(msg, &key.0).map_err(|e| e.to_string())?;
        if seal.time_ms.abs_diff(now) > WINDOW_MS {
            return Err(format!(
                "a message sealed {} ms from this machine's clock (the window is {WINDOW_MS} ms)",
                seal.time_ms as i64 - now as i64
            ));
        }
        if self.seen.len() >= MAX_SESSIONS && !self.seen.contains_key(&seal.session) {
            self.seen
                .retain(|_, &mut (_, at)| now.saturating_sub(at) <= WINDOW_MS);
            if self.seen.len() >= MAX_SESSIONS {
                return Err("too many senders within the clock window".into());
            }
        }
        let last = self.seen.entry(seal.session).or_insert((0, now));
        if seal.seq <= last.0 {
            return Err(format!(
                "a replayed message (sequence {} of a sender already at {})",
                seal.seq, last.0
            ));
        }
        *last = (seal.seq, now);
        Ok(inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Answer, ANSWERS};

    fn key(b: u8) -> Option<ClusterKey> {
        Some(ClusterKey::from_bytes(&[b; 32]))
    }

    fn message(link: &mut Link) -> Vec<u8> {
        let mut b = link.batch(ANSWERS);
        b.push_answer(&Answer {
            id: 1,
            status: 0,
            payload: b"hi",
        });
        link.take(&mut b)
    }

    #[test]
    fn sealed_messages_open_once_in_order_under_the_same_key() {
        let (mut tx, mut rx) = (Link::new(key(1)), Link::new(key(1)));
        let (m1, m2) = (message(&mut tx), message(&mut tx));
        assert!(rx.open(&m1).is_ok());
        assert!(rx.open(&m2).is_ok());
        assert!(rx.open(&m2).unwrap_err().contains("replayed"));
        assert!(rx.open(&m1).unwrap_err().contains("replayed"));
        // Another sender's own numbering is its own.
        let mut other = Link::new(key(1));
        assert!(rx.open(&message(&mut other)).is_ok());
    }

    #[test]
    fn another_key_no_key_and_stale_clocks_are_refused() {
        let mut tx = Link::new(key(1));
        let m = message(&mut tx);
        assert!(Link::new(key(2)).open(&m).unwrap_err().contains("seal"));
        assert!(Link::new(None)
            .open(&m)
            .unwrap_err()
            .contains("no --cluster-key"));
        let plain = message(&mut Link::new(None));
        assert!(Link::new(key(1))
            .open(&plain)
            .unwrap_err()
            .contains("unsealed"));
        assert_eq!(Link::new(None).open(&plain).unwrap(), &plain[..]);
        let now = unix_ms();
        let mut rx = Link::new(key(1));
        assert!(rx
            .open_at(&m, now + WINDOW_MS + 5_000)
            .unwrap_err()
            .contains("window"));
        assert!(rx
            .open_at(&m, now.saturating_sub(WINDOW_MS + 5_000))
            .is_err());
    }

    #[test]
    fn key_files_hex_or_bytes_and_short_ones_refused() {
        let dir = std::env::temp_dir().join(format!("cohort-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k");
        std::fs::write(&f, format!("{}\n", "ab".repeat(32))).unwrap();
        assert_eq!(&*ClusterKey::load(&f).unwrap().0, &[0xab; 32][..]);
        std::fs::write(&f, "a passphrase of some length\n").unwrap();
        assert_eq!(
            &*ClusterKey::load(&f).unwrap().0,
            b"a passphrase of some length"
        );
        std::fs::write(&f, "short").unwrap();
        assert!(format!("{:#}", ClusterKey::load(&f).err().unwrap()).contains("at least 16"));
        assert!(ClusterKey::load(&dir.join("absent")).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
