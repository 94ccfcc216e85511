//! Per-connection client state, and the registry behind `CLIENT LIST/KILL/ID` and
//! pub/sub delivery.
//!
//! `ClientState` is owned by the connection task and changed only by it. What other tasks
//! need — the name, database and last command for `CLIENT LIST`, the kill switch, the push
//! channel for pub/sub messages — lives in a shared `ClientHandle`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use crate::db::{Key, WatchFlag};
use crate::frame::Frame;
use crate::repl::log::ReplLog;
use crate::repl::wire::OpBuffer;

/// A key this client `WATCH`es, and whether it was live when watched.
#[derive(Debug, Clone)]
pub struct Watched {
    pub db: usize,
    pub key: Key,
    pub live_at_watch: bool,
}

/// `CLIENT REPLY`: whether command replies are sent (push messages always are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Skip the reply of the next command only.
    Skip,
}

/// A `MULTI` block being queued.
#[derive(Debug, Default)]
pub struct MultiState {
    pub queue: Vec<(usize, Vec<Bytes>)>,
    /// A queued command was rejected: `EXEC` will answer `EXECABORT`.
    pub failed: bool,
}

/// What a blocking command waits for, set by its handler when it found nothing to pop.
pub struct BlockRequest {
    pub waiter: Arc<crate::blocking::Waiter>,
    pub reply: tokio::sync::oneshot::Receiver<Frame>,
    /// `None` waits forever.
    pub timeout: Option<std::time::Duration>,
}

pub struct ClientState {
    pub id: u64,
    pub db: usize,
    pub resp: u8,
    pub authenticated: bool,
    pub multi: Option<MultiState>,
    pub watch_flag: WatchFlag,
    pub watched: Vec<Watched>,
    pub channels: std::collections::HashSet<Bytes>,
    pub patterns: std::collections::HashSet<Bytes>,
    pub reply_mode: ReplyMode,
    /// Set by QUIT: close after the reply.
    pub closing: bool,
    /// Set by SYNC: stream the keyspace as an RDB file, then close (`persist::rdb::send_sync`).
    pub send_rdb: bool,
    /// Set by a blocking handler that found nothing: the connection must wait.
    pub block: Option<BlockRequest>,
    /// Set by a blocking handler that found nothing (whether or not it then blocked).
    pub would_block: bool,
    /// True while `blocking::wake` re-runs this client's command: handlers must not block.
    pub serving_wakeup: bool,
    /// True while `EXEC` runs: blocking commands time out at once, as in Redis.
    pub in_exec: bool,
    /// True while a Lua script runs commands for this client: `SORT BY <constant>` of a set
    /// orders its output, as Redis does, so a script sees a deterministic result.
    pub in_script: bool,
    /// Client-side caching: a script this command ran called a read-only command, so the
    /// script's declared keys are remembered for this client (Redis 7.0).
    pub script_read: bool,
    /// Client-side caching: keys read by the commands of the transaction `EXEC` is running.
    pub tracking_reads: Vec<Bytes>,
    /// `CLIENT TRACKING ON` is in effect (the full state is in `crate::tracking`).
    pub tracking: bool,
    /// This client's writes on their way to the backlog.
    pub writes: ClientWrites,
    pub handle: Arc<ClientHandle>,
}

impl ClientState {
    pub fn new(handle: Arc<ClientHandle>, authenticated: bool) -> ClientState {
        ClientState {
            id: handle.id,
            db: 0,
            resp: 2,
            authenticated,
            multi: None,
            watch_flag: Arc::new(AtomicBool::new(false)),
            watched: Vec::new(),
            channels: Default::default(),
            patterns: Default::default(),
            reply_mode: ReplyMode::On,
            closing: false,
            send_rdb: false,
            block: None,
            would_block: false,
            serving_wakeup: false,
            in_exec: false,
            in_script: false,
            script_read: false,
            tracking_reads: Vec::new(),
            tracking: false,
            writes: ClientWrites::new(handle.clone()),
            handle,
        }
    }

