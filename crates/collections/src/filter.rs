//! Filter expressions over a collection's attributes:
//! `{"eq":[field,value]}`, `{"in":[field,[values]]}`, `{"range":[field,{"gte":a,"lt":b}]}`
//! (gt, gte, lt, lte), `{"all":[F,...]}`, `{"any":[F,...]}`, `{"not":F}`.
//!
//! Parsing checks the expression against the schema (unknown attribute, value of the wrong
//! type, range over a keyword, depth over `MAX_FILTER_DEPTH`, more than `MAX_FILTER_NODES`
//! nodes); a point without a value for an attribute matches no `eq`, `in` or `range` on it
//! (and so matches its `not`). Evaluation compiles the expression against the columns once
//! (keywords to dictionary codes) and then runs over slots.

use crate::columns::{Column, NO_CODE};
use crate::error::{Error, Kind, Result};
use crate::schema::{limits, AttrType, AttrValue, Settings};
use serde_json::Value;

/// A filter checked against a schema. Attributes are named by their schema position.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    Eq(usize, AttrValue),
    In(usize, Vec<AttrValue>),
    Range(usize, Bounds),
    All(Vec<Filter>),
    Any(Vec<Filter>),
    Not(Box<Filter>),
}

/// A range's bounds as f64 (an integer attribute's values compare exactly below 2^53).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bounds {
    pub gt: Option<f64>,
    pub gte: Option<f64>,
    pub lt: Option<f64>,
    pub lte: Option<f64>,
}

impl Bounds {
    fn contains(&self, x: f64) -> bool {
        self.gt.is_none_or(|b| x > b)
            && self.gte.is_none_or(|b| x >= b)
            && self.lt.is_none_or(|b| x < b)
            && self.lte.is_none_or(|b| x <= b)
    }
}

const SHAPE: &str =
    "a filter is an object with one key: eq, in, range, all, any or not (docs/collections.md)";

impl Filter {
    pub fn parse(v: &Value, s: &Settings) -> Result<Filter> {
        let mut nodes = 0;
        parse(v, s, 1, &mut nodes)
    }

    /// Whether slot `slot` matches, straight from the columns (the reference the compiled
    /// form is tested against, and what single-point checks use).
    pub fn matches(&self, cols: &[Column], slot: usize) -> bool {
        match self {
            Filter::Eq(a, v) => {
                cols[*a].get(slot).as_ref() == Some(v) || num_eq(&cols[*a], slot, v)
            }
            Filter::In(a, vs) => vs
                .iter()
                .any(|v| Filter::Eq(*a, v.clone()).matches(cols, slot)),
            Filter::Range(a, b) => match cols[*a].get(slot) {
                Some(AttrValue::Int(x)) => b.contains(x as f64),
                Some(AttrValue::Float(x)) => b.contains(x),
                _ => false,
            },
            Filter::All(fs) => fs.iter().all(|f| f.matches(cols, slot)),
            Filter::Any(fs) => fs.iter().any(|f| f.matches(cols, slot)),
            Filter::Not(f) => !f.matches(cols, slot),
        }
    }

    /// The form evaluated over many slots.
    pub fn compile(&self, cols: &[Column]) -> Compiled {
        match self {
            Filter::Eq(a, v) => Filter::In(*a, vec![v.clone()]).compile(cols),
            Filter::In(a, vs) => match &cols[*a] {
                Column::Keyword { .. } => {
                    let mut codes: Vec<u32> = vs
                        .iter()
                        .filter_map(|v| match v {
                            AttrValue::Keyword(s) => cols[*a].code_of(s),
                            _ => None,
                        })
                        .collect();
                    codes.sort_unstable();
                    codes.dedup();
                    Compiled::Codes(*a, codes)
                }
                _ => {
                    let mut xs: Vec<f64> = vs.iter().filter_map(as_f64).collect();
                    xs.sort_by(f64::total_cmp);
                    xs.dedup();
                    Compiled::Numbers(*a, xs)
                }
            },
            Filter::Range(a, b) => Compiled::Range(*a, *b),
            Filter::All(fs) => Compiled::All(fs.iter().map(|f| f.compile(cols)).collect()),
            Filter::Any(fs) => Compiled::Any(fs.iter().map(|f| f.compile(cols)).collect()),
            Filter::Not(f) => Compiled::Not(Box::new(f.compile(cols))),
        }
    }
}

/// An integer attribute compared with an equal float, and the reverse (JSON's 2 and 2.0).
fn num_eq(col: &Column, slot: usize, v: &AttrValue) -> bool {
    match (col.get(slot), as_f64(v)) {
        (Some(AttrValue::Int(x)), Some(y)) => x as f64 == y,
        (Some(AttrValue::Float(x)), Some(y)) => x == y,
        _ => false,
    }
}

fn as_f64(v: &AttrValue) -> Option<f64> {
    match v {
        AttrValue::Int(x) => Some(*x as f64),
        AttrValue::Float(x) => Some(*x),
        AttrValue::Keyword(_) => None,
    }
}

/// A filter resolved against the columns of one collection state.
#[derive(Debug, Clone)]
pub enum Compiled {
    /// The keyword's code is one of these (sorted).
    Codes(usize, Vec<u32>),
    /// The number is one of these (sorted).
    Numbers(usize, Vec<f64>),
    Range(usize, Bounds),
    All(Vec<Compiled>),
    Any(Vec<Compiled>),
    Not(Box<Compiled>),
}

