//! Handing a node's clients off before it leaves the mesh (DESIGN.md, "Handoff"): used when a
//! scale down removes the pod, and when an upgrade replaces it.
//!
//! The operator first takes the pod out of its Service (a readiness gate), then calls the admin
//! `Handoff`. From then on:
//! 1. **Closing**: `/readyz` answers 503; every client connection that was open when the
//!    handoff began closes as soon as it is idle (nothing buffered, not in `MULTI`, not
//!    subscribed, not blocked), so its client reconnects through the Service to another pod.
//!    A connection never closes between reading a request and writing its reply, so no
//!    acknowledged write is cut off; a request still in flight on the wire is unanswered and
//!    the client retries it elsewhere.
//! 2. **Done**, once no client is connected or the grace period ran out: the node refuses
//!    writes (`READONLY`, see `Mesh::draining`), waits for the writes it admitted before to
//!    reach the backlog (a connection publishes a pipelined batch's writes when the batch
//!    ends: `client::ClientWrites`), and closes every connection that was open before. From
//!    here on it originates nothing, so the sequence of its last write
//!    (`NodeStatus.last_seq`) is final: its peers confirm they merged through it (the
//!    operator's handshake) before the pod is deleted or removed from the peer lists.
//!
//! Connections accepted during Closing (a client whose endpoint list is a moment stale) are
//! served until Done; connections accepted after Done are served too, with writes refused (for
//! tools that inspect a leaving node). `Handoff { start: false }` cancels at any phase.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::server::Server;

/// How often the closing phase checks whether every client has gone.
const POLL: Duration = Duration::from_millis(20);
/// How often the end of the closing phase checks for writes still on their way to the backlog
/// (a batch of pipelined commands publishes them within microseconds; a script, when it ends).
const IN_FLIGHT_POLL: Duration = Duration::from_millis(1);
/// After how long that wait is logged (once).
const IN_FLIGHT_LOG_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Serving,
    Closing,
    Done,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Serving => "serving",
            Phase::Closing => "closing",
            Phase::Done => "done",
        }
    }
}

/// The node's handoff state; see the module docs.
pub struct Handoff {
    phase: watch::Sender<Phase>,
    /// The task that ends the closing phase.
    closer: Mutex<Option<JoinHandle<()>>>,
}

impl Default for Handoff {
    fn default() -> Self {
        Handoff { phase: watch::channel(Phase::Serving).0, closer: Mutex::new(None) }
    }
}

impl Handoff {
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// What connections watch: a change to Closing or Done is their cue.
    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Starts a handoff (a second call while one runs changes nothing).
    pub fn start(&self, server: &Arc<Server>, grace: Duration) {
        let mut closer = self.closer.lock();
        if self.phase() != Phase::Serving {
            return;
        }
        info!(clients = server.clients.count(), grace_ms = grace.as_millis() as u64, "handoff: closing idle client connections");
        self.set_phase(server, Phase::Closing);
        let server = server.clone();
        *closer = Some(tokio::spawn(async move {
            let deadline = Instant::now() + grace;
            while server.clients.count() > 0 && Instant::now() < deadline {
                tokio::time::sleep(POLL).await;
            }
            // Writes are refused before the busy connections go, so nothing is acknowledged
            // after `last_seq` is final.
            server.mesh.set_draining(true);
            // A write admitted just before the refusal may not be in the backlog yet (a
            // connection publishes its batch's writes when the batch ends, and before any
            // reply: `client::ClientWrites`); `last_seq` is final once none is on its way. A
            // batch publishes within microseconds, a running script only when it ends, so a
            // wait that lasts is logged with the clients it waits for.
            let waiting_since = Instant::now();
            let mut logged = false;
            loop {
                let clients = server.clients.writes_in_flight();
                if clients.is_empty() {
                    break;
                }
                if !logged && waiting_since.elapsed() >= IN_FLIGHT_LOG_AFTER {
                    warn!(?clients, "handoff: waiting for writes admitted before the refusal to reach the backlog (a script or transaction still running?)");
                    logged = true;
                }
                tokio::time::sleep(IN_FLIGHT_POLL).await;
            }
            server.handoff.set_phase(&server, Phase::Done);
            info!(clients_left = server.clients.count(), "handoff: done; writes are refused");
        }));
    }

    /// Cancels a handoff: the node serves clients and takes writes again.
    pub fn cancel(&self, server: &Server) {
        let mut closer = self.closer.lock();
        if let Some(task) = closer.take() {
            task.abort();
        }
        if self.phase() != Phase::Serving {
            info!("handoff cancelled: serving again");
        }
        server.mesh.set_draining(false);
        self.set_phase(server, Phase::Serving);
    }

    /// The one way the phase changes: connections wait on their own waker between requests
    /// (`ClientHandle::wake_control`), so each is woken to look at the new phase.
    fn set_phase(&self, server: &Server, phase: Phase) {
        self.phase.send_replace(phase);
        server.clients.wake_all();
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::client::ClientState;
    use crate::cmd::{dispatch, Call};
    use crate::config::Config;
    use crate::frame::Frame;

    fn call(args: &[&str]) -> Call {
        Call::new(args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect())
    }

    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A connection publishes its pipelined batch's writes when the batch ends: a refusal that
    /// lands in the middle of a batch must not make the handoff Done (its `last_seq` final)
    /// before the writes the batch ran before it are in the backlog, or the node would
    /// acknowledge a write after its peers confirmed everything through `last_seq`.
    #[tokio::test]
    async fn done_waits_for_the_writes_admitted_before_the_refusal() {
        let server = Server::new(Config::from_args(&[]).expect("no arguments"), "test").expect("a server");
        // Its writes recorded for peers, as a node's in a mesh.
        server.store.enable_replication();
        let addr = "127.0.0.1:1".parse().expect("an address");
        let (handle, _pushes) = server.clients.register(addr, addr);
        let mut client = ClientState::new(handle, true);
        client.writes.batch();
        let before = server.mesh.last_seq();
        assert_eq!(dispatch(&server, &mut client, call(&["SET", "k", "v"])), Frame::Simple("OK"));

        // No grace: the refusal comes at once, with the SET still unpublished.
        server.handoff.start(&server, Duration::ZERO);
        until("writes are refused", || server.mesh.draining()).await;
        match dispatch(&server, &mut client, call(&["SET", "k2", "v"])) {
            Frame::Error(e) => assert!(e.starts_with("READONLY"), "{e}"),
            other => panic!("a write after the refusal ran: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(server.handoff.phase(), Phase::Closing, "done while an admitted write was not in the backlog");
        assert_eq!(server.mesh.last_seq(), before);
        assert_eq!(server.clients.writes_in_flight(), vec![client.id], "the client the handoff waits for");

        // The batch ends: its write is published, and only now is the handoff done.
        client.writes.publish(&server.repl_log);
        until("the handoff is done", || server.handoff.phase() == Phase::Done).await;
        assert_eq!(server.mesh.last_seq(), before + 1, "last_seq covers the write");
        assert_eq!(server.clients.writes_in_flight(), Vec::<u64>::new());
    }
}
