//! One Luau VM per server thread, set up as Redis sets up its Lua: the standard libraries
//! scripts may use, `redis`, `bit`, `cjson` and `cmsgpack`, every library table and the
//! globals read-only (Redis's "global protection": reading an undefined global is an error
//! naming it, writing any global is refused), no file, OS or module access.
//!
//! A VM keeps the functions it compiled, keyed by script SHA or library name, and drops them
//! when the server's script generation moves.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlua::{Function, Lua, LuaOptions, StdLib, Table, Value, VmState};

use super::convert::frame_to_lua;
use super::{Running, Scripts};
use crate::error::CmdError;
use crate::frame::Frame;

/// Where a chunk's errors say they come from.
pub const EVAL_CHUNK: &str = "@user_script";
pub const FUNCTION_CHUNK: &str = "@user_function";

/// What the interrupt callback watches: the script running now on this VM.
#[derive(Default)]
pub struct Watch {
    pub running: Option<Arc<Running>>,
    pub threshold_ms: u64,
    /// Where the script is counted busy, server-wide, when it passes the threshold.
    pub busy_counter: Option<super::BusyCounter>,
    /// `FUNCTION LOAD` gives a library's code this long (Redis's 500 ms).
    pub deadline: Option<Instant>,
    /// `lua-memory-limit` (0: none), checked here rather than by Luau's allocator (see
    /// `Vm::new`).
    memory_limit: usize,
    ticks: u32,
    last_handoff: Option<Instant>,
}

pub struct Vm {
    pub lua: Lua,
    generation: u64,
    memory_limit: usize,
    pub globals: Table,
    /// The globals library functions fall back to: `globals` without `KEYS`/`ARGV` (`Vm::new`).
    pub function_globals: Table,
    /// `redis` as scripts see it.
    pub redis: Table,
    /// `run(f, ...)`: calls `f` under `xpcall` with Redis's error handler.
    pub protected: Function,
    pub watch: Rc<RefCell<Watch>>,
    scripts: HashMap<super::ScriptId, Function, foldhash::fast::FixedState>,
    /// Library name → (library stamp, its functions in the library's order: `Callable::index`;
    /// `None` for a name the library's code did not register here).
    pub libraries: HashMap<String, (u64, Vec<Option<Function>>), foldhash::fast::RandomState>,
    /// `redis.setresp` of the running script.
    pub resp: Rc<std::cell::Cell<u8>>,
    /// `redis` as a library's code sees it while it loads.
    pub load_redis: Table,
    pub registrations: super::functions::Registrations,
    /// Raises Redis's "nonexistent global variable" error.
    pub missing: Function,
    /// `KEYS` and `ARGV` as `EVAL` scripts see them (`set_eval_arguments`).
    eval_keys: Table,
    eval_argv: Table,
    runs: u64,
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's VM, creating it or dropping stale compiled code first.
pub fn with_vm<R>(scripts: &Scripts, f: impl FnOnce(&mut Vm) -> Result<R, CmdError>) -> Result<R, CmdError> {
    VM.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| CmdError::err("scripts can not be called from scripts"))?;
        if slot.is_none() {
            *slot = Some(Vm::new(scripts.memory_limit.load(Ordering::Relaxed)).map_err(|e| CmdError::err(format!("failed to start the Lua VM: {e}")))?);
        }
        let vm = slot.as_mut().ok_or_else(|| CmdError::err("no Lua VM"))?;
        vm.sync(scripts);
        f(vm)
    })
}

/// Checks that a script body compiles (for `SCRIPT LOAD`), with Redis's error message.
pub fn check_compiles(body: &[u8], _name: &str) -> Result<(), CmdError> {
    let lua = Lua::new_with(StdLib::NONE, LuaOptions::default()).map_err(|e| CmdError::err(e.to_string()))?;
    lua.load(body)
        .set_name(EVAL_CHUNK)
        .into_function()
        .map(|_| ())
        .map_err(|e| CmdError::err(format!("Error compiling script (new function): {}", lua_message(&e))))
}

