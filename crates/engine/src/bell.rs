//! Waking a thread that parked because its rings were empty.
//!
//! A producer rings only when the consumer said it is about to sleep, so under load (the
//! consumer never parks) a message costs no syscall. The consumer announces sleep, re-checks
//! its rings, and only then parks: a message published in between is never missed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::Duration;

/// Something a producer wakes after writing into a ring (an engine lane's thread, an io
/// thread's eventfd).
pub trait Wake: Send + Sync {
    fn wake(&self);
}

/// The bell of one consumer thread.
#[derive(Default)]
pub struct Bell {
    sleeping: AtomicBool,
    /// The thread that sleeps on this bell (locked only to bind, and to wake a sleeper).
    thread: Mutex<Option<Thread>>,
}

impl Bell {
    pub fn new() -> Arc<Bell> {
        Arc::new(Bell::default())
    }

    /// The consumer thread registers itself before it first sleeps (a later thread may
    /// take the bell over).
    pub fn bind_current(&self) {
        *self.thread.lock().expect("bell lock") = Some(std::thread::current());
    }

    /// Parks the calling (bound) thread for at most `timeout`, unless `work_waiting` says
    /// there is work after sleep was announced.
    pub fn sleep(&self, timeout: Duration, work_waiting: impl Fn() -> bool) {
        sleep_on(&[self], timeout, work_waiting)
    }
}

/// Parks the calling thread, bound to every one of `bells` (one thread consuming several
/// lanes), for at most `timeout`, unless `work_waiting` says there is work after sleep was
/// announced on all of them: a ring of any bell wakes it.
pub fn sleep_on(bells: &[&Bell], timeout: Duration, work_waiting: impl Fn() -> bool) {
    for b in bells {
        b.sleeping.store(true, Ordering::SeqCst);
    }
    // Dekker's pattern: the stores above must be visible before the rings are checked, as
    // the producer's ring write must be before it checks `sleeping` (see `wake`).
    std::sync::atomic::fence(Ordering::SeqCst);
    if !work_waiting() {
        std::thread::park_timeout(timeout);
    }
    for b in bells {
        b.sleeping.store(false, Ordering::SeqCst);
    }
}

impl Wake for Bell {
    fn wake(&self) {
        // The ring's doorbell is a release store: without a full fence the check below could
        // run before that store is visible, read "awake", and leave the consumer asleep for
        // its whole timeout with a message waiting.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            if let Some(t) = &*self.thread.lock().expect("bell lock") {
                t.unpark();
            }
        }
    }
}
