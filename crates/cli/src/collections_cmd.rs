//! `cohort collections import`: a live collection seeded from a static k-NN index file.

use anyhow::{anyhow, Result};
use clap::{Args, Subcommand};
use cohort_collections::{Element, Store};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum CollectionsCmd {
    /// Seed a new collection of a --data-dir from an index file of `cohort index build`:
    /// ids are the row numbers, the metric the index's (l2, or ip), the element u8 when every
    /// value is integral in 0..=255 (else f32), the index's centroids reused for its lists.
    /// Written as the collection's snapshot and renamed into place whole (nothing is left
    /// by a failure). Run it with no server on the directory (its LOCK is taken).
    Import(ImportArgs),
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The index file (`cohort index build --out`).
    #[arg(long)]
    pub index: PathBuf,
    /// The server's --data-dir.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The new collection's name (1-64 of A-Z a-z 0-9 _ -, not starting with -).
    #[arg(long)]
    pub name: String,
    /// The element type (f32, f16, u8) instead of the detected one; every value must fit it.
    #[arg(long)]
    pub element: Option<String>,
}

pub fn run(c: CollectionsCmd) -> Result<()> {
    match c {
        CollectionsCmd::Import(a) => import(a),
    }
}

fn import(a: ImportArgs) -> Result<()> {
    let element = a
        .element
        .as_deref()
        .map(|e| {
            serde_json::from_value::<Element>(serde_json::Value::String(e.to_string()))
                .map_err(|_| anyhow!("--element {e:?}: one of f32, f16, u8"))
        })
        .transpose()?;
    let t0 = std::time::Instant::now();
    let store = Store::open(&a.data_dir).map_err(|e| anyhow!("{}", e.message))?;
    let got = cohort_collections::import::import_index(&store, &a.name, &a.index, element)
        .map_err(|e| anyhow!("importing {}: {}", a.index.display(), e.message))?;
    let s = &got.settings;
    println!(
        "collection {}: {} points of dim {} ({}, {}) from {} in {:.1} s, lists seeded by the \
         index's {} centroids",
        a.name,
        got.points,
        s.dim,
        serde_json::to_value(s.metric)?.as_str().unwrap_or("?"),
        serde_json::to_value(s.element)?.as_str().unwrap_or("?"),
        a.index.display(),
        t0.elapsed().as_secs_f64(),
        got.nlist
    );
    Ok(())
}
