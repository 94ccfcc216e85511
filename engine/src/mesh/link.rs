//! `PeerLink`: this node's subscription to one peer's writes.
//!
//! One task per configured peer. At every (re)connect it resolves the peer's DNS name afresh
//! (pod IPs change; nothing is cached), opens a gRPC stream with a connect timeout, and sends
//! `Hello` with the origin run it last completed a sync from and the next sequence it needs.
//! The origin answers with a partial resync (the live stream from that sequence) or a full
//! sync (snapshot batches, `SyncDone`, then the live stream). Every op is decoded where it lies
//! in the received batch (`repl::wire::decode_in`, the stream's edge: a string's write
//! borrowed from the frame, any other into an `Effect`) and merged with `repl::merge` (shard
//! locks are taken briefly inside it, never across an await); every batch and heartbeat HLC
//! goes through `hlc.receive`. Acks go back at most every
//! `ACK_INTERVAL` while ops arrive, at once when the origin asks (a heartbeat with `ack_now`:
//! a `WAIT` waits, `mesh::acks`), and at least every `ACK_KEEPALIVE` so the origin can tell a
//! live subscriber from a dead one. On any error the link backs off (100 ms doubling to 2 s)
//! and reconnects, forever, until the link is removed (its task is aborted).
//!
//! A link detects a silent origin (a stopped process, a partition that drops packets) when
//! nothing arrived for `repl-timeout` seconds, although the origin sends heartbeats every
//! 200 ms.

use std::ops::Range;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keymesh_proto as pb;
use keymesh_proto::origin_message::Body;
use parking_lot::Mutex;
use prost::Message;
use smallvec::SmallVec;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use super::frontier::OriginFrontier;
use super::{Delivery, Host, Identity, Mesh, PeerAddr, MAX_MESSAGE_BYTES};
use crate::db::{HashedKey, Store};
use crate::hlc::Timestamp;
use crate::repl::merge::{apply_chunk, ApplyOutcome, Recorder};
use crate::repl::wire::{decode_in, Decoded, WireError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// From connecting to the origin's `Welcome` (covers a peer whose process is stopped: the
/// kernel accepts the connection but nobody answers).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often a link acks while ops arrive. Only `INFO`'s offsets and tombstone GC read these
/// Acks; a `WAIT` asks for one at once. Acking every 1,024 ops as well (until 2026-12-04) made
/// ~1,000 Acks per million writes per peer under load, each a write, a read and wake-ups on
/// both sides.
const ACK_INTERVAL: Duration = Duration::from_millis(50);
const ACK_KEEPALIVE: Duration = Duration::from_secs(1);
/// The largest HTTP/2 frame this side accepts (the protocol's default is 16 KiB). The origin
/// then sends a batch of the stream (up to ~64 KiB) as one frame in one writev, instead of a
/// frame and a syscall every 16 KiB.
const MAX_FRAME_BYTES: u32 = 256 << 10;
/// Batches larger than this (encoded) are merged on a blocking thread, off the async workers
/// (a few large values); smaller ones on the link's task, `INLINE_APPLY_OPS` ops at a time
/// with a yield between: a live batch (at most `origin::BATCH_OPS`) in one go, ~0.5 ms of
/// merging at most. Yielding every 64 ops made the runtime wake the other worker for
/// each yield, which then often took the link's task over: 3x the context switches and
/// syscalls per merged write (docs/benchmarks.md, "Seventh pass").
const INLINE_APPLY_BYTES: u64 = 256 << 10;
const INLINE_APPLY_OPS: usize = super::origin::BATCH_OPS;

/// Where a link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkPhase {
    #[default]
    Connecting,
    /// Receiving a full sync's snapshot.
    Syncing,
    /// Streaming live writes.
    Connected,
    /// Failed; waiting to reconnect.
    Down,
    /// The peer turned out to be this node (a peer list may name every member); the link
    /// stopped and counts for nothing.
    Itself,
}

