//! Gives memory back to the system after many connections went away at once. glibc's malloc
//! keeps freed memory in its per-thread arenas: after a flood of 2 000 hostile connections the
//! server's RSS stayed at its peak (2.7 GB with the default budget) once every one had closed.
//! Once a second this thread compares open connections and buffered bytes with their peaks
//! since it last trimmed; after a large drop, once two seconds pass without change, it calls
//! `malloc_trim` (which returns the arenas' free pages), so RSS follows the load down within
//! a few seconds. It never runs on
//! the request path, and in a steady state it never trims.

use cohort_engine::Metrics;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::watch;

/// A drop of this many open connections from their peak triggers a trim...
const CONNECTIONS_DROP: i64 = 256;
/// ... as does this many buffered bytes.
const BYTES_DROP: i64 = 64 << 20;

/// Starts the trimming thread; it ends when `halt` turns true.
pub(crate) fn spawn(
    metrics: Arc<Metrics>,
    halt: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("mem-trim".into())
        .spawn(move || {
            let read = || (metrics.connections_open.get(), metrics.buffered_bytes.get());
            let (mut peak_conns, mut peak_bytes) = read();
            let mut last = read();
            let mut quiet = 0u32;
            let mut ticks = 0u32;
            // (A dropped sender - a server never shut down - ends it too.)
            while !*halt.borrow() && halt.has_changed().is_ok() {
                std::thread::sleep(Duration::from_millis(250));
                ticks += 1;
                if !ticks.is_multiple_of(4) {
                    continue;
                }
                let now = read();
                let (conns, bytes) = now;
                peak_conns = peak_conns.max(conns);
                peak_bytes = peak_bytes.max(bytes);
                // Only once the drop is over (two quiet seconds): a trim holds each arena's
                // lock while it walks it, which a flood still closing in waves would feel.
                quiet = if now == last { quiet + 1 } else { 0 };
                last = now;
                let dropped =
                    peak_conns - conns >= CONNECTIONS_DROP || peak_bytes - bytes >= BYTES_DROP;
                if dropped && quiet >= 2 {
                    let freed = trim();
                    tracing::debug!(
                        from_connections = peak_conns,
                        to = conns,
                        freed,
                        "memory trimmed"
                    );
                    (peak_conns, peak_bytes) = now;
                }
            }
        })
}

/// Returns the allocator's free pages to the system; whether any were.
fn trim() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim has no preconditions; it only releases free memory.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}
