//! `--sched-slice-us`: asks the kernel's fair scheduler (EEVDF, Linux 6.12 and later) for a
//! shorter time slice for every thread of the server. No privilege is needed: it is the
//! `sched_runtime` of a SCHED_OTHER thread's `sched_attr`, which EEVDF reads as the thread's
//! slice (0.1 to 100 ms). A thread with a shorter slice gets an earlier virtual deadline when it
//! wakes, so it preempts a CPU-bound neighbour on its core instead of waiting out the
//! neighbour's slice (a few ms by default: the tail a busy loop on the server's core causes).
//! Older kernels accept and ignore the field; `/proc/self/task/*/sched` (where the kernel has
//! scheduler debugging) shows the slice each thread got, and the server logs it.

use anyhow::{Context as _, Result};

/// The kernel's `struct sched_attr` (the fields up to utilization clamping).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// Gives every thread of this process the slice `us` (they keep their nice value).
/// Returns how many threads it set.
pub fn apply(us: u64) -> Result<usize> {
    anyhow::ensure!(
        (100..=100_000).contains(&us),
        "--sched-slice-us {us}: the kernel takes 100 to 100000"
    );
    let mut set = 0;
    for entry in std::fs::read_dir("/proc/self/task").context("listing /proc/self/task")? {
        let Ok(tid) = entry?.file_name().to_string_lossy().parse::<libc::pid_t>() else {
            continue;
        };
        // SAFETY: getpriority on a thread id of this process.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            nice,
            runtime: us * 1000,
            ..Default::default()
        };
        // SAFETY: sched_setattr with a valid, fully initialized attribute block.
        let r =
            unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &attr as *const SchedAttr, 0) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return Err(e).with_context(|| format!("sched_setattr on thread {tid}"));
        }
        set += 1;
    }
    Ok(set)
}

/// The slice the kernel reports for this thread (ns), where it reports one.
pub fn reported_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
    text.lines()
        .find(|l| l.trim_start().starts_with("se.slice"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse::<u64>()
        .ok()
}