impl LinkPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkPhase::Connecting => "connecting",
            LinkPhase::Syncing => "syncing",
            LinkPhase::Connected => "connected",
            LinkPhase::Down => "down",
            LinkPhase::Itself => "self",
        }
    }

    pub const ALL: [LinkPhase; 5] = [LinkPhase::Connecting, LinkPhase::Syncing, LinkPhase::Connected, LinkPhase::Down, LinkPhase::Itself];
}

/// Everything a link knows, for `INFO`, `Status` and metrics.
#[derive(Debug, Clone, Default)]
pub struct LinkStatus {
    pub phase: LinkPhase,
    /// The origin's node name and current run id (from its last `Welcome`).
    pub node_name: String,
    pub run_id: String,
    /// The origin run this node holds a complete sync from (empty: needs a full sync).
    pub synced_run_id: String,
    /// Highest origin sequence merged here (meaningful with `synced_run_id`).
    pub applied_seq: u64,
    /// Highest sequence the origin reported.
    pub origin_last_seq: u64,
    pub last_ack: Option<Instant>,
    pub last_io: Option<Instant>,
    /// Origin wall clock minus ours, from the last heartbeat.
    pub skew_ms: i64,
    pub initial_sync_done: bool,
    pub partial_resyncs: u64,
    pub full_resyncs: u64,
    pub full_sync_bytes: u64,
    pub stream_bytes: u64,
    pub ops_applied: u64,
    pub ops_superseded: u64,
    /// HLCs from this origin too far ahead of our wall clock to move our clock.
    pub skewed_receives: u64,
    pub last_error: String,
    pub down_since: Option<Instant>,
    pub sync_keys: u64,
    /// This node holds every write of the origin stamped at or below this (`mesh::frontier`).
    pub frontier: Timestamp,
}

impl LinkStatus {
    pub fn lag(&self) -> u64 {
        self.origin_last_seq.saturating_sub(self.applied_seq)
    }

    /// Milliseconds since this node last acknowledged the origin's writes (0 if never).
    pub fn last_ack_age_ms(&self) -> u64 {
        self.last_ack.map_or(0, |t| t.elapsed().as_millis() as u64)
    }
}

#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("failed to resolve {0}: {1}")]
    Resolve(String, String),
    #[error("failed to connect to {0}: {1}")]
    Connect(String, String),
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("origin refused the stream: {0}")]
    Refused(String),
    #[error("{0}")]
    Incompatible(String),
    #[error("origin stream failed: {0}")]
    Stream(String),
    #[error("origin closed the stream")]
    Closed,
    #[error("no answer from the origin for {0:?}")]
    Timeout(Duration),
    #[error("protocol error: {0}")]
    Protocol(&'static str),
    #[error("protocol error: {0}")]
    Malformed(String),
    #[error("server is shutting down")]
    Stopped,
    #[error("the peer is this node itself")]
    Itself,
}

/// A running link; dropping it does not stop it, `stop` does.
pub struct PeerLink {
    status: Arc<Mutex<LinkStatus>>,
    task: JoinHandle<()>,
}

impl PeerLink {
    /// Starts a link; `previous` is the final status of an earlier link to the same peer,
    /// whose position (origin run id, applied sequence) and counters it continues.
    pub fn start(mesh: &Mesh, peer: PeerAddr, previous: Option<LinkStatus>) -> PeerLink {
        let mut status = previous.unwrap_or_default();
        status.phase = LinkPhase::Connecting;
        status.down_since = Some(Instant::now());
        status.last_ack = None;
        let status = Arc::new(Mutex::new(status));
        let ctx = LinkCtx { mesh: mesh.me.clone(), identity: mesh.identity.clone(), peer, status: status.clone() };
        PeerLink { status, task: tokio::spawn(ctx.run()) }
    }

    pub fn status(&self) -> LinkStatus {
        self.status.lock().clone()
    }

    /// Forgets where the link got to (after this node wiped its data): the next connect takes
    /// a full sync, and the frontier starts over.
    pub fn reset_position(&self) {
        let mut s = self.status.lock();
        s.synced_run_id.clear();
        s.applied_seq = 0;
        s.frontier = 0;
        s.initial_sync_done = false;
    }

