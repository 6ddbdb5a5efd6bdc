//! The collections' CUDA (`kernels/collection.cu`): every limit, opcode and column kind the
//! kernels and this crate share, defined once here and handed to the kernels as a generated
//! prelude; the filter program's instruction and column layouts (`Instr`, `ColDesc`); the
//! kernels' argument blocks, declared once with their grid rules.

use cohort_gpu::kernel_args;
use cohort_gpu::launch::{Dev, Grid, KernelDecl};
use cohort_gpu::{KernelSource, Prelude};
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

/// Threads per block of every collection kernel.
pub const BLOCK: usize = 256;
/// Candidate rows a scan block stages in shared memory at a time.
pub const TILE: usize = 1024;
/// Largest k the device answers (larger k: the CPU answers).
pub const MAX_K: usize = 128;
/// Largest dimension the device answers (a query is staged in shared memory).
pub const MAX_DIM: usize = 1024;
/// Most IVF lists (the collections' trainer makes at most 4096, `search::Trainer`).
pub const MAX_NLIST: usize = 4096;
/// Candidates one reduce block merges (8 bytes each in shared memory).
pub const MAX_CAND: usize = 4096;
/// Slots of one exact-plan scan item.
pub const SEGMENT: usize = 16_384;
/// An empty result position.
pub const NO_SLOT: u32 = u32::MAX;
/// A keyword column's "no value" (defined with the columns).
pub const NO_CODE: u32 = cohort_collections::columns::NO_CODE;

/// The filter program's opcodes (`program.rs` emits them, `eval_program` runs them).
pub mod op {
    pub const TRUE: u32 = 0;
    pub const FALSE: u32 = 1;
    pub const AND: u32 = 2;
    pub const OR: u32 = 3;
    pub const NOT: u32 = 4;
    pub const IN_CODE: u32 = 5;
    pub const IN_INT: u32 = 6;
    pub const IN_FLOAT: u32 = 7;
    pub const RANGE_INT: u32 = 8;
    pub const RANGE_FLOAT: u32 = 9;
}

/// Column kinds of `ColDesc`.
pub mod kind {
    pub const INT: u32 = 0;
    pub const FLOAT: u32 = 1;
    pub const KEYWORD: u32 = 2;
}

/// One instruction (`Instr` in the kernels; 48 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Instr {
    pub op: u32,
    pub col: u32,
    /// RANGE: which of `v` are bounds (1 gt, 2 gte, 4 lt, 8 lte).
    pub flags: u32,
    /// IN: how many values, from table index `v[0]`.
    pub n: u32,
    pub v: [u64; 4],
}
// SAFETY: plain numbers, laid out as the CUDA struct (the kernel check compiles both);
// all-zero bits are a valid value (opcode TRUE).
unsafe impl DeviceRepr for Instr {}
unsafe impl ValidAsZeroBits for Instr {}

/// A column as the kernels see it (`ColDesc`; 24 bytes): device addresses.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ColDesc {
    pub data: u64,
    pub has: u64,
    pub kind: u32,
    pub pad: u32,
}
// SAFETY: plain numbers (device addresses), laid out as the CUDA struct; zero is valid.
unsafe impl DeviceRepr for ColDesc {}
unsafe impl ValidAsZeroBits for ColDesc {}

