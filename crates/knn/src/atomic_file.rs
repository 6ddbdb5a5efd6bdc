//! Files written whole or not at all: into `STEM.tmp.PID` beside the target, synced, then
//! renamed over it. A writer killed half-way leaves its temporary behind (builds of large
//! indexes left 33 MB and 132 MB ones); the next write into that folder removes every such
//! temporary whose process is gone.

use std::path::{Path, PathBuf};

/// This process's temporary for `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    path.with_extension(format!("tmp.{}", std::process::id()))
}

/// Removes the temporaries for `path`'s stem left by processes that no longer run (never
/// one of a live writer, this process's own included). Returns the ones removed.
pub fn remove_stale_temps(path: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
        return removed;
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return removed;
    };
    let prefix = format!("{stem}.tmp.");
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid > 0 && !alive(pid) && std::fs::remove_file(e.path()).is_ok() {
            removed.push(e.path());
        }
    }
    removed
}

/// Whether process `pid` exists (signal 0 checks without sending anything).
fn alive(pid: i32) -> bool {
    if pid == std::process::id() as i32 {
        return true;
    }
    // SAFETY: kill with signal 0 only checks the process; no signal is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temporaries_go_and_live_ones_stay() {
        let dir = std::env::temp_dir().join(format!("cohort-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("index.ivf");
        // A pid far above any default pid_max (2^22) is not running.
        let dead = dir.join("index.tmp.2000000000");
        let mine = temp_path(&target);
        let other = dir.join("other.tmp.2000000000");
        let unrelated = dir.join("index.tmp.notapid");
        for p in [&dead, &mine, &other, &unrelated] {
            std::fs::write(p, b"x").unwrap();
        }
        assert_eq!(remove_stale_temps(&target), vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(mine.exists() && other.exists() && unrelated.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
