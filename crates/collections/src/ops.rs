//! The writes a collection logs and applies: an upsert batch, a delete by ids, a delete by
//! filter. Each is checked whole before it is logged (a batch is applied whole or not at
//! all), and applying a checked write cannot fail, so what the log holds replays to the
//! same state.

use crate::codec::{Reader, Writer};
use crate::error::{Error, Kind, Result};
use crate::filter::Filter;
use crate::schema::{AttrValue, Settings};
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub id: u64,
    /// As stored: checked and rounded to the element type.
    pub vector: Vec<f32>,
    /// In schema order.
    pub attrs: Vec<Option<AttrValue>>,
}

#[derive(Debug, Clone)]
pub enum Op {
    Upsert(Vec<Point>),
    DeleteIds(Vec<u64>),
    /// The filter and its JSON text (what the log keeps: replay parses it again against the
    /// same schema, and evaluates it on the same state, since writes apply in log order).
    DeleteFilter(Filter, String),
}

const UPSERT: u8 = 1;
const DELETE_IDS: u8 = 2;
const DELETE_FILTER: u8 = 3;

/// Refuses a batch holding one id twice: which of the two should win is the client's to say.
pub fn check_unique(points: &[Point]) -> Result<()> {
    let mut seen: HashMap<u64, usize> = HashMap::with_capacity(points.len());
    for (i, p) in points.iter().enumerate() {
        if let Some(first) = seen.insert(p.id, i) {
            return Err(Error::bad(format!(
                "id {} appears twice in one batch (points {first} and {i}); send one",
                p.id
            )));
        }
    }
    Ok(())
}

pub fn check_batch_len(what: &str, n: usize, max: usize) -> Result<()> {
    if n > max {
        return Err(Error::new(
            Kind::TooLarge,
            format!("{n} {what} in one request, over the limit of {max}"),
        ));
    }
    Ok(())
}

impl Op {
    /// The log record body of this write (its sequence number is the caller's).
    pub fn encode(&self, s: &Settings, w: &mut Writer) {
        match self {
            Op::Upsert(points) => {
                w.u8(UPSERT);
                w.u32(points.len() as u32);
                for p in points {
                    w.u64(p.id);
                    w.vector(s.element, &p.vector);
                    w.attributes(&p.attrs);
                }
            }
            Op::DeleteIds(ids) => {
                w.u8(DELETE_IDS);
                w.u32(ids.len() as u32);
                ids.iter().for_each(|id| w.u64(*id));
            }
            Op::DeleteFilter(_, text) => {
                w.u8(DELETE_FILTER);
                w.bytes(text.as_bytes());
            }
        }
    }

    pub fn decode(s: &Settings, r: &mut Reader<'_>) -> Result<Op> {
        match r.u8()? {
            UPSERT => {
                let n = r.u32()? as usize;
                let mut points = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    let id = r.u64()?;
                    let vector = r.vector(s.element, s.dim)?;
                    let attrs = r.attributes(s)?;
                    points.push(Point { id, vector, attrs });
                }
                Ok(Op::Upsert(points))
            }
            DELETE_IDS => {
                let n = r.u32()? as usize;
                let ids = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>>>()?;
                Ok(Op::DeleteIds(ids))
            }
            DELETE_FILTER => {
                let text = std::str::from_utf8(r.bytes()?)
                    .map_err(|_| Error::internal("a logged filter is not UTF-8"))?
                    .to_string();
                let v: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| Error::internal(format!("a logged filter: {e}")))?;
                Ok(Op::DeleteFilter(Filter::parse(&v, s)?, text))
            }
            t => Err(Error::internal(format!("unknown log record type {t}"))),
        }
    }
}