    /// Stops the link (its stream closes) and returns where it got to.
    pub fn stop(self) -> LinkStatus {
        self.task.abort();
        self.status()
    }
}

struct LinkCtx {
    mesh: Weak<Mesh>,
    identity: Identity,
    peer: PeerAddr,
    status: Arc<Mutex<LinkStatus>>,
}

impl LinkCtx {
    async fn run(self) {
        let mut backoff = MIN_BACKOFF;
        // A refusal repeats at every reconnect: it is logged once per distinct message.
        let mut last_refusal = String::new();
        loop {
            self.status.lock().phase = LinkPhase::Connecting;
            let mut welcomed = false;
            let error = self.session(&mut welcomed).await;
            if matches!(error, LinkError::Stopped) {
                return;
            }
            if matches!(error, LinkError::Itself) {
                info!(peer = %self.peer.label(), "mesh peer is this node itself; ignoring it");
                self.status.lock().phase = LinkPhase::Itself;
                return;
            }
            if welcomed {
                backoff = MIN_BACKOFF;
            }
            {
                let mut s = self.status.lock();
                if s.phase != LinkPhase::Down {
                    s.down_since = Some(Instant::now());
                }
                s.phase = LinkPhase::Down;
                s.last_error = error.to_string();
            }
            if welcomed {
                warn!(peer = %self.peer.label(), error = %error, "mesh link lost; reconnecting");
            } else if matches!(error, LinkError::Refused(_) | LinkError::Incompatible(_) | LinkError::Auth(_)) {
                if error.to_string() != last_refusal {
                    last_refusal = error.to_string();
                    warn!(peer = %self.peer.label(), error = %error, "mesh peer refused the link");
                }
            } else {
                debug!(peer = %self.peer.label(), error = %error, "mesh link failed");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn connect(&self) -> Result<Channel, LinkError> {
        let label = self.peer.label();
        // Resolved at every connect: a restarted pod comes back with a new IP.
        let addrs = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((self.peer.host.as_str(), self.peer.mesh_port)))
            .await
            .map_err(|_| LinkError::Resolve(label.clone(), "timed out".into()))?
            .map_err(|e| LinkError::Resolve(label.clone(), e.to_string()))?;
        let mut last = LinkError::Resolve(label.clone(), "no addresses".into());
        // With `tls-replication yes` the link is mutual TLS: it verifies the peer against the
        // CA and presents this node's certificate (the current one: links are re-made at every
        // reconnect and when TLS settings change).
        let tls = self.mesh.upgrade().and_then(|m| m.host()).and_then(|h| h.link_tls(&self.peer.host));
        for addr in addrs {
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
                .map_err(|e| LinkError::Connect(label.clone(), e.to_string()))?
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true)
                .max_frame_size(MAX_FRAME_BYTES)
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_while_idle(true);
            if let Some(config) = tls.clone() {
                endpoint = endpoint.tls_config(config).map_err(|e| LinkError::Connect(label.clone(), error_chain(&e)))?;
            }
            match endpoint.connect().await {
                Ok(channel) => return Ok(channel),
                Err(e) => last = LinkError::Connect(format!("{label} ({addr})"), error_chain(&e)),
            }
        }
        Err(last)
    }

    /// One connection: handshake, then merge until the stream fails. Returns why it ended.
    async fn session(&self, welcomed: &mut bool) -> LinkError {
        let Some((mesh, host)) = self.mesh.upgrade().and_then(|m| Some((m.clone(), m.host()?))) else { return LinkError::Stopped };
        match self.stream(&mesh, &host, welcomed).await {
            Ok(()) => LinkError::Closed,
            Err(e) => e,
        }
    }

    async fn stream(&self, mesh: &Arc<Mesh>, host: &Arc<dyn Host>, welcomed: &mut bool) -> Result<(), LinkError> {
        let super::LinkSettings { masterauth, repl_timeout } = host.link_settings();
        // A stream silent for longer than the tombstone cap must not resume when the network
        // heals: the origin may since have gone stale (`Mesh::stale`), and what it had queued
        // for us while cut off would bypass the wipe. Such a session ends; the reconnect goes
        // through Hello/Welcome.
        let tombstone_cap = Duration::from_millis(mesh.store.tombstone_gc_ms.load(std::sync::atomic::Ordering::Relaxed));
        let repl_timeout = repl_timeout.min(tombstone_cap);
        let stale = mesh.stale();
        let (origin_run_id, next_seq) = {
            let s = self.status.lock();
            // A stale node will wipe: it needs a full sync, whatever it held.
            if stale {
                (String::new(), 0)
            } else {
                (s.synced_run_id.clone(), s.applied_seq + 1)
            }
        };
        let hello = pb::Hello {
            node_name: self.identity.node_name.clone(),
            node_id: self.identity.node_id,
            password: masterauth,
            origin_run_id: origin_run_id.clone(),
            next_seq,
            stale,
            protocol_version: super::MESH_PROTOCOL_VERSION,
        };
        let (up, up_rx) = mpsc::channel(8);
        let _ = up.try_send(pb::SubscriberMessage { body: Some(pb::subscriber_message::Body::Hello(hello)) });
        let handshake = async {
            let mut channel = self.connect().await?;
            let mut down = super::subscribe::subscribe(&mut channel, up_rx, MAX_MESSAGE_BYTES).await.map_err(|status| match status.code() {
                tonic::Code::Unauthenticated => LinkError::Auth(status.message().to_string()),
                tonic::Code::Unavailable | tonic::Code::Unknown => LinkError::Connect(self.peer.label(), status.message().to_string()),
                _ => LinkError::Refused(status.message().to_string()),
            })?;
            match down.message().await {
                Ok(Some(pb::OriginMessage { body: Some(Body::Welcome(w)) })) => Ok((down, w)),
                Ok(_) => Err(LinkError::Protocol("expected Welcome first")),
                Err(status) => Err(LinkError::Stream(status.message().to_string())),
            }
        };
        let (mut down, welcome) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await.map_err(|_| LinkError::Timeout(HANDSHAKE_TIMEOUT))??;
        if welcome.run_id == mesh.run_id() {
            return Err(LinkError::Itself);
        }
        super::protocol_compatible(welcome.protocol_version).map_err(LinkError::Incompatible)?;
        *welcomed = true;
        let full_sync = welcome.full_sync;
        if full_sync && stale {
            mesh.wipe_for_resync();
        }
        {
            let mut s = self.status.lock();
            s.node_name = welcome.node_name.clone();
            s.run_id = welcome.run_id.clone();
            s.last_io = Some(Instant::now());
            s.last_error.clear();
            if full_sync {
                s.phase = LinkPhase::Syncing;
                s.full_resyncs += 1;
                // Until SyncDone this node holds no complete sync of this run, and the previous
                // run's sequences mean nothing for this one (a restarted origin counts from 1:
                // keeping the old highest sequence would show a lag that never goes away).
                s.synced_run_id.clear();
                s.applied_seq = 0;
                s.origin_last_seq = 0;
            } else {
                s.phase = LinkPhase::Connected;
                s.partial_resyncs += 1;
                s.down_since = None;
            }
        }
        info!(peer = %self.peer.label(), origin = %welcome.node_name, full_sync, start_seq = welcome.start_seq, "mesh link established");
        let mut session = Session {
            mesh: mesh.clone(),
            host: host.clone(),
            status: self.status.clone(),
            up,
            expected_seq: welcome.start_seq,
            syncing: full_sync,
            start_seq: welcome.start_seq,
            run_id: welcome.run_id,
            acked_seq: 0,
            acked_at: Instant::now(),
            last_io: Instant::now(),
            frontier: OriginFrontier::default(),
        };
        let mut tick = tokio::time::interval(ACK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = down.message() => match message {
                    Ok(Some(m)) => session.handle(m).await?,
                    Ok(None) => return Ok(()),
                    Err(status) => return Err(LinkError::Stream(format!("{}: {}", status.code(), status.message()))),
                },
                _ = tick.tick() => {
                    if session.last_io.elapsed() > repl_timeout {
                        return Err(LinkError::Timeout(repl_timeout));
                    }
                    session.maybe_ack(false);
                }
            }
        }
    }
}

