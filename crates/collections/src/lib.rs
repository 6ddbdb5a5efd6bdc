//! Live vector collections (issue 82, the CPU path): named collections of points
//! `{id: u64, vector, attributes}` with upsert, delete by ids or by filter, get, count, and
//! k-NN search with a filter over the attributes.
//!
//! - `schema`: settings (dim, metric, element, attribute schema) and the documented limits.
//! - `filter`: filter expressions, checked against the schema, evaluated over `columns`.
//! - `data`: the state in memory (slots, tombstones, id map, the `ivf` lists); `search`: the
//!   IVF-Flat over it (k-means and distances from `cohort_ivf`) and the plan by selectivity.
//! - `ops`, `codec`, `wal`, `snapshot`: the writes, their encoding, the write-ahead log with
//!   group commit and CRC32 per record, snapshots written atomically.
//! - `accel`: the hook through which a device (`cohort-collections-gpu`) serves searches.
//! - `import`: a collection seeded from a static k-NN index file (`cohort index build`), its
//!   centroids kept beside it (`centroids`).
//! - `collection`: the group commit that orders, logs and applies writes; `store`: the
//!   collections of a `--data-dir`; `api`: the REST JSON surface and the native frames'
//!   requests (`frames`: their binary encoding, pure); `grpc`: the calls of Cohort's gRPC
//!   service for them (`cohort-collections-grpc`'s messages).
//!
//! docs/collections.md says what is guaranteed and what is not.

pub mod accel;
pub mod api;
mod centroids;
pub mod codec;
pub mod collection;
pub mod columns;
pub mod data;
pub mod error;
pub mod filter;
pub mod frames;
mod group;
pub mod grpc;
pub mod import;
pub mod ivf;
pub mod ops;
pub mod schema;
pub mod search;
pub mod snapshot;
pub mod store;
pub mod wal;

pub use accel::{Accelerator, AcceleratorFactory, Ran, SearchRequest};
pub use collection::Collection;
pub use error::{Error, Kind, Result};
pub use schema::{AttrType, Element, Metric, Settings};
pub use store::Store;
