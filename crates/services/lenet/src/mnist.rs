//! MNIST's IDX files (LeCun's format: a big-endian header, then the bytes), plain or gzipped,
//! as the training, the evaluation and the load generator read them.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Images (28x28 bytes each, row-major) and their labels.
#[derive(Debug, Clone)]
pub struct Digits {
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
}

impl Digits {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn image(&self, i: usize) -> &[u8] {
        &self.images[i * super::model::IMAGE_BYTES..(i + 1) * super::model::IMAGE_BYTES]
    }

    /// The first `n` (all if fewer).
    pub fn take(mut self, n: usize) -> Digits {
        let n = n.min(self.len());
        self.images.truncate(n * super::model::IMAGE_BYTES);
        self.labels.truncate(n);
        self
    }
}

/// Which half of the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

/// The split's two files in `dir` (`train-images.idx3-ubyte[.gz]`, `t10k-labels...`).
pub fn read_split(dir: &Path, split: Split) -> Result<Digits, String> {
    let stem = match split {
        Split::Train => "train",
        Split::Test => "t10k",
    };
    let images = read_idx(&find(dir, &format!("{stem}-images.idx3-ubyte"))?, 3)?;
    let labels = read_idx(&find(dir, &format!("{stem}-labels.idx1-ubyte"))?, 1)?;
    if images.dims[1..] != [28, 28] {
        return Err(format!(
            "{stem} images are {:?}, not 28x28",
            &images.dims[1..]
        ));
    }
    if images.dims[0] != labels.dims[0] {
        return Err(format!(
            "{stem}: {} images but {} labels",
            images.dims[0], labels.dims[0]
        ));
    }
    if let Some(l) = labels.data.iter().find(|&&l| l > 9) {
        return Err(format!("{stem} labels hold {l}, not a digit"));
    }
    Ok(Digits {
        images: images.data,
        labels: labels.data,
    })
}

fn find(dir: &Path, name: &str) -> Result<PathBuf, String> {
    if !dir.is_dir() {
        return Err(format!(
            "{}: no such folder (an MNIST folder holds {name}[.gz])",
            dir.display()
        ));
    }
    for candidate in [dir.join(name), dir.join(format!("{name}.gz"))] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!("{} holds no {name} (nor {name}.gz)", dir.display()))
}

#[derive(Debug)]
struct Idx {
    dims: Vec<usize>,
    data: Vec<u8>,
}

/// An IDX file of unsigned bytes with `rank` dimensions.
fn read_idx(path: &Path, rank: usize) -> Result<Idx, String> {
    let raw = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    idx_from_bytes(&raw, rank).map_err(|e| format!("{}: {e}", path.display()))
}

/// IDX bytes, gzipped or not.
fn idx_from_bytes(raw: &[u8], rank: usize) -> Result<Idx, String> {
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw)
            .read_to_end(&mut out)
            .map_err(|e| format!("bad gzip: {e}"))?;
        parse_idx(&out, rank)
    } else {
        parse_idx(raw, rank)
    }
}

/// The repository's 1000 MNIST test digits (`testdata/`, built into the binary): the load
/// generator's default images, so the demo needs no data set.
pub fn embedded_test_subset() -> Digits {
    let images = idx_from_bytes(include_bytes!("testdata/t10k-images.idx3-ubyte.gz"), 3);
    let labels = idx_from_bytes(include_bytes!("testdata/t10k-labels.idx1-ubyte.gz"), 1);
    Digits {
        images: images.expect("the embedded images read").data,
        labels: labels.expect("the embedded labels read").data,
    }
}

fn parse_idx(bytes: &[u8], rank: usize) -> Result<Idx, String> {
    let word = |i: usize| -> Result<usize, String> {
        bytes
            .get(4 * i..4 * i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| "truncated header".to_string())
    };
    let magic = word(0)?;
    // Two zero bytes, 0x08 (unsigned byte), then the rank.
    if magic != 0x0800 + rank {
        return Err(format!(
            "not an IDX file of bytes with {rank} dimensions (magic {magic:#010x})"
        ));
    }
    let dims: Vec<usize> = (1..=rank).map(word).collect::<Result<_, _>>()?;
    let n = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("dimensions overflow")?;
    let start = 4 * (rank + 1);
    if bytes.len() != start + n {
        return Err(format!(
            "{} data bytes for dimensions {dims:?} ({n})",
            bytes.len().saturating_sub(start)
        ));
    }
    Ok(Idx {
        dims,
        data: bytes[start..].to_vec(),
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_missing_folder_is_named_as_missing_not_as_empty() {
        let e = find(Path::new("/nonexistent/mnist"), "t10k-images.idx3-ubyte").unwrap_err();
        assert!(e.contains("no such folder"), "{e}");
        let here = std::env::temp_dir();
        let e = find(&here, "no-such-file.idx3-ubyte").unwrap_err();
        assert!(e.contains("holds no no-such-file.idx3-ubyte"), "{e}");
    }

    use super::*;

    #[test]
    fn idx_headers_are_checked() {
        let mut f = vec![0, 0, 8, 1, 0, 0, 0, 3];
        f.extend([1, 2, 3]);
        assert_eq!(parse_idx(&f, 1).unwrap().data, vec![1, 2, 3]);
        assert!(parse_idx(&f[..10], 1).unwrap_err().contains("data bytes"));
        assert!(parse_idx(&f, 3).unwrap_err().contains("magic"));
        assert!(parse_idx(&f[..3], 1).unwrap_err().contains("truncated"));
    }

    #[test]
    fn the_repositorys_test_subset_reads() {
        let d = read_split(&super::super::testdata_dir(), Split::Test).unwrap();
        assert_eq!(d.len(), 1000);
        assert_eq!(d.images.len(), 1000 * 784);
        let e = embedded_test_subset();
        assert_eq!((e.images, e.labels), (d.images, d.labels));
    }
}
