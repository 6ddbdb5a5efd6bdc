//! The one generator of CUDA preludes. A limit that host code and a kernel both rely on is
//! defined once, in Rust, and reaches the kernel as a generated `#define` (or `__constant__`
//! table) at the top of the compiled source; a kernel file never states its own copy.
//! [`KernelSource::restated`] finds a kernel file that does, and every kernel registry's test
//! calls it.

use crate::launch::ArgsLayout;
use std::fmt::{Display, Write};

/// Generated `#define`s and tables, in the order written.
#[derive(Debug, Clone)]
pub struct Prelude {
    text: String,
}

impl Prelude {
    /// An empty prelude; `origin` (the Rust file that defines the values) heads it.
    pub fn new(origin: &str) -> Prelude {
        Prelude {
            text: format!("// Generated from {origin}: do not edit.\n"),
        }
    }

    /// `#define NAME VALUE`: plain integers stay `int` in kernels (they mix them with int
    /// arithmetic: `min(RT, n)` must stay int).
    pub fn int(mut self, name: &str, v: usize) -> Prelude {
        assert!(
            v <= i32::MAX as usize,
            "{name} = {v} does not fit a CUDA int"
        );
        self.define(name, v);
        self
    }

    /// `#define NAME VALUE` with the value as written (`0xffffffffu`, `1e6f`, `12ull`).
    pub fn define(&mut self, name: &str, value: impl Display) {
        writeln!(self.text, "#define {name} {value}").expect("writing to a String");
    }

    /// `__constant__ TY NAME[len] = {v0,v1,...};`: a table a kernel indexes.
    pub fn array<T: Display>(&mut self, ty: &str, name: &str, values: &[T]) {
        let list: Vec<String> = values.iter().map(T::to_string).collect();
        writeln!(
            self.text,
            "__constant__ {ty} {name}[{}] = {{{}}};",
            values.len(),
            list.join(",")
        )
        .expect("writing to a String");
    }

    /// Strings as one byte table and their offsets: `__constant__ unsigned char NAME_BYTES[]`
    /// (every string's bytes, then a 0) and `__constant__ unsigned short NAME_OFF[]` (entry i
    /// is bytes [off[i], off[i + 1])).
    pub fn strings(&mut self, name: &str, items: &[&str]) {
        let mut bytes: Vec<u8> = Vec::new();
        let mut offs = vec![0usize];
        for it in items {
            bytes.extend_from_slice(it.as_bytes());
            offs.push(bytes.len());
        }
        bytes.push(0);
        let offs: Vec<u16> = offs
            .iter()
            .map(|&o| u16::try_from(o).expect("a string table under 64 KB"))
            .collect();
        self.array("unsigned char", &format!("{name}_BYTES"), &bytes);
        self.array("unsigned short", &format!("{name}_OFF"), &offs);
    }

    /// The wire's error codes as `P_ERR_*`, for answers a kernel writes itself.
    pub fn error_codes(mut self) -> Prelude {
        for c in cohort_proto::ErrorCode::ALL {
            let name = format!("{c:?}");
            let mut snake = String::new();
            for (i, ch) in name.chars().enumerate() {
                if ch.is_uppercase() && i > 0 {
                    snake.push('_');
                }
                snake.push(ch.to_ascii_uppercase());
            }
            self.define(&format!("P_ERR_{snake}"), c as u16);
        }
        self
    }

    /// Another prelude appended to this one.
    pub fn and(mut self, other: &Prelude) -> Prelude {
        self.text.push_str(&other.text);
        self
    }

