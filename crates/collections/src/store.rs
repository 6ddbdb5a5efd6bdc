//! The collections of one `--data-dir`:
//!
//! ```text
//! DIR/LOCK                          flock(2): one server per directory
//! DIR/collections/NAME/settings.json
//! DIR/collections/NAME/wal          the write-ahead log (crate::wal)
//! DIR/collections/NAME/snapshot     the last snapshot (crate::snapshot), once one was taken
//! ```
//!
//! A collection is created in `.creating-NAME` and renamed into place (then the directory is
//! synced), and dropped by renaming it to `.dropped-NAME-N` before removing it, so a crash
//! leaves either the whole collection or none; leftovers of either are removed on open.

use crate::accel::AcceleratorFactory;
use crate::collection::Collection;
use crate::error::{Error, Kind, Result};
use crate::schema::{check_name, limits, Settings};
use crate::snapshot::sync_dir;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

pub struct Store {
    root: PathBuf,
    cols: RwLock<BTreeMap<String, Arc<Collection>>>,
    /// Serialises creates and drops (the directory operations).
    catalog: Mutex<()>,
    _lock: std::fs::File,
    /// The device copies' maker, when searches run on a device.
    factory: Option<Arc<dyn AcceleratorFactory>>,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::internal(format!("{what}: {e}"))
}

impl Store {
    /// Opens (creating) the store in `dir` and every collection in it. A collection that
    /// cannot be read back whole (a corrupt snapshot, a damaged log) fails the open with its
    /// error: it is never served in part.
    pub fn open(dir: &Path) -> Result<Store> {
        Store::open_with(dir, None)
    }

    /// As `open`, each collection with a device copy from `factory` serving its searches.
    pub fn open_with(dir: &Path, factory: Option<Arc<dyn AcceleratorFactory>>) -> Result<Store> {
        let root = dir.join("collections");
        std::fs::create_dir_all(&root).map_err(io(format!("creating {}", root.display())))?;
        let lock_path = dir.join("LOCK");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(format!("opening {}", lock_path.display())))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(Error::internal(format!(
                "--data-dir {}: another process holds {} (another cohort serve on this directory?)",
                dir.display(),
                lock_path.display()
            )));
        }
        let mut cols = BTreeMap::new();
        let entries =
            std::fs::read_dir(&root).map_err(io(format!("reading {}", root.display())))?;
        for e in entries {
            let e = e.map_err(io(format!("reading {}", root.display())))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if name.starts_with(".creating-") || name.starts_with(".dropped-") {
                std::fs::remove_dir_all(&path)
                    .map_err(io(format!("removing {}", path.display())))?;
                continue;
            }
            if check_name("collection", &name).is_err() || !path.is_dir() {
                tracing::warn!(path = %path.display(), "not a collection; left alone");
                continue;
            }
            let settings = read_settings(&path)?;
            let c = Collection::open_with(&path, &name, settings, factory.as_deref())?;
            cols.insert(name, Arc::new(c));
        }
        Ok(Store {
            root,
            cols: RwLock::new(cols),
            catalog: Mutex::new(()),
            _lock: lock,
            factory,
        })
    }

    pub fn get(&self, name: &str) -> Result<Arc<Collection>> {
        self.cols
            .read()
            .expect("catalog lock")
            .get(name)
            .cloned()
            .ok_or_else(|| Error::not_found(name))
    }

    pub fn list(&self) -> Vec<Arc<Collection>> {
        self.cols
            .read()
            .expect("catalog lock")
            .values()
            .cloned()
            .collect()
    }

    /// Creates a collection, durably, before answering.
    pub fn create(&self, name: &str, settings: Settings) -> Result<Arc<Collection>> {
        self.create_from(name, settings, |_| Ok(()))
    }

    /// Creates a collection whose directory `fill` completes first (an import writes its
    /// snapshot there): everything is written in `.creating-NAME`, synced, and renamed into
    /// place only when `fill` succeeded, so a crash or an error leaves no collection, and the
    /// collection is then opened (and its files read back) before this answers.
    pub fn create_from(
        &self,
        name: &str,
        settings: Settings,
        fill: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<Arc<Collection>> {
        check_name("collection", name)?;
        settings.validate()?;
        let _g = self.catalog.lock().expect("catalog lock");
        {
            let cols = self.cols.read().expect("catalog lock");
            if cols.contains_key(name) {
                return Err(Error::new(
                    Kind::Conflict,
                    format!("collection {name:?} exists"),
                ));
            }
            if cols.len() >= limits::MAX_COLLECTIONS {
                return Err(Error::new(
                    Kind::TooLarge,
                    format!("{} collections already, the limit", limits::MAX_COLLECTIONS),
                ));
            }
        }
        let tmp = self.root.join(format!(".creating-{name}"));
        let dir = self.root.join(name);
        let started = (|| -> std::io::Result<()> {
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir(&tmp)?;
            let s = tmp.join("settings.json");
            std::fs::write(
                &s,
                serde_json::to_vec_pretty(&settings).expect("settings serialise"),
            )?;
            std::fs::File::open(&s)?.sync_all()?;
            std::fs::File::create(tmp.join("wal"))?.sync_all()
        })()
        .map_err(|e| Error::io(&format!("creating collection {name}"), &e));
        let made = started.and_then(|_| fill(&tmp)).and_then(|_| {
            (|| -> std::io::Result<()> {
                sync_dir(&tmp)?;
                std::fs::rename(&tmp, &dir)?;
                sync_dir(&self.root)
            })()
            .map_err(|e| Error::io(&format!("creating collection {name}"), &e))
        });
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        let c = Arc::new(Collection::open_with(
            &dir,
            name,
            settings,
            self.factory.as_deref(),
        )?);
        self.cols
            .write()
            .expect("catalog lock")
            .insert(name.to_string(), c.clone());
        Ok(c)
    }

    /// Drops a collection: later writes to it are refused, its directory goes.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        let _g = self.catalog.lock().expect("catalog lock");
        let c = self
            .cols
            .write()
            .expect("catalog lock")
            .remove(name)
            .ok_or_else(|| Error::not_found(name))?;
        c.mark_dropped();
        let gone = self.root.join(format!(
            ".dropped-{name}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let r = std::fs::rename(self.root.join(name), &gone).and_then(|_| sync_dir(&self.root));
        if let Err(e) = r {
            return Err(Error::io(&format!("dropping collection {name}"), &e));
        }
        if let Err(e) = std::fs::remove_dir_all(&gone) {
            // Dropped already (the rename was durable); the next open removes the rest.
            tracing::warn!(path = %gone.display(), error = %e, "removing a dropped collection");
        }
        Ok(())
    }
}

fn read_settings(dir: &Path) -> Result<Settings> {
    let p = dir.join("settings.json");
    let bytes = std::fs::read(&p).map_err(io(format!("reading {}", p.display())))?;
    let s: Settings = serde_json::from_slice(&bytes)
        .map_err(|e| Error::internal(format!("{}: {e}", p.display())))?;
    s.validate()
        .map_err(|e| Error::internal(format!("{}: {}", p.display(), e.message)))?;
    Ok(s)
}
