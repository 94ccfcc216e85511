//! Connection commands: the handshake (`HELLO`, `AUTH`), `PING`, `ECHO`, `SELECT`, `QUIT`,
//! `RESET`, and `CLIENT`. These are what every client library sends first, so replies
//! follow Redis 7.0 field for field.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::args::{eq_ignore_case, int};
use super::flags::*;
use super::{unknown_subcommand, wrong_arity, CommandSpec, Exec, Keys};
use crate::client::{ClientState, ReplyMode};
use crate::error::{CmdError, Reply};
use crate::frame::{Frame, OK};
use crate::server::Server;

/// The Redis version we report: clients enable features by it, and we implement 7.0's
/// command surface.
pub const REDIS_COMPAT_VERSION: &str = "7.0.15";

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: Keys::None, run: $run, group: "connection", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("hello", -1, NO_AUTH | FAST | LOADING | STALE, hello, "Handshakes with the Redis server."),
    spec!("auth", -2, NO_AUTH | FAST | LOADING | STALE, auth, "Authenticates the connection."),
    spec!("ping", -1, FAST, ping, "Returns the server's liveliness response."),
    spec!("echo", 2, FAST, echo, "Returns the given string."),
    spec!("select", 2, FAST | CROSS_DB | LOADING | STALE, select, "Changes the selected database."),
    spec!("quit", -1, NO_AUTH | FAST | IMMEDIATE | LOADING | STALE, quit, "Closes the connection."),
    spec!("reset", 1, NO_AUTH | FAST | IMMEDIATE | LOADING | STALE, reset, "Resets the connection."),
    spec!("client", -2, LOADING | STALE, client, "A container for client connection commands."),
];

fn hello(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let mut resp = exec.client.resp;
    let mut i = 1;
    if let Some(v) = argv.get(1) {
        match int(v) {
            Ok(n @ 2..=3) => resp = n as u8,
            Ok(_) => return Err(CmdError::Raw("NOPROTO unsupported protocol version".into())),
            Err(_) => return Err(CmdError::err("Protocol version is not an integer or out of range")),
        }
        i = 2;
    }
    let mut name = None;
    while i < argv.len() {
        if eq_ignore_case(&argv[i], "auth") && i + 2 < argv.len() {
            check_password(exec.server, &argv[i + 1], &argv[i + 2])?;
            exec.client.authenticated = true;
            i += 3;
        } else if eq_ignore_case(&argv[i], "setname") && i + 1 < argv.len() {
            validate_name(&argv[i + 1])?;
            name = Some(argv[i + 1].clone());
            i += 2;
        } else {
            return Err(CmdError::err(format!("Syntax error in HELLO option '{}'", String::from_utf8_lossy(&argv[i]))));
        }
    }
    if !exec.client.authenticated {
        return Err(CmdError::Raw(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into(),
        ));
    }
    if let Some(name) = name {
        set_name(exec.client, name);
    }
    exec.client.resp = resp;
    exec.client.handle.resp.store(resp as usize, Ordering::Relaxed);
    Ok(Frame::Map(vec![
        (Frame::bulk("server"), Frame::bulk("redis")),
        (Frame::bulk("version"), Frame::bulk(REDIS_COMPAT_VERSION)),
        (Frame::bulk("proto"), Frame::Integer(resp as i64)),
        (Frame::bulk("id"), Frame::Integer(exec.client.id as i64)),
        (Frame::bulk("mode"), Frame::bulk("standalone")),
        (Frame::bulk("role"), Frame::bulk("master")),
        (Frame::bulk("modules"), Frame::Array(vec![])),
    ]))
}

/// Checks `user`/`password` against `requirepass` (only the `default` user exists).
fn check_password(server: &Server, user: &[u8], password: &[u8]) -> Result<(), CmdError> {
    if user == b"default" && server.password_ok(password) {
        return Ok(());
    }
    Err(CmdError::Raw("WRONGPASS invalid username-password pair or user is disabled.".into()))
}

