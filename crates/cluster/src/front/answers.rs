//! What comes back from the nodes, and what is owed when they fail: answer batches (by
//! message or through an answer ring) routed to their ingresses or gathers, messages refused
//! under the cluster key, a node's failure answering or retrying what it held, and TIMEOUT
//! for what is not answered by its deadline.

use super::Lane;
use crate::wire;
use cohort_engine::clock::now_ns;
use cohort_engine::wiring::AnswerRings;
use cohort_mq::Envelope;
use cohort_proto::ErrorCode;
use cohort_ucx::EpId;
use std::collections::BTreeSet;

impl Lane {
    /// A batch of a node's answers (by message or through an answer ring): each to its
    /// ingress, or into its gather.
    pub(super) fn answers(&mut self, data: &[u8], lane: &mut AnswerRings) {
        let got = wire::answers(data, |a| match self.pending.remove(&a.id) {
            Some(p) => {
                if p.env.deadline != 0 {
                    self.deadlines.remove(&(p.env.deadline, a.id));
                }
                let n = &mut self.nodes[p.node];
                n.outstanding -= 1;
                n.failures = 0;
                match p.gather {
                    Some((gid, shard)) => self.gathered(lane, gid, shard, a.status, a.payload),
                    None => {
                        let env = Envelope {
                            status: a.status,
                            ..p.env
                        };
                        lane.send(p.ingress, env, a.payload);
                    }
                }
            }
            None => self.stale += 1,
        });
        if let Err(e) = got {
            tracing::warn!(%e, "remote: a malformed answer batch from a node");
        }
    }

    /// What the nodes wrote into this lane's answer rings; each ring's credit back to its
    /// node. A batch that fails its checks fails its node's connection.
    pub(super) fn read_answer_rings(&mut self, lane: &mut AnswerRings) -> bool {
        let credits = self.answer_rings.read(
            &self.w,
            &mut self.ring_slot,
            &mut self.link,
            &mut self.ring_reads,
        );
        // Taken out to be drained while `self` answers, then put back: its room is kept.
        let mut reads = std::mem::take(&mut self.ring_reads);
        let busy = !reads.is_empty();
        for (ep, batch) in reads.drain(..) {
            let Some(&i) = self.by_ep.get(&ep) else {
                continue; // its connection failed this turn: its requests are answered
            };
            match batch {
                Ok(data) => {
                    self.nodes[i].counters.ring_answers.inc();
                    self.answers(&data, lane);
                }
                Err(why) => {
                    tracing::warn!(node = %self.nodes[i].info.id, %why, "remote: refused a batch in a node's answer ring");
                    self.node_failed(i, lane, "a node's answers failed the cluster key's check");
                }
            }
        }
        self.ring_reads = reads;
        // The credits after the answers are on their way to their clients.
        for (ep, credit) in credits {
            if !self.by_ep.contains_key(&ep) {
                continue; // failed above
            }
            if let Err(e) = self.w.send(ep, credit, true) {
                tracing::warn!(%e, "remote: an answer ring's credit not sent");
            }
        }
        busy
    }

