//! Vector files: TEXMEX `.fvecs` / `.bvecs` / `.ivecs` and NumPy `.npy` (f32, u8; 2-D, C order).
//!
//! TEXMEX: each vector is `dim: i32 LE` followed by `dim` elements (f32, u8 or i32). Every
//! record of a file must have the same dimension.

use anyhow::{bail, ensure, Context, Result};
use std::io::Write;
use std::path::Path;

/// Row-major f32 vectors (u8 inputs are widened).
#[derive(Debug, Clone, PartialEq)]
pub struct Vectors {
    pub n: usize,
    pub dim: usize,
    pub data: Vec<f32>,
}

impl Vectors {
    pub fn new(dim: usize, data: Vec<f32>) -> Vectors {
        assert!(
            dim > 0 && data.len().is_multiple_of(dim),
            "data is not a whole number of rows"
        );
        Vectors {
            n: data.len() / dim,
            dim,
            data,
        }
    }
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// Element type of a TEXMEX file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    F32,
    U8,
    I32,
}

impl Elem {
    pub(crate) fn size(self) -> usize {
        match self {
            Elem::U8 => 1,
            _ => 4,
        }
    }
}

fn map(path: &Path) -> Result<memmap2::Mmap> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: read-only map; files are not modified while we read them (documented contract).
    unsafe { memmap2::Mmap::map(&f) }.with_context(|| format!("mapping {}", path.display()))
}

/// (n, dim) of a TEXMEX file of `len` bytes whose first bytes are `first`: its first
/// dimension field, plausible, and a length that is a whole number of records. Each record's
/// own field is checked where it is read (`texmex_shape`, `decode_records`).
pub(crate) fn texmex_dims(
    first: &[u8],
    len: usize,
    elem: Elem,
    what: &str,
) -> Result<(usize, usize)> {
    ensure!(
        first.len() >= 4,
        "{what}: file is empty or truncated (no dimension field)"
    );
    let dim = i32::from_le_bytes(first[0..4].try_into().expect("4 bytes"));
    ensure!(
        dim > 0 && dim <= 1 << 16,
        "{what}: implausible dimension {dim}"
    );
    let dim = dim as usize;
    let rec = 4 + dim * elem.size();
    ensure!(
        len.is_multiple_of(rec),
        "{what}: size {len} is not a multiple of the record size {rec} (dim {dim}): truncated or not this format"
    );
    Ok((len / rec, dim))
}

/// A record's dimension field is `dim` (`row`: its number in the file, for the message).
fn check_record(r: &[u8], dim: usize, row: usize, what: &str) -> Result<()> {
    let d = i32::from_le_bytes(r[0..4].try_into().expect("4 bytes"));
    ensure!(
        d as usize == dim,
        "{what}: record {row} has dimension {d}, the first has {dim}"
    );
    Ok(())
}

/// Parses a TEXMEX buffer: returns (n, dim) after checking every record.
fn texmex_shape(b: &[u8], elem: Elem, what: &str) -> Result<(usize, usize)> {
    let (n, dim) = texmex_dims(b, b.len(), elem, what)?;
    let rec = 4 + dim * elem.size();
    for (i, r) in b.chunks_exact(rec).enumerate() {
        check_record(r, dim, i, what)?;
    }
    Ok((n, dim))
}

/// Appends whole f32 or u8 records `raw` (rows `first_row..` of the file) to `out`, widened
/// to f32, each record's dimension field checked.
pub(crate) fn decode_records(
    raw: &[u8],
    dim: usize,
    elem: Elem,
    first_row: usize,
    what: &str,
    out: &mut Vec<f32>,
) -> Result<()> {
    let rec = 4 + dim * elem.size();
    debug_assert!(raw.len().is_multiple_of(rec), "whole records");
    for (i, r) in raw.chunks_exact(rec).enumerate() {
        check_record(r, dim, first_row + i, what)?;
        match elem {
            Elem::F32 => out.extend(
                r[4..]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4"))),
            ),
            Elem::U8 => out.extend(r[4..].iter().map(|&v| v as f32)),
            Elem::I32 => unreachable!("ivecs are not vectors of floats"),
        }
    }
    Ok(())
}

fn read_texmex_f32(path: &Path, elem: Elem) -> Result<Vectors> {
    let what = path.display().to_string();
    let m = map(path)?;
    let (n, dim) = texmex_dims(&m, m.len(), elem, &what)?;
    let mut data = Vec::with_capacity(n * dim);
    decode_records(&m, dim, elem, 0, &what, &mut data)?;
    Ok(Vectors { n, dim, data })
}

/// Reads an `.ivecs` file (e.g. ground truth): `n` rows of `dim` ids.
pub fn read_ivecs(path: &Path) -> Result<(usize, usize, Vec<i32>)> {
    let what = path.display().to_string();
    let m = map(path)?;
    let (n, dim) = texmex_shape(&m, Elem::I32, &what)?;
    let rec = 4 + dim * 4;
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        out.extend(
            m[i * rec + 4..(i + 1) * rec]
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().expect("4"))),
        );
    }
    Ok((n, dim, out))
}

