//! The native binary frames of the collections (service id [`SERVICE_ID`], `collections`):
//! search and upsert over Cohort's TCP transport (docs/protocol.md, "collections (service
//! 7)"). Pure: bytes in, values out and back, no I/O. Every decoder checks lengths before it
//! reads and refuses what it cannot read with a [`crate::Error`] (BAD_REQUEST, TOO_LARGE for
//! a batch over its limit); none panics (property tests below, fuzz target
//! `collections_frames`). What the bytes mean against a collection (its dimension, its
//! schema, the filter) is checked where the request runs (`api::frame`).
//!
//! Request: `op u8 | reserved u8 = 0 | name_len u16 | name`, then the op's body.
//! - search (op 1): `k u16 | nprobe u16 (0 = default) | queries u16 | reserved u16 = 0 |
//!   dim u32 | filter_len u32 (0 = none) | filter (JSON text) | queries x dim f32`.
//! - upsert (op 2): `count u32 | dim u32 | count x (id u64 | dim f32 | attrs_len u32 |
//!   attributes (a JSON object's text, 0 bytes = none))`.
//! - delete (op 3) and get (op 4): `count u32 | count x id u64`.
//!
//! Answers: search `queries u32 | per query: count u32 | count x (id u64 | distance f32)`;
//! upsert `upserted u32`; delete `deleted u32`; get `count u32 | dim u32 | count x (id u64 |
//! dim f32 | attrs_len u32 | attributes)` (an upsert's points, the ids found, in request
//! order). Integers and floats little-endian.

use crate::error::{Error, Kind, Result};
use crate::schema::limits;

/// The wire service id of the collections (docs/protocol.md's table of services).
pub const SERVICE_ID: u16 = 7;
/// The service's name (`UNKNOWN_SERVICE` and metrics say it).
pub const SERVICE_NAME: &str = "collections";
pub const OP_SEARCH: u8 = 1;
pub const OP_UPSERT: u8 = 2;
pub const OP_DELETE: u8 = 3;
pub const OP_GET: u8 = 4;
/// Bytes of the common head before the collection's name.
const HEAD: usize = 4;
/// Bytes of a search body before the filter.
const SEARCH_HEAD: usize = 16;
/// Bytes of an upsert body before the points.
const UPSERT_HEAD: usize = 8;
/// Bytes of one hit in a search answer.
pub const HIT_BYTES: usize = 12;

/// A decoded request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request<'a> {
    Search(SearchFrame<'a>),
    Upsert(UpsertFrame<'a>),
    Delete(IdsFrame<'a>),
    Get(IdsFrame<'a>),
}

impl Request<'_> {
    /// The collection it names.
    pub fn collection(&self) -> &str {
        match self {
            Request::Search(s) => s.collection,
            Request::Upsert(u) => u.collection,
            Request::Delete(d) | Request::Get(d) => d.collection,
        }
    }

    /// Appends the request payload to `out` (what `decode_request` reads back).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::Search(s) => s.encode(out),
            Request::Upsert(u) => u.encode(out),
            Request::Delete(d) => d.encode(OP_DELETE, out),
            Request::Get(g) => g.encode(OP_GET, out),
        }
    }
}

/// The body of a delete or a get: points named by id (at most `limits::MAX_IDS`).
#[derive(Debug, Clone, PartialEq)]
pub struct IdsFrame<'a> {
    pub collection: &'a str,
    pub ids: Vec<u64>,
}

impl IdsFrame<'_> {
    /// Appends the request payload of op `op` ([`OP_DELETE`] or [`OP_GET`]) to `out`.
    pub fn encode(&self, op: u8, out: &mut Vec<u8>) {
        head(op, self.collection, out);
        out.extend_from_slice(&(self.ids.len() as u32).to_le_bytes());
        for id in &self.ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchFrame<'a> {
    pub collection: &'a str,
    /// 1..=1024.
    pub k: u16,
    /// Lists to probe; 0 = the collection's default.
    pub nprobe: u16,
    /// The filter's JSON text (docs/collections.md, "Filters"), parsed where it runs.
    pub filter: Option<&'a str>,
    pub dim: u32,
    /// `queries x dim` values, one query after another.
    pub vectors: Vec<f32>,
}

