//! Files written whole or not at all: into `STEM.tmp.PID` beside the target, synced, then
//! renamed over it (`Temp`). A write that fails removes its temporary; a command that installs
//! `remove_temps_on_signals` removes them on SIGINT and SIGTERM too. Only a writer killed
//! outright (SIGKILL, a crash, power loss) leaves its temporary behind (builds of large indexes
//! left 13-132 MB ones); the next write into that folder removes every such temporary whose
//! process is gone.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Temporaries this process is writing now.
static WRITING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A temporary being written for a target: removed when dropped unless renamed over it.
pub struct Temp {
    path: PathBuf,
    renamed: bool,
}

impl Temp {
    /// The temporary for `target` (stale ones of dead processes removed first).
    pub fn new(target: &Path) -> Temp {
        remove_stale_temps(target);
        let path = temp_path(target);
        WRITING.lock().expect("temporaries").push(path.clone());
        Temp {
            path,
            renamed: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the finished temporary over `target`.
    pub fn commit(mut self, target: &Path) -> std::io::Result<()> {
        std::fs::rename(&self.path, target)?;
        self.renamed = true;
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        WRITING
            .lock()
            .expect("temporaries")
            .retain(|p| p != &self.path);
        if !self.renamed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes `bytes` to `target` whole or not at all: into its temporary, synced, renamed over it.
pub fn write_whole(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = Temp::new(target);
    let mut f = std::fs::File::create(tmp.path())?;
    f.write_all(bytes)?;
    f.sync_all()?;
    tmp.commit(target)
}

/// From now on SIGINT and SIGTERM remove every temporary being written, then end the process
/// as the signal would have (for commands that write files; a server has its own handling).
pub fn remove_temps_on_signals() -> std::io::Result<()> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("temp-cleanup".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // A writer may hold the list for a moment; never block the exit on it for ever.
                let paths = match WRITING.try_lock() {
                    Ok(v) => v.clone(),
                    Err(_) => {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        WRITING.try_lock().map(|v| v.clone()).unwrap_or_default()
                    }
                };
                for p in paths {
                    let _ = std::fs::remove_file(&p);
                }
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        })?;
    let _ = INSTALLED.set(());
    Ok(())
}

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
    fn a_temporary_not_committed_is_removed_and_a_committed_one_becomes_the_target() {
        let dir = std::env::temp_dir().join(format!("cohort-temp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.index");
        let t = Temp::new(&target);
        std::fs::write(t.path(), b"half").unwrap();
        let p = t.path().to_path_buf();
        assert!(WRITING.lock().unwrap().contains(&p));
        drop(t); // a failed write
        assert!(!p.exists() && !WRITING.lock().unwrap().contains(&p));
        let t = Temp::new(&target);
        std::fs::write(t.path(), b"whole").unwrap();
        t.commit(&target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"whole");
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
