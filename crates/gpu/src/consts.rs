//! Every constant the k-NN kernels and the host code share, defined once, here. The CUDA side
//! receives them as `#define`s prepended to each kernel file ([`cuda_prelude`]), so a kernel
//! file never states its own copy of a limit the host relies on.

/// Threads per block of the per-pair kernels and the filter.
pub const BLOCK: usize = 256;
/// Largest k a kernel returns.
pub const MAX_K: usize = 128;
/// Largest vector dimension (the per-pair kernels stage a query in shared memory).
pub const MAX_DIM: usize = 1024;
/// The id of an empty result position (fewer than k candidates).
pub const NO_ID: u32 = u32::MAX;
/// Tiled plan: queries per work item.
pub const QB: usize = 32;
/// Tiled plan: rows per shared-memory tile.
pub const RT: usize = 64;
/// Tiled plan: the largest k or nprobe a radix select returns (so the largest nprobe).
pub const SEL_MAX: usize = 256;
/// k-means assignment: rows per block and centroids per shared-memory tile (a multiple of 16:
/// the block's 16 x 16 threads each own a (KM_TILE/16)^2 register tile).
pub const KM_TILE: usize = 64;
/// The per-pair reduce (and the persistent engine's reducer slots) hold nprobe * k
/// candidates, 8 bytes each, in shared memory.
pub const GPU_MAX_CANDIDATES: usize = 6144;
/// Largest magnitude of a k-NN query element (defined with the k-NN library).
pub const KNN_MAX_ABS_ELEMENT: f32 = cohort_knn::MAX_ABS_ELEMENT;
/// Bytes of a k-NN query message before its vector (defined with the k-NN library).
pub const KNN_HEAD: usize = cohort_knn::QUERY_HEAD;

/// NUMA calibration kernels: threads per CTA, floats of each array a CTA covers (32 lines of
/// 128 B: the simulator's CTA), stencil tile rows and grid width (the simulator's
/// `stencil::TILE_ROWS`, `ROW_LINES`; the cli asserts they agree).
pub const CALIB_THREADS: usize = 256;
pub const CALIB_CHUNK_FLOATS: usize = 1024;
pub const CALIB_TILE_ROWS: usize = 8;
pub const CALIB_ROW_FLOATS: usize = 4096;

/// The `#define` block every kernel file is compiled with.
pub fn cuda_prelude() -> String {
    // Plain int literals (kernels mix them with int arithmetic: min(RT, n) must stay int);
    // NO_ID is the one unsigned.
    let defs: [(&str, usize); 13] = [
        ("CALIB_THREADS", CALIB_THREADS),
        ("CALIB_CHUNK_FLOATS", CALIB_CHUNK_FLOATS),
        ("CALIB_TILE_ROWS", CALIB_TILE_ROWS),
        ("CALIB_ROW_FLOATS", CALIB_ROW_FLOATS),
        ("KM_TILE", KM_TILE),
        ("BLOCK", BLOCK),
        ("MAX_K", MAX_K),
        ("MAX_DIM", MAX_DIM),
        ("QB", QB),
        ("RT", RT),
        ("SEL_MAX", SEL_MAX),
        ("GPU_MAX_CANDIDATES", GPU_MAX_CANDIDATES),
        ("KNN_HEAD", KNN_HEAD),
    ];
    let mut s = String::from(
        "// Generated from crates/gpu/src/consts.rs: the limits host and kernels share.\n",
    );
    for (name, v) in defs {
        assert!(v <= i32::MAX as usize);
        s.push_str(&format!("#define {name} {v}\n"));
    }
    s.push_str(&format!("#define NO_ID {NO_ID:#x}u\n"));
    s.push_str(&format!(
        "#define KNN_MAX_ABS_ELEMENT {:e}f\n",
        KNN_MAX_ABS_ELEMENT
    ));
    // The wire's error codes, for answers the GPU writes itself (persistent engine).
    for c in cohort_proto::ErrorCode::ALL {
        let name = format!("{c:?}");
        let mut snake = String::new();
        for (i, ch) in name.chars().enumerate() {
            if ch.is_uppercase() && i > 0 {
                snake.push('_');
            }
            snake.push(ch.to_ascii_uppercase());
        }
        s.push_str(&format!("#define P_ERR_{snake} {}\n", c as u16));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No kernel file of the workspace (`crates/*/kernels`) defines a name the generated
    /// preludes define (this file's and the persistent runtime's): a limit shared across the
    /// language boundary has its one definition in Rust.
    #[test]
    fn no_kernel_file_restates_a_shared_constant() {
        let generated: Vec<String> = [cuda_prelude(), crate::persistent::rt::cuda_defines()]
            .iter()
            .flat_map(|p| {
                p.lines()
                    .filter_map(|l| l.strip_prefix("#define "))
                    .filter_map(|l| l.split_whitespace().next())
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(generated.iter().any(|n| n == "KNN_HEAD"));
        assert!(generated.iter().any(|n| n == "P_MAX_BATCH"));
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = 0;
        for dir in std::fs::read_dir(&crates).unwrap() {
            let kernels = dir.unwrap().path().join("kernels");
            let Ok(entries) = std::fs::read_dir(&kernels) else {
                continue;
            };
            for e in entries {
                let path = e.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                files += 1;
                for line in text.lines() {
                    let Some(rest) = line.trim_start().strip_prefix("#define ") else {
                        continue;
                    };
                    let name = rest.split(['(', ' ']).next().unwrap_or("");
                    assert!(
                        !generated.iter().any(|g| g == name),
                        "{} defines its own {name}: {line}",
                        path.display()
                    );
                }
            }
        }
        assert!(files >= 10, "kernel files found: {files}");
    }
}
