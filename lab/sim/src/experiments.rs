//! The paper's experiments: each figure is a set of machine variants run over the workload
//! suite, every run's cycles divided into a baseline's (a speedup), averaged over workloads,
//! with the paper's published number beside the average where the paper gives one.

use crate::config::{CacheOrg, LinkPolicy};
use crate::workloads::Workload;
use crate::{simulate, SimConfig, Stats};
use rayon::prelude::*;
use serde::Serialize;

/// A machine the figure runs every workload on.
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    pub name: String,
    #[serde(skip)]
    pub config: SimConfig,
    /// The variant this one's speedup is measured against (a name in the same figure).
    pub baseline: String,
    /// The paper's average for this variant, where published.
    pub paper: Option<f64>,
    /// What `paper` is (speedup over what, as the paper states it).
    pub paper_note: Option<String>,
}

/// One (workload, variant) run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub workload: String,
    pub class: String,
    pub variant: String,
    pub speedup: f64,
    /// Link energy at the configuration's pJ/bit, joules.
    pub link_joules: f64,
    pub stats: Stats,
    /// Wall-clock seconds the simulation took, and its rate of simulated line requests.
    pub wall_s: f64,
    pub requests_per_s: f64,
}

/// A variant's average over the workloads.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub variant: String,
    pub baseline: String,
    pub mean_speedup: f64,
    pub geomean_speedup: f64,
    pub paper: Option<f64>,
    pub paper_note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: String,
    pub title: String,
    pub variants: Vec<Variant>,
    pub runs: Vec<Run>,
    pub summary: Vec<Summary>,
    /// Simulated line requests over all runs, the wall time and the rate per core-second.
    pub total_requests: u64,
    pub wall_s: f64,
    pub requests_per_core_s: f64,
}

/// The figures `cohort-lab sim numa` knows.
pub const FIGURES: &[&str] = &["fig3", "fig6", "fig8", "fig10", "fig11", "energy"];

fn variant(name: &str, config: SimConfig, baseline: &str) -> Variant {
    Variant {
        name: name.into(),
        config,
        baseline: baseline.into(),
        paper: None,
        paper_note: None,
    }
}

fn with_paper(mut v: Variant, value: f64, note: &str) -> Variant {
    v.paper = Some(value);
    v.paper_note = Some(note.into());
    v
}

/// The paper's full set of mechanisms on `base`'s machine.
pub fn all_optimisations(base: &SimConfig) -> SimConfig {
    SimConfig {
        link_policy: LinkPolicy::Dynamic,
        cache_org: CacheOrg::NumaAware,
        ..base.locality_optimised()
    }
}

/// The variants of figure `name` on machine `base` (the paper: 4 sockets).
pub fn variants(name: &str, base: &SimConfig) -> Option<(String, Vec<Variant>)> {
    let one = base.with_sockets(1);
    let loc = base.locality_optimised();
    let s = base.sockets;
    Some(match name {
        "fig3" => (
            format!("{s}-socket GPU: traditional vs locality-optimised vs an ideal {s}x larger GPU (speedup over one socket)"),
            vec![
                variant("single-socket", one, "single-socket"),
                variant("traditional", base.clone(), "single-socket"),
                variant("locality-optimised", loc, "single-socket"),
                variant("ideal", base.ideal_single(), "single-socket"),
            ],
        ),
        "fig6" => {
            let mut v = vec![variant("static-links", loc.clone(), "static-links")];
            for st in [1_000u64, 5_000, 10_000, 50_000] {
                v.push(variant(
                    &format!("dynamic-{}k", st / 1000),
                    SimConfig {
                        link_policy: LinkPolicy::Dynamic,
                        sample_cycles: st,
                        ..loc.clone()
                    },
                    "static-links",
                ));
            }
            v.push(variant(
                "doubled-static-links",
                SimConfig {
                    lane_gbps: loc.lane_gbps * 2.0,
                    ..loc.clone()
                },
                "static-links",
            ));
            (
                "Dynamic lane-reversible links per SampleTime, and statically doubled links (speedup over static links, locality-optimised)".into(),
                v,
            )
        }
        "fig8" => {
            let org = |c: CacheOrg| SimConfig {
                cache_org: c,
                ..loc.clone()
            };
            (
                "Cache organisations (speedup over memory-side local-only L2, locality-optimised)".into(),
                vec![
                    variant("mem-side-local", org(CacheOrg::MemSideLocal), "mem-side-local"),
                    variant("static-50-50", org(CacheOrg::Static5050), "mem-side-local"),
                    variant("shared-coherent", org(CacheOrg::SharedCoherent), "mem-side-local"),
                    variant("numa-aware", org(CacheOrg::NumaAware), "mem-side-local"),
                ],
            )
        }
        "fig10" => (
            "Links and caches combined (speedup over one socket)".into(),
            vec![
                variant("single-socket", one, "single-socket"),
                variant("locality-optimised", loc.clone(), "single-socket"),
                variant(
                    "+dynamic-links",
                    SimConfig {
                        link_policy: LinkPolicy::Dynamic,
                        ..loc.clone()
                    },
                    "single-socket",
                ),
                variant(
                    "+numa-aware-caches",
                    SimConfig {
                        cache_org: CacheOrg::NumaAware,
                        ..loc
                    },
                    "single-socket",
                ),
                with_paper(
                    variant("combined", all_optimisations(base), "single-socket"),
                    2.1,
                    "4 sockets, locality + dynamic links + NUMA-aware caches over one GPU",
                ),
                variant("ideal", base.ideal_single(), "single-socket"),
            ],
        ),
        "fig11" => {
            let paper_speedup = [(2, 1.5), (4, 2.3), (8, 3.2)];
            let paper_ideal = [(2, 0.89), (4, 0.84), (8, 0.76)];
            let mut v = vec![variant("1-socket", one, "1-socket")];
            for n in [2usize, 4, 8] {
                let m = base.with_sockets(n);
                let numa = variant(&format!("{n}-sockets"), all_optimisations(&m), "1-socket");
                let numa = match paper_speedup.iter().find(|p| p.0 == n) {
                    Some(p) => with_paper(numa, p.1, "speedup over one socket"),
                    None => numa,
                };
                v.push(numa);
                let ideal = variant(&format!("{n}-ideal"), m.ideal_single(), "1-socket");
                v.push(ideal);
                // The fraction of the ideal is a ratio of two variants: a pseudo-variant whose
                // baseline is the ideal ("speedup" = numa / ideal).
                let frac = variant(
                    &format!("{n}-sockets-of-ideal"),
                    all_optimisations(&m),
                    &format!("{n}-ideal"),
                );
                let frac = match paper_ideal.iter().find(|p| p.0 == n) {
                    Some(p) => with_paper(frac, p.1, "fraction of the ideal larger GPU"),
                    None => frac,
                };
                v.push(frac);
            }
            (
                "Scaling 1, 2, 4, 8 sockets with every NUMA-aware mechanism (speedup over one socket; fraction of an ideal larger GPU)".into(),
                v,
            )
        }
        "energy" => (
            "Link energy (J at link_pj_per_bit) and speedup: traditional vs every mechanism".into(),
            vec![
                variant("traditional", base.clone(), "traditional"),
                variant("locality-optimised", loc, "traditional"),
                variant("all-mechanisms", all_optimisations(base), "traditional"),
            ],
        ),
        _ => return None,
    })
}

