//! How the tiled plan filters (the CUDA cores or the tensor cores) and how its search takes
//! its work items (a block or a warp per item): chosen per device and by environment.

use crate::kernels;
use cohort_gpu::{DeviceInfo, GpuError};

/// How the tiled plan scores query x centroid distances before it picks the probes. Both
/// give the probes of the exact filter (the CPU twin's, up to swaps of equal distances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterKind {
    /// f32 FMAs on the CUDA cores (`knn_filter_tiled`).
    Cores,
    /// A 3xTF32 matrix product on the tensor cores (`knn_filter_tc`), then the exact distances
    /// of each query's best few cells (`knn_select_rerank_filter_wide`, or `knn_select_filter`
    /// then `knn_rerank_filter` for cohorts that fill the SMs), for passes of at least
    /// `min_queries` queries (the CUDA cores below).
    TensorCores { min_queries: usize },
}

impl FilterKind {
    /// Passes from which the tensor cores filter by default. With the filter of 8554967 on
    /// the H100 (1M x 128, nlist 4096, nprobe 16, u8, the whole tiled plan): a cohort of 256
    /// 1.59 M q/s against 1.51 M on the CUDA cores, 512 2.68 M against 2.29 M, but 64
    /// 0.53 M against 0.61 M (the re-rank's extra launch outweighed a small product):
    /// lab/results/knn-small-cohort-h100/. Measured again with the small cohorts' select
    /// and re-rank one launch (76573a2, H200): from 64 queries the tensor cores gave 0.749
    /// against 0.835 M q/s at 64 and 1.304 against 1.345-1.372 M at 128, so the bound holds
    /// (lab/results/knn-rerank-split/).
    pub const TC_MIN_QUERIES: usize = 256;

    /// The tensor cores where the device has TF32 ones (sm_80 on), unless
    /// `COHORT_KNN_FILTER=cores` asks for the CUDA-core filter (to compare the two);
    /// `COHORT_KNN_FILTER=tensor` (or unset) is the default, and `tensor:N` moves where the
    /// tensor cores start to passes of N queries (to measure [`Self::TC_MIN_QUERIES`]). Any
    /// other value is an error.
    pub fn for_device(dev: &DeviceInfo) -> Result<FilterKind, GpuError> {
        let asked = std::env::var("COHORT_KNN_FILTER").ok();
        Self::choose(dev.compute_capability.0 >= 8, asked.as_deref())
    }

    fn choose(tf32: bool, asked: Option<&str>) -> Result<FilterKind, GpuError> {
        let refused = |other: &str| {
            GpuError::Invalid(format!(
                "COHORT_KNN_FILTER={other:?}: expected tensor (the default), tensor:N (the \
                 tensor cores from N queries) or cores"
            ))
        };
        let min_queries = match asked {
            None | Some("tensor") => Self::TC_MIN_QUERIES,
            Some("cores") => return Ok(FilterKind::Cores),
            Some(other) => match other.strip_prefix("tensor:").map(str::parse::<usize>) {
                Some(Ok(n)) => n,
                _ => return Err(refused(other)),
            },
        };
        Ok(if tf32 {
            FilterKind::TensorCores { min_queries }
        } else {
            FilterKind::Cores
        })
    }

    /// Cells the tensor-core filter keeps per query for the exact re-rank: nprobe and a
    /// margin for cells the rounding moved (3xTF32 is within a few f32 ulps; the margin is
    /// many places), within the select's limit and the cell count. None: no room for a
    /// margin, so the CUDA-core filter runs.
    pub fn rerank_width(nprobe: usize, nlist: usize) -> Option<usize> {
        let width = (nprobe + (nprobe / 2).max(8))
            .min(nlist)
            .min(kernels::SEL_MAX);
        (width > nprobe || width == nlist).then_some(width)
    }
}

/// How the tiled plan's search takes its work items (a cell's rows for up to 32 queries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchKind {
    /// A block of 8 warps per item (`knn_search_tiled*`): every storage and dimension.
    Block,
    /// A warp per item (`knn_search_warp_u8*`), with `rows` (16 or 32) rows in flight a
    /// step, where the rows are u8 and the dimension a multiple of 32 up to 256; the block
    /// kernel elsewhere. Passes of at most `pairs_up_to` queries whose filter runs on the CUDA
    /// cores skip the grouping by cell: a warp a run of one query's candidate row
    /// (`knn_search_pairs_u8*`).
    Warp { rows: usize, pairs_up_to: usize },
}

