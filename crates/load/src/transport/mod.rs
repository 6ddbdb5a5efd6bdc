//! How requests reach the server: binary frames over UDP/TCP, JSON over HTTP, or the Open
//! Inference Protocol's tensors over gRPC.

pub(crate) mod frames;
pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod pages;
pub(crate) mod rx_stamp;

use crate::config::{LoadConfig, Mode};
use crate::recorder::{Recorder, Shared};
use anyhow::Result;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

/// A generator thread's recorder, shared by the tasks of that thread (its connections or
/// calls): one recorder a thread, since a recorder's histograms are 270 KB each, zeroed when
/// made. Locked for one record at a time, never across an await; every task that takes it
/// runs on the same thread, so the lock is never contended.
pub(crate) type ThreadRecorder = Arc<Mutex<Recorder>>;

/// The thread's recorder, locked for one record.
pub(crate) fn record(rec: &Mutex<Recorder>) -> MutexGuard<'_, Recorder> {
    rec.lock().expect("recorder lock")
}

/// The thread's recorder once its tasks have ended (`what` names a task that has not).
pub(crate) fn into_recorder(rec: ThreadRecorder, what: &str) -> Result<Recorder> {
    let rec = Arc::try_unwrap(rec).map_err(|_| anyhow::anyhow!("{what} outlived its thread"))?;
    Ok(rec.into_inner().expect("recorder lock"))
}

/// Cores this process may run on: the generator's threads (it is pinned with `taskset`).
pub(crate) fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Connections of a stream transport's run (closed loop: one per request in flight), and
/// the threads that drive them: one per core the generator may use, at most one per
/// connection.
pub(crate) fn connections_and_threads(cfg: &LoadConfig) -> (usize, usize) {
    let conns = match cfg.mode {
        Mode::Open { .. } => cfg.connections,
        Mode::Closed { concurrency } => concurrency,
    }
    .max(1);
    (conns, conns.min(available_cores()))
}

/// Runs `thread(t)` for t in 0..threads, each on a thread of its own (`NAME-t`) with its own
/// single-threaded runtime, merges their recorders, and tells the run it is over.
///
/// A request, its connection's task and its answer's check never leave their thread, so no
/// request costs a cross-thread wake-up (a shared runtime with one pacing thread spent about
/// a quarter of the generator's time in futex wake-ups and task switches, measured with perf).
pub(crate) fn on_threads<F, Fut>(
    sh: &Shared,
    name: &str,
    threads: usize,
    thread: F,
) -> Result<Recorder>
where
    F: Fn(usize) -> Fut + Sync,
    Fut: Future<Output = Result<Recorder>>,
{
    let per_thread: Vec<Result<Recorder>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let thread = &thread;
                std::thread::Builder::new()
                    .name(format!("{name}-{t}"))
                    .spawn_scoped(s, move || -> Result<Recorder> {
                        // The pacer is the runtime's main future, polled between batches of
                        // ready tasks: by default 61 of them (tokio's event_interval), which
                        // with a few hundred connections whose answers each take microseconds
                        // to check put the send lag's p99 at 1.9 ms at 1024 connections
                        // (H200). Every 4 keeps it short.
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .event_interval(4)
                            .enable_all()
                            .build()?;
                        let rec = rt.block_on(thread(t));
                        rt.shutdown_timeout(std::time::Duration::from_secs(1));
                        rec
                    })
            })
            .collect::<std::io::Result<_>>()?;
        Ok::<_, anyhow::Error>(
            handles
                .into_iter()
                .map(|h| h.join().expect("generator thread"))
                .collect(),
        )
    })?;
    let mut total = Recorder::new();
    for r in per_thread {
        total.merge(r?);
    }
    sh.stop.store(true, Ordering::Release);
    Ok(total)
}
