//! A service's tools, its [`Tools`]: commands of its own on the product's binary (`cohort
//! NAME`: knn's `index`, facever's `facever load-db`) and the lab's, on `cohort-lab`: its
//! benchmarks (`bench NAME`) and its model tools (`model TOOL NAME`). Neither is serving: the
//! server never reads them, and the product's binary reads only `commands`. Nothing here
//! names a service.

/// What a service brings to the command lines (none by default: `..Tools::NONE`).
pub struct Tools {
    /// Commands of its own, `cohort COMMAND ...` (knn: `index`; facever: `facever`), what a
    /// user needs to serve it; a name is unique in the catalog and never one of the
    /// binary's own commands.
    pub commands: &'static [ServiceCommand],
    /// The lab's: its own benchmarks (`cohort-lab bench NAME ...`), beside its code.
    pub benches: &'static [ServiceCommand],
    /// The lab's: its model's tools, `cohort-lab model COMMAND NAME ...` (lenet: `train`,
    /// `eval`).
    pub models: &'static [ServiceCommand],
}

impl Tools {
    /// No command, benchmark or model tool.
    pub const NONE: Tools = Tools {
        commands: &[],
        benches: &[],
        models: &[],
    };
}

/// Writes a benchmark's result at a path, with the machine, commit and command beside it
/// (the binary's: it knows its commit), atomically.
pub type Record<'a> = &'a dyn Fn(&std::path::Path, serde_json::Value) -> Result<(), String>;

/// A command a service brings (a benchmark, `cohort-lab bench NAME`; a model tool, `cohort-lab model
/// NAME SERVICE`; a command of its own, `cohort NAME`), with the flags `command` declares.
pub struct ServiceCommand {
    pub name: &'static str,
    pub command: fn() -> clap::Command,
    pub run: fn(&clap::ArgMatches, Record) -> Result<(), String>,
}

/// The flags of `A` (clap derive) as the command `name`, described by `about`: what a
/// `ServiceCommand::command` returns.
pub fn args_command<A: clap::Args>(name: &'static str, about: &'static str) -> clap::Command {
    A::augment_args(clap::Command::new(name)).about(about)
}

/// The flags parsed into `A`, then `run` on them; any error as text, its causes included
/// (`{:#}`): what a `ServiceCommand::run` does.
pub fn parsed<A: clap::FromArgMatches, E: std::fmt::Display>(
    m: &clap::ArgMatches,
    run: impl FnOnce(&A) -> Result<(), E>,
) -> Result<(), String> {
    let a = A::from_arg_matches(m).map_err(|e| e.to_string())?;
    run(&a).map_err(|e| format!("{e:#}"))
}
