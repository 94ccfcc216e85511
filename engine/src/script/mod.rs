//! Lua scripting: `EVAL`/`EVALSHA` scripts and `FUNCTION` libraries, run on Luau.
//!
//! Why Luau and not Redis's own Lua 5.1: Redis's worst CVEs of 2025 live in its embedded Lua
//! 5.1 (a use-after-free in the parser, an integer overflow in `unpack`, an out-of-bounds read
//! in the lexer, sandbox escapes through the metatables of basic types). Luau is a Lua 5.1
//! dialect built for untrusted code: its own parser and VM (none of those bugs exist there),
//! no bytecode loading from scripts, read-only library tables and metatables
//! (`table.freeze`), an interrupt callback for time limits and an allocator limit, all
//! continuously fuzzed by its maintainers. Redis scripts are plain Lua 5.1 code, which Luau
//! runs unchanged (Redis's `unit/scripting` Tcl unit passes); the differences a script can
//! notice are listed in docs/scripting.md.
//!
//! What runs where: each server thread owns one Luau VM (`vm`), created on first use, so
//! scripts on different shards run in parallel. The script cache and the function libraries
//! are server-wide (`Scripts`); a VM compiles what it needs on first use and drops its copies
//! when the cache generation moves (`SCRIPT FLUSH`, `FUNCTION LOAD/DELETE/FLUSH/RESTORE`).
//!
//! Atomicity: a script holds the shard locks of the keys it declared for its whole run, and
//! takes the shard of any other key it touches with a non-blocking `try_lock` (`run`). When
//! that fails before the script wrote anything, the script is restarted holding every shard;
//! once it wrote, it gets an error instead of waiting (waiting could deadlock against a
//! command that holds that shard and waits for one of the script's). Either way nothing
//! else ever sees half of a script. Its writes replicate as their effects, stamped like any
//! write: peers never re-run a script.

pub mod active;
pub mod api;
pub mod convert;
pub mod functions;
pub mod libs;
pub mod run;
pub mod stack;
pub mod vm;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::error::CmdError;

/// Script flags (Redis 7's shebang `flags=` names, and what a function registers).
pub mod flags {
    pub const NO_WRITES: u32 = 1;
    pub const ALLOW_OOM: u32 = 1 << 1;
    pub const ALLOW_STALE: u32 = 1 << 2;
    pub const NO_CLUSTER: u32 = 1 << 3;
    pub const ALLOW_CROSS_SLOT: u32 = 1 << 4;
    /// An `EVAL` script without a shebang: Redis's compatibility mode (may write, OOM decided
    /// at its first write).
    pub const EVAL_COMPAT: u32 = 1 << 8;

    pub const NAMES: &[(u32, &str)] = &[
        (NO_WRITES, "no-writes"),
        (ALLOW_OOM, "allow-oom"),
        (ALLOW_STALE, "allow-stale"),
        (NO_CLUSTER, "no-cluster"),
        (ALLOW_CROSS_SLOT, "allow-cross-slot-keys"),
    ];

    pub fn parse(name: &[u8]) -> Option<u32> {
        NAMES.iter().find(|(_, n)| n.as_bytes() == name).map(|(f, _)| *f)
    }
}

/// A cached `EVAL` script.
#[derive(Debug)]
pub struct Script {
    pub id: ScriptId,
    /// `id` as lowercase hex, as replies and messages show it.
    pub sha: String,
    pub body: Bytes,
    pub flags: u32,
}

/// A function's call as `FUNCTION STATS` shows it while it runs.
#[derive(Debug)]
pub struct RunningFunction {
    pub name: String,
    pub command: Vec<Bytes>,
}

