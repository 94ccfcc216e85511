//! The replication mesh's transport: the gRPC `Mesh` service other nodes subscribe to
//! (`origin`) and one `PeerLink` per configured peer that subscribes to that peer's writes
//! (`link`). The data side — the backlog, the merges, the snapshot — lives in `crate::repl`.
//! The mesh sees the node around it only through `host::Host` (password, transport security,
//! link settings, snapshot frontier, delivery of merges), never the `Server`. The mesh port
//! also serves the operator's `Admin` service, which belongs to the server (`crate::admin`).
//!
//! `Mesh` owns the peer links, keyed by `(host, mesh port)`; `set_peers` replaces the whole
//! list, `add_peer`/`clear_peers` serve `REPLICAOF`. It answers readiness (DESIGN.md,
//! "Readiness"), `INFO replication`, `ROLE` and the admin `Status`.
//!
//! Guarantees: a removed link's task is aborted (its stream closes); the position it reached
//! (origin run id and applied sequence) is remembered per peer, so re-adding a peer resumes by
//! partial resync while the origin's backlog still holds what it missed.

pub mod acks;
pub mod frontier;
mod host;
mod info;
pub mod link;
mod metrics;
pub mod origin;
mod peer;
mod subscribe;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use keymesh_proto as pb;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::hlc::Timestamp;

use crate::db::Store;
use crate::hlc::NodeId;
use crate::repl::log::ReplLog;
pub use acks::AckRequests;
pub use host::{Delivery, Host, LinkSettings};
pub use link::{LinkPhase, LinkStatus, PeerLink};
pub use metrics::MeshMetrics;
pub use origin::SubscriberInfo;
pub use peer::MeshPeer;

/// How long a starting node waits for a configured peer to answer before it declares itself
/// ready without a sync (the cold start of a whole cluster: nobody has data to give). A peer
/// that answers within the grace period must finish its sync before the node is ready.
pub const STARTUP_GRACE: Duration = Duration::from_secs(10);

/// By convention (as Redis Cluster's bus) a node's mesh port is its client port + 10000.
pub use crate::config::MESH_PORT_OFFSET;

/// The largest message a link accepts from an origin: snapshot batches carry whole keys.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The mesh protocol this build speaks (`Hello.protocol_version`, `Welcome.protocol_version`).
/// 1: the first stream (it sent no version); 2: adds the handoff handshake's fields
/// (`NodeStatus.last_seq`, `PeerStatus.applied_seq`/`synced_run_id`); 3: HyperLogLog register
/// effects (`Op.hll`), which a version-2 peer skips (it has no HLLs: PFADD was unknown to it,
/// and it takes them by full sync once upgraded). The rule is in the
/// operator README ("Mixed versions"): bump it for any change an older peer would
/// misread, keep every change readable by the previous version, and a rolling upgrade can
/// move one version at a time.
pub const MESH_PROTOCOL_VERSION: u32 = 3;

/// Recent refusals kept for `INFO` and the admin `Status`.
const REFUSALS_KEPT: usize = 8;

/// Whether this node can stream with a peer that speaks `theirs` (0 means 1: version 1 sent no
/// version). Adjacent versions interoperate, so a rolling upgrade never splits the mesh;
/// anything further apart is refused with a message that says both versions.
pub fn protocol_compatible(theirs: u32) -> Result<(), String> {
    let theirs = theirs.max(1);
    if theirs.abs_diff(MESH_PROTOCOL_VERSION) <= 1 {
        Ok(())
    } else {
        Err(format!(
            "incompatible mesh protocol: the peer speaks version {theirs}, this node {MESH_PROTOCOL_VERSION} (versions {} to {} interoperate); upgrade one version at a time",
            MESH_PROTOCOL_VERSION.saturating_sub(1).max(1),
            MESH_PROTOCOL_VERSION + 1
        ))
    }
}

/// A peer: where its mesh port is. `client_port` is what `REPLICAOF` named, for `INFO`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerAddr {
    pub host: String,
    pub mesh_port: u16,
}

