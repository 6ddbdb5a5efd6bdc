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

/// A number of an attribute: integers compare as integers (exactly, over all of i64),
/// floats as floats (the schema gives an attribute and its bounds one type).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    I(i64),
    F(f64),
}

impl Num {
    fn cmp(self, b: Num) -> Option<std::cmp::Ordering> {
        match (self, b) {
            (Num::I(x), Num::I(y)) => Some(x.cmp(&y)),
            (x, y) => x.f64().partial_cmp(&y.f64()),
        }
    }
    fn f64(self) -> f64 {
        match self {
            Num::I(x) => x as f64,
            Num::F(x) => x,
        }
    }
}

/// A range's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bounds {
    pub gt: Option<Num>,
    pub gte: Option<Num>,
    pub lt: Option<Num>,
    pub lte: Option<Num>,
}

impl Bounds {
    fn contains(&self, x: Num) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let c = |b: Num| x.cmp(b);
        self.gt.is_none_or(|b| c(b) == Some(Greater))
            && self
                .gte
                .is_none_or(|b| matches!(c(b), Some(Greater | Equal)))
            && self.lt.is_none_or(|b| c(b) == Some(Less))
            && self.lte.is_none_or(|b| matches!(c(b), Some(Less | Equal)))
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
            Filter::Eq(a, v) => cols[*a].get(slot).as_ref() == Some(v),
            Filter::In(a, vs) => vs
                .iter()
                .any(|v| Filter::Eq(*a, v.clone()).matches(cols, slot)),
            Filter::Range(a, b) => match cols[*a].get(slot) {
                Some(AttrValue::Int(x)) => b.contains(Num::I(x)),
                Some(AttrValue::Float(x)) => b.contains(Num::F(x)),
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
                Column::Int(_) => {
                    let mut xs: Vec<i64> = vs
                        .iter()
                        .filter_map(|v| match v {
                            AttrValue::Int(x) => Some(*x),
                            _ => None,
                        })
                        .collect();
                    xs.sort_unstable();
                    xs.dedup();
                    Compiled::Ints(*a, xs)
                }
                Column::Float(_) => {
                    let mut xs: Vec<f64> = vs
                        .iter()
                        .filter_map(|v| match v {
                            AttrValue::Float(x) => Some(*x),
                            AttrValue::Int(x) => Some(*x as f64),
                            AttrValue::Keyword(_) => None,
                        })
                        .collect();
                    xs.sort_by(f64::total_cmp);
                    xs.dedup();
                    Compiled::Floats(*a, xs)
                }
            },
            Filter::Range(a, b) => Compiled::Range(*a, *b),
            Filter::All(fs) => Compiled::All(fs.iter().map(|f| f.compile(cols)).collect()),
            Filter::Any(fs) => Compiled::Any(fs.iter().map(|f| f.compile(cols)).collect()),
            Filter::Not(f) => Compiled::Not(Box::new(f.compile(cols))),
        }
    }
}

/// A filter resolved against the columns of one collection state.
#[derive(Debug, Clone)]
pub enum Compiled {
    /// The keyword's code is one of these (sorted).
    Codes(usize, Vec<u32>),
    /// The integer is one of these (sorted).
    Ints(usize, Vec<i64>),
    /// The float is one of these (sorted).
    Floats(usize, Vec<f64>),
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
            Compiled::Ints(a, xs) => match &cols[*a] {
                Column::Int(c) => c[slot].is_some_and(|x| xs.binary_search(&x).is_ok()),
                _ => false,
            },
            Compiled::Floats(a, xs) => match &cols[*a] {
                Column::Float(c) => {
                    c[slot].is_some_and(|x| xs.binary_search_by(|y| y.total_cmp(&x)).is_ok())
                }
                _ => false,
            },
            Compiled::Range(a, b) => number(&cols[*a], slot).is_some_and(|x| b.contains(x)),
            Compiled::All(fs) => fs.iter().all(|f| f.matches(cols, slot)),
            Compiled::Any(fs) => fs.iter().any(|f| f.matches(cols, slot)),
            Compiled::Not(f) => !f.matches(cols, slot),
        }
    }
}

#[inline]
fn number(col: &Column, slot: usize) -> Option<Num> {
    match col {
        Column::Int(c) => c[slot].map(Num::I),
        Column::Float(c) => c[slot].map(Num::F),
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
            AttrValue::Int(i) => Num::I(i),
            AttrValue::Float(f) => Num::F(f),
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
