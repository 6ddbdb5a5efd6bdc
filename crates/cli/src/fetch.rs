//! `cohort data fetch`: download a public TEXMEX archive (FTP, as the corpus is published),
//! resuming a partial download, verify its SHA-256, unpack it, check every file's shape, and
//! install the files as base/query/groundtruth/learn `.fvecs`/`.ivecs`.
//!
//! The corpus publishes no checksums. The first successful fetch records the archive's
//! SHA-256 in `DIR/SHA256SUMS`; later fetches into the same folder, and `--sha256`, are
//! verified against it. The shape check (counts and dimensions of the four files) catches
//! truncated or wrong archives either way.

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// sift1m or siftsmall.
    pub set: String,
    #[arg(long)]
    pub out: PathBuf,
    /// Source of the archive: ftp://HOST/PATH or file:///PATH (default: the TEXMEX corpus).
    #[arg(long)]
    pub url: Option<String>,
    /// Expected SHA-256 of the archive (hex).
    #[arg(long)]
    pub sha256: Option<String>,
}

/// Expected contents of a set: archive name, member prefix, and (n, dim) per file.
pub struct SetSpec {
    pub archive: &'static str,
    pub prefix: &'static str,
    pub base: (usize, usize),
    pub query: (usize, usize),
    pub groundtruth: (usize, usize),
    pub learn: (usize, usize),
}

pub fn spec(set: &str) -> Result<SetSpec> {
    Ok(match set {
        "sift1m" => SetSpec {
            archive: "sift.tar.gz",
            prefix: "sift",
            base: (1_000_000, 128),
            query: (10_000, 128),
            groundtruth: (10_000, 100),
            learn: (100_000, 128),
        },
        "siftsmall" => SetSpec {
            archive: "siftsmall.tar.gz",
            prefix: "siftsmall",
            base: (10_000, 128),
            query: (100, 128),
            groundtruth: (100, 100),
            learn: (25_000, 128),
        },
        other => bail!("unknown set {other:?} (sift1m, siftsmall)"),
    })
}

const CORPUS: &str = "ftp://ftp.irisa.fr/local/texmex/corpus";

/// Bytes of the remote archive from `offset` on, and its total size when known.
fn open_source(url: &str, offset: u64) -> Result<(Box<dyn Read>, Option<u64>)> {
    if let Some(path) = url.strip_prefix("file://") {
        let mut f = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
        let size = f.metadata()?.len();
        use std::io::Seek;
        f.seek(std::io::SeekFrom::Start(offset))?;
        return Ok((Box::new(f), Some(size)));
    }
    let Some(rest) = url.strip_prefix("ftp://") else {
        bail!("unsupported URL {url:?} (ftp:// or file://)");
    };
    let (host, path) = rest.split_once('/').context("ftp URL needs a path")?;
    let addr = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:21")
    };
    let mut ftp =
        suppaftp::FtpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
    ftp.login("anonymous", "anonymous@").context("ftp login")?;
    ftp.transfer_type(suppaftp::types::FileType::Binary)?;
    let size = ftp.size(path).ok().map(|s| s as u64);
    if offset > 0 {
        ftp.resume_transfer(offset as usize)
            .context("server refused to resume")?;
    }
    let stream = ftp
        .retr_as_stream(path)
        .with_context(|| format!("retrieving {path}"))?;
    // Keep the control connection alive as long as the data stream is read.
    struct Retr(Option<suppaftp::FtpStream>, Box<dyn Read>);
    impl Read for Retr {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.read(buf)?;
            if n == 0 {
                if let Some(mut f) = self.0.take() {
                    let _ = f.quit();
                }
            }
            Ok(n)
        }
    }
    Ok((Box::new(Retr(Some(ftp), Box::new(stream))), size))
}

/// Downloads `url` to `dest`, resuming from `dest.part` if an earlier attempt left one.
pub fn download(url: &str, dest: &Path) -> Result<()> {
    let part = dest.with_extension("part");
    let have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    let (mut src, size) = open_source(url, have)?;
    if let Some(total) = size {
        ensure!(
            have <= total,
            "partial file {} is larger than the archive; delete it",
            part.display()
        );
    }
    if have > 0 {
        eprintln!("resuming {} at byte {have}", part.display());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&part)?;
    let bar = progress(size, have);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = src
            .read(&mut buf)
            .context("download interrupted (run again to resume)")?;
        if n == 0 {
            break;
        }
        f.write_all(&buf[..n])?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    f.sync_all()?;
    let got = f.metadata()?.len();
    if let Some(total) = size {
        ensure!(
            got == total,
            "downloaded {got} of {total} bytes (run again to resume)"
        );
    }
    std::fs::rename(&part, dest)?;
    Ok(())
}

