//! Membership in etcd. A node puts what it serves under `/cohort/nodes/<id>` with a lease it
//! renews; when it stops renewing (killed, frozen) etcd deletes the key at the lease's end.
//! A front end lists the prefix, then watches it from the revision it listed, and hands
//! every change to its remote engine. etcd gone: the node keeps serving and registers again
//! (a new lease) when etcd is back; the front end keeps the nodes it knows, logs it, and
//! lists again when etcd is back. Nothing here is a consensus of Cohort's own: what etcd
//! says is the membership.
//!
//! What a front end takes from etcd (issue 84): only an entry under a lease (one written
//! without is not a node's: a node always registers under its lease), whose key names the id
//! it carries; anything else under the prefix is ignored, and a key whose value stops being
//! such an entry takes its node out of routing as a deletion would. Routing is by key. The
//! front end then routes to an entry's node only once it has answered a hello sealed under
//! the cluster key (`front`). A node checks its own key under its lease at every renewal and
//! puts its entry back when someone else changed or deleted it.

use anyhow::{Context as _, Result};
use etcd_client::{Client, ConnectOptions, EventType, GetOptions, PutOptions, WatchOptions};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
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

/// How to reach etcd: its endpoints and etcd's own protection, where it has some: a user
/// (etcd's `--auth`, `etcdctl user add`) and TLS (etcd's `--client-cert-auth`,
/// `--trusted-ca-file`).
#[derive(Clone)]
pub struct Etcd {
    pub endpoints: Vec<String>,
    user: Option<(String, String)>,
    tls: Option<etcd_client::TlsOptions>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// The etcd flags of `cohort serve --cluster` and `cohort node` (files, read at start).
#[derive(Clone, Debug, Default)]
pub struct EtcdAccess {
    /// etcd user (with `password_file`).
    pub user: Option<String>,
    /// A file holding that user's password (its first line).
    pub password_file: Option<PathBuf>,
    /// PEM CA certificate that etcd's server certificate must chain to: TLS on.
    pub ca: Option<PathBuf>,
    /// PEM client certificate and key (etcd's `--client-cert-auth`): TLS on.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl Etcd {
    /// `--cluster etcd://...` with the etcd flags: files read, endpoints `https://` where TLS
    /// is on.
    pub fn open(url: &str, access: &EtcdAccess) -> Result<Etcd> {
        let read = |flag: &str, p: &PathBuf| {
            std::fs::read(p).with_context(|| format!("--{flag} {}: cannot read it", p.display()))
        };
        let user = match (&access.user, &access.password_file) {
            (Some(u), Some(f)) => {
                let text = String::from_utf8(read("etcd-password-file", f)?)
                    .context("--etcd-password-file: not UTF-8")?;
                let pw = text.lines().next().unwrap_or("").to_string();
                anyhow::ensure!(
                    !pw.is_empty(),
                    "--etcd-password-file {}: empty",
                    f.display()
                );
                Some((u.clone(), pw))
            }
            (None, None) => None,
            _ => anyhow::bail!("--etcd-user and --etcd-password-file go together"),
        };
        let identity = match (&access.cert, &access.key) {
            (Some(c), Some(k)) => Some(etcd_client::Identity::from_pem(
                read("etcd-cert", c)?,
                read("etcd-key", k)?,
            )),
            (None, None) => None,
            _ => anyhow::bail!("--etcd-cert and --etcd-key go together"),
        };
        let ca = access.ca.as_ref().map(|p| read("etcd-ca", p)).transpose()?;
        let tls = (ca.is_some() || identity.is_some()).then(|| {
            let mut t = etcd_client::TlsOptions::new();
            if let Some(ca) = ca {
                t = t.ca_certificate(etcd_client::Certificate::from_pem(ca));
            }
            if let Some(id) = identity {
                t = t.identity(id);
            }
            t
        });
        let mut endpoints = endpoints(url)?;
        if tls.is_some() {
            for e in &mut endpoints {
                *e = e.replacen("http://", "https://", 1);
            }
        }
        Ok(Etcd {
            endpoints,
            user,
            tls,
        })
    }
}

async fn connect(etcd: &Etcd) -> Result<Client> {
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    if let Some((u, p)) = &etcd.user {
        opts = opts.with_user(u.clone(), p.clone());
    }
    if let Some(t) = &etcd.tls {
        opts = opts.with_tls(t.clone());
    }
    Ok(Client::connect(&etcd.endpoints, Some(opts)).await?)
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
    pub fn start(eps: Etcd, info: NodeInfo, ttl: Duration) -> Registration {
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

async fn register(eps: Etcd, info: NodeInfo, ttl: Duration, stop: Arc<AtomicBool>) {
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
/// or an error. At every renewal the key is read back: changed or deleted by someone else
/// (an entry written over it without this lease, a key deleted), it is put again under the
/// lease, so the node is not kept out of the cluster by one write.
async fn hold_lease(
    eps: &Etcd,
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
        let now = c.get(key, None).await?;
        let ours = now
            .kvs()
            .first()
            .is_some_and(|kv| kv.lease() == lease && kv.value() == value);
        if !ours {
            tracing::warn!(
                key,
                found = ?now.kvs().first().map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                "etcd: this node's entry was changed or deleted by someone else; putting it back"
            );
            c.put(key, value, Some(PutOptions::new().with_lease(lease)))
                .await?;
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
    eps: Etcd,
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

/// The id a key under the prefix names.
fn key_id(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[PREFIX.len().min(key.len())..]).into_owned()
}

/// A node's entry, if `kv` is one a front end takes: Cohort's JSON, under a lease, its key
/// naming its id (module doc).
fn parse(kv: &etcd_client::KeyValue) -> Option<NodeInfo> {
    let key = String::from_utf8_lossy(kv.key());
    let n: NodeInfo = match serde_json::from_slice(kv.value()) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(%key, %e, "etcd: a node entry that is not Cohort's; ignored");
            return None;
        }
    };
    if kv.lease() == 0 {
        tracing::warn!(%key, id = %n.id, address = %n.address,
            "etcd: a node entry without a lease (nodes register under one: written by someone else?); ignored");
        return None;
    }
    if key_id(kv.key()) != n.id {
        tracing::warn!(%key, id = %n.id, address = %n.address,
            "etcd: a node entry whose key does not name its id; ignored");
        return None;
    }
    Some(n)
}

async fn follow(
    eps: &Etcd,
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
            // A key whose value is no longer a node's entry holds no node: whatever it held
            // leaves routing, as on a deletion.
            let change = match ev.event_type() {
                EventType::Put => match parse(kv) {
                    Some(n) => Change::Joined(n),
                    None => Change::Left(key_id(kv.key())),
                },
                EventType::Delete => Change::Left(key_id(kv.key())),
            };
            if tx.send(change).is_err() {
                return Ok(());
            }
        }
    }
}
