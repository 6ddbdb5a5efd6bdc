//! `cohort serve --check-config` prints the configuration it resolved (flags, config file and
//! defaults together, as the typed `ServeArgs` holds it) as a config file: keys named as the
//! flags, each default marked, then a `[services.NAME]` table per service served: its engine's
//! knobs and its own settings as its typed settings resolved them (every default filled in).
//! Fed back through `--config`, it gives the same server.

use crate::plan::{engine_settings, resolved_settings, ServicePlan};
use crate::ServeArgs;
use clap::parser::ValueSource;
use clap::ArgMatches;

/// The serve settings `a` holds (typed, as the flags and the config file filled them) and the
/// services' `plans` as TOML; `m`, the command line's matches, tells a setting given there or
/// in the file from a default.
pub fn as_toml(
    a: &ServeArgs,
    m: Option<&ArgMatches>,
    plans: &[ServicePlan],
) -> anyhow::Result<String> {
    let values = toml::Table::try_from(a)?;
    let mut lines = Vec::new();
    for id in crate::config_file::setting_keys() {
        // Not a setting of the server: the switch that asked for this printout.
        if id == "check_config" {
            continue;
        }
        let Some(v) = values.get(&id) else {
            lines.push(format!("# {id}: not set"));
            continue;
        };
        let given = a.from_file.contains(&id)
            || m.is_some_and(|m| m.value_source(&id) == Some(ValueSource::CommandLine));
        let note = if given { "" } else { "  # default" };
        lines.push(format!("{id} = {v}{note}"));
    }
    lines.sort();
    for p in plans {
        lines.push(format!("\n[services.{}]", p.name));
        let mut t = resolved_settings(p)?;
        t.extend(engine_settings(p));
        lines.push(toml::to_string(&t)?.trim_end().to_string());
    }
    Ok(lines.join("\n") + "\n")
}