    /// A message that failed the cluster key's check (altered on the way, or not from a
    /// node of this cluster: a node with another key closes the connection before it
    /// answers). Nothing in it is taken as an answer; the nodes holding the requests it names
    /// are failed (their requests retried or answered), so none waits for an answer that was
    /// lost. A forged message can at most make a connection be made again.
    pub(super) fn refused(
        &mut self,
        from: Option<EpId>,
        msg: &[u8],
        why: &str,
        lane: &mut AnswerRings,
    ) {
        if let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) {
            if !self.nodes[i].verified {
                // A peer that has not answered its hello holds nothing: its connection goes.
                let n = &mut self.nodes[i];
                if n.failures == 0 {
                    tracing::error!(node = %n.info.id, address = %n.info.address, %why,
                        "remote: refused a message from a node before its hello's answer; not routing to it");
                }
                n.failures += 1;
                return self.close_connection(i);
            }
        }
        let inner = if wire::is_sealed(msg) {
            msg.get(wire::SEAL_HEAD..).unwrap_or(&[])
        } else {
            msg
        };
        let mut named = BTreeSet::new();
        let _ = wire::answers(inner, |a| {
            if let Some(p) = self.pending.get(&a.id) {
                named.insert(p.node);
            }
        });
        tracing::warn!(%why, nodes = ?named.iter().map(|&i| &self.nodes[i].info.id).collect::<Vec<_>>(),
            "remote: refused a message from a node; failing the connections it names");
        for i in named {
            self.node_failed(i, lane, "a node's answers failed the cluster key's check");
        }
    }

    /// A node's refusal of this front end's messages (it closes the connection next): said
    /// once per run of failures, at error level, with the node's reason, since it is a
    /// misconfiguration (another --cluster-key, or none on one side) rather than a node lost,
    /// and the requests it held are answered with it. Not sealed, so it is taken only as the
    /// end of the connection it came on (as a reset would be).
    pub(super) fn refused_by(&mut self, from: Option<EpId>, reason: &str, lane: &mut AnswerRings) {
        let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) else {
            tracing::warn!(%reason, "remote: a refusal on no node's connection; ignored");
            return;
        };
        let n = &mut self.nodes[i];
        if n.failures == 0 {
            tracing::error!(node = %n.info.id, %reason,
                "remote: the node refused this front end's messages (check that --cluster-key is the same file on both); connecting again while it is registered");
        }
        n.failures += 1;
        let why = format!("node {} refused this front end: {reason}", n.info.id);
        self.node_failed(i, lane, &why);
    }

    /// Answers (or retries elsewhere) every request node `i` holds.
    pub(super) fn node_failed(&mut self, i: usize, lane: &mut AnswerRings, why: &str) {
        self.close_connection(i);
        self.nodes[i].batch.take();
        self.nodes[i].outstanding = 0;
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.node == i)
            .map(|(&id, _)| id)
            .collect();
        let now = now_ns();
        for id in ids {
            let p = self.pending.remove(&id).expect("listed");
            if p.env.deadline != 0 {
                self.deadlines.remove(&(p.env.deadline, id));
            }
            let time_left = p.env.deadline == 0 || p.env.deadline > now;
            let again = !p.retried && time_left && self.cfg.idempotent.contains(&p.env.service);
            if let Some((gid, shard)) = p.gather {
                self.shard_failed(lane, p, gid, shard, again, why);
                continue;
            }
            if again {
                let bytes = p.payload.clone();
                self.route(lane, p.ingress, p.env, &bytes, p.payload, true);
            } else {
                Self::answer_error(lane, p.ingress, p.env, ErrorCode::Unavailable, why);
            }
        }
    }

    pub(super) fn fail_all(&mut self, lane: &mut AnswerRings, why: &str) {
        for (_, p) in self.pending.drain() {
            if p.gather.is_none() {
                Self::answer_error(lane, p.ingress, p.env, ErrorCode::Unavailable, why);
            }
        }
        for (_, g) in self.gathers.drain() {
            Self::answer_error(lane, g.ingress, g.env, ErrorCode::Unavailable, why);
        }
        self.deadlines.clear();
    }

    /// TIMEOUT for what a node has not answered by its deadline (and the grace).
    pub(super) fn expire(&mut self, lane: &mut AnswerRings) {
        let now = now_ns();
        let grace = self.cfg.grace.as_nanos() as u64;
        while let Some(&(d, id)) = self.deadlines.first() {
            if d.saturating_add(grace) > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(p) = self.pending.remove(&id) {
                self.nodes[p.node].outstanding -= 1;
                if let Some((gid, _)) = p.gather {
                    self.fail_gather(
                        lane,
                        gid,
                        ErrorCode::Timeout,
                        "a shard's node did not answer by the request's deadline",
                    );
                    continue;
                }
                Self::answer_error(
                    lane,
                    p.ingress,
                    p.env,
                    ErrorCode::Timeout,
                    "the node did not answer by the request's deadline",
                );
            }
        }
    }
}