/// One established stream's state.
struct Session {
    mesh: Arc<Mesh>,
    host: Arc<dyn Host>,
    status: Arc<Mutex<LinkStatus>>,
    up: mpsc::Sender<pb::SubscriberMessage>,
    /// The sequence the next live batch must start at.
    expected_seq: u64,
    syncing: bool,
    start_seq: u64,
    run_id: String,
    acked_seq: u64,
    acked_at: Instant,
    last_io: Instant,
    frontier: OriginFrontier,
}

impl Session {
    async fn handle(&mut self, message: pb::OriginMessage) -> Result<(), LinkError> {
        self.last_io = Instant::now();
        self.mesh.note_contact();
        let size = message.encoded_len() as u64;
        let mut asked = false;
        match message.body {
            Some(Body::Batch(batch)) => self.batch(batch, size).await?,
            Some(Body::Heartbeat(hb)) => {
                asked = hb.ack_now;
                let skewed = !self.mesh.store.hlc.receive(hb.hlc);
                let skew = hb.wall_ms as i64 - self.mesh.store.hlc.wall_ms() as i64;
                let mut s = self.status.lock();
                s.skew_ms = skew;
                s.skewed_receives += skewed as u64;
                s.origin_last_seq = s.origin_last_seq.max(hb.last_seq);
                s.last_io = Some(self.last_io);
                let applied = if self.syncing { 0 } else { s.applied_seq };
                if let Some(reached) = self.frontier.heartbeat(hb.last_seq, hb.hlc, applied) {
                    s.frontier = s.frontier.max(reached);
                }
            }
            Some(Body::SyncDone(done)) => {
                if !self.syncing {
                    return Err(LinkError::Protocol("SyncDone outside a full sync"));
                }
                self.syncing = false;
                let mut s = self.status.lock();
                s.phase = LinkPhase::Connected;
                s.initial_sync_done = true;
                s.synced_run_id = self.run_id.clone();
                s.applied_seq = self.start_seq.saturating_sub(1);
                s.origin_last_seq = s.origin_last_seq.max(s.applied_seq);
                s.sync_keys = done.keys;
                s.down_since = None;
                if let Some(reached) = self.frontier.applied(s.applied_seq) {
                    s.frontier = s.frontier.max(reached);
                }
                info!(origin = %s.node_name, keys = done.keys, bytes = done.bytes, "full sync finished");
            }
            Some(Body::Welcome(_)) => return Err(LinkError::Protocol("a second Welcome")),
            None => {}
        }
        self.maybe_ack(asked);
        Ok(())
    }