    pub fn subscriptions(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// In RESP2 a subscribed client may only run (un)subscribe commands, PING, QUIT, RESET.
    pub fn in_subscribe_mode(&self) -> bool {
        self.resp < 3 && self.subscriptions() > 0
    }
}

/// A client's writes on their way to the backlog (`ReplLog`). Each command adds its ops to
/// the ops of the commands before it that are not yet published (`cmd::run_command` lends
/// them to the command's context and takes them back), and one `ReplLog::append` publishes
/// them all: a connection's client after each pipelined batch of up to 16 requests, and
/// always before any of their replies is written (`connection::serve_split`), so no reply
/// acknowledges a write its peers cannot get; any other client (a blocked client's command
/// re-run by a wake) after each command. One append per batch instead of one per command:
/// an append is a lock, its bookkeeping and a buffer's round trip, ~200 instructions of an
/// origin's SET at -P 16 (docs/benchmarks.md, "One backlog append per pipelined batch").
///
/// A write command is admitted (`admit`) before it runs: from then until the next `publish`
/// the client's handle says it holds writes on their way (`ClientHandle::writes_in_flight`),
/// so that a handoff can tell when the last writes it admitted are in the backlog.
pub struct ClientWrites {
    /// Ops of this client's commands that are not in the backlog yet.
    pending: OpBuffer,
    /// The backlog sequence of this client's last published op (`WAIT` counts the peers that
    /// merged it); 0 before its first.
    last_seq: u64,
    /// A connection's client: ops wait for `publish` (see above).
    batched: bool,
    /// Whose writes these are: its `writes_in_flight` is set by `admit`, cleared by `publish`.
    handle: Arc<ClientHandle>,
}

impl ClientWrites {
    pub fn new(handle: Arc<ClientHandle>) -> ClientWrites {
        ClientWrites { pending: OpBuffer::default(), last_seq: 0, batched: false, handle }
    }

    /// Before a write command runs (or is queued in `MULTI`, or runs from a script): answers
    /// whether the node takes writes (`false` once a handoff refuses them, `Mesh::draining`),
    /// having noted that this client holds writes on their way to the backlog. The note comes
    /// before the last look at the refusal, and both are sequentially consistent, as are the
    /// refusal and the handoff's look at the notes (`ClientRegistry::writes_in_flight`):
    /// either the handoff sees this write on its way and waits for its `publish`, or this
    /// write sees the refusal. A write refused at the first look leaves no note, so clients
    /// that keep writing cannot keep the handoff waiting.
    #[inline]
    pub fn admit(&self, mesh: &crate::mesh::Mesh) -> bool {
        if mesh.draining() {
            return false;
        }
        let in_flight = &self.handle.writes_in_flight;
        if !in_flight.load(Ordering::Relaxed) {
            in_flight.store(true, Ordering::SeqCst);
            return !mesh.draining();
        }
        true
    }

    /// Ops wait for `publish` from now on: for a connection, which publishes after each batch
    /// and before it writes replies.
    pub fn batch(&mut self) {
        self.batched = true;
    }

    /// The ops not yet published, for a command to add its own to (`hold` takes them back).
    #[inline]
    pub fn take_pending(&mut self) -> OpBuffer {
        std::mem::take(&mut self.pending)
    }

    /// Takes back the ops `take_pending` lent, with the command's own added; publishes them at
    /// once unless this client batches.
    #[inline]
    pub fn hold(&mut self, ops: OpBuffer, log: &ReplLog) {
        let lent = std::mem::replace(&mut self.pending, ops);
        debug_assert!(lent.is_empty(), "the pending ops were lent out");
        drop(lent);
        if !self.batched {
            self.publish(log);
        }
    }

    /// Appends the pending ops to the backlog; returns the sequence of this client's last
    /// published op.
    #[inline]
    pub fn publish(&mut self, log: &ReplLog) -> u64 {
        if !self.pending.is_empty() {
            self.append_pending(log);
        }
        // After the append (`Release`): a handoff that sees the note cleared sees the ops.
        let in_flight = &self.handle.writes_in_flight;
        if in_flight.load(Ordering::Relaxed) {
            in_flight.store(false, Ordering::Release);
        }
        self.last_seq
    }