/// Reads any supported vector file, chosen by extension: .fvecs, .bvecs, .npy.
pub fn read_vectors(path: &Path) -> Result<Vectors> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("fvecs") => read_texmex_f32(path, Elem::F32),
        Some("bvecs") => read_texmex_f32(path, Elem::U8),
        Some("npy") => read_npy(path),
        Some("ivecs") => bail!("{}: .ivecs holds ids, not vectors", path.display()),
        _ => bail!(
            "{}: unknown vector file type (use .fvecs, .bvecs or .npy)",
            path.display()
        ),
    }
}

fn write_atomic(path: &Path, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let tmp = crate::atomic_file::Temp::new(path);
    {
        let file = std::fs::File::create(tmp.path())
            .with_context(|| format!("creating {}", tmp.path().display()))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        f(&mut w).with_context(|| format!("writing {}", tmp.path().display()))?;
        w.flush()?;
        w.get_ref().sync_all()?;
    }
    tmp.commit(path)
        .with_context(|| format!("renaming to {}", path.display()))
}

pub fn write_fvecs(path: &Path, v: &Vectors) -> Result<()> {
    write_atomic(path, |w| {
        for i in 0..v.n {
            w.write_all(&(v.dim as i32).to_le_bytes())?;
            for x in v.row(i) {
                w.write_all(&x.to_le_bytes())?;
            }
        }
        Ok(())
    })
}

/// Writes u8 vectors (values are clamped to 0..=255 and rounded).
pub fn write_bvecs(path: &Path, v: &Vectors) -> Result<()> {
    write_atomic(path, |w| {
        for i in 0..v.n {
            w.write_all(&(v.dim as i32).to_le_bytes())?;
            let row: Vec<u8> = v
                .row(i)
                .iter()
                .map(|x| x.round().clamp(0.0, 255.0) as u8)
                .collect();
            w.write_all(&row)?;
        }
        Ok(())
    })
}

pub fn write_ivecs(path: &Path, dim: usize, ids: &[i32]) -> Result<()> {
    ensure!(
        dim > 0 && ids.len().is_multiple_of(dim),
        "ids are not a whole number of rows"
    );
    write_atomic(path, |w| {
        for row in ids.chunks_exact(dim) {
            w.write_all(&(dim as i32).to_le_bytes())?;
            for x in row {
                w.write_all(&x.to_le_bytes())?;
            }
        }
        Ok(())
    })
}

/// Reads a 2-D C-order `.npy` of little-endian f32 (`<f4`) or u8 (`|u1`).
pub fn read_npy(path: &Path) -> Result<Vectors> {
    let what = path.display().to_string();
    let m = map(path)?;
    let (descr, shape, data_at) =
        npy_header(&m).with_context(|| format!("{what}: bad .npy header"))?;
    ensure!(
        shape.len() == 2,
        "{what}: expected a 2-D array, shape is {shape:?}"
    );
    let (n, dim) = (shape[0], shape[1]);
    ensure!(dim > 0, "{what}: zero-width rows");
    let elem = match descr.as_str() {
        "<f4" => Elem::F32,
        "|u1" | "<u1" => Elem::U8,
        other => bail!("{what}: unsupported dtype {other:?} (float32 or uint8)"),
    };
    let need = n
        .checked_mul(dim)
        .and_then(|x| x.checked_mul(elem.size()))
        .context("shape overflows")?;
    let body = &m[data_at..];
    ensure!(
        body.len() == need,
        "{what}: {} data bytes, shape {shape:?} needs {need} (truncated?)",
        body.len()
    );
    let data = match elem {
        Elem::F32 => body
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect(),
        _ => body.iter().map(|&v| v as f32).collect(),
    };
    Ok(Vectors { n, dim, data })
}

/// Returns (descr, shape, offset of the data).
fn npy_header(b: &[u8]) -> Result<(String, Vec<usize>, usize)> {
    ensure!(b.len() >= 10 && &b[..6] == b"\x93NUMPY", "missing magic");
    let (len, start): (usize, usize) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 => {
            ensure!(b.len() >= 12, "truncated header");
            (
                u32::from_le_bytes(b[8..12].try_into().expect("4")) as usize,
                12,
            )
        }
        v => bail!("unsupported version {v}"),
    };
    let end = start.checked_add(len).context("header length overflows")?;
    ensure!(b.len() >= end, "truncated header");
    let h = std::str::from_utf8(&b[start..end]).context("header is not text")?;
    let field = |key: &str| -> Result<&str> {
        let at = h
            .find(&format!("'{key}'"))
            .with_context(|| format!("no {key:?} field"))?;
        let rest = &h[at + key.len() + 2..];
        Ok(rest.trim_start().trim_start_matches(':').trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .context("bad descr")?;
    ensure!(
        field("fortran_order")?.starts_with("False"),
        "Fortran order is not supported"
    );
    let shape = field("shape")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .context("bad shape")?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().context("bad shape element"))
        .collect::<Result<Vec<_>>>()?;
    Ok((descr.to_string(), shape, end))
}

/// Writes a 2-D f32 `.npy` (version 1.0).
pub fn write_npy(path: &Path, v: &Vectors) -> Result<()> {
    let mut h = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
        v.n, v.dim
    );
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    write_atomic(path, |w| {
        w.write_all(b"\x93NUMPY\x01\x00")?;
        w.write_all(&(h.len() as u16).to_le_bytes())?;
        w.write_all(h.as_bytes())?;
        for x in &v.data {
            w.write_all(&x.to_le_bytes())?;
        }
        Ok(())
    })
}
