//! `cohort serve --config FILE`: a TOML file of serve settings, read into the same typed
//! [`ServeArgs`] the flags fill. Its keys:
//!
//! - the serve settings, named as their fields (the flags without `--`, `_` or `-` alike):
//!   each one the command line leaves unset is deserialised into its field with the field's
//!   own type and parser (serde), so a flag given on the command line wins;
//! - the services' own flags (`index = ...`), over the services' tables;
//! - one `[services.NAME]` table per service (engine knobs and the service's own keys, read
//!   by `plan.rs`), below the services' flags and `--service-opt` in precedence.
//!
//! ```toml
//! service = "knn:gpu-cohort,echo:cpu"
//! index = "/data/sift.ivf"
//! udp = "127.0.0.1:7000"
//! io_threads = 2
//! cpus = "0-1"
//!
//! [services.knn]
//! gpus = [0, 1]
//! max_cohort = 512
//! cohort_timeout_us = 100
//! ```

use crate::ServeArgs;
use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::ArgMatches;
use std::collections::BTreeSet;

/// The `[services.NAME]` tables of a config file, by service name.
pub type ServiceTables = std::collections::BTreeMap<String, toml::Table>;

/// The settings of [`ServeArgs`] a config file may set: every field the flags fill, but the
/// file's own name and the repeatable `--service-opt` (written as `[services.NAME]` tables).
pub fn setting_keys() -> BTreeSet<String> {
    use clap::Args as _;
    ServeArgs::augment_args(clap::Command::new("serve"))
        .get_arguments()
        .map(|a| a.get_id().as_str().to_string())
        .filter(|id| id != "config" && id != "service_opt")
        .collect()
}

