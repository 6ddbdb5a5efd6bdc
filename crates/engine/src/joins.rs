//! An ingress's multi-row requests in flight (`rows.rs` says how a request splits into rows
//! and how their answers join).
//!
//! Exactly once: the client's request is answered when its last row's answer (or error)
//! arrives, with the joined answer or with the first error any row got, never both and never
//! twice. Each row takes its own place in the in-flight table and in the engine's queue, so
//! `--max-queue` counts rows, not frames.

use crate::inflight::Meta;
use crate::metrics::Metrics;
use crate::rows::{Collected, RowSplit};
use crate::service::Service;
use cohort_proto::ErrorPayload;
use std::sync::Arc;

/// One client request split into rows, waiting for its rows' answers.
struct Join<T> {
    who: Option<T>,
    meta: Meta,
    /// Row answers still owed by the engines.
    left: u32,
    /// The first error a row got: the whole request's answer.
    error: Option<ErrorPayload>,
    got: Collected,
    /// Index into `Rows::splitters` of the service that joins it.
    splitter: u16,
}

/// An ingress's multi-row requests: the services that split, and the requests in flight.
pub(crate) struct Rows<T> {
    splitters: Vec<(u16, Arc<dyn Service>)>,
    joins: Vec<Join<T>>,
    free: Vec<u32>,
    /// A row's request as it is built (reused).
    pub(crate) row_buf: Vec<u8>,
    /// A joined answer as it is written (reused).
    out: Vec<u8>,
    /// Rows answered inline (reused).
    pub(crate) inline: Collected,
}

impl<T> Default for Rows<T> {
    fn default() -> Self {
        Rows {
            splitters: Vec::new(),
            joins: Vec::new(),
            free: Vec::new(),
            row_buf: Vec::new(),
            out: Vec::new(),
            inline: Collected::default(),
        }
    }
}

impl<T> Rows<T> {
    pub(crate) fn new(services: impl IntoIterator<Item = Arc<dyn Service>>) -> Rows<T> {
        Rows {
            splitters: services
                .into_iter()
                .filter(|s| s.row_split().is_some())
                .map(|s| (s.id(), s))
                .collect(),
            ..Rows::default()
        }
    }

    /// The index of `service`'s splitter (None: the service never splits; the usual case
    /// costs one scan of a list that is empty or a handful long).
    pub(crate) fn splitter_of(&self, service: u16) -> Option<usize> {
        self.splitters.iter().position(|(s, _)| *s == service)
    }

    pub(crate) fn split(&self, i: usize) -> &dyn RowSplit {
        self.splitters[i].1.row_split().expect("filtered on it")
    }

    /// Writes row `i` of `payload` into `row_buf` (cleared first).
    pub(crate) fn build_row(&mut self, splitter: usize, payload: &[u8], i: usize) {
        self.row_buf.clear();
        let split = self.splitters[splitter]
            .1
            .row_split()
            .expect("filtered on it");
        split.row(payload, i, &mut self.row_buf);
    }

    /// Starts a request of `rows` rows for `who`: the join it is answered through.
    pub(crate) fn start(&mut self, who: T, meta: Meta, rows: usize, splitter: usize) -> u32 {
        let join = Join {
            who: Some(who),
            meta,
            left: 0,
            error: None,
            got: Collected::default(),
            splitter: splitter as u16,
        };
        let id = match self.free.pop() {
            Some(id) => {
                let old = &mut self.joins[id as usize];
                // Keep the answer buffers' capacity: no allocation per request once warm.
                let got = std::mem::take(&mut old.got);
                *old = Join { got, ..join };
                id
            }
            None => {
                self.joins.push(join);
                (self.joins.len() - 1) as u32
            }
        };
        self.joins[id as usize].got.reset(rows);
        id
    }

    /// A row was sent: one more answer is owed.
    pub(crate) fn sent(&mut self, join: u32) {
        self.joins[join as usize].left += 1;
    }

    /// No row of the request could be sent: it is forgotten and `who` comes back.
    pub(crate) fn cancel(&mut self, join: u32) -> T {
        let j = &mut self.joins[join as usize];
        debug_assert_eq!(j.left, 0);
        self.free.push(join);
        j.who.take().expect("a live join")
    }

    /// Sending stopped after some rows with `e`: the request answers `e` once those rows'
    /// answers are in.
    pub(crate) fn fail(&mut self, join: u32, e: ErrorPayload) {
        self.joins[join as usize].error.get_or_insert(e);
    }

    /// A row's answer (or error). When it was the request's last, the request is answered:
    /// `f` gets the joined answer or the first error, and the metrics count it once.
    pub(crate) fn answered(
        &mut self,
        join: u32,
        row: u32,
        answer: crate::Answer<'_>,
        metrics: &Metrics,
        f: &mut dyn FnMut(T, &Meta, crate::Answer<'_>),
    ) {
        let j = &mut self.joins[join as usize];
        match answer {
            Ok(a) if j.error.is_none() => j.got.put(row as usize, a),
            Ok(_) => {}
            Err(e) => {
                j.error.get_or_insert(e);
            }
        }
        j.left -= 1;
        if j.left > 0 {
            return;
        }
        let who = j.who.take().expect("a live join");
        let meta = j.meta;
        let result = match j.error.take() {
            Some(e) => Err(e),
            None => {
                self.out.clear();
                let split = self.splitters[j.splitter as usize]
                    .1
                    .row_split()
                    .expect("filtered on it");
                split.join(&j.got.answers(), &mut self.out);
                Ok(&self.out[..])
            }
        };
        let label = match &result {
            Ok(_) => "ok",
            Err(e) => e.code.label(),
        };
        metrics.answered(meta.service, label, meta.arrived.elapsed());
        f(who, &meta, result);
        self.free.push(join);
    }

    /// The answer of a request whose rows were all answered inline into `self.inline`.
    pub(crate) fn join_inline(&mut self, splitter: usize) -> &[u8] {
        self.out.clear();
        let split = self.splitters[splitter]
            .1
            .row_split()
            .expect("filtered on it");
        split.join(&self.inline.answers(), &mut self.out);
        &self.out
    }

    /// Requests waiting for rows (tests).
    pub(crate) fn pending(&self) -> usize {
        self.joins.len() - self.free.len()
    }
}