/// Runs figure `name` on `base` over `workloads` (rayon: every run in parallel), calling
/// `progress(done, total)` as each simulation ends (a figure takes minutes at full scale).
pub fn run_figure(
    name: &str,
    base: &SimConfig,
    workloads: &[Workload],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Option<Figure> {
    let (title, variants) = variants(name, base)?;
    let started = std::time::Instant::now();
    // Variants with the same machine (fig11's fraction of the ideal) are simulated once.
    let key = |c: &SimConfig| toml::to_string(c).expect("a configuration serialises");
    let mut machines: Vec<&SimConfig> = Vec::new();
    let machine_of: Vec<usize> = variants
        .iter()
        .map(|v| {
            let k = key(&v.config);
            machines
                .iter()
                .position(|m| key(m) == k)
                .unwrap_or_else(|| {
                    machines.push(&v.config);
                    machines.len() - 1
                })
        })
        .collect();
    let sims: Vec<(usize, usize)> = (0..workloads.len())
        .flat_map(|w| (0..machines.len()).map(move |m| (w, m)))
        .collect();
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let simulated: Vec<(Stats, f64)> = sims
        .par_iter()
        .map(|&(w, m)| {
            let t = std::time::Instant::now();
            let st = simulate(machines[m], &workloads[w]);
            let done = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(done, sims.len());
            (st, t.elapsed().as_secs_f64())
        })
        .collect();
    let jobs: Vec<(usize, usize)> = (0..workloads.len())
        .flat_map(|w| (0..variants.len()).map(move |v| (w, v)))
        .collect();
    let done: Vec<&(Stats, f64)> = jobs
        .iter()
        .map(|&(w, v)| &simulated[w * machines.len() + machine_of[v]])
        .collect();
    let wall_s = started.elapsed().as_secs_f64();
    let find = |w: usize, name: &str| {
        let v = variants.iter().position(|x| x.name == name)?;
        Some(&done[w * variants.len() + v].0)
    };
    let mut runs = Vec::new();
    for (i, &(w, v)) in jobs.iter().enumerate() {
        let (st, secs) = done[i];
        let base_cycles = find(w, &variants[v].baseline).map_or(f64::NAN, |b| b.cycles);
        runs.push(Run {
            workload: workloads[w].name.clone(),
            class: workloads[w].class.into(),
            variant: variants[v].name.clone(),
            speedup: base_cycles / st.cycles,
            link_joules: st.link_joules(variants[v].config.link_pj_per_bit),
            stats: st.clone(),
            wall_s: *secs,
            requests_per_s: st.accesses as f64 / secs.max(1e-9),
        });
    }
    let summary = variants
        .iter()
        .map(|v| {
            let s: Vec<f64> = runs
                .iter()
                .filter(|r| r.variant == v.name)
                .map(|r| r.speedup)
                .collect();
            let n = s.len().max(1) as f64;
            Summary {
                variant: v.name.clone(),
                baseline: v.baseline.clone(),
                mean_speedup: s.iter().sum::<f64>() / n,
                geomean_speedup: (s.iter().map(|x| x.ln()).sum::<f64>() / n).exp(),
                paper: v.paper,
                paper_note: v.paper_note.clone(),
            }
        })
        .collect();
    let total_requests: u64 = simulated.iter().map(|r| r.0.accesses).sum();
    let core_s: f64 = simulated.iter().map(|r| r.1).sum();
    Some(Figure {
        name: name.into(),
        title,
        variants,
        runs,
        summary,
        total_requests,
        wall_s,
        requests_per_core_s: total_requests as f64 / core_s.max(1e-9),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_has_variants_whose_baselines_exist() {
        let base = SimConfig::default();
        for f in FIGURES {
            let (_, v) = variants(f, &base).expect("known figure");
            for x in &v {
                assert!(
                    v.iter().any(|y| y.name == x.baseline),
                    "{f}: {} has no baseline {}",
                    x.name,
                    x.baseline
                );
                x.config.validate().unwrap();
            }
        }
        assert!(variants("fig99", &base).is_none());
    }
}