fn auth(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (user, password) = match argv.len() {
        2 => (&b"default"[..], &argv[1]),
        3 => (&argv[1][..], &argv[2]),
        _ => return Err(CmdError::Syntax),
    };
    if argv.len() == 2 && !exec.server.settings().has_password() {
        return Err(CmdError::err("AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"));
    }
    check_password(exec.server, user, password)?;
    exec.client.authenticated = true;
    Ok(OK)
}

fn ping(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if argv.len() > 2 {
        return Err(wrong_arity("ping"));
    }
    if exec.client.in_subscribe_mode() {
        let msg = argv.get(1).cloned().unwrap_or_default();
        return Ok(Frame::Array(vec![Frame::bulk("pong"), Frame::Bulk(msg)]));
    }
    Ok(match argv.get(1) {
        Some(msg) => Frame::Bulk(msg.clone()),
        None => Frame::Simple("PONG"),
    })
}

fn echo(_exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Bulk(argv[1].clone()))
}

fn select(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let db = int(&argv[1])?;
    if db < 0 || db as usize >= exec.server.store.databases() {
        return Err(CmdError::err("DB index is out of range"));
    }
    exec.client.db = db as usize;
    exec.ctx.db = db as usize;
    exec.client.handle.db.store(db as usize, Ordering::Relaxed);
    Ok(OK)
}

fn quit(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    exec.client.closing = true;
    // Gone for everyone once QUIT is answered, as in Redis (a tracking redirect to it is
    // broken from the next command on), though the socket closes after the reply.
    exec.server.tracking.disable(&exec.server.store, exec.client.id);
    exec.server.clients.unregister(exec.client.id);
    Ok(OK)
}

fn reset(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    let server = exec.server;
    let client = &mut *exec.client;
    client.multi = None;
    client.handle.in_multi.store(false, Ordering::Relaxed);
    super::multi::unwatch_all(server, client);
    super::pubsub::unsubscribe_all(server, client);
    server.monitors.remove(client.id);
    server.tracking.disable(&server.store, client.id);
    client.tracking = false;
    client.db = 0;
    client.handle.db.store(0, Ordering::Relaxed);
    client.resp = 2;
    client.handle.resp.store(2, Ordering::Relaxed);
    *client.handle.name.lock() = None;
    client.authenticated = !server.settings().has_password();
    client.handle.no_touch.store(false, Ordering::Relaxed);
    client.handle.no_evict.store(false, Ordering::Relaxed);
    Ok(Frame::Simple("RESET"))
}

/// Releases everything a closing connection holds.
pub fn disconnect(server: &Server, client: &mut ClientState) {
    client.writes.publish(&server.repl_log);
    super::multi::unwatch_all(server, client);
    super::pubsub::unsubscribe_all(server, client);
    server.monitors.remove(client.id);
    server.tracking.disable(&server.store, client.id);
    server.clients.unregister(client.id);
}

fn validate_name(name: &[u8]) -> Result<(), CmdError> {
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(CmdError::err("Client names cannot contain spaces, newlines or special characters."));
    }
    Ok(())
}

fn set_name(client: &mut ClientState, name: Bytes) {
    *client.handle.name.lock() = if name.is_empty() { None } else { Some(name) };
}