    /// The names this prelude `#define`s.
    pub fn names(&self) -> Vec<String> {
        defined_names(&self.text)
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Tables and other generated text go in through `write!`.
impl Write for Prelude {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.text.push_str(s);
        Ok(())
    }
}

fn defined_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("#define "))
        .filter_map(|l| l.split(['(', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// One NVRTC compilation unit: a generated prelude, then hand-written files, concatenated.
pub struct KernelSource {
    pub name: &'static str,
    /// What NVRTC compiles.
    pub source: &'static str,
    /// The names the generated prelude defines.
    pub generated: Vec<String>,
    /// The hand-written files, by name, in order.
    pub files: Vec<(&'static str, &'static str)>,
    /// The kernels it exports with their Rust argument blocks (batch kernels, launched
    /// through [`crate::launch::Kernel`]); empty for units whose kernels the persistent
    /// runtime launches with its own blocks.
    pub typed: Vec<(&'static str, ArgsLayout)>,
}

impl KernelSource {
    /// `prelude` then `files`, kept for the life of the process (a backend compiles it once;
    /// NVRTC and the driver take `&'static str`).
    pub fn assemble(
        name: &'static str,
        prelude: &Prelude,
        files: &[(&'static str, &'static str)],
    ) -> &'static KernelSource {
        Self::assemble_typed(name, prelude, files, Vec::new())
    }

    /// As [`assemble`](Self::assemble), for a unit of batch kernels: `typed` declares every
    /// kernel it exports with its argument block (the kernel check holds it to that). The
    /// blocks' Rust layouts end the unit as `static_assert`s, so the unit compiles (in CI and
    /// on every device) only while each CUDA struct is laid out as its Rust twin.
    pub fn assemble_typed(
        name: &'static str,
        prelude: &Prelude,
        files: &[(&'static str, &'static str)],
        typed: Vec<(&'static str, ArgsLayout)>,
    ) -> &'static KernelSource {
        let mut source = prelude.text.clone();
        for (_, text) in files {
            source.push_str(text);
            source.push('\n');
        }
        if !typed.is_empty() {
            source.push_str("\n// The argument blocks as Rust lays them out (crate::launch).\n");
            let mut seen = Vec::new();
            for (_, layout) in &typed {
                if !seen.contains(&layout.name) {
                    seen.push(layout.name);
                    source.push_str(&layout.cuda_asserts());
                }
            }
        }
        Box::leak(Box::new(KernelSource {
            name,
            source: Box::leak(source.into_boxed_str()),
            generated: prelude.names(),
            files: files.to_vec(),
            typed,
        }))
    }

    /// Lines of the hand-written files that define a name the prelude generates (a limit
    /// stated on both sides of the language boundary). Empty when there are none.
    pub fn restated(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (file, text) in &self.files {
            for line in text.lines() {
                if let Some(n) = defined_names(line).first() {
                    if self.generated.contains(n) {
                        out.push(format!("{}: {file} defines its own {n}: {line}", self.name));
                    }
                }
            }
        }
        out
    }

    /// The kernels (`extern "C" __global__ void name(`) its files declare by name: what the
    /// compiled module must export (kernels a macro makes are not seen here).
    pub fn entry_points(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for (_, text) in &self.files {
            let mut rest: &'static str = text;
            while let Some(at) = rest.find("extern \"C\" __global__ void ") {
                rest = &rest[at + "extern \"C\" __global__ void ".len()..];
                if let Some(after) = rest.trim_start().strip_prefix("__launch_bounds__") {
                    rest = &after[after.find(')').map_or(0, |i| i + 1)..];
                }
                let end = rest.find('(').unwrap_or(0);
                let name = rest[..end].trim();
                // A macro's parameter (`void NAME(`): the kernels it makes are named where the
                // macro is used; registries list those themselves.
                if name.chars().any(|c| c.is_ascii_lowercase()) {
                    out.push(name);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_tables_hold_every_entry_between_its_offsets() {
        let mut p = Prelude::new("here");
        p.strings("T", &["ab", "", "c"]);
        p.array("unsigned int", "SIZES", &[4, 5]);
        let t = p.text();
        assert!(
            t.contains("__constant__ unsigned char T_BYTES[4] = {97,98,99,0};"),
            "{t}"
        );
        assert!(
            t.contains("__constant__ unsigned short T_OFF[4] = {0,2,2,3};"),
            "{t}"
        );
        assert!(
            t.contains("__constant__ unsigned int SIZES[2] = {4,5};"),
            "{t}"
        );
    }

    #[test]
    fn a_restated_limit_is_found_and_entry_points_are_listed() {
        let p = Prelude::new("here").int("LIMIT", 4).error_codes();
        assert!(p.names().iter().any(|n| n == "P_ERR_OVERLOADED"));
        let ok = KernelSource::assemble(
            "ok.cu",
            &p,
            &[("a.cu", "#define OTHER 1\nextern \"C\" __global__ void k1(int x) {}\nextern \"C\" __global__ void __launch_bounds__(256, 2) k2() {}\n")],
        );
        assert!(ok.restated().is_empty());
        assert_eq!(ok.entry_points(), ["k1", "k2"]);
        assert!(ok.source.starts_with("// Generated from here"));
        let bad = KernelSource::assemble("bad.cu", &p, &[("b.cu", "  #define LIMIT 8\n")]);
        assert_eq!(bad.restated().len(), 1, "{:?}", bad.restated());
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn a_limit_too_large_for_an_int_is_refused() {
        let _ = Prelude::new("here").int("HUGE", 1 << 40);
    }
}
