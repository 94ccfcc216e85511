//! The `redis` table scripts see: `redis.error_reply`, `status_reply`, `sha1hex`, `setresp`,
//! `set_repl`, `log`, `acl_check_cmd` and the constants (`call` and `pcall` are added by the
//! VM, `register_function` by `functions`), with Redis 7's argument checks and messages.

use bytes::Bytes;
use mlua::{Lua, MultiValue, Table, Value};

use crate::cmd::TABLE;

/// A `redis.call` argument list: strings and numbers (as `%.17g`), nothing else.
pub fn script_argv(argv: MultiValue) -> Result<Vec<Bytes>, &'static str> {
    if argv.is_empty() {
        return Err(NO_ARGUMENTS);
    }
    argv.into_iter().map(script_arg).collect()
}

/// What `redis.call` answers when called without arguments.
pub const NO_ARGUMENTS: &str = "Please specify at least one argument for this redis lib call";

/// One argument of `redis.call` as the command gets it: a string as it is, a number as Redis
/// 7.0 formats Lua's numbers (`%.17g`: `5`, `0.10000000000000001`, `1e+17`). mlua hands a
/// number with no fraction over as an `Integer`; it is the same double, formatted alike.
pub fn script_arg(value: Value) -> Result<Bytes, &'static str> {
    match value {
        Value::String(s) => Ok(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Integer(n) => Ok(Bytes::from(super::libs::format_g(n as f64, 17))),
        Value::Number(n) => Ok(Bytes::from(super::libs::format_g(n, 17))),
        _ => Err("Lua redis lib command arguments must be strings or integers"),
    }
}

/// The `redis` table scripts see (`call` and `pcall` are added by the VM).
pub fn create_redis_table(lua: &Lua, resp: std::rc::Rc<std::cell::Cell<u8>>) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let single = |field: &'static str| {
        lua.create_function(move |lua, args: MultiValue| {
            let args: Vec<Value> = args.into_iter().collect();
            let out = lua.create_table()?;
            match args.as_slice() {
                [Value::String(s)] if field == "err" => out.raw_set("err", lua.create_string(error_reply_text(&s.as_bytes()))?)?,
                [Value::String(s)] => out.raw_set(field, s.clone())?,
                _ => out.raw_set("err", "ERR wrong number or type of arguments")?,
            }
            Ok(out)
        })
    };
    t.raw_set("error_reply", single("err")?)?;
    t.raw_set("status_reply", single("ok")?)?;
    t.raw_set(
        "sha1hex",
        lua.create_function(|_, args: MultiValue| match args.into_iter().collect::<Vec<_>>().as_slice() {
            [Value::String(s)] => Ok(super::sha1_hex(&s.as_bytes())),
            [Value::Integer(n)] => Ok(super::sha1_hex(n.to_string().as_bytes())),
            [Value::Number(n)] => Ok(super::sha1_hex(super::libs::format_g(*n, 14).as_bytes())),
            _ => Err(mlua::Error::runtime("wrong number of arguments")),
        })?,
    )?;
    t.raw_set(
        "setresp",
        lua.create_function(move |_, args: MultiValue| {
            let args: Vec<Value> = args.into_iter().collect();
            let [v] = args.as_slice() else {
                return Err(mlua::Error::runtime("redis.setresp() requires one argument."));
            };
            match v.as_number().or(v.as_integer().map(|i| i as f64)) {
                Some(n) if n == 2.0 || n == 3.0 => {
                    resp.set(n as u8);
                    Ok(())
                }
                _ => Err(mlua::Error::runtime("RESP version must be 2 or 3.")),
            }
        })?,
    )?;
    t.raw_set(
        "set_repl",
        lua.create_function(|_, args: MultiValue| {
            let args: Vec<Value> = args.into_iter().collect();
            let [v] = args.as_slice() else {
                return Err(mlua::Error::runtime("redis.set_repl() requires two arguments."));
            };
            // Effects always replicate to every peer; the flags are checked, as Redis does.
            match v.as_number().or(v.as_integer().map(|i| i as f64)) {
                Some(n) if (0.0..=3.0).contains(&n) && n.fract() == 0.0 => Ok(()),
                _ => Err(mlua::Error::runtime("Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.")),
            }
        })?,
    )?;
    t.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    t.raw_set("breakpoint", lua.create_function(|_, ()| Ok(false))?)?;
    t.raw_set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    t.raw_set(
        "acl_check_cmd",
        lua.create_function(|_, argv: MultiValue| {
            let argv = script_argv(argv).map_err(mlua::Error::runtime)?;
            match TABLE.find(&argv[0]) {
                // Only the default user exists, and it may run every command.
                Some(_) => Ok(true),
                None => Err(mlua::Error::runtime("Invalid command passed to redis.acl_check_cmd()")),
            }
        })?,
    )?;
    for (name, value) in [("REPL_NONE", 0), ("REPL_AOF", 1), ("REPL_SLAVE", 2), ("REPL_REPLICA", 2), ("REPL_ALL", 3)] {
        t.raw_set(name, value)?;
    }
    add_constants_and_log(lua, &t)?;
    Ok(t)
}

