//! Membership in etcd. A node puts what it serves under `/cohort/nodes/<id>` with a lease it
//! renews; when it stops renewing (killed, frozen) etcd deletes the key at the lease's end.
//! A front end lists the prefix, then watches it from the revision it listed, and hands
//! every change to its remote engine. etcd gone: the node keeps serving and registers again
//! (a new lease) when etcd is back; the front end keeps the nodes it knows, logs it, and
//! lists again when etcd is back. Nothing here is a consensus of Cohort's own: what etcd
//! says is the membership.

use anyhow::{Context as _, Result};
use etcd_client::{Client, ConnectOptions, EventType, GetOptions, PutOptions, WatchOptions};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const PREFIX: &str = "/cohort/nodes/";

/// What a node registers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: String,
    /// Where its UCX listener takes front ends.
    pub address: SocketAddr,
    /// The services it serves, each with its engine.
    pub services: Vec<ServiceAt>,
    /// Its GPUs (name and ordinal), empty for a CPU node.
    pub devices: Vec<String>,
    /// Requests a front end may have in flight to it at once.
    pub capacity: u32,
    /// Its UCX worker address (hex): a front end that polls connects by it, so that UCX may
    /// use shared memory between processes of one machine (through the listener it does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ucx_address: Option<String>,
}

/// Bytes as lowercase hex (a UCX address in JSON).
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex back to bytes; None if it is not hex.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&b)).unwrap(), b);
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex("é1"), None);
    }

    #[test]
    fn cluster_urls_name_etcd_endpoints() {
        assert_eq!(
            endpoints("etcd://a:1,b:2").unwrap(),
            ["http://a:1", "http://b:2"]
        );
        assert!(endpoints("http://a:1").is_err());
        assert!(endpoints("etcd://").is_err());
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAt {
    pub name: String,
    pub id: u16,
    pub engine: String,
    /// The shard of the service this node holds (knn: a part of the index's lists); absent:
    /// the whole service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<cohort_engine::split::ShardOf>,
}

/// A change a front end learns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The whole membership as listed (after a start or an etcd outage).
    Listed(Vec<NodeInfo>),
    Joined(NodeInfo),
    Left(String),
}

/// `etcd://host:port[,host:port...]` to etcd's client endpoints.
pub fn endpoints(url: &str) -> Result<Vec<String>> {
    let rest = url
        .strip_prefix("etcd://")
        .with_context(|| format!("--cluster {url:?}: expected etcd://HOST:PORT[,HOST:PORT...]"))?;
    let eps: Vec<String> = rest
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| format!("http://{s}"))
        .collect();
    anyhow::ensure!(!eps.is_empty(), "--cluster {url:?} names no etcd endpoint");
    Ok(eps)
}

async fn connect(eps: &[String]) -> Result<Client> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    Ok(Client::connect(eps, Some(opts)).await?)
}

/// A runtime thread of its own: membership never runs on a serving thread.
fn spawn<F>(name: &str, f: F) -> std::thread::JoinHandle<()>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(f)
        })
        .expect("spawn a membership thread")
}

