//! What a result file names beside its figures: the machine it was measured on, the commit
//! the binary was built from (`build.rs`), the command and the date. The product's commands
//! that record results (`cohort load --out`, `cohort index ...`) and the lab's benchmarks
//! (`cohort-lab bench ...`) write through [`write_result`].

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;

/// The commit the binary was built from (`git describe`, or `COHORT_BUILD_COMMIT`).
pub const COMMIT: &str = env!("COHORT_COMMIT");

/// The machine a result was measured on.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string());
    let gpus = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    json!({
        "hostname": std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "gpus": gpus,
        // Virtual GPUs (green contexts) the run served on, if any: DEV:NxS.
        "virtual_gpus": std::env::var("COHORT_VIRTUAL_GPUS").ok(),
    })
}

/// Machine, commit, command and date of a result.
pub fn provenance() -> serde_json::Map<String, Value> {
    let v = json!({
        "machine": machine(),
        "commit": COMMIT,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("an object literal"),
    }
}

/// Wraps results with machine, commit, command and date, and writes them atomically (a
/// sibling temporary file renamed over `path`).
pub fn write_result(path: &Path, results: Value) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut doc = provenance();
    doc.insert("results".into(), results);
    let text = serde_json::to_string_pretty(&Value::Object(doc))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