/// The message of a Lua error without mlua's decoration.
pub fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(m) | mlua::Error::MemoryError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        other => other.to_string(),
    }
}

/// What the bootstrap chunk returns: the protected runner, `redis.call`'s slot, `redis.call`,
/// `redis.pcall`, the scripts' `pcall`, the missing-global error and the library wrapper.
type Bootstrap = (Function, Table, Function, Function, Function, Function, Function);

/// Lua code that needs Lua's own `xpcall` and stack inspection.
const BOOTSTRAP: &str = r#"
local xpcall, pcall, type, tostring, info, pack, unpack, error = xpcall, pcall, type, tostring, debug.info, table.pack, table.unpack, error
local slot = {}
-- The first frame that is the script's own code (not this chunk, not a C function).
local function where()
  for level = 3, 40 do
    local src, line = info(level, "sl")
    if src == nil then return nil end
    -- Luau reports a chunk named "@user_script" as "user_script".
    if (src == "user_script" or src == "user_function") and line and line >= 0 then return "@" .. src, line end
  end
end
-- An error raised by Rust code: its message, without the wrapper's prefix and traceback.
local function message(err)
  local s = tostring(err)
  s = s:gsub("^runtime error: ", ""):gsub("^memory error: ", "")
  return (s:match("^[^\n]*"))
end
local function handler(err)
  if typeof(err) == "error" then err = {err = "ERR " .. message(err)}
  elseif type(err) ~= "table" then err = {err = "ERR " .. tostring(err)} end
  if err.source == nil then
    local src, line = where()
    if src then err.source = src; err.line = line end
  end
  return err
end
local function run(f, ...) return xpcall(f, handler, ...) end
local function redis_call(...)
  local reply, failed = slot.f(...)
  if failed then error(reply, 0) end
  return reply
end
local function redis_pcall(...)
  local reply = slot.f(...)
  return reply
end
-- Redis 7: pcall hands a script the message of an error table, not the table.
local function script_pcall(f, ...)
  local r = pack(pcall(f, ...))
  if not r[1] and type(r[2]) == "table" and type(r[2].err) == "string" then r[2] = r[2].err end
  if not r[1] and typeof(r[2]) == "error" then r[2] = message(r[2]) end
  return unpack(r, 1, r.n)
