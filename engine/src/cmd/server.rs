//! Server commands: `INFO`, `CONFIG`, `COMMAND`, `DBSIZE`, `FLUSHDB`, `FLUSHALL`, `SWAPDB`,
//! `TIME`, `OBJECT`, `MEMORY USAGE`, `SHUTDOWN`, `SAVE`, `BGSAVE`, `LASTSAVE`, `SLOWLOG`, `MONITOR`, `LATENCY`.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::args::{eq_ignore_case, int};
use super::flags::*;
use super::{meta, unknown_subcommand, wrong_arity, CommandSpec, Exec, Keys, TABLE};
use crate::db::SHARDS_PER_DB;
use crate::error::{CmdError, Reply};
use crate::frame::{Frame, OK};

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "server", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("info", -1, LOADING | STALE, Keys::None, info, "Returns information and statistics about the server."),
    spec!("config", -2, ADMIN | LOADING | STALE, Keys::None, config, "A container for server configuration commands."),
    spec!("command", -1, LOADING | STALE, Keys::None, command, "Returns detailed information about all commands."),
    spec!("dbsize", 1, READONLY | FAST, Keys::Whole, dbsize, "Returns the number of keys in the database."),
    spec!("flushdb", -1, WRITE, Keys::Whole, flushdb, "Remove all keys from the current database."),
    spec!("flushall", -1, WRITE, Keys::Whole, flushall, "Removes all keys from all databases."),
    spec!("swapdb", 3, WRITE | FAST | CROSS_DB, Keys::Whole, swapdb, "Swaps two Redis databases."),
    spec!("time", 1, FAST | LOADING | STALE, Keys::None, time, "Returns the server time."),
    spec!("object", -2, READONLY, Keys::Custom(object_key), object, "A container for object introspection commands."),
    spec!("memory", -2, READONLY, Keys::Custom(object_key), memory, "A container for memory diagnostics commands."),
    spec!("save", 1, ADMIN | NO_MULTI, Keys::None, save, "Synchronously saves the database(s) to disk."),
    spec!("bgsave", -1, ADMIN, Keys::None, bgsave, "Asynchronously saves the database(s) to disk."),
    spec!("monitor", 1, ADMIN | NO_MULTI | LOADING | STALE, Keys::None, monitor, "Listens for all requests received by the server in real-time."),
    spec!("latency", -2, ADMIN | LOADING | STALE, Keys::None, latency, "A container for latency diagnostics commands."),
    spec!("slowlog", -2, ADMIN | LOADING | STALE, Keys::None, slowlog, "A container for slow log commands."),
    spec!("lastsave", 1, FAST | LOADING | STALE, Keys::None, lastsave, "Returns the Unix timestamp of the last successful save to disk."),
    spec!(
        "shutdown",
        -1,
        ADMIN | NO_MULTI | LOADING | STALE,
        Keys::None,
        shutdown,
        "Synchronously saves the database(s) to disk and shuts down the Redis server."
    ),
];

/// The keys the database holds, as Redis's `DBSIZE`: a key whose time is up counts until
/// expiry deletes it (lazily, or within 100 ms by active expiry). Constant time per shard.
fn dbsize(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    let db = exec.ctx.db;
    let shards = if exec.server.store.in_use(db) { SHARDS_PER_DB } else { 0 };
    let total: usize = (0..shards).map(|shard| exec.ctx.with_shard(db, shard, |_, s| s.len())).sum();
    Ok(Frame::Integer(total as i64))
}

fn flush_mode(argv: &[Bytes]) -> Result<(), CmdError> {
    match argv.get(1) {
        None => Ok(()),
        Some(a) if argv.len() == 2 && (eq_ignore_case(a, "async") || eq_ignore_case(a, "sync")) => Ok(()),
        Some(_) => Err(CmdError::Syntax),
    }
}

fn flushdb(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    flush_mode(argv)?;
    exec.ctx.flush_db(exec.ctx.db);
    Ok(OK)
}

fn flushall(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    flush_mode(argv)?;
    for db in 0..exec.server.store.databases() {
        exec.ctx.flush_db(db);
    }
    Ok(OK)
}

