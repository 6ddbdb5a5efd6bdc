//! Wakes an io thread parked in `poll` when an engine writes it an answer.
//!
//! The eventfd is only written when the io thread said it is about to sleep, so under load
//! (the io thread never parks) answers cost no syscall at all.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

pub struct Doorbell {
    fd: OwnedFd,
    sleeping: AtomicBool,
    /// Consumer-only: a producer's write may still be in the eventfd (see `woke`).
    unread: AtomicBool,
}

impl Doorbell {
    pub fn new() -> std::io::Result<Doorbell> {
        // SAFETY: plain syscall; the fd is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh, valid descriptor.
        Ok(Doorbell {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
            unread: AtomicBool::new(false),
        })
    }

    /// Producer side: call after publishing work.
    pub fn ring(&self) {
        // The answer ring's doorbell is a release store: fence so that store is visible
        // before `sleeping` is read (Dekker's pattern with `prepare_sleep`).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
            unsafe { libc::write(self.fd.as_raw_fd(), &one as *const u64 as *const _, 8) };
        }
    }

    /// Consumer side: announce sleep. The caller must re-check its queues after this and
    /// before blocking, so that a producer that published just before cannot be missed.
    pub fn prepare_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Consumer side: awake again; clears the eventfd counter when a producer wrote it.
    pub fn woke(&self) {
        // Whoever swaps `sleeping` from true owns the wake-up: if it is us, no producer wrote
        // (or will write) the eventfd, and its read - a syscall - is skipped.
        // A read that ran ahead of its producer's write leaves `unread` set, so the count is
        // cleared at the next wake-up instead of keeping the eventfd readable for good.
        if self.sleeping.swap(false, Ordering::SeqCst) && !self.unread.load(Ordering::Relaxed) {
            return;
        }
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64 from our non-blocking eventfd.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
        self.unread.store(n != 8, Ordering::Relaxed);
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl cohort_engine::Wake for Doorbell {
    fn wake(&self) {
        self.ring();
    }
}
