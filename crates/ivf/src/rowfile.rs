//! Vector files too large for memory, a run of rows at a time: `RowReader` reads any rows of an
//! `.fvecs` / `.bvecs` file with positioned reads (the file is never mapped whole, so the
//! process holds only the rows it asked for), and `FvecsAppender` writes one a chunk at a time
//! into a temporary renamed over the target when finished (`atomic_file`).

use crate::vecfile::{decode_records, texmex_dims, Elem, Vectors};
use anyhow::{bail, ensure, Context, Result};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// An `.fvecs` (f32) or `.bvecs` (u8, widened) file read by rows.
pub struct RowReader {
    file: File,
    what: String,
    elem: Elem,
    pub n: usize,
    pub dim: usize,
}

impl RowReader {
    pub fn open(path: &Path) -> Result<RowReader> {
        let what = path.display().to_string();
        let elem = match path.extension().and_then(|e| e.to_str()) {
            Some("fvecs") => Elem::F32,
            Some("bvecs") => Elem::U8,
            _ => bail!("{what}: a streamed read takes .fvecs or .bvecs"),
        };
        let file = File::open(path).with_context(|| format!("opening {what}"))?;
        let len = file.metadata()?.len() as usize;
        let mut first = [0u8; 4];
        let got = file.read_at(&mut first, 0)?;
        let (n, dim) = texmex_dims(&first[..got], len, elem, &what)?;
        Ok(RowReader {
            file,
            what,
            elem,
            n,
            dim,
        })
    }

    /// Rows `start..start + count`, every record's dimension field checked.
    pub fn rows(&self, start: usize, count: usize) -> Result<Vectors> {
        ensure!(
            start + count <= self.n,
            "{}: rows {start}..{} past its {}",
            self.what,
            start + count,
            self.n
        );
        let rec = 4 + self.dim * self.elem.size();
        let mut raw = vec![0u8; count * rec];
        self.file
            .read_exact_at(&mut raw, (start * rec) as u64)
            .with_context(|| format!("reading {}", self.what))?;
        let mut data = Vec::with_capacity(count * self.dim);
        decode_records(&raw, self.dim, self.elem, start, &self.what, &mut data)?;
        Ok(Vectors::new(self.dim, data))
    }

    /// About `want` rows spread over the whole file, in runs of up to `run` consecutive rows
    /// at evenly spaced starts (a training sample that does not read the file: a run is one
    /// read, and rows stored in some order are still drawn from all of it).
    pub fn spread_sample(&self, want: usize, run: usize) -> Result<Vectors> {
        let want = want.min(self.n);
        if want == self.n {
            return self.rows(0, self.n);
        }
        let run = run.clamp(1, want);
        let runs = want.div_ceil(run);
        let mut data = Vec::with_capacity(want * self.dim);
        let mut taken = 0;
        for r in 0..runs {
            let start = r * (self.n - run) / runs.max(2).saturating_sub(1).max(1);
            let count = run.min(want - taken);
            data.extend(self.rows(start.min(self.n - count), count)?.data);
            taken += count;
        }
        Ok(Vectors::new(self.dim, data))
    }
}

/// An `.fvecs` file written a chunk of rows at a time; nothing is at the target until
/// `finish` renames the synced temporary over it.
pub struct FvecsAppender {
    tmp: crate::atomic_file::Temp,
    w: std::io::BufWriter<File>,
    dim: usize,
    pub n: usize,
}

impl FvecsAppender {
    pub fn create(path: &Path, dim: usize) -> Result<FvecsAppender> {
        let tmp = crate::atomic_file::Temp::new(path);
        let f = File::create(tmp.path())
            .with_context(|| format!("creating {}", tmp.path().display()))?;
        Ok(FvecsAppender {
            tmp,
            w: std::io::BufWriter::with_capacity(4 << 20, f),
            dim,
            n: 0,
        })
    }

    pub fn append(&mut self, v: &Vectors) -> Result<()> {
        ensure!(
            v.dim == self.dim,
            "rows of dimension {} into a file of {}",
            v.dim,
            self.dim
        );
        let mut rec = Vec::with_capacity(4 + 4 * self.dim);
        for row in v.data.chunks_exact(self.dim) {
            rec.clear();
            rec.extend((self.dim as i32).to_le_bytes());
            rec.extend(row.iter().flat_map(|x| x.to_le_bytes()));
            self.w.write_all(&rec)?;
        }
        self.n += v.n;
        Ok(())
    }

    pub fn finish(mut self, path: &Path) -> Result<()> {
        self.w.flush()?;
        self.w.get_ref().sync_all()?;
        self.tmp
            .commit(path)
            .with_context(|| format!("renaming to {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("cohort-rowfile-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn rows_appended_in_chunks_read_back_as_written_whole() {
        let d = scratch("roundtrip");
        let all = Vectors::new(3, (0..3 * 1000).map(|x| x as f32 * 0.5).collect());
        let p = d.join("b.fvecs");
        let mut w = FvecsAppender::create(&p, 3).unwrap();
        for c in all.data.chunks(3 * 128) {
            w.append(&Vectors::new(3, c.to_vec())).unwrap();
        }
        assert!(!p.exists(), "nothing at the target before finish");
        w.finish(&p).unwrap();
        assert_eq!(crate::vecfile::read_vectors(&p).unwrap(), all);
        let r = RowReader::open(&p).unwrap();
        assert_eq!((r.n, r.dim), (1000, 3));
        assert_eq!(r.rows(10, 5).unwrap().data, all.data[30..45]);
        let s = r.spread_sample(100, 10).unwrap();
        assert_eq!(s.n, 100);
        // Runs from the start and the end of the file are both drawn.
        assert_eq!(s.row(0), all.row(0));
        assert_eq!(s.row(99), all.row(999));
        assert_eq!(r.spread_sample(5000, 64).unwrap(), all);
        assert!(r.rows(995, 10).is_err());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_record_of_another_dimension_is_named() {
        let d = scratch("baddim");
        let p = d.join("b.fvecs");
        let mut raw = Vec::new();
        for dim in [2i32, 2, 3] {
            raw.extend(dim.to_le_bytes());
            raw.extend([0u8; 8]);
        }
        // Three 12-byte records, the last claiming dimension 3.
        std::fs::write(&p, &raw).unwrap();
        let r = RowReader::open(&p).unwrap();
        let e = r.rows(0, 3).unwrap_err().to_string();
        assert!(e.contains("record 2 has dimension 3"), "{e}");
        std::fs::write(&p, &raw[..10]).unwrap();
        assert!(RowReader::open(&p).is_err());
        std::fs::remove_dir_all(d).unwrap();
    }
}
