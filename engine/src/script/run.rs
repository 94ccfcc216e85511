//! Running a script: `redis.call` through the normal command table on the script's locked
//! shards, the time limit and `SCRIPT KILL`, and the script's reply or error as Redis words
//! them (`... script: <sha>, on @user_script:<line>.`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlua::{MultiValue, Value};

use super::convert::lua_to_frame;
use super::stack::{new_array, CommandArgs};
use super::vm::{with_vm, Vm};
use super::{flags, Running, Script};
use crate::cmd::{self, flags as cmd_flags, Exec, Keys, TABLE};
use crate::error::{CmdError, Reply};
use crate::frame::Frame;

/// How long a script that already wrote waits for the shard of an undeclared key before it
/// gets an error instead (waiting longer could deadlock, see the module docs of `script`).
const UNDECLARED_WAIT: Duration = Duration::from_millis(50);

/// What a script invocation runs.
pub enum Target {
    Eval(Arc<Script>),
    Function(super::functions::Callable),
}

pub struct Invocation<'v> {
    pub target: Target,
    pub keys: &'v [Bytes],
    pub args: &'v [Bytes],
    /// Called as `EVAL_RO`/`EVALSHA_RO`/`FCALL_RO`.
    pub read_only_command: bool,
    pub command: &'v [Bytes],
}

/// The state `redis.call` works with while one script runs.
struct CallState<'e, 'a, 'c> {
    exec: &'e mut Exec<'a, 'c>,
    running: Arc<Running>,
    read_only: bool,
    /// Over `maxmemory` at the start: write commands that may grow memory are refused until
    /// the script has written (Redis's rule for scripts without a shebang).
    deny_oom: bool,
    /// Every shard is locked: any key may be touched.
    global: bool,
    /// The script touched a key whose shard another command holds before it wrote anything:
    /// it is abandoned and run again holding every shard.
    restart: bool,
}

/// Runs a script for `EVAL*`/`FCALL*`.
pub fn invoke(exec: &mut Exec, inv: Invocation) -> Reply {
    let server = exec.server;
    let (script_flags, eval, name) = match &inv.target {
        Target::Eval(s) => (s.flags, true, s.sha.as_str()),
        Target::Function(callable) => (callable.info().flags, false, callable.info().name.as_str()),
    };
    let compat = script_flags & flags::EVAL_COMPAT != 0;
    if inv.read_only_command && !compat && script_flags & flags::NO_WRITES == 0 {
        return Err(CmdError::err("Can not execute a script with write flag using *_ro command."));
    }
    let read_only = inv.read_only_command || script_flags & flags::NO_WRITES != 0;
    let settings = server.settings();
    let over_memory = settings.maxmemory > 0
        && crate::memory::used_memory() > settings.maxmemory
        && !crate::db::evict::make_room(&server.store, settings.maxmemory_policy, settings.maxmemory, settings.maxmemory_samples);
    drop(settings);
    if over_memory && !compat && !read_only && script_flags & flags::ALLOW_OOM == 0 {
        return Err(CmdError::Oom);
    }
    let deny_oom = over_memory && script_flags & flags::ALLOW_OOM == 0;
    let function = (!eval).then(|| super::RunningFunction { name: name.to_string(), command: inv.command.to_vec() });
    let running = Arc::new(Running {
        client_id: exec.client.id,
        started: Instant::now(),
        function,
        wrote: Default::default(),
        kill: Default::default(),
        busy: Default::default(),
    });
    server.scripts.start(running.clone());
    let (db_before, in_exec) = (exec.client.db, exec.client.in_exec);
    exec.client.in_script = true;
    // Inside EXEC every shard is already locked (scripting commands lock all, see cmd::multi).
    let mut global = in_exec;
    let result = loop {
        let mut state = CallState { exec: &mut *exec, running: running.clone(), read_only, deny_oom, global, restart: false };
        let outcome = with_vm(&server.scripts, |vm| run_once(vm, &mut state, &inv, name));
        let restart = state.restart;
        // The script's SELECT does not outlive it.
        exec.client.db = db_before;
        exec.ctx.db = db_before;
        exec.client.handle.db.store(db_before, Ordering::Relaxed);
        if restart && !global {
            exec.ctx.locks = crate::db::Locks::none();
            exec.ctx.locks = server.store.lock_all();
            global = true;
            continue;
        }
        break outcome;
    };
    exec.client.in_script = false;
    server.scripts.finish(&running);
    result
}

