//! The GPU runtime alone (no service): its device code compiles through NVRTC, its argument
//! block and slot are laid out as the host mirrors them, and probing without a driver is an
//! error, not a panic. GPU checks print SKIPPED with the reason where no GPU exists.

use cohort_gpu::launch::{Dev, Grid, KernelDecl};
use cohort_gpu::persistent::{persistent_source, StageKernel};
use cohort_gpu::{compile_cached, probe, report_skip, KernelSource, Prelude};

/// The runtime with the smallest service there is: an argument block and no stage.
fn runtime_alone() -> &'static KernelSource {
    persistent_source(
        "runtime.cu",
        &Prelude::new("crates/gpu/tests/gpu.rs"),
        &[],
        &[("svc.cu", concat!(
            "struct SvcArgs { unsigned long long f[16]; };\n",
            "__device__ bool service_accept(const PRt&, const SvcArgs&, unsigned int) { return false; }\n"
        ))],
        Vec::new(),
    )
}

cohort_gpu::kernel_args! {
    struct ProbeArgs { a: Dev<f32>, n: i32, b: Dev<u32> }
}

/// A typed unit compiles while its CUDA argument block is laid out as the Rust one, and stops
/// compiling, naming the field, once a field moves on one side only.
#[test]
fn an_argument_block_laid_out_otherwise_in_cuda_does_not_compile() {
    if !cohort_gpu::nvrtc_available() {
        assert!(std::env::var_os("COHORT_REQUIRE_NVRTC").is_none());
        report_skip("argument block layout check", "NVRTC is not installed");
        return;
    }
    let decl = KernelDecl::<ProbeArgs>::new("probe", 32, Grid::BlockPerItem);
    let unit = |name: &'static str, fields: &str| {
        let text = format!(
            "struct ProbeArgs {{ {fields} }};\nextern \"C\" __global__ void probe(const ProbeArgs p) {{ if (p.n) p.b[0] = (unsigned)p.a[0]; }}\n"
        );
        KernelSource::assemble_typed(
            name,
            &Prelude::new("crates/gpu/tests/gpu.rs"),
            &[("probe.cu", Box::leak(text.into_boxed_str()))],
            vec![decl.checked()],
        )
    };
    let same = unit("probe_same.cu", "const float* a; int n; unsigned* b;");
    compile_cached(same, "sm_90").expect("the layouts agree");
    let moved = unit("probe_moved.cu", "const float* a; unsigned* b; int n;");
    let err = compile_cached(moved, "sm_90").unwrap_err().to_string();
    assert!(err.contains("ProbeArgs.n: offset differs"), "{err}");
    let narrow = unit("probe_narrow.cu", "const float* a; short n; unsigned* b;");
    let err = compile_cached(narrow, "sm_90").unwrap_err().to_string();
    assert!(err.contains("ProbeArgs.n: size differs"), "{err}");
}

cohort_gpu::svc_args! {
    struct ProbeSvcArgs { queries, k, out }
}

/// A persistent service's block is held to its Rust declaration the same way: a stage unit
/// whose `SvcArgs` lists its fields in another order does not compile, naming the field.
#[test]
fn a_persistent_block_laid_out_otherwise_in_cuda_does_not_compile() {
    if !cohort_gpu::nvrtc_available() {
        assert!(std::env::var_os("COHORT_REQUIRE_NVRTC").is_none());
        report_skip("persistent block layout check", "NVRTC is not installed");
        return;
    }
    const STAGE: StageKernel<ProbeSvcArgs> = StageKernel::new("probe_stage");
    let unit = |name: &'static str, fields: &str| {
        let text = format!(
            "struct SvcArgs {{ {fields} }};\n\
             __device__ bool service_accept(const PRt&, const SvcArgs&, unsigned int) {{ return false; }}\n\
             extern \"C\" __global__ void probe_stage(PRt rt, SvcArgs a) {{ if (a.k) ((unsigned long long*)a.out)[0] = a.queries; }}\n"
        );
        persistent_source(
            name,
            &Prelude::new("crates/gpu/tests/gpu.rs"),
            &[],
            &[("svc.cu", Box::leak(text.into_boxed_str()))],
            vec![STAGE.checked()],
        )
    };
    let same = unit(
        "svc_same.cu",
        "unsigned long long queries; unsigned long long k; unsigned long long out;",
    );
    compile_cached(same, "sm_90").expect("the layouts agree");
    assert!(same
        .typed
        .iter()
        .any(|(n, l)| *n == "probe_stage" && l.name == "SvcArgs"));
    let moved = unit(
        "svc_moved.cu",
        "unsigned long long queries; unsigned long long out; unsigned long long k;",
    );
    let err = compile_cached(moved, "sm_90").unwrap_err().to_string();
    assert!(err.contains("SvcArgs.k: offset differs"), "{err}");
}

#[test]
fn the_runtime_compiles_for_sm90_through_nvrtc() {
    // Its argument blocks' Rust layouts are asserted in the unit it compiles.
    let src = runtime_alone().source;
    assert!(src.contains("static_assert(sizeof(PRt) == ") && src.contains("sizeof(PPipe) == "));
    cohort_gpu::kernel_check::every_kernel_compiles("runtime", &[runtime_alone()], &[]);
}