impl SearchFrame<'_> {
    pub fn queries(&self) -> usize {
        if self.dim == 0 {
            0
        } else {
            self.vectors.len() / self.dim as usize
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PointFrame<'a> {
    pub id: u64,
    pub vector: Vec<f32>,
    /// A JSON object's text; None when the point has no attributes.
    pub attributes: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpsertFrame<'a> {
    pub collection: &'a str,
    pub dim: u32,
    pub points: Vec<PointFrame<'a>>,
}

/// A bounds-checked reader over a payload.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let left = self.b.len() - self.at;
        if n > left {
            return Err(Error::bad(format!(
                "frame too short: {what} needs {n} bytes at offset {}, {left} left",
                self.at
            )));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        let s = self.take(2, what)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn text(&mut self, n: usize, what: &str) -> Result<&'a str> {
        std::str::from_utf8(self.take(n, what)?)
            .map_err(|e| Error::bad(format!("{what} is not UTF-8: {e}")))
    }
    fn f32s(&mut self, n: usize, what: &str) -> Result<Vec<f32>> {
        let bytes = n
            .checked_mul(4)
            .ok_or_else(|| Error::bad(format!("{what}: {n} values overflow")))?;
        Ok(self
            .take(bytes, what)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    fn left(&self) -> usize {
        self.b.len() - self.at
    }
    fn end(&self, what: &str) -> Result<()> {
        match self.left() {
            0 => Ok(()),
            n => Err(Error::bad(format!("{n} bytes after the {what}"))),
        }
    }
}

fn check_dim(dim: u32) -> Result<()> {
    if dim == 0 || dim as usize > limits::MAX_DIM {
        return Err(Error::bad(format!(
            "dim {dim} out of range 1..={}",
            limits::MAX_DIM
        )));
    }
    Ok(())
}

/// Decodes a request payload (the frame's, after any authentication trailer).
pub fn decode_request(payload: &[u8]) -> Result<Request<'_>> {
    let mut c = Cursor { b: payload, at: 0 };
    let op = c.u8("op")?;
    if c.u8("reserved byte")? != 0 {
        return Err(Error::bad("reserved byte 1 must be 0"));
    }
    let name_len = c.u16("name length")? as usize;
    if name_len == 0 || name_len > limits::MAX_NAME {
        return Err(Error::bad(format!(
            "collection name of {name_len} bytes (1..={})",
            limits::MAX_NAME
        )));
    }
    let collection = c.text(name_len, "collection name")?;
    match op {
        OP_SEARCH => decode_search(&mut c, collection).map(Request::Search),
        OP_UPSERT => decode_upsert(&mut c, collection).map(Request::Upsert),
        OP_DELETE => decode_ids(&mut c, collection, "delete").map(Request::Delete),
        OP_GET => decode_ids(&mut c, collection, "get").map(Request::Get),
        _ => Err(Error::bad(format!(
            "unknown op {op} (1 = search, 2 = upsert, 3 = delete, 4 = get)"
        ))),
    }
}

fn decode_search<'a>(c: &mut Cursor<'a>, collection: &'a str) -> Result<SearchFrame<'a>> {
    let k = c.u16("k")?;
    let nprobe = c.u16("nprobe")?;
    let queries = c.u16("queries")?;
    if c.u16("reserved")? != 0 {
        return Err(Error::bad("search: reserved u16 must be 0"));
    }
    let dim = c.u32("dim")?;
    let filter_len = c.u32("filter length")? as usize;
    if k == 0 || k as usize > limits::MAX_K {
        return Err(Error::bad(format!(
            "k {k} out of range 1..={}",
            limits::MAX_K
        )));
    }
    if queries == 0 {
        return Err(Error::bad("no query vectors"));
    }
    if queries as usize > limits::MAX_QUERIES {
        return Err(Error::new(
            Kind::TooLarge,
            format!(
                "{queries} query vectors, over the limit of {}",
                limits::MAX_QUERIES
            ),
        ));
    }
    check_dim(dim)?;
    let filter = match filter_len {
        0 => None,
        n => Some(c.text(n, "filter")?),
    };
    let n = queries as usize * dim as usize;
    if c.left() != n * 4 {
        return Err(Error::bad(format!(
            "search: {} bytes of vectors, but {queries} queries of dim {dim} are {} bytes",
            c.left(),
            n * 4
        )));
    }
    let vectors = c.f32s(n, "query vectors")?;
    c.end("query vectors")?;
    Ok(SearchFrame {
        collection,
        k,
        nprobe,
        filter,
        dim,
        vectors,
    })
}

fn decode_ids<'a>(c: &mut Cursor<'a>, collection: &'a str, op: &str) -> Result<IdsFrame<'a>> {
    let count = c.u32("id count")? as usize;
    if count > limits::MAX_IDS {
        return Err(Error::new(
            Kind::TooLarge,
            format!(
                "{count} ids in one {op}, over the limit of {}",
                limits::MAX_IDS
            ),
        ));
    }
    if c.left() != count * 8 {
        return Err(Error::bad(format!(
            "{op}: {} bytes of ids, but {count} ids are {} bytes",
            c.left(),
            count * 8
        )));
    }
    let ids = (0..count)
        .map(|_| c.u64("id"))
        .collect::<Result<Vec<_>>>()?;
    c.end("ids")?;
    Ok(IdsFrame { collection, ids })
}

fn decode_upsert<'a>(c: &mut Cursor<'a>, collection: &'a str) -> Result<UpsertFrame<'a>> {
    let count = c.u32("point count")? as usize;
    let dim = c.u32("dim")?;
    if count > limits::MAX_BATCH {
        return Err(Error::new(
            Kind::TooLarge,
            format!(
                "{count} points in one upsert, over the limit of {}",
                limits::MAX_BATCH
            ),
        ));
    }
    check_dim(dim)?;
    let points = decode_points(c, count, dim, "upsert")?;
    c.end("points")?;
    Ok(UpsertFrame {
        collection,
        dim,
        points,
    })
}

/// `count` points of `dim` values each (an upsert's, a get answer's).
fn decode_points<'a>(
    c: &mut Cursor<'a>,
    count: usize,
    dim: u32,
    op: &str,
) -> Result<Vec<PointFrame<'a>>> {
    // Each point takes at least its id, its vector and its attributes' length: a count the
    // bytes cannot hold is refused before anything is allocated for it.
    let least = 8 + 4 * dim as usize + 4;
    if count.saturating_mul(least) > c.left() {
        return Err(Error::bad(format!(
            "{op}: {count} points of dim {dim} need at least {} bytes, the frame has {}",
            count.saturating_mul(least),
            c.left()
        )));
    }
    let mut points = Vec::with_capacity(count);
    for i in 0..count {
        let what = format!("point {i}");
        let id = c.u64(&what)?;
        let vector = c.f32s(dim as usize, &what)?;
        let len = c.u32(&what)? as usize;
        let attributes = match len {
            0 => None,
            n => Some(c.text(n, &format!("point {i}'s attributes"))?),
        };
        points.push(PointFrame {
            id,
            vector,
            attributes,
        });
    }
    Ok(points)
}