impl Compiled {
    pub fn matches(&self, cols: &[Column], slot: usize) -> bool {
        match self {
            Compiled::Codes(a, codes) => match &cols[*a] {
                Column::Keyword { codes: col, .. } => {
                    let c = col[slot];
                    c != NO_CODE && codes.binary_search(&c).is_ok()
                }
                _ => false,
            },
            Compiled::Numbers(a, xs) => match number(&cols[*a], slot) {
                Some(x) => xs.binary_search_by(|y| y.total_cmp(&x)).is_ok(),
                None => false,
            },
            Compiled::Range(a, b) => number(&cols[*a], slot).is_some_and(|x| b.contains(x)),
            Compiled::All(fs) => fs.iter().all(|f| f.matches(cols, slot)),
            Compiled::Any(fs) => fs.iter().any(|f| f.matches(cols, slot)),
            Compiled::Not(f) => !f.matches(cols, slot),
        }
    }
}

#[inline]
fn number(col: &Column, slot: usize) -> Option<f64> {
    match col {
        Column::Int(c) => c[slot].map(|x| x as f64),
        Column::Float(c) => c[slot],
        Column::Keyword { .. } => None,
    }
}

fn parse(v: &Value, s: &Settings, depth: usize, nodes: &mut usize) -> Result<Filter> {
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
    let obj = v
        .as_object()
        .filter(|o| o.len() == 1)
        .ok_or_else(|| Error::bad(SHAPE))?;
    let (op, arg) = obj.iter().next().expect("one key");
    let list = |what: &str| -> Result<&Vec<Value>> {
        arg.as_array()
            .ok_or_else(|| Error::bad(format!("{what}: expected an array, got {arg}")))
    };
    match op.as_str() {
        "eq" | "in" | "range" => {
            let a = list(op)?;
            let [field, value] = a.as_slice() else {
                return Err(Error::bad(format!(
                    "{op}: expected [field, value], got {arg}"
                )));
            };
            let name = field.as_str().ok_or_else(|| {
                Error::bad(format!("{op}: the field must be a string, got {field}"))
            })?;
            let (pos, ty) = attribute(s, name)?;
            let what = format!("{op} on {name:?}");
            match op.as_str() {
                "eq" => Ok(Filter::Eq(pos, AttrValue::from_json(ty, value, &what)?)),
                "in" => {
                    let vs = value.as_array().ok_or_else(|| {
                        Error::bad(format!("{what}: expected an array of values, got {value}"))
                    })?;
                    if vs.len() > limits::MAX_IN_VALUES {
                        return Err(Error::new(
                            Kind::TooLarge,
                            format!(
                                "{what}: {} values, over the limit of {}",
                                vs.len(),
                                limits::MAX_IN_VALUES
                            ),
                        ));
                    }
                    let vs = vs
                        .iter()
                        .map(|v| AttrValue::from_json(ty, v, &what))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Filter::In(pos, vs))
                }
                _ => Ok(Filter::Range(pos, bounds(ty, value, &what)?)),
            }
        }
        "all" | "any" => {
            let fs = list(op)?
                .iter()
                .map(|f| parse(f, s, depth + 1, nodes))
                .collect::<Result<Vec<_>>>()?;
            Ok(if op == "all" {
                Filter::All(fs)
            } else {
                Filter::Any(fs)
            })
        }
        "not" => Ok(Filter::Not(Box::new(parse(arg, s, depth + 1, nodes)?))),
        other => Err(Error::bad(format!(
            "unknown filter operator {other:?}: {SHAPE}"
        ))),
    }
}

fn attribute(s: &Settings, name: &str) -> Result<(usize, AttrType)> {
    match s.attributes.keys().position(|k| k == name) {
        Some(pos) => Ok((pos, s.attributes[name])),
        None if s.attributes.is_empty() => Err(Error::bad(format!(
            "unknown attribute {name:?}: the collection has no attributes"
        ))),
        None => Err(Error::bad(format!(
            "unknown attribute {name:?} (schema: {})",
            s.attribute_names().join(", ")
        ))),
    }
}

fn bounds(ty: AttrType, v: &Value, what: &str) -> Result<Bounds> {
    if ty == AttrType::Keyword {
        return Err(Error::bad(format!(
            "{what}: range applies to integer and float attributes, not keywords"
        )));
    }
    let o = v.as_object().ok_or_else(|| {
        Error::bad(format!(
            "{what}: expected bounds such as {{\"gte\":1,\"lt\":5}}, got {v}"
        ))
    })?;
    if o.is_empty() {
        return Err(Error::bad(format!("{what}: no bounds (gt, gte, lt, lte)")));
    }
    let mut b = Bounds::default();
    for (k, x) in o {
        let x = match AttrValue::from_json(ty, x, &format!("{what}.{k}"))? {
            AttrValue::Int(i) => i as f64,
            AttrValue::Float(f) => f,
            AttrValue::Keyword(_) => unreachable!("keywords refused above"),
        };
        match k.as_str() {
            "gt" => b.gt = Some(x),
            "gte" => b.gte = Some(x),
            "lt" => b.lt = Some(x),
            "lte" => b.lte = Some(x),
            _ => {
                return Err(Error::bad(format!(
                    "{what}: unknown bound {k:?} (gt, gte, lt, lte)"
                )))
            }
        }
    }
    Ok(b)
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