/// A node's registration, renewed until dropped (then revoked, so front ends learn at once).
pub struct Registration {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Registration {
    /// Registers `info` under a lease of `ttl`, renewed every third of it.
    pub fn start(eps: Vec<String>, info: NodeInfo, ttl: Duration) -> Registration {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = spawn(
            "etcd-register",
            async move { register(eps, info, ttl, s).await },
        );
        Registration {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
    }
}

async fn register(eps: Vec<String>, info: NodeInfo, ttl: Duration, stop: Arc<AtomicBool>) {
    let key = format!("{PREFIX}{}", info.id);
    let value = serde_json::to_vec(&info).expect("NodeInfo serialises");
    let ttl_s = ttl.as_secs().max(1) as i64;
    let mut was_down = false;
    while !stop.load(Ordering::Acquire) {
        match hold_lease(&eps, &key, &value, ttl_s, &stop).await {
            Ok(()) => return,
            Err(e) => {
                if !was_down {
                    tracing::warn!(error = %format!("{e:#}"), "etcd: registration lost; serving on and registering again");
                }
                was_down = true;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Grants a lease, puts the key under it and renews it until `stop` (Ok, the lease revoked)
/// or an error.
async fn hold_lease(
    eps: &[String],
    key: &str,
    value: &[u8],
    ttl_s: i64,
    stop: &AtomicBool,
) -> Result<()> {
    let mut c = connect(eps).await?;
    let lease = c.lease_grant(ttl_s, None).await?.id();
    c.put(key, value, Some(PutOptions::new().with_lease(lease)))
        .await?;
    tracing::info!(key, lease, ttl_s, "etcd: registered");
    let (mut keeper, mut acks) = c.lease_keep_alive(lease).await?;
    let every = Duration::from_millis((ttl_s as u64 * 1000 / 3).max(100));
    while !stop.load(Ordering::Acquire) {
        keeper.keep_alive().await?;
        let ack = tokio::time::timeout(every, acks.message())
            .await
            .context("no keep-alive answer")??;
        match ack {
            Some(a) if a.ttl() > 0 => {}
            _ => anyhow::bail!("the lease expired"),
        }
        // Sleep in short steps so a stop is seen quickly.
        let until = tokio::time::Instant::now() + every;
        while tokio::time::Instant::now() < until && !stop.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    c.lease_revoke(lease).await.ok();
    Ok(())
}

/// A front end's view: lists, then watches, handing each change to `tx`; runs until the
/// receiver is gone.
pub fn watch(
    eps: Vec<String>,
    tx: crossbeam_channel::Sender<Change>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    spawn("etcd-watch", async move {
        let mut was_down = false;
        while !stop.load(Ordering::Acquire) {
            match follow(&eps, &tx, &mut was_down, &stop).await {
                Ok(()) => return, // the remote engine is gone or stopping
                Err(e) => {
                    if !was_down {
                        tracing::warn!(error = %format!("{e:#}"),
                            "etcd: membership unreachable; routing on to the nodes already known");
                    }
                    was_down = true;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
}

fn parse(kv: &etcd_client::KeyValue) -> Option<NodeInfo> {
    match serde_json::from_slice(kv.value()) {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!(key = %String::from_utf8_lossy(kv.key()), %e, "etcd: a node entry that is not Cohort's; ignored");
            None
        }
    }
}

async fn follow(
    eps: &[String],
    tx: &crossbeam_channel::Sender<Change>,
    was_down: &mut bool,
    stop: &AtomicBool,
) -> Result<()> {
    let mut c = connect(eps).await?;
    let listed = c.get(PREFIX, Some(GetOptions::new().with_prefix())).await?;
    let rev = listed.header().map_or(0, |h| h.revision());
    let nodes: Vec<NodeInfo> = listed.kvs().iter().filter_map(parse).collect();
    if *was_down {
        tracing::info!(
            nodes = nodes.len(),
            "etcd: reachable again; membership listed anew"
        );
        *was_down = false;
    }
    if tx.send(Change::Listed(nodes)).is_err() {
        return Ok(());
    }
    let mut stream = c
        .watch(
            PREFIX,
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(rev + 1),
            ),
        )
        .await?;
    loop {
        // A quiet etcd is checked now and then: a watch on a dead connection may never end.
        let msg = match tokio::time::timeout(Duration::from_secs(1), stream.message()).await {
            Ok(m) => m?,
            Err(_) => {
                if stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                c.status().await?;
                continue;
            }
        };
        let Some(resp) = msg else {
            anyhow::bail!("the watch ended");
        };
        if resp.canceled() {
            anyhow::bail!("etcd cancelled the watch");
        }
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let change = match ev.event_type() {
                EventType::Put => match parse(kv) {
                    Some(n) => Change::Joined(n),
                    None => continue,
                },
                EventType::Delete => Change::Left(
                    String::from_utf8_lossy(&kv.key()[PREFIX.len().min(kv.key().len())..])
                        .into_owned(),
                ),
            };
            if tx.send(change).is_err() {
                return Ok(());
            }
        }
    }
}
