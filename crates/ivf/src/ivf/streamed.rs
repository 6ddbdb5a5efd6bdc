//! An index built from a base file larger than memory, in host memory bounded by the training
//! sample and one chunk of rows, never by the base (`cohort index build --stream`):
//!
//! 1. the quantizer is trained on a sample spread over the file (`RowReader::spread_sample`);
//! 2. pass one reads the base a chunk at a time, assigns each row its list and appends the
//!    assignments to a temporary file beside the output (`STEM-assignments.tmp.PID`, 4 bytes
//!    a row), counting each list;
//! 3. the list offsets follow from the counts; the output (a temporary of the index's final
//!    size) gets its header, centroids and offsets;
//! 4. pass two reads the base and its assignments again a chunk at a time, orders each chunk's
//!    rows by list (stable, so ids stay ascending within a list as in the in-memory build) and
//!    writes each list's run of the chunk with one positioned write of vectors and one of ids;
//! 5. the whole file is read back once for its checksum, which goes into the header; the
//!    temporary is synced and renamed over the output.
//!
//! The result is byte for byte the index `IvfIndex::build_with` writes from the same
//! centroids: the same format, loaded (memory-mapped) the same way.

use super::format::{header, Layout, CHECKSUM_AT};
use crate::assign::Assigner;
use crate::kmeans::{self, KMeansConfig};
use crate::metric::Metric;
use crate::rowfile::RowReader;
use crate::vecfile::Vectors;
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// What a streamed build did, phase by phase.
#[derive(Debug, Clone)]
pub struct StreamedBuild {
    pub n: usize,
    pub dim: usize,
    pub nlist: usize,
    pub sample_rows: usize,
    pub chunk_rows: usize,
    /// The most bytes of rows and assignments held at once (the sample, or one chunk).
    pub peak_row_bytes: usize,
    pub train_s: f64,
    pub assign_s: f64,
    pub write_s: f64,
    pub checksum_s: f64,
    pub file_bytes: usize,
}

/// What to build.
#[derive(Debug, Clone)]
pub struct StreamPlan {
    pub nlist: usize,
    pub metric: Metric,
    /// `km.max_sample` rows train the quantizer.
    pub km: KMeansConfig,
    /// nprobe served when a request asks for 0 (None: `default_nprobe(nlist)`).
    pub default_nprobe: Option<usize>,
    /// Rows read at a time.
    pub chunk_rows: usize,
}

