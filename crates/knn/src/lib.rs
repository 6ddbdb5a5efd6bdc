//! k-NN: vector files, exact search, k-means, and the IVF-Flat index with its three query
//! stages (filter -> search -> reduce). The stages are plain functions over typed inputs;
//! the GPU engines implement the same stages as kernels and are tested against these.

pub mod assign;
pub mod atomic_file;
pub mod exact;
pub mod hugebuf;
pub mod ivf;
pub mod kmeans;
pub mod metric;
pub mod synth;
pub mod topk;
pub mod vecfile;

pub use ivf::{IvfIndex, SearchParams};
pub use metric::Metric;
pub use topk::{Neighbor, TopK};
pub use vecfile::Vectors;
