//! Small helpers shared by the subcommands.

use anyhow::{Context, Result};
use std::path::Path;

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, then rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

/// A sibling temporary path that keeps the extension (plotters picks the format from it).
pub fn tmp_path(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp.{}", std::process::id(), ext(path)))
}

fn ext(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into())
}

/// A core list as one flag value (`--cpus 0-3,8`). A newtype, so clap takes the whole list as
/// one value instead of expecting several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

pub fn parse_cpu_list(s: &str) -> Result<CpuList, String> {
    let v = parse_cpus(s)?;
    if v.is_empty() {
        return Err("empty cpu list".into());
    }
    Ok(CpuList(v))
}

/// Parses a core list such as `0-3,8,10-11`.
pub fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("bad cpu list element {part:?} (use e.g. 0-3,8)");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

/// Parses one rate: `10000`, `10k` or `1.5M` (clap splits lists on commas).
pub fn parse_rate(p: &str) -> Result<f64, String> {
    let (num, mul) = match p.chars().last() {
        Some('k' | 'K') => (&p[..p.len() - 1], 1e3),
        Some('m' | 'M') => (&p[..p.len() - 1], 1e6),
        _ => (p, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * mul),
        _ => Err(format!("bad rate {p:?} (e.g. 20000, 20k, 1.5M)")),
    }
}

/// Parses a byte count: `1048576`, `512K`, `256M`, `2G` (powers of 1024; `KiB`, `MiB`, `GiB`
/// alike).
pub fn parse_bytes(p: &str) -> Result<usize, String> {
    let t = p.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    match num.parse::<usize>() {
        Ok(v) if v > 0 => v
            .checked_mul(1 << shift)
            .ok_or_else(|| format!("{p:?} is too large")),
        _ => Err(format!("bad byte count {p:?} (e.g. 1048576, 512M, 2G)")),
    }
}

/// A byte count as `parse_bytes` reads it, or `0` (for settings where 0 means "off").
pub fn parse_bytes_or_zero(p: &str) -> Result<usize, String> {
    if p.trim() == "0" {
        return Ok(0);
    }
    parse_bytes(p)
}

/// `on` / `off` (also true/false, 1/0) for a switch that defaults on.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("512M").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("64k").unwrap(), 64 << 10);
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpus("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cpus("3-1").is_err());
        assert!(parse_cpus("x").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10k").unwrap(), 10e3);
        assert_eq!(parse_rate("1.5M").unwrap(), 1.5e6);
        assert_eq!(parse_rate("7").unwrap(), 7.0);
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
    }
}
