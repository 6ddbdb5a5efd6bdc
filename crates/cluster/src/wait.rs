//! Blocking instead of spinning when a thread has nothing to do: on UCX's event fd (a message
//! arrived) and on a doorbell (an eventfd the engines ring when they write an answer), with
//! the doorbell rung only while its thread sleeps, so a busy node pays no syscall per answer.

use cohort_engine::Wake;
use cohort_ucx::Worker;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Doorbell {
    fd: OwnedFd,
    sleeping: AtomicBool,
}

impl Wake for Doorbell {
    fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writing 8 bytes to our eventfd; a full counter only means "rung".
            unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), 8) };
        }
    }
}

pub struct EventWait {
    ucx: RawFd,
    bell: Arc<Doorbell>,
}

impl EventWait {
    pub fn new(w: &Worker) -> anyhow::Result<EventWait> {
        // SAFETY: a fresh eventfd, owned from here.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        anyhow::ensure!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
        Ok(EventWait {
            ucx: w.event_fd()?,
            // SAFETY: fd is ours and valid.
            bell: Arc::new(Doorbell {
                fd: unsafe { OwnedFd::from_raw_fd(fd) },
                sleeping: AtomicBool::new(false),
            }),
        })
    }

    /// What the engines ring (`IngressEnds::set_wake`).
    pub fn doorbell(&self) -> Arc<Doorbell> {
        self.bell.clone()
    }

    /// Sleeps until UCX has an event, the doorbell rings, or `timeout`; returns at once when
    /// `ready()` (checked after announcing the sleep) says there is work already.
    pub fn wait(&self, w: &mut Worker, timeout: Duration, ready: impl FnOnce() -> bool) {
        self.bell.sleeping.store(true, Ordering::SeqCst);
        if !ready() && w.arm() {
            let mut fds = [
                libc::pollfd {
                    fd: self.ucx,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.bell.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: two valid pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
            if fds[1].revents & libc::POLLIN != 0 {
                let mut buf = [0u8; 8];
                // SAFETY: reading the eventfd's counter (non-blocking) resets it.
                unsafe { libc::read(self.bell.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            }
        }
        self.bell.sleeping.store(false, Ordering::SeqCst);
    }
}