/// Streams `base` into an index at `out` (module doc); `progress` is told each pass's
/// ("assigned" / "written") rows so far and the total.
pub fn build_streamed(
    base: &RowReader,
    plan: &StreamPlan,
    assigner: &mut dyn Assigner,
    out: &Path,
    progress: &dyn Fn(&str, usize, usize),
) -> Result<StreamedBuild> {
    let StreamPlan {
        nlist,
        metric,
        ref km,
        chunk_rows,
        ..
    } = *plan;
    let (n, dim) = (base.n, base.dim);
    let nprobe = plan.default_nprobe.unwrap_or(super::default_nprobe(nlist));
    ensure!(
        nprobe >= 1 && nprobe <= nlist,
        "the default nprobe must be in 1..=nlist"
    );
    ensure!(
        nlist >= 1 && nlist <= n,
        "--nlist must be between 1 and {n} (the base size)"
    );
    ensure!(
        n <= u32::MAX as usize,
        "ids are u32: at most {} vectors",
        u32::MAX
    );
    ensure!(chunk_rows >= 1, "a chunk holds at least one row");
    let layout = Layout::unplaced(dim, nlist, n).context("index too large")?;

    // 1. The quantizer.
    let t = Instant::now();
    let sample = base.spread_sample(km.max_sample.max(nlist), 4096)?;
    let centroids = kmeans::train_with(
        &sample,
        &KMeansConfig {
            k: nlist,
            max_sample: sample.n,
            ..km.clone()
        },
        assigner,
    )?;
    let (sample_rows, sample_bytes) = (sample.n, sample.data.len() * 4);
    drop(sample);
    let train_s = t.elapsed().as_secs_f64();

    // 2. Assignments, counted per list.
    let t = Instant::now();
    // (A name of its own: the output's temporary is `STEM.tmp.PID`.)
    let stem = out.file_stem().and_then(|s| s.to_str()).unwrap_or("index");
    let assigned =
        crate::atomic_file::Temp::new(&out.with_file_name(format!("{stem}-assignments.bin")));
    let afile = read_write(assigned.path())
        .with_context(|| format!("creating {}", assigned.path().display()))?;
    let mut counts = vec![0u64; nlist];
    for start in (0..n).step_by(chunk_rows) {
        let rows = base.rows(start, chunk_rows.min(n - start))?;
        let a = assigner.assign(&rows, &centroids, metric)?;
        ensure!(
            a.len() == rows.n,
            "the assigner answered {} of {} rows",
            a.len(),
            rows.n
        );
        for &l in &a {
            ensure!(
                (l as usize) < nlist,
                "the assigner named list {l} of {nlist}"
            );
            counts[l as usize] += 1;
        }
        let bytes: Vec<u8> = a.iter().flat_map(|x| x.to_le_bytes()).collect();
        afile.write_all_at(&bytes, (start * 4) as u64)?;
        progress("assigned", start + rows.n, n);
    }
    let assign_s = t.elapsed().as_secs_f64();

    // 3. Offsets; the output's fixed sections.
    let t = Instant::now();
    let mut offsets = vec![0u64; nlist + 1];
    for l in 0..nlist {
        offsets[l + 1] = offsets[l] + counts[l];
    }
    let tmp = crate::atomic_file::Temp::new(out);
    let f = read_write(tmp.path()).with_context(|| format!("creating {}", tmp.path().display()))?;
    f.set_len(layout.total() as u64)?;
    let h = header(metric, dim, nlist, n, nprobe, 0);
    f.write_all_at(&h, 0)?;
    let le = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    f.write_all_at(&le(&centroids.data), layout.centroids_at() as u64)?;
    let off_bytes: Vec<u8> = offsets.iter().flat_map(|x| x.to_le_bytes()).collect();
    f.write_all_at(&off_bytes, layout.offsets_at() as u64)?;

    // 4. Every chunk's rows into their lists' next slots.
    let mut cursor: Vec<u64> = offsets[..nlist].to_vec();
    let mut abytes = Vec::new();
    for start in (0..n).step_by(chunk_rows) {
        let rows = base.rows(start, chunk_rows.min(n - start))?;
        abytes.resize(rows.n * 4, 0);
        afile.read_exact_at(&mut abytes, (start * 4) as u64)?;
        let a: Vec<u32> = abytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
            .collect();
        write_chunk(&f, &layout, dim, start, &rows, &a, &mut cursor)?;
        progress("written", start + rows.n, n);
    }
    debug_assert!(cursor.iter().zip(&offsets[1..]).all(|(c, o)| c == o));
    drop(afile);
    drop(assigned); // the assignments' temporary is removed
    let write_s = t.elapsed().as_secs_f64();

    // 5. The checksum of the whole file, its own field read as zero.
    let t = Instant::now();
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 8 << 20];
    let mut at = 0usize;
    while at < layout.total() {
        let len = buf.len().min(layout.total() - at);
        f.read_exact_at(&mut buf[..len], at as u64)?;
        crc.update(&buf[..len]);
        at += len;
    }
    f.write_all_at(&crc.finalize().to_le_bytes(), CHECKSUM_AT as u64)?;
    f.sync_all()?;
    drop(f);
    tmp.commit(out)
        .with_context(|| format!("renaming to {}", out.display()))?;
    Ok(StreamedBuild {
        n,
        dim,
        nlist,
        sample_rows,
        chunk_rows,
        peak_row_bytes: sample_bytes.max(chunk_rows.min(n) * dim * 4 * 2),
        train_s,
        assign_s,
        write_s,
        checksum_s: t.elapsed().as_secs_f64(),
        file_bytes: layout.total(),
    })
}

/// A new file, read back as it is written.
fn read_write(p: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(p)
}