/// Reads `a.config` (if given) into `a`: the settings `m` (the serve command's matches) did
/// not take from the command line, the services' flags and tables. Errors name the file and
/// the key.
pub fn apply(a: &mut ServeArgs, m: &ArgMatches) -> Result<()> {
    let Some(path) = a.config.clone() else {
        return Ok(());
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading config {}", path.display()))?;
    apply_text(a, &text, &|id| {
        m.value_source(id) == Some(ValueSource::CommandLine)
    })
    .with_context(|| format!("in config {}", path.display()))
}

/// `apply` on the file's text; `on_command_line(id)`: whether the flag of setting `id` was
/// given there.
pub fn apply_text(
    a: &mut ServeArgs,
    text: &str,
    on_command_line: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let mut table: toml::Table = text.parse().context("invalid TOML")?;
    // The services' tables first: a service's flag given at the top of the file is set over
    // its table's key, whatever their order in the file.
    if let Some(services) = table.remove("services") {
        let toml::Value::Table(services) = services else {
            bail!("\"services\" must be a table of [services.NAME] tables");
        };
        for (name, t) in services {
            let toml::Value::Table(t) = t else {
                bail!("[services.{name}] must be a table");
            };
            a.service_settings.entry(name).or_default().extend(t);
        }
    }
    let keys = setting_keys();
    let flags = toml::Table::try_from(&*a).context("the flags' settings as TOML")?;
    let mut settings = flags.clone();
    // The settings the file gave: (its key, the field, the value).
    let mut taken = Vec::new();
    for (key, value) in table {
        let id = key.replace('-', "_");
        match id.as_str() {
            "config" => bail!("a config file cannot name another config file"),
            "service_opt" => {
                bail!("key {key:?}: a config file sets services' keys in [services.NAME] tables")
            }
            _ if keys.contains(&id) => {
                if !on_command_line(&id) {
                    settings.insert(id.clone(), value.clone());
                    taken.push((key, id, value));
                }
            }
            _ => match cohort_services::catalog::flag_owner(&key.replace('_', "-")) {
                // A service's own flag: the service's setting, as the flag would set it.
                Some((service, flag)) => {
                    if !on_command_line(flag.long) {
                        a.set_service(service.name, flag.key, value);
                    }
                }
                None => bail!(
                    "unknown key {key:?} (keys are the serve flags without \"--\", e.g. \
                     io_threads, and [services.NAME] tables)"
                ),
            },
        }
    }
    let read = |t: toml::Table| -> Result<ServeArgs, toml::de::Error> { t.try_into() };
    let typed = match read(settings) {
        Ok(typed) => typed,
        // Name the key whose value its field's type refused.
        Err(e) => {
            for (key, id, value) in &taken {
                let mut one = flags.clone();
                one.insert(id.clone(), value.clone());
                if let Err(e) = read(one) {
                    bail!("key {key:?}: {}", e.message());
                }
            }
            bail!("{}", e.message());
        }
    };
    anyhow::ensure!(
        typed.tls_cert.is_some() == typed.tls_key.is_some(),
        "tls_cert and tls_key go together: give both or neither"
    );
    let ServeArgs {
        service_settings,
        from_file,
        config,
        ..
    } = std::mem::replace(a, typed);
    a.service_settings = service_settings;
    a.config = config;
    a.from_file = from_file;
    a.from_file.extend(taken.into_iter().map(|(_, id, _)| id));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ServeArgs {
        ServeArgs::loopback("echo")
    }

    fn apply_cli(text: &str, cli: &[&str]) -> Result<ServeArgs> {
        let mut a = args();
        apply_text(&mut a, text, &|id| cli.contains(&id))?;
        Ok(a)
    }

    #[test]
    fn the_file_fills_typed_settings_and_service_tables() {
        let a = apply_cli(
            "service = \"echo\"\nio_threads = 2\ncpus = [0, 1]\nudp_gso = false\n\
             max_buffered_bytes = \"64M\"\nfair-queue = \"on\"\nmax_cohort = 300\n\
             gpus = \"0-2\"\n[services.knn]\nmax_cohort = 512\ngpus = [0, 1]\n",
            &[],
        )
        .unwrap();
        assert_eq!(a.service, "echo");
        assert_eq!(a.io_threads, 2);
        assert_eq!(a.cpus.as_ref().unwrap().0, vec![0, 1]);
        assert!(!a.udp_gso && a.fair_queue);
        assert_eq!(a.max_buffered_bytes, Some(64 << 20));
        assert_eq!(a.gpu.max_cohort, 300);
        assert_eq!(a.gpu.gpus, vec![0, 1, 2]);
        let knn = &a.service_settings["knn"];
        assert_eq!(knn["max_cohort"], toml::Value::Integer(512));
        // Untouched settings keep the flags' values (defaults here).
        assert_eq!(a.udp.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(a.default_timeout_us, 1_000_000);
        assert!(a.from_file.contains("io_threads") && !a.from_file.contains("udp"));
    }

    #[test]
    fn a_services_flag_in_the_file_sets_that_services_setting() {
        let (service, flag) = cohort_services::catalog::flags()
            .next()
            .expect("a service with a flag");
        let key = flag.long.replace('-', "_");
        let a = apply_cli(&format!("{key} = \"x\"\n"), &[]).unwrap();
        assert_eq!(
            a.service_settings[service.name][flag.key],
            toml::Value::String("x".into())
        );
        let a = apply_cli(&format!("{key} = \"x\"\n"), &[flag.long]).unwrap();
        assert!(!a.service_settings.contains_key(service.name));
        // Over the service's table, wherever the table stands in the file.
        let name = service.name;
        let inner = flag.key;
        let a = apply_cli(
            &format!("{key} = \"flag\"\n[services.{name}]\n{inner} = \"table\"\n"),
            &[],
        )
        .unwrap();
        assert_eq!(
            a.service_settings[name][inner],
            toml::Value::String("flag".into())
        );
    }

    #[test]
    fn command_line_flags_win() {
        let mut cli = args();
        cli.io_threads = 5;
        apply_text(&mut cli, "io_threads = 3\nworkers = 7\n", &|id| {
            id == "io_threads"
        })
        .unwrap();
        assert_eq!(cli.io_threads, 5);
        assert_eq!(cli.cpu.workers, 7);
    }

    #[test]
    fn bad_files_are_refused_naming_the_key() {
        let e = |text: &str| format!("{:#}", apply_cli(text, &[]).unwrap_err());
        assert!(e("x = {a = 1}").contains("unknown key \"x\""));
        assert!(e("not toml at all =").contains("invalid TOML"));
        assert!(e("config = \"other.toml\"").contains("cannot name another config file"));
        let unknown = e("io_thread = 2");
        assert!(unknown.contains("unknown key \"io_thread\""), "{unknown}");
        assert!(e("services = 3").contains("[services.NAME]"));
        assert!(e("service_opt = \"echo.x=1\"").contains("[services.NAME] tables"));
        let typed = e("io_threads = \"two\"");
        assert!(typed.contains("key \"io_threads\""), "{typed}");
        let flat = e("control_threads = \"many\"");
        assert!(flat.contains("key \"control_threads\""), "{flat}");
        assert!(e("fair_queue = \"maybe\"").contains("expected on or off"));
        assert!(e("tls_cert = \"c.pem\"").contains("tls_cert and tls_key go together"));
    }

    #[test]
    fn what_check_config_writes_reads_back_the_same() {
        let a = apply_cli(
            "io_threads = 3\nmax_buffered_bytes = \"1G\"\nsocket_buffer_bytes = 0\n\
             udp_io = \"uring\"\nstages = \"4:8:1\"\ndispatch = \"key-hash\"\n",
            &[],
        )
        .unwrap();
        let written = toml::to_string(&a).unwrap();
        let mut b = apply_cli(&written, &[]).unwrap();
        b.from_file = a.from_file.clone();
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{written}");
    }
}