/// `redis.error_reply(text)`'s error, as Redis 7 words it: the first word is the error code
/// (`"a b"` stays `a b`), a text without a space gets `ERR` (`"x"` is `ERR x`, `""` is `ERR `).
fn error_reply_text(text: &[u8]) -> Vec<u8> {
    // Redis prepends the '-' when missing, then splits the code off at the first space.
    let rest = text.strip_prefix(b"-").unwrap_or(text);
    let (code, msg): (&[u8], &[u8]) = match rest.iter().position(|&c| c == b' ') {
        Some(space) => (&rest[..space], &rest[space + 1..]),
        None => (b"ERR", rest),
    };
    let mut msg = msg;
    while let [head @ .., b'\r' | b'\n'] = msg {
        msg = head;
    }
    [code, b" ", msg].concat()
}

/// `redis.log`, the `LOG_*` levels and the version constants (scripts and library loading).
pub fn add_constants_and_log(lua: &Lua, t: &Table) -> mlua::Result<()> {
    for (name, value) in [("LOG_DEBUG", 0), ("LOG_VERBOSE", 1), ("LOG_NOTICE", 2), ("LOG_WARNING", 3)] {
        t.raw_set(name, value)?;
    }
    let version = crate::cmd::connection::REDIS_COMPAT_VERSION;
    let num = version.split('.').filter_map(|p| p.parse::<i64>().ok()).fold(0, |acc, p| acc * 256 + p);
    t.raw_set("REDIS_VERSION", version)?;
    t.raw_set("REDIS_VERSION_NUM", num)?;
    t.raw_set(
        "log",
        lua.create_function(|_, args: MultiValue| {
            let args: Vec<Value> = args.into_iter().collect();
            if args.len() < 2 {
                return Err(mlua::Error::runtime("redis.log() requires two arguments or more."));
            }
            let Some(level) = args[0].as_number().or(args[0].as_integer().map(|i| i as f64)) else {
                return Err(mlua::Error::runtime("First argument must be a number (log level)."));
            };
            if !(0.0..=3.0).contains(&level) {
                return Err(mlua::Error::runtime("Invalid debug level."));
            }
            let text: Vec<String> = args[1..].iter().filter_map(|v| v.to_string().ok()).collect();
            let text = text.join(" ");
            match level as u8 {
                0 => tracing::debug!(target: "script", "{text}"),
                1 | 2 => tracing::info!(target: "script", "{text}"),
                _ => tracing::warn!(target: "script", "{text}"),
            }
            Ok(())
        })?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::error_reply_text;

    #[test]
    fn error_reply_text_is_worded_as_redis_7_words_it() {
        assert_eq!(error_reply_text(b""), b"ERR ");
        assert_eq!(error_reply_text(b"-"), b"ERR ");
        assert_eq!(error_reply_text(b"-X"), b"ERR X");
        assert_eq!(error_reply_text(b"a b"), b"a b");
        assert_eq!(error_reply_text(b"-MY_CODE custom"), b"MY_CODE custom");
        assert_eq!(error_reply_text(b"x\r\n"), b"ERR x");
    }
}
