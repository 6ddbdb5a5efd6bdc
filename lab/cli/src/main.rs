//! `cohort-lab`: the lab beside the product. Benchmarks (`bench ...`, the services' own
//! too), suites (`bench suite NAME`), the NUMA simulator and its calibration (`sim numa`),
//! the services' model tools (`model TOOL SERVICE`: Centaur's model, training, evaluation)
//! and the lab's own kernel checks (`selftest gpu`). It starts the product's binary, `cohort`,
//! for servers and load generators (the one beside it, or `COHORT_BIN`); the product's crates
//! never depend on this one.

mod sim;
mod suite;

use clap::{Parser, Subcommand};
use cohort_experiments::bench;

#[derive(Parser)]
#[command(
    name = "cohort-lab",
    version,
    about = "Cohort's lab: benchmarks, suites, the NUMA simulator, model tools (the `cohort` binary serves)"
)]
struct Lab {
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, global = true, default_value = "info")]
    log_level: String,
    /// Virtual GPUs (hidden here; the commands that use GPUs show it, as `cohort`'s do).
    #[arg(long, global = true, hide = true, value_name = "DEV:NxS")]
    virtual_gpus: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Benchmarks; results go to lab/results/ with machine, commit and command.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Simulators: `sim numa` (a NUMA multi-socket GPU, the paper's figures, calibration).
    #[command(subcommand)]
    Sim(sim::SimCmd),
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
        /// The tool's own flags (`cohort-lab model TOOL SERVICE --help` lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The lab's own kernels against their CPU twins: `selftest gpu` (the multi-stream
    /// experiment's and the NUMA calibration's; the services' are `cohort selftest gpu`).
    Selftest {
        /// What to check: gpu.
        what: String,
        /// Seed of the random inputs (default: the clock).
        #[arg(long)]
        seed: Option<u64>,
    },
}

/// The commands whose help shows `--virtual-gpus` (bench's subcommands too, as the servers
/// `bench served` starts inherit it).
const USES_GPUS: [&str; 2] = ["bench", "selftest"];

/// The command line: the derived commands, plus under `bench` the suite runner and each
/// service's own benchmarks, which the services' catalog lists.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Lab::command()
        .mut_subcommand("model", |c| {
            // Help of its own: `--help` after TOOL SERVICE is the tool's.
            c.after_help(format!(
                "Tools (TOOL SERVICE): {}.\n`cohort-lab model TOOL SERVICE --help` lists a tool's flags.",
                cohort_services::catalog::model_tools().join(", ")
            ))
        })
        .mut_subcommand("bench", |mut c| {
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
    for name in USES_GPUS {
        cmd = cmd.mut_subcommand(name, |c| c.arg(cohort_cli::virtual_gpus_arg()));
    }
    cmd
}

fn main() {
    // As `cohort`'s: the driver's defaults before anything else, freed memory kept.
    cohort_gpu::set_driver_defaults();
    cohort_cli::keep_freed_memory();
    use clap::FromArgMatches;
    let matches = command().get_matches();
    cohort_cli::set_virtual_gpus(&matches);
    if let Some(bench) = matches.subcommand_matches("bench") {
        if let Some(m) = bench.subcommand_matches("suite") {
            cohort_cli::recording(&matches, |record| {
                let a = suite::SuiteArgs::from_arg_matches(m).map_err(|e| e.to_string())?;
                suite::run(&a, &command(), record).map_err(|e| format!("{e:#}"))
            });
        }
        // A service's own benchmark (`bench NAME`, from the catalog).
        if let Some((name, sub)) = bench.subcommand() {
            if let Some(b) = cohort_services::catalog::benches().find(|b| b.name == name) {
                cohort_cli::recording(&matches, |record| (b.run)(sub, record));
            }
        }
    }
    let cli = Lab::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cohort_cli::init_tracing(&cli.log_level);
    let result = match cli.cmd {
        Cmd::Bench(c) => bench::run(c),
        Cmd::Sim(c) => sim::run(c),
        Cmd::Model {
            tool,
            service,
            args,
        } => model(tool, service, args),
        Cmd::Selftest { what, seed } => selftest(&what, seed),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// `cohort-lab model [--help]` prints the tools; `cohort-lab model TOOL SERVICE ARGS...`
/// runs one.
fn model(tool: Option<String>, service: Option<String>, args: Vec<String>) -> anyhow::Result<()> {
    let asks_help = |a: &str| a == "--help" || a == "-h";
    match (tool.as_deref(), service.as_deref()) {
        (Some(t), Some(s)) if !asks_help(t) && !asks_help(s) => model_tool(t, s, args),
        (t, s) => {
            let mut c = command();
            let m = c.find_subcommand_mut("model").expect("the model command");
            // Unbuilt, a subcommand's usage names it alone ("Usage: model").
            let mut m = m.clone().bin_name("cohort-lab model");
            println!("{}", m.render_help());
            anyhow::ensure!(
                t.is_some_and(asks_help) || s.is_some_and(asks_help),
                "name a tool and its service: cohort-lab model TOOL SERVICE"
            );
            Ok(())
        }
    }
}

/// `cohort-lab model TOOL SERVICE ARGS...`: the service's own tool, its flags parsed by it.
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
        .bin_name(format!("cohort-lab model {tool} {service}"))
        .no_binary_name(true)
        .try_get_matches_from(args)
        .unwrap_or_else(|e| e.exit());
    (cmd.run)(&m, &cohort_cli::record).map_err(anyhow::Error::msg)
}

/// `cohort-lab selftest gpu`: the experiments' kernels (multi-stream processing, NUMA
/// calibration) against their CPU twins.
fn selftest(what: &str, seed: Option<u64>) -> anyhow::Result<()> {
    anyhow::ensure!(what == "gpu", "unknown selftest {what:?} (gpu)");
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    println!("selftest gpu (the lab's kernels), seed {seed}");
    for line in cohort_experiments::selftest::run(seed)? {
        println!("{line}");
    }
    println!("selftest gpu: the lab's kernels match their CPU twins");
    Ok(())
}
