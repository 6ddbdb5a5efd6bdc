//! Group search: concurrent searches of one collection share device passes (called by
//! `Collection::search_in`, whose comment says why a follower's answers are those of its own
//! state and why no lock order can deadlock). A search joins a queue; the first caller to find
//! no leader leads, runs one `Accelerator::search` for every queued request compatible with
//! the oldest (same state, k, nprobe and filter) and wakes their callers with their answers.

use crate::accel::Ran;
use crate::accel::{Accelerator, Answer, SearchRequest};
use crate::data::Data;
use crate::error::{Error, Kind, Result};
use cohort_ivf::Neighbor;
use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// Query vectors one combined device pass carries at most (the API's most a request,
/// `limits::MAX_QUERIES`; the device splits a pass into chunks of its own as it did a
/// request). A request with more goes alone.
pub const MAX_PASS_QUERIES: usize = 1024;
/// Searches waiting for a device pass, per collection, at most; more are refused
/// (OVERLOADED) by `search` rather than held.
pub const MAX_PENDING_SEARCHES: usize = 4096;
/// Passes a search leader runs before it hands the lead to the oldest waiting search, so
/// that no leader's caller waits behind an endless stream of others' work.
pub const MAX_LEAD_PASSES: usize = 8;

/// The searches waiting for a device pass.
#[derive(Default)]
pub(crate) struct Searches {
    /// Oldest first.
    pub(crate) pending: VecDeque<Arc<Waiting>>,
    /// A caller is leading passes (it, or the one it handed the lead to, will take every
    /// request queued).
    pub(crate) leader: bool,
}

/// One search waiting in `Searches`: its caller's state and request, borrowed, and the
/// turn its caller is woken with.
pub(crate) struct Waiting {
    d: *const Data,
    r: *const SearchRequest<'static>,
    turn: Mutex<Turn>,
    cv: Condvar,
}

// SAFETY: `d` and `r` point at what the waiting caller borrows for the whole of its call to
// `search_grouped`, which does not return (nor unwind: it only waits, poison ignored) before
// its turn is set; they are only read, by the leader, before it sets that turn (the leader
// and its panic guard set a turn last). `Data`, `SearchRequest` and `Filter` are Sync.
unsafe impl Send for Waiting {}
unsafe impl Sync for Waiting {}

enum Turn {
    Waiting,
    /// The device pass answered it.
    Answered(Answer),
    /// The pass failed or the device declined it (or its leader panicked): its caller
    /// answers it on the CPU.
    Cpu,
    /// Its caller leads the next passes (its request is the oldest queued).
    Lead,
}

impl Waiting {
    pub(crate) fn new(d: &Data, r: &SearchRequest<'_>) -> Waiting {
        Waiting {
            d,
            r: (r as *const SearchRequest<'_>).cast::<SearchRequest<'static>>(),
            turn: Mutex::new(Turn::Waiting),
            cv: Condvar::new(),
        }
    }

    /// The caller's request.
    ///
    /// SAFETY: only while the caller waits (its turn not yet set): see `Waiting`'s Send.
    unsafe fn req(&self) -> &SearchRequest<'_> {
        &*self.r
    }

    fn set(&self, t: Turn) {
        *self.turn.lock().unwrap_or_else(PoisonError::into_inner) = t;
        self.cv.notify_one();
    }

    /// The turn, once set (it is reset to `Waiting`: a caller handed the lead waits again
    /// for its own answer).
    fn wait(&self) -> Turn {
        let mut g = self.turn.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match std::mem::replace(&mut *g, Turn::Waiting) {
                Turn::Waiting => g = self.cv.wait(g).unwrap_or_else(PoisonError::into_inner),
                t => return t,
            }
        }
    }
}

/// The requests of the pass a search leader runs. If the leader panics (in the device's
/// search, say), its drop sends them to the CPU and hands the lead on (or clears it), so
/// that no caller waits for a leader that is gone.
struct SearchLead<'a> {
    searches: &'a Mutex<Searches>,
    pass: Vec<Arc<Waiting>>,
}

impl Drop for SearchLead<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for w in self.pass.drain(..) {
                w.set(Turn::Cpu);
            }
            let mut q = self.searches.lock().unwrap_or_else(PoisonError::into_inner);
            match q.pending.front() {
                Some(w) => w.set(Turn::Lead),
                None => q.leader = false,
            }
        }
    }
}

/// A collection's searches waiting for a device pass, and the passes run.
#[derive(Default)]
pub(crate) struct GroupSearch {
    /// (The collection's unit tests fill it with stand-ins.)
    pub(crate) searches: Mutex<Searches>,
    /// Combined device passes run, and the requests they carried (their mean batch).
    passes: AtomicU64,
    passed: AtomicU64,
}

impl GroupSearch {
    /// (passes run, requests they carried) since the collection opened.
    pub(crate) fn pass_stats(&self) -> (u64, u64) {
        (
            self.passes.load(Ordering::Relaxed),
            self.passed.load(Ordering::Relaxed),
        )
    }

    /// Searches queued for a pass now.
    pub(crate) fn waiting(&self) -> usize {
        self.searches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
            .len()
    }

