//! Where every script run moves strings between Rust and Lua, done on the Lua stack with the
//! Luau API that mlua exposes (`mlua::ffi`), as Redis's C does: `KEYS` and `ARGV` refilled for
//! each `EVAL` and `EVALSHA` (`refill_arrays`), a function's `keys` and `args` (`new_array`),
//! and `redis.call`'s arguments (`CommandArgs`). Through mlua's values, each string became a
//! `LuaString` first (pushed, moved to mlua's reference thread, and back): of a small
//! `EVALSHA`'s ~18,000 instructions, ~2,100 went to `KEYS` and `ARGV` and ~2,500 to
//! `redis.call`'s two arguments (callgrind, docs/benchmarks.md, "EVALSHA"). `Lua::exec_raw_lua`,
//! `RawLua` and `FromLuaMulti::from_stack_multi` are public but hidden from mlua's docs: an
//! mlua release may change them, and the build then fails here.
//!
//! The workspace's fourth module allowed `unsafe` (beside `db::strbuf`, `db::node` and
//! `script::active`, and one function of `repl::wire`); each block says why it is sound. What they share: none of the calls
//! made here raises a Lua error, which would unwind through these Rust frames outside any
//! protected call. The tables written are thawed first (a write to a frozen table raises);
//! a string is pushed only under Luau's limit (`MAX_STRING`); and a failed allocation does
//! not raise in this VM, which has no allocator limit (`Vm::new`): mlua's allocator then
//! aborts instead. mlua's own strings take this unprotected path under the same conditions.
#![allow(unsafe_code)]

use std::ffi::c_int;

use bytes::Bytes;
use mlua::{ffi, FromLuaMulti, Lua, MultiValue, Table};

use super::api::{script_arg, script_argv, NO_ARGUMENTS};

/// Luau raises an error for a longer string (`MAXSSIZE`).
const MAX_STRING: usize = 1 << 30;

/// The error for items `fill` refuses, checked before anything is pushed.
fn check_lengths(items: &[Bytes]) -> mlua::Result<()> {
    match items.iter().any(|item| item.len() >= MAX_STRING) {
        true => Err(mlua::Error::MemoryError("a script argument is larger than 1 GiB".into())),
        false => Ok(()),
    }
}

/// Empties each table and stores its items in it, as strings at `1..=n`. A table a script
/// froze (`table.freeze`) or gave a metatable is thawed and stripped of it first: from the C
/// API neither a frozen table nor a `__metatable` field can refuse that, so no state passes
/// from one script to the next through them (`Vm::set_eval_arguments`).
pub fn refill_arrays(lua: &Lua, tables: [(&Table, &[Bytes]); 2]) -> mlua::Result<()> {
    lua.exec_raw_lua(|raw| {
        // SAFETY: the stack has room for the table and one string (checked); `raw.push` pushes
        // the table, and `fill` leaves it where it was. `lua_setreadonly`, `lua_setmetatable`
        // (nil removes it) and `lua_cleartable` take the table's index, as the Luau API
        // documents them. The stack is left as it was found.
        unsafe {
            let state = raw.state();
            let top = ffi::lua_gettop(state);
            if ffi::lua_checkstack(state, 2) == 0 {
                return Err(mlua::Error::StackError);
            }
            tables.iter().try_for_each(|(_, items)| check_lengths(items))?;
            for (table, items) in tables {
                raw.push(table)?;
                ffi::lua_setreadonly(state, -1, 0);
                ffi::lua_pushnil(state);
                ffi::lua_setmetatable(state, -2);
                ffi::lua_cleartable(state, -1);
                fill(state, items);
                ffi::lua_settop(state, top);
            }
        }
        Ok(())
    })
}

/// A new table of `items` as strings at `1..=n` (a function's `keys` and `args`).
pub fn new_array(lua: &Lua, items: &[Bytes]) -> mlua::Result<Table> {
    lua.exec_raw_lua(|raw| {
        // SAFETY: the stack has room for the table and one string (checked); `fill` leaves
        // the new table on top, where `raw.pop` takes it (a `Table` handle of its own).
        unsafe {
            let state = raw.state();
            if ffi::lua_checkstack(state, 2) == 0 {
                return Err(mlua::Error::StackError);
            }
            check_lengths(items)?;
            ffi::lua_createtable(state, c_int::try_from(items.len()).unwrap_or(0), 0);
            fill(state, items);
            raw.pop::<Table>()
        }
    })
}

/// Stores `items` as strings at `1..=n` in the table on top of the stack, which must have room
/// for one more value; the table stays on top.
///
/// # Safety
///
/// The value on top of `state`'s stack is a table that is not read-only, the stack has a free
/// slot, and every item is shorter than `MAX_STRING` (`check_lengths`). `lua_rawseti` pops
/// the string pushed above the table into it (with its GC barrier). An index fits the `c_int`
/// Luau takes: a request has far fewer than 2^31 arguments.
unsafe fn fill(state: *mut ffi::lua_State, items: &[Bytes]) {
    for (i, item) in items.iter().enumerate() {
        // SAFETY: as this function's contract says.
        unsafe {
            ffi::lua_pushlstring(state, item.as_ptr().cast(), item.len());
            ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
        }
    }
}

/// `redis.call`'s arguments as the command gets them, or the error Redis answers for them
/// (`api::script_arg`).
pub struct CommandArgs(pub Result<Vec<Bytes>, &'static str>);

impl FromLuaMulti for CommandArgs {
    fn from_lua_multi(values: MultiValue, _: &Lua) -> mlua::Result<Self> {
        Ok(CommandArgs(script_argv(values)))
    }

    /// What mlua calls for a Rust function's arguments: a string is copied from the stack
    /// where it lies; anything else becomes mlua's `Value` first, as `from_lua_multi` gets it,
    /// so both convert it alike (`script_arg`).
    unsafe fn from_stack_multi(nvals: c_int, lua: &mlua::state::RawLua) -> mlua::Result<Self> {
        if nvals == 0 {
            return Ok(CommandArgs(Err(NO_ARGUMENTS)));
        }
        let state = lua.state();
        // SAFETY: mlua hands over the `nvals` values on top of the stack (indices `-nvals`
        // to -1) and reads nothing back. `lua_tolstring` of a string (checked with
        // `lua_type`) neither converts nor moves it, and its bytes are copied before the next
        // call. Any other value is pushed once (in a slot checked for here) and popped at
        // once by `pop_value`, so every index still names the value it named.
        unsafe {
            if ffi::lua_checkstack(state, 1) == 0 {
                return Err(mlua::Error::StackError);
            }
            let argv = (-nvals..0)
                .map(|at| {
                    if ffi::lua_type(state, at) == ffi::LUA_TSTRING {
                        let mut len = 0;
                        let bytes = ffi::lua_tolstring(state, at, &mut len);
                        Ok(Bytes::copy_from_slice(std::slice::from_raw_parts(bytes.cast::<u8>(), len)))
                    } else {
                        ffi::lua_pushvalue(state, at);
                        script_arg(lua.pop_value())
                    }
                })
                .collect();
            Ok(CommandArgs(argv))
        }
    }
}