end
local function missing(_, name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end
-- A library function (cjson, struct, ...) as the C version behaves: its errors name the
-- script line that called it (luaL_error's "user_script:1: "), and none inside pcall.
local function library_function(f)
  return function(...)
    local r = pack(pcall(f, ...))
    if r[1] then return unpack(r, 2, r.n) end
    local err = r[2]
    if typeof(err) == "error" then err = message(err) end
    error(err, 2)
  end
end
return run, slot, redis_call, redis_pcall, script_pcall, missing, library_function
"#;

/// Lua code, run once per VM with `headroom` (the bytes the VM may still allocate), that puts a
/// check of `lua-memory-limit` in front of the two library functions that allocate in
/// proportion to a number they are given: the check at the next loop or call (`interrupt`)
/// would come only after such an allocation, however large. Any other call allocates about
/// what the script already holds (a concatenation, a copy) or what it reads (a `redis.call`
/// reply) at most.
const ALLOCATION_GUARDS: &str = r#"
local headroom = ...
local rep, create, type, tostring, error = string.rep, table.create, type, tostring, error
-- Smaller requests are left to the check at the script's next loop or call.
local SMALL = 1048576
string.rep = function(s, n, ...)
  -- string.rep takes a number for its string too (`string.rep(1, 3)` is "111").
  if type(n) == "number" and (type(s) == "string" or type(s) == "number") then
    local size = #tostring(s) * n
    if size > SMALL and size > headroom() then error("not enough memory", 0) end
  end
  return rep(s, n, ...)
end
table.create = function(n, value)
  -- A table slot is 16 bytes.
  if type(n) == "number" and n * 16 > SMALL and n * 16 > headroom() then error("not enough memory", 0) end
  return create(n, value)
end
"#;

impl Vm {
    fn new(memory_limit: usize) -> mlua::Result<Vm> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::COROUTINE | StdLib::UTF8 | StdLib::BIT | StdLib::DEBUG;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        let globals = lua.globals();
        let (protected, slot, redis_call, redis_pcall, script_pcall, missing, library_function): Bootstrap = lua.load(BOOTSTRAP).set_name("=keymesh").eval()?;
        // `debug` was only needed by the bootstrap (Redis 7 gives scripts no `debug` either).
        for name in ["print", "require", "getfenv", "setfenv", "newproxy", "gcinfo", "os", "loadfile", "dofile", "debug"] {
            globals.raw_set(name, Value::Nil)?;
        }
        globals.raw_set("pcall", script_pcall)?;
        let watch = Rc::new(RefCell::new(Watch { memory_limit, ..Watch::default() }));
        let w = watch.clone();
        let headroom = lua.create_function(move |lua, ()| {
            let limit = w.try_borrow().map_or(0, |w| w.memory_limit);
            Ok(if limit == 0 { f64::INFINITY } else { limit.saturating_sub(lua.used_memory()) as f64 })
        })?;
        lua.load(ALLOCATION_GUARDS).set_name("=keymesh").call::<()>(headroom)?;
        let registrations: super::functions::Registrations = Rc::default();
        let load_redis = super::functions::create_load_table(&lua, registrations.clone(), missing.clone())?;
        let resp = Rc::new(std::cell::Cell::new(2u8));
        let redis = super::api::create_redis_table(&lua, resp.clone())?;
        redis.raw_set("call", redis_call)?;
        redis.raw_set("pcall", redis_pcall)?;
        globals.raw_set("redis", redis.clone())?;
        super::libs::install(&lua, &globals, &library_function)?;
        // Lua 5.1's compatibility names that Luau dropped and old scripts still call.
        lua.load("math.mod = math.fmod string.gfind = string.gmatch").set_name("=keymesh").exec()?;
        // The metatable of strings too (a CVE-2025-46818-style escape edits it).
        let string_meta: Option<Table> = lua.load("return getmetatable('')").set_name("=keymesh").eval()?;
        for name in ["string", "math", "table", "coroutine", "utf8", "bit32"] {
            if let Ok(Value::Table(t)) = globals.raw_get::<Value>(name) {
                t.set_readonly(true);
            }
        }
        if let Some(meta) = string_meta {
            meta.set_readonly(true);
        }
        redis.set_readonly(true);
        let meta = lua.create_table()?;
        meta.raw_set("__index", missing.clone())?;
        meta.set_readonly(true);
        // What library functions see as globals: every global there is now, before a run sets
        // `KEYS` and `ARGV`, which only `EVAL` scripts have (Redis runs functions in a Lua
        // state of their own, so a function never sees the last `EVAL`'s keys). `_G` stays
        // out: a function's own environment has one.
        let function_globals = lua.create_table()?;
        for pair in globals.pairs::<Value, Value>() {
            let (name, value) = pair?;
            if !matches!(&name, Value::String(s) if s.as_bytes().as_ref() == b"_G") {
                function_globals.raw_set(name, value)?;
            }
        }
        function_globals.set_metatable(Some(meta.clone()))?;
        function_globals.set_readonly(true);
        let (eval_keys, eval_argv) = (lua.create_table()?, lua.create_table()?);
        globals.raw_set("KEYS", &eval_keys)?;
        globals.raw_set("ARGV", &eval_argv)?;
        globals.set_metatable(Some(meta))?;
        globals.set_readonly(true);
        // Nothing in the globals changes from here on (the tables `KEYS` and `ARGV` name are
        // refilled in place), so they are a `safeenv`: Luau resolves a script's global paths
        // (`redis.call`, `KEYS`, `string.sub`) once, when it is compiled, instead of at every
        // use, and calls its builtins (`tonumber`, `string.byte`, `math.floor`, ...) on their
        // fast paths. None of those builtins is replaced here (`pcall` and the allocation
        // guards are not among them), so the fast paths do what the globals say.
        globals.set_safeenv(true);
        // `lua-memory-limit` is checked at every loop back-edge and call (`interrupt`), not set
        // as the allocator's limit (`Lua::set_memory_limit`): with a limit there, any
        // allocation may fail, so mlua makes every call that may allocate from Rust (a string,
        // a table, a table write, a function) a protected call of its own, with a C closure
        // made for it. That was ~36% of a small `EVALSHA`'s instructions. The two library
        // functions that allocate in proportion to a number check before they allocate
        // (`ALLOCATION_GUARDS`); anything else may pass the limit by what one call allocates
        // before the check stops the script.
        let w = watch.clone();
        lua.set_interrupt(move |lua| interrupt(lua, &w));
        // `redis.call`'s Rust side, made once: it runs the command the running script's run
        // lent (`active`), or answers an error when no script runs.
        let call_resp = resp.clone();
        let command = lua.create_function(move |lua, argv: super::stack::CommandArgs| {
            let reply = super::active::call(argv).unwrap_or_else(|| Frame::error("ERR redis.call is available only while a script runs"));
            let failed = reply.is_error();
            Ok((frame_to_lua(lua, &reply, call_resp.get())?, failed))
        })?;
        // `slot` holds `f`, the Rust side of `redis.call`/`redis.pcall`; only the bootstrap's
        // two wrappers reach it.
        slot.raw_set("f", command)?;
        Ok(Vm {
            lua,
            generation: 0,
            memory_limit,
            globals,
            function_globals,
            redis,
            protected,
            watch,
            scripts: HashMap::default(),
            libraries: HashMap::default(),
            resp,
            load_redis,
            registrations,
            missing,
            eval_keys,
            eval_argv,
            runs: 0,
        })
    }

    /// Drops compiled code the server no longer has, and follows `lua-memory-limit`.
    fn sync(&mut self, scripts: &Scripts) {
        let generation = scripts.generation();
        if generation != self.generation {
            self.scripts.clear();
            self.libraries.clear();
            self.generation = generation;
            let _ = self.lua.gc_collect();
        }
        let limit = scripts.memory_limit.load(Ordering::Relaxed);
        if limit != self.memory_limit {
            self.memory_limit = limit;
            self.watch.borrow_mut().memory_limit = limit;
        }
    }

    /// The compiled `EVAL` script `id`.
    pub fn script(&mut self, id: super::ScriptId, body: &[u8]) -> Result<Function, CmdError> {
        if let Some(f) = self.scripts.get(&id) {
            return Ok(f.clone());
        }
        let f = self.compile_eval(body).map_err(|e| CmdError::err(format!("Error compiling script (new function): {}", lua_message(&e))))?;
        self.scripts.insert(id, f.clone());
        Ok(f)
    }

    /// Compiles an `EVAL` script with `KEYS` and `ARGV` out of the globals for the moment.
    /// Luau resolves a script's global paths when it loads it (the globals are a `safeenv`,
    /// see `Vm::new`) and keeps what they named for every run: right for `redis.call` or
    /// `string.sub`, wrong for `KEYS.x`, which the last script may have set. Absent then, the
    /// two resolve to nothing, and the script looks them (and any path through them) up at
    /// each use.
    fn compile_eval(&self, body: &[u8]) -> mlua::Result<Function> {
        let arguments = |keys: Value, argv: Value| -> mlua::Result<()> {
            self.globals.set_readonly(false);
            let set = self.globals.raw_set("KEYS", keys).and_then(|()| self.globals.raw_set("ARGV", argv));
            self.globals.set_readonly(true);
            // `set_readonly(false)` also turned the table's `safeenv` off.
            self.globals.set_safeenv(true);
            set
        };
        let compiled = arguments(Value::Nil, Value::Nil).and_then(|()| self.lua.load(super::eval_code(body).as_ref()).set_name(EVAL_CHUNK).into_function());
        // Put back whatever happened above.
        arguments(Value::Table(self.eval_keys.clone()), Value::Table(self.eval_argv.clone()))?;
        compiled
    }

    /// Fills `KEYS` and `ARGV` for an `EVAL` script. They are this VM's two global tables,
    /// emptied and refilled for each run: making two tables and writing two read-only globals
    /// per run cost a small `EVALSHA` ~3,500 of its ~23,000 instructions. They stay the same
    /// two tables for the VM's life: a compiled script holds them from when it was loaded (the
    /// globals are a `safeenv`, see `Vm::new`). No state can pass from one script to the next
    /// through them: a script cannot keep a reference past its run (globals are read-only),
    /// and a table it froze or gave a metatable is thawed and stripped of it before it is
    /// emptied (from Rust, neither `table.freeze` nor a `__metatable` field can refuse that).
    pub fn set_eval_arguments(&mut self, keys: &[Bytes], args: &[Bytes]) -> mlua::Result<()> {
        super::stack::refill_arrays(&self.lua, [(&self.eval_keys, keys), (&self.eval_argv, args)])
    }

    pub fn memory_limit(&self) -> usize {
        self.memory_limit
    }

    /// After a run: an incremental GC step every 50 runs, as Redis steps its GC every 50
    /// scripts (Luau also steps on its own as scripts allocate), and a full collection after a
    /// run that ended near the memory limit. (A full collection every 50 runs cost a small
    /// `EVALSHA` ~3,300 instructions a call: a fifteenth of it.)
    pub fn after_run(&mut self) {
        self.runs += 1;
        if self.memory_limit > 0 && self.lua.used_memory() > self.memory_limit / 2 {
            let _ = self.lua.gc_collect();
        } else if self.runs.is_multiple_of(50) {
            let _ = self.lua.gc_step();
        }
    }
}

/// Luau calls this at loop back-edges and calls: the time limit, `SCRIPT KILL` and
/// `lua-memory-limit` live here.
fn interrupt(lua: &Lua, watch: &Rc<RefCell<Watch>>) -> mlua::Result<VmState> {
    let Ok(mut w) = watch.try_borrow_mut() else {
        return Ok(VmState::Continue);
    };
    if w.deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(mlua::Error::runtime("FUNCTION LOAD timeout"));
    }
    // Luau's own words for an allocation that failed: `run` turns them into the limit's error.
    if w.memory_limit > 0 && lua.used_memory() > w.memory_limit {
        return Err(mlua::Error::MemoryError("not enough memory".into()));
    }
    match &w.running {
        None => return Ok(VmState::Continue),
        Some(running) if running.kill.load(Ordering::Acquire) => return Err(mlua::Error::runtime("Script killed by user with SCRIPT KILL...")),
        Some(_) => {}
    }
    w.ticks = w.ticks.wrapping_add(1);
    if !w.ticks.is_multiple_of(64) {
        return Ok(VmState::Continue);
    }
    // Held past the borrow of `w`, which the hand-off below gives up.
    let Some(running) = w.running.clone() else {
        return Ok(VmState::Continue);
    };
    let elapsed = running.started.elapsed();
    if w.threshold_ms > 0 && elapsed >= Duration::from_millis(w.threshold_ms) {
        if !running.busy.load(Ordering::Acquire) {
            if let Some(counter) = &w.busy_counter {
                counter.mark(&running);
            }
        }
        // A busy script must not keep this thread's other connections (SCRIPT KILL among them)
        // from being served: hand the runtime's worker slot to another thread, now and then.
        let due = w.last_handoff.is_none_or(|t| t.elapsed() >= Duration::from_millis(200));
        if due && multi_thread_runtime() {
            w.last_handoff = Some(Instant::now());
            drop(w);
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(2)));
        }
    }
    Ok(VmState::Continue)
}

fn multi_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}
