//! Routing a request: the node serving its service with room and the fewest requests
//! outstanding is picked (ties taken in turn), the request batched to it, and each node's
//! batch sent once per turn, one-sided into its ring where it offered one. A request no node
//! can take is answered here (OVERLOADED, UNAVAILABLE) and counted as shed.

use super::{Lane, NoNode, Pending};
use crate::wire::Request;
use cohort_engine::clock::now_ns;
use cohort_engine::split::ShardOf;
use cohort_engine::wiring::AnswerRings;
use cohort_engine::Shed;
use cohort_mq::Envelope;
use cohort_proto::{ErrorCode, ErrorPayload};
use cohort_ucx::EpId;

impl Lane {
    /// Whether the connection `from` is a node's whose hello is not answered yet (a node's
    /// answers come without their connection: only its replies name it).
    pub(super) fn unverified(&self, from: Option<EpId>) -> bool {
        from.and_then(|ep| self.by_ep.get(&ep))
            .is_some_and(|&i| !self.nodes[i].verified)
    }

    /// A request refused because every node that could take it is at its window, counted
    /// (its answer is counted by the ingress that gets it).
    pub(super) fn shed(&self, service: u16) {
        if let Some(m) = &self.metrics.server {
            m.refused(service, Shed::Nodes);
        }
    }

    pub(super) fn answer_error(
        lane: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        code: ErrorCode,
        why: &str,
    ) {
        lane.send_error(ingress, env, &ErrorPayload::new(code, why));
    }

    /// Sends a request to the least-loaded node serving its service (to one of every shard
    /// where it is split), or answers it. `bytes` is the request's payload; `kept`, the copy
    /// held for a retry (empty for a service that is never sent twice).
    pub(super) fn route(
        &mut self,
        lane: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        bytes: &[u8],
        kept: Vec<u8>,
        retried: bool,
    ) {
        if env.deadline != 0 && now_ns() >= env.deadline {
            return Self::answer_error(
                lane,
                ingress,
                env,
                ErrorCode::Timeout,
                "deadline passed before a node took it",
            );
        }
        if let Some(&split) = self.splits.get(&env.service) {
            return self.scatter(lane, ingress, env, bytes, split);
        }
        match self.pick(env.service, None) {
            Ok(i) => {
                let p = Pending {
                    ingress,
                    env,
                    node: i,
                    payload: kept,
                    retried,
                    gather: None,
                };
                self.send_to(i, bytes, p);
            }
            Err(none) => {
                let (code, why) = match none {
                    NoNode::Full => {
                        self.shed(env.service);
                        let e =
                            Shed::Nodes.error("every node serving this service is at its window");
                        return lane.send_error(ingress, env, &e);
                    }
                    NoNode::Unconnected => (
                        ErrorCode::Unavailable,
                        "no node serving this service is connected now (connecting again)",
                    ),
                    NoNode::Serving => (ErrorCode::Unavailable, "no node serves this service now"),
                };
                Self::answer_error(lane, ingress, env, code, why)
            }
        }
    }

    /// The connected node with room and the fewest requests outstanding among those serving
    /// `service` (its `shard`, or whole), ties taken in turn (at low load every node gets
    /// its share, not the first listed); else why none can take it.
    pub(super) fn pick(&mut self, service: u16, shard: Option<ShardOf>) -> Result<usize, NoNode> {
        let (mut serving, mut connected) = (false, false);
        self.turn = self.turn.wrapping_add(1);
        let (turn, count) = (self.turn, self.nodes.len());
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                !n.gone
                    && n.info
                        .services
                        .iter()
                        .any(|s| s.id == service && s.shard == shard)
            })
            .inspect(|(_, n)| {
                serving = true;
                connected |= n.routable();
            })
            .filter(|(_, n)| n.routable() && n.outstanding < n.window)
            .min_by_key(|&(i, n)| (n.outstanding, (i + count - turn % count) % count))
            .map(|(i, _)| i)
            .ok_or(match (serving, connected) {
                (false, _) => NoNode::Serving,
                (true, false) => NoNode::Unconnected,
                (true, true) => NoNode::Full,
            })
    }

    /// Batches a request (or a shard's part of one) to node `i`.
    pub(super) fn send_to(&mut self, i: usize, bytes: &[u8], p: Pending) {
        let id = self.next_id;
        self.next_id += 1;
        let now = now_ns();
        let node = &mut self.nodes[i];
        node.outstanding += 1;
        node.batch.push_request(&Request {
            id,
            service: p.env.service,
            class: p.env.status,
            request_id: p.env.request_id,
            deadline_left_us: match p.env.deadline {
                0 => 0,
                d => (d.saturating_sub(now) / 1000).clamp(1, u64::from(u32::MAX)) as u32,
            },
            payload: bytes,
        });
        if p.env.deadline != 0 {
            self.deadlines.insert((p.env.deadline, id));
        }
        self.pending.insert(id, p);
    }

    pub(super) fn flush(&mut self, lane: &mut AnswerRings) {
        let mut failed = Vec::new();
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if n.batch.records() == 0 {
                continue;
            }
            let ep = n.ep.expect("batches go to connected nodes");
            n.counters.parts.inc_by(n.batch.records() as u64);
            n.counters.messages.inc();
            n.counters.outstanding.set(i64::from(n.outstanding));
            let sent = match &mut n.ring {
                Some(ring) if ring.takes(n.batch.bytes()) => {
                    n.counters.ring_writes.inc();
                    let msg = self.ring_link.take(&mut n.batch);
                    ring.write(&mut self.w, &msg)
                }
                _ => self.w.send(ep, self.link.take(&mut n.batch), true),
            };
            if let Err(e) = sent {
                tracing::warn!(node = %n.info.id, %e, "remote: send failed");
                failed.push(i);
            }
        }
        for i in failed {
            self.node_failed(i, lane, "sending to the node failed");
        }
    }
}