/// One chunk (rows `start..`, their lists `a`) into the file: ordered by list (stable), each
/// list's run written at its cursor with one write of vectors and one of ids.
fn write_chunk(
    f: &File,
    layout: &Layout,
    dim: usize,
    start: usize,
    rows: &Vectors,
    a: &[u32],
    cursor: &mut [u64],
) -> Result<()> {
    let mut order: Vec<u32> = (0..rows.n as u32).collect();
    order.sort_by_key(|&i| a[i as usize]); // stable: ascending ids within a list
    let mut vbuf: Vec<u8> = Vec::new();
    let mut ibuf: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let l = a[order[i] as usize] as usize;
        let mut j = i;
        vbuf.clear();
        ibuf.clear();
        while j < order.len() && a[order[j] as usize] as usize == l {
            let r = order[j] as usize;
            vbuf.extend(rows.row(r).iter().flat_map(|x| x.to_le_bytes()));
            ibuf.extend(((start + r) as u32).to_le_bytes());
            j += 1;
        }
        let slot = cursor[l] as usize;
        f.write_all_at(&vbuf, (layout.vectors_at() + slot * dim * 4) as u64)?;
        f.write_all_at(&ibuf, (layout.ids_at() + slot * 4) as u64)?;
        cursor[l] += (j - i) as u64;
        i = j;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assign::CpuGemm;
    use crate::rowfile::FvecsAppender;
    use crate::IvfIndex;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("cohort-streamed-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn base_file(d: &Path, n: usize, dim: usize) -> (std::path::PathBuf, Vectors) {
        let model = crate::synth::Model::new(crate::synth::SynthConfig::sift_like(dim, 7));
        let v = model.sample(n, 1);
        let p = d.join("base.fvecs");
        let mut w = FvecsAppender::create(&p, dim).unwrap();
        for c in v.data.chunks(dim * 997) {
            w.append(&Vectors::new(dim, c.to_vec())).unwrap();
        }
        w.finish(&p).unwrap();
        (p, v)
    }

    #[test]
    fn a_streamed_build_writes_the_in_memory_builds_file() {
        let d = scratch("same");
        let (p, v) = base_file(&d, 5000, 16);
        let km = KMeansConfig {
            iters: 5,
            max_sample: 5000, // the whole base: both builds train on the same rows
            ..KMeansConfig::new(32)
        };
        let whole = IvfIndex::build_with(&v, 32, Metric::L2, &km, &mut CpuGemm).unwrap();
        whole.save(&d.join("whole.index")).unwrap();
        let r = RowReader::open(&p).unwrap();
        let plan = StreamPlan {
            nlist: 32,
            metric: Metric::L2,
            km,
            default_nprobe: None,
            chunk_rows: 700,
        };
        let s = build_streamed(&r, &plan, &mut CpuGemm, &d.join("s.index"), &|_, _, _| {}).unwrap();
        assert_eq!((s.n, s.dim, s.nlist), (5000, 16, 32));
        let a = std::fs::read(d.join("whole.index")).unwrap();
        let b = std::fs::read(d.join("s.index")).unwrap();
        assert_eq!(a.len(), b.len());
        assert!(
            a == b,
            "the streamed file differs from the in-memory build's"
        );
        // Nothing else is left beside the index (the assignments' temporary is gone).
        let mut names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["base.fvecs", "s.index", "whole.index"]);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_sampled_streamed_build_holds_every_row_once_in_its_nearest_list() {
        let d = scratch("sampled");
        let (p, v) = base_file(&d, 6000, 8);
        let km = KMeansConfig {
            iters: 4,
            max_sample: 1000,
            ..KMeansConfig::new(40)
        };
        let r = RowReader::open(&p).unwrap();
        let out = d.join("s.index");
        let plan = StreamPlan {
            nlist: 40,
            metric: Metric::L2,
            km,
            default_nprobe: Some(5),
            chunk_rows: 512,
        };
        let s = build_streamed(&r, &plan, &mut CpuGemm, &out, &|_, _, _| {}).unwrap();
        assert!(s.peak_row_bytes < v.data.len() * 4, "{s:?}");
        let ix = IvfIndex::load(&out).unwrap();
        assert_eq!(ix.default_nprobe, 5);
        let mut seen = vec![false; 6000];
        let c = Vectors::new(8, ix.centroids().to_vec());
        let mut lists = vec![0u32; 6000];
        for l in 0..ix.nlist {
            let (a, b) = ix.cell_range(l);
            let ids = &ix.ids()[a..b];
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "ids ascend within list {l}"
            );
            for (k, &id) in ids.iter().enumerate() {
                assert!(
                    !std::mem::replace(&mut seen[id as usize], true),
                    "row {id} twice"
                );
                assert_eq!(
                    &ix.vectors()[(a + k) * 8..(a + k + 1) * 8],
                    v.row(id as usize)
                );
                lists[id as usize] = l as u32;
            }
        }
        assert!(seen.iter().all(|&s| s));
        crate::assign::check(&v, &c, Metric::L2, &lists).unwrap();
        std::fs::remove_dir_all(d).unwrap();
    }
}