fn swapdb(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let parse = |a: &[u8], which: &str| int(a).map_err(|_| CmdError::err(format!("invalid {which} DB index")));
    let (a, b) = (parse(&argv[1], "first")?, parse(&argv[2], "second")?);
    let dbs = exec.server.store.databases() as i64;
    if a < 0 || b < 0 || a >= dbs || b >= dbs {
        return Err(CmdError::err("DB index is out of range"));
    }
    let (a, b) = (a as usize, b as usize);
    if a == b {
        return Ok(OK);
    }
    let store = &exec.server.store;
    for shard in 0..SHARDS_PER_DB {
        let mut own_locks;
        let locks = if exec.ctx.locks.holds(a, shard) {
            &mut exec.ctx.locks
        } else {
            own_locks = store.lock_many(vec![(a, shard), (b, shard)]);
            &mut own_locks
        };
        let (x, y) = locks.pair((a, shard), (b, shard));
        x.touch_existing();
        y.touch_existing();
        x.swap_data(store.db(a), y, store.db(b));
        x.touch_existing();
        y.touch_existing();
    }
    // Clients blocked on keys that now exist in the swapped databases may be served.
    let mut ready = exec.server.blocking.keys_in_db(a);
    ready.extend(exec.server.blocking.keys_in_db(b));
    exec.ctx.ready_keys.extend(ready);
    Ok(OK)
}

fn time(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let _ = exec;
    Ok(Frame::Array(vec![Frame::bulk(now.as_secs().to_string()), Frame::bulk(now.subsec_micros().to_string())]))
}

fn object_key(argv: &[Bytes]) -> Vec<usize> {
    if argv.len() >= 3 {
        vec![2]
    } else {
        vec![]
    }
}

fn object(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let sub = argv[1].to_ascii_lowercase();
    if sub == b"help" {
        return Ok(Frame::array_of_bulks([
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "FREQ <key>",
            "IDLETIME <key>",
            "REFCOUNT <key>",
            "HELP",
        ]));
    }
    if argv.len() != 3 {
        return Err(wrong_arity(&format!("object|{}", String::from_utf8_lossy(&sub))));
    }
    let now = exec.ctx.now_ms;
    let policy_lfu = exec.server.settings().maxmemory_policy.lfu();
    let Some(entry) = exec.ctx.peek(&argv[2]) else {
        return Ok(Frame::Null);
    };
    match sub.as_slice() {
        b"refcount" => Ok(Frame::Integer(1)),
        b"idletime" if !policy_lfu => Ok(Frame::Integer((now / 1000).saturating_sub(entry.access as u64) as i64)),
        b"freq" if policy_lfu => Ok(Frame::Integer((entry.access & 0xff) as i64)),
        b"idletime" => Err(CmdError::err("An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")),
        b"freq" => Err(CmdError::err("An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")),
        b"encoding" => Err(CmdError::err("OBJECT ENCODING is not supported: KeyMesh chooses its own internal encodings")),
        _ => Err(unknown_subcommand(&argv[1], "object")),
    }
}

fn memory(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let sub = argv[1].to_ascii_lowercase();
    match (sub.as_slice(), argv.len()) {
        (b"usage", n) if n >= 3 => {
            // `SAMPLES n` is accepted as Redis accepts it; the size is computed, not sampled.
            let mut options = argv[3..].chunks(2);
            if options.any(|o| o.len() != 2 || !eq_ignore_case(&o[0], "samples") || !int(&o[1]).is_ok_and(|n| n >= 0)) {
                return Err(CmdError::Syntax);
            }
            let key_len = argv[2].len();
            // Like Redis's, it looks at the key without using it (no access-time update).
            Ok(exec.ctx.peek(&argv[2]).map_or(Frame::Null, |e| Frame::Integer((key_len + e.value.approx_size() + 64) as i64)))
        }
        (b"stats", 2) => Ok(Frame::Map(memory_stats(exec.server).into_iter().map(|(k, v)| (Frame::bulk(k), v)).collect())),
        (b"doctor", 2) => Ok(Frame::Verbatim(Bytes::from(memory_doctor(exec.server)))),
        (b"malloc-stats", 2) => Ok(Frame::Verbatim(Bytes::from(crate::memory::malloc_stats()))),
        (b"purge", 2) => match crate::memory::purge() {
            Ok(()) => Ok(OK),
            Err(e) => Err(CmdError::err(format!("Error purging dirty pages: {e}"))),
        },
        (b"help", 2) => Ok(Frame::array_of_bulks([
            "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
            "HELP",
            "    Print this help.",
        ])),
        (b"usage" | b"stats" | b"doctor" | b"malloc-stats" | b"purge" | b"help", _) => Err(wrong_arity(&format!("memory|{}", String::from_utf8_lossy(&sub)))),
        _ => Err(unknown_subcommand(&argv[1], "memory")),
    }
}

