//! `cohort`: one binary for the server, the load generator, the demo and the tools.

mod data_cmd;
mod demo;
mod fetch;
mod load_cmd;
mod sim;
mod suite;

use cohort_experiments::bench;
use cohort_server::{self as serve, config_file as config};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cohort",
    version,
    about = "Accelerator-centric network server runtime"
)]
struct Cli {
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, global = true, default_value = "info")]
    log_level: String,
    /// Virtual GPUs (`virtual_gpus_arg`). Global, so that `cohort --virtual-gpus X serve` and
    /// the like keep working, but hidden: the commands that use GPUs show it in their help.
    #[arg(long, global = true, hide = true, value_name = "DEV:NxS")]
    virtual_gpus: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a server until SIGINT/SIGTERM (given a cluster, a front end forwarding to nodes).
    Serve(Box<serve::ServeArgs>),
    /// Run a cluster node until SIGINT/SIGTERM: the engines of `serve`, taking requests from
    /// front ends over UCX at --node-listen, registered in etcd at --cluster (docs/cluster.md).
    /// Client listeners (--udp, ...) are optional.
    Node(Box<serve::ServeArgs>),
    /// Drive load at a server and report throughput, latency and errors.
    Load(load_cmd::LoadArgs),
    /// Start a server on loopback, sweep load at it, print a table.
    Demo(demo::DemoArgs),
    /// Vector data sets: synthesize or fetch.
    #[command(subcommand)]
    Data(data_cmd::DataCmd),
    /// A service's model tools, e.g. `model train lenet --data MNIST_DIR --out
    /// lenet.safetensors` (the list below).
    #[command(disable_help_flag = true)]
    Model {
        /// The tool (the list below).
        #[arg(allow_hyphen_values = true)]
        tool: Option<String>,
        /// The service whose tool it is.
        #[arg(allow_hyphen_values = true)]
        service: Option<String>,
        /// The tool's own flags (`cohort model TOOL SERVICE --help` lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// List CUDA devices (name, SMs, memory, PCI bus, NUMA node).
    Gpus,
    /// Self-checks; `selftest gpu` runs every GPU kernel against its CPU twin.
    Selftest {
        /// What to check: gpu.
        what: String,
        /// Seed of the random inputs (default: the clock).
        #[arg(long)]
        seed: Option<u64>,
        /// Leave out the persistent engine (for compute-sanitizer, which serializes kernels:
        /// kernels that never end would wait for each other forever).
        #[arg(long)]
        no_persistent: bool,
        /// Run only the service GPU checks whose "service: check" name holds this text, and
        /// the engine checks of the services whose name holds it (nothing else): one service
        /// again after a change, without the whole selftest.
        #[arg(long)]
        only: Option<String>,
        /// The devices the service checks run on (ordinals, virtual GPUs too): the first for
        /// checks of one device; checks over several devices (knn's sharded index) add a run
        /// over all of them. Default: the first device.
        #[arg(long, value_delimiter = ',')]
        gpus: Vec<usize>,
    },
    /// Benchmarks; results go to lab/results/ with machine, commit and command.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Simulators: `sim numa` (a NUMA multi-socket GPU, the paper's figures, calibration).
    #[command(subcommand)]
    Sim(sim::SimCmd),
}

/// The commands whose help shows `--virtual-gpus`: those that open GPUs (bench's own
/// subcommands too, as the servers `bench served` starts inherit it).
const USES_GPUS: [&str; 6] = ["serve", "node", "demo", "gpus", "selftest", "bench"];

/// `--virtual-gpus` as a command that uses GPUs shows it. Clap gives a subcommand the root's
/// global argument only when it has none of the same id, so this copy replaces the hidden one
/// there; its value is read wherever it was given (`virtual_gpus`).
fn virtual_gpus_arg() -> clap::Arg {
    clap::Arg::new("virtual_gpus")
        .long("virtual-gpus")
        .value_name("DEV:NxS")
        .global(true)
        .help(
            "Virtual GPUs: N groups of S SMs of GPU DEV (green contexts), e.g. 0:8x8; GPU \
             indices (--gpus 0-7) then name the groups. Sets COHORT_VIRTUAL_GPUS, which the \
             servers that `bench served` starts inherit",
        )
}

