//! How the serve settings whose flags take text (`on`/`off`, `512M`) read from and write to a
//! config file: either form in (the flag's text, or the TOML value of the field's type), and
//! the friendlier one out, so what `--check-config` prints reads back through `--config`.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// The text form of a value, or the value itself (`on`, `"512M"`, `true`, `536870912`).
fn text_or<'de, D: Deserializer<'de>>(d: D) -> Result<Result<String, toml::Value>, D::Error> {
    Ok(match toml::Value::deserialize(d)? {
        toml::Value::String(s) => Ok(s),
        other => Err(other),
    })
}

/// A switch written `on`/`off` (as its flag takes it) or as a TOML boolean.
pub mod on_off {
    use super::*;

    pub fn serialize<S: Serializer>(v: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if *v { "on" } else { "off" })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        match text_or(d)? {
            Ok(s) => crate::util::parse_on_off(&s).map_err(D::Error::custom),
            Err(toml::Value::Boolean(b)) => Ok(b),
            Err(other) => Err(D::Error::custom(format!("expected on or off, got {other}"))),
        }
    }
}

/// A byte count written as a number or as the flag takes it (`512K`, `64M`, `2G`); written
/// back with the largest unit that divides it.
pub mod bytes {
    use super::*;

    pub fn text(v: usize) -> String {
        for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
            if v != 0 && v.is_multiple_of(1 << shift) {
                return format!("{}{unit}", v >> shift);
            }
        }
        v.to_string()
    }

    pub fn serialize<S: Serializer>(v: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&text(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        match text_or(d)? {
            Ok(s) => crate::util::parse_bytes_or_zero(&s).map_err(D::Error::custom),
            Err(toml::Value::Integer(i)) => {
                usize::try_from(i).map_err(|_| D::Error::custom(format!("{i}: not a byte count")))
            }
            Err(other) => Err(D::Error::custom(format!(
                "expected a byte count like 512K or 64M, got {other}"
            ))),
        }
    }

    /// The same for an optional count.
    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(v: &Option<usize>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(v) => super::serialize(v, s),
                None => s.serialize_none(),
            }
        }

        /// A limit: 0 is refused, as its flag refuses it.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
            match super::deserialize(d)? {
                0 => Err(D::Error::custom("0: give a byte count above 0")),
                v => Ok(Some(v)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct T {
        #[serde(with = "on_off")]
        gso: bool,
        #[serde(with = "bytes")]
        buf: usize,
        #[serde(with = "bytes::option", default)]
        max: Option<usize>,
    }

    fn read(text: &str) -> Result<T, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn either_form_reads_and_the_text_form_writes_back() {
        let t = read("gso = \"off\"\nbuf = \"128K\"\nmax = 536870912\n").unwrap();
        assert_eq!(
            t,
            T {
                gso: false,
                buf: 128 << 10,
                max: Some(512 << 20)
            }
        );
        assert!(read("gso = true\nbuf = 0\n").unwrap().gso);
        let back = toml::to_string(&t).unwrap();
        assert_eq!(back, "gso = \"off\"\nbuf = \"128K\"\nmax = \"512M\"\n");
        assert_eq!(read(&back).unwrap(), t);
        assert_eq!(bytes::text(1000), "1000");
    }

    #[test]
    fn bad_values_say_what_was_expected() {
        assert!(read("gso = \"maybe\"\nbuf = 1\n")
            .unwrap_err()
            .contains("expected on or off"));
        assert!(read("gso = 3\nbuf = 1\n")
            .unwrap_err()
            .contains("expected on or off"));
        assert!(read("gso = true\nbuf = -1\n")
            .unwrap_err()
            .contains("not a byte count"));
        assert!(read("gso = true\nbuf = \"lots\"\n").is_err());
    }
}
