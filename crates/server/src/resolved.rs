//! `cohort serve --check-config` prints the configuration it resolved (flags, config file and
//! defaults together) as a config file: keys named as the flags, each default marked, then a
//! `[services.NAME]` table per service served: its engine's knobs and its own settings as its
//! typed settings resolved them (every default filled in). Fed back through `--config`, it
//! gives the same server.

use crate::plan::{engine_settings, resolved_settings, ServicePlan};
use clap::parser::ValueSource;
use clap::ArgMatches;

/// Flags that are not settings of the server.
const NOT_SETTINGS: [&str; 3] = ["config", "check_config", "log_level"];

fn value(raw: &str) -> toml::Value {
    match raw.parse::<i64>() {
        Ok(i) => toml::Value::Integer(i),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

/// The serve command's settings and the services' `plans` as TOML.
pub fn as_toml(m: &ArgMatches, plans: &[ServicePlan]) -> anyhow::Result<String> {
    let mut lines = Vec::new();
    for id in m.ids() {
        let id = id.as_str();
        // Argument ids are the fields' snake_case names; the derived group of the whole
        // struct (`ServeArgs`) is not a setting; the services' own flags and --service-opt
        // are printed in the services' tables.
        if NOT_SETTINGS.contains(&id)
            || id == "service_opt"
            || id.chars().any(|c| c.is_ascii_uppercase())
            || cohort_services::catalog::flag_owner(id).is_some()
        {
            continue;
        }
        let Some(raw) = m.get_raw(id) else {
            lines.push(format!("# {id}: not set"));
            continue;
        };
        let raw: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
        let v = match raw.as_slice() {
            [one] if one == "true" || one == "false" => toml::Value::Boolean(one == "true"),
            [one] => value(one),
            many => toml::Value::String(many.join(",")),
        };
        let default = matches!(m.value_source(id), Some(ValueSource::DefaultValue));
        let note = if default { "  # default" } else { "" };
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