    #[inline(never)]
    fn append_pending(&mut self, log: &ReplLog) {
        let ops = std::mem::take(&mut self.pending);
        self.last_seq = log.append(&ops);
        ops.recycle();
    }
}

impl Drop for ClientWrites {
    /// A connection that ends without publishing (its task panicked) leaves no note behind for
    /// a handoff to wait on forever; its ops were never acknowledged (replies follow
    /// `publish`). Only a connection's own client: a wake's proxy shares the blocked client's
    /// handle, publishes after each command, and is dropped after its reply went out, when the
    /// connection may already be running a batch whose note is its own.
    fn drop(&mut self) {
        if self.batched && self.handle.writes_in_flight.load(Ordering::Relaxed) {
            self.handle.writes_in_flight.store(false, Ordering::Release);
        }
    }
}

/// The part of a client other tasks can see.
pub struct ClientHandle {
    pub id: u64,
    pub addr: String,
    pub laddr: String,
    pub created: Instant,
    pub name: Mutex<Option<Bytes>>,
    pub lib_name: Mutex<Option<Bytes>>,
    pub lib_ver: Mutex<Option<Bytes>>,
    pub db: AtomicUsize,
    /// Index + 1 of the last command in the command table (0: none yet).
    pub last_command: AtomicUsize,
    /// When the connection last read a request, in `clock::coarse_monotonic_ms`.
    last_active_ms: AtomicU64,
    pub subscriptions: AtomicUsize,
    pub in_multi: AtomicBool,
    pub blocked: AtomicBool,
    pub resp: AtomicUsize,
    /// Set by `CLIENT KILL`; the connection closes at its next wake-up.
    pub killed: AtomicBool,
    /// Wakes a client blocked in a command or held by `CLIENT PAUSE` when it is killed.
    pub kill_signal: Notify,
    /// Wakes the connection between requests to look at its kill flag and the server's
    /// shutdown and handoff signals (`wake_control`), and at its queued pushes (`push`). An
    /// atomic waker: a connection waits on it before every request, and waiting on
    /// `Notify`-based futures costs a lock each.
    control: AtomicWaker,
    control_pending: AtomicBool,
    /// Frames for this client outside its replies (pub/sub messages, invalidations, MONITOR
    /// lines): queued by `push`, read by the connection after `take_pushed`.
    pushes: mpsc::UnboundedSender<Frame>,
    /// Set after each `push`, so that a connection looks at its queue only when something was
    /// queued: reading the empty channel at every request was 6% of a GET's instructions at
    /// -P 1 (docs/benchmarks.md, "On a 16-core machine").
    pushed: AtomicBool,
    /// Bytes queued in `push` and not yet written, to bound slow subscribers.
    pub pending_push: AtomicU64,
    /// `CLIENT NO-TOUCH ON`: this client's commands (but `TOUCH`) leave keys' access times
    /// alone (Redis 7.2).
    pub no_touch: AtomicBool,
    /// `CLIENT NO-EVICT ON`: shown as flag `e`; KeyMesh evicts no clients for memory
    /// (Redis's `maxmemory-clients`), so there is nothing more to exempt it from.
    pub no_evict: AtomicBool,
    /// Set while the client holds writes the node admitted that are not in the backlog yet
    /// (`ClientWrites::admit` to `ClientWrites::publish`): a handoff's `last_seq` is final
    /// only once no client's is set.
    writes_in_flight: AtomicBool,
}

impl ClientHandle {
    /// Notes activity now (for `CLIENT LIST` idle times), at every read.
    pub fn touch(&self) {
        self.last_active_ms.store(crate::clock::coarse_monotonic_ms(), Ordering::Relaxed);
    }

    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill_signal.notify_one();
        self.wake_control();
    }

    /// Asks the connection to look at its kill flag and the server's shutdown and handoff
    /// signals now (`connection::control_changed`).
    pub fn wake_control(&self) {
        self.control_pending.store(true, Ordering::Release);
        self.control.wake();
    }

    /// Queues `frame` for the connection and wakes it; `false` once the connection has ended.
    pub fn push(&self, frame: Frame) -> bool {
        if self.pushes.send(frame).is_err() {
            return false;
        }
        // After the send: a connection that sees the flag finds the frame in its queue.
        self.pushed.store(true, Ordering::Release);
        self.wake_control();
        true
    }

    /// Whether anything was pushed since the last call (the connection then drains its queue).
    pub fn take_pushed(&self) -> bool {
        self.pushed.load(Ordering::Relaxed) && self.pushed.swap(false, Ordering::AcqRel)
    }

