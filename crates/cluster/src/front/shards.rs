//! Services served from shards: which services are split (from the membership), scattering a
//! request to one node of every shard, gathering the shards' answers into one through the
//! service's merge, and a failed shard retried on another node of that shard or the whole
//! request answered.

use super::{Gather, Lane, NoNode, Pending, Split};
use cohort_engine::wiring::AnswerRings;
use cohort_engine::Shed;
use cohort_mq::Envelope;
use cohort_proto::ErrorCode;
use std::collections::{HashMap, HashSet};

impl Lane {
    /// Sends a request to one node of every shard of `split`, or answers it: OVERLOADED when
    /// a shard's nodes are all at their windows, UNAVAILABLE when a shard has none.
    pub(super) fn scatter(
        &mut self,
        lane: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        bytes: &[u8],
        split: Split,
    ) {
        let mut picks = Vec::with_capacity(split.shards as usize);
        for shard in 0..split.shards {
            match self.pick(env.service, Some(split.shard(shard))) {
                Ok(i) => picks.push(i),
                Err(NoNode::Full) => {
                    self.shed(env.service);
                    let e = Shed::Nodes
                        .error("every node of one of this service's shards is at its window");
                    return lane.send_error(ingress, env, &e);
                }
                Err(none) => {
                    let why = if none == NoNode::Unconnected {
                        "is connected now (connecting again)"
                    } else {
                        "serves it now"
                    };
                    return Self::answer_error(
                        lane,
                        ingress,
                        env,
                        ErrorCode::Unavailable,
                        &format!(
                            "no node of shard {shard} of this service's {} {why}",
                            split.shards
                        ),
                    );
                }
            }
        }
        let gid = self.next_id;
        self.next_id += 1;
        self.gathers.insert(
            gid,
            Gather {
                ingress,
                env,
                request: bytes.to_vec(),
                layout: split.layout,
                answers: vec![None; split.shards as usize],
                left: split.shards,
            },
        );
        for (shard, i) in picks.into_iter().enumerate() {
            let p = Pending {
                ingress,
                env,
                node: i,
                payload: Vec::new(),
                retried: false,
                gather: Some((gid, shard as u16)),
            };
            self.send_to(i, bytes, p);
        }
    }

    /// Shard `shard`'s answer to gather `gid`: kept until every shard has answered, then
    /// merged; an error answers the request at once (the other shards' answers, when they
    /// come, find it gone and are dropped).
    pub(super) fn gathered(
        &mut self,
        lane: &mut AnswerRings,
        gid: u64,
        shard: u16,
        status: u16,
        payload: &[u8],
    ) {
        let Some(g) = self.gathers.get_mut(&gid) else {
            self.stale += 1;
            return;
        };
        if status == 0 {
            let slot = &mut g.answers[shard as usize];
            if slot.is_none() {
                *slot = Some(payload.to_vec());
                g.left -= 1;
            }
            if g.left > 0 {
                return;
            }
        }
        let g = self.gathers.remove(&gid).expect("looked up above");
        if status != 0 {
            return lane.send(g.ingress, Envelope { status, ..g.env }, payload);
        }
        let merge = self.cfg.merges[&g.env.service];
        let parts: Vec<&[u8]> = g
            .answers
            .iter()
            .map(|a| a.as_deref().expect("every shard answered"))
            .collect();
        let mut out = Vec::new();
        match merge(&g.request, &parts, &mut out) {
            Ok(()) => lane.send(g.ingress, Envelope { status: 0, ..g.env }, &out),
            Err(e) => lane.send_error(g.ingress, g.env, &e),
        }
    }

    /// Answers gather `gid` with an error, if it is still waiting.
    pub(super) fn fail_gather(
        &mut self,
        lane: &mut AnswerRings,
        gid: u64,
        code: ErrorCode,
        why: &str,
    ) {
        if let Some(g) = self.gathers.remove(&gid) {
            Self::answer_error(lane, g.ingress, g.env, code, why);
        }
    }

    /// Which services are served from shards, from the membership: a service with a merge
    /// that no node serves whole, from the layout most of its shard nodes hold.
    pub(super) fn relayout(&mut self) {
        let mut whole = HashSet::new();
        let mut layouts: HashMap<u16, HashMap<Split, usize>> = HashMap::new();
        for n in self.nodes.iter().filter(|n| !n.gone) {
            for s in &n.info.services {
                match s.shard {
                    None => {
                        whole.insert(s.id);
                    }
                    Some(t) => {
                        let split = Split {
                            layout: t.layout,
                            shards: t.shards,
                        };
                        *layouts.entry(s.id).or_default().entry(split).or_default() += 1;
                    }
                }
            }
        }
        let mut splits = HashMap::new();
        for (service, seen) in layouts {
            if whole.contains(&service) || !self.cfg.merges.contains_key(&service) {
                continue;
            }
            let (&split, _) = seen
                .iter()
                .max_by_key(|(sp, &nodes)| (nodes, std::cmp::Reverse((sp.layout, sp.shards))))
                .expect("a service listed has a layout");
            if seen.len() > 1 {
                tracing::warn!(service, layouts = seen.len(), ?split,
                    "remote: nodes hold shards of different layouts of one service (another index or placement); serving the one most nodes hold");
            }
            let missing: Vec<u16> = (0..split.shards)
                .filter(|&i| {
                    !self.nodes.iter().any(|n| {
                        !n.gone
                            && n.info
                                .services
                                .iter()
                                .any(|s| s.id == service && s.shard == Some(split.shard(i)))
                    })
                })
                .collect();
            if !missing.is_empty() {
                tracing::warn!(
                    service,
                    ?missing,
                    shards = split.shards,
                    "remote: shards with no node: this service's requests are answered UNAVAILABLE"
                );
            }
            splits.insert(service, split);
        }
        if splits != self.splits {
            tracing::info!(?splits, "remote: services served from shards");
        }
        self.splits = splits;
    }

    /// A scattered request's shard whose node failed: sent to another node of that shard
    /// when `again` allows, else the whole request answered UNAVAILABLE.
    pub(super) fn shard_failed(
        &mut self,
        lane: &mut AnswerRings,
        p: Pending,
        gid: u64,
        shard: u16,
        again: bool,
        why: &str,
    ) {
        let Some(g) = self.gathers.get(&gid) else {
            return; // answered already
        };
        let split = Split {
            layout: g.layout,
            shards: g.answers.len() as u16,
        };
        let bytes = g.request.clone();
        let other = again
            .then(|| self.pick(p.env.service, Some(split.shard(shard))).ok())
            .flatten();
        match other {
            Some(i) => {
                let retry = Pending {
                    node: i,
                    retried: true,
                    ..p
                };
                self.send_to(i, &bytes, retry);
            }
            None => self.fail_gather(lane, gid, ErrorCode::Unavailable, why),
        }
    }
}