/// The `--virtual-gpus` value, given before the subcommand or after one that shows it.
fn virtual_gpus(mut m: &clap::ArgMatches) -> Option<String> {
    loop {
        // (try_: a command without the argument is not an error here.)
        if let Ok(Some(v)) = m.try_get_one::<String>("virtual_gpus") {
            return Some(v.clone());
        }
        m = m.subcommand()?.1;
    }
}

/// The command line: the derived commands, plus on `serve` the flags each service declares
/// (`--index` of knn, ...) and under `bench` each service's own benchmarks, which the
/// services' catalog lists.
fn command() -> clap::Command {
    use clap::CommandFactory;
    let cmd = Cli::command().mut_subcommand("model", |c| {
        // Help of its own: `--help` after TOOL SERVICE is the tool's.
        c.after_help(format!(
            "Tools (TOOL SERVICE): {}.\n`cohort model TOOL SERVICE --help` lists a tool's flags.",
            cohort_services::catalog::model_tools().join(", ")
        ))
    });
    // The services' own commands beside the binary's (knn's `index`).
    let mut cmd = cmd;
    for c in cohort_services::catalog::commands() {
        cmd = cmd.subcommand((c.command)());
    }
    let cmd = cmd.mut_subcommand("bench", |mut c| {
        use clap::Args as _;
        c = c.subcommand(
            suite::SuiteArgs::augment_args(clap::Command::new("suite")).about(
                "A section of bench/README.md reproduced: the runs of a suite (bench/suites/NAME.toml) in order, results and a summary under --out",
            ),
        );
        for b in cohort_services::catalog::benches() {
            c = c.subcommand((b.command)());
        }
        c
    });
    let with_service_flags = |mut c: clap::Command| {
        for (_, f) in cohort_services::catalog::flags() {
            let arg = clap::Arg::new(f.long).long(f.long);
            c = c.arg(if f.switch {
                arg.help(f.help).action(clap::ArgAction::SetTrue)
            } else {
                arg.help(format!("{} [example: {}]", f.help, f.example))
                    .action(clap::ArgAction::Set)
                    .value_name("VALUE")
            });
        }
        c
    };
    let mut cmd = cmd
        .mut_subcommand("serve", with_service_flags)
        .mut_subcommand("node", with_service_flags);
    for name in USES_GPUS {
        cmd = cmd.mut_subcommand(name, |c| c.arg(virtual_gpus_arg()));
    }
    cmd
}

/// The services' flags the serve command line gave, onto their settings (over the config
/// file's `[services.NAME]` tables).
fn service_flags(a: &mut serve::ServeArgs, m: &clap::ArgMatches) {
    for (service, f) in cohort_services::catalog::flags() {
        let value = if f.switch {
            if !m.get_flag(f.long) {
                continue;
            }
            toml::Value::Boolean(true)
        } else {
            let Some(raw) = m.get_one::<String>(f.long) else {
                continue;
            };
            cohort_services::config::value_of(raw)
        };
        a.set_service(service.name, f.key, value);
    }
}

/// glibc hands freed memory back to the kernel as soon as an arena's top passes 128 KiB, and
/// an io thread that frees a few 16 KiB bodies then faults fresh zeroed pages in for the next
/// ones: 11% of a core in page faults when echoing 16 KiB over HTTP on one core (perf, 2-core
/// machine). Keep up to 64 MiB per arena and serve blocks below 1 MiB from the heap.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// `cohort bench NAME ...` where NAME is a service's own benchmark: it, and its flags.
/// The service command the command line names, with its flags: a benchmark (`bench NAME`)
/// or a command of a service's own (`cohort NAME`, knn's `index`).
fn service_command(
    m: &clap::ArgMatches,
) -> Option<(
    &'static cohort_services::entry::ServiceCommand,
    &clap::ArgMatches,
)> {
    let (name, sub) = m.subcommand()?;
    if let Some(c) = cohort_services::catalog::commands().find(|c| c.name == name) {
        return Some((c, sub));
    }
    let (name, sub) = m.subcommand_matches("bench")?.subcommand()?;
    cohort_services::catalog::benches()
        .find(|b| b.name == name)
        .map(|b| (b, sub))
}

