//! The command table and the path every command takes: look up → check arity, auth and
//! context → lock the shards its keys live in → run → count.
//!
//! Each family module (`string`, `hash`, ...) exports `COMMANDS`, a slice of `CommandSpec`s
//! with Redis's name, arity, flags and key positions; `TABLE` joins them. A handler gets an
//! `Exec` — the locked keyspace (`ctx`), the shared server and the calling client — and
//! returns a `Reply`.

pub mod args;
pub mod bitfield;
pub mod bits;
pub mod blocking;
pub mod connection;
pub mod dump;
pub mod geo;
pub mod hash;
pub mod hll;
pub mod keys;
pub mod list;
pub mod meta;
pub mod multi;
pub mod pubsub;
pub mod replication;
pub mod scripting;
pub mod server;
pub mod set;
pub mod sort;
pub mod string;
pub mod tracking;
pub mod zset;

use crate::clock::Stopwatch;
use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::client::ClientState;
use crate::db::ctx::Ctx;
use crate::db::{HashedKey, KeyHint, Locks};
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
pub use crate::monitor::Source;
use crate::server::Server;
use crate::tally::Tally;

/// Command flags (Redis's names, lowercase in `COMMAND INFO`).
pub mod flags {
    pub const WRITE: u32 = 1;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const PUBSUB: u32 = 1 << 4;
    pub const FAST: u32 = 1 << 5;
    /// Allowed before authentication.
    pub const NO_AUTH: u32 = 1 << 6;
    pub const BLOCKING: u32 = 1 << 7;
    /// Refused inside `MULTI` ("Command not allowed inside a transaction").
    pub const NO_MULTI: u32 = 1 << 8;
    /// Runs at once even inside `MULTI` (MULTI, EXEC, DISCARD, WATCH, QUIT, RESET).
    pub const IMMEDIATE: u32 = 1 << 12;
    /// Changes the client's database mid-transaction (SELECT, MOVE, SWAPDB, COPY ... DB).
    pub const CROSS_DB: u32 = 1 << 9;
    pub const LOADING: u32 = 1 << 10;
    pub const STALE: u32 = 1 << 11;
    /// Not logged in `SLOWLOG` itself (EXEC: its commands are).
    pub const SKIP_SLOWLOG: u32 = 1 << 13;
    /// Shown to MONITOR clients by the command itself, before it runs (EVAL, FCALL).
    pub const SKIP_MONITOR: u32 = 1 << 14;

    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (BLOCKING, "blocking"),
        (NO_MULTI, "no_multi"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (SKIP_MONITOR, "skip_monitor"),
    ];
}

/// Given the arguments and the client's database, the `(db, argument position)` of each key.
pub type CrossDbKeys = fn(&[Bytes], usize) -> Vec<(usize, usize)>;

/// Where a command's keys are, so the dispatcher can lock their shards before it runs.
#[derive(Clone, Copy)]
pub enum Keys {
    /// No keys (connection and server commands).
    None,
    /// Redis's `first, last, step` (last < 0 counts from the end).
    Range(usize, isize, usize),
    /// Key positions that depend on other arguments (`ZUNIONSTORE dst numkeys k...`).
    Custom(fn(&[Bytes]) -> Vec<usize>),
    /// Keys in other databases too (`MOVE`, `COPY ... DB`): `(db, argument position)`
    /// pairs, given the client's current database.
    CrossDb(CrossDbKeys),
    /// Walks whole databases one shard at a time (KEYS, SCAN, FLUSHDB).
    Whole,
    /// Locks every shard of the client's database for the whole command (SORT, whose BY/GET
    /// patterns name arbitrary keys).
    Database,
}

pub type Handler = fn(&mut Exec<'_, '_>, &[Bytes]) -> Reply;

pub struct CommandSpec {
    pub name: &'static str,
    pub arity: i32,
    pub flags: u32,
    pub keys: Keys,
    pub run: Handler,
    pub group: &'static str,
    pub summary: &'static str,
}

/// Per-command counters for `INFO commandstats`, `LATENCY HISTOGRAM` and `/metrics`, counted
/// per thread (`crate::tally`).
#[derive(Default)]
pub struct CommandStats(Tally<{ stat::FIELDS }>);