impl PeerAddr {
    /// The peer named by `REPLICAOF host port` (its client port).
    pub fn from_client_port(host: &str, port: u16) -> Result<PeerAddr, String> {
        let mesh_port = port.checked_add(MESH_PORT_OFFSET).ok_or_else(|| format!("port {port} + {MESH_PORT_OFFSET} is not a valid mesh port"))?;
        Ok(PeerAddr { host: host.to_string(), mesh_port })
    }

    /// The client port by convention (mesh port − 10000), for `INFO` and `ROLE`.
    pub fn client_port(&self) -> u16 {
        self.mesh_port.checked_sub(MESH_PORT_OFFSET).unwrap_or(self.mesh_port)
    }

    pub fn label(&self) -> String {
        format!("{}:{}", self.host, self.mesh_port)
    }
}

/// Who this node is on the mesh. `run_id` is the process's; the mesh's current run id
/// (`Mesh::run_id`) starts equal to it and changes when the node wipes its data to resync.
#[derive(Debug, Clone)]
pub struct Identity {
    pub node_name: String,
    pub node_id: NodeId,
    pub run_id: String,
}

/// How often tombstones are collected.
const TOMBSTONE_GC_INTERVAL: Duration = Duration::from_secs(1);

pub struct Mesh {
    pub identity: Identity,
    pub store: Arc<Store>,
    pub log: Arc<ReplLog>,
    /// The node around the mesh (`host`); weak: the node owns the mesh.
    host: Weak<dyn Host>,
    /// This mesh, for the links it starts (they outlive the call that starts them).
    me: Weak<Mesh>,
    links: Mutex<BTreeMap<PeerAddr, PeerLink>>,
    /// The last status of removed links: where they got to (for a partial resync when the
    /// peer is added again) and their counters.
    removed: Mutex<BTreeMap<PeerAddr, LinkStatus>>,
    pub(crate) subscribers: Mutex<Vec<Arc<SubscriberInfo>>>,
    /// `WAIT`'s requests for Acks at once, and its wake-up on each Ack (`acks`).
    pub acks: AckRequests,
    listeners: Mutex<Vec<TcpListener>>,
    /// When the current peer list was first configured (the grace period runs from here).
    peers_since: Mutex<Instant>,
    /// Latched once the node has been ready: losing peers later does not take it out of
    /// service (every node holds all data and accepts writes). Only a wipe unlatches it.
    ready_latched: AtomicBool,
    started: AtomicBool,
    /// The run id subscribers resume by; a new one after a wipe, so nobody resumes into
    /// writes this node no longer holds.
    run_id: Mutex<String>,
    /// When any peer was last heard from, in ms since `epoch` (see `stale`).
    last_contact_ms: AtomicU64,
    /// Silence carried over from before this process started (a loaded snapshot's age, see
    /// `restore_silence`); cleared when a peer is heard from.
    restored_silence_ms: AtomicU64,
    epoch: Instant,
    /// Serialises wipes: concurrent links of a stale node must wipe once, not once each.
    wipe_lock: Mutex<()>,
    /// Whether the last check found the node stale (its streams are closed on the change).
    was_stale: AtomicBool,
    /// The end of a handoff (`crate::handoff`): writes are refused and the node is not ready.
    draining: AtomicBool,
    /// The last subscribers this node refused, and why (newest last).
    refused: Mutex<std::collections::VecDeque<String>>,
    pub metrics: MeshMetrics,
}

impl Mesh {
    pub fn new(host: Weak<dyn Host>, store: Arc<Store>, log: Arc<ReplLog>, identity: Identity, registry: &prometheus::Registry) -> Arc<Mesh> {
        Arc::new_cyclic(|me| Mesh {
            store,
            log,
            host,
            me: me.clone(),
            links: Mutex::new(BTreeMap::new()),
            removed: Mutex::new(BTreeMap::new()),
            subscribers: Mutex::new(Vec::new()),
            acks: AckRequests::default(),
            listeners: Mutex::new(Vec::new()),
            peers_since: Mutex::new(Instant::now()),
            ready_latched: AtomicBool::new(false),
            started: AtomicBool::new(false),
            run_id: Mutex::new(identity.run_id.clone()),
            last_contact_ms: AtomicU64::new(0),
            restored_silence_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            wipe_lock: Mutex::new(()),
            was_stale: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            refused: Mutex::new(std::collections::VecDeque::new()),
            identity,
            metrics: MeshMetrics::new(registry),
        })
    }

