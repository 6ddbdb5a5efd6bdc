//! A collection seeded from a static k-NN index file (`cohort index build`, the `knn`
//! service's IVF-Flat, crate `cohort-knn`): every row of the index becomes a point whose id is
//! its row number, with no attributes; the metric is the index's (`l2`, or `ip` for an
//! inner-product index); the element type is `u8` when every value is integral in 0..=255
//! (SIFT-like data), `f32` otherwise, unless the caller names one (whose rules every value
//! must then meet, as in an upsert).
//!
//! Durable and atomic as a create and an upsert are: the points are written as the new
//! collection's snapshot (streamed, checksummed, synced) inside `.creating-NAME`, beside its
//! settings, an empty log and the index's centroids (`centroids`, see `seed`); the directory
//! is synced and renamed into place only when all of it is written, then the collection is
//! opened from it (read back whole) before the import answers. A crash or an error leaves no
//! collection; a collection of that name already there is refused (409), never touched.
//!
//! `centroids`: `"COHCENT1" | nlist u32 | dim u32 | trained_on u64 | nlist x dim f32 | crc32`,
//! little-endian. While the collection holds fewer than `RETRAIN_GROWTH` times `trained_on`
//! points, opening it builds its IVF lists around these centroids (each point assigned to its
//! nearest) instead of running k-means; past that, k-means as for any collection.

use crate::error::{Error, Kind, Result};
use crate::schema::{check_vector, Element, Metric, Settings};
use crate::search::Ivf;
use crate::store::Store;
use cohort_knn::ivf::IvfIndex;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const CENTROIDS_MAGIC: &[u8; 8] = b"COHCENT1";

/// What an import made.
#[derive(Debug, Clone)]
pub struct Imported {
    pub settings: Settings,
    pub points: u64,
    /// The index's lists, whose centroids seed the collection's IVF.
    pub nlist: usize,
}

/// The settings a collection seeded from `ix` gets (`element`: the caller's, or detected).
pub fn settings_for(ix: &IvfIndex, element: Option<Element>) -> Result<Settings> {
    let metric = match ix.metric {
        cohort_knn::metric::Metric::L2 => Metric::L2,
        cohort_knn::metric::Metric::InnerProduct => Metric::Ip,
    };
    let element = element.unwrap_or_else(|| {
        let bytes = ix
            .vectors()
            .iter()
            .all(|&x| x.fract() == 0.0 && (0.0..=255.0).contains(&x));
        if bytes {
            Element::U8
        } else {
            Element::F32
        }
    });
    let s = Settings {
        dim: ix.dim,
        metric,
        element,
        attributes: BTreeMap::new(),
    };
    s.validate()?;
    Ok(s)
}

/// Imports the index file `index` into `store` as the new collection `name`.
pub fn import_index(
    store: &Store,
    name: &str,
    index: &Path,
    element: Option<Element>,
) -> Result<Imported> {
    crate::schema::check_name("collection", name)?;
    let ix = IvfIndex::load(index)
        .map_err(|e| Error::bad(format!("index {}: {e:#}", index.display())))?;
    let settings = settings_for(&ix, element)?;
    let n = ix.n as u64;
    if ix.ids().len() as u64 != n || ix.vectors().len() != ix.n * ix.dim {
        return Err(Error::bad(format!(
            "index {}: {} rows but {} ids and {} values",
            index.display(),
            ix.n,
            ix.ids().len(),
            ix.vectors().len()
        )));
    }
    let s = settings.clone();
    store.create_from(name, settings.clone(), |dir| {
        let mut snap = crate::snapshot::Streamed::create(dir, &s, 0, n)?;
        let mut seen = vec![false; ix.n];
        let mut row = vec![0f64; ix.dim];
        // Cell by cell: the points' slots then follow the lists, as the index kept them.
        for (r, (&id, v)) in ix
            .ids()
            .iter()
            .zip(ix.vectors().chunks_exact(ix.dim))
            .enumerate()
        {
            let id = id as usize;
            if id >= ix.n || std::mem::replace(&mut seen[id], true) {
                return Err(Error::bad(format!(
                    "index {}: row {r} has id {id}, out of range or twice",
                    index.display()
                )));
            }
            row.iter_mut().zip(v).for_each(|(o, x)| *o = *x as f64);
            let stored = check_vector(&s, &row, &format!("index row {id}"))?;
            snap.push(id as u64, &stored, &[])?;
        }
        snap.finish()?;
        write_centroids(dir, ix.nlist, ix.dim, n, ix.centroids())
    })?;
    Ok(Imported {
        settings,
        points: n,
        nlist: ix.nlist,
    })
}

fn write_centroids(
    dir: &Path,
    nlist: usize,
    dim: usize,
    trained_on: u64,
    centroids: &[f32],
) -> Result<()> {
    let mut b = Vec::with_capacity(28 + centroids.len() * 4);
    b.extend_from_slice(CENTROIDS_MAGIC);
    b.extend_from_slice(&(nlist as u32).to_le_bytes());
    b.extend_from_slice(&(dim as u32).to_le_bytes());
    b.extend_from_slice(&trained_on.to_le_bytes());
    centroids
        .iter()
        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    let p = dir.join("centroids");
    (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&p)?;
        f.write_all(&b)?;
        f.sync_all()
    })()
    .map_err(|e| Error::io(&format!("writing {}", p.display()), &e))
}

/// The IVF lists (empty) around the centroids an import left in `dir`, when there are some
/// and the collection is still near what they were trained on; None otherwise. A damaged
/// file is refused with an error naming it, as a damaged snapshot is.
pub(crate) fn seed(dir: &Path, name: &str, d: &crate::data::Data) -> Result<Option<Ivf>> {
    let p = dir.join("centroids");
    let b = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::internal(format!("reading {}: {e}", p.display()))),
    };
    let bad = |why: &str| {
        Error::new(
            Kind::Internal,
            format!(
                "collection {name}: {} is corrupt ({why}); refusing to serve it - remove the \
                 file to train the collection's lists afresh",
                p.display()
            ),
        )
    };
    if b.len() < 28 || &b[..8] != CENTROIDS_MAGIC {
        return Err(bad("bad magic or too short"));
    }
    let (body, tail) = b.split_at(b.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != tail {
        return Err(bad("checksum mismatch"));
    }
    let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().expect("4 bytes"));
    let (nlist, dim) = (u32_at(8) as usize, u32_at(12) as usize);
    let trained_on = u64::from_le_bytes(body[16..24].try_into().expect("8 bytes"));
    if dim != d.dim() || nlist == 0 || body.len() != 24 + nlist * dim * 4 {
        return Err(bad("its shape does not fit the collection"));
    }
    if d.count() as u64 >= crate::search::RETRAIN_GROWTH as u64 * trained_on {
        return Ok(None); // grown past them: k-means
    }
    let centroids = body[24..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok(Some(Ivf::seeded(
        d.settings.metric,
        dim,
        centroids,
        d.count(),
    )))
}