impl SearchKind {
    /// Passes the pair scan takes by default (at most `kernels::PAIR_MAX_QUERIES`): see
    /// `tiled.rs` (the pair scan).
    pub const PAIRS_UP_TO: usize = 128;

    /// `COHORT_KNN_SEARCH=block | warp | warp32` (unset: warp), the warp kinds optionally
    /// with `:N`, the pair scan up to passes of N queries (0: never; unset:
    /// [`Self::PAIRS_UP_TO`]); anything else is an error.
    pub fn from_env() -> Result<SearchKind, GpuError> {
        Self::parse(std::env::var("COHORT_KNN_SEARCH").ok().as_deref())
    }

    fn parse(asked: Option<&str>) -> Result<SearchKind, GpuError> {
        let refused = |other: &str| {
            GpuError::Invalid(format!(
                "COHORT_KNN_SEARCH={other:?}: expected warp (the default), warp32 or block, the \
                 warp kinds optionally with :N (the pair scan up to N queries, N <= {})",
                kernels::PAIR_MAX_QUERIES
            ))
        };
        let asked = asked.unwrap_or("warp");
        if asked == "block" {
            return Ok(SearchKind::Block);
        }
        let (kind, pairs) = asked.split_once(':').unwrap_or((asked, ""));
        let rows = match kind {
            "warp" => 16,
            "warp32" => 32,
            _ => return Err(refused(asked)),
        };
        let pairs_up_to = match pairs {
            "" if !asked.contains(':') => Self::PAIRS_UP_TO,
            n => n
                .parse::<usize>()
                .ok()
                .filter(|&n| n <= kernels::PAIR_MAX_QUERIES)
                .ok_or_else(|| refused(asked))?,
        };
        Ok(SearchKind::Warp { rows, pairs_up_to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_is_the_tensor_cores_where_they_exist_and_a_wrong_choice_is_refused() {
        let tc = FilterKind::TensorCores {
            min_queries: FilterKind::TC_MIN_QUERIES,
        };
        assert_eq!(FilterKind::choose(true, None).unwrap(), tc);
        let warp = |rows, pairs_up_to| SearchKind::Warp { rows, pairs_up_to };
        let pairs = SearchKind::PAIRS_UP_TO;
        assert_eq!(SearchKind::parse(None).unwrap(), warp(16, pairs));
        assert_eq!(SearchKind::parse(Some("warp")).unwrap(), warp(16, pairs));
        assert_eq!(SearchKind::parse(Some("warp32")).unwrap(), warp(32, pairs));
        assert_eq!(SearchKind::parse(Some("warp:0")).unwrap(), warp(16, 0));
        assert_eq!(SearchKind::parse(Some("warp32:64")).unwrap(), warp(32, 64));
        assert_eq!(SearchKind::parse(Some("block")).unwrap(), SearchKind::Block);
        for bad in [
            "", "Warp", "warp:", "warp:-1", "warp:x", "warp:129", "block:8", "blocks",
        ] {
            assert!(SearchKind::parse(Some(bad)).is_err(), "{bad:?} accepted");
        }
        assert_eq!(FilterKind::choose(true, Some("tensor")).unwrap(), tc);
        assert_eq!(
            FilterKind::choose(true, Some("cores")).unwrap(),
            FilterKind::Cores
        );
        assert_eq!(FilterKind::choose(false, None).unwrap(), FilterKind::Cores);
        assert_eq!(
            FilterKind::choose(true, Some("tensor:64")).unwrap(),
            FilterKind::TensorCores { min_queries: 64 }
        );
        assert_eq!(
            FilterKind::choose(false, Some("tensor:64")).unwrap(),
            FilterKind::Cores
        );
        for wrong in ["tc", "tensor:", "tensor:-1", "tensor:x", "tensor: 8"] {
            let e = FilterKind::choose(true, Some(wrong))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("COHORT_KNN_FILTER") && e.contains("cores"),
                "{wrong}: {e}"
            );
        }
    }
}
