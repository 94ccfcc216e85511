//! Scripting commands: `EVAL`, `EVALSHA`, `EVAL_RO`, `EVALSHA_RO`, `SCRIPT`, `FCALL`,
//! `FCALL_RO` and `FUNCTION`. The machinery lives in `crate::script`.
//!
//! They are flagged `CROSS_DB` (a script may `SELECT`), so a transaction holding one locks
//! every shard, and lock only their declared keys otherwise.

use bytes::Bytes;

use super::args::eq_ignore_case;
use super::flags::*;
use super::{unknown_subcommand, wrong_arity, CommandSpec, Exec, Keys};
use crate::error::{CmdError, Reply};
use crate::frame::{Frame, OK};
use crate::glob::glob_match;
use crate::parse::parse_i64;
use crate::persist::rdb::{dump_libraries, restore_libraries};
use crate::script::functions::{parse_metadata, RestorePolicy};
use crate::script::run::{check_library, invoke, Invocation, Target};
use crate::script::Running;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "scripting", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("eval", -3, CROSS_DB | SKIP_MONITOR, Keys::Custom(numkeys_at_2), eval, "Executes a server-side Lua script."),
    spec!("evalsha", -3, CROSS_DB | SKIP_MONITOR, Keys::Custom(numkeys_at_2), evalsha, "Executes a server-side Lua script by SHA1 digest."),
    spec!("eval_ro", -3, READONLY | CROSS_DB | SKIP_MONITOR, Keys::Custom(numkeys_at_2), eval_ro, "Executes a read-only server-side Lua script."),
    spec!(
        "evalsha_ro",
        -3,
        READONLY | CROSS_DB | SKIP_MONITOR,
        Keys::Custom(numkeys_at_2),
        evalsha_ro,
        "Executes a read-only server-side Lua script by SHA1 digest."
    ),
    spec!("fcall", -3, CROSS_DB | SKIP_MONITOR, Keys::Custom(numkeys_at_2), fcall, "Invokes a function."),
    spec!("fcall_ro", -3, READONLY | CROSS_DB | SKIP_MONITOR, Keys::Custom(numkeys_at_2), fcall_ro, "Invokes a read-only function."),
    spec!("script", -2, 0, Keys::None, script, "A container for Lua scripts management commands."),
    spec!("function", -2, 0, Keys::None, function, "A container for function commands."),
];

/// Key positions of `EVAL script numkeys key...`; none when `numkeys` is invalid (the handler
/// reports it).
fn numkeys_at_2(argv: &[Bytes]) -> Vec<usize> {
    match argv.get(2).and_then(|n| parse_i64(n)) {
        Some(n) if n >= 0 && (n as usize) <= argv.len() - 3 => (3..3 + n as usize).collect(),
        _ => Vec::new(),
    }
}

/// Splits `numkeys key... arg...` with Redis's errors.
fn keys_and_args(argv: &[Bytes], function: bool) -> Result<(&[Bytes], &[Bytes]), CmdError> {
    let numkeys = match parse_i64(&argv[2]) {
        Some(n) => n,
        None if function => return Err(CmdError::err("Bad number of keys provided")),
        None => return Err(CmdError::NotInteger),
    };
    if numkeys < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    if numkeys as usize > argv.len() - 3 {
        return Err(CmdError::err("Number of keys can't be greater than number of args"));
    }
    let split = 3 + numkeys as usize;
    Ok((&argv[3..split], &argv[split..]))
}

fn run_eval(exec: &mut Exec, argv: &[Bytes], by_sha: bool, read_only: bool) -> Reply {
    show_script_call(exec, argv);
    let (keys, args) = keys_and_args(argv, false)?;
    let script = if by_sha {
        exec.server.scripts.get(&argv[1]).ok_or_else(|| CmdError::Raw("NOSCRIPT No matching script. Please use EVAL.".into()))?
    } else {
        exec.server.scripts.load(&argv[1])?
    };
    invoke(exec, Invocation { target: Target::Eval(script), keys, args, read_only_command: read_only, command: argv })
}

/// MONITOR shows a script's EVAL/FCALL before the commands it calls (they show as it runs).
fn show_script_call(exec: &mut Exec, argv: &[Bytes]) {
    let server = exec.server;
    if server.monitors.active() {
        server.monitors.feed(exec.client.db, crate::monitor::Source::Client(&exec.client.handle.addr), argv);
    }
}

