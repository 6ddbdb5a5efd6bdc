//! The model's analytic limits and invariants (the rules of each policy are unit-tested in
//! their modules).

use cohort_sim::config::{CacheOrg, CtaSchedule, LinkPolicy, Placement};
use cohort_sim::workloads::{suite, Workload, MB};
use cohort_sim::{simulate, SimConfig};

fn workload(name: &str) -> Workload {
    suite(0.125, 7)
        .into_iter()
        .find(|w| w.name == name)
        .expect("in the suite")
}

#[test]
fn same_seed_same_result() {
    let w = workload("bfs-graph");
    let c = SimConfig::default().locality_optimised();
    assert_eq!(simulate(&c, &w), simulate(&c, &w));
    let c = SimConfig {
        link_policy: LinkPolicy::Dynamic,
        cache_org: CacheOrg::NumaAware,
        ..c
    };
    assert_eq!(simulate(&c, &w), simulate(&c, &w));
}

#[test]
fn one_socket_is_the_single_gpu_whatever_the_policies() {
    let w = workload("stream-triad-64M");
    let base = SimConfig::default().with_sockets(1);
    let reference = simulate(&base, &w);
    assert_eq!(reference.remote, 0);
    assert_eq!(reference.link_bytes, 0);
    for (p, s) in [
        (Placement::FirstTouch, CtaSchedule::Contiguous),
        (Placement::RoundRobinPages, CtaSchedule::RoundRobin),
        (Placement::Blocked, CtaSchedule::ContiguousReversed),
    ] {
        let c = SimConfig {
            placement: p,
            cta_schedule: s,
            link_policy: LinkPolicy::Dynamic,
            ..base.clone()
        };
        assert_eq!(simulate(&c, &w).cycles, reference.cycles, "{p:?} {s:?}");
    }
}

#[test]
fn interleaved_streaming_is_bounded_by_the_links() {
    let w = workload("stream-triad-64M");
    let c = SimConfig::default(); // interleave + round-robin CTAs
    let st = simulate(&c, &w);
    // 3 of 4 lines are remote; every transfer enters some socket once: half the hop bytes.
    let share = st.remote as f64 / st.accesses as f64;
    assert!((0.70..0.80).contains(&share), "remote share {share}");
    let in_bytes = st.link_bytes as f64 / 2.0;
    let per_socket_in = c.per_cycle(c.lane_gbps) * (c.link_lanes / 2) as f64;
    let bound = in_bytes / (c.sockets as f64 * per_socket_in);
    assert!(
        st.cycles >= 0.95 * bound && st.cycles <= 1.6 * bound,
        "{} cycles against a link bound of {bound}",
        st.cycles
    );
}

#[test]
fn first_touch_with_contiguous_blocks_scales_with_sockets() {
    let w = workload("stream-triad-64M");
    let one = simulate(&SimConfig::default().with_sockets(1), &w);
    let four = simulate(&SimConfig::default().locality_optimised(), &w);
    // The first kernel, caches cold on both (the second one fits in four sockets' L2 and
    // would scale past 4x).
    let speedup = one.kernel_cycles[0] / four.kernel_cycles[0];
    assert!(
        four.remote * 50 < four.accesses,
        "{} remote of {}",
        four.remote,
        four.accesses
    );
    assert!((3.3..=4.2).contains(&speedup), "speedup {speedup}");
    // And the traditional placement does far worse.
    let trad = simulate(&SimConfig::default(), &w);
    assert!(
        trad.cycles > 2.0 * four.cycles,
        "{} vs {}",
        trad.cycles,
        four.cycles
    );
}

#[test]
fn the_suite_spans_the_papers_classes() {
    let s = suite(0.01, 1);
    assert!(s.len() >= 12);
    for class in [
        "streaming",
        "stencil",
        "reduction",
        "irregular",
        "gemm",
        "k-NN",
    ] {
        assert!(s.iter().any(|w| w.class == class), "{class}");
    }
    for w in &s {
        assert!(w.footprint >= MB / 2, "{}: {}", w.name, w.footprint);
        assert!(w.accesses() > 0, "{}", w.name);
    }
}

#[test]
fn the_shipped_presets_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/sim");
    let paper = SimConfig::load(&dir.join("paper-4socket.toml")).unwrap();
    let d = SimConfig::default();
    assert_eq!(
        toml::to_string(&paper).unwrap(),
        toml::to_string(&d).unwrap()
    );
    let h = SimConfig::load(&dir.join("h200x2.toml")).unwrap();
    assert_eq!((h.sockets, h.sms_per_socket), (2, 132));
}