    /// `r` over `d` in a device pass of `a` shared with the compatible searches queued
    /// beside it (`Collection::search_in` says how and why it is safe): its answers, or None
    /// where its caller answers it on the CPU (the pass failed, the device declined it, or its
    /// leader panicked); refused (OVERLOADED) when `MAX_PENDING_SEARCHES` already wait.
    /// `name` names the collection in messages; `ran_device` counts requests the device
    /// answered.
    pub(crate) fn search(
        &self,
        a: &dyn Accelerator,
        d: &Data,
        r: &SearchRequest<'_>,
        name: &str,
        ran_device: &AtomicU64,
    ) -> Result<Option<Answer>> {
        let me = Arc::new(Waiting::new(d, r));
        let lead = {
            let mut q = self.searches.lock().unwrap_or_else(PoisonError::into_inner);
            if q.pending.len() >= MAX_PENDING_SEARCHES {
                return Err(Error::new(
                    Kind::Overloaded,
                    format!(
                        "{MAX_PENDING_SEARCHES} searches already wait for the device in collection {name}; retry"
                    ),
                ));
            }
            q.pending.push_back(me.clone());
            !std::mem::replace(&mut q.leader, true)
        };
        if lead {
            self.lead(a, d, name, ran_device);
        }
        // `me` stays queued (and `d`, `r` borrowed) until its turn is set.
        loop {
            match me.wait() {
                Turn::Answered(answer) => return Ok(Some(answer)),
                Turn::Cpu => return Ok(None),
                Turn::Lead => self.lead(a, d, name, ran_device),
                Turn::Waiting => unreachable!("wait returns a turn set"),
            }
        }
    }

    /// Runs passes while searches wait (the caller's own is the oldest queued, so the first
    /// pass answers it), at most `MAX_LEAD_PASSES`, then hands the lead on or clears it.
    fn lead(&self, a: &dyn Accelerator, d: &Data, name: &str, ran_device: &AtomicU64) {
        let mut lead = SearchLead {
            searches: &self.searches,
            pass: Vec::new(),
        };
        for passes in 0.. {
            {
                let mut q = self.searches.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(first) = q.pending.pop_front() else {
                    q.leader = false;
                    return;
                };
                if passes == MAX_LEAD_PASSES || !std::ptr::eq(first.d, d) {
                    // Its caller leads next, on its own `d` (the lead stays taken).
                    first.set(Turn::Lead);
                    q.pending.push_front(first);
                    return;
                }
                // Held by the guard from here: a panic sends it to the CPU.
                lead.pass.push(first.clone());
                // SAFETY: every queued request's caller waits (its turn is not set).
                let key = unsafe { first.req() };
                let mut queries = key.queries.len();
                let pass = &mut lead.pass;
                q.pending.retain(|w| {
                    // SAFETY: as above.
                    let r = unsafe { w.req() };
                    let take = queries + r.queries.len() <= MAX_PASS_QUERIES
                        && std::ptr::eq(w.d, first.d)
                        && r.k == key.k
                        && r.nprobe == key.nprobe
                        && r.filter == key.filter;
                    if take {
                        queries += r.queries.len();
                        pass.push(w.clone());
                    }
                    !take
                });
            }
            self.pass(a, d, &lead.pass, name, ran_device);
            lead.pass.clear();
        }
    }

    /// One device pass for `pass` (compatible requests over `d`, their callers waiting):
    /// answers each request, or sends each to the CPU.
    fn pass(
        &self,
        a: &dyn Accelerator,
        d: &Data,
        pass: &[Arc<Waiting>],
        name: &str,
        ran_device: &AtomicU64,
    ) {
        // SAFETY: every caller of `pass` waits until its turn is set, below.
        let key = unsafe { pass[0].req() };
        let total: usize = pass.iter().map(|w| unsafe { w.req() }.queries.len()).sum();
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.passed.fetch_add(pass.len() as u64, Ordering::Relaxed);
        let got = if pass.len() == 1 {
            a.search(d, key)
        } else {
            // The requests' query vectors side by side without copying them: bitwise copies
            // of their `Vec` headers, never dropped nor written (ManuallyDrop), only read
            // while their owners wait. One allocation a pass, none a query.
            let mut headers: Vec<ManuallyDrop<Vec<f32>>> = Vec::with_capacity(total);
            for w in pass {
                for q in unsafe { w.req() }.queries {
                    // SAFETY: `q` is valid and unchanged while its caller waits; the copy is
                    // not dropped, so the vector is freed once, by its owner.
                    headers.push(ManuallyDrop::new(unsafe { std::ptr::read(q) }));
                }
            }
            // SAFETY: ManuallyDrop<T> is repr(transparent) over T.
            let queries: &[Vec<f32>] =
                unsafe { std::slice::from_raw_parts(headers.as_ptr().cast(), headers.len()) };
            let r = SearchRequest {
                queries,
                k: key.k,
                nprobe: key.nprobe,
                filter: key.filter,
            };
            a.search(d, &r)
        };
        match got {
            Ok(Some((answers, plan))) if answers.len() == total => {
                let mut answers = answers.into_iter();
                for w in pass {
                    let n = unsafe { w.req() }.queries.len();
                    let mine: Vec<Vec<Neighbor>> = answers.by_ref().take(n).collect();
                    ran_device.fetch_add(1, Ordering::Relaxed);
                    w.set(Turn::Answered((mine, plan, Ran::Device)));
                }
                return;
            }
            Ok(Some((answers, _))) => {
                tracing::warn!(collection = %name, queries = total, answers = answers.len(),
                    "device answered the wrong number of queries; answered on the CPU")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(collection = %name, error = %e, requests = pass.len(),
                    "device search failed; answered on the CPU")
            }
        }
        for w in pass {
            w.set(Turn::Cpu);
        }
    }
}
