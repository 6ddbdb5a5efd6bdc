//! `cohort serve --config FILE`: a TOML file whose keys are the serve flags (without `--`,
//! `-` or `_` alike), plus one `[services.NAME]` table per service. The file's flags become
//! flags placed before the command line's, so a flag the command line also gives is taken from
//! the command line, and the file accepts exactly what the flags do. The `[services.NAME]`
//! tables are handed on as tables (their values keep their TOML types), below the services'
//! flags and `--service-opt` in precedence.
//!
//! ```toml
//! service = "knn:gpu-cohort,echo:cpu"
//! index = "/data/sift.ivf"
//! udp = "127.0.0.1:7000"
//! io_threads = 2
//! cpus = "0-1"
//!
//! [services.knn]
//! gpus = [0, 1]
//! max_cohort = 512
//! cohort_timeout_us = 100
//! ```

use anyhow::{bail, Context, Result};
use std::ffi::OsString;

/// A serve flag as the loader needs it: its long name (without `--`) and whether it is a bare
/// switch (TOML true = given, false = not given) rather than a flag that takes a value (a TOML
/// boolean then becomes its value: `udp_gso = false` is `--udp-gso false`).
pub struct Flag {
    pub name: String,
    pub switch: bool,
}

/// The `[services.NAME]` tables of a config file, by service name.
pub type ServiceTables = std::collections::BTreeMap<String, toml::Table>;

/// Expands `serve --config FILE` into the flags the file sets and its services' tables; other
/// argument lists are returned unchanged. `known` lists the serve command's long flags.
pub fn expand(args: Vec<OsString>, known: &[Flag]) -> Result<(Vec<OsString>, ServiceTables)> {
    let Some(serve_at) = args.iter().position(|a| a == "serve") else {
        return Ok((args, ServiceTables::new()));
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
    let Some(path) = path else {
        return Ok((args, ServiceTables::new()));
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading config {}", path.to_string_lossy()))?;
    let (flags, services) = flags_from_toml(&text, known)
        .with_context(|| format!("in config {}", path.to_string_lossy()))?;
    // Flags given on the command line win: drop the file's setting of the same flag (a
    // repeatable --service-opt from the file is kept: the command line's come after it).
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
    Ok((out, services))
}

fn scalar(key: &str, v: &toml::Value) -> Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => items
            .iter()
            .map(|x| scalar(key, x))
            .collect::<Result<Vec<_>>>()?
            .join(","),
        other => bail!("key {key:?}: unsupported value {other}"),
    })
}

/// TOML table -> `--flag value` list and the services' tables; a key that is no serve flag is
/// an error naming the file's key (not a flag).
pub fn flags_from_toml(text: &str, known: &[Flag]) -> Result<(Vec<String>, ServiceTables)> {
    let table: toml::Table = text.parse().context("invalid TOML")?;
    let mut out = Vec::new();
    let mut tables = ServiceTables::new();
    for (key, value) in table {
        if key == "config" {
            bail!("a config file cannot name another config file");
        }
        if key == "services" {
            let toml::Value::Table(services) = value else {
                bail!("\"services\" must be a table of [services.NAME] tables");
            };
            for (name, t) in services {
                let toml::Value::Table(t) = t else {
                    bail!("[services.{name}] must be a table");
                };
                tables.insert(name, t);
            }
            continue;
        }
        let name = key.replace('_', "-");
        let Some(known) = known
            .iter()
            .find(|f| f.name == name && name != "service-opt")
        else {
            bail!(
                "unknown key {key:?} (keys are the serve flags without \"--\", e.g. io_threads, and [services.NAME] tables)"
            );
        };
        let flag = format!("--{name}");
        match &value {
            toml::Value::Boolean(true) if known.switch => out.push(flag),
            toml::Value::Boolean(false) if known.switch => {}
            v => {
                out.push(flag);
                out.push(scalar(&key, v)?);
            }
        }
    }
    Ok((out, tables))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<Flag> {
        [
            "service",
            "io-threads",
            "cpus",
            "verbose",
            "service-opt",
            "udp-gso",
        ]
        .iter()
        .map(|s| Flag {
            name: s.to_string(),
            switch: *s == "verbose",
        })
        .collect()
    }

    #[test]
    fn toml_becomes_flags() {
        let (f, tables) = flags_from_toml(
            "service = \"echo\"\nio_threads = 2\ncpus = [0, 1]\nverbose = false\nudp_gso = false\n[services.knn]\nmax_cohort = 512\ngpus = [0, 1]\n",
            &known(),
        )
        .unwrap();
        let knn = &tables["knn"];
        assert_eq!(knn["max_cohort"], toml::Value::Integer(512));
        assert_eq!(
            knn["gpus"],
            toml::Value::Array(vec![toml::Value::Integer(0), toml::Value::Integer(1)])
        );
        assert_eq!(
            f,
            vec![
                "--cpus",
                "0,1",
                "--io-threads",
                "2",
                "--service",
                "echo",
                "--udp-gso",
                "false"
            ]
        );
        assert!(flags_from_toml("x = {a = 1}", &known()).is_err());
        assert!(flags_from_toml("not toml at all =", &known()).is_err());
        assert!(flags_from_toml("config = \"other.toml\"", &known()).is_err());
        let e = flags_from_toml("io_thread = 2", &known())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown key \"io_thread\"") && !e.contains("--io-thread "),
            "{e}"
        );
        assert!(flags_from_toml("services = 3", &known()).is_err());
    }

    #[test]
    fn command_line_flags_win() {
        let dir = tempdir();
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
        let out: Vec<String> = expand(args, &known())
            .unwrap()
            .0
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert!(!out.contains(&"3".to_string()), "{out:?}");
        assert!(out.contains(&"5".to_string()), "{out:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempdir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cohort-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