    /// The run id subscribers must present to resume (see `wipe_for_resync`).
    pub fn run_id(&self) -> String {
        self.run_id.lock().clone()
    }

    /// The node around the mesh; `None` once it is gone (shutdown).
    pub(crate) fn host(&self) -> Option<Arc<dyn Host>> {
        self.host.upgrade()
    }

    /// Binds the mesh port on every address the client port is bound to (`server::bind`).
    pub fn bind(&self, addrs: &[SocketAddr], mesh_port: u16) -> Result<u16, (SocketAddr, std::io::Error)> {
        let mut listeners = Vec::new();
        let mut port = mesh_port;
        for addr in addrs {
            let addr = SocketAddr::new(addr.ip(), port);
            let listener = crate::server::bind_reuse(addr).and_then(|s| s.listen(511));
            let listener = listener.map_err(|e| (addr, e))?;
            port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
            listeners.push(listener);
        }
        *self.listeners.lock() = listeners;
        Ok(port)
    }

    /// The listeners `bind` opened, for the server to serve the mesh port on (once).
    pub fn take_listeners(&self) -> Vec<TcpListener> {
        std::mem::take(&mut *self.listeners.lock())
    }

    /// The gRPC `Mesh` service peers subscribe to.
    pub fn origin_service(self: &Arc<Self>) -> origin::MeshService {
        origin::service(self.clone())
    }

    /// Starts the links of the configured peers and tombstone collection. Called once, from
    /// `server::run`, after the mesh port is served.
    pub fn start(self: &Arc<Self>, peers: Vec<PeerAddr>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        self.set_peers(peers);
        let mesh = self.clone();
        tokio::spawn(async move { mesh.run_tombstone_gc().await });
    }

