//! A collection's settings (dimension, metric, element type, attribute schema), the limits
//! every request is checked against, and the checks on vectors and attribute values.

use crate::error::{Error, Kind, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The documented limits (docs/collections.md). Each bounds memory or time one request can
/// take; a request over one is refused whole.
pub mod limits {
    /// Largest dimension of a collection.
    pub const MAX_DIM: usize = 4096;
    /// Points in one upsert.
    pub const MAX_BATCH: usize = 10_000;
    /// Ids in one get or delete.
    pub const MAX_IDS: usize = 10_000;
    /// Query vectors in one search.
    pub const MAX_QUERIES: usize = 1024;
    /// Largest k.
    pub const MAX_K: usize = 1024;
    /// Deepest filter (a leaf alone has depth 1).
    pub const MAX_FILTER_DEPTH: usize = 16;
    /// Nodes of one filter (leaves and combinators).
    pub const MAX_FILTER_NODES: usize = 1024;
    /// Values of one `in`.
    pub const MAX_IN_VALUES: usize = 1024;
    /// Attributes in a schema.
    pub const MAX_ATTRIBUTES: usize = 64;
    /// Bytes of a keyword value.
    pub const MAX_KEYWORD: usize = 1024;
    /// Bytes of a collection or attribute name.
    pub const MAX_NAME: usize = 64;
    /// Collections in one store.
    pub const MAX_COLLECTIONS: usize = 1024;
    /// Largest magnitude of an f32 element: beyond it distances can overflow (as the k-NN
    /// service, `cohort_ivf::MAX_ABS_ELEMENT`).
    pub const MAX_ABS_F32: f32 = cohort_ivf::MAX_ABS_ELEMENT;
    /// Largest body of a collection request the HTTP gateway reads.
    pub const MAX_BODY: usize = 64 << 20;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Squared Euclidean distance.
    L2,
    /// Inner product, reported as its negation (smaller is nearer).
    Ip,
    /// 1 - cosine similarity.
    Cosine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Element {
    F32,
    /// Values rounded to IEEE half precision on the way in (and stored so).
    F16,
    /// Integral values 0..=255 only.
    U8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttrType {
    Integer,
    Float,
    Keyword,
}

/// What `PUT /v1/collections/{name}` takes, and what the store keeps as `settings.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub dim: usize,
    #[serde(default = "default_metric")]
    pub metric: Metric,
    #[serde(default = "default_element")]
    pub element: Element,
    #[serde(default)]
    pub attributes: BTreeMap<String, AttrType>,
}

fn default_metric() -> Metric {
    Metric::L2
}
fn default_element() -> Element {
    Element::F32
}

impl Settings {
    pub fn validate(&self) -> Result<()> {
        if self.dim == 0 || self.dim > limits::MAX_DIM {
            return Err(Error::bad(format!(
                "dim {} out of range 1..={}",
                self.dim,
                limits::MAX_DIM
            )));
        }
        if self.attributes.len() > limits::MAX_ATTRIBUTES {
            return Err(Error::new(
                Kind::TooLarge,
                format!(
                    "{} attributes, over the limit of {}",
                    self.attributes.len(),
                    limits::MAX_ATTRIBUTES
                ),
            ));
        }
        for name in self.attributes.keys() {
            check_name("attribute", name)?;
        }
        Ok(())
    }

    /// The attribute names in schema order (the order columns and encodings use).
    pub fn attribute_names(&self) -> Vec<&str> {
        self.attributes.keys().map(String::as_str).collect()
    }
}

/// Collection and attribute names: 1..=64 bytes of ASCII letters, digits, `_` and `-`, so a
/// name is always a safe directory name and a safe URL segment.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= limits::MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::bad(format!(
            "{what} name {name:?}: 1 to {} of A-Z a-z 0-9 _ - (not starting with -)",
            limits::MAX_NAME
        )))
    }
}

/// One attribute value, typed by the schema.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Float(f64),
    Keyword(String),
}

impl AttrValue {
    pub fn to_json(&self) -> Value {
        match self {
            AttrValue::Int(v) => Value::from(*v),
            AttrValue::Float(v) => Value::from(*v),
            AttrValue::Keyword(s) => Value::from(s.as_str()),
        }
    }

    /// `v` as a value of type `ty`; `what` names it in the error. An integer is accepted
    /// for a float attribute (JSON does not tell 2 from 2.0); a float is not an integer.
    pub fn from_json(ty: AttrType, v: &Value, what: &str) -> Result<AttrValue> {
        let mismatch = || {
            Error::bad(format!(
                "{what}: expected {}, got {v}",
                match ty {
                    AttrType::Integer => "an integer",
                    AttrType::Float => "a number",
                    AttrType::Keyword => "a string",
                }
            ))
        };
        match ty {
            AttrType::Integer => v.as_i64().map(AttrValue::Int).ok_or_else(mismatch),
            AttrType::Float => match v.as_f64() {
                Some(f) if f.is_finite() => Ok(AttrValue::Float(f)),
                _ => Err(mismatch()),
            },
            AttrType::Keyword => match v.as_str() {
                Some(s) if s.len() <= limits::MAX_KEYWORD => Ok(AttrValue::Keyword(s.to_string())),
                Some(s) => Err(Error::bad(format!(
                    "{what}: keyword of {} bytes, over the limit of {}",
                    s.len(),
                    limits::MAX_KEYWORD
                ))),
                None => Err(mismatch()),
            },
        }
    }
}

