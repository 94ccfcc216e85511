//! Clients blocked in `BLPOP`-style commands, and waking them in the order they blocked.
//!
//! A blocking handler that finds nothing registers a `Waiter` while it still holds the shard
//! locks of its keys, so a push that lands after it looked is guaranteed to see it. After
//! any command that made a list or sorted set non-empty, `wake` re-runs the first waiter's
//! command on its behalf (as Redis's `handleClientsBlockedOnKeys` does) and sends the reply
//! to the blocked connection; it stops at the first waiter that still finds nothing.
//!
//! This module sits below the command layer: it is handed the function that re-runs a command
//! (`cmd::blocking::wake_ready` passes `cmd::run_command`), so it never calls up into `cmd` or
//! the `Server`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::client::{ClientHandle, ClientState};
use crate::db::{Key, Kind, Store};
use crate::frame::Frame;

pub struct Waiter {
    pub client: Arc<ClientHandle>,
    pub db: usize,
    pub resp: u8,
    pub command: usize,
    pub argv: Vec<Bytes>,
    pub keys: Vec<Bytes>,
    /// The type a key must hold to serve this waiter.
    pub wants: Kind,
    /// What the client gets if it times out or is unblocked.
    pub timeout_reply: Frame,
    /// Set when the blocked client gave up (timeout, kill, `CLIENT UNBLOCK`).
    pub cancelled: AtomicBool,
    /// `CLIENT UNBLOCK ... ERROR` replaces the timeout reply with this error.
    pub unblock_error: AtomicBool,
    reply: Mutex<Option<oneshot::Sender<Frame>>>,
}

impl Waiter {
    pub fn new(
        client: &ClientState,
        command: usize,
        argv: Vec<Bytes>,
        keys: Vec<Bytes>,
        wants: Kind,
        timeout_reply: Frame,
    ) -> (Arc<Waiter>, oneshot::Receiver<Frame>) {
        let (tx, rx) = oneshot::channel();
        let waiter = Arc::new(Waiter {
            client: client.handle.clone(),
            db: client.db,
            resp: client.resp,
            command,
            argv,
            keys,
            wants,
            timeout_reply,
            cancelled: AtomicBool::new(false),
            unblock_error: AtomicBool::new(false),
            reply: Mutex::new(Some(tx)),
        });
        (waiter, rx)
    }

    fn claim(&self) -> Option<oneshot::Sender<Frame>> {
        self.reply.lock().take()
    }

    fn give_up_reply(&self) -> Frame {
        if self.unblock_error.load(Ordering::Relaxed) {
            Frame::error("UNBLOCKED client unblocked via CLIENT UNBLOCK")
        } else {
            self.timeout_reply.clone()
        }
    }

    /// `CLIENT UNBLOCK`: answers the blocked client now with a timeout (or error) reply.
    /// Returns false if it was not waiting any more.
    pub fn unblock(&self, with_error: bool) -> bool {
        self.unblock_error.store(with_error, Ordering::Relaxed);
        self.cancelled.store(true, Ordering::Release);
        match self.claim() {
            Some(tx) => tx.send(self.give_up_reply()).is_ok(),
            None => false,
        }
    }

    /// Answers the blocked client with `frame` (a `WAIT`'s count) unless it already gave up
    /// or was answered; whether it was.
    pub fn answer(&self, frame: Frame) -> bool {
        if self.cancelled.load(Ordering::Acquire) {
            return false;
        }
        self.claim().is_some_and(|tx| tx.send(frame).is_ok())
    }

    /// Called by the blocked connection when it stops waiting. Returns the reply to send
    /// now, or `None` if a waker is serving it right now (its reply will arrive).
    pub fn cancel(&self) -> Option<Frame> {
        self.cancelled.store(true, Ordering::Release);
        self.claim().map(|_| self.give_up_reply())
    }
}

/// Waiters per `(db, key)`, first come first served.
type WaitQueues = HashMap<(usize, Key), VecDeque<Arc<Waiter>>>;

#[derive(Default)]
pub struct Blocking {
    queues: Mutex<WaitQueues>,
    by_client: Mutex<HashMap<u64, Arc<Waiter>>>,
}

impl Blocking {
    pub fn register(&self, waiter: Arc<Waiter>) {
        let mut queues = self.queues.lock();
        for key in &waiter.keys {
            let queue = queues.entry((waiter.db, Key::from(&key[..]))).or_default();
            if !queue.iter().any(|w| Arc::ptr_eq(w, &waiter)) {
                queue.push_back(waiter.clone());
            }
        }
        self.by_client.lock().insert(waiter.client.id, waiter);
    }

    pub fn unregister(&self, waiter: &Arc<Waiter>) {
        let mut queues = self.queues.lock();
        for key in &waiter.keys {
            let slot = (waiter.db, Key::from(&key[..]));
            if let Some(queue) = queues.get_mut(&slot) {
                queue.retain(|w| !Arc::ptr_eq(w, waiter));
                if queue.is_empty() {
                    queues.remove(&slot);
                }
            }
        }
        let mut by_client = self.by_client.lock();
        if by_client.get(&waiter.client.id).is_some_and(|w| Arc::ptr_eq(w, waiter)) {
            by_client.remove(&waiter.client.id);
        }
    }

    pub fn waiter_of(&self, client_id: u64) -> Option<Arc<Waiter>> {
        self.by_client.lock().get(&client_id).cloned()
    }

    pub fn blocked_clients(&self) -> usize {
        self.by_client.lock().len()
    }

    /// Keys clients are blocked on in database `db`.
    pub fn keys_in_db(&self, db: usize) -> Vec<(usize, Key)> {
        self.queues.lock().keys().filter(|(d, _)| *d == db).cloned().collect()
    }

    fn front(&self, db: usize, key: &Key) -> Option<Arc<Waiter>> {
        self.queues.lock().get(&(db, key.clone())).and_then(|q| q.front().cloned())
    }

    /// Serves waiters of keys that became ready in `store`, first come first served: `run`
    /// re-runs a waiter's command (`command`, `argv`) for the waiter's proxy client.
    pub fn wake(&self, store: &Store, mut ready: Vec<(usize, Key)>, mut run: impl FnMut(&mut ClientState, usize, &[Bytes]) -> Frame) {
        if self.by_client.lock().is_empty() {
            return;
        }
        ready.dedup();
        for (db, key) in ready {
            while let Some(waiter) = self.front(db, &key) {
                // A key that now holds another type (`LPUSH` then `SET` in one transaction)
                // leaves its clients blocked, as in Redis.
                let shard = store.shard_of(&key);
                if store.lock_shard(db, shard).raw(&key).map(|e| e.value.kind()) != Some(waiter.wants) {
                    break;
                }
                let Some(tx) = waiter.claim() else {
                    self.unregister(&waiter);
                    continue;
                };
                let mut proxy = ClientState::new(waiter.client.clone(), true);
                proxy.db = waiter.db;
                proxy.resp = waiter.resp;
                proxy.serving_wakeup = true;
                let reply = run(&mut proxy, waiter.command, &waiter.argv);
                let served = !proxy.would_block;
                if served || waiter.cancelled.load(Ordering::Acquire) {
                    self.unregister(&waiter);
                    let _ = tx.send(if served { reply } else { waiter.give_up_reply() });
                    if !served {
                        continue;
                    }
                } else {
                    *waiter.reply.lock() = Some(tx);
                    break;
                }
            }
        }
    }
}