    async fn batch(&mut self, batch: pb::EncodedBatch, size: u64) -> Result<(), LinkError> {
        let snapshot = batch.first_seq == 0;
        if snapshot && !self.syncing {
            return Err(LinkError::Protocol("snapshot batch outside a full sync"));
        }
        if !snapshot && batch.first_seq != self.expected_seq {
            return Err(LinkError::Protocol("live batch does not continue the stream"));
        }
        if !snapshot && self.syncing {
            return Err(LinkError::Protocol("live batch before SyncDone"));
        }
        let skewed = !self.mesh.store.hlc.receive(batch.hlc);
        let count = batch.ops.len() as u64;
        let (applied, superseded) = if size > INLINE_APPLY_BYTES {
            let (store, host) = (self.mesh.store.clone(), self.host.clone());
            let ops = batch.ops;
            tokio::task::spawn_blocking(move || apply_all(&store, &*host, ops.as_bytes(), ops.spans())).await.map_err(|_| LinkError::Stopped)??
        } else {
            // In order, a chunk at a time, yielding between chunks. A busy origin sends a
            // batch about every millisecond (`origin::LINGER`), and handing each to the
            // blocking pool and back (two thread wake-ups) cost a peer ~10% of its CPU
            // (docs/benchmarks.md, "CPU per replicated write").
            let (mut applied, mut superseded) = (0, 0);
            let mut ops = batch.ops.spans();
            loop {
                let (a, s) = apply_all(&self.mesh.store, &*self.host, batch.ops.as_bytes(), ops.by_ref().take(INLINE_APPLY_OPS))?;
                applied += a;
                superseded += s;
                if ops.len() == 0 {
                    break;
                }
                tokio::task::yield_now().await;
            }
            (applied, superseded)
        };
        let mut s = self.status.lock();
        s.skewed_receives += skewed as u64;
        s.ops_applied += applied;
        s.ops_superseded += superseded;
        s.last_io = Some(self.last_io);
        if snapshot {
            s.full_sync_bytes += size;
        } else {
            s.stream_bytes += size;
            if count > 0 {
                self.expected_seq = batch.first_seq + count;
                s.applied_seq = self.expected_seq - 1;
                s.origin_last_seq = s.origin_last_seq.max(s.applied_seq);
                if let Some(reached) = self.frontier.applied(s.applied_seq) {
                    s.frontier = s.frontier.max(reached);
                }
            }
        }
        Ok(())
    }

