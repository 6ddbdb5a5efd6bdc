//! A persistent service's argument block, typed. The CUDA side declares `struct SvcArgs` with
//! 64-bit fields; [`svc_args!`](crate::svc_args) declares the same fields once in Rust, as a
//! struct with named fields (no positional list to keep in step by hand), and
//! [`check_against_cuda`] compares the two declarations field by field (name, order, width):
//! a test of every persistent service runs it without a GPU.

/// Declares a persistent service's argument block: a `#[repr(C)]` struct of `u64` fields with
/// `FIELDS` (their names, in order) and `to_svc_args`, the block the runtime passes to every
/// stage kernel.
#[macro_export]
macro_rules! svc_args {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($(#[$fm:meta])* $field:ident),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        $vis struct $name {
            $($(#[$fm])* pub $field: u64,)*
        }

        impl $name {
            /// The fields' names, in their order (the CUDA struct's).
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// The block the runtime hands the stage kernels.
            pub fn to_svc_args(self) -> $crate::persistent::SvcArgs {
                $crate::persistent::SvcArgs::new(&[$(self.$field),*])
            }
        }
    };
}

/// Whether `struct SvcArgs { ... }` in `cuda` declares exactly `fields`, in order, each an
/// `unsigned long long` (so each offset is 8 x its index, as the Rust struct's). The error
/// names the first difference.
pub fn check_against_cuda(fields: &[&str], cuda: &str) -> Result<(), String> {
    let start = cuda
        .find("struct SvcArgs {")
        .ok_or("no `struct SvcArgs {` in the CUDA source")?;
    let body = &cuda[start + "struct SvcArgs {".len()..];
    let end = body.find("};").ok_or("`struct SvcArgs` is not closed")?;
    let mut declared = Vec::new();
    for line in body[..end].lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        if code.is_empty() {
            continue;
        }
        let decl = code
            .strip_suffix(';')
            .ok_or_else(|| format!("not one field per line: {code:?}"))?;
        let name = decl
            .strip_prefix("unsigned long long ")
            .ok_or_else(|| format!("field not 64-bit (unsigned long long): {code:?}"))?;
        declared.push(name.trim().to_string());
    }
    if declared.len() > super::rt::SVC_ARGS {
        return Err(format!(
            "{} fields: the runtime passes at most {}",
            declared.len(),
            super::rt::SVC_ARGS
        ));
    }
    for (i, (c, r)) in declared.iter().zip(fields).enumerate() {
        if c != r {
            return Err(format!("field {i}: CUDA declares {c}, Rust {r}"));
        }
    }
    if declared.len() != fields.len() {
        return Err(format!(
            "CUDA declares {} fields, Rust {}",
            declared.len(),
            fields.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::svc_args! {
        struct Demo { first, second }
    }

    #[test]
    fn a_block_matches_its_cuda_struct_field_by_field() {
        let cuda = "struct SvcArgs {\n    unsigned long long first;   // a\n    unsigned long long second;\n};\n";
        assert_eq!(check_against_cuda(Demo::FIELDS, cuda), Ok(()));
        let d = Demo {
            first: 7,
            second: 9,
        };
        assert_eq!(&d.to_svc_args().0[..3], &[7, 9, 0]);
        let swapped = cuda
            .replace("first;", "tmp;")
            .replace("second;", "first;")
            .replace("tmp;", "second;");
        assert!(check_against_cuda(Demo::FIELDS, &swapped)
            .unwrap_err()
            .contains("field 0"));
        let narrow = cuda.replace("unsigned long long second", "unsigned int second");
        assert!(check_against_cuda(Demo::FIELDS, &narrow)
            .unwrap_err()
            .contains("64-bit"));
        let more = cuda.replace("};", "    unsigned long long third;\n};");
        assert!(check_against_cuda(Demo::FIELDS, &more)
            .unwrap_err()
            .contains("3 fields"));
    }
}