fn progress(size: Option<u64>, start: u64) -> indicatif::ProgressBar {
    let bar = match size {
        Some(t) => indicatif::ProgressBar::new(t),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bytes}/{total_bytes} {bar:30} {bytes_per_sec} eta {eta}",
        )
        .expect("static template"),
    );
    bar.set_position(start);
    bar
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Unpacks the four files of `spec` from a .tar.gz into `out`, checks their shapes, and
/// renames them into place (each file appears complete or not at all).
pub fn unpack_and_check(archive: &Path, s: &SetSpec, out: &Path) -> Result<()> {
    let result = unpack_staged(archive, s, out);
    // Whatever happened, no partial file stays behind.
    if let Ok(entries) = std::fs::read_dir(out) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".unpack.") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    result
}

fn unpack_staged(archive: &Path, s: &SetSpec, out: &Path) -> Result<()> {
    let f = std::fs::File::open(archive)?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let names = [
        ("base.fvecs", format!("{}_base.fvecs", s.prefix), s.base),
        ("query.fvecs", format!("{}_query.fvecs", s.prefix), s.query),
        (
            "groundtruth.ivecs",
            format!("{}_groundtruth.ivecs", s.prefix),
            s.groundtruth,
        ),
        ("learn.fvecs", format!("{}_learn.fvecs", s.prefix), s.learn),
    ];
    let mut staged = Vec::new();
    for entry in tar.entries().context("reading archive")? {
        let mut e = entry.context("corrupt archive")?;
        let path = e.path()?.into_owned();
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some((dst, _, shape)) = names.iter().find(|(_, src, _)| *src == file) {
            // Keeps the extension so the readers recognise the format.
            let tmp = out.join(format!(".unpack.{dst}"));
            let mut w = std::fs::File::create(&tmp)?;
            std::io::copy(&mut e, &mut w).context("corrupt archive (truncated member)")?;
            w.sync_all()?;
            staged.push((tmp, out.join(dst), *shape));
        }
    }
    for (dst, src, _) in &names {
        ensure!(
            staged.iter().any(|(_, d, _)| d.ends_with(dst)),
            "archive lacks {src}"
        );
    }
    for (tmp, dst, (n, dim)) in &staged {
        let (gn, gd) = if tmp.extension().is_some_and(|e| e == "ivecs") {
            let (n, d, _) = cohort_ivf::vecfile::read_ivecs(tmp)?;
            (n, d)
        } else {
            let v = cohort_ivf::vecfile::read_vectors(tmp)?;
            (v.n, v.dim)
        };
        ensure!(
            (gn, gd) == (*n, *dim),
            "{}: {gn} x {gd}, expected {n} x {dim}",
            dst.display()
        );
    }
    for (tmp, dst, _) in staged {
        std::fs::rename(&tmp, &dst)?;
    }
    Ok(())
}

pub fn run(a: &FetchArgs) -> Result<()> {
    let s = spec(&a.set)?;
    std::fs::create_dir_all(&a.out)?;
    let url = a
        .url
        .clone()
        .unwrap_or_else(|| format!("{CORPUS}/{}", s.archive));
    let archive = a.out.join(s.archive);
    if !archive.exists() {
        download(&url, &archive)?;
    }
    let sum = sha256_file(&archive)?;
    let sums = a.out.join("SHA256SUMS");
    let recorded = std::fs::read_to_string(&sums).ok().and_then(|t| {
        t.lines()
            .find(|l| l.ends_with(s.archive))
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
    });
    for (what, want) in [
        ("--sha256", a.sha256.clone()),
        ("SHA256SUMS", recorded.clone()),
    ] {
        if let Some(want) = want {
            if !want.eq_ignore_ascii_case(&sum) {
                std::fs::remove_file(&archive)?;
                bail!(
                    "{}: SHA-256 {sum} does not match {what} ({want}); removed it",
                    archive.display()
                );
            }
        }
    }
    unpack_and_check(&archive, &s, &a.out)?;
    if recorded.is_none() {
        cohort_server::util::write_atomic(&sums, format!("{sum}  {}\n", s.archive).as_bytes())?;
    }
    eprintln!("{} ready in {} (sha256 {sum})", a.set, a.out.display());
    Ok(())
}
