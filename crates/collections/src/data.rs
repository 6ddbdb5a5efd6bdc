//! A collection's state in memory: slots (one per point version) holding vectors, ids and
//! attribute columns; deletes as tombstones (`live`); an id -> slot map; the IVF lists
//! (`crate::search`). An upsert of an existing id tombstones its old slot and appends a new
//! one, so a search never sees a point half-replaced. Tombstoned slots are compacted away
//! once they outnumber the live ones.

use crate::columns::Column;
use crate::filter::Filter;
use crate::ivf::{index_vector, Ivf};
use crate::ops::{Op, Point};
use crate::schema::{AttrValue, Metric, Settings};
use rayon::prelude::*;
use std::collections::HashMap;

/// Compaction runs when dead slots exceed both the live ones and this.
const COMPACT_MIN_DEAD: usize = 4096;

pub struct Data {
    pub settings: Settings,
    pub(crate) dim: usize,
    /// Slot-major vectors, as stored (f16/u8 values exact in f32).
    pub(crate) vectors: Vec<f32>,
    /// Cosine only: 1 / |v| per slot (the stored vector stays as given, `get` returns it).
    pub(crate) inv_norms: Vec<f32>,
    pub(crate) ids: Vec<u64>,
    /// Tombstones: false once a slot's point was deleted or replaced.
    pub(crate) live: Vec<bool>,
    pub(crate) cols: Vec<Column>,
    pub(crate) by_id: HashMap<u64, u32>,
    pub(crate) live_count: usize,
    pub(crate) ivf: Option<Ivf>,
    /// Sequence number of the last write applied (the log's numbering).
    pub last_seq: u64,
    /// Bumped when slots are renumbered (compaction): a device copy uploads everything again.
    layout_epoch: u64,
    /// Bumped when the IVF lists are replaced (a training, a compaction).
    ivf_epoch: u64,
    /// Slots tombstoned since the last `take_killed` (a device copy clears their bits).
    killed: Vec<u32>,
}

impl Data {
    pub fn new(settings: Settings) -> Data {
        let cols = settings
            .attributes
            .values()
            .map(|t| Column::new(*t))
            .collect();
        Data {
            dim: settings.dim,
            settings,
            vectors: Vec::new(),
            inv_norms: Vec::new(),
            ids: Vec::new(),
            live: Vec::new(),
            cols,
            by_id: HashMap::new(),
            live_count: 0,
            ivf: None,
            last_seq: 0,
            layout_epoch: 0,
            ivf_epoch: 0,
            killed: Vec::new(),
        }
    }

    /// Changes with every renumbering of the slots.
    pub fn layout_epoch(&self) -> u64 {
        self.layout_epoch
    }

    /// Changes whenever the IVF lists are replaced.
    pub fn ivf_epoch(&self) -> u64 {
        self.ivf_epoch
    }

