//! The origin side of the mesh: the gRPC `Mesh` service that streams this node's own writes
//! to each subscriber.
//!
//! A subscriber sends `Hello`; the origin checks `requirepass`, then answers `Welcome` and
//! either resumes from the sequence asked for (same run id, still in the backlog: a partial
//! resync) or runs a full sync: note the log's next sequence *before* scanning, stream the
//! fuzzy snapshot (`Batch` with `first_seq` 0), `SyncDone`, then the live stream from the
//! noted sequence. Because merging is idempotent, ops that land in both the snapshot and the
//! live stream are harmless, and nothing written after the noted sequence is missed.
//!
//! Backpressure: every message goes through a bounded channel, so a slow subscriber slows
//! its own stream (and, if it falls out of the backlog, gets an error and full-syncs on
//! reconnect) instead of growing memory. A subscriber that sends nothing (Acks are sent at
//! least every second) for `repl-timeout` is dropped.
//!
//! The backlog holds each write's op already encoded and framed (`repl::log`): a live batch is
//! one slice of those shared bytes (`EncodedBatch`, the same bytes on the wire as a `Batch` of
//! ops), so nothing is converted or encoded per subscriber, and the response body
//! (`OriginBody`) hands those bytes to h2 as they are: no subscriber's stream copies them.
//! The snapshot scan yields `Effect`s, encoded here (`repl::wire::OpBuffer`) as they go into a
//! batch.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::Frame;
use keymesh_proto as pb;
use keymesh_proto::codec::{frame_origin_message, FlatCodec};
use keymesh_proto::origin_message::Body;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::{mpsc, Notify};
use tonic::codec::Codec;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::NamedService;
use tonic::{Request, Status, Streaming};
use tracing::{debug, info};

use super::Mesh;
use crate::db::effect::Effect;
use crate::repl::log::Resume;
use crate::repl::wire::OpBuffer;

/// Live batches carry at most this many ops.
pub const BATCH_OPS: usize = 512;
/// Snapshot batches are cut to at most this many ops, or once they pass this many bytes:
/// a stream keeps a buffer the size of its largest message for as long as it lives.
const SNAPSHOT_BATCH_OPS: usize = 512;
const SNAPSHOT_BATCH_BYTES: usize = 256 << 10;
/// After sending a batch, a stream waits until the runtime's timer next ticks before it reads
/// the next one (unless a full batch is already waiting): tokio's timers tick every
/// millisecond, so this waits 0–1 ms, 0.5 ms on average. A write made while the stream is idle
/// goes out at once; under load, each subscriber's stream sends one batch of everything
/// written since its last, instead of one per wake-up. Every batch costs the origin a task
/// wake-up, a socket write and a wake-up of the peer's process, and the peer a read and a
/// wake-up of its link: sent per few tens of ops, they were most of the mesh's CPU beyond the
/// merges themselves (docs/benchmarks.md, "CPU per replicated write"). Waiting a whole
/// millisecond (1–2 ms with the tick) saved no CPU that this machine could measure, and cost
/// ~0.7 ms of lag at p50 ("Eighth pass").
const LINGER: Duration = Duration::from_micros(1);
/// Heartbeats go out this often while the subscriber is caught up.
pub const HEARTBEAT: Duration = Duration::from_millis(200);
/// Messages buffered per subscriber before the stream waits for it.
const CHANNEL_DEPTH: usize = 16;
/// How long a new stream may take to send its Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// One subscriber of this node's writes, as the origin sees it.
#[derive(Debug)]
pub struct SubscriberInfo {
    pub id: u64,
    pub node_name: String,
    pub node_id: u32,
    pub addr: Option<SocketAddr>,
    /// Streaming over TLS (a plain one is closed when `tls-replication` turns on).
    pub tls: bool,
    pub connected_at: Instant,
    pub full_sync: bool,
    /// Still sending the snapshot.
    pub syncing: AtomicBool,
    /// Highest sequence the subscriber acknowledged.
    pub applied_seq: AtomicU64,
    pub last_ack: Mutex<Instant>,
    /// The subscriber's HLC wall time minus ours, from its last Ack.
    pub skew_ms: AtomicI64,
    /// The subscriber's stable frontier, from its last Ack (see `mesh::frontier`).
    pub stable_hlc: AtomicU64,
    /// Set when its Ack stream ended or went silent.
    gone: Notify,
}

