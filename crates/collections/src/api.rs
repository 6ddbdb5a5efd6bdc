//! The REST JSON surface, independent of any HTTP server: a method, a path under
//! `/v1/collections` and a body in; a status and a JSON body out. The gateway
//! (crates/net) hands requests here on its blocking pool (a write waits for an fsync).

use crate::collection::Collection;
use crate::error::{Error, Kind, Result};
use crate::filter::Filter;
use crate::frames::{self, IdsFrame, PointFrame, Request, SearchFrame, UpsertFrame};
use crate::ops::{check_batch_len, check_unique, Op, Point};
use crate::schema::{check_attributes, check_query, check_vector, limits, Settings};
use crate::store::Store;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The path prefix served here.
pub const PREFIX: &str = "/v1/collections";

pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// Methods the path takes (for 405's `Allow`), when the method was refused.
    pub allow: Option<&'static str>,
}

impl Answer {
    fn ok(v: Value) -> Answer {
        Answer {
            status: 200,
            body: v.to_string().into_bytes(),
            allow: None,
        }
    }
    pub fn error(e: &Error) -> Answer {
        Answer {
            status: e.kind.http_status(),
            body: json!({"error": e.kind.name(), "message": e.message})
                .to_string()
                .into_bytes(),
            allow: None,
        }
    }
}

/// Whether `path` is one of this module's.
pub fn owns(path: &str) -> bool {
    path == PREFIX
        || path
            .strip_prefix(PREFIX)
            .is_some_and(|r| r.starts_with('/'))
}

/// Answers one request.
pub fn handle(store: &Store, method: &str, path: &str, body: &[u8]) -> Answer {
    let rest = path.strip_prefix(PREFIX).unwrap_or("");
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let allowed = match parts.as_slice() {
        [] => "GET",
        [_] => "GET, PUT, DELETE",
        [_, "upsert" | "delete" | "get" | "search"] => "POST",
        _ => {
            return Answer::error(&Error::new(
                Kind::NotFound,
                format!(
                    "no route {path} (GET {PREFIX}, PUT|GET|DELETE {PREFIX}/NAME, POST \
                     {PREFIX}/NAME/upsert|delete|get|search)"
                ),
            ))
        }
    };
    let r = match (method, parts.as_slice()) {
        ("GET", []) => Ok(json!({
            "collections": store.list().iter().map(|c| describe(c)).collect::<Vec<_>>()
        })),
        ("PUT", [name]) => {
            parse::<Settings>(body).and_then(|s| Ok(describe(&*store.create(name, s)?)))
        }
        ("GET", [name]) => store.get(name).map(|c| describe(&c)),
        ("DELETE", [name]) => store
            .drop_collection(name)
            .map(|_| json!({ "dropped": name })),
        ("POST", [name, op]) => store.get(name).and_then(|c| match *op {
            "upsert" => upsert(&c, body),
            "delete" => delete(&c, body),
            "get" => get(&c, body),
            _ => search(&c, body),
        }),
        _ => {
            // The gateway's own name for it (crates/net/src/http.rs).
            let msg = format!("{method} is not allowed on {path} (allowed: {allowed})");
            return Answer {
                status: 405,
                body: json!({"error": "METHOD_NOT_ALLOWED", "message": msg})
                    .to_string()
                    .into_bytes(),
                allow: Some(allowed),
            };
        }
    };
    match r {
        Ok(v) => Answer::ok(v),
        Err(e) => Answer::error(&e),
    }
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| Error::bad(format!("body: {e}")))
}