/// Checks one vector against the settings and returns it as stored: f16 values rounded to
/// half precision, u8 values integral in 0..=255, every value finite.
pub fn check_vector(s: &Settings, v: &[f64], what: &str) -> Result<Vec<f32>> {
    check(s, v, what, s.element)
}

/// Checks a query vector: the dimension, finite values within f32's safe range; the
/// element type does not bind a query (a u8 collection may be searched with a mean vector).
pub fn check_query(s: &Settings, v: &[f64], what: &str) -> Result<Vec<f32>> {
    check(s, v, what, Element::F32)
}

fn check(s: &Settings, v: &[f64], what: &str, element: Element) -> Result<Vec<f32>> {
    if v.len() != s.dim {
        return Err(Error::bad(format!(
            "{what}: dimension {} but the collection's is {}",
            v.len(),
            s.dim
        )));
    }
    let mut out = Vec::with_capacity(v.len());
    for (i, &x) in v.iter().enumerate() {
        let bad = |why: &str| Error::bad(format!("{what}: element {i} ({x}) {why}"));
        if !x.is_finite() {
            return Err(bad("is not a finite number"));
        }
        let f = match element {
            Element::F32 => {
                if x.abs() > limits::MAX_ABS_F32 as f64 {
                    return Err(bad("is over 1e16 in magnitude"));
                }
                x as f32
            }
            Element::F16 => {
                if x.abs() > 65504.0 {
                    return Err(bad("is beyond f16's range (65504)"));
                }
                half::f16::from_f64(x).to_f32()
            }
            Element::U8 => {
                if x.fract() != 0.0 || !(0.0..=255.0).contains(&x) {
                    return Err(bad("is not an integer in 0..=255 (element u8)"));
                }
                x as f32
            }
        };
        out.push(f);
    }
    if s.metric == Metric::Cosine && out.iter().all(|&x| x == 0.0) {
        return Err(Error::bad(format!(
            "{what}: a zero vector has no cosine distance"
        )));
    }
    Ok(out)
}

/// A point's attributes as the schema orders them (None: not given). Unknown names and type
/// mismatches are refused.
pub fn check_attributes(
    s: &Settings,
    attrs: Option<&serde_json::Map<String, Value>>,
    what: &str,
) -> Result<Vec<Option<AttrValue>>> {
    let mut out = vec![None; s.attributes.len()];
    let Some(attrs) = attrs else { return Ok(out) };
    for (name, v) in attrs {
        let Some(pos) = s.attributes.keys().position(|k| k == name) else {
            return Err(Error::bad(format!(
                "{what}: unknown attribute {name:?} (schema: {})",
                s.attribute_names().join(", ")
            )));
        };
        if v.is_null() {
            continue;
        }
        let ty = s.attributes[name];
        out[pos] = Some(AttrValue::from_json(ty, v, &format!("{what}: {name}"))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(element: Element, metric: Metric) -> Settings {
        Settings {
            dim: 3,
            metric,
            element,
            attributes: BTreeMap::new(),
        }
    }

    #[test]
    fn vectors_are_checked_for_their_element_type() {
        let s = settings(Element::U8, Metric::L2);
        assert_eq!(
            check_vector(&s, &[0.0, 255.0, 7.0], "p").unwrap(),
            vec![0.0, 255.0, 7.0]
        );
        assert!(check_vector(&s, &[0.5, 1.0, 2.0], "p").is_err());
        assert!(check_vector(&s, &[256.0, 1.0, 2.0], "p").is_err());
        assert_eq!(
            check_query(&s, &[0.5, 1.0, 2.0], "q").unwrap(),
            vec![0.5, 1.0, 2.0]
        );
        assert!(check_vector(&s, &[-1.0, 1.0, 2.0], "p").is_err());
        let s = settings(Element::F16, Metric::L2);
        assert_eq!(
            check_vector(&s, &[0.1, 1.0, 2.0], "p").unwrap()[0],
            half::f16::from_f64(0.1).to_f32()
        );
        assert!(check_vector(&s, &[70000.0, 1.0, 2.0], "p").is_err());
        let s = settings(Element::F32, Metric::Cosine);
        assert!(check_vector(&s, &[0.0, 0.0, 0.0], "p").is_err());
        assert!(check_vector(&s, &[1.0, 2.0], "p")
            .unwrap_err()
            .message
            .contains("dimension 2"));
        assert!(check_vector(&s, &[f64::NAN, 0.0, 1.0], "p").is_err());
    }

    #[test]
    fn names_are_safe_path_segments() {
        for ok in ["a", "docs_v2", "A-1"] {
            check_name("c", ok).unwrap();
        }
        for bad in ["", "..", "a/b", "-x", "é", &"x".repeat(65)] {
            assert!(check_name("c", bad).is_err(), "{bad}");
        }
    }
}
