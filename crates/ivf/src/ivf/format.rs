//! The index file: a 64-byte header, then 64-byte aligned sections, written to a temporary
//! file and renamed (atomic), memory-mapped on load.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0  | 8 | magic `COHORTIV` |
//! | 8  | 4 | format version (2) |
//! | 12 | 1 | metric (0 l2, 1 inner product) |
//! | 13 | 1 | element type (0 f32) |
//! | 14 | 2 | reserved (0) |
//! | 16 | 4 | dim |
//! | 20 | 4 | nlist |
//! | 24 | 8 | n (vectors) |
//! | 32 | 4 | default nprobe |
//! | 36 | 4 | CRC-32 of the whole file, these 4 bytes read as zero |
//! | 40 | 4 | placement devices (0: no placement recorded) |
//! | 44 | 20 | reserved (0) |
//!
//! Sections: centroids f32[nlist*dim], offsets u64[nlist+1], ids u32[n], vectors f32[n*dim]
//! (cell-major), and where a placement is recorded its owners u16[nlist] (the device holding
//! each list when the index is sharded over that many devices), each starting on a 64-byte
//! boundary. Little-endian throughout. Files written before the placement field have zeros
//! there and load as before.
//!
//! Version 1 checked only the bytes after the header: one flipped bit could turn the metric
//! from l2 to inner product, or change the default nprobe, and the file still loaded. Version
//! 2's checksum covers the header too; a version 1 file is refused with the command that
//! rebuilds it.

use super::{IvfIndex, Store};
use crate::metric::Metric;
use anyhow::{bail, ensure, Context, Result};
use std::io::Write;
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"COHORTIV";
pub const FORMAT_VERSION: u32 = 2;
/// Where the checksum sits in the header.
const CRC_AT: std::ops::Range<usize> = 36..40;
const HEADER: usize = 64;

fn align64(x: usize) -> usize {
    x.div_ceil(64) * 64
}

/// Byte ranges of the sections in a file.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    centroids: (usize, usize),
    offsets: (usize, usize),
    ids: (usize, usize),
    vectors: (usize, usize),
    /// The owners section (empty without a placement).
    owners: (usize, usize),
    total: usize,
}

impl Layout {
    fn new(dim: usize, nlist: usize, n: usize, placed: bool) -> Option<Layout> {
        let c0 = HEADER;
        let c1 = c0.checked_add(nlist.checked_mul(dim)?.checked_mul(4)?)?;
        let o0 = align64(c1);
        let o1 = o0.checked_add((nlist + 1).checked_mul(8)?)?;
        let i0 = align64(o1);
        let i1 = i0.checked_add(n.checked_mul(4)?)?;
        let v0 = align64(i1);
        let v1 = v0.checked_add(n.checked_mul(dim)?.checked_mul(4)?)?;
        let owners = if placed {
            let w0 = align64(v1);
            (w0, w0.checked_add(nlist.checked_mul(2)?)?)
        } else {
            (v1, v1)
        };
        Some(Layout {
            centroids: (c0, c1),
            offsets: (o0, o1),
            ids: (i0, i1),
            vectors: (v0, v1),
            owners,
            total: owners.1,
        })
    }