/// Where each counter of a `CommandStats` lies. A call is counted once, in its duration's
/// bucket: the calls are the histogram's sum.
mod stat {
    pub const USEC: usize = 0;
    pub const REJECTED: usize = 1;
    pub const FAILED: usize = 2;
    /// Calls by duration, in power-of-two µs buckets (`crate::latency`), from here on.
    pub const HISTOGRAM: usize = 3;
    pub const FIELDS: usize = HISTOGRAM + crate::latency::BUCKETS;
}

impl CommandStats {
    /// A call that ran for `duration_us`; `failed` if it answered an error.
    #[inline]
    pub fn record_call(&self, duration_us: u64, failed: bool) {
        let bucket = stat::HISTOGRAM + crate::latency::bucket_of(duration_us);
        self.0.add_each(&[(stat::USEC, duration_us), (bucket, 1)]);
        if failed {
            self.0.add(stat::FAILED, 1);
        }
    }

    /// A call refused before it ran (Redis's rejected calls).
    pub fn record_rejected(&self) {
        self.0.add(stat::REJECTED, 1);
    }

    pub fn calls(&self) -> u64 {
        self.histogram().iter().sum()
    }

    pub fn usec(&self) -> u64 {
        self.0.get(stat::USEC)
    }

    pub fn rejected(&self) -> u64 {
        self.0.get(stat::REJECTED)
    }

    pub fn failed(&self) -> u64 {
        self.0.get(stat::FAILED)
    }

    /// Calls by duration, in power-of-two µs buckets (`crate::latency`).
    pub fn histogram(&self) -> [u64; crate::latency::BUCKETS] {
        std::array::from_fn(|bucket| self.0.get(stat::HISTOGRAM + bucket))
    }

    /// Starts every counter from zero again (`CONFIG RESETSTAT`).
    pub fn reset(&self) {
        self.0.reset();
    }
}

pub struct CommandTable {
    pub specs: Vec<&'static CommandSpec>,
    pub stats: Vec<CommandStats>,
    /// A container command's subcommands (`meta::SUBCOMMANDS`), each counted on its own as
    /// Redis 7 counts `client|id`, by the container's index. `stats` keeps what ran under the
    /// container itself: an unknown subcommand.
    pub subs: Vec<Vec<SubStats>>,
    /// Command indexes grouped by their names' shape (`name_shape`), the group of shape `s`
    /// at `by_shape[shape_starts[s]..shape_starts[s + 1]]`: a lookup compares the name with
    /// the one to four commands of its shape, with no hash and no lowered copy of the name
    /// (a hash map of lowered, zero-padded names cost every request ~26 instructions more;
    /// issue 16).
    by_shape: Vec<u16>,
    shape_starts: Vec<u16>,
    /// By index: a hash or set command with its key first, whose next argument is (most
    /// often) an element's name: the batch prefetch's hint (`prefetch`).
    pub names_element: Vec<bool>,
}

/// The longest command name (`client|...` subcommands are not looked up here).
const MAX_NAME: usize = 32;

/// Shapes per name length: six bits of a name's first and last bytes.
const SHAPES_PER_LENGTH: usize = 64;

/// A name's shape, its group in `CommandTable::by_shape`: its length, and its first and last
/// bytes' low five bits, which are the same for a letter in either case (`S` 0x53, `s` 0x73),
/// mixed into six bits. Other bytes share shapes with letters; `find`'s comparison tells them
/// apart.
fn name_shape(name: &[u8]) -> Option<usize> {
    let (&first, &last) = (name.first()?, name.last()?);
    let mixed = usize::from(first & 31) ^ (usize::from(last & 31) << 1);
    (name.len() <= MAX_NAME).then_some(name.len() * SHAPES_PER_LENGTH + mixed)
}

/// One subcommand's counters.
pub struct SubStats {
    pub name: &'static str,
    /// `parent|sub`, Redis's name for it in `INFO commandstats` and `LATENCY HISTOGRAM`.
    pub full: String,
    pub stats: CommandStats,
}

