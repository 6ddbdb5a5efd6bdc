//! k-NN's own benchmarks, offered as `cohort-lab bench NAME` through its entry: the kernels alone
//! on one GPU (`gpu-kernels`: queries/s per plan, precision and cohort, against the copy
//! rate) and the index build on the CPU and the GPU (`index-build`: time, energy, recall).
//! Served and in-process benchmarks are the generic ones (`cohort-lab bench served`, `bench
//! engine`).

mod build;
mod kernels;

use cohort_service_api::tools::{args_command, parsed, Record, ServiceCommand};

pub const BENCHES: &[ServiceCommand] = &[
    ServiceCommand {
        name: "gpu-kernels",
        command: || {
            args_command::<kernels::GpuKernelBench>(
                "gpu-kernels",
                "k-NN kernels on one GPU: queries/s per plan, precision and cohort size, search bandwidth vs D2D copy",
            )
        },
        run: |m, record: Record| parsed(m, |a: &kernels::GpuKernelBench| kernels::run(a, record)),
    },
    ServiceCommand {
        name: "index-build",
        command: || {
            args_command::<build::BuildBench>(
                "index-build",
                "Index build (k-means + lists) on the CPU and the GPU: time, energy, recall",
            )
        },
        run: |m, record: Record| parsed(m, |a: &build::BuildBench| build::run(a, record)),
    },
];
