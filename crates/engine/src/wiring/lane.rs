//! The lane side of the rings: a lane's ends ([`LaneEnds`]), its health guard and sleeps, and
//! [`RequestRings`], the request rings from every ingress that a lane polls in turn.

use super::answers::AnswerRings;
use super::{HealthGuard, LaneHealth};
use crate::bell::Bell;
use crate::inflight::LaneRef;
use cohort_mq::{Consumer, Message};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One lane's ends: a request ring from every ingress, an answer ring to every ingress.
pub struct LaneEnds {
    pub id: LaneRef,
    pub engine: Arc<str>,
    pub requests: RequestRings,
    pub answers: AnswerRings,
    pub bell: Arc<Bell>,
    pub(super) health: Arc<LaneHealth>,
}

impl LaneEnds {
    /// Hold this in the lane's thread for its whole life: when the thread ends (a panic
    /// included) the ingresses learn it and answer what this lane held.
    pub fn health_guard(&self) -> HealthGuard {
        HealthGuard(self.health.clone())
    }

    /// Says that the lane lost every request it held (its GPU kernels were restarted): each
    /// ingress answers INTERNAL for what it had sent the lane so far. Call after the lane can
    /// no longer answer them; a request sent between the loss and the ingress noticing is
    /// failed too (any late answer for it is dropped as stale: one answer per request).
    pub fn announce_restart(&mut self) {
        self.health.restarts.fetch_add(1, Ordering::AcqRel);
        self.answers.wake_all();
    }

    /// Parks the calling thread until a request may have arrived, or `timeout`.
    pub fn sleep(&mut self, timeout: std::time::Duration) {
        self.requests.publish();
        let req = &self.requests;
        self.bell.sleep(timeout, || req.any_ready());
    }

    /// Parks the calling thread, which consumes all of `lanes`, until a request may have
    /// arrived on any of them, or `timeout`.
    pub fn sleep_all(lanes: &mut [LaneEnds], timeout: std::time::Duration) {
        for l in lanes.iter_mut() {
            l.requests.publish();
        }
        let bells: Vec<&Bell> = lanes.iter().map(|l| &*l.bell).collect();
        crate::bell::sleep_on(&bells, timeout, || {
            lanes.iter().any(|l| l.requests.any_ready())
        });
    }
}

pub struct RequestRings {
    pub(super) rings: Vec<Consumer>,
    pub(super) next: usize,
}

impl RequestRings {
    /// Ingresses (one ring each).
    pub fn len(&self) -> usize {
        self.rings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// Offers ingress `i`'s next request to `f`; it is released if `f` returns Some.
    pub fn poll_from<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(Message<'_>) -> Option<R>,
    ) -> Option<R> {
        self.rings[i].try_recv_if(f)
    }

    /// Takes one request from the next ingress that has one (round robin) and hands it to
    /// `f` with its ingress index.
    pub fn poll<R>(&mut self, f: impl FnOnce(usize, Message<'_>) -> R) -> Option<R> {
        let i = self.next_ready()?;
        self.rings[i].try_recv(|m| f(i, m))
    }

    /// `poll`, but the request is released only if `f` returns Some (else it stays first in
    /// its ring and polling stops).
    pub fn poll_if<R>(&mut self, f: impl FnOnce(usize, Message<'_>) -> Option<R>) -> Option<R> {
        let i = self.next_ready()?;
        self.rings[i].try_recv_if(|m| f(i, m))
    }

    /// The next ingress (round robin from the last one served) whose ring holds a request.
    fn next_ready(&mut self) -> Option<usize> {
        let n = self.rings.len();
        let i = (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&i| self.rings[i].is_ready())?;
        self.next = i + 1;
        Some(i)
    }

    pub fn any_ready(&self) -> bool {
        self.rings.iter().any(|c| c.is_ready())
    }

    /// Ingress `i`'s ring (a device consumer reads it in place of this handle).
    pub fn ring(&self, i: usize) -> &Consumer {
        &self.rings[i]
    }

    /// Whether ingress `i`'s ring holds a request.
    pub fn is_ready(&self, i: usize) -> bool {
        self.rings[i].is_ready()
    }

    /// Publishes every ring's tail (before going idle).
    pub fn publish(&mut self) {
        self.rings.iter_mut().for_each(Consumer::publish);
    }
}
