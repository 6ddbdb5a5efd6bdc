//! Requests that carry several rows in one frame (knn: up to 1 024 query vectors). The
//! ingress splits such a request into one ordinary request per row, so every row batches with
//! the rest of the traffic on whatever engine serves the service (the engines and the GPU
//! backends only ever see one-row requests), and joins the rows' answers into the one answer
//! its client gets. The layout of rows and of the joined answer is the service's
//! ([`RowSplit`], declared by [`crate::Service::row_split`]); the ingress's bookkeeping is in
//! `joins.rs`.

use cohort_proto::ErrorPayload;

/// How a service's multi-row requests split and join (see the module's text).
pub trait RowSplit: Send + Sync {
    /// None for a request the engine takes as it is (today's one-row form: no copy, no join).
    /// Some(n), n >= 1, for a request to split into n rows. A request whose rows are malformed
    /// or too many is refused here, before any row is sent (BAD_REQUEST / TOO_LARGE).
    fn rows(&self, payload: &[u8]) -> Result<Option<usize>, ErrorPayload>;
    /// Appends row `i`'s own request (a one-row request, exactly as a client could send it)
    /// to `out`, for a payload `rows` accepted.
    fn row(&self, payload: &[u8], i: usize, out: &mut Vec<u8>);
    /// Appends the answer of a request of `answers.len()` rows, from its rows' answers.
    fn join(&self, answers: &RowAnswers<'_>, out: &mut Vec<u8>);
}

/// The rows' answers of one request, in row order.
pub struct RowAnswers<'a> {
    buf: &'a [u8],
    spans: &'a [(u32, u32)],
}

impl<'a> RowAnswers<'a> {
    pub fn len(&self) -> usize {
        self.spans.len()
    }
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
    pub fn get(&self, i: usize) -> &'a [u8] {
        let (at, len) = self.spans[i];
        &self.buf[at as usize..(at + len) as usize]
    }
}

/// Answers collected for rows, in arrival order in one buffer, with each row's place:
/// reused between requests (no allocation per request once warm).
#[derive(Default)]
pub(crate) struct Collected {
    buf: Vec<u8>,
    spans: Vec<(u32, u32)>,
}

impl Collected {
    pub(crate) fn reset(&mut self, rows: usize) {
        self.buf.clear();
        self.spans.clear();
        self.spans.resize(rows, (0, 0));
    }
    pub(crate) fn put(&mut self, row: usize, answer: &[u8]) {
        self.spans[row] = (self.buf.len() as u32, answer.len() as u32);
        self.buf.extend_from_slice(answer);
    }
    pub(crate) fn answers(&self) -> RowAnswers<'_> {
        RowAnswers {
            buf: &self.buf,
            spans: &self.spans,
        }
    }
}