fn eval(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    run_eval(exec, argv, false, false)
}

fn evalsha(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    run_eval(exec, argv, true, false)
}

fn eval_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    run_eval(exec, argv, false, true)
}

fn evalsha_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    run_eval(exec, argv, true, true)
}

fn run_fcall(exec: &mut Exec, argv: &[Bytes], read_only: bool) -> Reply {
    show_script_call(exec, argv);
    exec.server.scripts.sync_functions(&exec.server.store);
    let callable = exec.server.scripts.functions.read().find(&argv[1]).cloned().ok_or_else(|| CmdError::err("Function not found"))?;
    let (keys, args) = keys_and_args(argv, true)?;
    invoke(exec, Invocation { target: Target::Function(callable), keys, args, read_only_command: read_only, command: argv })
}

fn fcall(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    run_fcall(exec, argv, false)
}

fn fcall_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    run_fcall(exec, argv, true)
}

fn flush_option(argv: &[Bytes], command: &str) -> Result<(), CmdError> {
    match argv.get(2) {
        None => Ok(()),
        Some(a) if argv.len() == 3 && (eq_ignore_case(a, "async") || eq_ignore_case(a, "sync")) => Ok(()),
        Some(_) if command == "function" => Err(CmdError::err("FUNCTION FLUSH only supports SYNC|ASYNC option")),
        Some(_) => Err(CmdError::err("SCRIPT FLUSH only support SYNC|ASYNC option")),
    }
}

fn script(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let scripts = &exec.server.scripts;
    let sub = argv[1].to_ascii_lowercase();
    match (sub.as_slice(), argv.len()) {
        (b"load", 3) => Ok(Frame::bulk(&scripts.load(&argv[2])?.sha)),
        (b"exists", n) if n >= 3 => Ok(Frame::Array(argv[2..].iter().map(|sha| Frame::Integer(scripts.get(sha).is_some() as i64)).collect())),
        (b"flush", 2 | 3) => {
            flush_option(argv, "script")?;
            scripts.flush();
            Ok(OK)
        }
        (b"kill", 2) => {
            scripts.kill(true)?;
            Ok(OK)
        }
        (b"debug", _) => Err(CmdError::err("SCRIPT DEBUG is not supported: KeyMesh has no Lua debugger")),
        (b"help", 2) => Ok(Frame::array_of_bulks([
            "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
        ])),
        (b"load" | b"exists" | b"flush" | b"kill" | b"help", _) => Err(wrong_arity(&format!("script|{}", String::from_utf8_lossy(&sub)))),
        _ => Err(unknown_subcommand(&argv[1], "script")),
    }
}