pub static TABLE: LazyLock<CommandTable> = LazyLock::new(|| {
    let families: &[&'static [CommandSpec]] = &[
        connection::COMMANDS,
        server::COMMANDS,
        keys::COMMANDS,
        dump::COMMANDS,
        string::COMMANDS,
        bits::COMMANDS,
        bitfield::COMMANDS,
        hash::COMMANDS,
        hll::COMMANDS,
        set::COMMANDS,
        zset::COMMANDS,
        geo::COMMANDS,
        list::COMMANDS,
        sort::COMMANDS,
        blocking::COMMANDS,
        multi::COMMANDS,
        pubsub::COMMANDS,
        replication::COMMANDS,
        scripting::COMMANDS,
    ];
    let specs: Vec<&'static CommandSpec> = families.iter().flat_map(|f| f.iter()).collect();
    let shape_of = |i: usize| name_shape(specs[i].name.as_bytes()).expect("command names fit MAX_NAME");
    let mut by_shape: Vec<u16> = (0..specs.len()).map(|i| u16::try_from(i).expect("fewer than 65,536 commands")).collect();
    by_shape.sort_by_key(|&i| shape_of(usize::from(i)));
    let shape_starts = (0..=(MAX_NAME + 1) * SHAPES_PER_LENGTH).map(|shape| by_shape.partition_point(|&i| shape_of(usize::from(i)) < shape) as u16).collect();
    let stats = specs.iter().map(|_| CommandStats::default()).collect();
    let subs = specs
        .iter()
        .map(|spec| {
            let names = meta::SUBCOMMANDS.iter().find(|(parent, _)| *parent == spec.name).map_or(&[][..], |(_, subs)| *subs);
            names.iter().map(|&name| SubStats { name, full: format!("{}|{name}", spec.name), stats: CommandStats::default() }).collect()
        })
        .collect();
    let names_element = specs.iter().map(|spec| matches!((spec.group, spec.keys), ("hash" | "set", Keys::Range(1, ..)))).collect();
    CommandTable { specs, stats, subs, by_shape, shape_starts, names_element }
});

impl CommandTable {
    /// Looks a command up by name, case-insensitively, without allocating for short names.
    pub fn find(&self, name: &[u8]) -> Option<usize> {
        let shape = name_shape(name)?;
        let group = &self.by_shape[usize::from(self.shape_starts[shape])..usize::from(self.shape_starts[shape + 1])];
        group.iter().map(|&i| usize::from(i)).find(|&i| self.specs[i].name.as_bytes().eq_ignore_ascii_case(name))
    }

    /// The counters a call of command `index` with `argv` counts in: its subcommand's for a
    /// container command with a known subcommand, else the command's.
    pub fn stats_for(&self, index: usize, argv: &[Bytes]) -> &CommandStats {
        let subs = &self.subs[index];
        if !subs.is_empty() {
            if let Some(sub) = argv.get(1).and_then(|a| subs.iter().find(|s| s.name.as_bytes().eq_ignore_ascii_case(a))) {
                return &sub.stats;
            }
        }
        &self.stats[index]
    }

    /// Every counter with Redis's name for it: each command, then its subcommands
    /// (`config|set`).
    pub fn named_stats(&self) -> impl Iterator<Item = (&str, &CommandStats)> {
        self.specs
            .iter()
            .zip(&self.stats)
            .zip(&self.subs)
            .flat_map(|((spec, stats), subs)| std::iter::once((spec.name, stats)).chain(subs.iter().map(|s| (s.full.as_str(), &s.stats))))
    }

    /// Calls of command `index` and all its subcommands (`/metrics` counts per command).
    pub fn total_calls(&self, index: usize) -> (u64, u64) {
        let all = std::iter::once(&self.stats[index]).chain(self.subs[index].iter().map(|s| &s.stats));
        all.fold((0, 0), |(calls, failed), s| (calls + s.calls(), failed + s.failed()))
    }
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }

    /// Indexes of the key arguments in `argv`.
    pub fn key_positions(&self, argv: &[Bytes]) -> Vec<usize> {
        match self.keys {
            Keys::None | Keys::Whole => Vec::new(),
            Keys::CrossDb(f) => f(argv, 0).into_iter().map(|(_, p)| p).collect(),
            Keys::Range(first, last, step) => {
                let last = if last < 0 { argv.len() as isize + last } else { last };
                if last < first as isize {
                    return Vec::new();
                }
                (first..=last as usize).step_by(step.max(1)).filter(|&i| i < argv.len()).collect()
            }
            Keys::Custom(f) => f(argv),
            // The source key and the last STORE destination (SORT_RO has none).
            Keys::Database => sort::key_positions(argv, self.flags & flags::WRITE != 0),
        }
    }
}

