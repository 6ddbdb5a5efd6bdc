//! A device that fails (its upload refused, its searches erroring) never costs a write or a
//! search: writes are still acknowledged and durable, and searches are answered on the CPU
//! with the CPU's answers, counted as such. (The real device, `cohort-collections-gpu`, is
//! tested against the CPU on a GPU machine; this is the collection's side of the hook, which
//! CI can run.)

use cohort_collections::accel::{Accelerator, AcceleratorFactory, Ran, SearchRequest};
use cohort_collections::data::Data;
use cohort_collections::ops::{Op, Point};
use cohort_collections::search::{self, Plan};
use cohort_collections::{Collection, Settings};
use cohort_ivf::Neighbor;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Refuses every upload after the first `good` ones and errors on every search.
struct Failing {
    good: usize,
    syncs: Arc<AtomicUsize>,
}

impl Accelerator for Failing {
    fn name(&self) -> String {
        "a failing device".into()
    }
    fn sync(&self, _d: &Data, _killed: &[u32]) -> Result<(), String> {
        let n = self.syncs.fetch_add(1, Ordering::SeqCst);
        if n < self.good {
            Ok(())
        } else {
            Err("out of device memory".into())
        }
    }
    #[allow(clippy::type_complexity)]
    fn search(
        &self,
        _d: &Data,
        _r: &SearchRequest<'_>,
    ) -> Result<Option<(Vec<Vec<Neighbor>>, Plan)>, String> {
        Err("the device's stream failed".into())
    }
}

struct Factory {
    good: usize,
    syncs: Arc<AtomicUsize>,
}

impl AcceleratorFactory for Factory {
    fn attach(&self, _c: &str, _s: &Settings) -> Result<Box<dyn Accelerator>, String> {
        Ok(Box::new(Failing {
            good: self.good,
            syncs: self.syncs.clone(),
        }))
    }
}

fn point(id: u64) -> Point {
    Point {
        id,
        vector: vec![id as f32, (id % 7) as f32],
        attrs: vec![],
    }
}

#[test]
fn a_failing_device_leaves_writes_and_searches_to_the_cpu() {
    for good in [0, 1, 3] {
        let dir = std::env::temp_dir().join(format!("cohort-accel-{}-{good}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let settings: Settings = serde_json::from_str(r#"{"dim": 2}"#).unwrap();
        let syncs = Arc::new(AtomicUsize::new(0));
        let f = Factory {
            good,
            syncs: syncs.clone(),
        };
        // The first upload may fail (good = 0): the collection still opens and serves.
        let c = Arc::new(Collection::open_with(&dir, "c", settings.clone(), Some(&f)).unwrap());
        assert_eq!(c.device().as_deref(), Some("a failing device"));
        for id in 0..20 {
            assert_eq!(
                c.write(Op::Upsert(vec![point(id)])).unwrap(),
                1,
                "write {id}"
            );
        }
        assert_eq!(c.write(Op::DeleteIds(vec![3, 4])).unwrap(), 2);
        assert_eq!(
            syncs.load(Ordering::SeqCst),
            22,
            "every group synced (open + 21 writes)"
        );
        let q = vec![vec![5.0, 5.0]];
        let r = SearchRequest {
            queries: &q,
            k: 4,
            nprobe: None,
            filter: None,
        };
        let d = c.read();
        let (got, plan, ran) = c.search_in(&d, &r);
        assert_eq!(ran, Ran::Cpu);
        let (want, want_plan) = search::search(&d, &q, 4, None, None);
        assert_eq!((got, plan), (want, want_plan));
        drop(d);
        assert_eq!(c.search_stats(), (0, 1));
        drop(c);
        // Everything acknowledged is there after a restart without a device.
        let c = Collection::open(&dir, "c", settings).unwrap();
        assert_eq!(c.count(), 18);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