pub fn prelude() -> Prelude {
    let mut p = Prelude::new("crates/collections-gpu/src/kernels.rs")
        .int("COLL_BLOCK", BLOCK)
        .int("COLL_TILE", TILE)
        .int("COLL_MAX_K", MAX_K)
        .int("COLL_MAX_DIM", MAX_DIM)
        .int("COLL_MAX_NLIST", MAX_NLIST)
        .int("COLL_MAX_CAND", MAX_CAND)
        .int("OP_TRUE", op::TRUE as usize)
        .int("OP_FALSE", op::FALSE as usize)
        .int("OP_AND", op::AND as usize)
        .int("OP_OR", op::OR as usize)
        .int("OP_NOT", op::NOT as usize)
        .int("OP_IN_CODE", op::IN_CODE as usize)
        .int("OP_IN_INT", op::IN_INT as usize)
        .int("OP_IN_FLOAT", op::IN_FLOAT as usize)
        .int("OP_RANGE_INT", op::RANGE_INT as usize)
        .int("OP_RANGE_FLOAT", op::RANGE_FLOAT as usize)
        .int("KIND_INT", kind::INT as usize)
        .int("KIND_FLOAT", kind::FLOAT as usize)
        .int("KIND_KEYWORD", kind::KEYWORD as usize)
        .int("INSTR_BYTES", std::mem::size_of::<Instr>())
        .int("COLDESC_BYTES", std::mem::size_of::<ColDesc>());
    p.define("NO_SLOT", format!("{NO_SLOT:#x}u"));
    p.define("NO_CODE", format!("{NO_CODE:#x}u"));
    p
}

kernel_args! {
    /// The filter over every slot, a warp per 32 slots.
    pub struct CollFilterArgs {
        prog: Dev<Instr>,
        cols: Dev<ColDesc>,
        table: Dev<u64>,
        live: Dev<u32>,
        slots: u64,
        len: i32,
        pad: i32,
        mask: Dev<u32>,
        count: Dev<u32>,
    }
}

kernel_args! {
    /// The nprobe nearest lists, a block per query.
    pub struct CollCoarseArgs {
        queries: Dev<f32>,
        centroids: Dev<f32>,
        nlist: i32,
        dim: i32,
        nprobe: i32,
        ip: i32,
        probes: Dev<u32>,
    }
}

kernel_args! {
    /// The k best of one probed list or one segment, a block per item.
    pub struct CollScanArgs {
        queries: Dev<f32>,
        vectors: Dev<f32>,
        inv_norms: Dev<f32>,
        mask: Dev<u32>,
        list_slots: Dev<u32>,
        list_off: Dev<u32>,
        list_len: Dev<u32>,
        probes: Dev<u32>,
        slots: u64,
        per_query: i32,
        seg: i32,
        dim: i32,
        k: i32,
        metric: i32,
        pad: i32,
        out_slots: Dev<u32>,
        out_dist: Dev<f32>,
    }
}

kernel_args! {
    /// The k best of a group of a query's k-lists, a block per (query, group).
    pub struct CollReduceArgs {
        in_slots: Dev<u32>,
        in_dist: Dev<f32>,
        per_query: i32,
        group: i32,
        k: i32,
        groups: i32,
        out_slots: Dev<u32>,
        out_dist: Dev<f32>,
    }
}

kernel_args! {
    /// dst[index[i]] = value[i].
    pub struct CollScatterArgs {
        dst: Dev<u32>,
        index: Dev<u32>,
        value: Dev<u32>,
        n: u64,
    }
}

const B: u32 = BLOCK as u32;
pub const FILTER: KernelDecl<CollFilterArgs> =
    KernelDecl::new("coll_filter", B, Grid::ThreadPerItem { cap: 65_535 });
pub const COARSE: KernelDecl<CollCoarseArgs> =
    KernelDecl::new("coll_coarse", B, Grid::BlockPerItem);
pub const SCAN: KernelDecl<CollScanArgs> = KernelDecl::new("coll_scan", B, Grid::BlockPerItem);
pub const REDUCE: KernelDecl<CollReduceArgs> =
    KernelDecl::new("coll_reduce", B, Grid::BlockPerItem);
pub const SCATTER: KernelDecl<CollScatterArgs> =
    KernelDecl::new("coll_scatter", B, Grid::ThreadPerItem { cap: 4096 });

/// The one compilation unit, `collection.cu`.
pub fn source() -> &'static KernelSource {
    static SOURCE: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        KernelSource::assemble_typed(
            "collection.cu",
            &prelude(),
            &[("collection.cu", include_str!("kernels/collection.cu"))],
            vec![
                FILTER.checked(),
                COARSE.checked(),
                SCAN.checked(),
                REDUCE.checked(),
                SCATTER.checked(),
            ],
        )
    })
}
