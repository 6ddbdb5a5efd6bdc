//! The bank's kernels (`kernels/*.cu`), declared once: each kernel's name, argument block and
//! grid rule, and the compilation unit they form with the generated prelude (`cuda.rs`). The
//! kernel check compiles the unit with the blocks' Rust layouts asserted on the CUDA side.

use cohort_gpu::kernel_args;
use cohort_gpu::launch::{ArgsLayout, Dev, Grid, KernelDecl};
use cohort_gpu::KernelSource;

/// Threads per block of the thread-per-request kernels.
const PER_REQUEST: u32 = 128;

kernel_args! {
    /// Requests packed end to end, spread into their slots.
    pub struct BankUnpackArgs {
        n: u32,
        packed: Dev<u8>,
        offs: Dev<u32>,
        lens: Dev<u32>,
        transposed: i32,
        reqs: Dev<u8>,
    }
}

kernel_args! {
    /// Responses out of their slots into rows (transposed back if need be).
    pub struct BankGatherArgs {
        n: u32,
        out: Dev<u32>,
        transposed: i32,
        words: u32,
        packed: Dev<u32>,
    }
}

kernel_args! {
    /// Every request parsed into fields (structure of arrays).
    pub struct BankParseArgs {
        reqs: Dev<u8>,
        lens: Dev<u32>,
        n: u32,
        transposed: i32,
        refusal: Dev<u8>,
        kind: Dev<u8>,
        has_cookie: Dev<u8>,
        cookie_user: Dev<u32>,
        cookie_token: Dev<u64>,
        nums: Dev<u64>,
        texts: Dev<u8>,
        /// Threads per request: a power of two up to 32 (see [`parse_lanes`]).
        lanes: u32,
    }
}

kernel_args! {
    /// The user whose records each request reads, found in the record table if any.
    pub struct BankFetchArgs {
        n: u32,
        refusal: Dev<u8>,
        kind: Dev<u8>,
        has_cookie: Dev<u8>,
        cookie_user: Dev<u32>,
        nums: Dev<u64>,
        users: u32,
        table_keys: Dev<u32>,
        table_vals: Dev<u32>,
        table_cap: u64,
        want: Dev<u32>,
        rec_at: Dev<u32>,
    }
}

kernel_args! {
    /// Logins, logouts and session checks against the device's session table.
    pub struct BankSessionsArgs {
        n: u32,
        refusal_in: Dev<u8>,
        kind: Dev<u8>,
        has_cookie: Dev<u8>,
        cookie_user: Dev<u32>,
        cookie_token: Dev<u64>,
        nums: Dev<u64>,
        recs: Dev<u8>,
        rec_at: Dev<u32>,
        users: u32,
        secret: u64,
        keys: Dev<u32>,
        tokens: Dev<u64>,
        cap: u64,
        logins: Dev<u32>,
        live: Dev<u32>,
        max_live: u32,
        status: Dev<u8>,
        user_out: Dev<u32>,
        change: Dev<u8>,
        token_out: Dev<u64>,
    }
}

kernel_args! {
    /// Each response page into its slot.
    pub struct BankPagesArgs {
        n: u32,
        status: Dev<u8>,
        kind: Dev<u8>,
        user: Dev<u32>,
        change: Dev<u8>,
        token: Dev<u64>,
        nums: Dev<u64>,
        texts: Dev<u8>,
        recs: Dev<u8>,
        rec_at: Dev<u32>,
        out: Dev<u8>,
        lens: Dev<u32>,
        transposed: i32,
        pad: Dev<u32>,
        /// Threads per page: a power of two up to 32 (see [`page_lanes`]).
        lanes: u32,
    }
}

kernel_args! {
    /// The padding words of each response.
    pub struct BankPadArgs {
        n: u32,
        pad: Dev<u32>,
        out: Dev<u8>,
        transposed: i32,
        lanes: u32,
    }
}

/// Grid (word groups of 128, requests).
pub const UNPACK: KernelDecl<BankUnpackArgs> =
    KernelDecl::new("bank_unpack", PER_REQUEST, Grid::Sized);
/// Block (32, 8) moves a tile of 32 responses x 32 words; grid (word tiles, response tiles).
pub const GATHER: KernelDecl<BankGatherArgs> =
    KernelDecl::new("bank_gather", 32, Grid::Sized).with_block_y(8);
/// A group of `lanes` threads per request (launched as `n x lanes` items).
pub const PARSE: KernelDecl<BankParseArgs> =
    KernelDecl::new("bank_parse", PER_REQUEST, Grid::ThreadPerItem { cap: 0 });
