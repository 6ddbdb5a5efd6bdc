//! A collection seeded from a static k-NN index file (`cohort index build`, the `knn`
//! service's IVF-Flat, crate `cohort-ivf`): every row of the index becomes a point whose id is
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
//! The centroids file is `centroids.rs`'s.

use crate::centroids::write_centroids;
use crate::error::{Error, Result};
use crate::schema::{check_vector, Element, Metric, Settings};
use crate::store::Store;
use cohort_ivf::ivf::IvfIndex;
use std::collections::BTreeMap;
use std::path::Path;

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
        cohort_ivf::metric::Metric::L2 => Metric::L2,
        cohort_ivf::metric::Metric::InnerProduct => Metric::Ip,
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
