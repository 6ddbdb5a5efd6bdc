//! Virtual GPUs: one device's SMs split into groups by green contexts, each group served as a
//! device of its own, so multi-GPU scaling (Lynx Fig. 8b, Centaur Fig. 6) is built and measured
//! on one GPU. `COHORT_VIRTUAL_GPUS=DEV:NxS` (what `cohort --virtual-gpus DEV:NxS` sets)
//! makes [`crate::probe`] list N devices, each S SMs of device DEV; `--gpus 0-7` then names
//! them. The groups share the device's memory (a green context's CUcontext acts as the
//! primary context for everything but where kernels run) and its copy engines.

use crate::GpuError;
use cudarc::driver::sys;
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The environment variable `cohort --virtual-gpus` sets.
pub const ENV: &str = "COHORT_VIRTUAL_GPUS";

/// N groups of S SMs of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VirtualSplit {
    pub device: usize,
    pub groups: usize,
    pub sms: u32,
}

impl std::str::FromStr for VirtualSplit {
    type Err = String;

    /// `DEV:NxS`, e.g. `0:8x8` (eight groups of 8 SMs of device 0).
    fn from_str(s: &str) -> Result<VirtualSplit, String> {
        let bad =
            || format!("{s:?}: expected DEV:NxS, e.g. 0:8x8 (eight groups of 8 SMs of GPU 0)");
        let (dev, rest) = s.split_once(':').ok_or_else(bad)?;
        let (n, sms) = rest.split_once('x').ok_or_else(bad)?;
        let split = VirtualSplit {
            device: dev.trim().parse().map_err(|_| bad())?,
            groups: n.trim().parse().map_err(|_| bad())?,
            sms: sms.trim().parse().map_err(|_| bad())?,
        };
        if split.groups == 0 || split.sms == 0 {
            return Err(format!("{s:?}: at least one group of at least one SM"));
        }
        Ok(split)
    }
}

impl std::fmt::Display for VirtualSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}x{}", self.device, self.groups, self.sms)
    }
}

/// The split asked for in the environment, if any.
pub fn from_env() -> Result<Option<VirtualSplit>, GpuError> {
    match std::env::var(ENV) {
        Ok(s) if !s.trim().is_empty() => s
            .parse()
            .map(Some)
            .map_err(|e| GpuError::Invalid(format!("{ENV}: {e}"))),
        _ => Ok(None),
    }
}

/// One group as made: its CUcontext (as an address: the cache is shared across threads) and
/// its SM count as the driver rounded it.
#[derive(Clone, Copy)]
struct Group {
    ctx: usize,
    sms: u32,
}

/// Every split made in this process. A green context lives as long as the process: the
/// server's devices do, and the driver forbids destroying its CUcontext handle.
fn made() -> &'static Mutex<HashMap<VirtualSplit, Vec<Group>>> {
    static M: OnceLock<Mutex<HashMap<VirtualSplit, Vec<Group>>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

fn check(r: sys::CUresult, what: &str) -> Result<(), GpuError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Invalid(format!("{what}: {r:?}")))
    }
}