fn run_once(vm: &mut Vm, state: &mut CallState, inv: &Invocation, name: &str) -> Result<Frame, CmdError> {
    let lua_err = |e: mlua::Error| CmdError::err(format!("Error running script {name}: {}", super::vm::lua_message(&e)));
    let function = match &inv.target {
        Target::Eval(script) => vm.script(script.id, &script.body)?,
        Target::Function(callable) => vm.function(callable)?,
    };
    // An `EVAL` script reads `KEYS` and `ARGV` as globals; a function gets them as arguments.
    let eval = matches!(inv.target, Target::Eval(_));
    let arguments = if eval {
        vm.set_eval_arguments(inv.keys, inv.args).map_err(lua_err)?;
        None
    } else {
        Some((new_array(&vm.lua, inv.keys).map_err(lua_err)?, new_array(&vm.lua, inv.args).map_err(lua_err)?))
    };
    vm.resp.set(2);
    {
        let scripts = &state.exec.server.scripts;
        let mut w = vm.watch.borrow_mut();
        w.running = Some(state.running.clone());
        w.threshold_ms = scripts.busy_threshold_ms.load(Ordering::Relaxed);
        w.busy_counter = Some(scripts.busy_counter());
    }
    let client_resp = state.exec.client.resp;
    // The VM's `redis.call` runs commands through this closure while the script runs.
    let mut command = |argv: CommandArgs| call(state, argv);
    let outcome = super::active::lend(&mut command, || match arguments {
        None => vm.protected.call::<MultiValue>((function.clone(),)),
        Some((keys, args)) => vm.protected.call::<MultiValue>((function.clone(), keys, args)),
    });
    vm.watch.borrow_mut().running = None;
    vm.watch.borrow_mut().busy_counter = None;
    let memory_limit = vm.memory_limit();
    vm.after_run();
    let values: Vec<Value> = match outcome {
        Ok(values) => values.into_iter().collect(),
        // The limit's check (`vm::interrupt`) may also stop the call into the script itself.
        Err(e) if super::vm::lua_message(&e) == "not enough memory" => return Err(memory_error(name, memory_limit)),
        Err(e) => return Err(lua_err(e)),
    };
    match values.as_slice() {
        [Value::Boolean(true), value, ..] => Ok(lua_to_frame(value, client_resp)),
        [Value::Boolean(true)] => Ok(Frame::Null),
        [_, err, ..] => {
            let message = error_message(err);
            // Luau's allocation failure: with jemalloc behind it, only the limit causes it.
            if message.contains("not enough memory") {
                return Err(memory_error(name, memory_limit));
            }
            Err(CmdError::Raw(script_error(err, &message, name)))
        }
        _ => Err(CmdError::err(format!("Error running script {name}: no result"))),
    }
}

fn memory_error(name: &str, limit: usize) -> CmdError {
    CmdError::err(format!("Error running script {name}: the script used more than lua-memory-limit ({limit} bytes) and was stopped"))
}

/// The text of an error value (an error table's `err`, or a string).
pub fn error_message(err: &Value) -> String {
    match err {
        Value::Table(t) => match t.raw_get::<Value>("err") {
            Ok(Value::String(s)) => super::convert::error_text(&s.as_bytes()),
            _ => "ERR unknown error".into(),
        },
        Value::String(s) => format!("ERR {}", s.to_string_lossy()),
        Value::Error(e) => format!("ERR {}", super::vm::lua_message(e)),
        other => format!("ERR {other:?}"),
    }
}

/// Luau's spelling of the read-only-table error is Redis's.
pub fn redis_wording(message: &str) -> String {
    message.replace("attempt to modify a readonly table", "Attempt to modify a readonly table")
}

/// Redis's final error: `<err> script: <name>, on <source>:<line>.`.
fn script_error(err: &Value, message: &str, name: &str) -> String {
    let message = redis_wording(message);
    if let Value::Table(t) = err {
        let source = t.raw_get::<Value>("source").ok().and_then(|v| v.as_string().map(|s| s.to_string_lossy()));
        let line = t.raw_get::<Value>("line").ok().and_then(|v| v.as_number().or(v.as_integer().map(|i| i as f64)));
        if let (Some(source), Some(line)) = (source, line) {
            return format!("{message} script: {name}, on {source}:{line}.");
        }
    }
    message
}

/// Commands a script may not call (Redis's `noscript` flag).
fn allowed_in_script(name: &str) -> bool {
    !matches!(
        name,
        "auth"
            | "hello"
            | "multi"
            | "exec"
            | "discard"
            | "watch"
            | "unwatch"
            | "eval"
            | "eval_ro"
            | "evalsha"
            | "evalsha_ro"
            | "fcall"
            | "fcall_ro"
            | "script"
            | "function"
            | "subscribe"
            | "psubscribe"
            | "unsubscribe"
            | "punsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "monitor"
            | "blpop"
            | "brpop"
            | "brpoplpush"
            | "blmove"
            | "blmpop"
            | "bzpopmin"
            | "bzpopmax"
            | "bzmpop"
            | "client"
            | "config"
            | "latency"
            | "save"
            | "bgsave"
            | "bgrewriteaof"
            | "shutdown"
            | "replicaof"
            | "slaveof"
            | "quit"
            | "reset"
            | "wait"
            | "debug"
            | "sync"
            | "psync"
            | "replconf"
            | "failover"
            | "module"
            | "acl"
    )
}

