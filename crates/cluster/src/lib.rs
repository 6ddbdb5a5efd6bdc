//! Remote GPU nodes behind a front end (Lynx's remote accelerators): `cohort node` serves its
//! engines through a UCX listener ([`node`]), `cohort serve --cluster` runs a remote engine
//! ([`front`]) that forwards each admitted request to a node serving its service and writes
//! the node's answer back, membership in etcd ([`membership`]), the messages in `cohort_proto::node_wire`.

pub mod front;
pub mod link;
pub mod membership;
pub mod node;
pub mod ring;
mod tuning;
pub mod wait;

pub use cohort_proto::node_wire as wire;