/// The numbers behind `MEMORY STATS` and `MEMORY DOCTOR`.
struct MemoryNumbers {
    alloc: crate::memory::AllocatorStats,
    rss: u64,
    backlog: u64,
    lua: u64,
    keys: u64,
}

impl MemoryNumbers {
    fn read(server: &crate::server::Server) -> MemoryNumbers {
        let store = &server.store;
        MemoryNumbers {
            alloc: crate::memory::allocator_stats(),
            rss: crate::memory::rss_bytes(),
            backlog: server.repl_log.held_bytes() as u64,
            lua: server.scripts.cache_bytes() as u64,
            keys: (0..store.databases()).map(|db| store.dbsize(db) as u64).sum(),
        }
    }

    /// Memory that is not the dataset: what the node held at start, the replication backlog,
    /// the script cache.
    fn overhead(&self) -> u64 {
        self.alloc.startup + self.backlog + self.lua
    }

    fn dataset(&self) -> u64 {
        self.alloc.allocated.saturating_sub(self.overhead())
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// `MEMORY STATS`: Redis 7.0's fields where KeyMesh has the number (not the per-client
/// buffers, AOF, cluster links or per-database hash-table overheads, which it does not keep).
fn memory_stats(server: &crate::server::Server) -> Vec<(&'static str, Frame)> {
    let m = MemoryNumbers::read(server);
    let a = m.alloc;
    let int = |v: u64| Frame::Integer(v as i64);
    let net = a.allocated.saturating_sub(a.startup);
    vec![
        ("peak.allocated", int(a.peak)),
        ("total.allocated", int(a.allocated)),
        ("startup.allocated", int(a.startup)),
        ("replication.backlog", int(m.backlog)),
        ("lua.caches", int(m.lua)),
        ("overhead.total", int(m.overhead())),
        ("keys.count", int(m.keys)),
        ("keys.bytes-per-key", int(net.checked_div(m.keys).unwrap_or(0))),
        ("dataset.bytes", int(m.dataset())),
        ("dataset.percentage", Frame::Double(ratio(m.dataset() * 100, net))),
        ("peak.percentage", Frame::Double(ratio(a.allocated * 100, a.peak))),
        ("allocator.allocated", int(a.allocated)),
        ("allocator.active", int(a.active)),
        ("allocator.resident", int(a.resident)),
        ("allocator-fragmentation.ratio", Frame::Double(ratio(a.active, a.allocated))),
        ("allocator-fragmentation.bytes", Frame::Integer(a.active as i64 - a.allocated as i64)),
        ("allocator-rss.ratio", Frame::Double(ratio(a.resident, a.active))),
        ("allocator-rss.bytes", Frame::Integer(a.resident as i64 - a.active as i64)),
        ("rss-overhead.ratio", Frame::Double(ratio(m.rss, a.resident))),
        ("rss-overhead.bytes", Frame::Integer(m.rss as i64 - a.resident as i64)),
        ("fragmentation", Frame::Double(ratio(m.rss, a.allocated))),
        ("fragmentation.bytes", Frame::Integer(m.rss as i64 - a.allocated as i64)),
    ]
}

/// `MEMORY DOCTOR`: the `MEMORY STATS` numbers read as Redis's doctor reads them (its
/// thresholds), in KeyMesh's words.
fn memory_doctor(server: &crate::server::Server) -> String {
    const MB: u64 = 1024 * 1024;
    let m = MemoryNumbers::read(server);
    let a = m.alloc;
    if a.allocated < 5 * MB {
        return format!(
            "This node uses very little memory ({:.1} MB allocated): there is nothing to diagnose yet. Ask again once it holds data.\n",
            a.allocated as f64 / MB as f64
        );
    }
    let mut issues = Vec::new();
    if a.peak > a.allocated && ratio(a.peak, a.allocated) > 1.5 {
        issues.push(format!(
            "Peak memory: the node once allocated {:.1} MB, {:.0}% more than the {:.1} MB it holds now. The allocator keeps some of that for reuse, so RSS and fragmentation read high; MEMORY PURGE gives free pages back now.",
            a.peak as f64 / MB as f64,
            (ratio(a.peak, a.allocated) - 1.0) * 100.0,
            a.allocated as f64 / MB as f64
        ));
    }
    let frag = ratio(a.active, a.allocated);
    if frag > 1.1 && a.active - a.allocated > 10 * MB {
        issues.push(format!(
            "Allocator fragmentation: {:.2} ({:.1} MB in pages that are partly free). Deleting many small keys leaves pages half used; the allocator reuses them as new data arrives.",
            frag,
            (a.active - a.allocated) as f64 / MB as f64
        ));
    }
    let rss_extra = ratio(m.rss, a.resident);
    if rss_extra > 1.1 && m.rss > a.resident + 10 * MB {
        issues.push(format!(
            "RSS overhead: the process's RSS is {:.2} times what the allocator holds ({:.1} MB more): memory outside the keyspace's allocator (thread stacks, the Lua VMs, TLS buffers) or not yet returned to the system.",
            rss_extra,
            (m.rss - a.resident) as f64 / MB as f64
        ));
    }
    if m.backlog > 32 * MB && m.backlog > a.allocated / 4 {
        issues.push(format!(
            "Replication backlog: {:.1} MB ({:.0}% of allocated memory) of writes kept for peers that reconnect. repl-backlog-size caps it; smaller means more full syncs after a peer's outage.",
            m.backlog as f64 / MB as f64,
            ratio(m.backlog * 100, a.allocated)
        ));
    }
    if m.lua > 10 * MB {
        issues.push(format!(
            "Script cache: {:.1} MB of EVAL scripts. Scripts built with their arguments inlined fill the cache; pass them as KEYS/ARGV and use EVALSHA, or SCRIPT FLUSH.",
            m.lua as f64 / MB as f64
        ));
    }
    if issues.is_empty() {
        return format!(
            "No memory problem found: {:.1} MB allocated for {} keys, allocator fragmentation {:.2}, RSS {:.1} MB.\n",
            a.allocated as f64 / MB as f64,
            m.keys,
            frag,
            m.rss as f64 / MB as f64
        );
    }
    let mut out = String::from("Memory issues found on this node:\n\n");
    for (i, issue) in issues.iter().enumerate() {
        let _ = writeln!(out, "{}. {issue}", i + 1);
    }
    out
}

/// Writes a snapshot (`crate::persist`) on this connection's thread. Unlike Redis's `SAVE` it
/// blocks only this client: the keyspace keeps serving everyone else (one shard is locked at a
/// time).
fn save(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    match crate::persist::save(exec.server) {
        Ok(_) => Ok(OK),
        Err(e) => Err(CmdError::err(e.to_string())),
    }
}

/// `BGSAVE [SCHEDULE]`: a snapshot on a thread of its own; with `SCHEDULE`, after the one that
/// is running.
fn bgsave(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let schedule = match argv.get(1) {
        None => false,
        Some(a) if argv.len() == 2 && eq_ignore_case(a, "schedule") => true,
        Some(_) => return Err(CmdError::Syntax),
    };
    let Some(server) = exec.server.handle() else {
        return Err(CmdError::err(crate::persist::PersistError::Stopped.to_string()));
    };
    match crate::persist::bgsave(server) {
        Ok(()) => Ok(Frame::Simple("Background saving started")),
        Err(crate::persist::PersistError::InProgress) if schedule => {
            exec.server.persist.schedule_bgsave();
            Ok(Frame::Simple("Background saving scheduled"))
        }
        Err(crate::persist::PersistError::InProgress) => {
            Err(CmdError::err("Background save already in progress. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible."))
        }
        Err(e) => Err(CmdError::err(e.to_string())),
    }
}

fn lastsave(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    Ok(Frame::Integer(exec.server.persist.last_save_secs() as i64))
}

/// `SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]`: a node with a save schedule saves as it
/// stops (`server::run`), unless `NOSAVE`; `SAVE` saves even without a schedule. The arguments
/// are checked as Redis 7.0 checks them: `ABORT` alone, never `SAVE` with `NOSAVE`, and while a
/// script is busy only `NOSAVE` stops the node. `NOW` and `FORCE` change nothing: KeyMesh waits
/// for no replica before it stops (peers catch up from their own backlogs), and a failed save
/// already stops the shutdown. `ABORT` has nothing to abort for the same reason: a shutdown
/// that began is not waiting for anything.
fn shutdown(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (mut nosave, mut save, mut flagged, mut abort) = (false, false, false, false);
    for a in &argv[1..] {
        match a.to_ascii_lowercase().as_slice() {
            b"nosave" => nosave = true,
            b"save" => save = true,
            b"now" | b"force" => flagged = true,
            b"abort" => abort = true,
            _ => return Err(CmdError::Syntax),
        }
    }
    if (abort && (nosave || save || flagged)) || (nosave && save) {
        return Err(CmdError::Syntax);
    }
    if abort {
        return Err(CmdError::err(if exec.server.is_shutting_down() {
            "The shutdown has begun and cannot be aborted (KeyMesh waits for no replica)."
        } else {
            "No shutdown in progress."
        }));
    }
    if !nosave {
        if let Some(busy) = exec.server.scripts.busy_error() {
            return Err(busy);
        }
    }
    if save {
        crate::persist::save(exec.server).map_err(|e| CmdError::err(format!("Errors trying to SHUTDOWN. Check logs. ({e})")))?;
    }
    exec.server.persist.skip_final_save.store(nosave || save, Ordering::Relaxed);
    exec.server.begin_shutdown();
    exec.client.closing = true;
    Ok(OK)
}

/// From now on this client is sent every command the server runs (`crate::monitor`); RESET
/// or closing the connection ends it.
fn monitor(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    exec.server.monitors.add(exec.client.handle.clone());
    Ok(OK)
}

fn latency(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let monitor = &exec.server.latency;
    let sub = argv[1].to_ascii_lowercase();
    match (sub.as_slice(), argv.len()) {
        (b"latest", 2) => Ok(monitor.latest()),
        (b"history", 3) => Ok(monitor.history(&argv[2])),
        (b"reset", _) => Ok(Frame::Integer(monitor.reset(&argv[2..].iter().map(|a| a.as_ref()).collect::<Vec<&[u8]>>()) as i64)),
        (b"graph", 3) => match monitor.graph(&argv[2]) {
            Some(graph) => Ok(Frame::Verbatim(Bytes::from(graph))),
            None => Err(CmdError::err(format!("No samples available for event '{}'", String::from_utf8_lossy(&argv[2])))),
        },
        (b"doctor", 2) => Ok(Frame::Verbatim(Bytes::from(monitor.doctor()))),
        (b"histogram", _) => Ok(latency_histogram(&argv[2..])),
        (b"help", 2) => Ok(Frame::array_of_bulks([
            "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
            "HELP",
            "    Print this help.",
        ])),
        (b"latest" | b"history" | b"graph" | b"doctor" | b"help", _) => Err(wrong_arity(&format!("latency|{}", String::from_utf8_lossy(&sub)))),
        _ => Err(unknown_subcommand(&argv[1], "latency")),
    }
}

/// `LATENCY HISTOGRAM [command ...]`: every command and subcommand that ran, or the named
/// ones, as Redis 7: a container (`client`) gives its subcommands, `client|id` just that one;
/// unknown names are skipped.
fn latency_histogram(names: &[Bytes]) -> Frame {
    let table = &*TABLE;
    let mut wanted: Vec<(&str, &super::CommandStats)> = Vec::new();
    if names.is_empty() {
        wanted.extend(table.named_stats());
    }
    for name in names {
        let (parent, sub) = match name.iter().position(|&c| c == b'|') {
            Some(bar) => (&name[..bar], Some(&name[bar + 1..])),
            None => (&name[..], None),
        };
        let Some(i) = table.find(parent) else { continue };
        match sub {
            Some(sub) => wanted.extend(table.subs[i].iter().filter(|s| s.name.as_bytes().eq_ignore_ascii_case(sub)).map(|s| (s.full.as_str(), &s.stats))),
            None => {
                wanted.push((table.specs[i].name, &table.stats[i]));
                wanted.extend(table.subs[i].iter().map(|s| (s.full.as_str(), &s.stats)));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    let pairs = wanted
        .into_iter()
        .filter(|(name, stats)| stats.calls() > 0 && seen.insert(*name))
        .map(|(name, stats)| (Frame::bulk(name), crate::latency::histogram_reply(&stats.histogram())))
        .collect();
    Frame::Map(pairs)
}

fn slowlog(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let log = &exec.server.slowlog;
    match argv[1].to_ascii_lowercase().as_slice() {
        b"get" if argv.len() <= 3 => {
            let count = match argv.get(2) {
                None => Some(10),
                Some(n) => match int(n)? {
                    -1 => None,
                    n if n < -1 => return Err(CmdError::err("count should be greater than or equal to -1")),
                    n => Some(n as usize),
                },
            };
            Ok(log.get(count))
        }
        b"len" if argv.len() == 2 => Ok(Frame::Integer(log.len() as i64)),
        b"reset" if argv.len() == 2 => {
            log.reset();
            Ok(OK)
        }
        b"help" if argv.len() == 2 => Ok(Frame::array_of_bulks([
            "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
            "HELP",
            "    Print this help.",
        ])),
        b"get" | b"len" | b"reset" | b"help" => Err(wrong_arity(&format!("slowlog|{}", String::from_utf8_lossy(&argv[1]).to_ascii_lowercase()))),
        _ => Err(unknown_subcommand(&argv[1], "slowlog")),
    }
}

fn config(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let sub = argv[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"get" => {
            if argv.len() < 3 {
                return Err(wrong_arity("config|get"));
            }
            let config = exec.server.config.read();
            let mut pairs: Vec<(String, String)> = Vec::new();
            for pattern in &argv[2..] {
                for (k, v) in config.get_matching(pattern) {
                    if !pairs.iter().any(|(seen, _)| *seen == k) {
                        pairs.push((k, v));
                    }
                }
            }
            Ok(Frame::Map(pairs.into_iter().map(|(k, v)| (Frame::bulk(k), Frame::bulk(v))).collect()))
        }
        b"set" => {
            if argv.len() < 4 || !argv.len().is_multiple_of(2) {
                return Err(wrong_arity("config|set"));
            }
            let pairs: Vec<(String, String)> =
                argv[2..].chunks(2).map(|pair| (String::from_utf8_lossy(&pair[0]).into_owned(), String::from_utf8_lossy(&pair[1]).into_owned())).collect();
            exec.server.set_live_config(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))).map_err(CmdError::err)?;
            Ok(OK)
        }
        b"resetstat" => {
            if argv.len() != 2 {
                return Err(wrong_arity("config|resetstat"));
            }
            for (_, stats) in TABLE.named_stats() {
                stats.reset();
            }
            let s = &exec.server.store.stats;
            for c in [&s.expired_keys, &s.evicted_keys] {
                c.store(0, Ordering::Relaxed);
            }
            s.keyspace_hits.reset();
            s.keyspace_misses.reset();
            exec.server.stats.commands_processed.reset();
            exec.server.errors.reset();
            Ok(OK)
        }
        b"rewrite" => Err(CmdError::err("CONFIG REWRITE is not supported: KeyMesh's configuration is owned by its config file or operator")),
        b"help" => Ok(Frame::array_of_bulks([
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "SET <directive> <value>",
            "RESETSTAT",
            "HELP",
        ])),
        _ => Err(unknown_subcommand(&argv[1], "config")),
    }
}

/// `COMMAND`: Redis's command metadata for what KeyMesh runs (`cmd::meta`).
fn command(_exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let table = &*TABLE;
    let every = || table.specs.iter().map(|s| meta::Resolved::Command(s));
    let Some(sub) = argv.get(1) else {
        return Ok(Frame::Array(every().map(|r| meta::info(&r)).collect()));
    };
    match sub.to_ascii_lowercase().as_slice() {
        b"count" if argv.len() == 2 => Ok(Frame::Integer(table.specs.len() as i64)),
        b"info" => {
            if argv.len() == 2 {
                return Ok(Frame::Array(every().map(|r| meta::info(&r)).collect()));
            }
            Ok(Frame::Array(argv[2..].iter().map(|n| meta::resolve(n).map_or(Frame::NullArray, |r| meta::info(&r))).collect()))
        }
        b"docs" => {
            let named: Vec<(String, meta::Resolved)> = if argv.len() == 2 {
                table.specs.iter().map(|s| (s.name.to_string(), meta::Resolved::Command(s))).collect()
            } else {
                argv[2..].iter().filter_map(|n| Some((String::from_utf8_lossy(n).to_ascii_lowercase(), meta::resolve(n)?))).collect()
            };
            Ok(Frame::Map(named.into_iter().map(|(name, r)| (Frame::bulk(&name), meta::docs(&r))).collect()))
        }
        b"list" => {
            let filter = match &argv[2..] {
                [] => None,
                [f, kind, arg] if eq_ignore_case(f, "filterby") => Some(match kind.to_ascii_lowercase().as_slice() {
                    b"module" => meta::Filter::Module,
                    b"aclcat" => meta::Filter::AclCategory(String::from_utf8_lossy(arg).into_owned()),
                    b"pattern" => meta::Filter::Pattern(arg.clone()),
                    _ => return Err(CmdError::Syntax),
                }),
                _ => return Err(CmdError::Syntax),
            };
            Ok(Frame::Array(meta::list(filter.as_ref()).iter().map(Frame::bulk).collect()))
        }
        b"getkeys" if argv.len() >= 3 => getkeys(&argv[2..], false),
        b"getkeysandflags" if argv.len() >= 3 => getkeys(&argv[2..], true),
        b"help" if argv.len() == 2 => Ok(Frame::array_of_bulks([
            "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full Redis command.",
            "GETKEYSANDFLAGS <full-command>",
            "    Return the keys and the access flags from a full Redis command.",
            "HELP",
            "    Print this help.",
        ])),
        b"count" | b"getkeys" | b"getkeysandflags" | b"help" => Err(wrong_arity(&format!("command|{}", String::from_utf8_lossy(sub).to_ascii_lowercase()))),
        _ => Err(unknown_subcommand(sub, "command")),
    }
}

/// `COMMAND GETKEYS[ANDFLAGS] <full command>`, as Redis's `getKeysSubcommandImpl`: the keys a
/// command line names, by Redis's key specs (a subcommand's own, `MEMORY USAGE key`).
fn getkeys(line: &[Bytes], with_flags: bool) -> Reply {
    let Some(index) = TABLE.find(&line[0]) else {
        return Err(CmdError::err("Invalid command specified"));
    };
    let spec = TABLE.specs[index];
    let (name, arity) = match line.get(1).map(|s| format!("{}|{}", spec.name, String::from_utf8_lossy(s).to_ascii_lowercase())) {
        Some(full) if meta::SUBCOMMANDS.iter().any(|(c, _)| *c == spec.name) => match meta::resolve(full.as_bytes()) {
            Some(meta::Resolved::Subcommand(m)) => (m.name.clone(), m.arity),
            _ => return Err(CmdError::err("Invalid command specified")),
        },
        _ => (spec.name.to_string(), spec.arity as i64),
    };
    if !meta::has_keys(&name) {
        return Err(CmdError::err("The command has no key arguments"));
    }
    let argc = line.len() as i64;
    if (arity > 0 && arity != argc) || argc < -arity {
        return Err(CmdError::err("Invalid number of arguments specified for command"));
    }
    let keys = meta::keys(&name, line).unwrap_or_default();
    if keys.is_empty() {
        let optional = meta::lookup(&name).is_some_and(|m| m.flags.iter().any(|f| f == "no_mandatory_keys"));
        return if optional { Ok(Frame::Array(Vec::new())) } else { Err(CmdError::err("Invalid arguments specified for command")) };
    }
    Ok(Frame::Array(
        keys.into_iter()
            .map(|k| {
                let key = Frame::Bulk(line[k.pos].clone());
                if with_flags {
                    Frame::Array(vec![key, Frame::Set(k.flags.into_iter().map(|f| Frame::Status(Bytes::from(f))).collect())])
                } else {
                    key
                }
            })
            .collect(),
    ))
}

fn info(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let wanted: Vec<String> = argv[1..].iter().map(|a| String::from_utf8_lossy(a).to_ascii_lowercase()).collect();
    let all = wanted.iter().any(|w| w == "all" || w == "everything");
    let default = wanted.is_empty() || wanted.iter().any(|w| w == "default");
    let want = |name: &str| all || wanted.iter().any(|w| w == name) || (default && name != "commandstats");
    let server = exec.server;
    let store = &server.store;
    let mut out = String::new();
    let uptime = server.started.elapsed().as_secs();
    if want("server") {
        let _ = write!(
            out,
            "# Server\r\nredis_version:{}\r\nkeymesh_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\nnode_name:{}\r\nhandoff:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nhz:10\r\nexecutable:keymesh-server\r\n\r\n",
            super::connection::REDIS_COMPAT_VERSION,
            server.version,
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            server.run_id,
            server.node_name,
            server.handoff.phase().as_str(),
            server.port.load(Ordering::Relaxed),
            uptime,
            uptime / 86400
        );
    }
    let tracking = server.tracking.stats();
    if want("clients") {
        let _ = write!(
            out,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\ntracking_clients:{}\r\npubsub_clients:{}\r\n\r\n",
            server.clients.count(),
            server.settings().maxclients,
            server.blocking.blocked_clients() + server.pause.held(),
            tracking.clients,
            server.clients.all().iter().filter(|c| c.subscriptions.load(Ordering::Relaxed) > 0).count(),
        );
    }
    if want("memory") {
        let used = crate::memory::refresh();
        let rss = crate::memory::rss_bytes();
        let maxmemory = server.settings().maxmemory;
        // What this node compiled so far (INFO may run inside a script, which cannot compile).
        let (functions, libraries) = {
            let l = server.scripts.functions.read();
            (l.functions.len(), l.libraries.len())
        };
        // Eviction weighs all of used_memory (nothing is left out, as Redis leaves out its
        // replication buffers), and nothing is freed lazily: UNLINK frees at once.
        let _ = write!(
            out,
            "# Memory\r\nused_memory:{used}\r\nused_memory_human:{:.2}M\r\nused_memory_rss:{rss}\r\nmaxmemory:{maxmemory}\r\nmaxmemory_policy:{}\r\nmem_allocator:jemalloc\r\nused_memory_scripts_eval:{}\r\nnumber_of_cached_scripts:{}\r\nnumber_of_functions:{}\r\nnumber_of_libraries:{}\r\nfunction_library_errors:{}\r\nmem_not_counted_for_evict:0\r\nlazyfree_pending_objects:0\r\n\r\n",
            used as f64 / 1048576.0,
            server.settings().maxmemory_policy.name(),
            server.scripts.cache_bytes(),
            server.scripts.cached(),
            functions,
            libraries,
            server.scripts.library_errors.load(Ordering::Relaxed),
        );
    }
    if want("persistence") {
        out.push_str(&server.persist.info(store.stats.dirty.value()));
    }
    if want("stats") {
        let s = &store.stats;
        let st = &server.stats;
        let _ = write!(
            out,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\ntotal_error_replies:{}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\ntracking_total_keys:{}\r\ntracking_total_items:{}\r\ntracking_total_prefixes:{}\r\n\r\n",
            st.connections_received.load(Ordering::Relaxed),
            st.commands_processed.value(),
            st.net_input_bytes.value(),
            st.net_output_bytes.value(),
            st.rejected_connections.load(Ordering::Relaxed),
            server.errors.total(),
            s.expired_keys.load(Ordering::Relaxed),
            s.evicted_keys.load(Ordering::Relaxed),
            s.keyspace_hits.value(),
            s.keyspace_misses.value(),
            server.pubsub.channels(None).len(),
            server.pubsub.numpat(),
            tracking.keys,
            tracking.items,
            tracking.prefixes,
        );
    }
    if want("replication") {
        out.push_str(&server.mesh.info_replication());
    }
    if want("kernel") {
        out.push_str(&server.kernel.info());
    }
    if want("tls") {
        match &server.tls {
            Some(tls) => {
                let tls_subscribers = server.mesh.subscribers.lock().iter().filter(|s| s.tls).count();
                let total = server.mesh.subscribers.lock().len();
                out.push_str(&tls.info((tls_subscribers, total - tls_subscribers)));
            }
            None => out.push_str("# TLS\r\ntls_enabled:0\r\n\r\n"),
        }
    }
    if want("cpu") {
        out.push_str("# CPU\r\nused_cpu_sys:0.000000\r\nused_cpu_user:0.000000\r\n\r\n");
    }
    if want("commandstats") {
        out.push_str("# Commandstats\r\n");
        for (name, stats) in TABLE.named_stats() {
            let (calls, rejected) = (stats.calls(), stats.rejected());
            if calls == 0 && rejected == 0 {
                continue;
            }
            let usec = stats.usec();
            let _ = write!(
                out,
                "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={:.2},rejected_calls={rejected},failed_calls={}\r\n",
                if calls > 0 { usec as f64 / calls as f64 } else { 0.0 },
                stats.failed()
            );
        }
        out.push_str("\r\n");
    }
    if want("errorstats") {
        out.push_str(&server.errors.info());
    }
    if want("keyspace") {
        out.push_str("# Keyspace\r\n");
        for db in 0..store.databases() {
            let keys = store.dbsize(db);
            if keys > 0 {
                let _ = write!(out, "db{db}:keys={keys},expires={},avg_ttl={}\r\n", store.volatile_keys(db), store.avg_ttl_ms(db, store.hlc.wall_ms()));
            }
        }
    }
    Ok(Frame::Verbatim(Bytes::from(out)))
}
