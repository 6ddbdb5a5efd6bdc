//! A collection's write-ahead log. One log record per commit group (the writes of every
//! writer that shared one fsync), so a group is on disk whole or not at all:
//!
//! ```text
//! record  = magic u32 ("CWAL") | len u32 | crc32 u32 (of the body) | body
//! body    = first_seq u64 | count u32 | count x (len u32 | write)
//! ```
//!
//! A record is appended with one `write` and made durable with `fdatasync` before any write
//! in it is acknowledged. On open, the records are read back and checked: a bad record
//! (short, wrong magic, wrong CRC) with no whole record after it is a torn tail - a crash in
//! the middle of an append, whose writes were never acknowledged - and the log is cut there
//! with a warning; a bad record *followed* by a whole one means acknowledged data was
//! damaged, and the log is refused with an error (a record is only written after the one
//! before it was synced).

use crate::error::{Error, Kind, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

const MAGIC: u32 = u32::from_le_bytes(*b"CWAL");
const HEAD: usize = 12;
/// Largest record body accepted on read (a length beyond it is damage, not a record).
const MAX_RECORD: usize = 1 << 31;

pub struct Wal {
    file: File,
    /// Bytes of whole, synced records.
    len: u64,
    /// Set when a sync failed: what reached the disk is then unknown (Linux may drop the
    /// dirty pages and report the error once), so no later write may be acknowledged.
    poisoned: Option<String>,
}

/// What reading a log found.
#[derive(Debug)]
pub struct Replay {
    /// (sequence number, write) of every whole record, in order.
    pub writes: Vec<(u64, Vec<u8>)>,
    /// Bytes of whole records.
    pub good_len: u64,
    /// Bytes cut from a torn tail (0: none).
    pub torn: u64,
}

/// Parses a log's bytes (see the module's text for what is cut and what is refused).
pub fn parse(bytes: &[u8]) -> Result<Replay> {
    let mut writes = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        match record_at(bytes, at) {
            Some((body, next)) => {
                decode_body(body, &mut writes).map_err(|e| {
                    Error::new(
                        Kind::Internal,
                        format!(
                            "log record at byte {at} passed its checksum but is malformed: {}",
                            e.message
                        ),
                    )
                })?;
                at = next;
            }
            None => {
                // Torn tail or damage? A whole record further on says damage.
                let later = (at + 1..bytes.len().saturating_sub(HEAD - 1))
                    .find(|&p| record_at(bytes, p).is_some());
                if let Some(p) = later {
                    return Err(Error::new(
                        Kind::Internal,
                        format!(
                            "log damaged at byte {at}: a bad record followed by a whole one at \
                             byte {p}; acknowledged writes may be lost, so it is not served \
                             (restore the collection's directory from a backup)"
                        ),
                    ));
                }
                return Ok(Replay {
                    writes,
                    good_len: at as u64,
                    torn: (bytes.len() - at) as u64,
                });
            }
        }
    }
    Ok(Replay {
        writes,
        good_len: at as u64,
        torn: 0,
    })
}

/// The body of a whole record starting at `at`, and where the next one starts.
fn record_at(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let head = bytes.get(at..at + HEAD)?;
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    if word(0) != MAGIC {
        return None;
    }
    let len = word(4) as usize;
    if len > MAX_RECORD {
        return None;
    }
    let body = bytes.get(at + HEAD..at + HEAD + len)?;
    (crc32fast::hash(body) == word(8)).then_some((body, at + HEAD + len))
}

fn decode_body(body: &[u8], out: &mut Vec<(u64, Vec<u8>)>) -> Result<()> {
    let mut r = crate::codec::Reader::new(body);
    let first = r.u64()?;
    let n = r.u32()? as u64;
    for i in 0..n {
        out.push((first + i, r.bytes()?.to_vec()));
    }
    if !r.done() {
        return Err(Error::internal("bytes after the last write"));
    }
    Ok(())
}

/// One record's bytes for `writes` numbered from `first_seq`.
pub fn encode(first_seq: u64, writes: &[&[u8]]) -> Vec<u8> {
    let mut w = crate::codec::Writer::default();
    w.u64(first_seq);
    w.u32(writes.len() as u32);
    for b in writes {
        w.bytes(b);
    }
    let body = w.buf;
    let mut out = Vec::with_capacity(HEAD + body.len());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

impl Wal {
    /// Opens (creating) the log at `path`, reads it back, and cuts a torn tail (said in a
    /// warning naming `what`).
    pub fn open(path: &Path, what: &str) -> Result<(Wal, Replay)> {
        let io = |e: std::io::Error| Error::internal(format!("log {}: {e}", path.display()));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let replay = parse(&bytes).map_err(|e| {
            Error::new(
                e.kind,
                format!("collection {what}: log {}: {}", path.display(), e.message),
            )
        })?;
        if replay.torn > 0 {
            tracing::warn!(
                collection = what,
                log = %path.display(),
                cut_bytes = replay.torn,
                kept_bytes = replay.good_len,
                "torn log tail cut at the last whole record (a write interrupted by a crash, never acknowledged)"
            );
            file.set_len(replay.good_len).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        let mut wal = Wal::from_file(file);
        wal.len = replay.good_len;
        Ok((wal, replay))
    }

    /// A log over an open file, assumed empty (tests give it /dev/full).
    pub fn from_file(file: File) -> Wal {
        Wal {
            file,
            len: 0,
            poisoned: None,
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Appends one record and syncs it. A failed write (a full disk) is cut off again and the
    /// log stays usable; a failed sync poisons it (see `poisoned`).
    pub fn append(&mut self, record: &[u8]) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(Error::new(Kind::Unavailable, why.clone()));
        }
        let wrote = self
            .file
            .seek(SeekFrom::Start(self.len))
            .and_then(|_| self.file.write_all(record));
        if let Err(e) = wrote {
            // Nothing was acknowledged from this record; take it back so that a later append
            // does not land behind half of it.
            if let Err(t) = self.file.set_len(self.len) {
                self.poisoned = Some(format!(
                    "the log could not be cut back after a failed write ({e}): {t}; writes are \
                     refused until restart"
                ));
            }
            return Err(Error::io("writing the log", &e));
        }
        if let Err(e) = self.file.sync_data() {
            self.poisoned = Some(format!(
                "syncing the log failed ({e}); what reached the disk is unknown, so writes are \
                 refused until restart (searches go on)"
            ));
            return Err(Error::io("syncing the log", &e));
        }
        self.len += record.len() as u64;
        Ok(())
    }

    /// Empties the log (after a snapshot holding every write in it was made durable).
    pub fn reset(&mut self) -> Result<()> {
        if let Err(e) = self.file.set_len(0) {
            return Err(Error::io("emptying the log after a snapshot", &e));
        }
        // Emptied: later records go at 0 even if the sync below fails (the records cut are
        // all in the snapshot, and replay skips them by sequence number should they return).
        self.len = 0;
        if let Err(e) = self.file.sync_all() {
            return Err(Error::io("syncing the emptied log", &e));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "wal_tests.rs"]
mod tests;
