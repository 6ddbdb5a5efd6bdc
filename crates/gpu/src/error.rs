use thiserror::Error;

#[derive(Debug, Error)]
pub enum GpuError {
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("NVRTC is not available: {0}")]
    NoNvrtc(String),
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("kernel compilation failed for {name}: {log}")]
    Compile { name: String, log: String },
    #[error("{0}")]
    Invalid(String),
    #[error("kernel cache: {0}")]
    Cache(#[from] std::io::Error),
}
