use cohort_ivf::exact;
use cohort_ivf::ivf::stages;
use cohort_ivf::kmeans::{self, Init, KMeansConfig};
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::vecfile::*;
use cohort_ivf::{IvfIndex, Metric, SearchParams, Vectors};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

/// A scratch folder removed when the test ends (tests leave nothing in /tmp).
struct TmpDir(PathBuf);
impl std::ops::Deref for TmpDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}
impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmpdir(name: &str) -> TmpDir {
    let d = std::env::temp_dir().join(format!("cohort-knn-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    TmpDir(d)
}

fn synth(n: usize, dim: usize, stream: u64) -> Vectors {
    Model::new(SynthConfig {
        dim,
        clusters: 32,
        latent_dim: 8,
        noise: 0.05,
        seed: 5,
    })
    .sample(n, stream)
}

#[test]
fn texmex_and_npy_roundtrip() {
    let d = tmpdir("rt");
    let v = synth(50, 12, 1);
    write_fvecs(&d.join("a.fvecs"), &v).unwrap();
    assert_eq!(read_vectors(&d.join("a.fvecs")).unwrap(), v);
    write_bvecs(&d.join("a.bvecs"), &v).unwrap(); // synth values are integers in 0..=255
    assert_eq!(read_vectors(&d.join("a.bvecs")).unwrap(), v);
    write_npy(&d.join("a.npy"), &v).unwrap();
    assert_eq!(read_vectors(&d.join("a.npy")).unwrap(), v);
    let ids: Vec<i32> = (0..30).collect();
    write_ivecs(&d.join("g.ivecs"), 10, &ids).unwrap();
    assert_eq!(read_ivecs(&d.join("g.ivecs")).unwrap(), (3, 10, ids));
}

#[test]
fn bad_vector_files_give_clear_errors() {
    let d = tmpdir("bad");
    let v = synth(10, 8, 1);
    let p = d.join("t.fvecs");
    write_fvecs(&p, &v).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
    let e = read_vectors(&p).unwrap_err().to_string();
    assert!(e.contains("not a multiple"), "{e}");
    // Second record claims another dimension.
    let mut b = bytes.clone();
    b[36..40].copy_from_slice(&9i32.to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let e = read_vectors(&p).unwrap_err().to_string();
    assert!(e.contains("record 1 has dimension 9"), "{e}");
    std::fs::write(&p, b"").unwrap();
    assert!(read_vectors(&p).is_err());
    let q = d.join("t.npy");
    write_npy(&q, &v).unwrap();
    let bytes = std::fs::read(&q).unwrap();
    std::fs::write(&q, &bytes[..bytes.len() - 4]).unwrap();
    assert!(read_vectors(&q)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
    std::fs::write(&q, b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f8'").unwrap();
    assert!(read_vectors(&q).is_err());
    assert!(read_vectors(&d.join("x.txt"))
        .unwrap_err()
        .to_string()
        .contains("unknown vector file"));
    assert!(read_vectors(&d.join("missing.fvecs")).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn npy_and_texmex_readers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let d = tmpdir("fuzz");
        for name in ["g.fvecs", "g.bvecs", "g.npy"] {
            let p = d.join(name);
            std::fs::write(&p, &bytes).unwrap();
            let _ = read_vectors(&p);
        }
        let p = d.join("g.ivecs");
        std::fs::write(&p, &bytes).unwrap();
        let _ = read_ivecs(&p);
    }

    /// reduce(search(all probes)) equals exact search restricted to the probed cells.
    #[test]
    fn stages_compose_to_exact_over_probed_cells(seed in 0u64..1000, nprobe in 1usize..8, k in 1usize..20) {
        let base = Model::new(SynthConfig { dim: 8, clusters: 8, latent_dim: 4, noise: 0.05, seed }).sample(600, 1);
        let ix = IvfIndex::build(&base, 8, Metric::L2, &KMeansConfig { iters: 4, ..KMeansConfig::new(8) });
        let q = Model::new(SynthConfig { dim: 8, clusters: 8, latent_dim: 4, noise: 0.05, seed }).sample(1, 2);
        let probes = stages::filter(ix.centroids(), 8, Metric::L2, q.row(0), nprobe);
        let got = stages::reduce(&stages::search(&ix, q.row(0), &probes, k), k);
        let mut want = cohort_ivf::TopK::new(k);
        for &c in &probes {
            let (s, e) = ix.cell_range(c as usize);
            for r in s..e {
                let v = &ix.vectors()[r * 8..(r + 1) * 8];
                want.push(ix.ids()[r], Metric::L2.distance(q.row(0), v));
            }
        }
        prop_assert_eq!(got, want.into_sorted());
    }
}

#[test]
fn ivf_with_every_cell_probed_equals_exact() {
    let base = synth(5000, 16, 1);
    let queries = synth(50, 16, 2);
    for metric in [Metric::L2, Metric::InnerProduct] {
        let ix = IvfIndex::build(&base, 32, metric, &KMeansConfig::new(32));
        for i in 0..queries.n {
            let q = queries.row(i);
            let got = ix.query(q, SearchParams { k: 10, nprobe: 32 });
            let want = exact::search_one(&base, metric, q, 10);
            assert_eq!(
                got.iter().map(|n| n.id).collect::<Vec<_>>(),
                want.iter().map(|n| n.id).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn synthetic_data_behaves_like_sift_under_ivf() {
    // Clustered, low-dimensional data: a small fraction of cells holds most true neighbours.
    let base = Model::new(SynthConfig::sift_like(64, 3)).sample(20_000, 1);
    let queries = Model::new(SynthConfig::sift_like(64, 3)).sample(200, 2);
    let gt: Vec<i32> = exact::search(&base, Metric::L2, &queries, 10)
        .into_iter()
        .flat_map(|r| r.into_iter().map(|n| n.id as i32))
        .collect();
    let ix = IvfIndex::build(&base, 128, Metric::L2, &KMeansConfig::new(128));
    let recall = |nprobe| {
        let found: Vec<Vec<u32>> = (0..queries.n)
            .map(|i| {
                ix.query(queries.row(i), SearchParams { k: 10, nprobe })
                    .iter()
                    .map(|n| n.id)
                    .collect()
            })
            .collect();
        exact::recall_at_k(&found, &gt, 10, 10)
    };
    let (r2, r8, r128) = (recall(2), recall(8), recall(128));
    assert!(r128 > 0.999, "all cells probed must be exact: {r128}");
    assert!(
        r8 > 0.85,
        "recall@10 at nprobe 8/128 should be high on SIFT-like data: {r8}"
    );
    assert!(r2 < r8, "recall grows with nprobe: {r2} {r8}");
}

#[test]
fn index_file_roundtrip_and_corruption() {
    let d = tmpdir("ix");
    let base = synth(3000, 16, 1);
    let ix = IvfIndex::build(&base, 16, Metric::L2, &KMeansConfig::new(16));
    let p = d.join("a.ivf");
    ix.save(&p).unwrap();
    let back = IvfIndex::load(&p).unwrap();
    assert_eq!(
        (back.dim, back.nlist, back.n, back.metric),
        (16, 16, 3000, Metric::L2)
    );
    assert_eq!(back.centroids(), ix.centroids());
    assert_eq!(back.ids(), ix.ids());
    assert_eq!(back.vectors(), ix.vectors());
    let q = synth(5, 16, 9);
    for i in 0..5 {
        let p = SearchParams { k: 5, nprobe: 4 };
        assert_eq!(back.query(q.row(i), p), ix.query(q.row(i), p));
    }
    let mut bytes = std::fs::read(&p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&p, &bytes).unwrap();
    assert!(IvfIndex::load(&p)
        .unwrap_err()
        .to_string()
        .contains("checksum"));
    std::fs::write(&p, &bytes[..bytes.len() - 64]).unwrap();
    assert!(IvfIndex::load(&p)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
    std::fs::write(
        &p,
        b"not an index at all, certainly not one with a proper header!!!!!!",
    )
    .unwrap();
    assert!(IvfIndex::load(&p)
        .unwrap_err()
        .to_string()
        .contains("bad magic"));
}

/// A placement recorded in the file comes back as written, is what `placement_for` gives for
/// that many devices (the balanced one for any other count), and a file whose owners name a
/// device past the recorded count is refused.
#[test]
fn a_recorded_placement_survives_the_file_and_bad_owners_are_refused() {
    use cohort_ivf::ivf::placement::Placement;
    let d = tmpdir("ixplace");
    let base = synth(2000, 8, 5);
    let mut ix = IvfIndex::build(&base, 12, Metric::L2, &KMeansConfig::new(12));
    let p = d.join("p.ivf");
    // Not the balanced placement: list l on device l % 3, so the test sees the file's own.
    let mine = Placement {
        devices: 3,
        owner: (0..12).map(|l| (l % 3) as u16).collect(),
    };
    ix.placement = Some(mine.clone());
    ix.save(&p).unwrap();
    let back = IvfIndex::load(&p).unwrap();
    assert_eq!(back.placement.as_ref(), Some(&mine));
    assert_eq!(back.placement_for(3), mine);
    assert_eq!(back.placement_for(2).devices, 2);
    assert_ne!(back.placement_for(2).owner, mine.owner);
    let resident = IvfIndex::load_resident(&p).unwrap();
    assert_eq!(resident.placement, Some(mine));
    // Owner of the last list set to device 7 of 3, the checksum recomputed so only the
    // owner check can refuse it.
    let mut bytes = std::fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n - 2..].copy_from_slice(&7u16.to_le_bytes());
    bytes[36..40].copy_from_slice(&[0; 4]);
    let crc = crc32fast::hash(&bytes);
    bytes[36..40].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let e = IvfIndex::load(&p).unwrap_err().to_string();
    assert!(e.contains("past 3"), "{e}");
}

/// Every bit of the 64-byte header is covered: flipping any one of them (metric, sizes,
/// default nprobe, reserved bytes, the checksum itself) makes the file refused. A version 1
/// file gets a message that says how to rebuild it; a build removes temporaries left by a
/// killed one.
#[test]
fn every_header_bit_is_checked_and_killed_builds_leave_nothing_behind() {
    let d = tmpdir("ixhdr");
    let base = synth(600, 8, 3);
    let ix = IvfIndex::build(&base, 4, Metric::L2, &KMeansConfig::new(4));
    let p = d.join("h.ivf");
    let stale = d.join("h.tmp.2000000000");
    std::fs::write(&stale, vec![0u8; 4096]).unwrap();
    ix.save(&p).unwrap();
    assert!(!stale.exists(), "a dead writer's temporary is removed");
    let good = std::fs::read(&p).unwrap();
    for byte in 0..64 {
        for bit in 0..8 {
            let mut bytes = good.clone();
            bytes[byte] ^= 1 << bit;
            std::fs::write(&p, &bytes).unwrap();
            assert!(
                IvfIndex::load(&p).is_err(),
                "header byte {byte} bit {bit} flipped and the file still loaded"
            );
        }
    }
    let mut v1 = good.clone();
    v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&p, &v1).unwrap();
    let e = IvfIndex::load(&p).unwrap_err().to_string();
    assert!(
        e.contains("version 1") && e.contains("cohort index build"),
        "{e}"
    );
    std::fs::write(&p, &good).unwrap();
    assert!(IvfIndex::load(&p).is_ok());
}

#[test]
fn kmeans_improves_on_its_initialisation_and_assigns_nearest() {
    let x = synth(4000, 16, 1);
    for init in [Init::Random, Init::PlusPlus] {
        let c0 = kmeans::train(
            &x,
            &KMeansConfig {
                iters: 0,
                init,
                ..KMeansConfig::new(20)
            },
        );
        let c = kmeans::train(
            &x,
            &KMeansConfig {
                iters: 15,
                init,
                ..KMeansConfig::new(20)
            },
        );
        assert!(
            kmeans::inertia(&x, &c) < kmeans::inertia(&x, &c0),
            "{init:?}"
        );
        let a = cohort_ivf::assign::exact(&x, &c, Metric::L2);
        for i in (0..x.n).step_by(97) {
            let best = (0..20)
                .map(|j| Metric::L2.distance(x.row(i), c.row(j)))
                .fold(f32::INFINITY, f32::min);
            assert_eq!(Metric::L2.distance(x.row(i), c.row(a[i] as usize)), best);
        }
        // No empty clusters after training.
        let mut counts = [0usize; 20];
        a.iter().for_each(|&j| counts[j as usize] += 1);
        assert!(counts.iter().all(|&n| n > 0), "{counts:?}");
    }
}
