//! Every flag `cohort serve --help` documents, and the same setting as a config-file key, is
//! run through `--check-config` (which parses, plans every service's engine and loads the
//! index); the README's example command is started for real. A new flag without a sample value
//! here fails the test.

use crate::common;
use common::cohort;

fn index(dir: &std::path::Path) -> String {
    let d = dir.to_str().unwrap();
    assert!(cohort(&[
        "data",
        "synth",
        "--n",
        "500",
        "--dim",
        "8",
        "--queries",
        "2",
        "--gt-k",
        "2",
        "--out",
        d,
        "--log-level",
        "warn"
    ])
    .status
    .success());
    let ix = format!("{d}/ix");
    assert!(cohort(&[
        "index",
        "build",
        "--base",
        &format!("{d}/base.fvecs"),
        "--nlist",
        "8",
        "--out",
        &ix,
        "--log-level",
        "warn"
    ])
    .status
    .success());
    // An API keys file for --auth-keys (services as served by the samples).
    std::fs::write(
        format!("{ix}.keys"),
        "[[key]]\nid = \"ci\"\nsecret = \"0123456789abcdef\"\n",
    )
    .unwrap();
    std::fs::write(format!("{ix}.clusterkey"), "ab".repeat(32)).unwrap();
    ix
}

/// Settings a flag needs beside it: a cluster key seals a cluster's messages (--cluster); only
/// a node serves a shard of the index (--node-listen).
fn companions(flag: &str) -> &'static [(&'static str, &'static str)] {
    match flag {
        "cluster-key" | "etcd-ca" => &[("cluster", "etcd://127.0.0.1:2379")],
        "index-shard" => &[("node-listen", "127.0.0.1:0")],
        "data-dir" => &[("http", "127.0.0.1:0")],
        _ => &[],
    }
}

/// A valid value for each serve flag (None: a switch).
fn sample(flag: &str, ix: &str) -> Option<Option<String>> {
    let v = |s: &str| Some(Some(s.to_string()));
    match flag {
        "check-config" | "index-mapped" | "cohort-graphs" => Some(None),
        "service" => v("echo:cpu,spin"),
        "service-opt" => v("echo.max_queue=128"),
        "index" => Some(Some(ix.to_string())),
        "engine" => v("cpu"),
        "gpus" => v("0,1"),
        "max-cohort" => v("512"),
        "cohort-timeout-us" => v("100"),
        "cohort-keep-busy" => v("0"),
        "streams" => v("2"),
        "control-threads" => v("2"),
        "gpus-per-control-thread" => v("4"),
        "gpu-slots" => v("128"),
        "stages" => v("4:8:1"),
        "gpu-batch" => v("4"),
        "watchdog-ms" => v("500"),
        "egress-threads" => v("2"),
        "profile" => v("100"),
        "latency-budget-us" => v("2000"),
        "udp" | "tcp" | "http" | "grpc" => v("localhost:0"),
        "io-threads" => v("2"),
        "cpus" => v("0-1"),
        "workers" => v("4"),
        "worker-cpus" => v("1"),
        "worker-spin-us" => v("10"),
        "max-queue" => v("1024"),
        "default-timeout-us" => v("5000"),
        "dispatch" => v("key-hash"),
        "drain-timeout-ms" => v("100"),
        "io-spin-us" => v("20"),
        "udp-io" => v("uring"),
        "udp-gso" | "udp-spread" | "fair-queue" => v("off"),
        "sched-slice-us" => v("300"),
        "max-connections" => v("500"),
        "max-buffered-bytes" => v("256M"),
        "socket-buffer-bytes" => v("128K"),
        "idle-timeout-ms" => v("30000"),
        "read-timeout-ms" => v("5000"),
        "client-max-inflight" => v("64"),
        "client-rate" => v("10000"),
        "max-deadline-ms" => v("5000"),
        "admin" => v("127.0.0.1:0"),
        "cluster" => v("etcd://127.0.0.1:2379"),
        "node-listen" => v("127.0.0.1:0"),
        "node-id" => v("n1"),
        "lease-secs" => v("3"),
        "node-window" => v("1024"),
        "cluster-busy-poll" => Some(None),
        "cluster-no-rings" => Some(None),
        "cluster-lanes" => v("2"),
        "tls-cert" | "tls-key" => Some(None), // given together, checked by the tls test
        "auth-keys" => Some(Some(format!("{ix}.keys"))),
        "data-dir" => Some(Some(format!("{ix}.collections"))),
        "collections-on" => v("cpu"),
        "cluster-key" => Some(Some(format!("{ix}.clusterkey"))),
        // (Read, not parsed, at the check: any file does.)
        "etcd-ca" => Some(Some(format!("{ix}.clusterkey"))),
        // Given in pairs, checked by the cluster test.
        "etcd-user" | "etcd-password-file" | "etcd-cert" | "etcd-key" => Some(None),
        "log-level" => v("warn"),
        "virtual-gpus" => v("0:2x8"),
        // Not settings: what the test itself uses or cannot pass alone.
        "config" | "help" | "version" => Some(None),
        _ => None,
    }
}