/// What a handler works with.
pub struct Exec<'a, 'c> {
    pub ctx: Ctx<'a>,
    pub server: &'a Server,
    pub client: &'c mut ClientState,
}

impl Exec<'_, '_> {
    /// Publishes this client's writes so far, this command's included (`ClientWrites`), and
    /// returns the backlog sequence of the last: for a command that waits on its client's
    /// writes (`WAIT`).
    pub fn publish_writes(&mut self) -> u64 {
        let ops = std::mem::take(&mut self.ctx.effects);
        self.client.writes.hold(ops, &self.server.repl_log);
        self.client.writes.publish(&self.server.repl_log)
    }
}

/// The wrong-arity error with Redis's wording (`'client|setname'` for subcommands).
pub fn wrong_arity(name: &str) -> CmdError {
    CmdError::WrongArity(name.to_ascii_lowercase())
}

pub fn unknown_subcommand(sub: &[u8], command: &str) -> CmdError {
    CmdError::err(format!("unknown subcommand '{}'. Try {} HELP.", String::from_utf8_lossy(sub), command.to_ascii_uppercase()))
}

/// Locks the shards of `argv`'s keys in `db`, and returns the hint for the command's own
/// lookups (`Ctx::key_hint`): a command with one key gets it hashed, its hashes taken from
/// `key_hint` where the batch's prefetch hashed it already; one with several keys keeps the
/// prefetch's hint of its first.
pub fn lock_for<'a>(server: &'a Server, spec: &CommandSpec, argv: &[Bytes], db: usize, key_hint: KeyHint) -> (Locks<'a>, KeyHint) {
    let store = &server.store;
    let one_key = |key: &[u8]| {
        let hashed = key_hint.hashed(key);
        (store.lock_one(db, hashed.shard()), hashed.hint())
    };
    match spec.keys {
        Keys::None | Keys::Whole => (Locks::none(), KeyHint::NONE),
        Keys::Database => (store.lock_many((0..crate::db::SHARDS_PER_DB).map(|s| (db, s)).collect()), KeyHint::NONE),
        Keys::CrossDb(f) => {
            // An invalid target database is reported by the handler; lock only real ones.
            let wanted = f(argv, db).into_iter().filter(|&(d, _)| d < store.databases()).map(|(d, p)| (d, store.shard_of(&argv[p]))).collect();
            (store.lock_many(wanted), KeyHint::NONE)
        }
        // The common case, one key at a fixed position (GET, SET, INCR, LPUSH, HSET, ...): no
        // list of positions to build, sort and deduplicate.
        Keys::Range(first, last, _) if last == first as isize || (last == -1 && argv.len() == first + 1) => match argv.get(first) {
            Some(key) => one_key(key),
            None => (Locks::none(), KeyHint::NONE),
        },
        _ => match spec.key_positions(argv)[..] {
            // One key where its position depends on the arguments (`EVALSHA sha 1 key`).
            [at] => one_key(&argv[at]),
            ref positions => (store.lock_many(positions.iter().map(|&i| (db, key_hint.shard_of(&argv[i]))).collect()), key_hint),
        },
    }
}

