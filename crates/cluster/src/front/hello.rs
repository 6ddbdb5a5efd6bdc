//! Connections to the nodes and the hello check: dialing a node, its hello (sealed under the
//! cluster key, with its entry's id) that must be answered before it is routed to, closing
//! and making again with a growing backoff, and the rings a node and the front end offer
//! each other for one-sided writes.

use super::Lane;
use crate::ring::OutRing;
use crate::{membership, wire};
use cohort_ucx::EpId;
use std::time::{Duration, Instant};

/// How long a front end waits for a node's answer to its hello before it closes the
/// connection (and makes it again after a backoff).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// The wait before connecting again to a node after `failures` failures in a row: 200 ms,
/// doubling, at most 10 s (a peer that fails every connection costs the front end a
/// connection every 10 s).
pub fn backoff(failures: u32) -> Duration {
    Duration::from_millis(200 << failures.saturating_sub(1).min(6)).min(Duration::from_secs(10))
}

impl Lane {
    /// A node offered its ring on the connection `from`: batches to it go there from now.
    /// An offer that cannot be used leaves the node on messages.
    pub(super) fn ring_offered(&mut self, from: Option<EpId>, data: &[u8]) {
        let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) else {
            return tracing::warn!("remote: a ring offered on no connection of a node; ignored");
        };
        let ep = self.nodes[i].ep.expect("by_ep names connected nodes");
        match OutRing::accept(&mut self.w, ep, data) {
            Ok(ring) => {
                tracing::info!(node = %self.nodes[i].info.id, "remote: writing batches into the node's ring");
                self.nodes[i].ring = Some(ring);
            }
            Err(e) => {
                return tracing::warn!(node = %self.nodes[i].info.id, %e, "remote: a node's ring offer unusable; messages it is")
            }
        }
        // The node polls (it offered a ring): its answers can come the same way.
        if self.answer_rings.has(ep) {
            return;
        }
        let Some(offer) = self
            .answer_rings
            .make(&mut self.w, &mut self.link, ep, "remote")
        else {
            return;
        };
        if let Err(e) = self.w.send(ep, offer, true) {
            tracing::warn!(%e, "remote: offering a node an answer ring failed (messages it is)");
            self.answer_rings.retire(ep);
        }
    }

    /// A node has read its ring up to a slot: those slots are free again.
    pub(super) fn ring_read(&mut self, from: Option<EpId>, data: &[u8]) {
        let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) else {
            return;
        };
        let got = match &mut self.nodes[i].ring {
            Some(ring) => ring.credited(data),
            None => Err("no ring on that connection".into()),
        };
        if let Err(e) = got {
            tracing::warn!(node = %self.nodes[i].info.id, %e, "remote: a ring credit that does not fit; ignored")
        }
    }

    /// Closes node `i`'s connection (if any); the next is made after a backoff that grows
    /// with its failures in a row.
    pub(super) fn close_connection(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.ring = None;
        n.verified = false;
        n.hello = None;
        if let Some(ep) = n.ep.take() {
            self.by_ep.remove(&ep);
            self.answer_rings.retire(ep);
            self.w.close(ep);
            n.retry_at = Some(Instant::now() + backoff(n.failures));
        }
    }

    /// A node's answer to this connection's hello: the node is routed to from now, if it
    /// answers the hello sent with the id its entry has; else its connection is closed and
    /// made again after a backoff (an entry pointing at another node, or a replay).
    pub(super) fn hello_answered(&mut self, from: Option<EpId>, data: &[u8]) {
        let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) else {
            return tracing::warn!("remote: a hello's answer on no node's connection; ignored");
        };
        let n = &mut self.nodes[i];
        let why = match (wire::hello_ack(data), n.hello) {
            (Ok((nonce, id)), Some((sent, _))) if nonce == sent && id == n.info.id => None,
            (Ok((_, id)), Some(_)) if id != n.info.id => Some(format!(
                "the node at that address says it is {id:?}, not the entry's {:?}",
                n.info.id
            )),
            (Ok(_), _) => Some("an answer to no hello sent on this connection".to_string()),
            (Err(e), _) => Some(e.to_string()),
        };
        if let Some(why) = why {
            if n.failures == 0 {
                tracing::error!(node = %n.info.id, address = %n.info.address, %why,
                    "remote: a node's hello answer refused; not routing to it (connecting again later)");
            }
            n.failures += 1;
            return self.close_connection(i);
        }
        n.verified = true;
        n.hello = None;
        n.failures = 0;
        tracing::info!(node = %n.info.id, address = %n.info.address, "remote: the node answered its hello; routing to it");
        let ep = n.ep.expect("by_ep names connected nodes");
        if self.cfg.busy_poll && self.cfg.rings {
            let mut b = self.link.batch(wire::RING_ASK);
            let ask = self.link.take(&mut b);
            if let Err(e) = self.w.send(ep, ask, true) {
                tracing::warn!(%e, "remote: asking a node for a ring failed (messages it is)");
            }
        }
    }

    /// Connections whose hello went unanswered for [`HELLO_TIMEOUT`] are closed (a silent
    /// port, a peer that is not a node of this cluster): made again after a backoff. While
    /// a hello waits, the sockets UCX dialed are looked at: one that a stranger fills with
    /// bytes that are not UCX's (UCX's connection manager would spin on it, a core gone) is
    /// cut off at once, and its hello failed.
    fn hellos_unanswered(&mut self) {
        if !self.nodes.iter().any(|n| n.hello.is_some()) {
            return;
        }
        let garbled = self.w.sweep_dialed();
        for i in 0..self.nodes.len() {
            let n = &mut self.nodes[i];
            let Some((_, sent)) = n.hello else { continue };
            let cut = garbled.contains(&n.info.address);
            if !cut && sent.elapsed() < HELLO_TIMEOUT {
                continue;
            }
            if n.failures == 0 {
                let why = if cut {
                    "its address answered with bytes that are not UCX's"
                } else {
                    "no answer (not a node of this cluster, or with another --cluster-key?)"
                };
                tracing::error!(node = %n.info.id, address = %n.info.address, why,
                    "remote: a node did not answer its hello; not routing to it, connecting again later");
            }
            n.failures += 1;
            self.close_connection(i);
        }
    }

    pub(super) fn connect(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        // Polling, by the node's worker address where it gave one (shared memory possible);
        // else, and always when blocking on events, through its listener.
        let by_address = self
            .cfg
            .busy_poll
            .then(|| n.info.ucx_address.as_deref().and_then(membership::from_hex))
            .flatten();
        let connected = match &by_address {
            Some(a) => self.w.connect_address(a),
            None => self.w.connect(n.info.address),
        };
        match connected {
            Ok(ep) => {
                if n.failures == 0 {
                    tracing::info!(node = %n.info.id, address = %n.info.address, "remote: connected to a node");
                }
                n.ep = Some(ep);
                n.ring = None;
                n.retry_at = None;
                n.verified = false;
                self.by_ep.insert(ep, i);
                // Nothing is routed here before the node answers this (`hello_answered`).
                let nonce: u64 = rand::random();
                let mut b = self.link.batch(wire::HELLO);
                b.push_hello(nonce);
                let hello = self.link.take(&mut b);
                n.hello = Some((nonce, Instant::now()));
                if let Err(e) = self.w.send(ep, hello, true) {
                    tracing::warn!(node = %n.info.id, %e, "remote: a hello not sent (its answer's wait times out)");
                }
            }
            Err(e) => {
                if n.failures == 0 {
                    tracing::warn!(node = %n.info.id, %e, "remote: cannot connect to a node");
                }
                n.failures += 1;
                n.retry_at =
                    Some(Instant::now() + backoff(n.failures).max(Duration::from_millis(500)));
            }
        }
    }

    pub(super) fn reconnect(&mut self) {
        self.hellos_unanswered();
        let now = Instant::now();
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if !n.gone && n.ep.is_none() && n.retry_at.is_none_or(|t| t <= now) {
                self.connect(i);
            }
        }
    }
}