/// The example values the help shows (`[example: VALUE]`), by flag.
fn examples() -> std::collections::HashMap<String, String> {
    let out = cohort(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let (mut found, mut flag, mut next_is_example) =
        (std::collections::HashMap::new(), None, false);
    for word in help.split_whitespace() {
        if next_is_example {
            if let Some(f) = &flag {
                found.insert(String::clone(f), word.trim_end_matches(']').to_string());
            }
            next_is_example = false;
        } else if let Some(f) = word.strip_prefix("--") {
            flag = Some(f.trim_end_matches(',').to_string());
        } else if word == "[example:" {
            next_is_example = true;
        }
    }
    found
}

fn serve_flags() -> Vec<String> {
    let out = cohort(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags: Vec<String> = help
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("--")))
        .map(|w| w.trim_start_matches("--").trim_end_matches(',').to_string())
        .collect();
    flags.dedup();
    // Every flag has a description: the line after a flag's line is its text, not the next
    // flag or a blank.
    let lines: Vec<&str> = help.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("--") {
            let next = lines.get(i + 1).map_or("", |n| n.trim());
            assert!(
                !next.is_empty() && !next.starts_with("--") && !next.starts_with("-h"),
                "undocumented flag: {l}"
            );
        }
    }
    flags
}

#[test]
fn every_serve_flag_and_config_key_is_accepted() {
    let dir = std::env::temp_dir().join(format!("cohort-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ix = index(&dir);
    let base = [
        ("--udp", "127.0.0.1:0"),
        ("--service", "knn,echo"),
        ("--index", ix.as_str()),
    ];
    let flags = serve_flags();
    assert!(flags.len() > 20, "{flags:?}");
    let examples = examples();
    for flag in &flags {
        // A service's own flag shows an example value in its help; others have one here.
        let value = sample(flag, &ix)
            .or_else(|| examples.get(flag).map(|e| Some(e.clone())))
            .unwrap_or_else(|| panic!("no sample value for --{flag}: add one"));
        // (--tls-cert and --tls-key go together: the tls test passes them.)
        if [
            "config",
            "help",
            "version",
            "check-config",
            "tls-cert",
            "tls-key",
            "etcd-user",
            "etcd-password-file",
            "etcd-cert",
            "etcd-key",
        ]
        .contains(&flag.as_str())
        {
            continue;
        }
        // As a flag (replacing the base setting of the same flag).
        let mut args: Vec<String> = vec!["serve".into(), "--check-config".into()];
        for (f, v) in base {
            if f.trim_start_matches("--") != flag {
                args.extend([f.to_string(), v.to_string()]);
            }
        }
        args.push(format!("--{flag}"));
        if let Some(v) = &value {
            args.push(v.clone());
        }
        for (f, v) in companions(flag) {
            args.extend([format!("--{f}"), v.to_string()]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = cohort(&refs);
        assert!(
            o.status.success(),
            "--{flag}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // As a config-file key (log-level and virtual-gpus are global, not serve keys;
        // service-opt is written as [services.NAME] tables, checked below).
        if flag == "log-level" || flag == "virtual-gpus" || flag == "service-opt" {
            continue;
        }
        let key = flag.replace('-', "_");
        let line = match &value {
            None => format!("{key} = true\n"),
            Some(v) if v.parse::<i64>().is_ok() => format!("{key} = {v}\n"),
            Some(v) => format!("{key} = \"{v}\"\n"),
        };
        let cfg = dir.join("c.toml");
        let mut text = String::new();
        for (k, v) in [
            ("service", "knn,echo"),
            ("index", ix.as_str()),
            ("udp", "127.0.0.1:0"),
        ] {
            if k != key {
                text.push_str(&format!("{k} = \"{v}\"\n"));
            }
        }
        for (f, v) in companions(flag) {
            text.push_str(&format!("{} = \"{v}\"\n", f.replace('-', "_")));
        }
        std::fs::write(&cfg, text + &line).unwrap();
        let o = cohort(&["serve", "--check-config", "--config", cfg.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "config key {key}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // A [services.NAME] table with every key a cpu service's engine reads, and its own.
    let cfg = dir.join("s.toml");
    let table = format!(
        "service = \"knn:cpu,echo\"\nindex = \"{ix}\"\nudp = \"127.0.0.1:0\"\n[services.knn]\nengine = \"cpu\"\nprecision = \"f32\"\nworkers = 2\nworker_cpus = \"0\"\nmax_queue = 512\ndispatch = \"round-robin\"\nmax_deadline_ms = 5000\n"
    );
    std::fs::write(&cfg, &table).unwrap();
    let o = cohort(&["serve", "--check-config", "--config", cfg.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("service knn: engine cpu")
            && text.contains("[services.knn]")
            && text.contains("workers = 2")
            && text.contains("max_queue = 512")
            // Its table holds the knobs its engine reads: no GPU batch knob.
            && !text[text.find("[services.knn]").unwrap_or(0)..]
                .split("\n[")
                .next()
                .unwrap_or("")
                .contains("max_cohort"),
        "{text}"
    );
    // A GPU engine's knob on a cpu service is refused, naming the engines that read it (the
    // GPU engines' keys are checked on plans in the server's tests: this machine may have no
    // GPU for --check-config to open).
    std::fs::write(&cfg, table + "max_cohort = 64\n").unwrap();
    let o = cohort(&["serve", "--check-config", "--config", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("knn: max_cohort is a knob of gpu-direct, gpu-cohort, hybrid only")
            && err.contains("engine is cpu"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_readme_example_serves() {
    // cohort serve --service echo,spin --engine cpu ... --io-threads 2 --cpus 0-1 --workers 4
    let s = common::Served::start(&[
        "--service",
        "echo,spin",
        "--engine",
        "cpu",
        "--io-threads",
        "2",
        "--cpus",
        "0-1",
        "--workers",
        "4",
        "--max-queue",
        "16384",
    ]);
    let w = std::sync::Arc::new(cohort_services::micro::load::EchoWorkload { payload_bytes: 64 });
    let r = common::load(
        cohort_load::Target::Udp(s.udp.unwrap()),
        cohort_load::Mode::Open {
            rate: 2000.0,
            poisson: true,
        },
        0.5,
        w,
    );
    common::assert_all_answered(&r);
    assert_eq!(r.ok, r.sent);
}

/// `--control-threads` (and its config key) takes 0 (auto) to 64: too many and garbage are
/// refused with a message that names the flag, before anything starts (auto's resolution:
/// `plan.rs`'s and `gpu_args.rs`'s unit tests; `--check-config` needs a GPU for a GPU engine).
#[test]
fn bad_control_threads_are_refused_with_a_clear_message() {
    for bad in ["65", "two", "-1"] {
        let flag = format!("--control-threads={bad}");
        let o = cohort(&["serve", "--service", "echo", &flag, "--check-config"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "--control-threads {bad} accepted");
        assert!(err.contains("control-threads"), "{bad}: {err}");
    }
    let dir = common::Scratch::new("bad-control-threads");
    let cfg = dir.0.join("c.toml");
    std::fs::write(
        &cfg,
        "service = \"echo\"\nudp = \"127.0.0.1:0\"\n[services.echo]\ncontrol_threads = \"many\"\n",
    )
    .unwrap();
    let o = cohort(&["serve", "--check-config", "--config", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "control_threads = \"many\" accepted");
    assert!(err.contains("control_threads"), "{err}");
    // Threads per GPU and GPUs per thread at once mean nothing: refused, naming both.
    let o = cohort(&[
        "serve",
        "--service",
        "echo:gpu-cohort",
        "--udp",
        "127.0.0.1:0",
        "--gpus",
        "0,1",
        "--control-threads",
        "2",
        "--gpus-per-control-thread",
        "2",
        "--check-config",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "both accepted");
    assert!(
        err.contains("control_threads (2)") && err.contains("gpus_per_control_thread (2)"),
        "{err}"
    );
    let o = cohort(&[
        "serve",
        "--service",
        "echo",
        "--gpus-per-control-thread=0",
        "--check-config",
    ]);
    assert!(!o.status.success(), "--gpus-per-control-thread 0 accepted");
}

/// The example configuration the repository ships loads as it is, and says what it serves.
#[test]
fn the_shipped_serve_toml_loads() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/serve.toml");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["serve", "--check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for line in [
        "# configuration ok",
        "# service echo: engine cpu",
        "# service lenet: engine cpu",
        "max_buffered_bytes = \"64M\"",
    ] {
        assert!(out.contains(line), "{line:?} not in\n{out}");
    }
}

/// Without `--io-threads` the server sizes its threads from the cores it is given (`--cpus`)
/// and `--check-config` says what it chose and why; a given count is kept and said so.
#[test]
fn check_config_says_the_threads_it_chose_and_why() {
    let base = [
        "serve",
        "--check-config",
        "--service",
        "echo",
        "--udp",
        "127.0.0.1:0",
        "--cpus",
        "0",
    ];
    let o = cohort(&base);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains(
            "# threads: 1 io threads, 1 cpu workers per cpu-engine service: one io thread \
             per core (1)"
        ),
        "{text}"
    );
    let o = cohort(&[&base[..], &["--io-threads", "3"]].concat());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains("# threads: 3 io threads") && text.contains("--io-threads 3 (given)"),
        "{text}"
    );
}

/// `--check-config` prints every limit the server runs under in one table, each with why it
/// has its value (a derived one says how it was derived, a given one says so), the services'
/// own after the server's; the table is comments, so the printout still reads back.
#[test]
fn check_config_prints_every_limit_in_one_table() {
    let o = cohort(&[
        "serve",
        "--check-config",
        "--service",
        "echo,spin:inline",
        "--udp",
        "127.0.0.1:0",
        "--cpus",
        "0",
        "--max-connections",
        "100",
        "--max-queue",
        "512",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "# limits:")
        .skip(1)
        .take_while(|l| l.starts_with("#   "))
        .collect();
    let row = |name: &str| {
        table
            .iter()
            .find(|l| l.starts_with(&format!("#   {name}  ")))
            .unwrap_or_else(|| panic!("no {name:?} row in\n{text}"))
            .split_whitespace()
            .skip(1 + name.split(' ').count())
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(row("io threads"), "1 one io thread per core (1); 1 cpu workers per service (1 cores over 1 cpu-engine services, sharing the io threads' cores)");
    assert_eq!(row("max connections"), "100 given (--max-connections)");
    assert!(row("max buffered bytes").contains("an eighth of the machine's memory"));
    assert_eq!(
        row("idle timeout"),
        "60000 ms an idle TCP connection is closed after this"
    );
    assert!(row("io spin").starts_with("50 us one io thread"));
    assert!(row("echo max queue").starts_with("512 "));
    assert_eq!(
        row("echo cpu workers"),
        "1 chosen with the io threads (above)"
    );
    assert_eq!(
        row("spin engine"),
        "inline its own (NAME:ENGINE or its engine key)"
    );
    for name in [
        "socket buffer bytes",
        "read timeout",
        "drain timeout",
        "default timeout",
        "max deadline",
        "client max inflight",
        "client rate",
        "echo worker spin",
        "spin max queue",
    ] {
        row(name);
    }
    // The printout, table and all, reads back through --config.
    let dir = common::Scratch::new("check-config-table");
    let cfg = dir.0.join("c.toml");
    std::fs::write(&cfg, text.as_bytes()).unwrap();
    let o = cohort(&["serve", "--check-config", "--config", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("#   max connections  "));
}
