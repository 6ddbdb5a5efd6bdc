//! `cohort-lab bench suite NAME`: the GPU-machine runs behind one section of bench/README.md,
//! written down as a manifest (`bench/suites/NAME.toml`, built into the binary) rather than a
//! script. A manifest is variables and steps; a step is one command line (`cohort-lab ...`
//! runs this binary, `cohort ...` the product's binary beside it) with what it needs (GPUs, a
//! file it makes once) and how long it may take.
//! The runner runs the steps in order, each with its output in `OUT/logs/STEP.log`, and writes
//! `OUT/suite-NAME.json` (machine, commit, command, and each step's command, status and
//! time; a part run with `--only X`, `OUT/suite-NAME-only-X.json`). Every `cohort` and
//! `cohort-lab` step's flags are checked against that binary's command line before anything
//! runs, so a manifest cannot drift from the flags (the test suite checks every shipped one
//! the same way).

use anyhow::{bail, Context as _, Result};
use cohort_services::tools::Record;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shipped suites: (name, manifest).
pub const SUITES: &[(&str, &str)] = &[
    (
        "kernels",
        include_str!("../../../bench/suites/kernels.toml"),
    ),
    (
        "scaling",
        include_str!("../../../bench/suites/scaling.toml"),
    ),
    ("served", include_str!("../../../bench/suites/served.toml")),
    ("lenet", include_str!("../../../bench/suites/lenet.toml")),
    (
        "facever",
        include_str!("../../../bench/suites/facever.toml"),
    ),
    ("bank", include_str!("../../../bench/suites/bank.toml")),
    ("http", include_str!("../../../bench/suites/http.toml")),
    ("smoke", include_str!("../../../bench/suites/smoke.toml")),
    (
        "regression",
        include_str!("../../../bench/suites/regression.toml"),
    ),
    ("egress", include_str!("../../../bench/suites/egress.toml")),
];

#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// The suite: a shipped one (kernels, scaling, served, lenet, facever, bank, http, smoke,
    /// regression, egress)
    /// or a manifest file (.toml).
    pub suite: Option<String>,
    /// Where its results, logs and summary go.
    #[arg(long, default_value = "lab/results/suite")]
    pub out: PathBuf,
    /// Where its data sets and indexes are made (kept between runs: a step that makes a file
    /// already there is skipped).
    #[arg(long, default_value = "/tmp/cohort-suite")]
    pub work: PathBuf,
    /// Print the steps' command lines (variables filled in) and run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run only the steps whose name contains this (their summary is `suite-NAME-only-THIS.json`,
    /// so parts run one after another each keep theirs).
    #[arg(long)]
    pub only: Option<String>,
    /// List the shipped suites and what each reproduces.
    #[arg(long)]
    pub list: bool,
}

/// A suite as its manifest states it.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// What it measures, in a line.
    pub about: String,
    /// The bench/README.md section it reproduces.
    pub section: String,
    /// Variables, filled in order (`{name}`; `{out}`, `{work}` and `{cohort}`, the product's
    /// binary, are given).
    #[serde(default)]
    pub vars: toml::Table,
    #[serde(rename = "step")]
    pub steps: Vec<Step>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub name: String,
    /// The command line, split at white space (no quoting); `cohort-lab` is this binary,
    /// `cohort` the product's.
    pub run: String,
    /// GPUs it needs: skipped, and said so, on a machine with fewer.
    #[serde(default)]
    pub gpus: usize,
    /// A file it makes: skipped when that file is already there.
    #[serde(default)]
    pub makes: Option<String>,
    /// Started, left running for the steps after it and stopped at the end (a memcached).
    #[serde(default)]
    pub background: bool,
    /// Seconds it may take before it is stopped and counted failed.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
}

fn default_timeout() -> u64 {
    600
}

impl Manifest {
    pub fn parse(text: &str) -> Result<Manifest> {
        let m: Manifest = toml::from_str(text)?;
        anyhow::ensure!(!m.steps.is_empty(), "a suite with no step");
        for (i, s) in m.steps.iter().enumerate() {
            anyhow::ensure!(
                !m.steps[..i].iter().any(|t| t.name == s.name),
                "step {:?} named twice",
                s.name
            );
        }
        Ok(m)
    }