pub const FETCH: KernelDecl<BankFetchArgs> =
    KernelDecl::new("bank_fetch", PER_REQUEST, Grid::ThreadPerItem { cap: 0 });
pub const SESSIONS: KernelDecl<BankSessionsArgs> =
    KernelDecl::new("bank_sessions", PER_REQUEST, Grid::ThreadPerItem { cap: 0 });
/// A group of `lanes` threads per page (launched as `n x lanes` items).
pub const PAGES: KernelDecl<BankPagesArgs> =
    KernelDecl::new("bank_pages", PER_REQUEST, Grid::ThreadPerItem { cap: 0 });

/// Threads that write one page of a cohort of `n`: 32 up to cohorts of 1 024 (a page takes its
/// longest thread's time, and a small cohort leaves the GPU idle), 8 above. Measured on an H200
/// (the Table 2 mix, lab/results/bank-small-cohorts): since the literals go a word at a time,
/// shared by a page's group, one thread a page at 8 192 gave 8.6 M pages/s (12.9 transposed)
/// where 8 a page gave 12.2 (20.6) at 4 096; one a page led from 8 192 on while every byte was
/// one thread's (lab/results/bank-pages-groups-h100).
pub fn page_lanes(n: usize) -> u32 {
    match n {
        0..=1024 => 32,
        _ => 8,
    }
}

/// Threads that parse one request of a cohort of `n`: the pages' rule (a small cohort's
/// latency is its slowest request's, and a group's ballots cost issue slots that a large
/// cohort needs); not measured apart from the pages'.
pub fn parse_lanes(n: usize) -> u32 {
    page_lanes(n)
}

/// A fixed threads-per-page value checked: a power of two up to 32, so a page's group never
/// straddles a warp (its threads exchange through warp shuffles). `--page-lanes` parses with
/// it, so a bad value is refused before any GPU is touched.
pub fn check_page_lanes(lanes: u32) -> Result<u32, String> {
    if lanes.is_power_of_two() && lanes <= 32 {
        Ok(lanes)
    } else {
        Err(format!(
            "threads per page must be a power of two up to 32 (1, 2, 4, 8, 16 or 32), not {lanes}"
        ))
    }
}

// A page's group must not straddle a warp (its threads exchange through warp shuffles).
const _: () = assert!(PAGES.block.is_multiple_of(32));
/// A thread per (response, lane): 32 lanes a response row-major, 8 transposed.
pub const PAD: KernelDecl<BankPadArgs> =
    KernelDecl::new("bank_pad", 256, Grid::ThreadPerItem { cap: 0 });

fn checked() -> Vec<(&'static str, ArgsLayout)> {
    vec![
        UNPACK.checked(),
        GATHER.checked(),
        PARSE.checked(),
        FETCH.checked(),
        SESSIONS.checked(),
        PAGES.checked(),
        PAD.checked(),
    ]
}

/// The bank's compilation unit: the generated prelude, the parser, sessions and pages, and
/// the packing kernels.
pub fn source() -> &'static KernelSource {
    static SRC: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    SRC.get_or_init(|| {
        KernelSource::assemble_typed(
            "bank.cu",
            &super::cuda::prelude(),
            &[
                ("bank_parse.cu", include_str!("kernels/bank_parse.cu")),
                ("bank_records.cuh", include_str!("kernels/bank_records.cuh")),
                ("bank_writer.cuh", include_str!("kernels/bank_writer.cuh")),
                ("bank_page.cuh", include_str!("kernels/bank_page.cuh")),
                ("bank_serve.cu", include_str!("kernels/bank_serve.cu")),
                ("bank_io.cu", include_str!("kernels/bank_io.cu")),
            ],
            checked(),
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn fixed_page_lanes_are_powers_of_two_up_to_a_warp() {
        use super::check_page_lanes;
        for ok in [1, 2, 4, 8, 16, 32] {
            assert_eq!(check_page_lanes(ok), Ok(ok));
        }
        for bad in [0, 3, 6, 12, 33, 64, u32::MAX] {
            let e = check_page_lanes(bad).unwrap_err();
            assert!(e.contains(&bad.to_string()), "{e}");
        }
    }

    #[test]
    fn page_lanes_are_powers_of_two_that_shrink_with_the_cohort() {
        use super::page_lanes;
        assert_eq!(page_lanes(1), 32);
        assert_eq!(page_lanes(1024), 32);
        assert_eq!(page_lanes(4096), 8);
        assert_eq!(page_lanes(8192), 8);
        for n in 1..20_000 {
            let l = page_lanes(n);
            assert!(l.is_power_of_two() && l <= 32 && l >= page_lanes(n + 1));
        }
    }
}
