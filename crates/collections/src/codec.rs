//! The binary encoding the log and the snapshots share: little-endian integers, vectors in the
//! collection's element type, attributes tagged by type. Every read is bounds-checked and
//! answers an error, never a panic: these bytes come from disk.

use crate::error::{Error, Result};
use crate::schema::{AttrType, AttrValue, Element, Settings};

#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.buf.extend_from_slice(b);
    }

    /// A vector in the element type (the values were checked and rounded to it on the way in,
    /// so the encoding loses nothing).
    pub fn vector(&mut self, e: Element, v: &[f32]) {
        match e {
            Element::F32 => v
                .iter()
                .for_each(|x| self.buf.extend_from_slice(&x.to_le_bytes())),
            Element::F16 => v.iter().for_each(|x| {
                self.buf
                    .extend_from_slice(&half::f16::from_f32(*x).to_bits().to_le_bytes())
            }),
            Element::U8 => v.iter().for_each(|x| self.buf.push(*x as u8)),
        }
    }

    pub fn attributes(&mut self, attrs: &[Option<AttrValue>]) {
        for a in attrs {
            match a {
                None => self.u8(0),
                Some(AttrValue::Int(v)) => {
                    self.u8(1);
                    self.u64(*v as u64);
                }
                Some(AttrValue::Float(v)) => {
                    self.u8(2);
                    self.u64(v.to_bits());
                }
                Some(AttrValue::Keyword(s)) => {
                    self.u8(3);
                    self.bytes(s.as_bytes());
                }
            }
        }
    }
}

pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, at: 0 }
    }
    pub fn done(&self) -> bool {
        self.at == self.buf.len()
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() - self.at < n {
            return Err(Error::internal(format!(
                "record ends early: {n} bytes wanted at offset {} of {}",
                self.at,
                self.buf.len()
            )));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub fn vector(&mut self, e: Element, dim: usize) -> Result<Vec<f32>> {
        let width = match e {
            Element::F32 => 4,
            Element::F16 => 2,
            Element::U8 => 1,
        };
        let b = self.take(dim * width)?;
        Ok(match e {
            Element::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
            Element::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect(),
            Element::U8 => b.iter().map(|&x| x as f32).collect(),
        })
    }

    /// A point's attributes, each checked against the schema's type.
    pub fn attributes(&mut self, s: &Settings) -> Result<Vec<Option<AttrValue>>> {
        let mut out = Vec::with_capacity(s.attributes.len());
        for (name, ty) in &s.attributes {
            let v = match (self.u8()?, ty) {
                (0, _) => None,
                (1, AttrType::Integer) => Some(AttrValue::Int(self.u64()? as i64)),
                (2, AttrType::Float) => Some(AttrValue::Float(f64::from_bits(self.u64()?))),
                (3, AttrType::Keyword) => {
                    let b = self.bytes()?;
                    let s = std::str::from_utf8(b)
                        .map_err(|_| Error::internal(format!("attribute {name}: not UTF-8")))?;
                    Some(AttrValue::Keyword(s.to_string()))
                }
                (tag, ty) => {
                    return Err(Error::internal(format!(
                        "attribute {name}: tag {tag} does not fit its type {ty:?}"
                    )))
                }
            };
            out.push(v);
        }
        Ok(out)
    }
}