    /// Sends an Ack if one is due (`ack_due`); `asked`: the origin asked for one at once.
    fn maybe_ack(&mut self, asked: bool) {
        let applied = if self.syncing { 0 } else { self.status.lock().applied_seq };
        if !ack_due(asked, applied > self.acked_seq, self.acked_at.elapsed()) {
            return;
        }
        let ack = pb::Ack { applied_seq: applied, hlc: self.mesh.store.hlc.now(), stable_hlc: self.mesh.durable_frontier() };
        // Never block merging on the ack channel: a full channel just skips this ack.
        if self.up.try_send(pb::SubscriberMessage { body: Some(pb::subscriber_message::Body::Ack(ack)) }).is_ok() {
            self.acked_seq = applied;
            self.acked_at = Instant::now();
            self.status.lock().last_ack = Some(self.acked_at);
        }
    }
}

/// Whether a link acks now: at once when the origin asked (`Heartbeat.ack_now`, everything
/// before it merged), at most every `ACK_INTERVAL` while the stream makes progress, and every
/// `ACK_KEEPALIVE` regardless.
fn ack_due(asked: bool, progressed: bool, since_last: Duration) -> bool {
    asked || (progressed && since_last >= ACK_INTERVAL) || since_last >= ACK_KEEPALIVE
}

/// How many ops a link decodes ahead of merging them, to prefetch their keys together.
const MERGE_AHEAD: usize = 16;

