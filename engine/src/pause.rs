//! `CLIENT PAUSE timeout [WRITE|ALL]` and `CLIENT UNPAUSE`, as Redis 7.0: while a pause is on,
//! the commands it covers are held, not refused — the client's connection waits before running
//! the command and runs it when the pause ends (timeout, `CLIENT UNPAUSE`), so the client sees
//! only a slower reply. `ALL` holds every command; `WRITE` holds what may change the dataset or
//! replicate: write commands, `PUBLISH`/`SPUBLISH`, `PFCOUNT`, `EVAL`/`EVALSHA`/`FCALL` of a
//! script or function without the `no-writes` flag, and an `EXEC` whose queue holds any of
//! those (Redis's `CMD_WRITE | CMD_MAY_REPLICATE`, the script's flags deciding for scripts).
//! A command is held even when it would only be queued inside `MULTI`, as in Redis.
//!
//! A pause is per node. It holds this node's clients only: writes merged from peers keep
//! arriving and applying during it (the mesh has no leader to hand writes to), and expiry keeps
//! deleting keys whose time is up (Redis pauses both, so a paused primary's dataset stays
//! still for a failover; a mesh node's dataset does not stay still while its peers write).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::ClientState;
use crate::cmd::{flags, TABLE};
use crate::server::Server;

/// What a pause holds. `All` is the stronger: a second pause keeps the stronger of the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    Write,
    All,
}

/// The pause in force: its mode and when it ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub on: Option<(Mode, Instant)>,
}

impl State {
    /// The pause if it has not ended by `now`.
    fn at(self, now: Instant) -> Option<(Mode, Instant)> {
        self.on.filter(|(_, until)| *until > now)
    }
}

pub struct Pause {
    /// Whether a pause was set and not lifted (it may have timed out since): the one relaxed
    /// load a command pays while no pause is on.
    set: AtomicBool,
    state: watch::Sender<State>,
    /// Clients waiting on the pause now (`INFO`'s `blocked_clients` counts them, as Redis).
    held: AtomicUsize,
}

impl Default for Pause {
    fn default() -> Self {
        Pause { set: AtomicBool::new(false), state: watch::Sender::new(State::default()), held: AtomicUsize::new(0) }
    }
}

impl Pause {
    /// `CLIENT PAUSE`: pauses `mode` until `until`. With a pause already on, the stronger mode
    /// and the later end win (Redis's `pauseClients`).
    pub fn pause(&self, mode: Mode, until: Instant) {
        let now = Instant::now();
        self.state.send_modify(|s| {
            s.on = Some(match s.at(now) {
                Some((m, u)) => (m.max(mode), u.max(until)),
                None => (mode, until),
            });
        });
        self.set.store(true, Ordering::Release);
    }

    /// `CLIENT UNPAUSE`: held clients run their commands now.
    pub fn unpause(&self) {
        self.set.store(false, Ordering::Release);
        self.state.send_replace(State::default());
    }

    /// The pause in force now, if any.
    pub fn current(&self) -> Option<(Mode, Instant)> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        self.state.borrow().at(Instant::now())
    }

    /// Clients held by the pause right now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Waits while the pause holds `argv` from `client`; `false` if the client was killed or
    /// the server is stopping meanwhile (close the connection).
    pub async fn wait(&self, server: &Server, client: &ClientState, argv: &[Bytes]) -> bool {
        let mut changes = self.state.subscribe();
        let mut shutdown = server.shutdown_signal();
        let handle = &client.handle;
        self.held.fetch_add(1, Ordering::Relaxed);
        handle.blocked.store(true, Ordering::Relaxed);
        let go_on = loop {
            let state = *changes.borrow_and_update();
            let Some((mode, until)) = state.at(Instant::now()) else { break true };
            if mode == Mode::Write && !may_replicate(server, client, argv) {
                break true;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break true },
                _ = tokio::time::sleep_until(until) => {}
                _ = handle.kill_signal.notified() => break false,
                _ = shutdown.changed() => break false,
            }
        };
        handle.blocked.store(false, Ordering::Relaxed);
        self.held.fetch_sub(1, Ordering::Relaxed);
        go_on && !handle.killed.load(Ordering::Acquire)
    }
}

/// Whether the pause in force holds `argv` from `client` (checked before the command runs).
pub fn holds(server: &Server, client: &ClientState, argv: &[Bytes]) -> bool {
    match server.pause.current() {
        None => false,
        Some((Mode::All, _)) => true,
        Some((Mode::Write, _)) => may_replicate(server, client, argv),
    }
}

/// Redis's `is_may_replicate_command`: a write, a command that may replicate, a script that
/// may write, or an `EXEC` of any of those. An unknown command or a wrong arity is not held:
/// its error comes at once.
pub fn may_replicate(server: &Server, client: &ClientState, argv: &[Bytes]) -> bool {
    let Some(index) = TABLE.find(&argv[0]) else { return false };
    let spec = TABLE.specs[index];
    if !spec.arity_ok(argv.len()) {
        return false;
    }
    if spec.name == "exec" {
        return client.multi.as_ref().is_some_and(|m| m.queue.iter().any(|(i, queued)| one_may_replicate(server, *i, queued)));
    }
    one_may_replicate(server, index, argv)
}

fn one_may_replicate(server: &Server, index: usize, argv: &[Bytes]) -> bool {
    let spec = TABLE.specs[index];
    if spec.flags & flags::WRITE != 0 {
        return true;
    }
    let no_writes = |script_flags: u32| script_flags & crate::script::flags::NO_WRITES != 0;
    match spec.name {
        "publish" | "spublish" | "pfcount" => true,
        // A script that cannot be parsed or found fails at once; one that may write waits.
        "eval" => argv.get(1).is_some_and(|body| crate::script::eval_flags(body).is_ok_and(|f| !no_writes(f))),
        "evalsha" => argv.get(1).and_then(|sha| server.scripts.get(sha)).is_some_and(|s| !no_writes(s.flags)),
        "fcall" => argv.get(1).is_some_and(|name| {
            // A library a peer replicated is compiled first (`Scripts::sync_functions`): its
            // flags decide. A client's command, never a script's: compiling here is allowed.
            server.scripts.sync_functions(&server.store);
            server.scripts.functions.read().find(name).is_some_and(|c| !no_writes(c.info().flags))
        }),
        // Redis flags FUNCTION LOAD, DELETE and FLUSH `write`; they replicate (db::functions).
        "function" => argv.get(1).is_some_and(|sub| [&b"load"[..], b"delete", b"flush"].iter().any(|s| sub.eq_ignore_ascii_case(s))),
        _ => false,
    }
}