fn client(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let sub = argv[1].to_ascii_lowercase();
    let arity_error = || wrong_arity(&format!("client|{}", String::from_utf8_lossy(&sub)));
    let handle = exec.client.handle.clone();
    match (sub.as_slice(), argv.len()) {
        (b"id", 2) => Ok(Frame::Integer(exec.client.id as i64)),
        (b"setname", 3) => {
            validate_name(&argv[2])?;
            set_name(exec.client, argv[2].clone());
            Ok(OK)
        }
        (b"getname", 2) => Ok(Frame::bulk_opt(handle.name.lock().clone())),
        (b"setinfo", 4) => {
            let value = argv[3].clone();
            if value.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
                return Err(CmdError::err("lib-name or lib-ver cannot contain spaces, newlines or special characters."));
            }
            if eq_ignore_case(&argv[2], "lib-name") {
                *handle.lib_name.lock() = Some(value);
            } else if eq_ignore_case(&argv[2], "lib-ver") {
                *handle.lib_ver.lock() = Some(value);
            } else {
                return Err(CmdError::err(format!("Unrecognized option '{}'", String::from_utf8_lossy(&argv[2]))));
            }
            Ok(OK)
        }
        (b"info", 2) => Ok(Frame::Verbatim(Bytes::from(format!("{}\n", handle.info_line(&exec.server.tracking.info(handle.id)))))),
        (b"list", _) => client_list(exec.server, &argv[2..]),
        (b"kill", n) if n >= 3 => client_kill(exec, &argv[2..]),
        (b"unblock", 3 | 4) => {
            let id = int(&argv[2])?;
            let with_error = match argv.get(3) {
                None => false,
                Some(a) if eq_ignore_case(a, "timeout") => false,
                Some(a) if eq_ignore_case(a, "error") => true,
                Some(_) => return Err(CmdError::err("CLIENT UNBLOCK reason should be TIMEOUT or ERROR")),
            };
            let unblocked = exec.server.blocking.waiter_of(id as u64).is_some_and(|w| w.unblock(with_error));
            Ok(Frame::Integer(unblocked as i64))
        }
        (b"tracking", n) if n >= 3 => super::tracking::client_tracking(exec, argv),
        (b"caching", 3) => super::tracking::client_caching(exec, argv),
        (b"getredir", 2) => super::tracking::client_getredir(exec),
        (b"trackinginfo", 2) => super::tracking::client_trackinginfo(exec),
        (b"reply", 3) => {
            exec.client.reply_mode = match argv[2].to_ascii_lowercase().as_slice() {
                b"on" => ReplyMode::On,
                b"off" => ReplyMode::Off,
                b"skip" => ReplyMode::Skip,
                _ => return Err(CmdError::Syntax),
            };
            Ok(OK)
        }
        (b"no-evict" | b"no-touch", 3) => {
            let on = match argv[2].to_ascii_lowercase().as_slice() {
                b"on" => true,
                b"off" => false,
                _ => return Err(CmdError::Syntax),
            };
            let flag = if sub == b"no-touch" { &handle.no_touch } else { &handle.no_evict };
            flag.store(on, Ordering::Relaxed);
            Ok(OK)
        }
        (b"pause", 3 | 4) => {
            let mode = match argv.get(3).map(|m| m.to_ascii_lowercase()) {
                None => crate::pause::Mode::All,
                Some(m) if m == b"write" => crate::pause::Mode::Write,
                Some(m) if m == b"all" => crate::pause::Mode::All,
                Some(_) => return Err(CmdError::err("CLIENT PAUSE mode must be WRITE or ALL")),
            };
            let ms = int(&argv[2]).map_err(|_| CmdError::err("timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(CmdError::err("timeout is negative"));
            }
            let now = tokio::time::Instant::now();
            // Capped at 30 years (tokio's own "far future"): as good as forever.
            let until = now + std::time::Duration::from_millis(ms as u64).min(std::time::Duration::from_secs(30 * 365 * 86_400));
            exec.server.pause.pause(mode, until);
            Ok(OK)
        }
        (b"unpause", 2) => {
            exec.server.pause.unpause();
            Ok(OK)
        }
        (b"help", 2) => Ok(Frame::array_of_bulks([
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ID, SETNAME <name>, GETNAME, SETINFO <LIB-NAME|LIB-VER> <value>, INFO,",
            "LIST [TYPE <type>] [ID <id> ...], KILL <option> <value> ..., UNBLOCK <id> [TIMEOUT|ERROR],",
            "TRACKING <ON|OFF> [REDIRECT <id>] [BCAST] [PREFIX <prefix> ...] [OPTIN] [OPTOUT] [NOLOOP],",
            "CACHING <YES|NO>, GETREDIR, TRACKINGINFO, NO-EVICT <ON|OFF>, NO-TOUCH <ON|OFF>,",
            "PAUSE <timeout> [WRITE|ALL], UNPAUSE, HELP",
        ])),
        (
            b"id" | b"setname" | b"getname" | b"setinfo" | b"info" | b"kill" | b"unblock" | b"tracking" | b"caching" | b"getredir" | b"trackinginfo" | b"reply"
            | b"no-evict" | b"no-touch" | b"pause" | b"unpause" | b"help",
            _,
        ) => Err(arity_error()),
        _ => Err(unknown_subcommand(&argv[1], "client")),
    }
}