/// Merges encoded ops into the keyspace; returns (applied, superseded). `spans` are where the
/// ops lie in `frame`, a received batch's ops (`FramedOps`). What the merges cause beyond the
/// keyspace goes to `delivery`: published messages as they come, then the keys changed
/// (clients blocked on them are served, as a local write would).
/// Each op is decoded first (`repl::wire::decode_in`); one that is not an effect this node
/// merges (none, or a kind it does not know) counts as superseded, as it always did. Bytes
/// that are no op at all end the stream (as a batch that failed to decode always did; the ops
/// merged before it are merged again after the reconnect, which changes nothing).
fn apply_all(store: &Store, delivery: &dyn Delivery, frame: &Bytes, spans: impl IntoIterator<Item = Range<usize>>) -> Result<(u64, u64), LinkError> {
    let (mut applied, mut superseded) = (0, 0);
    let collect_changed = delivery.wants_changed_keys();
    let mut changed: Vec<(usize, crate::db::Key)> = Vec::new();
    let mut malformed = None;
    let mut spans = spans.into_iter();
    while malformed.is_none() {
        // Decoded a few at a time, so that their keys' cache misses overlap
        // (`Store::prefetch`), as a pipelined batch's do: a peer's merge is mostly lookups of
        // cold keys.
        let mut chunk: SmallVec<[Option<Decoded<'_>>; MERGE_AHEAD]> = SmallVec::new();
        for span in spans.by_ref().take(MERGE_AHEAD) {
            match decode_in(frame, span) {
                Ok(op) => chunk.push(Some(op)),
                Err(WireError::Malformed(e)) => {
                    malformed = Some(e);
                    break;
                }
                Err(_) => chunk.push(None),
            }
        }
        if chunk.is_empty() {
            break;
        }
        // An op that is no effect this node merges counts as superseded; the others' keys are
        // hashed once, for the prefetch and the merge (`apply_keyed`).
        superseded += chunk.iter().filter(|op| op.is_none()).count() as u64;
        // Filled where it lies: `collect` would build the vector and then move it (a copy of
        // its inline bytes per chunk).
        let mut merging: SmallVec<[(&Decoded<'_>, HashedKey<'_>); MERGE_AHEAD]> = SmallVec::new();
        merging.extend(chunk.iter().flatten().map(|op| (op, HashedKey::new(op.key()))));
        if let Some(db) = merging.first().map(|(op, _)| op.db()) {
            store.prefetch(db, merging.iter().filter(|(op, _)| op.db() == db).map(|&(_, key)| key));
        }
        let mut tally = Tally { store, delivery, changed: collect_changed.then_some(&mut changed), applied: &mut applied, superseded: &mut superseded };
        apply_chunk(store, &merging, &mut tally);
    }
    if !changed.is_empty() {
        delivery.keys_changed(changed);
    }
    match malformed {
        Some(e) => Err(LinkError::Malformed(format!("an op in a batch failed to decode: {e}"))),
        None => Ok((applied, superseded)),
    }
}

/// What `apply_all` counts and fires for each op it merged.
struct Tally<'t> {
    store: &'t Store,
    delivery: &'t dyn Delivery,
    /// The changed keys, for a delivery that wants them.
    changed: Option<&'t mut Vec<(usize, crate::db::Key)>>,
    applied: &'t mut u64,
    superseded: &'t mut u64,
}

impl Recorder for Tally<'_> {
    /// Counts what merging `op` did, fires its keyspace event (`crate::notify`) and notes its
    /// key. Inline: the loop over a chunk's ops runs it once per op.
    #[inline(always)]
    fn record(&mut self, op: &Decoded<'_>, outcome: ApplyOutcome) {
        match outcome {
            ApplyOutcome::Applied => {
                *self.applied += 1;
                let notify = &self.store.notify;
                match op {
                    Decoded::StringSet(set) => notify.merged_string_set(set.db, set.key),
                    Decoded::Elements(op) => notify.merged_elements(op.db, op.key, &op.elements),
                    Decoded::Counter(op) => notify.merged_counter(op.db, op.key),
                    Decoded::List(op) => notify.merged_list(op.db, op.key, op.is_empty()),
                    Decoded::Delete(op) => notify.merged_delete(op.db, op.key),
                    Decoded::Expire(op) => notify.merged_expire(op.db, op.key, op.deadline_ms),
                    Decoded::Effect(e) => notify.merged_write(e),
                }
                if let Some(changed) = self.changed.as_mut() {
                    changed.push((op.db(), op.key().into()));
                }
            }
            ApplyOutcome::Superseded => *self.superseded += 1,
            // A function library changed: no key did.
            ApplyOutcome::Functions => *self.applied += 1,
            ApplyOutcome::Publish { channel, message } => {
                self.delivery.publish(&channel, &message);
                *self.applied += 1;
            }
        }
    }
}

/// An error with its sources ("transport error: connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_acks_at_once_only_when_asked() {
        let soon = Duration::from_millis(1);
        assert!(ack_due(true, false, soon), "asked: at once, progress or not");
        assert!(!ack_due(false, true, soon), "however many ops were merged, not before the interval");
        assert!(ack_due(false, true, ACK_INTERVAL));
        assert!(!ack_due(false, false, ACK_INTERVAL), "nothing new: no Ack until the keepalive");
        assert!(ack_due(false, false, ACK_KEEPALIVE));
    }
}