    /// Replaces the whole peer list: starts links to new peers, stops removed ones.
    pub fn set_peers(&self, peers: Vec<PeerAddr>) -> Vec<PeerAddr> {
        let wanted: std::collections::BTreeSet<PeerAddr> = peers.into_iter().collect();
        let mut links = self.links.lock();
        if links.is_empty() && !wanted.is_empty() {
            *self.peers_since.lock() = Instant::now();
            // A node that ran without peers was not cut off from anyone (the silence a loaded
            // snapshot carries stays: its node may have been).
            self.last_contact_ms.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        let removed: Vec<PeerAddr> = links.keys().filter(|p| !wanted.contains(*p)).cloned().collect();
        for peer in removed {
            if let Some(link) = links.remove(&peer) {
                self.forget_link(&peer, link);
            }
        }
        let added: Vec<PeerAddr> = wanted.iter().filter(|p| !links.contains_key(*p)).cloned().collect();
        if !added.is_empty() {
            self.store.enable_replication();
        }
        for peer in added {
            let previous = self.removed.lock().remove(&peer);
            info!(peer = %peer.label(), "adding mesh peer");
            links.insert(peer.clone(), PeerLink::start(self, peer, previous));
        }
        links.keys().cloned().collect()
    }

    /// Re-makes every link, keeping where each got to, so that the next connect uses the
    /// current TLS settings; with `close_plain_subscribers`, also ends the streams of
    /// subscribers that came over plain text (they reconnect, with TLS or to be refused).
    pub fn reconnect_all(&self, close_plain_subscribers: bool) {
        let mut links = self.links.lock();
        let peers: Vec<PeerAddr> = links.keys().cloned().collect();
        for peer in peers {
            if let Some(link) = links.remove(&peer) {
                let previous = link.stop();
                links.insert(peer.clone(), PeerLink::start(self, peer, Some(previous)));
            }
        }
        drop(links);
        if close_plain_subscribers {
            self.subscribers.lock().iter().filter(|s| !s.tls).for_each(|s| s.close());
        }
    }

    pub fn add_peer(&self, peer: PeerAddr) {
        let mut peers = self.peers();
        if !peers.contains(&peer) {
            peers.push(peer);
            self.set_peers(peers);
        }
    }

    pub fn clear_peers(&self) {
        self.set_peers(Vec::new());
    }

    pub fn peers(&self) -> Vec<PeerAddr> {
        self.links.lock().keys().cloned().collect()
    }

    fn forget_link(&self, peer: &PeerAddr, link: PeerLink) {
        info!(peer = %peer.label(), "removing mesh peer");
        self.removed.lock().insert(peer.clone(), link.stop());
        self.metrics.forget_peer(&peer.label());
    }

    /// Snapshots of every link's status, in peer order, leaving out links that turned out
    /// to point at this node itself (a peer list may name every member, this one included).
    pub fn link_statuses(&self) -> Vec<(PeerAddr, LinkStatus)> {
        self.links.lock().iter().map(|(p, l)| (p.clone(), l.status())).filter(|(_, s)| s.phase != LinkPhase::Itself).collect()
    }

    /// Records that a peer was heard from.
    pub(crate) fn note_contact(&self) {
        self.last_contact_ms.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.restored_silence_ms.store(0, Ordering::Relaxed);
    }

    /// A loaded snapshot's age since its node last heard from a peer (`persist::load`): the
    /// node was silent that long before this process started, and `stale` counts it.
    pub fn restore_silence(&self, ms: u64) {
        self.restored_silence_ms.store(ms, Ordering::Relaxed);
    }

    /// How long no peer has been heard from, in ms (counting a restored snapshot's silence).
    fn silent_ms(&self) -> u64 {
        let since = (self.epoch.elapsed().as_millis() as u64).saturating_sub(self.last_contact_ms.load(Ordering::Relaxed));
        since + self.restored_silence_ms.load(Ordering::Relaxed)
    }

    /// When a peer was last heard from, in ms since the Unix epoch (now for a node without
    /// peers: it is cut off from nobody). Snapshots record it.
    pub fn last_contact_unix_ms(&self) -> u64 {
        let now = crate::persist::unix_ms();
        if self.links.lock().is_empty() {
            return now;
        }
        now.saturating_sub(self.silent_ms())
    }

    /// DESIGN.md, "Merge semantics": a node that heard from none of its peers for longer than
    /// `tombstone-gc-seconds` may hold keys whose tombstones its peers have since dropped;
    /// merging its data would resurrect them. Such a node refuses subscribers and, at its
    /// first reconnect, wipes and takes a full sync instead (`wipe_for_resync`).
    pub fn stale(&self) -> bool {
        let cap_ms = self.store.tombstone_gc_ms.load(Ordering::Relaxed);
        self.silent_ms() > cap_ms && !self.link_statuses().is_empty()
    }

    /// A node that just went stale closes every stream it has, both directions: a TCP
    /// connection that survives a partition would otherwise resume as if nothing happened
    /// once it heals, carrying this node's stale data out and skipping the wipe. Reconnects
    /// go through `Hello`/`Welcome`, where the rule is applied.
    fn close_streams(&self) {
        warn!("heard from no peer for longer than tombstone-gc-seconds; closing every mesh stream until this node has wiped and resynced");
        for subscriber in self.subscriber_infos() {
            subscriber.close();
        }
        let mut links = self.links.lock();
        let peers: Vec<PeerAddr> = links.keys().cloned().collect();
        for peer in peers {
            if let Some(link) = links.remove(&peer) {
                let status = link.stop();
                links.insert(peer.clone(), PeerLink::start(self, peer, Some(status)));
            }
        }
    }

    /// Called by a link of a stale node that an origin just welcomed for a full sync: drops
    /// the whole keyspace (without replicating the drop: peers hold the truth), takes a new
    /// run id so nobody resumes into writes this node no longer holds, forgets every link's
    /// position and frontier, and is not ready again until a sync finishes. Only the first
    /// caller wipes. Returns whether this call wiped.
    pub(crate) fn wipe_for_resync(&self) -> bool {
        let _once = self.wipe_lock.lock();
        if !self.stale() {
            return false;
        }
        warn!(
            cap_s = self.store.tombstone_gc_ms.load(Ordering::Relaxed) / 1000,
            "no peer was reachable for longer than tombstone-gc-seconds: wiping this node's data and resyncing from the mesh"
        );
        let keys = self.store.wipe();
        *self.run_id.lock() = new_run_id();
        for link in self.links.lock().values() {
            link.reset_position();
        }
        self.ready_latched.store(false, Ordering::Relaxed);
        *self.peers_since.lock() = Instant::now();
        self.note_contact();
        self.metrics.wipes.inc();
        info!(keys, "wiped; resyncing");
        true
    }

    /// This node's stable frontier (see `frontier`): it holds every write of every origin it
    /// subscribes to, and its own, stamped at or below it.
    pub fn stable_frontier(&self) -> Timestamp {
        let own = frontier::weaken(self.store.hlc.now());
        self.link_statuses().iter().map(|(_, s)| s.frontier).fold(own, Timestamp::min)
    }

    /// What this node acknowledges to its origins (`Ack.stable_hlc`): its stable frontier,
    /// capped by that of the snapshot a restart would load (`persist`), so that a node restored
    /// from its snapshot finds on its peers every tombstone it needs (they drop none it has
    /// not acknowledged).
    pub fn durable_frontier(&self) -> Timestamp {
        let cap = self.host().map_or(Timestamp::MAX, |h| h.snapshot_frontier_cap());
        self.stable_frontier().min(cap)
    }

    /// Tombstones at or below this version can be dropped: this node's durable frontier and
    /// the one every configured peer last reported in its Acks have passed them. 0 while any
    /// peer is not subscribed to this node.
    pub fn gc_horizon(&self) -> Timestamp {
        let subscribers = self.subscriber_infos();
        let reported = |name: &str| {
            subscribers.iter().filter(|s| !name.is_empty() && s.node_name == name).map(|s| s.stable_hlc.load(Ordering::Relaxed)).max().unwrap_or(0)
        };
        self.link_statuses().iter().map(|(_, s)| reported(&s.node_name)).fold(self.durable_frontier(), Timestamp::min)
    }

    /// Once a second, drops the tombstones every peer is past, and those older than the
    /// `tombstone-gc-seconds` cap.
    async fn run_tombstone_gc(self: Arc<Self>) {
        let mut tick = tokio::time::interval(TOMBSTONE_GC_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut field_pass = 0;
        loop {
            tick.tick().await;
            if !self.store.replicating() {
                continue;
            }
            field_pass += 1;
            let stale = self.stale();
            if stale && !self.was_stale.swap(true, Ordering::Relaxed) {
                self.close_streams();
            } else if !stale {
                self.was_stale.store(false, Ordering::Relaxed);
            }
            let (store, horizon, now) = (self.store.clone(), self.gc_horizon(), self.store.hlc.wall_ms());
            let dropped = tokio::task::spawn_blocking(move || crate::db::expire::collect_tombstones(&store, now, horizon, field_pass)).await.unwrap_or(0);
            self.metrics.tombstones_collected.inc_by(dropped as u64);
        }
    }

    /// DESIGN.md, "Readiness": ready once the node has finished its initial sync from at least
    /// one configured peer, or has no peers, or none of them answered within `STARTUP_GRACE`
    /// (and none is syncing now). Once ready it stays ready. Never before `start`: until then
    /// the mesh holds no link to say it has peers, and "no peers" would latch ready a node
    /// that has some (a restarted node asked between the snapshot's load and the mesh's start
    /// answered 200 before syncing).
    pub fn readiness(&self) -> Result<(), String> {
        if self.draining() {
            return Err("leaving the mesh: writes are refused while peers take this node's last writes".to_string());
        }
        if !self.started.load(Ordering::SeqCst) {
            return Err("the mesh has not started yet".to_string());
        }
        if self.ready_latched.load(Ordering::Relaxed) {
            return Ok(());
        }
        let statuses = self.link_statuses();
        let ready = if statuses.is_empty() || statuses.iter().any(|(_, s)| s.initial_sync_done) {
            Ok(())
        } else {
            let waited = self.peers_since.lock().elapsed();
            let syncing = statuses.iter().filter(|(_, s)| s.phase == LinkPhase::Syncing).count();
            if waited >= STARTUP_GRACE && syncing == 0 {
                Ok(())
            } else if syncing > 0 {
                Err(format!("initial sync in progress from {syncing} of {} peers", statuses.len()))
            } else {
                Err(format!(
                    "waiting for an initial sync from one of {} peers ({}s grace left)",
                    statuses.len(),
                    STARTUP_GRACE.saturating_sub(waited).as_secs()
                ))
            }
        };
        if ready.is_ok() {
            self.ready_latched.store(true, Ordering::Relaxed);
        }
        ready
    }

    /// Records a refused subscriber for `INFO` and the admin `Status`, and counts it.
    pub(crate) fn note_refusal(&self, subscriber: &str, reason: &'static str, message: &str) {
        warn!(%subscriber, reason, %message, "mesh subscriber refused");
        self.metrics.refused_subscribers.with_label_values(&[reason]).inc();
        let mut refused = self.refused.lock();
        if refused.len() == REFUSALS_KEPT {
            refused.pop_front();
        }
        refused.push_back(format!("{subscriber}: {message}"));
    }

    /// The last refusals, oldest first.
    pub fn refusals(&self) -> Vec<String> {
        self.refused.lock().iter().cloned().collect()
    }

    /// The sequence of the last write this node originated (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.log.next_seq().saturating_sub(1)
    }

    /// The end of a handoff (`crate::handoff`): the node stops taking writes, so that nothing
    /// is acknowledged here that its peers will never merge; reads still work, and `/readyz`
    /// answers 503.
    ///
    /// Sequentially consistent, as `draining` and the notes of writes on their way
    /// (`client::ClientWrites::admit`): see `crate::handoff`.
    pub fn set_draining(&self, draining: bool) {
        if self.draining.swap(draining, Ordering::SeqCst) != draining {
            info!(draining, "mesh draining changed");
        }
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Has the node finished an initial sync from some peer (or needs none)?
    pub fn synced(&self) -> bool {
        let statuses = self.link_statuses();
        statuses.is_empty() || statuses.iter().any(|(_, s)| s.initial_sync_done)
    }

    /// The admin API's view of this node.
    pub fn status(&self) -> pb::NodeStatus {
        let peers = self
            .link_statuses()
            .into_iter()
            .map(|(peer, s)| pb::PeerStatus {
                peer: Some(pb::Peer { host: peer.host.clone(), port: peer.mesh_port as u32 }),
                node_name: s.node_name.clone(),
                run_id: s.run_id.clone(),
                link: s.phase.as_str().to_string(),
                lag_ops: s.lag(),
                last_ack_age_ms: s.last_ack_age_ms(),
                clock_skew_ms: s.skew_ms,
                initial_sync_done: s.initial_sync_done,
                synced_run_id: s.synced_run_id.clone(),
                applied_seq: s.applied_seq,
                error: if s.phase == LinkPhase::Connected { String::new() } else { s.last_error.clone() },
            })
            .collect();
        let store = &self.store;
        pb::NodeStatus {
            node_name: self.identity.node_name.clone(),
            run_id: self.run_id(),
            ready: self.readiness().is_ok(),
            synced: self.synced(),
            peers,
            keys: (0..store.databases()).map(|db| store.dbsize(db) as u64).sum(),
            used_memory: crate::memory::used_memory(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            skewed_receives: store.hlc.skewed_receives(),
            draining: self.draining(),
            last_seq: self.last_seq(),
            protocol_version: MESH_PROTOCOL_VERSION,
            refused: self.refusals(),
            ..pb::NodeStatus::default()
        }
    }

    /// The origin side: who subscribes to this node's writes.
    pub fn subscriber_infos(&self) -> Vec<Arc<SubscriberInfo>> {
        self.subscribers.lock().clone()
    }

    /// Copies link and subscriber state into the Prometheus metrics (before a scrape).
    pub fn refresh_metrics(&self) {
        self.metrics.refresh(self);
    }

    /// The `# Replication` section of `INFO`, with KeyDB's fields.
    pub fn info_replication(&self) -> String {
        info::replication(self)
    }

    /// The `ROLE` reply, as KeyDB gives it.
    pub fn role(&self) -> crate::frame::Frame {
        info::role(self)
    }

    pub(crate) fn repl_timeout(&self) -> Duration {
        self.host().map_or(Duration::from_secs(60), |h| h.link_settings().repl_timeout)
    }
}

/// A fresh 40-hex-digit run id, as Redis's.
pub fn new_run_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..40).map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0')).collect()
}
