//! Host package energy from Linux RAPL (`/sys/class/powercap/intel-rapl:N/energy_uj`, also
//! used by AMD's driver). Often unreadable for non-root users or absent in VMs: then the
//! caller reports why, never a number.

use std::path::{Path, PathBuf};

const POWERCAP: &str = "/sys/class/powercap";

pub struct Rapl {
    /// One top-level zone per package: (energy_uj path, wrap range in uJ).
    zones: Vec<(PathBuf, u64)>,
}

impl Rapl {
    pub fn open() -> Result<Rapl, String> {
        Rapl::open_at(Path::new(POWERCAP))
    }

    pub fn open_at(root: &Path) -> Result<Rapl, String> {
        let entries = std::fs::read_dir(root)
            .map_err(|e| format!("RAPL not exposed ({}: {e})", root.display()))?;
        let mut zones = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            // Packages are intel-rapl:N; sub-zones (intel-rapl:N:M) are parts of a package.
            let Some(rest) = name.strip_prefix("intel-rapl:") else {
                continue;
            };
            if rest.contains(':') {
                continue;
            }
            let dir = e.path();
            let range = read_u64(&dir.join("max_energy_range_uj")).unwrap_or(u64::MAX);
            zones.push((dir.join("energy_uj"), range));
        }
        if zones.is_empty() {
            return Err(format!("RAPL: no package zone under {}", root.display()));
        }
        zones.sort();
        let r = Rapl { zones };
        r.read()?;
        Ok(r)
    }

    /// Every package's counter now (uJ).
    pub fn read(&self) -> Result<Vec<u64>, String> {
        self.zones
            .iter()
            .map(|(p, _)| {
                read_u64(p).ok_or_else(|| format!("RAPL: {} is not readable", p.display()))
            })
            .collect()
    }

    /// Joules per package between two readings, allowing one wrap of each counter.
    pub fn joules_between(&self, before: &[u64], after: &[u64]) -> Vec<f64> {
        self.zones
            .iter()
            .zip(before.iter().zip(after))
            .map(|((_, range), (&a, &z))| {
                let uj = if z >= a {
                    z - a
                } else {
                    range.saturating_sub(a) + z
                };
                uj as f64 / 1e6
            })
            .collect()
    }
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::Rapl;

    #[test]
    fn reads_packages_and_handles_a_wrap() {
        let root = std::env::temp_dir().join(format!("cohort-rapl-{}", std::process::id()));
        for (zone, uj) in [
            ("intel-rapl:0", "1000000"),
            ("intel-rapl:1", "5"),
            ("intel-rapl:0:0", "7"),
        ] {
            let d = root.join(zone);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("energy_uj"), uj).unwrap();
            std::fs::write(d.join("max_energy_range_uj"), "2000000").unwrap();
        }
        let r = Rapl::open_at(&root).unwrap();
        let before = r.read().unwrap();
        assert_eq!(before, vec![1_000_000, 5], "sub-zones are not packages");
        std::fs::write(root.join("intel-rapl:0/energy_uj"), "500000").unwrap();
        std::fs::write(root.join("intel-rapl:1/energy_uj"), "2000005").unwrap();
        let j = r.joules_between(&before, &r.read().unwrap());
        // Package 0 wrapped: (2.0 - 1.0) + 0.5 J; package 1: 2.0 J.
        assert!(
            (j[0] - 1.5).abs() < 1e-9 && (j[1] - 2.0).abs() < 1e-9,
            "{j:?}"
        );
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            Rapl::open_at(&root).is_err(),
            "a missing tree is an error, not zero"
        );
    }
}
