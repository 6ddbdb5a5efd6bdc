//! `--gpu-precision` (`knn.precision`): the element type of the index's vectors on the GPU
//! engines. `auto`, the default, takes u8 where every vector is integral in 0..=255 (SIFT's
//! descriptors: u8 holds them exactly, so the distances and the neighbours are those of f32,
//! for a quarter of the bytes per scan), else f32. A named precision is taken as asked; u8
//! on other data is refused, in the words of the upload's own refusal.

use super::config::PrecisionChoice;
use super::gpu_ivf::Precision;
use cohort_engine::split::ShardSpec;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// What the GPU engines use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub precision: Precision,
    pub why: String,
}

/// The precision for `choice`; `first_not_u8` finds the first value of the vectors that is
/// not a byte (asked only where the choice depends on it).
pub fn choose(
    choice: PrecisionChoice,
    first_not_u8: impl FnOnce() -> Option<f32>,
) -> Result<Chosen, String> {
    let asked = |precision| Chosen {
        precision,
        why: format!("--gpu-precision {precision} (asked for)"),
    };
    match choice {
        PrecisionChoice::F32 => Ok(asked(Precision::F32)),
        PrecisionChoice::F16 => Ok(asked(Precision::F16)),
        PrecisionChoice::U8 => match first_not_u8() {
            None => Ok(asked(Precision::U8)),
            Some(x) => Err(format!(
                "u8 storage needs integral vectors in 0..=255 (found {x}); use f32 or f16"
            )),
        },
        PrecisionChoice::Auto => Ok(match first_not_u8() {
            None => Chosen {
                precision: Precision::U8,
                why: "auto: every vector is integral in 0..=255, which u8 holds exactly \
                      (--gpu-precision f32 to override)"
                    .into(),
            },
            Some(x) => Chosen {
                precision: Precision::F32,
                why: format!(
                    "auto: the vectors are not all integral in 0..=255 (found {x}), so u8 \
                     would not be exact (--gpu-precision f16 to halve the bytes)"
                ),
            },
        }),
    }
}

/// The index file as last scanned: path, shard, length and modification time.
type Scanned = (PathBuf, Option<ShardSpec>, u64, Option<SystemTime>);

/// Scans that served `choose` already: the backends of every device and the configuration
/// check ask about the same index, which a 10M index takes seconds to scan.
static SCANS: Mutex<Vec<(Scanned, Option<f32>)>> = Mutex::new(Vec::new());

/// [`cohort_ivf::bytes::first_not_u8`] of `vectors` (the index file `path`'s, or its
/// `shard`'s), remembered while the file's length and modification time stay the same.
pub fn first_not_u8_of(path: &Path, shard: Option<ShardSpec>, vectors: &[f32]) -> Option<f32> {
    let meta = std::fs::metadata(path).ok();
    let key: Scanned = (
        path.to_path_buf(),
        shard,
        meta.as_ref().map_or(0, |m| m.len()),
        meta.and_then(|m| m.modified().ok()),
    );
    let known = |scans: &Vec<(Scanned, Option<f32>)>| {
        scans
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, found)| *found)
    };
    if let Some(found) = known(&SCANS.lock().expect("scans lock")) {
        return found;
    }
    let found = cohort_ivf::bytes::first_not_u8(vectors);
    let mut scans = SCANS.lock().expect("scans lock");
    if known(&scans).is_none() {
        scans.push((key, found));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_u8_on_integral_data_and_f32_otherwise() {
        let integral = [0.0, 17.0, 255.0, 3.0];
        let scan = |v: &'static [f32]| move || cohort_ivf::bytes::first_not_u8(v);
        let c = choose(PrecisionChoice::Auto, scan(&[0.0, 17.0, 255.0])).unwrap();
        assert_eq!(c.precision, Precision::U8);
        assert!(
            c.why.starts_with("auto: every vector is integral"),
            "{}",
            c.why
        );
        assert_eq!(cohort_ivf::bytes::first_not_u8(&integral), None);
        for other in [&[1.0, 0.5][..], &[1.0, 256.0], &[-1.0], &[f32::NAN]] {
            let c = choose(PrecisionChoice::Auto, || {
                cohort_ivf::bytes::first_not_u8(other)
            })
            .unwrap();
            assert_eq!(c.precision, Precision::F32, "{other:?}");
            assert!(c.why.contains("not all integral"), "{}", c.why);
        }
    }

    /// A named precision is taken whatever the data (no scan asked for but u8's check);
    /// u8 on data that is not bytes keeps its refusal.
    #[test]
    fn a_named_precision_is_taken_and_u8_refuses_other_data() {
        let never = || -> Option<f32> { panic!("f32 and f16 need no scan") };
        for (choice, p) in [
            (PrecisionChoice::F32, Precision::F32),
            (PrecisionChoice::F16, Precision::F16),
        ] {
            let c = choose(choice, never).unwrap();
            assert_eq!(c.precision, p);
            assert!(c.why.contains("asked for"));
        }
        assert_eq!(
            choose(PrecisionChoice::U8, || None).unwrap().precision,
            Precision::U8
        );
        let e = choose(PrecisionChoice::U8, || Some(0.5)).unwrap_err();
        assert!(e.contains("u8 storage needs integral vectors"), "{e}");
    }

    #[test]
    fn auto_is_the_default_and_reads_back() {
        let s = super::super::config::KnnSettings::default();
        assert_eq!(s.precision, PrecisionChoice::Auto);
        for w in ["auto", "f32", "f16", "u8"] {
            assert_eq!(w.parse::<PrecisionChoice>().unwrap().to_string(), w);
        }
        assert!("bf16".parse::<PrecisionChoice>().is_err());
    }
}
