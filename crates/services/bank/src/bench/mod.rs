//! The bank's own benchmarks, offered as `cohort-lab bench NAME` through the catalog: in-process
//! on the CPU (`bank-cpu`), the parser alone on a GPU (`bank-parse-gpu`), the whole bank on a
//! GPU (`bank-gpu`), and the figures from their results (`bank-plot`). Served benchmarks are
//! the generic ones (`cohort-lab bench served --services bank`).

mod cpu;
mod gpu;
mod plot;

use cohort_service_api::tools::{args_command as command, parsed, Record, ServiceCommand};

pub const BENCHES: &[ServiceCommand] = &[
    ServiceCommand {
        name: "bank-cpu",
        command: || {
            command::<cpu::BankBench>(
                "bank-cpu",
                "The bank on the CPU in-process: requests/s per worker count (Rhythm's CPU baseline)",
            )
        },
        run: |m, record: Record| parsed(m, |a: &cpu::BankBench| cpu::run(a, record)),
    },
    ServiceCommand {
        name: "bank-parse-gpu",
        command: || {
            command::<gpu::BankParseBench>(
                "bank-parse-gpu",
                "The bank's HTTP parser alone on one GPU: requests/s per cohort size and slot layout",
            )
        },
        run: |m, record: Record| parsed(m, |a: &gpu::BankParseBench| gpu::run(a, record)),
    },
    ServiceCommand {
        name: "bank-gpu",
        command: || {
            command::<gpu::BankGpuBench>(
                "bank-gpu",
                "The whole bank on one GPU in-process: per type and cohort size, pages in GPU memory or copied to the host, the PCIe bound, energy",
            )
        },
        run: |m, record: Record| parsed(m, |a: &gpu::BankGpuBench| gpu::run_all(a, record)),
    },
    ServiceCommand {
        name: "bank-plot",
        command: || {
            command::<plot::BankPlotArgs>(
                "bank-plot",
                "The bank's figures (cohort sweep, per type, streams, Table 3) from recorded results",
            )
        },
        run: |m, _record: Record| parsed(m, plot::run),
    },
];