fn describe(c: &Collection) -> Value {
    let mut v = serde_json::to_value(&c.settings).expect("settings serialise");
    v["name"] = json!(c.name);
    v["count"] = json!(c.count());
    let (on_device, on_cpu) = c.search_stats();
    let (passes, in_passes) = c.pass_stats();
    v["searches"] = json!({"device": c.device(), "on_device": on_device, "on_cpu": on_cpu,
                           "selective_on_cpu": c.selective_on_cpu(),
                           "device_passes": passes, "requests_in_passes": in_passes});
    v
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PointIn {
    pub id: u64,
    pub vector: Vec<f64>,
    #[serde(default)]
    pub attributes: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpsertReq {
    points: Vec<PointIn>,
}

/// The points of an upsert, each checked against the schema; any fault refuses the batch.
pub(crate) fn check_points(s: &Settings, points: Vec<PointIn>) -> Result<Vec<Point>> {
    check_batch_len("points", points.len(), limits::MAX_BATCH)?;
    let points = points
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let what = format!("point {i} (id {})", p.id);
            Ok(Point {
                id: p.id,
                vector: check_vector(s, &p.vector, &what)?,
                attrs: check_attributes(s, p.attributes.as_ref(), &what)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    check_unique(&points)?;
    Ok(points)
}

fn upsert(c: &Arc<Collection>, body: &[u8]) -> Result<Value> {
    let r: UpsertReq = parse(body)?;
    let points = check_points(&c.settings, r.points)?;
    if points.is_empty() {
        return Ok(json!({ "upserted": 0 })); // nothing to log
    }
    let n = c.write(Op::Upsert(points))?;
    Ok(json!({ "upserted": n }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteReq {
    #[serde(default)]
    ids: Option<Vec<u64>>,
    #[serde(default)]
    filter: Option<Value>,
}

fn delete(c: &Arc<Collection>, body: &[u8]) -> Result<Value> {
    let r: DeleteReq = parse(body)?;
    let op = match (r.ids, r.filter) {
        (Some(ids), None) => {
            check_batch_len("ids", ids.len(), limits::MAX_IDS)?;
            if ids.is_empty() {
                return Ok(json!({ "deleted": 0 }));
            }
            Op::DeleteIds(ids)
        }
        (None, Some(f)) => Op::DeleteFilter(Filter::parse(&f, &c.settings)?, f.to_string()),
        _ => return Err(Error::bad("delete takes either \"ids\" or \"filter\"")),
    };
    let n = c.write(op)?;
    Ok(json!({ "deleted": n }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetReq {
    ids: Vec<u64>,
}

fn get(c: &Collection, body: &[u8]) -> Result<Value> {
    let r: GetReq = parse(body)?;
    check_batch_len("ids", r.ids.len(), limits::MAX_IDS)?;
    let d = c.read();
    let points: Vec<Value> = r
        .ids
        .iter()
        .filter_map(|&id| {
            let slot = *d.by_id.get(&id)? as usize;
            Some(json!({
                "id": id,
                "vector": d.row(slot),
                "attributes": d.attributes_json(slot),
            }))
        })
        .collect();
    Ok(json!({ "points": points }))
}

fn default_k() -> usize {
    10
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchReq {
    vectors: Vec<Vec<f64>>,
    #[serde(default = "default_k")]
    k: usize,
    #[serde(default)]
    nprobe: Option<usize>,
    #[serde(default)]
    filter: Option<Value>,
    #[serde(default)]
    with_attributes: bool,
}

fn search(c: &Collection, body: &[u8]) -> Result<Value> {
    let r: SearchReq = parse(body)?;
    if r.vectors.is_empty() {
        return Err(Error::bad("no query vectors"));
    }
    check_batch_len("query vectors", r.vectors.len(), limits::MAX_QUERIES)?;
    if r.k == 0 || r.k > limits::MAX_K {
        return Err(Error::bad(format!(
            "k {} out of range 1..={}",
            r.k,
            limits::MAX_K
        )));
    }
    if r.nprobe == Some(0) {
        return Err(Error::bad("nprobe must be at least 1"));
    }
    let queries = r
        .vectors
        .iter()
        .enumerate()
        .map(|(i, v)| check_query(&c.settings, v, &format!("query {i}")))
        .collect::<Result<Vec<_>>>()?;
    let filter = r
        .filter
        .as_ref()
        .map(|f| Filter::parse(f, &c.settings))
        .transpose()?;
    let d = c.read();
    let req = crate::accel::SearchRequest {
        queries: &queries,
        k: r.k,
        nprobe: r.nprobe,
        filter: filter.as_ref(),
    };
    let (answers, _plan, _ran) = c.search(&d, &req)?;
    let results: Vec<Value> = answers
        .iter()
        .map(|hits| {
            Value::Array(
                hits.iter()
                    .map(|n| {
                        let slot = n.id as usize;
                        let mut h = json!({ "id": d.ids[slot], "distance": n.distance });
                        if r.with_attributes {
                            h["attributes"] = d.attributes_json(slot);
                        }
                        h
                    })
                    .collect(),
            )
        })
        .collect();
    Ok(json!({ "results": results }))
}

/// Answers one native frame (service [`frames::SERVICE_ID`], docs/protocol.md): the answer's
/// payload, or the error to send as an error frame. The same checks, the same write path
/// (acknowledged once durable) and the same search as the JSON routes; `max_answer` is the
/// largest answer payload the transport carries (a search whose answer could exceed it is
/// refused TOO_LARGE before it runs).
pub fn frame(store: &Store, payload: &[u8], max_answer: usize) -> Result<Vec<u8>> {
    let req = frames::decode_request(payload)?;
    let c = store.get(req.collection())?;
    match req {
        Request::Search(s) => search_frame(&c, &s, max_answer),
        Request::Upsert(u) => upsert_frame(&c, u),
        Request::Delete(d) => delete_frame(&c, d),
        Request::Get(g) => get_frame(&c, &g, max_answer),
    }
}

/// A delete by ids: answered once durable, as over REST (`deleted` counts the ids that held
/// a point).
fn delete_frame(c: &Arc<Collection>, d: IdsFrame<'_>) -> Result<Vec<u8>> {
    let n = if d.ids.is_empty() {
        0 // nothing to log
    } else {
        c.write(Op::DeleteIds(d.ids))?
    };
    let mut out = Vec::with_capacity(4);
    frames::encode_delete_answer(n as u32, &mut out);
    Ok(out)
}

/// A get by ids: the points found, in request order (ids with no point are left out).
/// An answer over `max_answer` is refused TOO_LARGE (nothing changes; ask for fewer ids).
fn get_frame(c: &Collection, g: &IdsFrame<'_>, max_answer: usize) -> Result<Vec<u8>> {
    let d = c.read();
    let found: Vec<(u64, Vec<f32>, String)> = g
        .ids
        .iter()
        .filter_map(|&id| {
            let slot = *d.by_id.get(&id)? as usize;
            let attrs = match d.attributes_json(slot) {
                Value::Object(m) if m.is_empty() => String::new(),
                v => v.to_string(),
            };
            Some((id, d.row(slot).to_vec(), attrs))
        })
        .collect();
    drop(d);
    let dim = c.settings.dim;
    let size = 8 + found
        .iter()
        .map(|(_, _, a)| frames::point_bytes(dim, a.len()))
        .sum::<usize>();
    if size > max_answer {
        return Err(Error::new(
            Kind::TooLarge,
            format!(
                "the {} points found are {size} bytes, over the frame's {max_answer}: \
                 ask for fewer ids a request",
                found.len()
            ),
        ));
    }
    let points: Vec<PointFrame<'_>> = found
        .iter()
        .map(|(id, v, a)| PointFrame {
            id: *id,
            vector: v.clone(),
            attributes: (!a.is_empty()).then_some(a.as_str()),
        })
        .collect();
    let mut out = Vec::with_capacity(size);
    frames::encode_get_answer(dim as u32, &points, &mut out);
    Ok(out)
}

fn check_dim(c: &Collection, dim: u32) -> Result<()> {
    if dim as usize != c.settings.dim {
        return Err(Error::bad(format!(
            "dimension {dim} but collection {:?}'s is {}",
            c.name, c.settings.dim
        )));
    }
    Ok(())
}

fn upsert_frame(c: &Arc<Collection>, u: UpsertFrame<'_>) -> Result<Vec<u8>> {
    check_dim(c, u.dim)?;
    let points = u
        .points
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let attributes = match p.attributes {
                None => None,
                Some(text) => match serde_json::from_str::<Value>(text) {
                    Ok(Value::Object(m)) => Some(m),
                    Ok(_) => {
                        return Err(Error::bad(format!(
                            "point {i} (id {}): attributes must be a JSON object",
                            p.id
                        )))
                    }
                    Err(e) => {
                        return Err(Error::bad(format!(
                            "point {i} (id {}): attributes: {e}",
                            p.id
                        )))
                    }
                },
            };
            Ok(PointIn {
                id: p.id,
                vector: p.vector.iter().map(|&x| x as f64).collect(),
                attributes,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let points = check_points(&c.settings, points)?;
    let mut out = Vec::with_capacity(4);
    let n = if points.is_empty() {
        0 // nothing to log
    } else {
        c.write(Op::Upsert(points))?
    };
    frames::encode_upsert_answer(n as u32, &mut out);
    Ok(out)
}

fn search_frame(c: &Collection, s: &SearchFrame<'_>, max_answer: usize) -> Result<Vec<u8>> {
    check_dim(c, s.dim)?;
    let (queries, k) = (s.queries(), s.k as usize);
    let most = frames::search_answer_max(queries, k);
    if most > max_answer {
        return Err(Error::new(
            Kind::TooLarge,
            format!(
                "{queries} queries of k {k} may answer {most} bytes, over the frame's {max_answer}: \
                 send fewer queries a request or a smaller k"
            ),
        ));
    }
    let vectors = s
        .vectors
        .chunks_exact(s.dim as usize)
        .enumerate()
        .map(|(i, v)| {
            let v: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            check_query(&c.settings, &v, &format!("query {i}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let filter = match s.filter {
        None => None,
        Some(text) => {
            let v: Value = serde_json::from_str(text)
                .map_err(|e| Error::bad(format!("filter is not JSON: {e}")))?;
            Some(Filter::parse(&v, &c.settings)?)
        }
    };
    let d = c.read();
    let req = crate::accel::SearchRequest {
        queries: &vectors,
        k,
        nprobe: (s.nprobe > 0).then_some(s.nprobe as usize),
        filter: filter.as_ref(),
    };
    let (answers, _plan, _ran) = c.search(&d, &req)?;
    let hits: Vec<Vec<(u64, f32)>> = answers
        .iter()
        .map(|h| {
            h.iter()
                .map(|n| (d.ids[n.id as usize], n.distance))
                .collect()
        })
        .collect();
    drop(d);
    let mut out = Vec::with_capacity(frames::search_answer_max(queries, k));
    frames::encode_search_answer(hits.iter().map(|h| &h[..]), &mut out);
    Ok(out)
}