/// A script that is running now, as `SCRIPT KILL`, `FUNCTION KILL/STATS` and the BUSY check
/// see it.
#[derive(Debug)]
pub struct Running {
    pub client_id: u64,
    pub started: Instant,
    /// `None` for an `EVAL` script; for a function (`FCALL`), what `FUNCTION STATS` shows of
    /// it. Which `KILL` may stop it follows from it. An `EVAL` script's name and command are
    /// not kept: nothing reads them, and copying the command (an allocation, and a reference
    /// count taken and dropped per argument) was where `perf` put most of `invoke`'s own time
    /// in a small `EVALSHA` (docs/benchmarks.md, "EVALSHA").
    pub function: Option<RunningFunction>,
    /// It ran a write command: it can no longer be killed.
    pub wrote: AtomicBool,
    pub kill: AtomicBool,
    /// It ran longer than `busy-reply-threshold`: other clients get BUSY.
    pub busy: AtomicBool,
}

impl Running {
    /// `EVAL` (true) or `FCALL` (false).
    pub fn is_eval(&self) -> bool {
        self.function.is_none()
    }
}

/// Server-wide scripting state.
pub struct Scripts {
    cache: RwLock<HashMap<ScriptId, Arc<Script>, foldhash::fast::FixedState>>,
    /// Moves whenever cached scripts or libraries are dropped or replaced, so every thread's
    /// VM drops its compiled copies.
    generation: AtomicU64,
    pub functions: RwLock<functions::Libraries>,
    running: Mutex<Vec<Arc<Running>>>,
    /// Scripts running past the threshold (fast check on every command).
    busy_count: BusyCounter,
    /// `busy-reply-threshold` (alias `lua-time-limit`), ms; 0 = never busy.
    pub busy_threshold_ms: AtomicU64,
    /// `lua-memory-limit`: the most one thread's Lua VM may allocate.
    pub memory_limit: AtomicUsize,
    /// Replicated libraries this node could not load (their code failed to compile here, or
    /// a newer library registers one of their function names), one per register version.
    pub library_errors: AtomicU64,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            cache: RwLock::default(),
            generation: AtomicU64::new(1),
            functions: RwLock::default(),
            running: Mutex::default(),
            busy_count: BusyCounter::default(),
            busy_threshold_ms: AtomicU64::new(5000),
            memory_limit: AtomicUsize::new(256 << 20),
            library_errors: AtomicU64::new(0),
        }
    }
}

