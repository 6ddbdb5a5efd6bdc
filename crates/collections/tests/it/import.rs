//! An index file of the static k-NN service seeds a collection: every row a point (id = row
//! number), the metric and element type from the index, its centroids reused for the lists;
//! durable (a reopen finds it whole) and atomic (a failure leaves no collection, an existing
//! one is refused and untouched).

use cohort_collections::import::import_index;
use cohort_collections::ops::{Op, Point};
use cohort_collections::{Element, Kind, Metric, Store};
use cohort_ivf::ivf::IvfIndex;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::Vectors;
use std::path::{Path, PathBuf};

const N: usize = 6000;
const DIM: usize = 16;
const NLIST: usize = 24;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cohort-import-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// SIFT-like rows (integral, 0..=255) as an index file.
fn index_file(dir: &Path, base: &Vectors, metric: cohort_ivf::metric::Metric) -> PathBuf {
    let ix = IvfIndex::build(base, NLIST, metric, &KMeansConfig::new(NLIST));
    let p = dir.join(format!("ix-{metric:?}"));
    ix.save(&p).unwrap();
    p
}

fn base() -> Vectors {
    Model::new(SynthConfig::sift_like(DIM, 8)).sample(N, 0)
}

/// Leftovers of a create in progress.
fn creating(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("collections"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

#[test]
fn an_index_file_seeds_a_durable_collection() {
    let d = scratch("seed");
    let base = base();
    let ix = index_file(&d, &base, cohort_ivf::metric::Metric::L2);
    let data = d.join("data");
    let store = Store::open(&data).unwrap();
    let got = import_index(&store, "sift", &ix, None).unwrap();
    assert_eq!(got.points, N as u64);
    assert_eq!(got.nlist, NLIST);
    assert_eq!(
        (got.settings.dim, got.settings.metric, got.settings.element),
        (DIM, Metric::L2, Element::U8)
    );
    let c = store.get("sift").unwrap();
    assert_eq!(c.count(), N);
    {
        let d = c.read();
        // Every row is the point with its row number, as written.
        for id in [0u64, 1, 777, N as u64 - 1] {
            assert_eq!(d.get(id).unwrap().vector, base.row(id as usize), "{id}");
        }
        // The lists are the index's (its nlist), and a row is its own nearest.
        assert_eq!(d.nlist(), Some(NLIST));
        let q = vec![base.row(4321).to_vec()];
        let (ans, _) = cohort_collections::search::search(&d, &q, 1, Some(NLIST), None);
        assert_eq!(d.id_of(ans[0][0].id as usize), 4321);
    }
    // A name taken is refused and left as it is; so is a second import of it.
    let e = import_index(&store, "sift", &ix, None).unwrap_err();
    assert_eq!(e.kind, Kind::Conflict, "{e:?}");
    assert_eq!(store.get("sift").unwrap().count(), N);
    // Writes go on as on any collection.
    let p = Point {
        id: 1_000_000,
        vector: vec![3.0; DIM],
        attrs: vec![],
    };
    c.write(Op::Upsert(vec![p])).unwrap();
    c.write(Op::DeleteIds(vec![0, 1])).unwrap();
    drop(c);
    drop(store);
    // Reopened: the snapshot and the log after it, the lists seeded again.
    let store = Store::open(&data).unwrap();
    let c = store.get("sift").unwrap();
    assert_eq!(c.count(), N - 1);
    let r = c.read();
    assert!(r.get(0).is_none() && r.get(1_000_000).is_some());
    assert_eq!(r.get(2).unwrap().vector, base.row(2));
    assert_eq!(r.nlist(), Some(NLIST));
    drop(r);
    drop(c);
    drop(store);
    // A damaged centroids file is refused, not served.
    let cent = data.join("collections/sift/centroids");
    let mut b = std::fs::read(&cent).unwrap();
    b[30] ^= 1;
    std::fs::write(&cent, b).unwrap();
    let e = Store::open(&data).err().expect("refused");
    assert!(
        e.message.contains("centroids") && e.message.contains("corrupt"),
        "{e:?}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_element_and_metric_follow_the_index_and_bad_input_leaves_nothing() {
    let d = scratch("kinds");
    let data = d.join("data");
    let store = Store::open(&data).unwrap();
    // Values off the integers: f32; an inner-product index: ip.
    let mut base = base();
    base.data.iter_mut().for_each(|x| *x = *x / 7.0 - 3.0);
    let ip = index_file(&d, &base, cohort_ivf::metric::Metric::InnerProduct);
    let got = import_index(&store, "ip", &ip, None).unwrap();
    assert_eq!(
        (got.settings.metric, got.settings.element),
        (Metric::Ip, Element::F32)
    );
    // u8 asked of such values: refused, naming the row; nothing left behind.
    let e = import_index(&store, "bytes", &ip, Some(Element::U8)).unwrap_err();
    assert_eq!(e.kind, Kind::BadRequest, "{e:?}");
    assert!(e.message.contains("index row"), "{e:?}");
    assert!(store.get("bytes").is_err());
    assert!(creating(&data).is_empty(), "{:?}", creating(&data));
    // Not an index: refused, naming it; nothing left behind.
    let junk = d.join("junk");
    std::fs::write(&junk, b"not an index at all").unwrap();
    let e = import_index(&store, "junk", &junk, None).unwrap_err();
    assert_eq!(e.kind, Kind::BadRequest, "{e:?}");
    assert!(e.message.contains("junk"), "{e:?}");
    let e = import_index(&store, "gone", &d.join("missing"), None).unwrap_err();
    assert_eq!(e.kind, Kind::BadRequest, "{e:?}");
    assert!(store.get("junk").is_err() && store.get("gone").is_err());
    // A bad name: refused before anything is read or written.
    let e = import_index(&store, "a/b", &ip, None).unwrap_err();
    assert_eq!(e.kind, Kind::BadRequest, "{e:?}");
    assert_eq!(store.list().len(), 1);
    assert!(creating(&data).is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}