fn head(op: u8, collection: &str, out: &mut Vec<u8>) {
    out.push(op);
    out.push(0);
    out.extend_from_slice(&(collection.len() as u16).to_le_bytes());
    out.extend_from_slice(collection.as_bytes());
}

fn floats(v: &[f32], out: &mut Vec<u8>) {
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

impl SearchFrame<'_> {
    /// Appends the request payload to `out` (what `decode_request` reads back).
    pub fn encode(&self, out: &mut Vec<u8>) {
        head(OP_SEARCH, self.collection, out);
        out.extend_from_slice(&self.k.to_le_bytes());
        out.extend_from_slice(&self.nprobe.to_le_bytes());
        out.extend_from_slice(&(self.queries() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.dim.to_le_bytes());
        let f = self.filter.unwrap_or("");
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f.as_bytes());
        floats(&self.vectors, out);
    }
}

impl UpsertFrame<'_> {
    /// Appends the request payload to `out` (what `decode_request` reads back).
    pub fn encode(&self, out: &mut Vec<u8>) {
        head(OP_UPSERT, self.collection, out);
        out.extend_from_slice(&(self.points.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.dim.to_le_bytes());
        for p in &self.points {
            out.extend_from_slice(&p.id.to_le_bytes());
            floats(&p.vector, out);
            let a = p.attributes.unwrap_or("");
            out.extend_from_slice(&(a.len() as u32).to_le_bytes());
            out.extend_from_slice(a.as_bytes());
        }
    }
}

/// Bytes of a search request's fixed part (head, name, search head): what a client subtracts
/// from the frame limit to size its batch.
pub fn search_overhead(collection: &str) -> usize {
    HEAD + collection.len() + SEARCH_HEAD
}

/// Bytes of an upsert request's fixed part.
pub fn upsert_overhead(collection: &str) -> usize {
    HEAD + collection.len() + UPSERT_HEAD
}