    fn cast<T>(map: &[u8], (a, b): (usize, usize)) -> &[T] {
        let bytes = &map[a..b];
        assert_eq!(
            bytes.as_ptr() as usize % std::mem::align_of::<T>(),
            0,
            "misaligned section"
        );
        // SAFETY: in bounds, aligned (checked), T is a plain little-endian number type on a
        // little-endian target (checked at load), and every bit pattern is a valid T.
        unsafe {
            std::slice::from_raw_parts(
                bytes.as_ptr() as *const T,
                bytes.len() / std::mem::size_of::<T>(),
            )
        }
    }
    /// The sections' byte ranges of an index of these sizes without a placement (a streamed
    /// build writes each where it belongs).
    pub(super) fn unplaced(dim: usize, nlist: usize, n: usize) -> Option<Layout> {
        Layout::new(dim, nlist, n, false)
    }
    pub(super) fn total(&self) -> usize {
        self.total
    }
    pub(super) fn centroids_at(&self) -> usize {
        self.centroids.0
    }
    pub(super) fn offsets_at(&self) -> usize {
        self.offsets.0
    }
    pub(super) fn ids_at(&self) -> usize {
        self.ids.0
    }
    pub(super) fn vectors_at(&self) -> usize {
        self.vectors.0
    }
    pub(super) fn centroids<'a>(&self, m: &'a [u8]) -> &'a [f32] {
        Self::cast(m, self.centroids)
    }
    pub(super) fn offsets<'a>(&self, m: &'a [u8]) -> &'a [u64] {
        Self::cast(m, self.offsets)
    }
    pub(super) fn ids<'a>(&self, m: &'a [u8]) -> &'a [u32] {
        Self::cast(m, self.ids)
    }
    pub(super) fn vectors<'a>(&self, m: &'a [u8]) -> &'a [f32] {
        Self::cast(m, self.vectors)
    }
}

/// Writes `bytes` and feeds them to the checksum.
struct Summing<W: Write> {
    w: W,
    crc: crc32fast::Hasher,
    written: usize,
}

impl<W: Write> Summing<W> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.crc.update(b);
        self.written += b.len();
        self.w.write_all(b)
    }
    fn pad_to(&mut self, at: usize) -> std::io::Result<()> {
        assert!(at >= self.written);
        self.put(&vec![0u8; at - self.written])
    }
}

/// The header of a file of these sizes, its checksum field zero.
pub(super) fn header(
    metric: Metric,
    dim: usize,
    nlist: usize,
    n: usize,
    default_nprobe: usize,
    placed_devices: u32,
) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12] = metric.code();
    h[16..20].copy_from_slice(&(dim as u32).to_le_bytes());
    h[20..24].copy_from_slice(&(nlist as u32).to_le_bytes());
    h[24..32].copy_from_slice(&(n as u64).to_le_bytes());
    h[32..36].copy_from_slice(&(default_nprobe as u32).to_le_bytes());
    h[40..44].copy_from_slice(&placed_devices.to_le_bytes());
    h
}

/// Where the checksum goes in the header (written last by a streamed build).
pub(super) const CHECKSUM_AT: usize = CRC_AT.start;

pub(super) fn save(ix: &IvfIndex, path: &Path) -> Result<()> {
    let layout =
        Layout::new(ix.dim, ix.nlist, ix.n, ix.placement.is_some()).context("index too large")?;
    if let Some(p) = &ix.placement {
        ensure!(
            p.owner.len() == ix.nlist && p.owner.iter().all(|&d| (d as usize) < p.devices),
            "a placement of another index"
        );
    }
    let tmp = crate::atomic_file::Temp::new(path);
    let file = std::fs::File::create(tmp.path())
        .with_context(|| format!("creating {}", tmp.path().display()))?;
    let mut s = Summing {
        w: std::io::BufWriter::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
        written: 0,
    };
    // Placeholder header; rewritten with the checksum at the end.
    s.w.write_all(&[0u8; HEADER])?;
    s.written = HEADER;
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    s.put(&f32s(ix.centroids()))?;
    s.pad_to(layout.offsets.0)?;
    s.put(
        &ix.offsets()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>(),
    )?;
    s.pad_to(layout.ids.0)?;
    s.put(
        &ix.ids()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>(),
    )?;
    s.pad_to(layout.vectors.0)?;
    for chunk in ix.vectors().chunks(1 << 20) {
        s.put(&f32s(chunk))?;
    }
    if let Some(p) = &ix.placement {
        s.pad_to(layout.owners.0)?;
        s.put(
            &p.owner
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
        )?;
    }
    assert_eq!(s.written, layout.total);
    let placed = ix.placement.as_ref().map_or(0, |p| p.devices as u32);
    let mut h = header(ix.metric, ix.dim, ix.nlist, ix.n, ix.default_nprobe, placed);
    // The header (its checksum field zero) comes first in the file: its CRC, extended by the
    // body's, is the CRC of the whole file.
    let mut whole = crc32fast::Hasher::new();
    whole.update(&h);
    whole.combine(&s.crc);
    let crc = whole.finalize();
    h[CRC_AT].copy_from_slice(&crc.to_le_bytes());
    let mut file = s.w.into_inner().map_err(|e| e.into_error())?;
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&h)?;
    file.sync_all()?;
    drop(file);
    tmp.commit(path)
        .with_context(|| format!("renaming to {}", path.display()))
}

