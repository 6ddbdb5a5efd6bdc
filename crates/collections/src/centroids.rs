//! The IVF centroids an import leaves beside a collection's snapshot (`import.rs`): the file
//! `centroids`, `"COHCENT1" | nlist u32 | dim u32 | trained_on u64 | nlist x dim f32 | crc32`,
//! little-endian. While the collection holds fewer than `RETRAIN_GROWTH` times `trained_on`
//! points, opening it builds its IVF lists around these centroids (each point assigned to its
//! nearest) instead of running k-means; past that, k-means as for any collection.

use crate::error::{Error, Kind, Result};
use crate::ivf::Ivf;
use std::io::Write;
use std::path::Path;

const CENTROIDS_MAGIC: &[u8; 8] = b"COHCENT1";

pub(crate) fn write_centroids(
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