/// Bytes of a delete's or a get's fixed part (then 8 bytes an id).
pub fn ids_overhead(collection: &str) -> usize {
    HEAD + collection.len() + 4
}

/// Bytes of one point of `dim` values and `attrs` bytes of attributes in a get answer.
pub fn point_bytes(dim: usize, attrs: usize) -> usize {
    8 + 4 * dim + 4 + attrs
}

/// Bytes of a search answer for `queries` queries of at most `k` hits each.
pub fn search_answer_max(queries: usize, k: usize) -> usize {
    4 + queries * (4 + k * HIT_BYTES)
}

/// One query's hits: (point id, distance), nearest first.
pub type Hits = Vec<(u64, f32)>;

/// Appends a search answer to `out`.
pub fn encode_search_answer<'h>(
    results: impl ExactSizeIterator<Item = &'h [(u64, f32)]>,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&(results.len() as u32).to_le_bytes());
    for hits in results {
        out.extend_from_slice(&(hits.len() as u32).to_le_bytes());
        for (id, d) in hits {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&d.to_le_bytes());
        }
    }
}

/// Reads a search answer back (clients, tests).
pub fn decode_search_answer(payload: &[u8]) -> Result<Vec<Hits>> {
    let mut c = Cursor { b: payload, at: 0 };
    let queries = c.u32("query count")? as usize;
    if queries > limits::MAX_QUERIES {
        return Err(Error::bad(format!("answer of {queries} queries")));
    }
    let mut out = Vec::with_capacity(queries);
    for q in 0..queries {
        let n = c.u32("hit count")? as usize;
        if n > limits::MAX_K || n * HIT_BYTES > c.left() {
            return Err(Error::bad(format!("query {q}: {n} hits do not fit")));
        }
        let mut hits = Vec::with_capacity(n);
        for _ in 0..n {
            let id = c.u64("hit id")?;
            let d = f32::from_bits(c.u32("hit distance")?);
            hits.push((id, d));
        }
        out.push(hits);
    }
    c.end("search answer")?;
    Ok(out)
}

/// Appends an upsert answer (the points upserted) to `out`.
pub fn encode_upsert_answer(upserted: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&upserted.to_le_bytes());
}

/// Reads an upsert answer back.
pub fn decode_upsert_answer(payload: &[u8]) -> Result<u32> {
    let mut c = Cursor { b: payload, at: 0 };
    let n = c.u32("upserted")?;
    c.end("upsert answer")?;
    Ok(n)
}

/// Appends a delete answer (the points deleted) to `out`.
pub fn encode_delete_answer(deleted: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&deleted.to_le_bytes());
}

/// Reads a delete answer back.
pub fn decode_delete_answer(payload: &[u8]) -> Result<u32> {
    let mut c = Cursor { b: payload, at: 0 };
    let n = c.u32("deleted")?;
    c.end("delete answer")?;
    Ok(n)
}

