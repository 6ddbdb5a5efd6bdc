//! `cohort serve --config FILE`: a TOML file whose keys are the serve flags (without `--`,
//! `-` or `_` alike). The file's settings become flags placed before the command line's, so
//! a flag the command line also gives is taken from the command line, and the file accepts exactly what the flags do
//! (an unknown key is an unknown flag: a clear error).
//!
//! ```toml
//! service = "knn"
//! index = "/data/sift.ivf"
//! udp = "0.0.0.0:7000"
//! io_threads = 2
//! cpus = [0, 1]
//! max_queue = 16384
//! ```

use anyhow::{bail, Context, Result};
use std::ffi::OsString;

/// Expands `serve --config FILE` into the flags the file sets; other argument lists are
/// returned unchanged.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>> {
    let Some(serve_at) = args.iter().position(|a| a == "serve") else {
        return Ok(args);
    };
    let mut path = None;
    for (i, a) in args.iter().enumerate().skip(serve_at + 1) {
        let s = a.to_string_lossy();
        if s == "--config" {
            path = args.get(i + 1).cloned();
        } else if let Some(p) = s.strip_prefix("--config=") {
            path = Some(p.into());
        }
    }
    let Some(path) = path else { return Ok(args) };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading config {}", path.to_string_lossy()))?;
    let flags =
        flags_from_toml(&text).with_context(|| format!("in config {}", path.to_string_lossy()))?;
    // Flags given on the command line win: drop the file's setting of the same flag.
    let given: std::collections::HashSet<String> = args[serve_at + 1..]
        .iter()
        .filter_map(|a| a.to_str())
        .filter(|a| a.starts_with("--"))
        .map(|a| a.split('=').next().unwrap_or(a).to_string())
        .collect();
    let mut out: Vec<OsString> = args[..=serve_at].to_vec();
    let mut i = 0;
    while i < flags.len() {
        // A flag and, unless it is a bare switch, its value.
        let n = if flags.get(i + 1).is_some_and(|v| !v.starts_with("--")) {
            2
        } else {
            1
        };
        if !given.contains(&flags[i]) {
            out.extend(flags[i..i + n].iter().map(OsString::from));
        }
        i += n;
    }
    out.extend(args[serve_at + 1..].iter().cloned());
    Ok(out)
}

/// TOML table -> `--flag value` list.
pub fn flags_from_toml(text: &str) -> Result<Vec<String>> {
    let table: toml::Table = text.parse().context("invalid TOML")?;
    let mut out = Vec::new();
    for (key, value) in table {
        if key == "config" {
            bail!("a config file cannot name another config file");
        }
        let flag = format!("--{}", key.replace('_', "-"));
        let scalar = |v: &toml::Value| -> Result<String> {
            Ok(match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                other => bail!("key {key:?}: unsupported value {other}"),
            })
        };
        match &value {
            toml::Value::Boolean(true) => out.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) => {
                let parts = items.iter().map(scalar).collect::<Result<Vec<_>>>()?;
                out.push(flag);
                out.push(parts.join(","));
            }
            v => {
                out.push(flag);
                out.push(scalar(v)?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_becomes_flags() {
        let f =
            flags_from_toml("service = \"echo\"\nio_threads = 2\ncpus = [0, 1]\nverbose = false\n")
                .unwrap();
        assert_eq!(
            f,
            vec!["--cpus", "0,1", "--io-threads", "2", "--service", "echo"]
        );
        assert!(flags_from_toml("x = {a = 1}").is_err());
        assert!(flags_from_toml("not toml at all =").is_err());
        assert!(flags_from_toml("config = \"other.toml\"").is_err());
    }

    #[test]
    fn command_line_flags_win() {
        let dir = std::env::temp_dir().join(format!("cohort-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.toml");
        std::fs::write(&p, "io_threads = 3\n").unwrap();
        let args: Vec<OsString> = [
            "cohort",
            "serve",
            "--config",
            p.to_str().unwrap(),
            "--io-threads",
            "5",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let out: Vec<String> = expand(args)
            .unwrap()
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert!(!out.contains(&"3".to_string()), "{out:?}");
        assert!(out.contains(&"5".to_string()), "{out:?}");
    }
}