fn client_list(server: &Server, options: &[Bytes]) -> Reply {
    let mut ids: Option<Vec<u64>> = None;
    let mut kind: Option<Bytes> = None;
    match options.first() {
        None => {}
        Some(o) if eq_ignore_case(o, "type") && options.len() == 2 => {
            let t = options[1].to_ascii_lowercase();
            if !matches!(t.as_slice(), b"normal" | b"master" | b"replica" | b"slave" | b"pubsub") {
                return Err(CmdError::err(format!("Unknown client type '{}'", String::from_utf8_lossy(&options[1]))));
            }
            kind = Some(Bytes::from(t));
        }
        Some(o) if eq_ignore_case(o, "id") && options.len() >= 2 => {
            let parsed: Result<Vec<u64>, _> = options[1..].iter().map(|a| int(a).map(|n| n as u64)).collect();
            ids = Some(parsed.map_err(|_| CmdError::err("Invalid client ID"))?);
        }
        Some(_) => return Err(CmdError::Syntax),
    }
    let mut text = String::new();
    for c in server.clients.all() {
        if ids.as_ref().is_some_and(|ids| !ids.contains(&c.id)) {
            continue;
        }
        let is_pubsub = c.subscriptions.load(Ordering::Relaxed) > 0;
        match kind.as_deref() {
            Some(b"pubsub") if !is_pubsub => continue,
            Some(b"normal") if is_pubsub => continue,
            Some(b"master" | b"replica" | b"slave") => continue,
            _ => {}
        }
        text.push_str(&c.info_line(&server.tracking.info(c.id)));
        text.push('\n');
    }
    Ok(Frame::Verbatim(Bytes::from(text)))
}

fn client_kill(exec: &mut Exec, args: &[Bytes]) -> Reply {
    let self_id = exec.client.id;
    // Old form: CLIENT KILL addr:port → +OK or an error.
    if args.len() == 1 {
        let addr = String::from_utf8_lossy(&args[0]).into_owned();
        let target = exec.server.clients.all().into_iter().find(|c| c.addr == addr);
        return match target {
            Some(c) => {
                kill(exec, c.id, self_id);
                Ok(OK)
            }
            None => Err(CmdError::err("No such client")),
        };
    }
    if !args.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let mut filters: Vec<(Vec<u8>, Bytes)> = Vec::new();
    let mut skip_me = true;
    for pair in args.chunks(2) {
        let name = pair[0].to_ascii_lowercase();
        match name.as_slice() {
            b"id" => {
                int(&pair[1]).map_err(|_| CmdError::err("client-id should be greater than 0"))?;
            }
            b"skipme" => {
                skip_me = match pair[1].to_ascii_lowercase().as_slice() {
                    b"yes" => true,
                    b"no" => false,
                    _ => return Err(CmdError::Syntax),
                };
                continue;
            }
            b"addr" | b"laddr" | b"type" | b"user" => {}
            _ => return Err(CmdError::Syntax),
        }
        filters.push((name, pair[1].clone()));
    }
    let mut killed = 0;
    for c in exec.server.clients.all() {
        if skip_me && c.id == self_id {
            continue;
        }
        let matches = filters.iter().all(|(name, value)| match name.as_slice() {
            b"id" => int(value).is_ok_and(|id| id as u64 == c.id),
            b"addr" => c.addr.as_bytes() == &value[..],
            b"laddr" => c.laddr.as_bytes() == &value[..],
            b"type" => match value.to_ascii_lowercase().as_slice() {
                b"pubsub" => c.subscriptions.load(Ordering::Relaxed) > 0,
                b"normal" => c.subscriptions.load(Ordering::Relaxed) == 0,
                _ => false,
            },
            b"user" => &value[..] == b"default",
            _ => false,
        });
        if matches {
            kill(exec, c.id, self_id);
            killed += 1;
        }
    }
    Ok(Frame::Integer(killed))
}

fn kill(exec: &mut Exec, id: u64, self_id: u64) {
    if id == self_id {
        // Redis answers first, then closes.
        exec.client.closing = true;
    } else if let Some(c) = exec.server.clients.get(id) {
        c.kill();
    }
}
