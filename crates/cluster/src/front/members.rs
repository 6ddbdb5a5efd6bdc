//! The membership as a lane sees it: a node joining (registered with its metrics, or its
//! window updated), leaving (what it held answered), and each change applied, which may
//! change which services are served from shards.

use super::{Lane, Node};
use crate::membership::{Change, NodeInfo};
use crate::wire;
use cohort_engine::wiring::AnswerRings;
use std::collections::HashSet;

impl Lane {
    fn join(&mut self, info: NodeInfo, lane: &mut AnswerRings) {
        let window = self.cfg.window.min(info.capacity.max(1));
        if let Some(i) = self
            .nodes
            .iter()
            .position(|n| n.info.id == info.id && !n.gone)
        {
            if self.nodes[i].info.address != info.address {
                self.node_failed(i, lane, "the node serving this request restarted");
            }
            self.nodes[i].info = info;
            self.nodes[i].window = window;
            return;
        }
        tracing::info!(node = %info.id, address = %info.address,
            services = ?info.services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), "remote: a node joined");
        // A slot of a node that left is reused: indexes held by pending requests are only
        // of live nodes (a leaving node's requests are answered when it leaves).
        let counters = self.metrics.node(&info.id, self.index);
        let node = Node {
            counters,
            info,
            ep: None,
            ring: None,
            retry_at: None,
            verified: false,
            hello: None,
            failures: 0,
            outstanding: 0,
            window,
            batch: self.link.batch(wire::REQUESTS),
            gone: false,
        };
        let i = match self.nodes.iter().position(|n| n.gone) {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.connect(i);
    }

    fn leave(&mut self, id: &str, lane: &mut AnswerRings) {
        if let Some(i) = self.nodes.iter().position(|n| n.info.id == id && !n.gone) {
            tracing::warn!(node = %id, held = self.nodes[i].outstanding, "remote: a node left");
            self.node_failed(i, lane, "the node serving this request left the cluster");
            self.nodes[i].gone = true;
            self.nodes[i].retry_at = None;
        }
    }

    pub(super) fn apply(&mut self, c: Change, lane: &mut AnswerRings) {
        match c {
            Change::Listed(nodes) => {
                let listed: HashSet<String> = nodes.iter().map(|n| n.id.clone()).collect();
                let known: Vec<String> = self
                    .nodes
                    .iter()
                    .filter(|n| !n.gone && !listed.contains(&n.info.id))
                    .map(|n| n.info.id.clone())
                    .collect();
                for id in known {
                    self.leave(&id, lane);
                }
                for n in nodes {
                    self.join(n, lane);
                }
            }
            Change::Joined(n) => self.join(n, lane),
            Change::Left(id) => self.leave(&id, lane),
        }
        self.relayout();
    }
}