impl SubscriberInfo {
    pub fn last_ack_age(&self) -> Duration {
        self.last_ack.lock().elapsed()
    }

    /// Ends the stream to this subscriber (it reconnects with a new `Hello`).
    pub fn close(&self) {
        self.gone.notify_one();
    }
}

/// The `Mesh` gRPC service: `Subscribe`, served by hand rather than by tonic's generated
/// `MeshServer`, whose encoder copied every message into each stream's buffer (see
/// `OriginBody`). The request side is tonic's: its `Streaming` decodes the subscriber's
/// messages, with `FlatCodec`'s decoder as the generated server used.
#[derive(Clone)]
pub struct MeshService {
    mesh: Arc<Mesh>,
}

pub fn service(mesh: Arc<Mesh>) -> MeshService {
    MeshService { mesh }
}

/// The largest message a subscriber may send (its Hello and Acks are a few dozen bytes).
const MAX_DECODING_MESSAGE: usize = 4 << 20;

impl NamedService for MeshService {
    const NAME: &'static str = pb::mesh_server::SERVICE_NAME;
}

impl Service<http::Request<tonic::body::Body>> for MeshService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move {
            // The service's one method: `/{SERVICE_NAME}/Subscribe`.
            let method = request.uri().path().strip_prefix('/').and_then(|p| p.strip_prefix(pb::mesh_server::SERVICE_NAME));
            if method != Some("/Subscribe") {
                return Ok(Status::unimplemented(format!("no method {} on the mesh service", request.uri().path())).into_http());
            }
            // A subscriber never compresses; a compressed message fails in `Streaming` (the
            // generated server refused the header instead: both end the stream with a status).
            let decoder = FlatCodec::<pb::OriginMessage, pb::SubscriberMessage>::default().decoder();
            let request = Request::from_http(request.map(|body| Streaming::new_request(decoder, body, None, Some(MAX_DECODING_MESSAGE))));
            Ok(match service.subscribe(request).await {
                Ok(messages) => {
                    let mut response = http::Response::new(tonic::body::Body::new(OriginBody::new(messages)));
                    response.headers_mut().insert(http::header::CONTENT_TYPE, tonic::metadata::GRPC_CONTENT_TYPE);
                    response
                }
                Err(status) => status.into_http(),
            })
        })
    }
}

/// `Subscribe`'s response body: each message the stream task sends, framed as tonic's encoder
/// framed it (`keymesh_proto::codec::frame_origin_message`), a large batch's ops as a chunk of
/// their own that is the backlog's bytes. h2 copies a chunk under 256 bytes into its write
/// buffer and writes a larger one from where it lies (`writev`), so a batch goes out in one
/// write, as before, without the copy per subscriber that tonic's encoder made (~285
/// instructions per replicated SET on an origin with two subscribers: docs/benchmarks.md,
/// "Twenty-ninth pass"). The stream ends with gRPC's trailers: OK when the task ends it, the
/// task's status when it fails.
struct OriginBody {
    messages: Outbound,
    /// A batch's ops, to follow the head just returned.
    ops: Option<Bytes>,
    ended: bool,
}

impl OriginBody {
    fn new(messages: Outbound) -> OriginBody {
        OriginBody { messages, ops: None, ended: false }
    }

    fn trailers(&mut self, status: &Status) -> Frame<Bytes> {
        self.ended = true;
        let mut trailers = http::HeaderMap::new();
        if let Err(unsendable) = status.add_header(&mut trailers) {
            // Only a message that is no header value; the code still goes out.
            trailers.clear();
            let _ = Status::new(status.code(), unsendable.message()).add_header(&mut trailers);
        }
        Frame::trailers(trailers)
    }
}