fn function(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let server = exec.server;
    let scripts = &server.scripts;
    let sub = argv[1].to_ascii_lowercase();
    // What peers replicated since the last command compiles first (`Scripts::sync_functions`);
    // not for KILL, which must answer while a script runs.
    if sub != b"kill" {
        scripts.sync_functions(&server.store);
    }
    match (sub.as_slice(), argv.len()) {
        (b"load", n) if n >= 3 => {
            let mut replace = false;
            let mut i = 2;
            while i < argv.len() - 1 {
                if eq_ignore_case(&argv[i], "replace") {
                    replace = true;
                } else {
                    return Err(CmdError::err(format!("Unknown option given: {}", String::from_utf8_lossy(&argv[i]))));
                }
                i += 1;
            }
            let payload = &argv[argv.len() - 1];
            let (_, name) = crate::script::functions::parse_metadata(payload)?;
            if !replace && scripts.functions.read().libraries.contains_key(&name) {
                return Err(CmdError::err(format!("Library '{name}' already exists")));
            }
            let functions = check_library(scripts, payload)?;
            // A private copy: the payload may be a slice of the connection's read buffer.
            let code = Bytes::copy_from_slice(payload);
            let mut libraries = scripts.functions.write();
            libraries.check_add(&name, &functions, replace)?;
            // A versioned write of the library's register (`db::functions`), then its compiled
            // form here; peers compile the code they merge.
            let version = exec.ctx.write_library(&name, Some(code.clone()));
            libraries.add(name.clone(), code, functions, replace, version)?;
            drop(libraries);
            scripts.bump_generation();
            Ok(Frame::bulk(name))
        }
        (b"delete", 3) => {
            let name = String::from_utf8_lossy(&argv[2]).into_owned();
            let mut libraries = scripts.functions.write();
            // A library this node holds but could not load (`Libraries::failed`) is deleted too.
            let held = server.store.function_registers().live().any(|(n, _, _)| *n == name);
            if !held && !libraries.libraries.contains_key(&name) {
                return Err(CmdError::err("Library not found"));
            }
            exec.ctx.write_library(&name, None);
            libraries.remove(&name);
            drop(libraries);
            scripts.bump_generation();
            Ok(OK)
        }
        (b"flush", 2 | 3) => {
            flush_option(argv, "function")?;
            let mut libraries = scripts.functions.write();
            // A flush point even when no library is held: it dominates older loads on their way.
            exec.ctx.flush_libraries();
            libraries.clear();
            drop(libraries);
            scripts.bump_generation();
            Ok(OK)
        }
        (b"list", _) => function_list(exec, &argv[2..]),
        (b"stats", 2) => Ok(function_stats(exec)),
        (b"kill", 2) => {
            scripts.kill(false)?;
            Ok(OK)
        }
        (b"dump", 2) => {
            let libraries = scripts.functions.read();
            Ok(Frame::bulk(dump_libraries(libraries.libraries.values().map(|library| &library.code[..]))))
        }
        (b"restore", 3 | 4) => function_restore(exec, &argv[2], argv.get(3)),
        // More than a policy: Redis's subcommand syntax error, naming the subcommand as given.
        (b"restore", n) if n > 4 => {
            Err(CmdError::err(format!("unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.", String::from_utf8_lossy(&argv[1]))))
        }
        (b"help", 2) => Ok(Frame::array_of_bulks([
            "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "LOAD [REPLACE] <FUNCTION CODE>",
            "DELETE <LIBRARY NAME>",
            "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
            "FLUSH [ASYNC|SYNC]",
            "KILL",
            "STATS",
            "DUMP",
            "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
        ])),
        // FUNCTION FLUSH takes extra arguments to the handler, which answers as Redis's does.
        (b"flush", _) => Err(CmdError::err("unknown subcommand or wrong number of arguments for 'flush'. Try FUNCTION HELP.")),
        (b"load" | b"delete" | b"stats" | b"kill" | b"dump" | b"restore" | b"help", _) => {
            Err(wrong_arity(&format!("function|{}", String::from_utf8_lossy(&sub))))
        }
        _ => Err(unknown_subcommand(&argv[1], "function")),
    }
}

/// `FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]`: loads every library of a `FUNCTION DUMP`
/// payload, all or none. Every library is compiled and the policy checked
/// (`Libraries::check_restore`, Redis's rules) before anything changes; then each is a
/// versioned write of its register, as `FUNCTION LOAD` writes one, after a flush point for
/// FLUSH, as `FUNCTION FLUSH` writes one.
fn function_restore(exec: &mut Exec, payload: &[u8], policy: Option<&Bytes>) -> Reply {
    let policy = match policy {
        None => RestorePolicy::Append,
        Some(p) if eq_ignore_case(p, "append") => RestorePolicy::Append,
        Some(p) if eq_ignore_case(p, "replace") => RestorePolicy::Replace,
        Some(p) if eq_ignore_case(p, "flush") => RestorePolicy::Flush,
        Some(_) => return Err(CmdError::err("Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")),
    };
    let scripts = &exec.server.scripts;
    let mut incoming = Vec::new();
    for code in restore_libraries(payload).map_err(|e| CmdError::err(e.to_string()))? {
        let (_, name) = parse_metadata(&code)?;
        let functions = check_library(scripts, &code)?;
        incoming.push((name, code, functions));
    }
    let mut libraries = scripts.functions.write();
    let checked: Vec<(&str, &[_])> = incoming.iter().map(|(name, _, functions)| (name.as_str(), &functions[..])).collect();
    libraries.check_restore(&checked, policy)?;
    match policy {
        RestorePolicy::Flush => {
            exec.ctx.flush_libraries();
            libraries.clear();
        }
        RestorePolicy::Replace => incoming.iter().for_each(|(name, ..)| drop(libraries.remove(name))),
        RestorePolicy::Append => {}
    }
    for (name, code, functions) in incoming {
        let version = exec.ctx.write_library(&name, Some(code.clone()));
        libraries.add(name, code, functions, false, version)?;
    }
    drop(libraries);
    scripts.bump_generation();
    Ok(OK)
}

