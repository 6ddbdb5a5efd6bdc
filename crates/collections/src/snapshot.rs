//! Snapshots: every live point of a collection and the sequence number of the last write they
//! hold, written whole or not at all (temporary file, fsync, rename, fsync of the directory)
//! and checked whole on load (a CRC32 over the file): a damaged snapshot is refused with an
//! error naming it, never served.
//!
//! ```text
//! "COHSNAP1" | settings JSON (len u32 + bytes) | last_seq u64 | count u64
//!            | count x (id u64 | vector in the element type | attributes) | crc32 u32
//! ```

use crate::codec::{Reader, Writer};
use crate::data::Data;
use crate::error::{Error, Kind, Result};
use crate::ops::{Op, Point};
use crate::schema::{AttrValue, Settings};
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"COHSNAP1";

/// The snapshot's bytes of `d` (read under the caller's read lock; written without it).
pub fn encode(d: &Data) -> Vec<u8> {
    let mut w = Writer::default();
    w.buf.extend_from_slice(MAGIC);
    w.bytes(&serde_json::to_vec(&d.settings).expect("settings serialise"));
    w.u64(d.last_seq);
    let live = d.live_slots();
    w.u64(live.len() as u64);
    for &s in &live {
        let s = s as usize;
        w.u64(d.ids[s]);
        w.vector(d.settings.element, d.row(s));
        w.attributes(&d.attributes_of(s));
    }
    let crc = crc32fast::hash(&w.buf);
    w.u32(crc);
    w.buf
}

/// A snapshot written a point at a time, for states never held in memory whole (an import,
/// `crate::import`): the same bytes `encode` gives, streamed to `dir/snapshot.tmp`, which
/// `finish` syncs and renames over `dir/snapshot` (then syncs `dir`). Dropped unfinished, it
/// leaves only the temporary file, never a snapshot.
pub struct Streamed {
    file: std::io::BufWriter<std::fs::File>,
    crc: crc32fast::Hasher,
    w: Writer,
    element: crate::schema::Element,
    dir: PathBuf,
    left: u64,
}

impl Streamed {
    /// Starts a snapshot of `count` points holding the writes up to `last_seq`.
    pub fn create(dir: &Path, settings: &Settings, last_seq: u64, count: u64) -> Result<Streamed> {
        let tmp = dir.join("snapshot.tmp");
        let file = std::fs::File::create(&tmp)
            .map_err(|e| Error::io(&format!("creating {}", tmp.display()), &e))?;
        let mut w = Writer::default();
        w.buf.extend_from_slice(MAGIC);
        w.bytes(&serde_json::to_vec(settings).expect("settings serialise"));
        w.u64(last_seq);
        w.u64(count);
        Ok(Streamed {
            file: std::io::BufWriter::with_capacity(1 << 20, file),
            crc: crc32fast::Hasher::new(),
            w,
            element: settings.element,
            dir: dir.to_path_buf(),
            left: count,
        })
    }

    fn flush_buf(&mut self) -> Result<()> {
        self.crc.update(&self.w.buf);
        let r = self.file.write_all(&self.w.buf);
        self.w.buf.clear();
        r.map_err(|e| Error::io(&format!("writing a snapshot in {}", self.dir.display()), &e))
    }

    /// One point: its vector as stored (checked for the element type by the caller) and its
    /// attributes in schema order.
    pub fn push(&mut self, id: u64, vector: &[f32], attrs: &[Option<AttrValue>]) -> Result<()> {
        if self.left == 0 {
            return Err(Error::internal(
                "a snapshot given more points than it announced",
            ));
        }
        self.left -= 1;
        self.w.u64(id);
        self.w.vector(self.element, vector);
        self.w.attributes(attrs);
        if self.w.buf.len() >= 1 << 20 {
            self.flush_buf()?;
        }
        Ok(())
    }

    /// Completes the file (checksum), syncs it and renames it into place.
    pub fn finish(mut self) -> Result<()> {
        if self.left != 0 {
            return Err(Error::internal(format!(
                "a snapshot {} points short of what it announced",
                self.left
            )));
        }
        self.flush_buf()?;
        let crc = std::mem::take(&mut self.crc).finalize();
        let target = self.dir.join("snapshot");
        let r = (|| -> std::io::Result<()> {
            self.file.write_all(&crc.to_le_bytes())?;
            let f = self.file.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            std::fs::rename(self.dir.join("snapshot.tmp"), &target)?;
            sync_dir(&self.dir)
        })();
        r.map_err(|e| Error::io(&format!("writing snapshot {}", target.display()), &e))
    }
}

/// Writes `bytes` as `dir/snapshot` atomically and durably.
pub fn write(dir: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join("snapshot.tmp");
    let target = dir.join("snapshot");
    let r = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)?;
        sync_dir(dir)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(
            &format!("writing snapshot {}", target.display()),
            &e,
        ));
    }
    Ok(())
}

/// fsync of a directory: makes a rename or a new entry in it durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Loads `dir/snapshot` into a fresh state for `settings` (None when there is none).
pub fn load(dir: &Path, name: &str, settings: &Settings) -> Result<Option<Data>> {
    let path = dir.join("snapshot");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::internal(format!("reading {}: {e}", path.display()))),
    };
    let corrupt = |why: String| {
        Error::new(
            Kind::Internal,
            format!(
                "collection {name}: snapshot {} is corrupt ({why}); refusing to serve it - \
                 restore the collection's directory from a backup, or remove it to drop the \
                 collection",
                path.display()
            ),
        )
    };
    if bytes.len() < MAGIC.len() + 4 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt("not a snapshot: bad magic or too short".into()));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    let want = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    if crc32fast::hash(body) != want {
        return Err(corrupt("checksum mismatch".into()));
    }
    let mut r = Reader::new(&body[MAGIC.len()..]);
    let parse = |r: &mut Reader<'_>| -> Result<Data> {
        let stored: Settings = serde_json::from_slice(r.bytes()?)
            .map_err(|e| Error::internal(format!("its settings: {e}")))?;
        if &stored != settings {
            return Err(Error::internal(format!(
                "its settings {stored:?} differ from settings.json's {settings:?}"
            )));
        }
        let mut d = Data::new(settings.clone());
        d.last_seq = r.u64()?;
        let n = r.u64()?;
        let mut batch = Vec::new();
        for _ in 0..n {
            let id = r.u64()?;
            let vector = r.vector(settings.element, settings.dim)?;
            let attrs = r.attributes(settings)?;
            batch.push(Point { id, vector, attrs });
            if batch.len() == 65_536 {
                d.apply(&Op::Upsert(std::mem::take(&mut batch)));
            }
        }
        d.apply(&Op::Upsert(batch));
        if !r.done() {
            return Err(Error::internal("bytes after the last point".to_string()));
        }
        Ok(d)
    };
    parse(&mut r).map(Some).map_err(|e| corrupt(e.message))
}
