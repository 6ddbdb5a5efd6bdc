//! facever's tools: `cohort facever load-db` (references and the threshold into memcached:
//! what serving it needs, so the product's command) and `cohort-lab model eval facever` (the
//! threshold chosen on the training pairs and the accuracy on held-out ones: the lab's).

use super::db::FaceDb;
use super::orl;
use super::verify::{self, Accuracy};
use clap::{value_parser, Arg, ArgMatches, Command};
use cohort_service_api::tools::{Record, ServiceCommand};
use std::path::PathBuf;

/// Its commands of its own, `cohort facever ...`: `load-db`, which serving it needs
/// (`Tools::commands`).
pub const COMMANDS: &[ServiceCommand] = &[ServiceCommand {
    name: "facever",
    command: facever_command,
    run: run_facever,
}];

/// Its model tools, `cohort-lab model TOOL facever`: `eval`.
pub const MODELS: &[ServiceCommand] = &[ServiceCommand {
    name: "eval",
    command: eval_command,
    run: run_eval,
}];

fn facever_command() -> Command {
    Command::new("facever")
        .about("The face verification service's database: `cohort facever load-db` fills the memcached it serves from")
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(load_db_command())
}

fn run_facever(m: &ArgMatches, record: Record) -> Result<(), String> {
    match m.subcommand() {
        Some(("load-db", sub)) => run_load_db(sub, record),
        _ => unreachable!("clap requires a known subcommand"),
    }
}

fn data_arg() -> Arg {
    Arg::new("data")
        .long("data")
        .value_parser(value_parser!(PathBuf))
        .help("ORL faces folder (s1/1.pgm .. s40/10.pgm) [default: the ten people built in]")
}

fn load_db_command() -> Command {
    Command::new("load-db")
        .about("Store every person's reference histogram and the verification threshold (chosen on the training pairs) in memcached")
        .arg(
            Arg::new("memcached")
                .long("memcached")
                .default_value("127.0.0.1:11211")
                .help("The face database's memcached, HOST:PORT"),
        )
        .arg(data_arg())
}

fn eval_command() -> Command {
    Command::new("eval")
        .about("Choose the threshold on the training pairs and report verification accuracy on held-out genuine and impostor pairs (CPU)")
        .arg(data_arg())
        .arg(
            Arg::new("out")
                .long("out")
                .value_parser(value_parser!(PathBuf))
                .help("Also write the result as JSON here (with machine, commit, command)"),
        )
}

fn print(what: &str, a: &Accuracy) {
    println!(
        "{what}: threshold {:.1}: {:.1}% of {} genuine pairs accepted, {:.1}% of {} impostor pairs rejected (balanced accuracy {:.1}%)",
        a.threshold,
        100.0 * a.genuine_accepted,
        a.genuine_pairs,
        100.0 * a.impostors_rejected,
        a.impostor_pairs,
        100.0 * a.balanced
    );
}

fn run_load_db(m: &ArgMatches, _record: Record) -> Result<(), String> {
    let faces = orl::load(m.get_one::<PathBuf>("data").map(PathBuf::as_path))?;
    let addr: &String = m.get_one("memcached").expect("default");
    let (train, held) = verify::evaluate(&faces);
    let db = FaceDb::connect(addr, 1)?;
    db.load(&faces, train.threshold)?;
    println!(
        "stored {} references and threshold {:.1} in memcached at {addr}",
        faces.people, train.threshold
    );
    print("held-out pairs", &held);
    Ok(())
}

fn run_eval(m: &ArgMatches, record: Record) -> Result<(), String> {
    let faces = orl::load(m.get_one::<PathBuf>("data").map(PathBuf::as_path))?;
    let (train, held) = verify::evaluate(&faces);
    print("training pairs", &train);
    print("held-out pairs", &held);
    if let Some(out) = m.get_one::<PathBuf>("out") {
        record(
            out,
            serde_json::json!({ "people": faces.people, "train": train, "held_out": held }),
        )?;
    }
    Ok(())
}