/// Runs a command that records results (a service's command, a suite): logs at --log-level,
/// each result written with the machine, commit and command beside it; exits, non-zero on
/// an error.
fn recording(
    matches: &clap::ArgMatches,
    run: impl FnOnce(cohort_services::entry::Record) -> Result<(), String>,
) -> ! {
    let level = matches
        .get_one::<String>("log_level")
        .map_or("info", String::as_str);
    init_tracing(level);
    let record = |path: &std::path::Path, v: serde_json::Value| {
        bench::write_result(path, v).map_err(|e| format!("{e:#}"))
    };
    if let Err(e) = run(&record) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    std::process::exit(0)
}

fn init_tracing(level: &str) {
    let mut filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // rustls warns once per handshake about clients' quirks (an IP address sent as SNI, as wrk
    // does): a line per connection. Its errors still show; `--log-level rustls=warn` restores.
    if !level.contains("rustls") {
        filter = filter.add_directive("rustls=error".parse().expect("static directive"));
    }
    // Colours only for a terminal: logs piped to files or collectors stay plain text.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn main() {
    // Eager module loading and a hardware queue per stream; the driver reads these at
    // cuInit, so they are set before anything else runs.
    cohort_gpu::set_driver_defaults();
    keep_freed_memory();
    use clap::FromArgMatches;
    let matches = command().get_matches();
    if let Some(v) = virtual_gpus(&matches) {
        if let Err(e) = v.parse::<cohort_gpu::green::VirtualSplit>() {
            eprintln!("error: --virtual-gpus {e}");
            std::process::exit(2);
        }
        std::env::set_var(cohort_gpu::green::ENV, &v);
    }
    if let Some(m) = matches
        .subcommand_matches("bench")
        .and_then(|b| b.subcommand_matches("suite"))
    {
        recording(&matches, |record| {
            let a = suite::SuiteArgs::from_arg_matches(m).map_err(|e| e.to_string())?;
            suite::run(&a, &command(), record).map_err(|e| format!("{e:#}"))
        });
    }
    if let Some((command, m)) = service_command(&matches) {
        recording(&matches, |record| (command.run)(m, record));
    }
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Cmd::Serve(a) | Cmd::Node(a), Some((_, m))) = (&mut cli.cmd, matches.subcommand()) {
        // The config file under the command line: its settings typed into the same struct.
        if let Err(e) = config::apply(a, m) {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
        service_flags(a, m);
    }
    init_tracing(&cli.log_level);
    let result = match cli.cmd {
        Cmd::Serve(a) => serve::run(*a, matches.subcommand_matches("serve")),
        Cmd::Node(a) => {
            if a.node_listen.is_none() || a.cluster.is_none() {
                eprintln!("error: cohort node needs --node-listen HOST:PORT and --cluster etcd://HOST:PORT");
                std::process::exit(2);
            }
            serve::run(*a, matches.subcommand_matches("node"))
        }
        Cmd::Load(a) => load_cmd::run(a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Data(c) => data_cmd::run(c),
        Cmd::Bench(c) => bench::run(c),
        Cmd::Sim(c) => sim::run(c),
        Cmd::Model {
            tool,
            service,
            args,
        } => model(tool, service, args),
        Cmd::Gpus => gpus(),
        Cmd::Selftest {
            what,
            seed,
            no_persistent,
            only,
            gpus,
        } => selftest(&what, seed, !no_persistent, only.as_deref(), &gpus),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// `cohort model [--help]` prints the tools; `cohort model TOOL SERVICE ARGS...` runs one.
fn model(tool: Option<String>, service: Option<String>, args: Vec<String>) -> anyhow::Result<()> {
    let asks_help = |a: &str| a == "--help" || a == "-h";
    match (tool.as_deref(), service.as_deref()) {
        (Some(t), Some(s)) if !asks_help(t) && !asks_help(s) => model_tool(t, s, args),
        (t, s) => {
            let mut c = command();
            let m = c.find_subcommand_mut("model").expect("the model command");
            // Unbuilt, a subcommand's usage names it alone ("Usage: model").
            let mut m = m.clone().bin_name("cohort model");
            println!("{}", m.render_help());
            anyhow::ensure!(
                t.is_some_and(asks_help) || s.is_some_and(asks_help),
                "name a tool and its service: cohort model TOOL SERVICE"
            );
            Ok(())
        }
    }
}

/// `cohort model TOOL SERVICE ARGS...`: the service's own tool, its flags parsed by it.
fn model_tool(tool: &str, service: &str, args: Vec<String>) -> anyhow::Result<()> {
    let Some(cmd) = cohort_services::catalog::model_tool(tool, service) else {
        let have = cohort_services::catalog::with_model_tool(tool);
        anyhow::bail!(
            "no model tool {tool:?} for service {service:?}; {} (the tools: {})",
            if have.is_empty() {
                format!("no service has a tool {tool:?}")
            } else {
                format!("services with {tool:?}: {}", have.join(", "))
            },
            cohort_services::catalog::model_tools().join(", ")
        );
    };
    let m = (cmd.command)()
        .bin_name(format!("cohort model {tool} {service}"))
        .no_binary_name(true)
        .try_get_matches_from(args)
        .unwrap_or_else(|e| e.exit());
    let record = |path: &std::path::Path, v: serde_json::Value| {
        bench::write_result(path, v).map_err(|e| format!("{e:#}"))
    };
    (cmd.run)(&m, &record).map_err(anyhow::Error::msg)
}

fn gpus() -> anyhow::Result<()> {
    // No device is an answer (zero GPUs, and why), not a failure of the command.
    let devices = match cohort_gpu::probe() {
        Ok(d) => d,
        Err(cohort_gpu::GpuError::NoDevice(why)) => {
            println!("0 GPUs: {why}");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    for d in devices {
        println!(
            "gpu {}: {} ({}), {} SMs, {:.1} GiB, pci {}, numa node {}",
            d.ordinal,
            d.name,
            d.arch(),
            d.sms,
            d.total_mem as f64 / (1u64 << 30) as f64,
            d.pci_bus_id,
            d.numa_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "unknown".into())
        );
    }
    Ok(())
}

fn selftest(
    what: &str,
    seed: Option<u64>,
    persistent: bool,
    only: Option<&str>,
    gpus: &[usize],
) -> anyhow::Result<()> {
    anyhow::ensure!(what == "gpu", "unknown selftest {what:?} (gpu)");
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    println!("selftest gpu, seed {seed}");
    if only.is_none() {
        // The experiments' own kernels (the services' run below, from their entries).
        for line in cohort_experiments::selftest::run(seed)? {
            println!("{line}");
        }
    }
    // Every service's own checks (its catalog entry's `gpu_checks`: kernels, sharded index,
    // parsers) on the first GPU; a mismatch panics inside the check, naming both answers.
    let all = cohort_gpu::probe()?;
    let devs = if gpus.is_empty() {
        vec![all[0].clone()]
    } else {
        cohort_gpu::pick_devices(&all, gpus).map_err(|e| anyhow::anyhow!("--gpus: {e}"))?
    };
    let mut ran = 0;
    for (service, check) in cohort_services::catalog::gpu_checks() {
        let name = format!("{service}: {}", check.name);
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        if check.persistent && !persistent {
            println!("{name}: left out (--no-persistent)");
            continue;
        }
        ran += 1;
        println!("{name}");
        let lines = (check.run)(&devs, seed)
            .map_err(|e| anyhow::anyhow!("{service}: {}: {e}", check.name))?;
        for line in lines {
            println!("{line}");
        }
    }
    if let Some(o) = only {
        // The services named like it, through the engines, too.
        let lines = cohort_services::selftest::run_cases(&devs[0], seed, persistent, Some(o))
            .map_err(anyhow::Error::msg)?;
        ran += lines.len();
        for line in lines {
            println!("{line}");
        }
        anyhow::ensure!(ran > 0, "no service GPU check is named like {o:?}");
        println!("selftest gpu: the {ran} check(s) named like {o:?} match (the rest not run)");
        return Ok(());
    }
    println!("selftest gpu: all kernels match their CPU twins");
    if !persistent {
        println!("gpu-persistent left out (--no-persistent)");
    }
    for line in cohort_services::selftest::run(seed, persistent).map_err(anyhow::Error::msg)? {
        println!("{line}");
    }
    println!("selftest gpu: every service's GPU backend matches its CPU twin through the engines");
    Ok(())
}