impl Scripts {
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn bump_generation(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Caches `body` (`SCRIPT LOAD`, `EVAL`) after checking its shebang and that it compiles.
    pub fn load(&self, body: &[u8]) -> Result<Arc<Script>, CmdError> {
        let id = ScriptId::of(body);
        if let Some(s) = self.cache.read().get(&id) {
            return Ok(s.clone());
        }
        let flags = eval_flags(body)?;
        let sha = id.to_string();
        vm::check_compiles(&eval_code(body), &format!("f_{sha}"))?;
        let script = Arc::new(Script { id, sha, body: Bytes::copy_from_slice(body), flags });
        self.cache.write().insert(id, script.clone());
        Ok(script)
    }

    /// Brings the libraries this node can call up to date with the replicated registers
    /// (`db::functions`), compiling what changed in this thread's VM; a library that does not
    /// load is logged and counted (`library_errors`), never fatal. Cheap when nothing changed
    /// (one atomic load and a read lock): `FCALL` and `FUNCTION` call it first.
    pub fn sync_functions(&self, store: &crate::db::Store) {
        if self.functions.read().synced == Some(store.functions_generation()) {
            return;
        }
        let mut libraries = self.functions.write();
        // The generation first: a change made after it is seen by the next call.
        let generation = store.functions_generation();
        if libraries.synced == Some(generation) {
            return;
        }
        let live = store.function_registers().live().map(|(name, code, version)| (name.clone(), code.clone(), version)).collect();
        let (errors, changed) = libraries.rebuild(live, |code| run::check_library(self, code));
        libraries.synced = Some(generation);
        drop(libraries);
        for (name, version, why) in errors {
            tracing::warn!(library = %name, hlc = version.hlc, node = version.node, error = %why, "a replicated function library could not be loaded on this node");
            self.library_errors.fetch_add(1, Ordering::Relaxed);
        }
        if changed {
            self.bump_generation();
        }
    }

    /// The cached script whose SHA1 is `sha` (40 hex digits, either case).
    pub fn get(&self, sha: &[u8]) -> Option<Arc<Script>> {
        self.cache.read().get(&ScriptId::parse(sha)?).cloned()
    }

    pub fn flush(&self) {
        self.cache.write().clear();
        self.bump_generation();
    }

    pub fn cached(&self) -> usize {
        self.cache.read().len()
    }

    /// Bytes of cached script bodies (`INFO memory`'s `used_memory_scripts_eval`).
    pub fn cache_bytes(&self) -> usize {
        self.cache.read().values().map(|s| s.body.len() + 64).sum()
    }

    pub fn start(&self, running: Arc<Running>) {
        self.running.lock().push(running);
    }

    pub fn finish(&self, running: &Arc<Running>) {
        self.running.lock().retain(|r| !Arc::ptr_eq(r, running));
        if running.busy.load(Ordering::Acquire) {
            self.busy_count.0.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// What marks a script busy from inside its VM's interrupt.
    pub fn busy_counter(&self) -> BusyCounter {
        self.busy_count.clone()
    }

    /// The BUSY error other clients get while a script runs past the threshold, if one does.
    pub fn busy_error(&self) -> Option<CmdError> {
        if self.busy_count.0.load(Ordering::Acquire) == 0 {
            return None;
        }
        let running = self.running.lock();
        let busy = running.iter().find(|r| r.busy.load(Ordering::Acquire))?;
        Some(busy_error(busy.is_eval()))
    }

    /// `SCRIPT KILL` (`eval`) or `FUNCTION KILL`, with Redis's replies.
    pub fn kill(&self, eval: bool) -> Result<(), CmdError> {
        let running = self.running.lock();
        let Some(target) = running.iter().find(|r| r.busy.load(Ordering::Acquire)).or_else(|| running.first()) else {
            return Err(CmdError::Raw("NOTBUSY No scripts in execution right now.".into()));
        };
        if target.wrote.load(Ordering::Acquire) {
            return Err(CmdError::Raw(
                "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.".into(),
            ));
        }
        if target.is_eval() != eval {
            return Err(busy_error(target.is_eval()));
        }
        target.kill.store(true, Ordering::Release);
        Ok(())
    }

    /// The running function, for `FUNCTION STATS`.
    pub fn running_function(&self) -> Option<Arc<Running>> {
        self.running.lock().iter().find(|r| !r.is_eval()).cloned()
    }
}

/// How many scripts run past the threshold.
#[derive(Debug, Clone, Default)]
pub struct BusyCounter(Arc<AtomicUsize>);

impl BusyCounter {
    /// Marks a script busy (past the threshold), once.
    pub fn mark(&self, running: &Running) {
        if !running.busy.swap(true, Ordering::AcqRel) {
            self.0.fetch_add(1, Ordering::AcqRel);
        }
    }
}

pub fn busy_error(eval: bool) -> CmdError {
    let which = if eval { "SCRIPT" } else { "FUNCTION" };
    CmdError::Raw(format!("BUSY Redis is busy running a script. You can only call {which} KILL or SHUTDOWN NOSAVE."))
}

/// A script's SHA1, the key of the script cache and of each VM's compiled scripts: 20 bytes,
/// parsed once from an `EVALSHA`'s hex and hashed as such (the hex was lowercased into a new
/// `String` and SipHashed twice per call: ~280 of a small `EVALSHA`'s 19,200 instructions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptId([u8; 20]);

/// A SHA1 is already evenly spread: its first eight bytes are hash enough for the cache's
/// tables (hashing all twenty as a slice cost ~60 more instructions an `EVALSHA`).
impl std::hash::Hash for ScriptId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (first, _) = self.0.split_first_chunk::<8>().expect("a SHA1 has 20 bytes");
        state.write_u64(u64::from_le_bytes(*first));
    }
}

impl ScriptId {
    pub fn of(body: &[u8]) -> ScriptId {
        use sha1::{Digest, Sha1};
        ScriptId(Sha1::digest(body).into())
    }