/// Appends a get answer to `out`: the points found, each of `dim` values.
pub fn encode_get_answer(dim: u32, points: &[PointFrame<'_>], out: &mut Vec<u8>) {
    out.extend_from_slice(&(points.len() as u32).to_le_bytes());
    out.extend_from_slice(&dim.to_le_bytes());
    for p in points {
        out.extend_from_slice(&p.id.to_le_bytes());
        floats(&p.vector, out);
        let a = p.attributes.unwrap_or("");
        out.extend_from_slice(&(a.len() as u32).to_le_bytes());
        out.extend_from_slice(a.as_bytes());
    }
}

/// Reads a get answer back: `(dim, points)`.
pub fn decode_get_answer(payload: &[u8]) -> Result<(u32, Vec<PointFrame<'_>>)> {
    let mut c = Cursor { b: payload, at: 0 };
    let count = c.u32("point count")? as usize;
    let dim = c.u32("dim")?;
    if count > limits::MAX_IDS {
        return Err(Error::bad(format!("answer of {count} points")));
    }
    check_dim(dim)?;
    let points = decode_points(&mut c, count, dim, "get answer")?;
    c.end("get answer")?;
    Ok((dim, points))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn search_frame(dim: u32, queries: usize) -> SearchFrame<'static> {
        SearchFrame {
            collection: "items",
            k: 10,
            nprobe: 0,
            filter: Some(r#"{"eq":["color","red"]}"#),
            dim,
            vectors: (0..dim as usize * queries).map(|i| i as f32).collect(),
        }
    }

    #[test]
    fn search_layout_is_the_documented_one() {
        let mut b = Vec::new();
        search_frame(2, 1).encode(&mut b);
        let f = br#"{"eq":["color","red"]}"#;
        let mut want = vec![1, 0, 5, 0];
        want.extend_from_slice(b"items");
        want.extend_from_slice(&[10, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]);
        want.extend_from_slice(&(f.len() as u32).to_le_bytes());
        want.extend_from_slice(f);
        want.extend_from_slice(&0f32.to_le_bytes());
        want.extend_from_slice(&1f32.to_le_bytes());
        assert_eq!(b, want);
        assert_eq!(
            b.len(),
            search_overhead("items") + f.len() + 8,
            "the overhead is the fixed part"
        );
    }

    #[test]
    fn malformed_requests_say_what_is_wrong() {
        let mut good = Vec::new();
        search_frame(4, 2).encode(&mut good);
        let err = |b: &[u8]| decode_request(b).unwrap_err();
        // Every truncation is refused.
        for n in 0..good.len() {
            assert_eq!(err(&good[..n]).kind, Kind::BadRequest, "cut at {n}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(err(&long).message.contains("vectors"));
        let mut op = good.clone();
        op[0] = 9;
        assert!(err(&op).message.contains("unknown op 9"));
        let mut k0 = good.clone();
        k0[9] = 0; // k = 0 (k is at 4 + 5)
        assert!(err(&k0).message.contains("k 0"), "{:?}", err(&k0));
        let mut many = Vec::new();
        SearchFrame {
            vectors: vec![0.0; 1025],
            dim: 1,
            ..search_frame(1, 1)
        }
        .encode(&mut many);
        assert_eq!(err(&many).kind, Kind::TooLarge);
        let mut big = Vec::new();
        UpsertFrame {
            collection: "c",
            dim: 1,
            points: Vec::new(),
        }
        .encode(&mut big);
        big[5..9].copy_from_slice(&(limits::MAX_BATCH as u32 + 1).to_le_bytes());
        assert_eq!(err(&big).kind, Kind::TooLarge);
        big[5..9].copy_from_slice(&1000u32.to_le_bytes());
        assert!(err(&big).message.contains("need at least"));
    }

    #[test]
    fn ids_layout_and_lying_counts() {
        let f = IdsFrame {
            collection: "c",
            ids: vec![7, 1 << 40],
        };
        let mut b = Vec::new();
        f.encode(OP_DELETE, &mut b);
        let mut want = vec![3, 0, 1, 0, b'c', 2, 0, 0, 0];
        want.extend_from_slice(&7u64.to_le_bytes());
        want.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(b, want);
        assert_eq!(b.len(), ids_overhead("c") + 16);
        assert_eq!(decode_request(&b).unwrap(), Request::Delete(f.clone()));
        b[0] = OP_GET;
        assert_eq!(decode_request(&b).unwrap(), Request::Get(f));
        let err = |b: &[u8]| decode_request(b).unwrap_err();
        for n in 0..b.len() {
            assert_eq!(err(&b[..n]).kind, Kind::BadRequest, "cut at {n}");
        }
        // A count saying more or fewer ids than the bytes hold.
        for lie in [0u32, 1, 3, u32::MAX >> 20] {
            let mut l = b.clone();
            l[5..9].copy_from_slice(&lie.to_le_bytes());
            assert!(
                err(&l).message.contains("bytes of ids"),
                "{lie}: {:?}",
                err(&l)
            );
        }
        let mut big = b.clone();
        big[5..9].copy_from_slice(&(limits::MAX_IDS as u32 + 1).to_le_bytes());
        assert_eq!(err(&big).kind, Kind::TooLarge);
        let mut op = b.clone();
        op[0] = 5;
        assert!(err(&op).message.contains("unknown op 5"));
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-z_][a-z0-9_-]{0,63}"
    }

    proptest! {
        #[test]
        fn search_round_trips(
            name in name(), k in 1u16..=1024, nprobe in any::<u16>(), dim in 1u32..16,
            queries in 1usize..8, filter in proptest::option::of("[ -~]{1,40}"), seed in any::<u32>(),
        ) {
            let vectors: Vec<f32> = (0..dim as usize * queries)
                .map(|i| (i as u32 ^ seed) as f32 * 0.5)
                .collect();
            let f = SearchFrame { collection: &name, k, nprobe, filter: filter.as_deref(), dim, vectors };
            let mut b = Vec::new();
            f.encode(&mut b);
            prop_assert_eq!(decode_request(&b).unwrap(), Request::Search(f.clone()));
            prop_assert_eq!(f.queries(), queries);
        }

        #[test]
        fn upsert_round_trips(
            name in name(), dim in 1u32..8,
            points in proptest::collection::vec((any::<u64>(), proptest::option::of("[ -~]{1,30}")), 0..20),
        ) {
            let points: Vec<PointFrame<'_>> = points
                .iter()
                .map(|(id, a)| PointFrame { id: *id, vector: vec![*id as f32; dim as usize], attributes: a.as_deref() })
                .collect();
            let f = UpsertFrame { collection: &name, dim, points };
            let mut b = Vec::new();
            f.encode(&mut b);
            prop_assert_eq!(decode_request(&b).unwrap(), Request::Upsert(f.clone()));
        }

        #[test]
        fn ids_round_trip(name in name(), ids in proptest::collection::vec(any::<u64>(), 0..50), get in any::<bool>()) {
            let f = IdsFrame { collection: &name, ids };
            let r = if get { Request::Get(f) } else { Request::Delete(f) };
            let mut b = Vec::new();
            r.encode(&mut b);
            prop_assert_eq!(decode_request(&b).unwrap(), r);
        }

        #[test]
        fn get_answers_round_trip(
            dim in 1u32..8,
            points in proptest::collection::vec((any::<u64>(), proptest::option::of("[ -~]{1,30}")), 0..20),
            deleted in any::<u32>(),
        ) {
            let points: Vec<PointFrame<'_>> = points
                .iter()
                .map(|(id, a)| PointFrame { id: *id, vector: vec![*id as f32; dim as usize], attributes: a.as_deref() })
                .collect();
            let mut b = Vec::new();
            encode_get_answer(dim, &points, &mut b);
            prop_assert_eq!(
                b.len(),
                8 + points.iter().map(|p| point_bytes(dim as usize, p.attributes.map_or(0, str::len))).sum::<usize>()
            );
            prop_assert_eq!(decode_get_answer(&b).unwrap(), (dim, points));
            let mut d = Vec::new();
            encode_delete_answer(deleted, &mut d);
            prop_assert_eq!(decode_delete_answer(&d).unwrap(), deleted);
        }

        #[test]
        fn answers_round_trip(
            results in proptest::collection::vec(
                proptest::collection::vec((any::<u64>(), -1e6f32..1e6), 0..20), 0..10),
            upserted in any::<u32>(),
        ) {
            let mut b = Vec::new();
            encode_search_answer(results.iter().map(|h| &h[..]), &mut b);
            prop_assert_eq!(b.len(), 4 + results.iter().map(|h| 4 + h.len() * HIT_BYTES).sum::<usize>());
            prop_assert_eq!(decode_search_answer(&b).unwrap(), results);
            let mut u = Vec::new();
            encode_upsert_answer(upserted, &mut u);
            prop_assert_eq!(decode_upsert_answer(&u).unwrap(), upserted);
        }

        /// Any bytes: an answer or an error, never a panic; and what decodes encodes back
        /// to the same bytes (nothing is read loosely).
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(r) = decode_request(&b) {
                let mut again = Vec::new();
                r.encode(&mut again);
                prop_assert_eq!(&again, &b);
            }
            let _ = decode_search_answer(&b);
            let _ = decode_upsert_answer(&b);
            let _ = decode_delete_answer(&b);
            let _ = decode_get_answer(&b);
        }

        /// A valid frame with one byte changed or cut short: never a panic.
        #[test]
        fn mutated_frames_never_panic(
            queries in 1usize..4, at in any::<prop::sample::Index>(), byte in any::<u8>(),
            cut in any::<prop::sample::Index>(), upsert in any::<bool>(), ids in 0u8..3,
        ) {
            let mut b = Vec::new();
            if ids > 0 {
                let f = IdsFrame { collection: "c", ids: (0..queries as u64).collect() };
                f.encode(if ids == 1 { OP_DELETE } else { OP_GET }, &mut b);
            } else if upsert {
                UpsertFrame { collection: "c", dim: 3, points: (0..queries as u64)
                    .map(|id| PointFrame { id, vector: vec![1.0; 3], attributes: Some("{}") }).collect() }
                    .encode(&mut b);
            } else {
                search_frame(3, queries).encode(&mut b);
            }
            let i = at.index(b.len());
            b[i] = byte;
            let _ = decode_request(&b);
            let _ = decode_request(&b[..cut.index(b.len())]);
        }
    }
}