    /// Its variables filled in, over the given ones (a variable may name any other, in any
    /// order; a loop or an unknown `{name}` is an error).
    pub fn vars(&self, given: &[(&str, String)]) -> Result<BTreeMap<String, String>> {
        let mut vars: BTreeMap<String, String> = given
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let mut pending: Vec<(&String, String)> = self
            .vars
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect();
        while !pending.is_empty() {
            let before = pending.len();
            let mut left = Vec::new();
            for (k, text) in pending {
                match fill(&text, &vars) {
                    Ok(v) => {
                        vars.insert(k.clone(), v);
                    }
                    Err(_) => left.push((k, text)),
                }
            }
            if left.len() == before {
                let (k, text) = &left[0];
                let e = fill(text, &vars).expect_err("left unfilled");
                bail!("variable {k}: {e} (or a loop of variables)");
            }
            pending = left;
        }
        Ok(vars)
    }
}

/// `text` with every `{name}` replaced by its variable.
pub fn fill(text: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            bail!("unclosed {{ in {text:?}");
        };
        let name = &rest[open + 1..open + close];
        let Some(v) = vars.get(name) else {
            bail!("unknown variable {{{name}}} in {text:?}");
        };
        out.push_str(v);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A step's command line, filled and split; `cohort-lab` as the program is this binary,
/// `cohort` the product's.
pub fn argv(step: &Step, vars: &BTreeMap<String, String>) -> Result<Vec<String>> {
    let line = fill(&step.run, vars).with_context(|| format!("step {}", step.name))?;
    let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    anyhow::ensure!(!words.is_empty(), "step {}: an empty command", step.name);
    Ok(words)
}

/// `words` with each `DIR/PRE*POST` replaced by the files there that match, in name order
/// (the results of the steps before: a step skipped leaves none); none matching is an error.
fn expand(words: Vec<String>) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for w in words {
        let Some(star) = w.find('*') else {
            out.push(w);
            continue;
        };
        let slash = w[..star].rfind('/').map_or(0, |i| i + 1);
        let (dir, pre, post) = (&w[..slash], &w[slash..star], &w[star + 1..]);
        let listed = std::fs::read_dir(if dir.is_empty() { "." } else { dir })
            .with_context(|| format!("listing {dir} for {w}"))?;
        let mut names: Vec<String> = listed
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.len() >= pre.len() + post.len() && n.starts_with(pre) && n.ends_with(post)
            })
            .collect();
        anyhow::ensure!(!names.is_empty(), "no file matches {w}");
        names.sort();
        out.extend(names.into_iter().map(|n| format!("{dir}{n}")));
    }
    Ok(out)
}

fn manifest_of(suite: &str) -> Result<(String, Manifest)> {
    if let Some((name, text)) = SUITES.iter().find(|(n, _)| *n == suite) {
        return Ok((name.to_string(), Manifest::parse(text)?));
    }
    if suite.ends_with(".toml") {
        let text = std::fs::read_to_string(suite).with_context(|| format!("reading {suite}"))?;
        let name = Path::new(suite)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "suite".into());
        return Ok((
            name,
            Manifest::parse(&text).with_context(|| suite.to_string())?,
        ));
    }
    let names: Vec<&str> = SUITES.iter().map(|(n, _)| *n).collect();
    bail!(
        "unknown suite {suite:?} (shipped: {}; or a manifest file .toml)",
        names.join(", ")
    )
}

/// Every `cohort` step's flags parse as the product's command line (`product`) would parse
/// them, and every `cohort-lab` step's as this binary's (`lab`).
pub fn check_flags(
    m: &Manifest,
    vars: &BTreeMap<String, String>,
    product: &clap::Command,
    lab: &clap::Command,
) -> Result<()> {
    for s in &m.steps {
        let words = argv(s, vars)?;
        let cli = match words[0].as_str() {
            "cohort" => product,
            "cohort-lab" => lab,
            _ => continue,
        };
        if let Err(e) = cli.clone().try_get_matches_from(&words) {
            bail!("step {}: {}", s.name, e.render());
        }
    }
    Ok(())
}

/// What one step came to.
#[derive(serde::Serialize)]
struct Outcome {
    step: String,
    command: String,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    seconds: f64,
}