    /// From its 40 hex digits, in either case; `None` for anything else.
    pub fn parse(hex: &[u8]) -> Option<ScriptId> {
        // Not `char::to_digit`, whose radix-generic checks cost an `EVALSHA` ~130 more
        // instructions (callgrind).
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        };
        let hex: &[u8; 40] = hex.try_into().ok()?;
        let mut id = [0u8; 20];
        for (byte, pair) in id.iter_mut().zip(hex.chunks_exact(2)) {
            *byte = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(ScriptId(id))
    }
}

impl std::fmt::Display for ScriptId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

pub fn sha1_hex(data: &[u8]) -> String {
    ScriptId::of(data).to_string()
}

/// The Lua code of an `EVAL` body: a shebang line becomes an empty line (as in Redis, so the
/// line numbers of errors match the body's).
pub fn eval_code(body: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !body.starts_with(b"#!") {
        return std::borrow::Cow::Borrowed(body);
    }
    let end = body.iter().position(|&c| c == b'\n').unwrap_or(body.len());
    std::borrow::Cow::Owned(body[end..].to_vec())
}

/// An `EVAL` script's flags from its shebang (`#!lua flags=no-writes,allow-oom`); without one
/// it runs in Redis's compatibility mode.
pub fn eval_flags(body: &[u8]) -> Result<u32, CmdError> {
    let Some(rest) = body.strip_prefix(b"#!") else {
        return Ok(flags::EVAL_COMPAT);
    };
    let line = rest.split(|&c| c == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&c| c == b' ').filter(|w| !w.is_empty());
    let engine = words.next().unwrap_or_default();
    if engine != b"lua" {
        return Err(CmdError::err(format!("Unexpected engine in script shebang: {}", String::from_utf8_lossy(engine))));
    }
    let mut result = 0;
    for word in words {
        let Some(list) = word.strip_prefix(b"flags=") else {
            return Err(CmdError::err(format!("Unknown lua shebang option: {}", String::from_utf8_lossy(word))));
        };
        for name in list.split(|&c| c == b',').filter(|n| !n.is_empty()) {
            result |= flags::parse(name).ok_or_else(|| CmdError::err(format!("Unexpected flag in script shebang: {}", String::from_utf8_lossy(name))))?;
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_redis() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        let id = ScriptId::of(b"Pizza & Mandolino");
        assert_eq!(id.to_string(), "74822d82031af7493c20eefa13bd07ec4fada82f");
        assert_eq!(ScriptId::parse(b"74822D82031AF7493C20EEFA13BD07EC4FADA82F"), Some(id));
        for bad in
            [&b"74822d82031af7493c20eefa13bd07ec4fada82"[..], b"74822d82031af7493c20eefa13bd07ec4fada82f0", b"g4822d82031af7493c20eefa13bd07ec4fada82f", b""]
        {
            assert_eq!(ScriptId::parse(bad), None, "{bad:?}");
        }
        assert_eq!(sha1_hex(b"Pizza & Mandolino"), "74822d82031af7493c20eefa13bd07ec4fada82f");
    }

    #[test]
    fn shebang_flags_are_parsed_as_redis_does() {
        assert_eq!(eval_flags(b"return 1").ok(), Some(flags::EVAL_COMPAT));
        assert_eq!(eval_flags(b"#!lua\nreturn 1").ok(), Some(0));
        assert_eq!(eval_flags(b"#!lua flags=no-writes,allow-oom\nreturn 1").ok(), Some(flags::NO_WRITES | flags::ALLOW_OOM));
        assert!(eval_flags(b"#!python\n").unwrap_err().to_string().contains("Unexpected engine in script shebang"));
        assert!(eval_flags(b"#!lua foo=bar\n").unwrap_err().to_string().contains("Unknown lua shebang option"));
        assert_eq!(eval_code(b"#!lua flags=no-writes\nreturn 1").as_ref(), b"\nreturn 1");
        assert_eq!(eval_code(b"return 1").as_ref(), b"return 1");
        assert!(eval_flags(b"#!lua flags=bad\n").unwrap_err().to_string().contains("Unexpected flag in script shebang"));
    }
}