impl http_body::Body for OriginBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(ops) = self.ops.take() {
            return Poll::Ready(Some(Ok(Frame::data(ops))));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        let frame = match std::task::ready!(self.messages.poll_recv(cx)) {
            Some(Ok(message)) => match frame_origin_message(&message) {
                Ok((head, ops)) => {
                    self.ops = ops;
                    Frame::data(head)
                }
                Err(status) => self.trailers(&status),
            },
            Some(Err(status)) => self.trailers(&status),
            None => self.trailers(&Status::ok("")),
        };
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.ops.is_none()
    }
}

static NEXT_SUBSCRIBER: AtomicU64 = AtomicU64::new(1);

/// What a stream sends its subscriber, in order (`OriginBody` frames it).
type Outbound = mpsc::Receiver<Result<pb::OriginMessage, Status>>;

impl MeshService {
    /// Checks the subscriber's `Hello` and starts its stream: the messages to send it, or the
    /// status that refuses it.
    async fn subscribe(&self, request: Request<Streaming<pb::SubscriberMessage>>) -> Result<Outbound, Status> {
        let peer = super::MeshPeer::of(&request);
        let addr = peer.remote;
        let mut inbound = request.into_inner();
        let hello = match tokio::time::timeout(HELLO_TIMEOUT, inbound.message()).await {
            Ok(Ok(Some(pb::SubscriberMessage { body: Some(pb::subscriber_message::Body::Hello(h)) }))) => h,
            Ok(Ok(_)) => return Err(Status::invalid_argument("the first message must be Hello")),
            Ok(Err(status)) => return Err(status),
            Err(_) => return Err(Status::deadline_exceeded("no Hello received")),
        };
        let mesh = &self.mesh;
        let subscriber = format!("{} ({})", hello.node_name, addr.map_or_else(|| "?".to_string(), |a| a.to_string()));
        let host = mesh.host().ok_or_else(|| Status::unavailable("the node is shutting down"))?;
        if !host.password_ok(hello.password.as_bytes()) {
            let message = "invalid password: the subscriber's masterauth must equal this node's requirepass";
            mesh.note_refusal(&subscriber, "auth", message);
            return Err(Status::unauthenticated(message));
        }
        if let Err(message) = peer.require_tls(host.tls_replication(), true) {
            mesh.note_refusal(&subscriber, "tls", &message);
            return Err(Status::unauthenticated(message));
        }
        if let Err(message) = super::protocol_compatible(hello.protocol_version) {
            mesh.note_refusal(&subscriber, "protocol", &message);
            return Err(Status::failed_precondition(message));
        }
        if mesh.stale() {
            // Our data may hold keys whose tombstones the mesh has dropped: nobody may sync
            // it until we wiped and resynced. Two isolated nodes would refuse each other
            // forever, so a stale subscriber with a higher node id is served, and our data
            // becomes the survivor (we are no longer stale; it wipes).
            if hello.stale && hello.node_id > mesh.identity.node_id {
                info!(subscriber = %hello.node_name, "both sides were cut off longer than tombstone-gc-seconds; this node's data survives");
                mesh.note_contact();
            } else {
                return Err(Status::unavailable(
                    "this node was cut off from its peers for longer than tombstone-gc-seconds; it serves no subscriber until it has wiped and resynced",
                ));
            }
        }
        // Record our writes from now on, before noting where the stream starts.
        mesh.store.enable_replication();
        let run_id = mesh.run_id();
        let resume = if hello.origin_run_id == run_id { mesh.log.resume(hello.next_seq) } else { Resume::FullSync(0) };
        let (full_sync, start_seq) = match resume {
            Resume::From(seq) => (false, seq),
            // Noted before the scan starts: everything from here on is streamed live.
            Resume::FullSync(_) => (true, mesh.log.next_seq()),
        };
        let info = Arc::new(SubscriberInfo {
            id: NEXT_SUBSCRIBER.fetch_add(1, Ordering::Relaxed),
            node_name: hello.node_name.clone(),
            node_id: hello.node_id,
            addr,
            tls: peer.tls,
            connected_at: Instant::now(),
            full_sync,
            syncing: AtomicBool::new(full_sync),
            applied_seq: AtomicU64::new(if full_sync { 0 } else { start_seq.saturating_sub(1) }),
            last_ack: Mutex::new(Instant::now()),
            skew_ms: AtomicI64::new(0),
            stable_hlc: AtomicU64::new(0),
            gone: Notify::new(),
        });
        info!(subscriber = %hello.node_name, ?addr, full_sync, start_seq, "mesh subscriber connected");
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let welcome = pb::Welcome {
            run_id,
            node_name: mesh.identity.node_name.clone(),
            node_id: mesh.identity.node_id,
            full_sync,
            start_seq,
            protocol_version: super::MESH_PROTOCOL_VERSION,
        };
        let _ = tx.try_send(Ok(message(Body::Welcome(welcome))));
        mesh.subscribers.lock().push(info.clone());
        let acks = tokio::spawn(read_acks(mesh.clone(), inbound, info.clone()));
        let mesh = mesh.clone();
        tokio::spawn(async move {
            let ended = stream_to(&mesh, &info, &tx, full_sync, start_seq).await;
            acks.abort();
            mesh.subscribers.lock().retain(|s| s.id != info.id);
            if let Err(status) = ended {
                let _ = tx.send(Err(status)).await;
            }
            info!(subscriber = %info.node_name, "mesh subscriber disconnected");
        });
        Ok(rx)
    }
}

