//! `cohort serve --check-config` prints the configuration it resolved (flags, config file and
//! defaults together) as a config file: keys named as the flags, `[services.NAME]` tables for
//! `--service-opt`, each default marked. Fed back through `--config`, it gives the same server.

use clap::parser::ValueSource;
use clap::ArgMatches;
use std::collections::BTreeMap;

/// Flags that are not settings of the server.
const NOT_SETTINGS: [&str; 3] = ["config", "check_config", "log_level"];

fn value(raw: &str) -> toml::Value {
    match raw.parse::<i64>() {
        Ok(i) => toml::Value::Integer(i),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

/// The serve command's settings as TOML.
pub fn as_toml(m: &ArgMatches) -> String {
    let mut lines = Vec::new();
    let mut services: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for id in m.ids() {
        let id = id.as_str();
        // Argument ids are the fields' snake_case names; the derived group of the whole
        // struct (`ServeArgs`) is not a setting.
        if NOT_SETTINGS.contains(&id) || id.chars().any(|c| c.is_ascii_uppercase()) {
            continue;
        }
        let Some(raw) = m.get_raw(id) else {
            lines.push(format!("# {id}: not set"));
            continue;
        };
        let raw: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
        if id == "service_opt" {
            for opt in &raw {
                if let Some((name, kv)) = opt.split_once('.') {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    services
                        .entry(name.to_string())
                        .or_default()
                        .push(format!("{k} = {}", value(v)));
                }
            }
            continue;
        }
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
    for (name, keys) in services {
        lines.push(format!("\n[services.{name}]"));
        lines.extend(keys);
    }
    lines.join("\n") + "\n"
}