pub(super) fn load(path: &Path) -> Result<IvfIndex> {
    ensure!(
        cfg!(target_endian = "little"),
        "index files are little-endian; this machine is not"
    );
    let what = path.display();
    let f = std::fs::File::open(path).with_context(|| format!("opening {what}"))?;
    // SAFETY: read-only map; index files are replaced by rename, never modified in place.
    let map = unsafe { memmap2::Mmap::map(&f) }.with_context(|| format!("mapping {what}"))?;
    ensure!(
        map.len() >= HEADER,
        "{what}: not a Cohort index (too short)"
    );
    ensure!(
        &map[0..8] == MAGIC,
        "{what}: not a Cohort index (bad magic)"
    );
    let u32_at = |o: usize| u32::from_le_bytes(map[o..o + 4].try_into().expect("4"));
    let version = u32_at(8);
    ensure!(
        version != 1,
        "{what}: index format version 1, whose header is not checksummed; this build reads \
         version {FORMAT_VERSION}: rebuild it with `cohort index build`"
    );
    ensure!(
        version == FORMAT_VERSION,
        "{what}: index format version {version}, this build reads {FORMAT_VERSION}"
    );
    let metric = Metric::from_code(map[12])
        .with_context(|| format!("{what}: unknown metric {}", map[12]))?;
    if map[13] != 0 {
        bail!("{what}: element type {} not supported (f32 only)", map[13]);
    }
    let (dim, nlist) = (u32_at(16) as usize, u32_at(20) as usize);
    let n = u64::from_le_bytes(map[24..32].try_into().expect("8")) as usize;
    let default_nprobe = u32_at(32) as usize;
    ensure!(
        dim > 0 && nlist > 0 && nlist <= n.max(1),
        "{what}: inconsistent header (dim {dim}, nlist {nlist}, n {n})"
    );
    let devices = u32_at(40) as usize;
    ensure!(
        devices <= u16::MAX as usize + 1,
        "{what}: placement over {devices} devices (at most 65536)"
    );
    let layout = Layout::new(dim, nlist, n, devices > 0)
        .with_context(|| format!("{what}: header sizes overflow"))?;
    ensure!(
        map.len() == layout.total,
        "{what}: {} bytes, header implies {} (truncated?)",
        map.len(),
        layout.total
    );
    let mut whole = crc32fast::Hasher::new();
    whole.update(&map[..CRC_AT.start]);
    whole.update(&[0; 4]);
    whole.update(&map[CRC_AT.end..]);
    ensure!(
        whole.finalize() == u32_at(CRC_AT.start),
        "{what}: checksum mismatch (file corrupted)"
    );
    let offsets = layout.offsets(&map);
    ensure!(
        offsets[0] == 0 && offsets[nlist] as usize == n,
        "{what}: inverted-list offsets inconsistent"
    );
    ensure!(
        offsets.windows(2).all(|w| w[0] <= w[1]),
        "{what}: inverted-list offsets not monotone"
    );
    ensure!(
        layout.ids(&map).iter().all(|&i| (i as usize) < n),
        "{what}: id out of range"
    );
    let placement = if devices > 0 {
        let owner: Vec<u16> = map[layout.owners.0..layout.owners.1]
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        ensure!(
            owner.iter().all(|&d| (d as usize) < devices),
            "{what}: a list placed on a device past {devices}"
        );
        Some(super::placement::Placement { devices, owner })
    } else {
        None
    };
    Ok(IvfIndex {
        dim,
        nlist,
        n,
        metric,
        placement,
        default_nprobe: default_nprobe.clamp(1, nlist),
        store: Store::Mapped { map, layout },
    })
}