/// The persistent runtime's argument block and slot, as the device compiler lays them out,
/// equal their host mirrors (RtArgs, SLOT_BYTES, PipeArgs) and the mqueue header. (PipeArgs was
/// once checked against a hard-coded 32; it grew a `sys` field and the literal went stale.)
#[test]
fn persistent_layout_matches_the_host_mirror() {
    use cohort_gpu::persistent::rt::{PipeArgs, RtArgs, SLOT_BYTES};
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let devs = match probe() {
        Ok(d) => d,
        Err(e) => {
            report_skip("persistent layout on the GPU", &e.to_string());
            return;
        }
    };
    let ctx = cudarc::driver::CudaContext::new(devs[0].ordinal).unwrap();
    let arch: &'static str = Box::leak(devs[0].arch().into_boxed_str());
    let m = ctx
        .load_module(compile_cached(runtime_alone(), arch).unwrap())
        .unwrap();
    let f = m.load_function("p_layout").unwrap();
    let s = ctx.default_stream();
    let mut out = s.alloc_zeros::<u64>(6).unwrap();
    let block = cohort_gpu::persistent::rt::LayoutOut {
        out: Dev::of_mut(&mut out, &s),
    };
    let mut b = s.launch_builder(&f);
    b.arg(&block);
    unsafe { b.launch(LaunchConfig::for_num_elems(1)) }.unwrap();
    let got = s.clone_dtoh(&out).unwrap();
    let want = [
        std::mem::size_of::<RtArgs>(),
        SLOT_BYTES,
        std::mem::offset_of!(RtArgs, free_slots),
        std::mem::offset_of!(RtArgs, pipes),
        cohort_mq::SLOT_HEADER_BYTES,
        std::mem::size_of::<PipeArgs>(),
    ];
    assert_eq!(
        got,
        want.map(|v| v as u64),
        "PRt/PSlot/PPipe layout differs from the host's"
    );
}

#[test]
fn probe_without_a_driver_is_an_error_not_a_panic() {
    // On the CI machine there is no libcuda: probe must say so; on a GPU machine it lists devices.
    match probe() {
        Ok(devs) => assert!(!devs.is_empty()),
        Err(e) => assert!(e.to_string().contains("no CUDA device"), "{e}"),
    }
}

/// Virtual GPUs: device 0 split into two groups of 8 SMs by green contexts. Each group's
/// context reports its own SMs, its kernels run only there (the SM ids a many-block kernel
/// records number at most the group's SMs), and memory written through one group is read
/// through the other (the groups share the device's memory).
#[test]
fn virtual_gpus_run_on_their_own_sms_and_share_memory() {
    use cohort_gpu::green::{self, VirtualSplit};
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    if let Err(e) = cohort_gpu::probe_physical() {
        report_skip("virtual GPUs (green contexts)", &e.to_string());
        return;
    }
    let split: VirtualSplit = "0:2x8".parse().unwrap();
    let sms = green::group_sms(split).unwrap();
    assert_eq!(sms.len(), 2);
    let src = r#"extern "C" __global__ void which_sm(unsigned int* out) {
        unsigned int id; asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        if (threadIdx.x == 0) out[blockIdx.x] = id;
    }"#;
    let unit = KernelSource::assemble(
        "which_sm.cu",
        &Prelude::new("test"),
        &[("which_sm.cu", src)],
    );
    let arch: &'static str = Box::leak(probe().unwrap()[0].arch().into_boxed_str());
    let ptx = compile_cached(unit, arch).unwrap();
    let ctxs: Vec<_> = (0..2).map(|i| green::context(split, i).unwrap()).collect();
    let blocks = 4096;
    let mut seen = Vec::new();
    for (i, ctx) in ctxs.iter().enumerate() {
        assert_eq!(green::context_sms(ctx).unwrap(), sms[i] as usize);
        let f = ctx
            .load_module(ptx.clone())
            .unwrap()
            .load_function("which_sm")
            .unwrap();
        let s = ctx.new_stream().unwrap();
        let mut out = s.alloc_zeros::<u32>(blocks).unwrap();
        let mut b = s.launch_builder(&f);
        b.arg(&mut out);
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: (64, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .unwrap();
        let mut ids = s.clone_dtoh(&out).unwrap();
        ids.sort_unstable();
        ids.dedup();
        assert!(
            ids.len() <= sms[i] as usize,
            "group {i} of {} SMs ran on {} SMs: {ids:?}",
            sms[i],
            ids.len()
        );
        eprintln!(
            "virtual GPU {i}: {} SMs, kernel seen on SMs {ids:?}",
            sms[i]
        );
        seen.push(ids);
    }
    assert!(
        seen[0].iter().all(|id| !seen[1].contains(id)),
        "the two groups share SMs: {seen:?}"
    );
    // Written through group 0, read through group 1.
    let s0 = ctxs[0].new_stream().unwrap();
    let data: Vec<u32> = (0..1000).collect();
    let buf = s0.clone_htod(&data).unwrap();
    s0.synchronize().unwrap();
    let s1 = ctxs[1].new_stream().unwrap();
    let mut copy = s1.alloc_zeros::<u32>(1000).unwrap();
    s1.memcpy_dtod(&buf, &mut copy).unwrap();
    assert_eq!(s1.clone_dtoh(&copy).unwrap(), data);
}