/// Runs one command outside a transaction: lock, run, unlock, count.
///
/// `key_hint`: the command's first key as the batch's prefetch hashed it (`KeyHint::NONE`
/// where none did).
pub fn run_command(server: &Server, client: &mut ClientState, index: usize, argv: &[Bytes], key_hint: KeyHint) -> Frame {
    let spec = TABLE.specs[index];
    let (locks, key_hint) = lock_for(server, spec, argv, client.db, key_hint);
    // One clock read gives the command its wall time and starts its timer (once it holds
    // its locks: the duration is the run's, as Redis times `c->cmd->proc`).
    let timer = Stopwatch::start();
    let mut ctx = Ctx::new(&server.store, client.db, server.store.hlc.wall_ms_at(timer.started_ms()), locks);
    ctx.no_touch = no_touch(client, spec);
    ctx.key_hint = key_hint;
    // The command's ops go after the client's unpublished ones (`ClientWrites`).
    ctx.effects = client.writes.take_pending();
    // The context (and with it the locks) ends with this block, dropped where it lies:
    // `drop(exec)` moved it, a copy of its few hundred bytes per command.
    let (reply, ready, effects, events, modified) = {
        let mut exec = Exec { ctx, server, client: &mut *client };
        let reply = (spec.run)(&mut exec, argv);
        let ctx = &mut exec.ctx;
        (reply, std::mem::take(&mut ctx.ready_keys), std::mem::take(&mut ctx.effects), ctx.take_events(), std::mem::take(&mut ctx.modified))
    };
    client.writes.hold(effects, &server.repl_log);
    if !events.is_empty() {
        server.store.notify.publish(events);
    }
    let own_invalidations =
        if server.store.tracking.load(Ordering::Relaxed) { tracking::after_command(server, client, spec, argv, modified) } else { Vec::new() };
    let duration_us = timer.elapsed_us();
    record(index, argv, duration_us, &reply);
    log_if_slow(server, client, spec, argv, duration_us);
    // A blocked command was shown when it first ran, not again when it is served.
    if !client.serving_wakeup {
        show_to_monitors(server, client.db, Source::Client(&client.handle.addr), spec, argv);
    }
    if !ready.is_empty() {
        blocking::wake_ready(server, ready);
    }
    tracking::with_pushes(Vec::new(), reply.unwrap_or_else(Frame::from), own_invalidations)
}

/// Whether `spec` leaves keys' access times alone for this client (`CLIENT NO-TOUCH`, all
/// but `TOUCH`, as Redis 7.2).
pub fn no_touch(client: &ClientState, spec: &CommandSpec) -> bool {
    client.handle.no_touch.load(Ordering::Relaxed) && spec.name != "touch"
}

/// Shows a command that ran to MONITOR clients: the one place for which commands are shown.
pub fn show_to_monitors(server: &Server, db: usize, source: Source<'_>, spec: &CommandSpec, argv: &[Bytes]) {
    if server.monitors.active() && spec.flags & (flags::ADMIN | flags::SKIP_MONITOR) == 0 {
        server.monitors.feed(db, source, argv);
    }
}

/// Logs a command that ran for `elapsed` in `SLOWLOG` and the latency monitor if it was slow
/// enough: the one place for the rules (a command that blocked is logged in SLOWLOG when it
/// is served; EXEC as its commands).
pub fn log_if_slow(server: &Server, client: &ClientState, spec: &CommandSpec, argv: &[Bytes], duration_us: u64) {
    server.latency.add_if_needed(if spec.flags & flags::FAST != 0 { "fast-command" } else { "command" }, duration_us / 1000);
    if server.slowlog.wants(duration_us) && client.block.is_none() && !client.would_block && spec.flags & flags::SKIP_SLOWLOG == 0 {
        server.slowlog.record(argv, duration_us, &client.handle.addr, client.handle.name.lock().clone());
    }
}

pub fn record(index: usize, argv: &[Bytes], duration_us: u64, reply: &Reply) {
    let stats = TABLE.stats_for(index, argv);
    // A subcommand's arity error (`client|setname`): Redis checks a subcommand's arity before
    // calling it (processCommand), so it is a rejected call, not a failed one.
    if matches!(reply, Err(CmdError::WrongArity(name)) if name.contains('|')) {
        stats.record_rejected();
        return;
    }
    stats.record_call(duration_us, matches!(reply, Err(_) | Ok(Frame::Error(_))));
}