/// Runs suite `a`; `lab` is this binary's command line (its steps' flags checked against it).
pub fn run(a: &SuiteArgs, lab: &clap::Command, record: Record) -> Result<()> {
    if a.list || a.suite.is_none() {
        for (name, text) in SUITES {
            let m = Manifest::parse(text)?;
            println!("{name:<8} {} (bench/README.md: {})", m.about, m.section);
        }
        return Ok(());
    }
    let (name, m) = manifest_of(a.suite.as_deref().expect("checked above"))?;
    let lab_exe = std::env::current_exe().context("this binary's path")?;
    let product_exe = cohort_experiments::product_binary()?;
    let vars = m.vars(&[
        ("out", a.out.display().to_string()),
        ("work", a.work.display().to_string()),
        ("cohort", product_exe.display().to_string()),
    ])?;
    check_flags(&m, &vars, &cohort_cli::command(), lab)?;
    let steps: Vec<&Step> = m
        .steps
        .iter()
        .filter(|s| {
            a.only
                .as_deref()
                .is_none_or(|o| s.name.contains(o) || s.background)
        })
        .collect();
    if a.dry_run {
        for s in &steps {
            println!("# {}\n{}", s.name, argv(s, &vars)?.join(" "));
        }
        return Ok(());
    }
    let logs = a.out.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    std::fs::create_dir_all(&a.work).with_context(|| format!("creating {}", a.work.display()))?;
    let gpus = cohort_gpu::probe().map(|d| d.len()).unwrap_or(0);
    eprintln!(
        "suite {name}: {} ({} steps, {gpus} GPUs here)",
        m.about,
        steps.len()
    );
    let mut background: Vec<(String, Child)> = Vec::new();
    let mut outcomes = Vec::new();
    for s in steps {
        let words = argv(s, &vars)?;
        let command = words.join(" ");
        let t = Instant::now();
        let skip = if s.gpus > gpus {
            Some(format!("needs {} GPUs, this machine has {gpus}", s.gpus))
        } else {
            let made = s.makes.as_ref().map(|f| fill(f, &vars)).transpose()?;
            made.filter(|f| Path::new(f).exists())
                .map(|f| format!("{f} is already there"))
        };
        let (status, reason) = match skip {
            Some(why) => ("skipped", Some(why)),
            None => {
                let log = logs.join(format!("{}.log", s.name));
                match expand(words).and_then(|w| start(&w, &product_exe, &lab_exe, &log)) {
                    Err(e) => ("failed", Some(format!("{e:#}"))),
                    Ok(child) if s.background => {
                        background.push((s.name.clone(), child));
                        // Time to listen before the steps that use it.
                        std::thread::sleep(Duration::from_millis(500));
                        ("started", None)
                    }
                    Ok(child) => match finish(child, Duration::from_secs(s.timeout_s)) {
                        Ok(()) => ("ok", None),
                        Err(e) => (
                            "failed",
                            Some(format!("{e:#} (its log: {})", log.display())),
                        ),
                    },
                }
            }
        };
        let line = format!(
            "{:<8} {} ({:.0} s)",
            status,
            s.name,
            t.elapsed().as_secs_f64()
        );
        match &reason {
            Some(r) => eprintln!("{line}: {r}"),
            None => eprintln!("{line}"),
        }
        outcomes.push(Outcome {
            step: s.name.clone(),
            command,
            status,
            reason,
            seconds: t.elapsed().as_secs_f64(),
        });
    }
    for (name, mut child) in background {
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("stopped  {name}");
    }
    let failed = outcomes.iter().filter(|o| o.status == "failed").count();
    record(
        &a.out.join(summary_name(&name, a.only.as_deref())),
        serde_json::json!({
            "suite": name,
            "only": a.only,
            "about": m.about,
            "section": m.section,
            "gpus": gpus,
            "steps": outcomes,
            "failed": failed,
        }),
    )
    .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(failed == 0, "suite {name}: {failed} step(s) failed");
    Ok(())
}

/// Starts `words` (`cohort` as the product's binary, `cohort-lab` as this one) with its
/// output into `log`.
fn start(words: &[String], product: &Path, lab: &Path, log: &Path) -> Result<Child> {
    let program: PathBuf = match words[0].as_str() {
        "cohort" => product.to_path_buf(),
        "cohort-lab" => lab.to_path_buf(),
        other => PathBuf::from(other),
    };
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    Command::new(&program)
        .args(&words[1..])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))
}