fn function_list(exec: &mut Exec, options: &[Bytes]) -> Reply {
    let (mut pattern, mut with_code) = (None, false);
    let mut i = 0;
    while i < options.len() {
        if eq_ignore_case(&options[i], "withcode") && !with_code {
            with_code = true;
        } else if eq_ignore_case(&options[i], "libraryname") && pattern.is_none() {
            pattern = Some(options.get(i + 1).ok_or_else(|| CmdError::err("library name argument was not given"))?.clone());
            i += 1;
        } else {
            return Err(CmdError::err(format!("Unknown argument {}", String::from_utf8_lossy(&options[i]))));
        }
        i += 1;
    }
    let libraries = exec.server.scripts.functions.read();
    let mut out = Vec::new();
    for library in libraries.libraries.values() {
        if pattern.as_ref().is_some_and(|p| !glob_match(p, library.name.as_bytes(), false)) {
            continue;
        }
        let functions = library
            .functions
            .iter()
            .map(|f| {
                let flags = crate::script::flags::NAMES.iter().filter(|(bit, _)| f.flags & bit != 0).map(|(_, n)| Frame::bulk(n)).collect();
                Frame::Map(vec![
                    (Frame::bulk("name"), Frame::bulk(&f.name)),
                    (Frame::bulk("description"), f.description.as_ref().map_or(Frame::Null, Frame::bulk)),
                    (Frame::bulk("flags"), Frame::Set(flags)),
                ])
            })
            .collect();
        let mut fields = vec![
            (Frame::bulk("library_name"), Frame::bulk(&library.name)),
            (Frame::bulk("engine"), Frame::bulk(&library.engine)),
            (Frame::bulk("functions"), Frame::Array(functions)),
        ];
        if with_code {
            fields.push((Frame::bulk("library_code"), Frame::Bulk(library.code.clone())));
        }
        out.push(Frame::Map(fields));
    }
    Ok(Frame::Array(out))
}

fn function_stats(exec: &mut Exec) -> Frame {
    let scripts = &exec.server.scripts;
    let running = scripts.running_function();
    let running = match running.as_deref() {
        Some(r @ Running { function: Some(function), .. }) => Frame::Map(vec![
            (Frame::bulk("name"), Frame::bulk(&function.name)),
            (Frame::bulk("command"), Frame::Array(function.command.iter().map(|a| Frame::Bulk(a.clone())).collect())),
            (Frame::bulk("duration_ms"), Frame::Integer(r.started.elapsed().as_millis() as i64)),
        ]),
        _ => Frame::Null,
    };
    let libraries = scripts.functions.read();
    let engines = Frame::Map(vec![(
        Frame::bulk("LUA"),
        Frame::Map(vec![
            (Frame::bulk("libraries_count"), Frame::Integer(libraries.libraries.len() as i64)),
            (Frame::bulk("functions_count"), Frame::Integer(libraries.functions.len() as i64)),
        ]),
    )]);
    Frame::Map(vec![(Frame::bulk("running_script"), running), (Frame::bulk("engines"), engines)])
}

/// The BUSY check: while a script runs past `busy-reply-threshold`, other clients get BUSY
/// except for the commands Redis allows then.
pub fn busy_check(server: &crate::server::Server, argv: &[Bytes]) -> Result<(), CmdError> {
    let Some(err) = server.scripts.busy_error() else {
        return Ok(());
    };
    let name = argv[0].to_ascii_lowercase();
    let sub = argv.get(1).map(|a| a.to_ascii_lowercase()).unwrap_or_default();
    let allowed = match name.as_slice() {
        b"auth" | b"hello" | b"multi" | b"discard" | b"watch" | b"unwatch" | b"quit" | b"reset" | b"shutdown" => true,
        b"script" => sub == b"kill",
        b"function" => sub == b"kill" || sub == b"stats",
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(err)
    }
}
