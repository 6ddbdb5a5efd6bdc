//! The IVF-Flat index of `cohort_ivf` on a GPU, for the k-NN service's backends, benchmarks
//! and tools: [`gpu_ivf::GpuIvf`] (the index uploaded whole or as a shard, searched by the
//! tiled or the per-pair plan, each answering as the CPU twins of `cohort_ivf::ivf::stages`),
//! the shard reducer, and [`gpu_kmeans`] (the k-means build's assignment on the GPU). The CUDA
//! files and the limits they share with this code are in [`kernels`]. Knows no engine and no
//! request format.

pub mod gpu_ivf;
pub mod gpu_kmeans;
pub mod kernels;