/// Waits for `child` at most `limit`; past it, kills it.
fn finish(mut child: Child, limit: Duration) -> Result<()> {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            anyhow::ensure!(st.success(), "exited with {st}");
            return Ok(());
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("stopped after {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The summary's file name: the whole suite's, or a part's (`--only`), which must not
/// overwrite the whole's or another part's.
fn summary_name(suite: &str, only: Option<&str>) -> String {
    match only {
        None => format!("suite-{suite}.json"),
        Some(o) => {
            let part: String = o
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("suite-{suite}-only-{part}.json")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_fill_in_order_and_an_unknown_one_is_an_error() {
        let m = Manifest::parse(
            "about = \"a\"\nsection = \"s\"\n[vars]\ndata = \"{work}/d\"\nix = \"{data}/ivf.index\"\n\
             [[step]]\nname = \"one\"\nrun = \"cohort index info {ix}\"\n",
        )
        .unwrap();
        let vars = m.vars(&[("work", "/w".into())]).unwrap();
        assert_eq!(vars["ix"], "/w/d/ivf.index");
        assert_eq!(
            argv(&m.steps[0], &vars).unwrap(),
            ["cohort", "index", "info", "/w/d/ivf.index"]
        );
        assert!(fill("{nope}", &vars)
            .unwrap_err()
            .to_string()
            .contains("unknown variable"));
        assert!(fill("{open", &vars).is_err());
        let looped = Manifest::parse(
            "about = \"a\"\nsection = \"s\"\n[vars]\na = \"{b}\"\nb = \"{a}\"\n\
             [[step]]\nname = \"one\"\nrun = \"cohort gpus\"\n",
        )
        .unwrap();
        assert!(looped.vars(&[]).unwrap_err().to_string().contains("loop"));
    }

    #[test]
    fn a_pattern_becomes_the_files_that_match_it_in_order() {
        let dir = std::env::temp_dir().join(format!("cohort-suite-glob-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "engine-b.json",
            "engine-a.json",
            "served-a.json",
            "engine-c.txt",
        ] {
            std::fs::write(dir.join(f), "{}").unwrap();
        }
        let d = dir.display();
        let got = expand(vec!["x".into(), format!("{d}/engine-*.json")]).unwrap();
        assert_eq!(
            got,
            [
                "x".to_string(),
                format!("{d}/engine-a.json"),
                format!("{d}/engine-b.json")
            ]
        );
        assert!(expand(vec![format!("{d}/none-*.json")]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A part run (`--only`) writes a summary of its own, never over the whole suite's.
    #[test]
    fn a_part_keeps_its_own_summary() {
        assert_eq!(summary_name("scaling", None), "suite-scaling.json");
        assert_eq!(
            summary_name("scaling", Some("served")),
            "suite-scaling-only-served.json"
        );
        assert_eq!(
            summary_name("scaling", Some("a/b c")),
            "suite-scaling-only-a_b_c.json"
        );
    }

    /// Every shipped suite parses, and every `cohort` step's flags are the product's and
    /// every `cohort-lab` step's this binary's.
    #[test]
    fn every_shipped_suite_parses_and_names_only_real_flags() {
        let (product, lab) = (cohort_cli::command(), crate::command());
        for (name, text) in SUITES {
            let m = Manifest::parse(text).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            let vars = m
                .vars(&[
                    ("out", "/o".into()),
                    ("work", "/w".into()),
                    ("cohort", "/c".into()),
                ])
                .unwrap_or_else(|e| panic!("{name}: {e:#}"));
            check_flags(&m, &vars, &product, &lab).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
    }

    /// A lab command given to the product's binary (or the other way round) is refused.
    #[test]
    fn each_binary_takes_only_its_own_commands() {
        let (product, lab) = (cohort_cli::command(), crate::command());
        let head = "about = \"a\"\nsection = \"s\"\n[[step]]\nname = \"x\"\n";
        for (run, ok) in [
            ("cohort-lab bench hog --cpus 1 --seconds 1", true),
            ("cohort bench hog --cpus 1 --seconds 1", false),
            ("cohort gpus", true),
            ("cohort-lab serve", false),
        ] {
            let m = Manifest::parse(&format!("{head}run = \"{run}\"\n")).unwrap();
            let vars = m.vars(&[]).unwrap();
            assert_eq!(check_flags(&m, &vars, &product, &lab).is_ok(), ok, "{run}");
        }
    }

    #[test]
    fn a_manifest_with_a_stray_key_or_a_repeated_step_is_refused() {
        let head = "about = \"a\"\nsection = \"s\"\n";
        let stray = format!("{head}[[step]]\nname = \"x\"\nrun = \"cohort gpus\"\ncolour = 1\n");
        assert!(Manifest::parse(&stray).is_err());
        let twice = format!(
            "{head}[[step]]\nname = \"x\"\nrun = \"cohort gpus\"\n[[step]]\nname = \"x\"\nrun = \"cohort gpus\"\n"
        );
        assert!(Manifest::parse(&twice)
            .unwrap_err()
            .to_string()
            .contains("named twice"));
        assert!(Manifest::parse(head).is_err());
    }
}
