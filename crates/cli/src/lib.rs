//! The `cohort` binary's command line: the server, the cluster node, the load generator, the
//! demo, the data and index tools, the GPU list and selftest. What a user runs; the lab's
//! benchmarks, suites, simulator and model tools are the `cohort-lab` binary's (lab/cli),
//! which checks its suites' `cohort` steps against [`command`] and shares the logging and
//! GPU set-up below.

mod collections_cmd;
mod data_cmd;
mod demo;
mod fetch;
mod load_cmd;

use cohort_server::{self as serve, config_file as config};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cohort",
    version,
    about = "Accelerator-centric network server runtime",
    after_help = "Benchmarks, suites, the NUMA simulator and the model tools are the lab's binary's: cohort-lab --help."
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
    Load(Box<load_cmd::LoadArgs>),
    /// Start a server on loopback, sweep load at it, print a table.
    Demo(demo::DemoArgs),
    /// Vector data sets: synthesize or fetch.
    #[command(subcommand)]
    Data(data_cmd::DataCmd),
    /// Live collections of a --data-dir: import a static index file as a collection.
    #[command(subcommand)]
    Collections(collections_cmd::CollectionsCmd),
    /// List CUDA devices (name, SMs, memory, PCI bus, NUMA node).
    Gpus,
    /// Self-checks; `selftest gpu` runs every service's GPU kernels and backends against
    /// their CPU twins (the lab's own kernels: `cohort-lab selftest gpu`).
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
}

/// The commands whose help shows `--virtual-gpus`: those that open GPUs.
const USES_GPUS: [&str; 5] = ["serve", "node", "demo", "gpus", "selftest"];

/// `--virtual-gpus` as a command that uses GPUs shows it. Clap gives a subcommand the root's
/// global argument only when it has none of the same id, so this copy replaces the hidden one
/// there; its value is read wherever it was given (`virtual_gpus`).
pub fn virtual_gpus_arg() -> clap::Arg {
    clap::Arg::new("virtual_gpus")
        .long("virtual-gpus")
        .value_name("DEV:NxS")
        .global(true)
        .help(
            "Virtual GPUs: N groups of S SMs of GPU DEV (green contexts), e.g. 0:8x8; GPU \
             indices (--gpus 0-7) then name the groups. Sets COHORT_VIRTUAL_GPUS, which the \
             servers that `cohort-lab bench served` starts inherit",
        )
}

/// The `--virtual-gpus` value, given before the subcommand or after one that shows it.
pub fn virtual_gpus(mut m: &clap::ArgMatches) -> Option<String> {
    loop {
        // (try_: a command without the argument is not an error here.)
        if let Ok(Some(v)) = m.try_get_one::<String>("virtual_gpus") {
            return Some(v.clone());
        }
        m = m.subcommand()?.1;
    }
}

/// The command line: the derived commands, plus on `serve` the flags each service declares
/// (`--index` of knn, ...) and the services' own commands (knn's `index`), which the
/// services' catalog lists.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    // The services' own commands beside the binary's (knn's `index`).
    let mut cmd = Cli::command();
    for c in cohort_services::catalog::commands() {
        cmd = cmd.subcommand((c.command)());
    }
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

/// `serve` and `node`: the command line resolved once into the server's configuration, then
/// checked and printed (`--check-config`) or served.
fn serve_cmd(a: &serve::ServeArgs, m: Option<&clap::ArgMatches>) -> anyhow::Result<()> {
    let cfg = serve::ServerConfig::resolve(a)?;
    if a.check_config {
        print!("{}", serve::check_config(&cfg, a, m)?);
        return Ok(());
    }
    serve::run(&cfg)
}

/// glibc hands freed memory back to the kernel as soon as an arena's top passes 128 KiB, and
/// an io thread that frees a few 16 KiB bodies then faults fresh zeroed pages in for the next
/// ones: 11% of a core in page faults when echoing 16 KiB over HTTP on one core (perf, 2-core
/// machine). Keep up to 64 MiB per arena and serve blocks below 1 MiB from the heap.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// The service command the command line names, with its flags: a command of a service's
/// own (`cohort NAME`, knn's `index`).
fn service_command(
    m: &clap::ArgMatches,
) -> Option<(
    &'static cohort_services::tools::ServiceCommand,
    &clap::ArgMatches,
)> {
    let (name, sub) = m.subcommand()?;
    cohort_services::catalog::commands()
        .find(|c| c.name == name)
        .map(|c| (c, sub))
}

/// A result written with the machine, commit and command beside it (what a service
/// command's `Record` does).
pub fn record(path: &std::path::Path, v: serde_json::Value) -> Result<(), String> {
    cohort_provenance::write_result(path, v).map_err(|e| format!("{e:#}"))
}

/// `--virtual-gpus`, where given, checked and handed to the GPU runtime (and the servers a
/// command starts) through its environment variable; exits 2 on a bad value.
pub fn set_virtual_gpus(matches: &clap::ArgMatches) {
    if let Some(v) = virtual_gpus(matches) {
        if let Err(e) = v.parse::<cohort_gpu::green::VirtualSplit>() {
            eprintln!("error: --virtual-gpus {e}");
            std::process::exit(2);
        }
        std::env::set_var(cohort_gpu::green::ENV, &v);
    }
}

/// Runs a command that records results (a service's command, a suite): logs at --log-level,
/// each result written with the machine, commit and command beside it; exits, non-zero on
/// an error.
pub fn recording(
    matches: &clap::ArgMatches,
    run: impl FnOnce(cohort_services::tools::Record) -> Result<(), String>,
) -> ! {
    let level = matches
        .get_one::<String>("log_level")
        .map_or("info", String::as_str);
    init_tracing(level);
    if let Err(e) = run(&record) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    std::process::exit(0)
}

pub fn init_tracing(level: &str) {
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

/// The `cohort` binary.
pub fn main() {
    // Eager module loading and a hardware queue per stream; the driver reads these at
    // cuInit, so they are set before anything else runs.
    cohort_gpu::set_driver_defaults();
    keep_freed_memory();
    use clap::FromArgMatches;
    let matches = command().get_matches();
    set_virtual_gpus(&matches);
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
        Cmd::Serve(a) => serve_cmd(&a, matches.subcommand_matches("serve")),
        Cmd::Node(a) => {
            if a.node_listen.is_none() || a.cluster.is_none() {
                eprintln!("error: cohort node needs --node-listen HOST:PORT and --cluster etcd://HOST:PORT");
                std::process::exit(2);
            }
            serve_cmd(&a, matches.subcommand_matches("node"))
        }
        Cmd::Load(a) => load_cmd::run(*a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Data(c) => data_cmd::run(c),
        Cmd::Collections(c) => collections_cmd::run(c),
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
    // Every service's own checks (its listing's `Checks::gpu_checks`: kernels, sharded index,
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