fn message(body: Body) -> pb::OriginMessage {
    pb::OriginMessage { body: Some(body) }
}

/// Records Acks; wakes the stream task when the subscriber goes away or goes silent.
async fn read_acks(mesh: Arc<Mesh>, mut inbound: Streaming<pb::SubscriberMessage>, info: Arc<SubscriberInfo>) {
    let timeout = mesh.repl_timeout();
    loop {
        match tokio::time::timeout(timeout, inbound.message()).await {
            Ok(Ok(Some(pb::SubscriberMessage { body: Some(pb::subscriber_message::Body::Ack(ack)) }))) => {
                info.applied_seq.fetch_max(ack.applied_seq, Ordering::Relaxed);
                *info.last_ack.lock() = Instant::now();
                let skew = crate::hlc::physical_ms(ack.hlc) as i64 - mesh.store.hlc.wall_ms() as i64;
                info.skew_ms.store(skew, Ordering::Relaxed);
                info.stable_hlc.store(ack.stable_hlc, Ordering::Relaxed);
                mesh.acks.note_ack();
            }
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => {
                debug!(subscriber = %info.node_name, "subscriber silent for repl-timeout; dropping it");
                break;
            }
        }
    }
    info.gone.notify_one();
}

/// Streams the snapshot (if any), then live ops until the subscriber goes away. An `Err` is
/// sent to the subscriber as the stream's status.
async fn stream_to(
    mesh: &Arc<Mesh>,
    info: &Arc<SubscriberInfo>,
    tx: &mpsc::Sender<Result<pb::OriginMessage, Status>>,
    full_sync: bool,
    start_seq: u64,
) -> Result<(), Status> {
    if full_sync {
        let done = send_snapshot(mesh, tx.clone()).await?;
        if tx.send(Ok(message(Body::SyncDone(done)))).await.is_err() {
            return Ok(());
        }
        info.syncing.store(false, Ordering::Relaxed);
    }
    let log = &mesh.log;
    let mut seq = start_seq;
    let mut last_heartbeat = Instant::now() - HEARTBEAT;
    // The last `WAIT` request this stream asked its subscriber to ack (`mesh::acks`). Ops
    // before `start_seq` are counted as acked already (`SubscriberInfo::applied_seq`).
    let mut ack_asked = start_seq.saturating_sub(1);
    let mut gone = pin!(info.gone.notified());
    loop {
        // Taken before `wanted` is read, so that a request made after it still wakes us.
        let mut next_request = pin!(mesh.acks.next_request());
        let Some(ops) = log.read(seq, BATCH_OPS) else {
            return Err(Status::out_of_range(format!("sequence {seq} fell out of the backlog (repl-backlog-size); reconnect for a full sync")));
        };
        let sent = !ops.is_empty();
        if sent {
            let count = ops.len() as u64;
            let batch = pb::EncodedBatch { first_seq: seq, ops, hlc: mesh.store.hlc.now() };
            seq += count;
            mesh.metrics.sent_batches.inc();
            mesh.metrics.sent_ops.inc_by(count);
            if tx.send(Ok(message(Body::Batch(batch)))).await.is_err() {
                return Ok(());
            }
        }
        let wanted = mesh.acks.wanted();
        // Once the op a `WAIT` waits for went out, the subscriber is asked to ack right after it.
        let ack_now = wanted > ack_asked && wanted < seq;
        if ack_now || last_heartbeat.elapsed() >= HEARTBEAT {
            last_heartbeat = Instant::now();
            if ack_now {
                ack_asked = wanted;
            }
            if tx.send(Ok(message(Body::Heartbeat(heartbeat(mesh, ack_now))))).await.is_err() {
                return Ok(());
            }
        }
        if sent {
            // A `WAIT` waits for an op not sent yet, or a full batch is waiting (a stream
            // catching up): send it now.
            if wanted > ack_asked || log.next_seq() - seq >= BATCH_OPS as u64 {
                continue;
            }
            // The next batch gathers for `LINGER` (see there).
            tokio::select! {
                _ = tokio::time::sleep(LINGER) => continue,
                _ = &mut next_request => continue,
                _ = &mut gone => return Ok(()),
                _ = tx.closed() => return Ok(()),
            }
        }
        if seq < log.next_seq() {
            continue;
        }
        tokio::select! {
            // `seq` is the next op to send.
            _ = log.appended(seq) => {}
            _ = &mut next_request => {}
            _ = tokio::time::sleep(HEARTBEAT.saturating_sub(last_heartbeat.elapsed())) => {}
            _ = &mut gone => return Ok(()),
            _ = tx.closed() => return Ok(()),
        }
    }
}

