//! What a front end's lanes export per node on `/metrics`: requests (parts) and messages
//! sent, ring writes and ring answers, and each lane's outstanding requests there; and the
//! handles a lane resolves once per node so that counting costs no label lookup.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Arc;

/// What a front end's lanes export per node (`/metrics`): the requests (parts, for a split
/// service) and messages sent to it, so parts per message says how well a lane batches; and
/// what each lane has outstanding there, sampled at each send.
#[derive(Clone, Default)]
pub struct RemoteMetrics {
    parts: Family<NodeLabels, Counter>,
    messages: Family<NodeLabels, Counter>,
    ring_writes: Family<NodeLabels, Counter>,
    ring_answers: Family<NodeLabels, Counter>,
    outstanding: Family<LaneLabels, Gauge>,
    /// The server's metrics, for the requests refused because every node is at its window.
    pub(super) server: Option<Arc<cohort_engine::Metrics>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    node: String,
    lane: String,
}

impl RemoteMetrics {
    /// Registers them with the server's metrics.
    pub fn registered(m: &Arc<cohort_engine::Metrics>) -> RemoteMetrics {
        let r = RemoteMetrics {
            server: Some(m.clone()),
            ..RemoteMetrics::default()
        };
        m.register(
            "cohort_cluster_parts_sent",
            "Requests sent to a node (a split service's query counts once per shard)",
            r.parts.clone(),
        );
        m.register(
            "cohort_cluster_messages_sent",
            "Batched messages sent to a node",
            r.messages.clone(),
        );
        m.register(
            "cohort_cluster_ring_writes",
            "Batches written one-sided into a node's ring (the rest of the messages sent went as messages)",
            r.ring_writes.clone(),
        );
        m.register(
            "cohort_cluster_ring_answers",
            "Answer batches a node wrote one-sided into this front end's ring (the rest came as messages)",
            r.ring_answers.clone(),
        );
        m.register(
            "cohort_cluster_outstanding",
            "Requests a lane has in flight at a node, as of its last send there",
            r.outstanding.clone(),
        );
        r
    }

    /// Node `node`'s handles, as lane `lane` counts them.
    pub(super) fn node(&self, node: &str, lane: usize) -> NodeCounters {
        let node_label = NodeLabels {
            node: node.to_string(),
        };
        NodeCounters {
            parts: self.parts.get_or_create(&node_label).clone(),
            messages: self.messages.get_or_create(&node_label).clone(),
            ring_writes: self.ring_writes.get_or_create(&node_label).clone(),
            ring_answers: self.ring_answers.get_or_create(&node_label).clone(),
            outstanding: self
                .outstanding
                .get_or_create(&LaneLabels {
                    node: node.to_string(),
                    lane: lane.to_string(),
                })
                .clone(),
        }
    }
}

/// One node's handles, resolved once (no label lookup per message).
pub(super) struct NodeCounters {
    pub(super) parts: Counter,
    pub(super) messages: Counter,
    pub(super) ring_writes: Counter,
    pub(super) ring_answers: Counter,
    pub(super) outstanding: Gauge,
}
