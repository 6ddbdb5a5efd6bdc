//! Attribute columns: one per schema attribute, one entry per slot. Keywords are held as codes
//! into a dictionary, so a filter compares integers row by row, never strings.

use crate::schema::{AttrType, AttrValue};
use std::collections::HashMap;

/// A keyword code meaning "no value".
pub const NO_CODE: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub enum Column {
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Keyword {
        codes: Vec<u32>,
        words: Vec<String>,
        index: HashMap<String, u32>,
    },
}

impl Column {
    pub fn new(ty: AttrType) -> Column {
        match ty {
            AttrType::Integer => Column::Int(Vec::new()),
            AttrType::Float => Column::Float(Vec::new()),
            AttrType::Keyword => Column::Keyword {
                codes: Vec::new(),
                words: Vec::new(),
                index: HashMap::new(),
            },
        }
    }

    /// Appends a slot's value (the caller checked its type against the schema).
    pub fn push(&mut self, v: Option<&AttrValue>) {
        match (self, v) {
            (Column::Int(c), Some(AttrValue::Int(x))) => c.push(Some(*x)),
            (Column::Int(c), _) => c.push(None),
            (Column::Float(c), Some(AttrValue::Float(x))) => c.push(Some(*x)),
            (Column::Float(c), Some(AttrValue::Int(x))) => c.push(Some(*x as f64)),
            (Column::Float(c), _) => c.push(None),
            (
                Column::Keyword {
                    codes,
                    words,
                    index,
                },
                Some(AttrValue::Keyword(s)),
            ) => {
                let code = match index.get(s) {
                    Some(&c) => c,
                    None => {
                        let c = words.len() as u32;
                        words.push(s.clone());
                        index.insert(s.clone(), c);
                        c
                    }
                };
                codes.push(code);
            }
            (Column::Keyword { codes, .. }, _) => codes.push(NO_CODE),
        }
    }

    pub fn get(&self, slot: usize) -> Option<AttrValue> {
        match self {
            Column::Int(c) => c[slot].map(AttrValue::Int),
            Column::Float(c) => c[slot].map(AttrValue::Float),
            Column::Keyword { codes, words, .. } => match codes[slot] {
                NO_CODE => None,
                c => Some(AttrValue::Keyword(words[c as usize].clone())),
            },
        }
    }

    /// The code of `word` (None: no slot ever held it, so nothing matches it).
    pub fn code_of(&self, word: &str) -> Option<u32> {
        match self {
            Column::Keyword { index, .. } => index.get(word).copied(),
            _ => None,
        }
    }

    /// Keeps only the slots `keep` lists, in that order (compaction).
    pub fn select(&self, keep: &[u32]) -> Column {
        match self {
            Column::Int(c) => Column::Int(keep.iter().map(|&s| c[s as usize]).collect()),
            Column::Float(c) => Column::Float(keep.iter().map(|&s| c[s as usize]).collect()),
            Column::Keyword { codes, words, .. } => {
                // The dictionary is rebuilt too: words no kept slot holds go.
                let mut out = Column::Keyword {
                    codes: Vec::with_capacity(keep.len()),
                    words: Vec::new(),
                    index: HashMap::new(),
                };
                for &s in keep {
                    let v = match codes[s as usize] {
                        NO_CODE => None,
                        c => Some(AttrValue::Keyword(words[c as usize].clone())),
                    };
                    out.push(v.as_ref());
                }
                out
            }
        }
    }
}