fn groups(split: VirtualSplit) -> Result<Vec<Group>, GpuError> {
    let mut cache = made().lock().expect("green context cache");
    if let Some(g) = cache.get(&split) {
        return Ok(g.clone());
    }
    // The primary context first (initialises the driver; each green context retains it).
    let primary = CudaContext::new(split.device)?;
    let dev = cudarc::driver::result::device::get(split.device as i32)?;
    // SAFETY: plain driver calls on out-parameters sized as the driver asks (`groups`
    // resources for the split; one descriptor per group).
    unsafe {
        let mut all: sys::CUdevResource = std::mem::zeroed();
        check(
            sys::cuDeviceGetDevResource(
                dev,
                &mut all,
                sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
            ),
            "cuDeviceGetDevResource",
        )?;
        let mut parts: Vec<sys::CUdevResource> = vec![std::mem::zeroed(); split.groups];
        let mut n = split.groups as u32;
        let mut rest: sys::CUdevResource = std::mem::zeroed();
        check(
            sys::cuDevSmResourceSplitByCount(
                parts.as_mut_ptr(),
                &mut n,
                &all,
                &mut rest,
                0,
                split.sms,
            ),
            "cuDevSmResourceSplitByCount",
        )?;
        let total = all.__bindgen_anon_1.sm.smCount;
        if (n as usize) < split.groups {
            return Err(GpuError::Invalid(format!(
                "virtual GPUs {split}: GPU {} has {total} SMs, room for only {n} groups of {} (the driver's rounding)",
                split.device, split.sms
            )));
        }
        let mut out = Vec::with_capacity(split.groups);
        for part in parts.iter_mut() {
            let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
            check(
                sys::cuDevResourceGenerateDesc(&mut desc, part, 1),
                "cuDevResourceGenerateDesc",
            )?;
            let mut green: sys::CUgreenCtx = std::ptr::null_mut();
            check(
                sys::cuGreenCtxCreate(
                    &mut green,
                    desc,
                    dev,
                    sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
                ),
                "cuGreenCtxCreate",
            )?;
            let mut ctx: sys::CUcontext = std::ptr::null_mut();
            check(sys::cuCtxFromGreenCtx(&mut ctx, green), "cuCtxFromGreenCtx")?;
            out.push(Group {
                ctx: ctx as usize,
                sms: part.__bindgen_anon_1.sm.smCount,
            });
        }
        // Held for the process, as the green contexts retain it.
        std::mem::forget(primary);
        cache.insert(split, out.clone());
        Ok(out)
    }
}

/// The SM counts of the split's groups (making its green contexts).
pub fn group_sms(split: VirtualSplit) -> Result<Vec<u32>, GpuError> {
    Ok(groups(split)?.iter().map(|g| g.sms).collect())
}

/// A context whose kernels run on group `index` of `split` only.
pub fn context(split: VirtualSplit, index: usize) -> Result<Arc<CudaContext>, GpuError> {
    let g = *groups(split)?
        .get(index)
        .ok_or_else(|| GpuError::Invalid(format!("virtual GPUs {split} have no group {index}")))?;
    let dev = cudarc::driver::result::device::get(split.device as i32)?;
    // SAFETY: a live CUcontext of that device (cuCtxFromGreenCtx). The wrapper would destroy
    // it on drop, which a green context's handle must never be: one reference is forgotten,
    // so the wrapper is never dropped.
    let ctx = unsafe { CudaContext::from_raw_context(split.device, dev, g.ctx as sys::CUcontext) }?;
    std::mem::forget(ctx.clone());
    Ok(ctx)
}

/// The SMs kernels of `ctx` may run on (a green context's group, or the whole device).
pub fn context_sms(ctx: &Arc<CudaContext>) -> Result<usize, GpuError> {
    ctx.bind_to_thread()?;
    // SAFETY: an out-parameter for the context's SM resource.
    unsafe {
        let mut r: sys::CUdevResource = std::mem::zeroed();
        check(
            sys::cuCtxGetDevResource(
                ctx.cu_ctx(),
                &mut r,
                sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
            ),
            "cuCtxGetDevResource",
        )?;
        Ok(r.__bindgen_anon_1.sm.smCount as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_parse_and_print() {
        let s: VirtualSplit = "0:8x8".parse().unwrap();
        assert_eq!(
            s,
            VirtualSplit {
                device: 0,
                groups: 8,
                sms: 8
            }
        );
        assert_eq!(s.to_string(), "0:8x8");
        for bad in ["", "0", "0:8", "0:x8", "a:8x8", "0:0x8", "0:8x0", "0:8x8x8"] {
            assert!(bad.parse::<VirtualSplit>().is_err(), "{bad}");
        }
    }
}