/// This node's clock and backlog position, for the subscriber's frontier and skew
/// (`link::Session::handle`); `ack_now` asks it to ack at once (`mesh::acks`).
fn heartbeat(mesh: &Mesh, ack_now: bool) -> pb::Heartbeat {
    pb::Heartbeat { hlc: mesh.store.hlc.now(), last_seq: mesh.log.next_seq().saturating_sub(1), wall_ms: mesh.store.hlc.wall_ms(), ack_now }
}

/// Runs the fuzzy keyspace scan on a blocking thread, sending batches as it goes.
async fn send_snapshot(mesh: &Arc<Mesh>, tx: mpsc::Sender<Result<pb::OriginMessage, Status>>) -> Result<pb::SyncDone, Status> {
    let store = mesh.store.clone();
    let scan = tokio::task::spawn_blocking(move || {
        let mut bytes = 0u64;
        let mut open = true;
        let (keys, _ops) = crate::repl::snapshot::snapshot(&store, &mut |ops: Vec<Effect>| {
            if !open {
                return;
            }
            let mut ops = ops.into_iter().peekable();
            while ops.peek().is_some() {
                let mut chunk = OpBuffer::default();
                while chunk.len() < SNAPSHOT_BATCH_OPS && chunk.bytes().len() < SNAPSHOT_BATCH_BYTES {
                    let Some(op) = ops.next() else { break };
                    chunk.push(op);
                }
                let batch = pb::EncodedBatch { first_seq: 0, ops: chunk.into_framed(), hlc: store.hlc.now() };
                bytes += batch.encoded_len() as u64;
                // The subscriber went away: finish the scan cheaply without sending.
                if tx.blocking_send(Ok(message(Body::Batch(batch)))).is_err() {
                    open = false;
                    return;
                }
            }
        });
        pb::SyncDone { keys, bytes }
    });
    scan.await.map_err(|e| Status::internal(format!("snapshot failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use keymesh_proto::codec::SHARED_OPS_MIN;
    use keymesh_proto::{EncodedBatch, FramedOps};

    fn batch(first_seq: u64, ops: usize) -> pb::OriginMessage {
        let ops: Vec<Vec<u8>> = (0..ops).map(|i| vec![i as u8; 100]).collect();
        message(Body::Batch(EncodedBatch { first_seq, ops: FramedOps::from_ops(ops.iter().map(Vec::as_slice)), hlc: 1 << 40 | first_seq }))
    }

    fn heartbeat() -> pb::OriginMessage {
        message(Body::Heartbeat(pb::Heartbeat { hlc: 7, last_seq: 3, wall_ms: 9, ack_now: true }))
    }

    /// A body fed `sent`, then ended by `end` (`None`: the stream task finished).
    fn body(sent: &[pb::OriginMessage], end: Option<Status>) -> OriginBody {
        let (tx, rx) = mpsc::channel(sent.len() + 1);
        for m in sent {
            tx.try_send(Ok(m.clone())).unwrap();
        }
        if let Some(status) = end {
            tx.try_send(Err(status)).unwrap();
        }
        OriginBody::new(rx)
    }

    /// What tonic's client reads from `body`: the messages, then how the stream ended.
    async fn read(body: OriginBody) -> (Vec<pb::OriginMessage>, Result<(), Status>) {
        let decoder = FlatCodec::<pb::SubscriberMessage, pb::OriginMessage>::default().decoder();
        let mut stream = Streaming::new_response(decoder, body, http::StatusCode::OK, None, None);
        let mut got = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(m)) => got.push(m),
                Ok(None) => {
                    // A stream ended without trailers (no status) would be an error here.
                    let trailers = stream.trailers().await.map_err(|s| Status::internal(s.to_string()));
                    return (got, trailers.map(|_| ()));
                }
                Err(status) => return (got, Err(status)),
            }
        }
    }

    /// A subscriber's gRPC client reads every message the stream sends, in order, large and
    /// small batches alike, then the stream's status: OK when the stream task finished, its
    /// error otherwise (a subscriber that fell out of the backlog learns why).
    #[tokio::test]
    async fn a_subscriber_reads_the_messages_and_how_the_stream_ended() {
        let sent = vec![batch(1, 40), heartbeat(), batch(41, 2), batch(43, 200), message(Body::SyncDone(pb::SyncDone { keys: 2, bytes: 3 }))];
        let (got, ended) = read(body(&sent, None)).await;
        assert_eq!(got, sent);
        assert!(ended.is_ok(), "{ended:?}");

        let (got, ended) = read(body(&sent[..2], Some(Status::out_of_range("sequence 9 fell out of the backlog")))).await;
        assert_eq!(got, &sent[..2]);
        let status = ended.expect_err("the stream's error reaches the subscriber");
        assert_eq!((status.code(), status.message()), (tonic::Code::OutOfRange, "sequence 9 fell out of the backlog"));
    }

    /// A large batch's ops go to h2 as the batch's own bytes, after a head of their own; a
    /// small one in one chunk. The trailers end the body.
    #[tokio::test]
    async fn a_large_batch_goes_out_as_its_own_bytes() {
        let large = batch(1, 40);
        let Some(Body::Batch(b)) = &large.body else { unreachable!() };
        let shared = b.ops.as_bytes().clone();
        assert!(shared.len() >= SHARED_OPS_MIN);
        let mut body = body(&[large.clone(), batch(41, 2)], None);
        let mut frames = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            frames.push(frame.unwrap());
        }
        assert!(body.is_end_stream());
        assert_eq!(frames.len(), 4, "head and ops, the small batch, the trailers");
        let ops = frames[1].data_ref().expect("the ops chunk");
        assert_eq!((ops.as_ptr(), ops.len()), (shared.as_ptr(), shared.len()), "not a copy");
        assert!(frames[0].data_ref().is_some_and(|head| head.len() < 32));
        assert!(frames[2].data_ref().is_some_and(|small| small.len() < SHARED_OPS_MIN + 32));
        assert_eq!(frames[3].trailers_ref().and_then(|t| t.get("grpc-status")).map(|v| v.as_bytes()), Some(&b"0"[..]));
    }
}