/// Starts loading the keys a pipelined batch of requests will look up (`Store::prefetch`):
/// the first key of each command (GET, SET, INCR, HSET, ..., and a script's first declared
/// key), in the client's current database, and in a batch on one hash or set, the elements
/// its commands name (`Store::prefetch_elements`). A hint: a command the batch has not run yet
/// (a `SELECT` before it, a key it renames) only makes a prefetch useless.
///
/// Each key is hashed here once, and the command takes its hashes from its `Call`
/// (`Call::key_hint`) instead of hashing the key again for its lock and its lookups.
pub fn prefetch(server: &Server, client: &ClientState, batch: &mut [Call]) {
    // The keys borrow `batch` mutably (each call's hint is written as its key is hashed)
    // until this block ends.
    let names_elements = {
        let mut names_elements = false;
        let mut keys: SmallVec<[HashedKey<'_>; 16]> = SmallVec::new();
        for Call { argv, index, key_hint } in batch.iter_mut() {
            let Some(index) = *index else { continue };
            names_elements |= TABLE.names_element[index];
            let key = match TABLE.specs[index].keys {
                Keys::Range(first, ..) => argv.get(first),
                // Positions read from the arguments (`EVALSHA sha numkeys key...`): a script's
                // first key is looked up by the command it calls, a miss as any other.
                Keys::Custom(positions) => positions(argv).first().and_then(|&at| argv.get(at)),
                _ => None,
            };
            if let Some(key) = key {
                let hashed = HashedKey::new(key);
                *key_hint = hashed.hint();
                keys.push(hashed);
            }
        }
        if keys.len() > 1 {
            server.store.prefetch(client.db, keys.iter().copied());
        }
        names_elements
    };
    if names_elements {
        prefetch_elements(server, client, batch);
    }
}

/// The elements a batch of hash and set commands names (the argument after the key, for most
/// of them; where it is no element, a wasted load), when consecutive commands name the same
/// collection: a batch on one big collection, whose elements' probes would each miss the
/// cache in turn (`Store::prefetch_elements`). Many small collections, each named once, are
/// left alone: their elements sit in a vector the command reads anyway.
fn prefetch_elements(server: &Server, client: &ClientState, batch: &[Call]) {
    let elements: SmallVec<[(&[u8], &[u8]); 16]> = batch
        .iter()
        .filter_map(|call| match TABLE.names_element[call.index?] {
            true => Some((&call.argv.get(1)?[..], &call.argv.get(2)?[..])),
            false => None,
        })
        .collect();
    if elements.windows(2).any(|pair| pair[0].0 == pair[1].0) {
        server.store.prefetch_elements(client.db, &elements);
    }
}

/// A request from a connection: its arguments and its command's place in `TABLE` (`None`:
/// no such command), looked up once for both the batch's prefetch and the run.
pub struct Call {
    pub argv: Vec<Bytes>,
    index: Option<usize>,
    /// The command's first key as the batch's prefetch hashed it (`prefetch`).
    key_hint: KeyHint,
}

impl Call {
    /// `argv` must not be empty (the connection skips empty requests).
    pub fn new(argv: Vec<Bytes>) -> Call {
        let index = TABLE.find(&argv[0]);
        Call { argv, index, key_hint: KeyHint::NONE }
    }
}

/// The full path of one request from a connection: checks, `MULTI` queueing, `maxmemory`,
/// then `run_command`; error replies are counted (`INFO errorstats`).
pub fn dispatch(server: &Server, client: &mut ClientState, call: Call) -> Frame {
    let reply = checked_run(server, client, call);
    server.errors.count_reply(&reply);
    reply
}

fn checked_run(server: &Server, client: &mut ClientState, Call { argv, index, key_hint }: Call) -> Frame {
    server.stats.commands_processed.incr();
    match check(server, client, index, &argv) {
        Ok(index) => {
            let spec = TABLE.specs[index];
            client.handle.last_command.store(index + 1, Ordering::Relaxed);
            if client.multi.is_some() && spec.flags & flags::IMMEDIATE == 0 {
                if let Some(multi) = client.multi.as_mut() {
                    multi.queue.push((index, argv));
                }
                return Frame::Simple("QUEUED");
            }
            client.would_block = false;
            // Keys evicted to make room for this command: their invalidations go first.
            let evicted =
                if server.store.tracking.load(Ordering::Relaxed) { server.tracking.evicted(&server.clients, &server.store, client.id) } else { Vec::new() };
            let reply = run_command(server, client, index, &argv, key_hint);
            tracking::with_pushes(evicted, reply, Vec::new())
        }
        Err((index, e)) => {
            if let Some(i) = index {
                TABLE.stats_for(i, &argv).record_rejected();
            }
            // A refused EXEC (a script is BUSY) ends the transaction, as Redis's rejectCommand.
            if client.multi.is_some() && index.is_some_and(|i| TABLE.specs[i].name == "exec") {
                client.multi = None;
                client.handle.in_multi.store(false, Ordering::Relaxed);
                multi::unwatch_all(server, client);
                let text = Frame::from(e);
                let reason = if let Frame::Error(text) = &text { text.as_str() } else { "" };
                return Frame::error(format!("EXECABORT Transaction discarded because of: {reason}"));
            }
            if let Some(multi) = client.multi.as_mut() {
                multi.failed = true;
            }
            Frame::from(e)
        }
    }
}

/// Everything that rejects a command before it runs, in Redis's order.
fn check(server: &Server, client: &ClientState, index: Option<usize>, argv: &[Bytes]) -> Result<usize, (Option<usize>, CmdError)> {
    let Some(index) = index else {
        return Err((None, unknown_command(argv)));
    };
    let spec = TABLE.specs[index];
    if !spec.arity_ok(argv.len()) {
        return Err((Some(index), wrong_arity(spec.name)));
    }
    if !client.authenticated && spec.flags & flags::NO_AUTH == 0 {
        return Err((Some(index), CmdError::Raw("NOAUTH Authentication required.".into())));
    }
    scripting::busy_check(server, argv).map_err(|e| (Some(index), e))?;
    if client.in_subscribe_mode() && !matches!(spec.name, "subscribe" | "unsubscribe" | "psubscribe" | "punsubscribe" | "ping" | "quit" | "reset") {
        return Err((
            Some(index),
            CmdError::err(format!("Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context", spec.name)),
        ));
    }
    if client.multi.is_some() && spec.flags & flags::NO_MULTI != 0 {
        return Err((Some(index), CmdError::err("Command not allowed inside a transaction")));
    }
    if spec.flags & flags::LOADING == 0 && server.persist.loading() {
        return Err((Some(index), CmdError::Raw("LOADING KeyMesh is loading the dataset in memory".into())));
    }
    if spec.flags & flags::WRITE != 0 && !client.writes.admit(&server.mesh) {
        return Err((Some(index), CmdError::Raw("READONLY You can't write against a node that is leaving the mesh".into())));
    }
    if spec.flags & flags::DENYOOM != 0 {
        // The store's copy of the limit (`Store::maxmemory`); the settings only when over it,
        // whose limit decides (a `CONFIG SET` may have changed it since).
        let maxmemory = server.store.maxmemory.load(Ordering::Relaxed);
        if maxmemory > 0 && crate::memory::used_memory() > maxmemory {
            let settings = server.settings();
            if settings.maxmemory > 0 && !crate::db::evict::make_room(&server.store, settings.maxmemory_policy, settings.maxmemory, settings.maxmemory_samples)
            {
                return Err((Some(index), CmdError::Oom));
            }
        }
    }
    Ok(index)
}

fn unknown_command(argv: &[Bytes]) -> CmdError {
    let mut args = String::new();
    for a in &argv[1..] {
        if args.len() >= 128 {
            break;
        }
        let budget = 128 - args.len();
        let text = String::from_utf8_lossy(a);
        let text: String = text.chars().take(budget).collect();
        args.push_str(&format!("'{text}' "));
    }
    let name: String = String::from_utf8_lossy(&argv[0]).chars().take(128).collect();
    CmdError::err(format!("unknown command '{name}', with args beginning with: {args}"))
}

#[cfg(test)]
mod tests {
    use super::TABLE;

    #[test]
    fn commands_are_found_by_name_in_any_case_and_only_by_their_whole_name() {
        let get = TABLE.find(b"get").expect("GET is a command");
        assert_eq!(TABLE.specs[get].name, "get");
        assert_eq!(TABLE.find(b"GeT"), Some(get));
        // A name with a NUL after it, or a prefix, is another name; so is one whose first byte
        // has a letter's low five bits (0x13 and `s` both end in 10011).
        assert_eq!(TABLE.find(b"get\0"), None);
        assert_eq!(TABLE.find(b"\x13et"), None);
        assert_eq!(TABLE.find(b"sEt").map(|i| TABLE.specs[i].name), Some("set"));
        assert_eq!(TABLE.find(b"ge"), None);
        assert_eq!(TABLE.find(b""), None);
        assert_eq!(TABLE.find(&[b'a'; 40]), None);
        for spec in &TABLE.specs {
            assert_eq!(TABLE.find(spec.name.to_ascii_uppercase().as_bytes()).map(|i| TABLE.specs[i].name), Some(spec.name));
        }
        // The groups stay small, so a lookup compares the name with a few commands at most.
        let fullest = TABLE.shape_starts.windows(2).map(|w| w[1] - w[0]).max();
        assert!(fullest.is_some_and(|n| (1..=4).contains(&n)), "{fullest:?}");
    }
}
