//! Echo's and spin's checks through the GPU engines (the selftest runs them, `slice.rs` names
//! them): random payloads up to the batched backend's row limit, each answer byte-identical
//! to the CPU's; spin really holding the GPU; and the persistent engine's watchdog, provoked
//! with spins that look like a stalled GPU.

use super::gpu::{Micro, MicroGpu, MAX_ROW_BYTES};
use super::persistent::MicroPersistent;
use cohort_engine::wiring::DEFAULT_STRIDE;
use cohort_engine::Service;
use cohort_gpu::engine::Mode;
use cohort_gpu::persistent::{PersistentBackend, PersistentConfig};
use cohort_gpu::DeviceInfo;
use cohort_proto::ErrorCode;
use cohort_service_api::harness::{serve, serve_paced, Engine};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

/// Echo's selftest requests: 400 random payloads up to the row limit, and one past it.
pub fn echo_payloads(seed: u64) -> Vec<Vec<u8>> {
    payloads(&mut SmallRng::seed_from_u64(seed), false)
}

/// Spin's: as echo's, each a spin of up to 40 us, and spin's bad requests.
pub fn spin_payloads(seed: u64) -> Vec<Vec<u8>> {
    payloads(&mut SmallRng::seed_from_u64(seed), true)
}

fn payloads(rng: &mut SmallRng, spin: bool) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..400)
        .map(|_| {
            let len = rng.gen_range(0..=MAX_ROW_BYTES);
            let mut p: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if spin {
                let us: u32 = rng.gen_range(0..40);
                p = super::spin::encode(us, &p[..len.saturating_sub(4)]);
            }
            p
        })
        .collect();
    // Refused alike (or only by the GPU's row limit): oversized, and spin's bad requests.
    v.push(vec![7; MAX_ROW_BYTES + 1]);
    if spin {
        v.push(vec![1, 2]);
        v.push(super::spin::encode(super::spin::MAX_SPIN_US + 1, b""));
    }
    v
}

/// Spin's own engine checks: a 3 ms spin is answered after at least 3 ms on gpu-direct, and
/// (`with_persistent`) the watchdog restarts a persistent engine that looks stalled.
pub fn spin_checks(
    dev: &DeviceInfo,
    _seed: u64,
    with_persistent: bool,
) -> Result<Vec<String>, String> {
    let service: Arc<dyn Service> = Arc::new(super::spin::Spin);
    let mut lines = Vec::new();
    let spin3 = [super::spin::encode(3000, b"x")];
    let s = serve(
        Engine::Batched(
            Arc::new(MicroGpu::new(Micro::Spin, dev).map_err(|e| e.to_string())?),
            Mode::Direct,
            false,
        ),
        &service,
        &spin3,
    )?;
    if s.answers[0].is_err() || s.took < Duration::from_millis(3) {
        return Err(format!(
            "spin 3000 us on the GPU answered {:?} after {:?}",
            s.answers[0], s.took
        ));
    }
    lines.push(format!(
        "spin: 3000 us on the GPU answered after {:.1?}",
        s.took
    ));
    if with_persistent {
        let make = || -> Result<Arc<dyn PersistentBackend>, String> {
            Ok(Arc::new(
                MicroPersistent::new(Micro::Spin, dev).map_err(|e| e.to_string())?,
            ))
        };
        lines.push(watchdog_restarts_a_stalled_gpu(&service, &make)?);
    }
    Ok(lines)
}

/// The watchdog, provoked: spin requests of 100 ms on every worker against a 30 ms watchdog
/// look exactly like a GPU that stopped making progress. Every request must get one answer
/// (what the GPU held INTERNAL, the rest their echo), and requests sent 400 ms later, after
/// the restart, are all served.
fn watchdog_restarts_a_stalled_gpu(
    service: &Arc<dyn Service>,
    make: &dyn Fn() -> Result<Arc<dyn PersistentBackend>, String>,
) -> Result<String, String> {
    let cfg = PersistentConfig {
        slots: 64,
        blocks: Some(vec![4]),
        watchdog: Duration::from_millis(30),
        ..PersistentConfig::default()
    };
    let mut payloads: Vec<Vec<u8>> = (0..40u8).map(|i| super::spin::encode(0, &[i])).collect();
    payloads.extend((0..4u8).map(|i| super::spin::encode(100_000, &[i])));
    payloads.extend((0..40u8).map(|i| super::spin::encode(5, &[i])));
    let pause = Some((44, Duration::from_millis(400)));
    let s = serve_paced(
        Engine::Persistent(vec![make()?], cfg, DEFAULT_STRIDE),
        service,
        &payloads,
        pause,
    )?;
    let internal = s
        .answers
        .iter()
        .filter(|a| matches!(a, Err(e) if e.code == ErrorCode::Internal))
        .count();
    for (i, (p, a)) in payloads.iter().zip(&s.answers).enumerate() {
        match a {
            Ok(g) if g == p => {}
            // Only what the stalled GPU held may fail; what came after the restart is served.
            Err(e) if e.code == ErrorCode::Internal && i < 44 => {}
            other => return Err(format!("watchdog run: request {i} answered {other:?}")),
        }
    }
    if s.restarts == 0 || internal < 4 {
        return Err(format!(
            "watchdog run: {} restarts, {internal} INTERNAL answers (expected >= 1 and >= 4)",
            s.restarts
        ));
    }
    Ok(format!(
        "gpu-persistent watchdog: {} restart(s) for 4 stalled spins; {internal} INTERNAL, {} served, none lost or doubled, in {:.1?}",
        s.restarts,
        payloads.len() - internal,
        s.took
    ))
}
