//! Device discovery: name, SMs, memory, PCI bus id and the NUMA node the GPU hangs off.

use crate::green::VirtualSplit;
use crate::GpuError;
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::CudaContext;

#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// The serving device's index (what `--gpus` names): the CUDA ordinal, or a virtual GPU's
    /// index among its split's groups.
    pub ordinal: usize,
    /// The CUDA device it runs on.
    pub physical: usize,
    /// A virtual GPU's split and group (green contexts, [`crate::green`]); None: the whole
    /// device.
    pub sm_group: Option<(VirtualSplit, usize)>,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sms: i32,
    pub total_mem: usize,
    pub pci_bus_id: String,
    /// From sysfs; None where the kernel does not say (-1) or the file is absent.
    pub numa_node: Option<u32>,
}

impl DeviceInfo {
    /// `sm_90` style architecture name for NVRTC.
    pub fn arch(&self) -> String {
        format!(
            "sm_{}{}",
            self.compute_capability.0, self.compute_capability.1
        )
    }
}

/// Whether the CUDA driver library can be loaded at all (checked before any driver call,
/// since cudarc panics when it is missing).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn numa_node(bus: &str) -> Option<u32> {
    let path = format!(
        "/sys/bus/pci/devices/{}/numa_node",
        bus.to_ascii_lowercase()
    );
    std::fs::read_to_string(path)
        .ok()?
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .map(|n| n as u32)
}

/// Every serving device, or `NoDevice` with the reason: the CUDA devices, or with
/// `COHORT_VIRTUAL_GPUS` set, the groups of SMs it names ([`crate::green`]).
pub fn probe() -> Result<Vec<DeviceInfo>, GpuError> {
    let physical = probe_physical()?;
    let Some(split) = crate::green::from_env()? else {
        return Ok(physical);
    };
    virtual_devices(&physical, split)
}

/// The device of `ordinal` among `devs` (as [`probe`] lists them); an error naming it and
/// how many there are otherwise.
pub fn find_device(devs: &[DeviceInfo], ordinal: usize) -> Result<&DeviceInfo, GpuError> {
    devs.iter()
        .find(|d| d.ordinal == ordinal)
        .ok_or_else(|| GpuError::Invalid(format!("no GPU {ordinal} ({} found)", devs.len())))
}

/// The devices of `ordinals` among `devs`, in that order ([`find_device`] each).
pub fn pick_devices(devs: &[DeviceInfo], ordinals: &[usize]) -> Result<Vec<DeviceInfo>, GpuError> {
    ordinals
        .iter()
        .map(|&o| find_device(devs, o).cloned())
        .collect()
}

/// The groups of SMs `split` names, as serving devices (ordinals 0..groups).
pub fn virtual_devices(
    physical: &[DeviceInfo],
    split: VirtualSplit,
) -> Result<Vec<DeviceInfo>, GpuError> {
    let dev = physical.get(split.device).ok_or_else(|| {
        GpuError::Invalid(format!(
            "virtual GPUs {split}: no GPU {} ({} found)",
            split.device,
            physical.len()
        ))
    })?;
    Ok(crate::green::group_sms(split)?
        .into_iter()
        .enumerate()
        .map(|(i, sms)| DeviceInfo {
            ordinal: i,
            sms: sms as i32,
            sm_group: Some((split, i)),
            name: format!("{} [SMs group {i} of {split}]", dev.name),
            ..dev.clone()
        })
        .collect())
}

/// Every CUDA device.
pub fn probe_physical() -> Result<Vec<DeviceInfo>, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDevice(
            "the CUDA driver library (libcuda) is not installed".into(),
        ));
    }
    let n = CudaContext::device_count()
        .map_err(|e| GpuError::NoDevice(format!("cuInit/cuDeviceGetCount: {e}")))?;
    if n <= 0 {
        return Err(GpuError::NoDevice("the driver reports 0 devices".into()));
    }
    (0..n as usize)
        .map(|i| {
            let ctx = CudaContext::new(i)?;
            let (dom, bus, dev) = (
                ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
                ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
                ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
            );
            let pci = format!("{dom:04x}:{bus:02x}:{dev:02x}.0");
            Ok(DeviceInfo {
                ordinal: i,
                physical: i,
                sm_group: None,
                name: ctx.name()?,
                compute_capability: ctx.compute_capability()?,
                sms: ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
                total_mem: ctx.total_mem()?,
                numa_node: numa_node(&pci),
                pci_bus_id: pci,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{find_device, pick_devices, DeviceInfo};

    fn dev(ordinal: usize) -> DeviceInfo {
        DeviceInfo {
            ordinal,
            physical: 0,
            sm_group: None,
            name: format!("gpu {ordinal}"),
            compute_capability: (9, 0),
            sms: 8,
            total_mem: 1 << 30,
            pci_bus_id: String::new(),
            numa_node: None,
        }
    }

    #[test]
    fn devices_are_picked_by_ordinal_in_the_order_asked_and_a_missing_one_is_named() {
        let devs = [dev(0), dev(1), dev(2)];
        let got: Vec<usize> = pick_devices(&devs, &[2, 0])
            .unwrap()
            .iter()
            .map(|d| d.ordinal)
            .collect();
        assert_eq!(got, [2, 0]);
        assert_eq!(find_device(&devs, 1).unwrap().ordinal, 1);
        let e = pick_devices(&devs, &[0, 7]).unwrap_err().to_string();
        assert!(e.contains("no GPU 7") && e.contains("3 found"), "{e}");
    }
}