    /// Ready once after each `wake_control` or `push` (however many came since the last time).
    pub fn poll_control(&self, cx: &mut Context<'_>) -> Poll<()> {
        // Register first, then look: a wake between the two is not lost.
        self.control.register(cx.waker());
        if self.control_pending.swap(false, Ordering::AcqRel) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// One `CLIENT LIST` line (the fields Redis 7.0 prints that clients and tools parse), with
    /// the client's `CLIENT TRACKING` state (flags `t`, `R`, `B` and `redir`).
    pub fn info_line(&self, tracking: &crate::tracking::TrackingInfo) -> String {
        let name = self.name.lock().as_ref().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
        let lib_name = self.lib_name.lock().as_ref().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
        let lib_ver = self.lib_ver.lock().as_ref().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
        let age = self.created.elapsed().as_secs();
        let idle = crate::clock::coarse_monotonic_ms().saturating_sub(self.last_active_ms.load(Ordering::Relaxed)) / 1000;
        let cmd = match self.last_command.load(Ordering::Relaxed) {
            0 => "NULL",
            n => crate::cmd::TABLE.specs[n - 1].name,
        };
        let subs = self.subscriptions.load(Ordering::Relaxed);
        // Redis's letters, in its order (networking.c, catClientInfoString; `T` from 7.2).
        let tracked = |flag: &'static str| tracking.flags.contains(&flag);
        let flags: String = [
            (subs > 0, 'P'),
            (self.in_multi.load(Ordering::Relaxed), 'x'),
            (self.blocked.load(Ordering::Relaxed), 'b'),
            (tracked("on"), 't'),
            (tracked("broken_redirect"), 'R'),
            (tracked("bcast"), 'B'),
            (self.no_evict.load(Ordering::Relaxed), 'e'),
            (self.no_touch.load(Ordering::Relaxed), 'T'),
        ]
        .into_iter()
        .filter_map(|(on, c)| on.then_some(c))
        .collect();
        let flags = if flags.is_empty() { "N".to_string() } else { flags };
        format!(
            "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags={} db={} sub={} psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user=default redir={} resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            name,
            age,
            idle,
            flags,
            self.db.load(Ordering::Relaxed),
            subs,
            cmd,
            tracking.redirect,
            self.resp.load(Ordering::Relaxed),
            lib_name,
            lib_ver,
        )
    }
}

/// Every connected client, by id.
#[derive(Default)]
pub struct ClientRegistry {
    next_id: AtomicU64,
    clients: Mutex<HashMap<u64, Arc<ClientHandle>>>,
}

impl ClientRegistry {
    pub fn register(&self, addr: SocketAddr, laddr: SocketAddr) -> (Arc<ClientHandle>, mpsc::UnboundedReceiver<Frame>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = Arc::new(ClientHandle {
            id,
            addr: addr.to_string(),
            laddr: laddr.to_string(),
            created: Instant::now(),
            name: Mutex::new(None),
            lib_name: Mutex::new(None),
            lib_ver: Mutex::new(None),
            db: AtomicUsize::new(0),
            last_command: AtomicUsize::new(0),
            last_active_ms: AtomicU64::new(crate::clock::coarse_monotonic_ms()),
            subscriptions: AtomicUsize::new(0),
            in_multi: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            resp: AtomicUsize::new(2),
            killed: AtomicBool::new(false),
            kill_signal: Notify::new(),
            control: AtomicWaker::new(),
            control_pending: AtomicBool::new(false),
            pushes: tx,
            pushed: AtomicBool::new(false),
            pending_push: AtomicU64::new(0),
            no_touch: AtomicBool::new(false),
            no_evict: AtomicBool::new(false),
            writes_in_flight: AtomicBool::new(false),
        });
        self.clients.lock().insert(id, handle.clone());
        (handle, rx)
    }

    pub fn unregister(&self, id: u64) {
        self.clients.lock().remove(&id);
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientHandle>> {
        self.clients.lock().get(&id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<ClientHandle>> {
        let mut all: Vec<_> = self.clients.lock().values().cloned().collect();
        all.sort_by_key(|c| c.id);
        all
    }

    pub fn count(&self) -> usize {
        self.clients.lock().len()
    }

    /// The clients that hold writes the node admitted that are not in the backlog yet
    /// (`ClientWrites::admit`), by id.
    pub fn writes_in_flight(&self) -> Vec<u64> {
        self.clients.lock().iter().filter(|(_, c)| c.writes_in_flight.load(Ordering::SeqCst)).map(|(&id, _)| id).collect()
    }

    /// Wakes every connection to look at the server's shutdown and handoff signals.
    pub fn wake_all(&self) {
        for handle in self.clients.lock().values() {
            handle.wake_control();
        }
    }
}