/// `redis.call`/`redis.pcall`: one command from the script, as an error frame when it fails.
fn call(st: &mut CallState, argv: CommandArgs) -> Frame {
    let argv = match argv.0 {
        Ok(argv) => argv,
        Err(e) => return Frame::error(format!("ERR {e}")),
    };
    if st.restart {
        return Frame::error("ERR the script is being restarted with every shard locked");
    }
    if st.running.kill.load(Ordering::Acquire) {
        return Frame::error("ERR Script killed by user with SCRIPT KILL...");
    }
    let Some(index) = TABLE.find(&argv[0]) else {
        return Frame::error("ERR Unknown Redis command called from script");
    };
    let spec = TABLE.specs[index];
    if !spec.arity_ok(argv.len()) {
        return Frame::error("ERR Wrong number of args calling Redis command from script");
    }
    if !allowed_in_script(spec.name) {
        return Frame::error("ERR This Redis command is not allowed from script");
    }
    let writes = spec.flags & cmd_flags::WRITE != 0;
    let wrote = st.running.wrote.load(Ordering::Acquire);
    // Commands that may replicate count as writes for a read-only script, as in Redis (so a
    // read-only script may run during CLIENT PAUSE WRITE).
    if (writes || matches!(spec.name, "publish" | "spublish" | "pfcount")) && st.read_only {
        TABLE.stats_for(index, &argv).record_rejected();
        return Frame::error("ERR Write commands are not allowed from read-only scripts.");
    }
    if writes && !st.exec.client.writes.admit(&st.exec.server.mesh) {
        TABLE.stats_for(index, &argv).record_rejected();
        return Frame::error("READONLY You can't write against a node that is leaving the mesh");
    }
    if st.deny_oom && spec.flags & cmd_flags::DENYOOM != 0 && !wrote {
        TABLE.stats_for(index, &argv).record_rejected();
        return Frame::from(CmdError::Oom);
    }
    if let Err(frame) = lock_keys(st, spec, &argv, wrote) {
        return frame;
    }
    let timer = crate::clock::Stopwatch::start();
    let reply = (spec.run)(st.exec, &argv);
    let duration_us = timer.elapsed_us();
    cmd::record(index, &argv, duration_us, &reply);
    cmd::log_if_slow(st.exec.server, st.exec.client, spec, &argv, duration_us);
    cmd::show_to_monitors(st.exec.server, st.exec.ctx.db, cmd::Source::Script, spec, &argv);
    let reply = reply.unwrap_or_else(Frame::from);
    if spec.flags & cmd_flags::READONLY != 0 && st.exec.server.store.tracking.load(Ordering::Relaxed) {
        st.exec.client.script_read = true;
    }
    if writes && !reply.is_error() {
        st.running.wrote.store(true, Ordering::Release);
    }
    reply
}

/// Makes sure the shards of the command's keys are locked (see the module docs of `script`).
fn lock_keys(st: &mut CallState, spec: &cmd::CommandSpec, argv: &[Bytes], wrote: bool) -> Result<(), Frame> {
    if st.global {
        return Ok(());
    }
    let store = &st.exec.server.store;
    let db = st.exec.ctx.db;
    let wait = if wrote { UNDECLARED_WAIT } else { Duration::ZERO };
    let locks = &mut st.exec.ctx.locks;
    let mut lock = |d: usize, p: usize| locks.try_add(store, d, store.shard_of(&argv[p]), wait);
    let locked = match spec.keys {
        Keys::None => true,
        Keys::Whole | Keys::Database => false,
        Keys::CrossDb(f) => f(argv, db).into_iter().filter(|&(d, _)| d < store.databases()).all(|(d, p)| lock(d, p)),
        Keys::Range(..) | Keys::Custom(_) => spec.key_positions(argv).into_iter().all(|p| lock(db, p)),
    };
    if locked {
        return Ok(());
    }
    if !wrote {
        st.restart = true;
        return Err(Frame::error("ERR the script is being restarted with every shard locked"));
    }
    Err(Frame::error(format!(
        "ERR '{}' needs keys this script did not declare in KEYS while other clients use them, after the script wrote; declare every key a script touches",
        spec.name
    )))
}

/// For `FUNCTION LOAD`: checks a payload in this thread's VM and returns what it registers.
pub fn check_library(scripts: &super::Scripts, payload: &[u8]) -> Result<Vec<super::functions::FunctionInfo>, CmdError> {
    with_vm(scripts, |vm| Ok(vm.load_library(payload)?.into_iter().map(|(info, _)| info).collect()))
}