    /// The slots tombstoned since the last call (each once; a compaction clears them, as
    /// its new layout holds no tombstones).
    pub fn take_killed(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.killed)
    }

    /// Every slot's vector, slot-major (`dim` floats a slot).
    pub fn vectors(&self) -> &[f32] {
        &self.vectors
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Cosine only: 1 / |v| per slot (empty for the other metrics).
    pub fn inv_norms(&self) -> &[f32] {
        &self.inv_norms
    }

    /// Whether each slot is live (false once deleted or replaced).
    pub fn live(&self) -> &[bool] {
        &self.live
    }

    /// The attribute columns, in schema order.
    pub fn columns(&self) -> &[Column] {
        &self.cols
    }

    /// The IVF lists, once trained.
    pub fn ivf(&self) -> Option<&Ivf> {
        self.ivf.as_ref()
    }

    pub fn count(&self) -> usize {
        self.live_count
    }

    pub fn slots(&self) -> usize {
        self.ids.len()
    }

    /// The stored vector of a slot.
    pub fn row(&self, slot: usize) -> &[f32] {
        &self.vectors[slot * self.dim..(slot + 1) * self.dim]
    }

    /// The id a slot holds (live or not).
    pub fn id_of(&self, slot: usize) -> u64 {
        self.ids[slot]
    }

    /// The IVF's list count, once trained.
    pub fn nlist(&self) -> Option<usize> {
        self.ivf.as_ref().map(|i| i.nlist)
    }

    /// Installs trained IVF lists (`search::train` over this same state).
    pub fn set_ivf(&mut self, ivf: Ivf) {
        self.ivf = Some(ivf);
        self.ivf_epoch += 1;
    }

    /// Applies a checked write (see `ops`); answers how many points it wrote or deleted.
    pub fn apply(&mut self, op: &Op) -> usize {
        match op {
            Op::Upsert(points) => {
                self.vectors.reserve(points.len() * self.dim);
                // Each point's nearest list, found in parallel before anything changes (the
                // one costly step of an append: nlist distances a point).
                let metric = self.settings.metric;
                let lists: Vec<Option<usize>> = match &self.ivf {
                    Some(ivf) => points
                        .par_iter()
                        .with_min_len(64)
                        .map(|p| Some(ivf.nearest(&index_vector(metric, &p.vector))))
                        .collect(),
                    None => vec![None; points.len()],
                };
                for (p, list) in points.iter().zip(lists) {
                    self.insert(p, list);
                }
                points.len()
            }
            Op::DeleteIds(ids) => ids.iter().filter(|id| self.delete(**id)).count(),
            Op::DeleteFilter(f, _) => {
                let doomed: Vec<u64> = self
                    .matching(f)
                    .iter()
                    .map(|&s| self.ids[s as usize])
                    .collect();
                doomed.iter().filter(|id| self.delete(**id)).count()
            }
        }
    }

    /// Appends `p` in a new slot (tombstoning its old one), to IVF list `list` (its nearest).
    fn insert(&mut self, p: &Point, list: Option<usize>) {
        if let Some(old) = self.by_id.get(&p.id).copied() {
            self.kill(old);
        }
        let slot = self.ids.len() as u32;
        self.vectors.extend_from_slice(&p.vector);
        if self.settings.metric == Metric::Cosine {
            let n = cohort_ivf::metric::dot(&p.vector, &p.vector).sqrt();
            self.inv_norms.push(if n > 0.0 { 1.0 / n } else { 0.0 });
        }
        self.ids.push(p.id);
        self.live.push(true);
        for (c, a) in self.cols.iter_mut().zip(&p.attrs) {
            c.push(a.as_ref());
        }
        self.by_id.insert(p.id, slot);
        self.live_count += 1;
        if let (Some(ivf), Some(list)) = (self.ivf.as_mut(), list) {
            ivf.add_to(slot, list);
        }
    }

    fn delete(&mut self, id: u64) -> bool {
        match self.by_id.remove(&id) {
            Some(slot) => {
                self.kill(slot);
                true
            }
            None => false,
        }
    }

    fn kill(&mut self, slot: u32) {
        if std::mem::replace(&mut self.live[slot as usize], false) {
            self.live_count -= 1;
            self.killed.push(slot);
        }
    }

    /// Live slots matching `f`, in slot order (in parallel: one pass over the columns).
    pub fn matching(&self, f: &Filter) -> Vec<u32> {
        let c = f.compile(&self.cols);
        (0..self.slots() as u32)
            .into_par_iter()
            .filter(|&s| self.live[s as usize] && c.matches(&self.cols, s as usize))
            .collect()
    }

    /// Live slots matching `f` as a bitset (bit s of word s / 64), and how many: what a
    /// search needs to plan, without a list of slots.
    pub fn matching_bits(&self, f: &Filter) -> (Vec<u64>, usize) {
        let c = f.compile(&self.cols);
        let n = self.slots();
        let words: Vec<u64> = (0..n.div_ceil(64))
            .into_par_iter()
            .with_min_len(64)
            .map(|w| {
                let mut word = 0u64;
                for s in w * 64..((w + 1) * 64).min(n) {
                    if self.live[s] && c.matches(&self.cols, s) {
                        word |= 1 << (s - w * 64);
                    }
                }
                word
            })
            .collect();
        let count = words.iter().map(|w| w.count_ones() as usize).sum();
        (words, count)
    }

    /// Live slots, in slot order.
    pub fn live_slots(&self) -> Vec<u32> {
        (0..self.slots() as u32)
            .into_par_iter()
            .filter(|&s| self.live[s as usize])
            .collect()
    }

    pub fn attributes_of(&self, slot: usize) -> Vec<Option<AttrValue>> {
        self.cols.iter().map(|c| c.get(slot)).collect()
    }

    /// The live point with this id.
    pub fn get(&self, id: u64) -> Option<Point> {
        let slot = *self.by_id.get(&id)? as usize;
        Some(Point {
            id,
            vector: self.row(slot).to_vec(),
            attrs: self.attributes_of(slot),
        })
    }

    /// The attributes as JSON (only those set), for answers.
    pub fn attributes_json(&self, slot: usize) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (name, c) in self.settings.attributes.keys().zip(&self.cols) {
            if let Some(v) = c.get(slot) {
                m.insert(name.clone(), v.to_json());
            }
        }
        serde_json::Value::Object(m)
    }

    /// Whether tombstones are worth compacting away now.
    pub fn wants_compaction(&self) -> bool {
        let dead = self.slots() - self.live_count;
        dead > COMPACT_MIN_DEAD && dead > self.live_count
    }

    /// Drops tombstoned slots: the live ones are renumbered in order, the IVF lists with them.
    pub fn compact(&mut self) {
        let keep = self.live_slots();
        let mut new_of = vec![u32::MAX; self.slots()];
        for (n, &s) in keep.iter().enumerate() {
            new_of[s as usize] = n as u32;
        }
        let dim = self.dim;
        let mut vectors = Vec::with_capacity(keep.len() * dim);
        for &s in &keep {
            vectors.extend_from_slice(self.row(s as usize));
        }
        self.vectors = vectors;
        if !self.inv_norms.is_empty() {
            self.inv_norms = keep.iter().map(|&s| self.inv_norms[s as usize]).collect();
        }
        self.ids = keep.iter().map(|&s| self.ids[s as usize]).collect();
        self.live = vec![true; keep.len()];
        self.cols = self.cols.iter().map(|c| c.select(&keep)).collect();
        self.by_id = self
            .ids
            .iter()
            .enumerate()
            .map(|(s, &id)| (id, s as u32))
            .collect();
        if let Some(ivf) = self.ivf.as_mut() {
            ivf.renumber(&new_of);
        }
        self.killed.clear();
        self.layout_epoch += 1;
        self.ivf_epoch += 1;
    }
}
