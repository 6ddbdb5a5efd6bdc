//! What requests to send and how to check their answers: the trait, defined with the services
//! (each service's folder implements it in its `load.rs`).

pub use cohort_services::workload::Workload;
