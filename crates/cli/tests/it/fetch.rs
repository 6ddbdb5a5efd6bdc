//! `cohort data fetch` offline: unpacking, shape checks, checksum pinning and resumption,
//! on locally built archives shaped like TEXMEX siftsmall.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fvecs(n: usize, dim: usize, val: f32) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * (4 + 4 * dim));
    for i in 0..n {
        out.extend_from_slice(&(dim as i32).to_le_bytes());
        for d in 0..dim {
            out.extend_from_slice(&(val + (i * dim + d) as f32).to_le_bytes());
        }
    }
    out
}

fn ivecs(n: usize, dim: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        out.extend_from_slice(&(dim as i32).to_le_bytes());
        for d in 0..dim {
            out.extend_from_slice(&((i + d) as i32).to_le_bytes());
        }
    }
    out
}

/// A siftsmall-shaped archive; `short_base` truncates the base file's record count.
fn archive(dir: &Path, short_base: bool) -> PathBuf {
    let path = dir.join(if short_base {
        "bad.tar.gz"
    } else {
        "siftsmall.tar.gz"
    });
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    let files: Vec<(&str, Vec<u8>)> = vec![
        (
            "siftsmall/siftsmall_base.fvecs",
            fvecs(if short_base { 9_999 } else { 10_000 }, 128, 0.0),
        ),
        ("siftsmall/siftsmall_query.fvecs", fvecs(100, 128, 1.0)),
        ("siftsmall/siftsmall_groundtruth.ivecs", ivecs(100, 100)),
        ("siftsmall/siftsmall_learn.fvecs", fvecs(25_000, 128, 2.0)),
    ];
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, data.as_slice()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
    path
}

fn fetch(src: &Path, out: &Path, extra: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args([
            "data",
            "fetch",
            "siftsmall",
            "--out",
            out.to_str().unwrap(),
            "--url",
        ])
        .arg(format!("file://{}", src.display()))
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn fetch_unpacks_checks_pins_and_resumes() {
    let dir = std::env::temp_dir().join(format!("cohort-fetch-{}", std::process::id()));
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let good = archive(&dir, false);
    let bytes = std::fs::read(&good).unwrap();

    // Resumption: a partial download is continued from where it stopped, not restarted.
    let out = dir.join("ok");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("siftsmall.tar.part"), &bytes[..bytes.len() / 3]).unwrap();
    let (ok, err) = fetch(&good, &out, &[]);
    assert!(ok, "{err}");
    assert!(err.contains("resuming"), "{err}");
    for f in [
        "base.fvecs",
        "query.fvecs",
        "groundtruth.ivecs",
        "learn.fvecs",
        "SHA256SUMS",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    assert_eq!(
        std::fs::read(out.join("siftsmall.tar.gz")).unwrap(),
        bytes,
        "resumed file differs"
    );

    // A wrong pinned checksum is refused and the archive removed.
    let out2 = dir.join("pinned");
    let (ok, err) = fetch(&good, &out2, &["--sha256", &"0".repeat(64)]);
    assert!(!ok && err.contains("does not match"), "{err}");
    assert!(!out2.join("siftsmall.tar.gz").exists());

    // The recorded checksum catches a different archive fetched into the same folder later.
    std::fs::remove_file(out.join("siftsmall.tar.gz")).unwrap();
    let bad = archive(&dir, true);
    let (ok, err) = fetch(&bad, &out, &[]);
    assert!(!ok && err.contains("SHA256SUMS"), "{err}");

    // Without a pin, a wrongly shaped archive fails the shape check.
    let out3 = dir.join("shape");
    let (ok, err) = fetch(&bad, &out3, &[]);
    assert!(!ok && err.contains("expected 10000 x 128"), "{err}");
    assert!(
        !out3.join("base.fvecs").exists(),
        "a failed fetch installs nothing"
    );

    // A truncated archive is a clear error.
    let cut = dir.join("cut.tar.gz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (ok, err) = fetch(&cut, &dir.join("cut"), &[]);
    assert!(
        !ok && (err.contains("corrupt") || err.contains("archive")),
        "{err}"
    );
}
