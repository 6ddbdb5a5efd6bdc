//! k-NN: vector files, exact search, k-means, and the IVF-Flat index with its three query
//! stages (filter -> search -> reduce). The stages are plain functions over typed inputs;
//! the GPU engines implement the same stages as kernels and are tested against these.

pub mod assign;
pub mod atomic_file;
pub mod bytes;
pub mod exact;
pub mod hugebuf;
pub mod ivf;
pub mod kmeans;
pub mod metric;
pub mod rowfile;
pub mod synth;
pub mod topk;
pub mod vecfile;

/// Largest magnitude of a query element: beyond it a squared distance over 1024 dimensions
/// could overflow f32 and rank neighbours arbitrarily. The one definition: the k-NN service
/// validates queries against it and the GPU kernels receive it as a `#define`.
pub const MAX_ABS_ELEMENT: f32 = 1e16;

/// Bytes of a k-NN query message before its vector (k, nprobe, element type, reserved, dim:
/// the layout of the knn service's codec, crates/services/knn). The one definition: the
/// service's codec and the persistent GPU kernels (`KNN_HEAD`) read it.
pub const QUERY_HEAD: usize = 12;

pub use ivf::{IvfIndex, SearchParams};
pub use metric::Metric;
pub use topk::{Neighbor, TopK};
pub use vecfile::Vectors;
