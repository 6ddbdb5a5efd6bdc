//! A service's own settings, typed. Each service declares one struct (serde, unknown keys
//! refused) and the `cohort serve` flags that set its keys; the server collects the settings
//! a user gave for the service - the config file's `[services.NAME]` table, those flags,
//! `--service-opt NAME.KEY=VALUE` - into one TOML table, and the service reads its struct from
//! it. No setting travels as a re-parsed string, and no code outside the service names its keys.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The settings given for one service, by key, before its struct reads them.
pub type Settings = toml::Table;

/// A service's typed settings: every field has its one default here (`Default`), and
/// [`ServiceConfig::check`] states the ranges serde cannot.
pub trait ServiceConfig: Serialize + DeserializeOwned + Default {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// A `cohort serve` flag a service owns: `--LONG VALUE` (or `--LONG` for a switch) sets the
/// service's `key`.
#[derive(Debug, Clone, Copy)]
pub struct ServiceFlag {
    pub long: &'static str,
    pub key: &'static str,
    pub help: &'static str,
    pub switch: bool,
    /// A value it takes (shown in `--help`; the tests serve with it). Empty for a switch.
    pub example: &'static str,
}

/// `T` read from `s`; an unknown key is an error naming it and the keys there are.
pub fn typed<T: ServiceConfig>(service: &str, s: &Settings) -> Result<T, String> {
    let read = |s: &Settings| -> Result<T, String> {
        toml::Value::Table(s.clone())
            .try_into()
            .map_err(|e: toml::de::Error| e.message().trim().to_string())
    };
    let t: T = read(s).map_err(|e| {
        // A value of the wrong type: serde's message does not say whose; find the key.
        let key = s.iter().find(|(k, v)| {
            let mut one = Settings::new();
            one.insert(k.to_string(), (*v).clone());
            read(&one).is_err()
        });
        match key {
            Some((k, _)) if !e.contains(k.as_str()) => format!("{service}: {k}: {e}"),
            _ => format!("{service}: {e}"),
        }
    })?;
    t.check().map_err(|e| format!("{service}: {e}"))?;
    Ok(t)
}

/// The settings `s` resolve to, every default filled in, as a TOML table (what
/// `serve --check-config` prints; read back, it gives the same settings).
pub fn resolved<T: ServiceConfig>(service: &str, s: &Settings) -> Result<Settings, String> {
    let t: T = typed(service, s)?;
    match toml::Value::try_from(&t) {
        Ok(toml::Value::Table(t)) => Ok(t),
        Ok(other) => Err(format!("{service}: settings are not a table: {other}")),
        Err(e) => Err(format!("{service}: {e}")),
    }
}

/// A setting written on a command line (`--service-opt knn.nprobe=16`, `--index F`) as
/// the TOML value a config file would hold: integers and booleans as such, anything else a
/// string.
pub fn value_of(raw: &str) -> toml::Value {
    if let Ok(i) = raw.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    match raw {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(raw.to_string()),
    }
}

/// Settings from `KEY=VALUE` pairs as text, read as the serve flags' values are (the tests'
/// shorthand, and the selftest's persistent variants).
pub fn settings(pairs: &[(&str, &str)]) -> Settings {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), value_of(v)))
        .collect()
}

/// An enum a setting names by a word: the enum, `FromStr` (an unknown word is an error that
/// names `what` and lists the words) and `Display` (the word), so a `#[serde(with = "text")]`
/// field reads and writes it.
///
/// ```ignore
/// named_enum! {
///     /// How the GPU computes.
///     pub enum Math ("lenet math") { Tf32x3 = "tf32x3", Fp32 = "fp32" }
/// }
/// ```
#[macro_export]
macro_rules! named_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident ($what:literal) {
        $($(#[$vmeta:meta])* $variant:ident = $word:literal),+ $(,)?
    }) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($word => Ok($name::$variant),)+
                    _ => Err(format!(
                        "unknown {} {s:?} ({})",
                        $what,
                        [$($word),+].join(", ")
                    )),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self {
                    $($name::$variant => $word),+
                })
            }
        }
    };
}
pub use crate::named_enum;

/// Serde for a field whose type reads from and writes to text (`FromStr` + `Display`): an
/// enum like `f16` or `memcached://HOST:PORT`.
pub mod text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: std::fmt::Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: std::str::FromStr<Err = String>,
        D: Deserializer<'de>,
    {
        let v = toml::Value::deserialize(d)?;
        let text = match v {
            toml::Value::String(s) => s,
            other => other.to_string(),
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Demo {
        size: u32,
        #[serde(with = "text")]
        shade: Shade,
    }

    named_enum! {
        #[derive(Debug, Default, PartialEq)]
        enum Shade ("shade") {
            #[default]
            Light = "light",
            Dark = "dark",
        }
    }

    impl ServiceConfig for Demo {
        fn check(&self) -> Result<(), String> {
            if self.size > 9 {
                return Err("size must be at most 9".into());
            }
            Ok(())
        }
    }

    #[test]
    fn typed_settings_name_unknown_keys_and_bad_values() {
        let d: Demo = typed("demo", &settings(&[("size", "3"), ("shade", "dark")])).unwrap();
        assert_eq!((d.size, d.shade), (3, Shade::Dark));
        let e = typed::<Demo>("demo", &settings(&[("shade", "pink")])).unwrap_err();
        assert!(e.contains("unknown shade \"pink\""), "{e}");
        let e = typed::<Demo>("demo", &settings(&[("colour", "red")])).unwrap_err();
        assert!(
            e.contains("colour") && e.contains("size") && e.contains("shade"),
            "{e}"
        );
        let e = typed::<Demo>("demo", &settings(&[("size", "x")])).unwrap_err();
        assert!(e.starts_with("demo:") && e.contains("size"), "{e}");
        let e = typed::<Demo>("demo", &settings(&[("size", "12")])).unwrap_err();
        assert!(e.contains("at most 9"), "{e}");
        let r = resolved::<Demo>("demo", &Settings::new()).unwrap();
        assert_eq!(r.get("size"), Some(&toml::Value::Integer(0)));
        assert_eq!(r.get("shade"), Some(&toml::Value::String("light".into())));
    }
}
