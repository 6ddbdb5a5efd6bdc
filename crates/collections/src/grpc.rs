//! The gRPC service's calls (`cohort.collections.v1.Collections`, the messages of
//! `cohort-collections-grpc`), answered for a [`Store`]. Each message is read into what the
//! REST routes read (`api`: the same checks, the same write path acknowledged once durable,
//! the same search), so the three surfaces (REST, frames, gRPC) cannot drift apart: a
//! filter message becomes the JSON filter it mirrors and is parsed by `Filter::parse`, which
//! is also what the log keeps for a delete by filter.

use crate::api::{check_points, PointIn};
use crate::collection::Collection;
use crate::error::{Error, Kind, Result};
use crate::filter::Filter;
use crate::ops::{check_batch_len, Op};
use crate::schema::{limits, AttrType, Element, Metric, Settings};
use crate::store::Store;
use cohort_collections_grpc as pb;
use pb::{Code, Status};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A collections error as a gRPC status whose message starts with its code name
/// (docs/protocol.md): TOO_LARGE, OVERLOADED and a full disk are RESOURCE_EXHAUSTED (a
/// bound: the client may try again with less or later), as the OIP service answers its own.
pub fn status(e: &Error) -> Status {
    let code = match e.kind {
        Kind::BadRequest => Code::InvalidArgument,
        Kind::NotFound => Code::NotFound,
        Kind::Conflict => Code::AlreadyExists,
        Kind::TooLarge | Kind::Overloaded | Kind::Storage => Code::ResourceExhausted,
        Kind::Unavailable => Code::Unavailable,
        Kind::Internal => Code::Internal,
    };
    pb::status(code, e.kind.name(), &e.message)
}

fn metric(m: Metric) -> pb::Metric {
    match m {
        Metric::L2 => pb::Metric::L2,
        Metric::Ip => pb::Metric::Ip,
        Metric::Cosine => pb::Metric::Cosine,
    }
}

fn element(e: Element) -> pb::Element {
    match e {
        Element::F32 => pb::Element::F32,
        Element::F16 => pb::Element::F16,
        Element::U8 => pb::Element::U8,
    }
}

fn attr_type(t: AttrType) -> pb::AttributeType {
    match t {
        AttrType::Integer => pb::AttributeType::Integer,
        AttrType::Float => pb::AttributeType::Float,
        AttrType::Keyword => pb::AttributeType::Keyword,
    }
}

/// The settings a create asks for. Enum fields arrive as plain integers: a value the proto
/// does not define is refused, not read as a default.
fn settings(r: &pb::CreateCollectionRequest) -> Result<Settings> {
    let metric = match pb::Metric::try_from(r.metric) {
        Ok(pb::Metric::Unspecified | pb::Metric::L2) => Metric::L2,
        Ok(pb::Metric::Ip) => Metric::Ip,
        Ok(pb::Metric::Cosine) => Metric::Cosine,
        Err(_) => return Err(Error::bad(format!("metric {} is not a Metric", r.metric))),
    };
    let element = match pb::Element::try_from(r.element) {
        Ok(pb::Element::Unspecified | pb::Element::F32) => Element::F32,
        Ok(pb::Element::F16) => Element::F16,
        Ok(pb::Element::U8) => Element::U8,
        Err(_) => {
            return Err(Error::bad(format!(
                "element {} is not an Element",
                r.element
            )))
        }
    };
    let mut attributes = BTreeMap::new();
    for (name, &t) in &r.attributes {
        let t = match pb::AttributeType::try_from(t) {
            Ok(pb::AttributeType::Integer) => AttrType::Integer,
            Ok(pb::AttributeType::Float) => AttrType::Float,
            Ok(pb::AttributeType::Keyword) => AttrType::Keyword,
            _ => {
                return Err(Error::bad(format!(
                    "attribute {name:?}: type {t} is not INTEGER, FLOAT or KEYWORD"
                )))
            }
        };
        attributes.insert(name.clone(), t);
    }
    Ok(Settings {
        dim: r.dim as usize,
        metric,
        element,
        attributes,
    })
}

fn info(c: &Collection) -> pb::CollectionInfo {
    let s = &c.settings;
    let (on_device, on_cpu) = c.search_stats();
    let (device_passes, requests_in_passes) = c.pass_stats();
    pb::CollectionInfo {
        name: c.name.clone(),
        dim: s.dim as u32,
        metric: metric(s.metric) as i32,
        element: element(s.element) as i32,
        attributes: s
            .attributes
            .iter()
            .map(|(n, &t)| (n.clone(), attr_type(t) as i32))
            .collect(),
        count: c.count() as u64,
        searches: Some(pb::SearchStats {
            device: c.device().unwrap_or_default(),
            on_device,
            on_cpu,
            selective_on_cpu: c.selective_on_cpu(),
            device_passes,
            requests_in_passes,
        }),
    }
}

/// An attribute value as its JSON twin; an unset value is JSON's null (an attribute left
/// out; in a filter, refused by the schema check as any null is).
fn value_json(v: Option<&pb::AttributeValue>, what: &str) -> Result<Value> {
    use pb::attribute_value::Kind as K;
    Ok(match v.and_then(|v| v.kind.as_ref()) {
        None => Value::Null,
        Some(K::IntValue(i)) => Value::from(*i),
        Some(K::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map(Value::Number)
            .ok_or_else(|| Error::bad(format!("{what}: {d} is not a finite number")))?,
        Some(K::StringValue(s)) => Value::from(s.as_str()),
    })
}

fn attributes_json(
    attrs: &std::collections::HashMap<String, pb::AttributeValue>,
    what: &str,
) -> Result<Option<Map<String, Value>>> {
    if attrs.is_empty() {
        return Ok(None);
    }
    let mut m = Map::new();
    for (name, v) in attrs {
        m.insert(
            name.clone(),
            value_json(Some(v), &format!("{what}: {name}"))?,
        );
    }
    Ok(Some(m))
}

/// A filter message as the JSON filter it mirrors (docs/collections.md, "Filters"). Depth
/// and nodes are bounded here too, with `Filter::parse`'s words, so that a hostile message
/// (up to the decoding limit of empty nodes) is refused before it is copied.
pub fn filter_json(f: &pb::Filter) -> Result<Value> {
    let mut nodes = 0;
    filter_node(f, 1, &mut nodes)
}

fn filter_node(f: &pb::Filter, depth: usize, nodes: &mut usize) -> Result<Value> {
    use pb::filter::Kind as K;
    use serde_json::json;
    if depth > limits::MAX_FILTER_DEPTH {
        return Err(Error::bad(format!(
            "filter deeper than the limit of {} levels",
            limits::MAX_FILTER_DEPTH
        )));
    }
    *nodes += 1;
    if *nodes > limits::MAX_FILTER_NODES {
        return Err(Error::new(
            Kind::TooLarge,
            format!("filter of more than {} nodes", limits::MAX_FILTER_NODES),
        ));
    }
    let list = |fs: &[pb::Filter], nodes: &mut usize| -> Result<Value> {
        let out = fs
            .iter()
            .map(|f| filter_node(f, depth + 1, nodes))
            .collect::<Result<Vec<_>>>()?;
        Ok(Value::Array(out))
    };
    Ok(match &f.kind {
        None => {
            return Err(Error::bad(
                "a filter needs one of eq, in, range, all, any or not",
            ))
        }
        Some(K::Eq(e)) => {
            json!({"eq": [e.field, value_json(e.value.as_ref(), &format!("eq on {:?}", e.field))?]})
        }
        Some(K::In(i)) => {
            let what = format!("in on {:?}", i.field);
            if i.values.len() > limits::MAX_IN_VALUES {
                return Err(Error::new(
                    Kind::TooLarge,
                    format!(
                        "{what}: {} values, over the limit of {}",
                        i.values.len(),
                        limits::MAX_IN_VALUES
                    ),
                ));
            }
            let vs = i
                .values
                .iter()
                .map(|v| value_json(Some(v), &what))
                .collect::<Result<Vec<_>>>()?;
            json!({"in": [i.field, vs]})
        }
        Some(K::Range(r)) => {
            let what = format!("range on {:?}", r.field);
            let mut b = Map::new();
            for (name, v) in [
                ("gt", &r.gt),
                ("gte", &r.gte),
                ("lt", &r.lt),
                ("lte", &r.lte),
            ] {
                if let Some(v) = v {
                    b.insert(name.into(), value_json(Some(v), &what)?);
                }
            }
            json!({"range": [r.field, b]})
        }
        Some(K::All(l)) => json!({"all": list(&l.filters, nodes)?}),
        Some(K::Any(l)) => json!({"any": list(&l.filters, nodes)?}),
        Some(K::Not(n)) => json!({"not": filter_node(n, depth + 1, nodes)?}),
    })
}

/// The point at `slot` as a message (attributes typed by the schema).
fn attributes_of(s: &Settings, v: Value) -> std::collections::HashMap<String, pb::AttributeValue> {
    use pb::attribute_value::Kind as K;
    let Value::Object(m) = v else {
        return Default::default();
    };
    m.into_iter()
        .filter_map(|(name, v)| {
            let kind = match (s.attributes.get(&name)?, &v) {
                (AttrType::Integer, v) => K::IntValue(v.as_i64()?),
                (AttrType::Float, v) => K::DoubleValue(v.as_f64()?),
                (AttrType::Keyword, Value::String(t)) => K::StringValue(t.clone()),
                _ => return None,
            };
            Some((name, pb::AttributeValue { kind: Some(kind) }))
        })
        .collect()
}

fn vector_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

impl Store {
    fn upsert_points(&self, r: pb::UpsertRequest) -> Result<pb::UpsertResponse> {
        let c = self.get(&r.collection)?;
        // Counted before anything is copied, as REST's parse bounds its body.
        check_batch_len("points", r.points.len(), limits::MAX_BATCH)?;
        let points = r
            .points
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let what = format!("point {i} (id {})", p.id);
                Ok(PointIn {
                    id: p.id,
                    vector: vector_f64(&p.vector),
                    attributes: attributes_json(&p.attributes, &what)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let points = check_points(&c.settings, points)?;
        let upserted = if points.is_empty() {
            0 // nothing to log
        } else {
            c.write(Op::Upsert(points))?
        };
        Ok(pb::UpsertResponse {
            upserted: upserted as u64,
        })
    }

    fn delete_points(&self, r: pb::DeleteRequest) -> Result<pb::DeleteResponse> {
        use pb::delete_request::Selector;
        let c = self.get(&r.collection)?;
        let op = match r.selector {
            Some(Selector::Ids(l)) => {
                check_batch_len("ids", l.ids.len(), limits::MAX_IDS)?;
                if l.ids.is_empty() {
                    return Ok(pb::DeleteResponse { deleted: 0 });
                }
                Op::DeleteIds(l.ids)
            }
            Some(Selector::Filter(f)) => {
                let v = filter_json(&f)?;
                Op::DeleteFilter(Filter::parse(&v, &c.settings)?, v.to_string())
            }
            None => return Err(Error::bad("delete takes either ids or a filter")),
        };
        let deleted = c.write(op)? as u64;
        Ok(pb::DeleteResponse { deleted })
    }

    fn get_points(&self, r: pb::GetRequest) -> Result<pb::GetResponse> {
        let c = self.get(&r.collection)?;
        check_batch_len("ids", r.ids.len(), limits::MAX_IDS)?;
        let d = c.read();
        let points = r
            .ids
            .iter()
            .filter_map(|&id| {
                let slot = *d.by_id.get(&id)? as usize;
                Some(pb::Point {
                    id,
                    vector: d.row(slot).to_vec(),
                    attributes: attributes_of(&c.settings, d.attributes_json(slot)),
                })
            })
            .collect();
        Ok(pb::GetResponse { points })
    }

    fn search_points(&self, r: pb::SearchRequest) -> Result<pb::SearchResponse> {
        let c = self.get(&r.collection)?;
        if r.vectors.is_empty() {
            return Err(Error::bad("no query vectors"));
        }
        check_batch_len("query vectors", r.vectors.len(), limits::MAX_QUERIES)?;
        let k = r.k.unwrap_or(10) as usize;
        if k == 0 || k > limits::MAX_K {
            return Err(Error::bad(format!(
                "k {k} out of range 1..={}",
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
            .map(|(i, v)| {
                let what = format!("query {i}");
                crate::schema::check_query(&c.settings, &vector_f64(&v.values), &what)
            })
            .collect::<Result<Vec<_>>>()?;
        let filter = match &r.filter {
            Some(f) => Some(Filter::parse(&filter_json(f)?, &c.settings)?),
            None => None,
        };
        let d = c.read();
        let req = crate::accel::SearchRequest {
            queries: &queries,
            k,
            nprobe: r.nprobe.map(|n| n as usize),
            filter: filter.as_ref(),
        };
        let (answers, _plan, _ran) = c.search(&d, &req)?;
        let results = answers
            .iter()
            .map(|hits| pb::Hits {
                hits: hits
                    .iter()
                    .map(|n| {
                        let slot = n.id as usize;
                        pb::Hit {
                            id: d.ids[slot],
                            distance: n.distance,
                            attributes: if r.with_attributes {
                                attributes_of(&c.settings, d.attributes_json(slot))
                            } else {
                                Default::default()
                            },
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(pb::SearchResponse { results })
    }
}

/// The store answers the service's calls; every error leaves as [`status`].
impl pb::Calls for Store {
    fn create_collection(
        &self,
        r: pb::CreateCollectionRequest,
    ) -> std::result::Result<pb::CollectionInfo, Status> {
        let s = settings(&r).map_err(|e| status(&e))?;
        let c = self.create(&r.name, s).map_err(|e| status(&e))?;
        Ok(info(&c))
    }

    fn list_collections(
        &self,
        _: pb::ListCollectionsRequest,
    ) -> std::result::Result<pb::ListCollectionsResponse, Status> {
        let collections = self.list().iter().map(|c| info(c)).collect();
        Ok(pb::ListCollectionsResponse { collections })
    }

    fn describe_collection(
        &self,
        r: pb::DescribeCollectionRequest,
    ) -> std::result::Result<pb::CollectionInfo, Status> {
        let c = self.get(&r.name).map_err(|e| status(&e))?;
        Ok(info(&c))
    }

    fn drop_collection(
        &self,
        r: pb::DropCollectionRequest,
    ) -> std::result::Result<pb::DropCollectionResponse, Status> {
        self.drop_collection(&r.name).map_err(|e| status(&e))?;
        Ok(pb::DropCollectionResponse { dropped: r.name })
    }

    fn upsert(&self, r: pb::UpsertRequest) -> std::result::Result<pb::UpsertResponse, Status> {
        self.upsert_points(r).map_err(|e| status(&e))
    }

    fn delete(&self, r: pb::DeleteRequest) -> std::result::Result<pb::DeleteResponse, Status> {
        self.delete_points(r).map_err(|e| status(&e))
    }

    fn get(&self, r: pb::GetRequest) -> std::result::Result<pb::GetResponse, Status> {
        self.get_points(r).map_err(|e| status(&e))
    }

    fn count(&self, r: pb::CountRequest) -> std::result::Result<pb::CountResponse, Status> {
        let c = Store::get(self, &r.collection).map_err(|e| status(&e))?;
        Ok(pb::CountResponse {
            count: c.count() as u64,
        })
    }

    fn search(&self, r: pb::SearchRequest) -> std::result::Result<pb::SearchResponse, Status> {
        self.search_points(r).map_err(|e| status(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::filter::Kind as F;

    fn v(k: pb::attribute_value::Kind) -> Option<pb::AttributeValue> {
        Some(pb::AttributeValue { kind: Some(k) })
    }

    #[test]
    fn a_filter_message_is_the_json_filter_it_mirrors() {
        use pb::attribute_value::Kind as K;
        let eq = pb::Filter {
            kind: Some(F::Eq(pb::Eq {
                field: "color".into(),
                value: v(K::StringValue("red".into())),
            })),
        };
        let range = pb::Filter {
            kind: Some(F::Range(pb::Range {
                field: "n".into(),
                gte: v(K::IntValue(i64::MAX)),
                lt: v(K::DoubleValue(2.5)),
                ..Default::default()
            })),
        };
        let any = pb::Filter {
            kind: Some(F::Any(pb::FilterList {
                filters: vec![range, eq],
            })),
        };
        let f = pb::Filter {
            kind: Some(F::Not(Box::new(any))),
        };
        assert_eq!(
            filter_json(&f).unwrap(),
            serde_json::json!({"not": {"any": [
                {"range": ["n", {"gte": i64::MAX, "lt": 2.5}]},
                {"eq": ["color", "red"]}]}})
        );
        let nan = pb::Filter {
            kind: Some(F::In(pb::In {
                field: "p".into(),
                values: vec![pb::AttributeValue {
                    kind: Some(K::DoubleValue(f64::NAN)),
                }],
            })),
        };
        assert_eq!(filter_json(&nan).unwrap_err().kind, Kind::BadRequest);
    }

    #[test]
    fn every_error_kind_has_its_status_and_code_name() {
        for (kind, code) in [
            (Kind::BadRequest, Code::InvalidArgument),
            (Kind::NotFound, Code::NotFound),
            (Kind::Conflict, Code::AlreadyExists),
            (Kind::TooLarge, Code::ResourceExhausted),
            (Kind::Overloaded, Code::ResourceExhausted),
            (Kind::Storage, Code::ResourceExhausted),
            (Kind::Unavailable, Code::Unavailable),
            (Kind::Internal, Code::Internal),
        ] {
            let s = status(&Error::new(kind, "why"));
            assert_eq!(s.code(), code, "{kind:?}");
            assert_eq!(s.message(), format!("{}: why", kind.name()));
        }
    }
}
