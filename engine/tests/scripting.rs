//! Black-box tests of Lua scripting over TCP: the commands, Redis's type conversions both
//! ways, the libraries, the sandbox, BUSY and SCRIPT KILL, and the memory limit. Redis's own
//! `unit/scripting` Tcl unit (scripts/test.sh) covers the details in depth; a script's
//! replication to peers is in `mesh.rs`.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::{Conn, Reply, Server};

fn int(n: i64) -> Reply {
    Reply::Int(n)
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

fn err_text(reply: &Reply) -> String {
    match reply {
        Reply::Error(e) => e.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn eval(c: &mut Conn, script: &str, keys: &[&str], args: &[&str]) -> Reply {
    let numkeys = keys.len().to_string();
    let mut argv = vec!["EVAL", script, numkeys.as_str()];
    argv.extend_from_slice(keys);
    argv.extend_from_slice(args);
    c.cmd(&argv)
}

#[test]
fn eval_evalsha_and_the_script_cache() {
    // EVAL caches the body under its SHA1; EVALSHA runs it; SCRIPT LOAD/EXISTS/FLUSH manage
    // the cache; KEYS and ARGV reach the script; an unknown SHA is NOSCRIPT.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let body = "return {KEYS[1], ARGV[1], #KEYS, #ARGV}";
    let loaded = c.cmd(&["SCRIPT", "LOAD", body]).text();
    assert_eq!(loaded, "c409b22118a2ba735eedfdba813c9a5a0dfebc85", "the SHA1 of the body (sha1sum)");
    let unknown = "0000000000000000000000000000000000000000";
    assert_eq!(c.cmd(&["EVALSHA", &loaded, "1", "k", "a", "b"]), Reply::Array(vec![bulk("k"), bulk("a"), int(1), int(2)]));
    assert_eq!(c.cmd(&["EVALSHA", &loaded.to_uppercase(), "0"]), Reply::Array(vec![]), "SHA is case-insensitive; nil KEYS[1] ends the array");
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &loaded, unknown]), Reply::Array(vec![int(1), int(0)]));
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH"]).text(), "OK");
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &loaded]), Reply::Array(vec![int(0)]));
    assert!(err_text(&c.cmd(&["EVALSHA", &loaded, "0"])).starts_with("NOSCRIPT"));
    // EVAL caches too: the same SHA1 (redis.sha1hex agrees) works right after.
    assert_eq!(eval(&mut c, "return 'cached'", &[], &[]), bulk("cached"));
    let sha_of = eval(&mut c, "return redis.sha1hex(ARGV[1])", &[], &["return 'cached'"]).text();
    assert_eq!(c.cmd(&["EVALSHA", &sha_of, "0"]), bulk("cached"));
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH", "ASYNC"]).text(), "OK");
    // numkeys errors, worded as Redis words them.
    assert!(err_text(&c.cmd(&["EVAL", "return 1", "2", "k"])).contains("greater than number of args"));
    assert!(err_text(&c.cmd(&["EVAL", "return 1", "-1"])).contains("can't be negative"));
    assert!(err_text(&c.cmd(&["EVAL", "return (", "0"])).starts_with("ERR Error compiling script"));
}

#[test]
fn writes_reads_and_read_only_scripts() {
    // A script's commands run on the keyspace; EVAL_RO and the no-writes shebang refuse
    // writes; a failed redis.call raises, redis.pcall returns the error as a value.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let script = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCRBY', KEYS[1], 5)";
    assert_eq!(eval(&mut c, script, &["n"], &["10"]), int(15));
    assert_eq!(c.cmd(&["GET", "n"]), bulk("15"));
    assert_eq!(c.cmd(&["EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "n"]), bulk("15"));
    let refused = c.cmd(&["EVAL_RO", "return redis.call('DEL', KEYS[1])", "1", "n"]);
    assert!(err_text(&refused).contains("Write commands are not allowed from read-only scripts"), "{refused:?}");
    let refused = eval(&mut c, "#!lua flags=no-writes\nreturn redis.call('DEL', KEYS[1])", &["n"], &[]);
    assert!(err_text(&refused).contains("Write commands are not allowed from read-only scripts"), "{refused:?}");
    assert_eq!(c.cmd(&["EXISTS", "n"]), int(1));
    // redis.call raises the command's error (with the script's location); pcall hands it back.
    c.cmd(&["SET", "s", "text"]);
    let raised = eval(&mut c, "return redis.call('INCR', KEYS[1])", &["s"], &[]);
    assert!(err_text(&raised).starts_with("ERR value is not an integer or out of range script: "), "{raised:?}");
    assert!(err_text(&raised).ends_with("on @user_script:1."), "{raised:?}");
    let caught = eval(&mut c, "local r = redis.pcall('INCR', KEYS[1]); return r.err", &["s"], &[]);
    assert_eq!(caught, bulk("ERR value is not an integer or out of range"));
    let wrong_type = eval(&mut c, "return redis.call('LPUSH', KEYS[1], 'x')", &["s"], &[]);
    assert!(err_text(&wrong_type).starts_with("WRONGTYPE"), "{wrong_type:?}");
    assert!(err_text(&eval(&mut c, "return redis.call('nosuchcommand')", &[], &[])).contains("Unknown Redis command called from script"));
    assert!(err_text(&eval(&mut c, "return redis.call('EVAL', 'return 1', 0)", &[], &[])).contains("not allowed from script"));
    assert!(err_text(&eval(&mut c, "return redis.call('GET', {})", &[], &[])).contains("must be strings or integers"));
}

#[test]
fn redis_call_gets_its_arguments_as_redis_7_0_sends_them() {
    // Numbers as Redis 7.0's `luaArgsToRedisArgv` writes them (`%.17g`), integral ones past
    // 1e17 too; the same strings from redis-server 7.0.15.
    let server = Server::start(&[]);
    let mut c = server.connect();
    for (lua, sent) in [
        ("5", "5"),
        ("-3.5", "-3.5"),
        ("0.1", "0.10000000000000001"),
        ("2^53", "9007199254740992"),
        ("1e17", "1e+17"),
        ("123456789012345678", "1.2345678901234568e+17"),
        ("-0.0", "-0"),
        ("1/0", "inf"),
    ] {
        let script = format!("redis.call('SET', KEYS[1], {lua}) return redis.call('GET', KEYS[1])");
        assert_eq!(eval(&mut c, &script, &["n"], &[]), bulk(sent), "{lua}");
    }
    // Strings of any bytes, from KEYS and ARGV or made by the script, reach the command whole.
    let mut binary = vec![b'k', 0, 0xff];
    binary.extend_from_slice(&[b'x'; 300]);
    let script = "redis.call('SET', KEYS[1], ARGV[1] .. '\\0' .. ARGV[2]) return {redis.call('GET', KEYS[1]), redis.call('STRLEN', KEYS[1]), #KEYS[1]}";
    let reply = c.call(&[&b"EVAL"[..], script.as_bytes(), b"1", &binary, &binary, b""]).unwrap();
    let mut stored = binary.clone();
    stored.push(0);
    assert_eq!(reply, Reply::Array(vec![Reply::Bulk(stored), int(binary.len() as i64 + 1), int(binary.len() as i64)]));
    assert_eq!(c.call(&[&b"GET"[..], &binary]).unwrap(), Reply::Bulk([&binary[..], &[0]].concat()));
    assert_eq!(eval(&mut c, "return redis.call('SET', KEYS[1], '')", &["empty"], &[]), Reply::Status("OK".into()));
    assert_eq!(c.cmd(&["STRLEN", "empty"]), int(0));
    // What is neither string nor number, or no command at all, is Redis's error.
    assert!(err_text(&eval(&mut c, "return redis.call('SET', KEYS[1], true)", &["n"], &[])).contains("must be strings or integers"));
    assert!(err_text(&eval(&mut c, "return redis.call()", &[], &[])).contains("Please specify at least one argument for this redis lib call"));
    // A function's keys and args are tables of the same strings.
    c.cmd(&["FUNCTION", "LOAD", "#!lua name=args\nredis.register_function('echo', function(keys, args) return {#keys, #args, keys[1], args[2]} end)"]);
    assert_eq!(
        c.call(&[&b"FCALL"[..], b"echo", b"1", &binary, b"a", &binary]).unwrap(),
        Reply::Array(vec![int(1), int(2), Reply::Bulk(binary.clone()), Reply::Bulk(binary.clone())])
    );
}

#[test]
fn lua_values_become_replies_as_redis_documents() {
    // Lua → reply: numbers truncate to integers, strings are bulks, a table is an array up to
    // its first nil, true is 1 and false is nil (RESP2), {ok=} a status and {err=} an error.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(eval(&mut c, "return 3.99", &[], &[]), int(3));
    assert_eq!(eval(&mut c, "return -3.99", &[], &[]), int(-3));
    assert_eq!(eval(&mut c, "return 'x'", &[], &[]), bulk("x"));
    assert_eq!(eval(&mut c, "return {1, 'two', {3}, nil, 5}", &[], &[]), Reply::Array(vec![int(1), bulk("two"), Reply::Array(vec![int(3)])]));
    assert_eq!(eval(&mut c, "return true", &[], &[]), int(1));
    assert_eq!(eval(&mut c, "return false", &[], &[]), Reply::Nil);
    assert_eq!(eval(&mut c, "return nil", &[], &[]), Reply::Nil);
    assert_eq!(eval(&mut c, "return {ok='FINE'}", &[], &[]), Reply::Status("FINE".into()));
    assert_eq!(eval(&mut c, "return redis.status_reply('FINE')", &[], &[]), Reply::Status("FINE".into()));
    assert_eq!(eval(&mut c, "return {err='MYCODE custom'}", &[], &[]), Reply::Error("MYCODE custom".into()));
    assert_eq!(eval(&mut c, "return redis.error_reply('MYCODE custom')", &[], &[]), Reply::Error("MYCODE custom".into()));
    assert_eq!(eval(&mut c, "return redis.error_reply('')", &[], &[]), Reply::Error("ERR ".into()));
    // Redis's C cast: out of range and NaN become the smallest integer.
    assert_eq!(eval(&mut c, "return math.huge", &[], &[]), int(i64::MIN));
    let nested = eval(&mut c, "local t = {} t[1] = t return t", &[], &[]);
    assert!(matches!(nested, Reply::Array(_)), "a self-referencing table ends at the depth limit: {nested:?}");
}

#[test]
fn replies_become_lua_values_as_redis_documents() {
    // Reply → Lua (RESP2 by default): an integer is a number, a bulk a string, a nil false,
    // a status {ok=}, an error {err=}, an array a table; with redis.setresp(3) a map is
    // {map=}, a set {set=}, a double {double=}, a null nil. The client's own protocol decides
    // only how true/false come back.
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["HSET", "h", "f", "v"]);
    c.cmd(&["ZADD", "z", "1.5", "m"]);
    let resp2 = "local r = {} \
        r[1] = type(redis.call('HLEN', KEYS[1])) \
        r[2] = tostring(redis.call('GET', 'missing')) \
        r[3] = redis.call('SET', 'x', 'y').ok \
        r[4] = redis.pcall('HGET').err ~= nil and 'err' or 'no' \
        r[5] = #redis.call('HGETALL', KEYS[1]) \
        r[6] = redis.call('ZSCORE', KEYS[2], 'm') \
        return r";
    assert_eq!(eval(&mut c, resp2, &["h", "z"], &[]).texts(), ["number", "false", "OK", "err", "2", "1.5"]);
    let resp3 = "redis.setresp(3) local r = {} \
        r[1] = redis.call('HGETALL', KEYS[1]).map.f \
        r[2] = tostring(redis.call('ZSCORE', KEYS[2], 'm').double) \
        r[3] = tostring(redis.call('GET', 'missing')) \
        r[4] = tostring(redis.call('SMEMBERS', 'nosuchset').set ~= nil) \
        return r";
    assert_eq!(eval(&mut c, resp3, &["h", "z"], &[]).texts(), ["v", "1.5", "nil", "true"]);
    // Booleans: RESP2 clients get 1/nil, RESP3 clients true/false.
    assert_eq!(eval(&mut c, "return {true, false}", &[], &[]), Reply::Array(vec![int(1), Reply::Nil]));
    c.cmd(&["HELLO", "3"]);
    assert_eq!(eval(&mut c, "return {true, false}", &[], &[]), Reply::Array(vec![Reply::Bool(true), Reply::Bool(false)]));
    assert_eq!(eval(&mut c, "return {double=3.5}", &[], &[]), Reply::Double("3.5".into()));
    assert_eq!(eval(&mut c, "return {map={a=1}}", &[], &[]), Reply::Map(vec![(bulk("a"), int(1))]));
}

#[test]
fn the_libraries_redis_gives_scripts() {
    // cjson, cmsgpack and bit behave as Redis's C libraries; math.random can be seeded;
    // redis.call('TIME') works (effects replication makes both safe).
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(eval(&mut c, "return cjson.encode({1, 2, {a = 'b'}})", &[], &[]), bulk("[1,2,{\"a\":\"b\"}]"));
    assert_eq!(
        eval(&mut c, "local t = cjson.decode(ARGV[1]) return {t.x, #t.list, tostring(t.n == cjson.null)}", &[], &["{\"x\":7,\"list\":[1,2,3],\"n\":null}"])
            .texts(),
        ["7", "3", "true"]
    );
    assert!(err_text(&eval(&mut c, "return cjson.decode('{bad')", &[], &[])).contains("Expected"));
    let packed = "local p = cmsgpack.pack({1, 'two', {three = 3}}) local t = cmsgpack.unpack(p) return {#p, t[1], t[2], t[3].three}";
    assert_eq!(eval(&mut c, packed, &[], &[]), Reply::Array(vec![int(14), int(1), bulk("two"), int(3)]));
    assert_eq!(
        eval(&mut c, "return {bit.band(0xff, 0x0f), bit.bor(1, 2), bit.bxor(3, 1), bit.lshift(1, 4), bit.tohex(255, 4), bit.tobit(4294967295)}", &[], &[])
            .texts(),
        ["15", "3", "2", "16", "00ff", "-1"]
    );
    // struct: Redis's formats, byte for byte (values checked against redis-server 7.0.15).
    assert_eq!(eval(&mut c, "return struct.pack('>I2 <h b s c0', 258, -2, -1, 'ab', 'xyz')", &[], &[]), Reply::Bulk(b"\x01\x02\xfe\xff\xffab\x00xyz".to_vec()));
    let short = eval(&mut c, "return {struct.unpack('>I2 <h b s', ARGV[1])}", &[], &["\u{1}\u{2}\u{fe}"]);
    assert!(err_text(&short).contains("data string too short"), "{short:?}");
    assert_eq!(
        eval(&mut c, "return {struct.unpack('>I2 <h s', struct.pack('>I2 <h s', 258, -2, 'ab'))}", &[], &[]),
        Reply::Array(vec![int(258), int(-2), bulk("ab"), int(8)])
    );
    assert_eq!(eval(&mut c, "return struct.size('!8 b d i')", &[], &[]), int(20));
    let bad = eval(&mut c, "return struct.pack('q', 1)", &[], &[]);
    assert!(err_text(&bad).starts_with("ERR user_script:1: bad argument #1 to 'pack' (invalid format option 'q')"), "{bad:?}");
    let bad = eval(&mut c, "return bit.band({})", &[], &[]);
    assert!(err_text(&bad).starts_with("ERR user_script:1: bad argument #1 to 'band' (number expected, got table)"), "{bad:?}");
    let seeded = "math.randomseed(ARGV[1]) return tostring(math.random())";
    assert_eq!(eval(&mut c, seeded, &[], &["10"]), eval(&mut c, seeded, &[], &["10"]));
    assert_ne!(eval(&mut c, seeded, &[], &["10"]), eval(&mut c, seeded, &[], &["20"]));
    let time = eval(&mut c, "return redis.call('TIME')", &[], &[]).texts();
    assert!(time[0].parse::<u64>().unwrap() > 1_600_000_000, "{time:?}");
}

#[test]
fn the_sandbox_refuses_escapes() {
    // No os/io/loadfile/dofile/print/debug; globals, library tables and the string metatable
    // are read-only (Redis's global protection; CVE-2025-46818 edited a basic type's
    // metatable); loadstring compiles source only; unpack's count is bounded (CVE-2025-46817).
    let server = Server::start(&[]);
    let mut c = server.connect();
    for name in ["os", "io", "loadfile", "dofile", "print", "debug", "require", "getfenv", "setfenv", "package", "undefined_thing"] {
        let reply = eval(&mut c, &format!("return {name}"), &[], &[]);
        assert!(err_text(&reply).contains(&format!("Script attempted to access nonexistent global variable '{name}'")), "{name}: {reply:?}");
    }
    assert!(err_text(&eval(&mut c, "os.execute('touch /tmp/keymesh-pwned')", &[], &[])).contains("nonexistent global variable 'os'"));
    assert!(!std::path::Path::new("/tmp/keymesh-pwned").exists());
    for escape in [
        "x = 1",
        "_G.x = 1",
        "rawset(_G, 'x', 1)",
        "setmetatable(_G, {})",
        "getmetatable(_G).__index = nil",
        "redis.call = function() return 1 end",
        "cjson.encode = nil",
        "cmsgpack.pack = nil",
        "bit.band = nil",
        "string.upper = nil",
        "getmetatable('').__index = {}",
        "getmetatable('').__index.upper = function() return 'pwned' end",
    ] {
        let reply = eval(&mut c, escape, &[], &[]);
        assert!(err_text(&reply).contains("Attempt to modify a readonly table"), "{escape}: {reply:?}");
    }
    assert_eq!(eval(&mut c, "return string.upper('still fine')", &[], &[]), bulk("STILL FINE"));
    let bytecode = eval(&mut c, "return loadstring(string.char(27) .. 'LuaQ') == nil", &[], &[]);
    assert!(matches!(bytecode, Reply::Error(_) | Reply::Int(1)), "bytecode must not load: {bytecode:?}");
    assert!(err_text(&eval(&mut c, "return unpack({}, 0, 2147483647)", &[], &[])).contains("too many results to unpack"));
    assert_eq!(c.cmd(&["PING"]).text(), "PONG");
}

#[test]
fn a_busy_script_gets_busy_replies_and_script_kill_stops_it() {
    // Past busy-reply-threshold other clients get BUSY (SCRIPT KILL still works); SCRIPT KILL
    // ends a script that has not written; one that wrote is UNKILLABLE and runs to its end.
    let server = Server::start(&[]);
    let mut admin = server.connect();
    assert_eq!(admin.cmd(&["CONFIG", "SET", "lua-time-limit", "100"]).text(), "OK");
    assert_eq!(admin.cmd(&["CONFIG", "GET", "busy-reply-threshold"]).texts(), ["busy-reply-threshold", "100"]);
    assert!(err_text(&admin.cmd(&["SCRIPT", "KILL"])).starts_with("NOTBUSY"));
    let mut runner = server.connect();
    runner.send(&["EVAL", "while true do end", "0"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = admin.cmd(&["PING"]);
        if let Reply::Error(e) = &reply {
            assert!(e.starts_with("BUSY Redis is busy running a script"), "{e}");
            break;
        }
        assert!(Instant::now() < deadline, "no BUSY reply within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(admin.cmd(&["SCRIPT", "KILL"]).text(), "OK");
    let killed = runner.read().unwrap();
    assert!(err_text(&killed).contains("Script killed by user with SCRIPT KILL"), "{killed:?}");
    assert_eq!(admin.cmd(&["PING"]).text(), "PONG");
    assert_eq!(runner.cmd(&["PING"]).text(), "PONG");

    // A script that wrote cannot be killed; it keeps BUSY until it ends by itself.
    let started = Instant::now();
    runner.send(&[
        "EVAL",
        "redis.call('SET', KEYS[1], 'v') local t = redis.call('TIME')[1] + 1 while tonumber(redis.call('TIME')[1]) <= t do end return 'done'",
        "1",
        "w",
    ]);
    std::thread::sleep(Duration::from_millis(400));
    assert!(err_text(&admin.cmd(&["SCRIPT", "KILL"])).starts_with("UNKILLABLE"));
    assert_eq!(runner.read().unwrap(), bulk("done"));
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(admin.cmd(&["GET", "w"]), bulk("v"));
}

#[test]
fn function_stats_shows_the_running_function_and_function_kill_stops_it() {
    // A running function is in FUNCTION STATS with its name and the command that called it
    // (an EVAL script is not: FUNCTION STATS shows functions only); SCRIPT KILL refuses to
    // stop a function, FUNCTION KILL stops it.
    let server = Server::start(&[]);
    let mut admin = server.connect();
    assert_eq!(admin.cmd(&["CONFIG", "SET", "busy-reply-threshold", "100"]).text(), "OK");
    let library = "#!lua name=spinner\nredis.register_function('spin', function(keys, args) while true do end end)";
    assert_eq!(admin.cmd(&["FUNCTION", "LOAD", library]), bulk("spinner"));
    let running_script = |admin: &mut Conn| match admin.cmd(&["FUNCTION", "STATS"]) {
        Reply::Array(fields) => fields[1].clone(),
        other => panic!("FUNCTION STATS: {other:?}"),
    };
    assert_eq!(running_script(&mut admin), Reply::Nil);
    let mut runner = server.connect();
    runner.send(&["FCALL", "spin", "1", "some-key", "an-arg"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let shown = loop {
        if let Reply::Array(fields) = running_script(&mut admin) {
            break fields;
        }
        assert!(Instant::now() < deadline, "no running function in FUNCTION STATS within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(shown[..2], [bulk("name"), bulk("spin")]);
    assert_eq!(shown[2], bulk("command"));
    assert_eq!(shown[3].texts(), ["FCALL", "spin", "1", "some-key", "an-arg"]);
    assert!(err_text(&admin.cmd(&["SCRIPT", "KILL"])).starts_with("BUSY"));
    assert_eq!(admin.cmd(&["FUNCTION", "KILL"]).text(), "OK");
    let killed = runner.read().unwrap();
    assert!(err_text(&killed).contains("killed"), "{killed:?}");
    assert_eq!(running_script(&mut admin), Reply::Nil);

    // An EVAL script running past the threshold is not a running function.
    runner.send(&["EVAL", "while true do end", "0"]);
    while !admin.cmd(&["PING"]).is_error() {
        assert!(Instant::now() < deadline + Duration::from_secs(10), "no BUSY reply within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(running_script(&mut admin), Reply::Nil);
    assert_eq!(admin.cmd(&["SCRIPT", "KILL"]).text(), "OK");
    assert!(runner.read().unwrap().is_error());
}

#[test]
fn a_script_that_allocates_without_bound_hits_the_memory_limit() {
    // lua-memory-limit stops a script that allocates too much with a clear error; the server
    // and later scripts are fine.
    let server = Server::start(&["--lua-memory-limit", "32mb"]);
    let mut c = server.connect();
    let reply = eval(&mut c, "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 64) .. i end return #t", &[], &[]);
    assert!(err_text(&reply).contains("lua-memory-limit"), "{reply:?}");
    let reply = eval(&mut c, "local s = 'x' for i = 1, 40 do s = s .. s end return #s", &[], &[]);
    assert!(err_text(&reply).contains("lua-memory-limit"), "{reply:?}");
    // One call that would allocate far past the limit at once is refused before it allocates
    // (600-700 MB each; the server never held 512 MiB, below).
    for script in
        ["return #string.rep('x', 700000000)", "return #('ab'):rep(300000000)", "return #string.rep(7, 600000000)", "return #table.create(40000000, 1)"]
    {
        let reply = eval(&mut c, script, &[], &[]);
        assert!(err_text(&reply).contains("lua-memory-limit"), "{script}: {reply:?}");
    }
    assert_eq!(eval(&mut c, "return string.rep('ab', 3)", &[], &[]), bulk("ababab"));
    assert_eq!(eval(&mut c, "return string.rep(12, 2)", &[], &[]), bulk("1212"));
    assert_eq!(eval(&mut c, "return #table.create(1000, 'x')", &[], &[]), int(1000));
    assert_eq!(c.cmd(&["PING"]).text(), "PONG");
    assert_eq!(eval(&mut c, "local t = {} for i = 1, 1000 do t[i] = i end return #t", &[], &[]), int(1000));
    assert!(server.rss() < 512 << 20, "rss {} after the limit", server.rss());
    assert!(server.peak_rss() < 512 << 20, "peak rss {}", server.peak_rss());
}

#[test]
fn scripts_in_transactions_and_select() {
    // EVAL inside MULTI runs at EXEC; a script's SELECT does not outlive it.
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["MULTI"]);
    assert_eq!(c.cmd(&["EVAL", "return redis.call('INCR', KEYS[1])", "1", "counter"]).text(), "QUEUED");
    c.cmd(&["INCR", "counter"]);
    assert_eq!(c.cmd(&["EXEC"]), Reply::Array(vec![int(1), int(2)]));
    assert_eq!(eval(&mut c, "redis.call('SELECT', 5) redis.call('SET', 'in5', 'x') return 1", &[], &[]), int(1));
    assert_eq!(c.cmd(&["EXISTS", "in5"]), int(0));
    c.cmd(&["SELECT", "5"]);
    assert_eq!(c.cmd(&["GET", "in5"]), bulk("x"));
}

#[test]
fn a_function_never_sees_an_evals_keys_or_argv() {
    // One worker thread, so that the EVAL and the FCALL run in the same Lua VM; in Redis they
    // live in different Lua states.
    let server = Server::start(&["--server-threads", "1"]);
    let mut c = server.connect();
    let library = "#!lua name=spy\nredis.register_function('spy', function() return {KEYS[1], ARGV[1]} end)";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", library]), bulk("spy"));
    assert_eq!(eval(&mut c, "return KEYS[1] .. ARGV[1]", &["secret"], &["arg"]), bulk("secretarg"));
    let spied = c.cmd(&["FCALL", "spy", "0"]);
    assert!(err_text(&spied).contains("nonexistent global variable 'KEYS'"), "{spied:?}");
    // Every other global is there, as before.
    let library = "#!lua name=plain\nredis.register_function('plain', function() return string.rep(cjson.encode({1}), 2) end)";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", library]), bulk("plain"));
    assert_eq!(c.cmd(&["FCALL", "plain", "0"]), bulk("[1][1]"));
}

#[test]
fn each_eval_gets_its_own_keys_and_argv_whatever_the_last_script_did_to_them() {
    // One worker thread, so every script runs in the same Lua VM, whose KEYS and ARGV tables
    // are refilled per run: what a script wrote into them, froze or hid behind a metatable
    // must not reach the next script. `count` is compiled after the first script set
    // `KEYS.extra` and `ARGV.extra`: Luau resolves global paths such as those when it loads a
    // script (the globals are a safeenv), and must not keep what they named then.
    let server = Server::start(&["--server-threads", "1"]);
    let mut c = server.connect();
    let count = "return {#KEYS, #ARGV, tostring(KEYS.extra or ARGV.extra), tostring(getmetatable(KEYS)), tostring(table.isfrozen(ARGV))}";
    let clean = |c: &mut Conn, keys: &[&str], args: &[&str]| {
        let n = |v: usize| Reply::Int(v as i64);
        assert_eq!(eval(c, count, keys, args), Reply::Array(vec![n(keys.len()), n(args.len()), bulk("nil"), bulk("nil"), bulk("false")]));
    };
    assert_eq!(eval(&mut c, "KEYS.extra = 1; ARGV.extra = 2; KEYS[3] = 'x'; return #KEYS", &["a", "b"], &["1", "2", "3"]), int(3));
    clean(&mut c, &["k"], &[]);
    assert_eq!(eval(&mut c, "setmetatable(KEYS, {__index = function() return 'leak' end}); return KEYS[9]", &[], &[]), bulk("leak"));
    clean(&mut c, &[], &["a"]);
    assert_eq!(eval(&mut c, "table.freeze(ARGV); table.freeze(KEYS); return ARGV[1]", &["k"], &["v"]), bulk("v"));
    clean(&mut c, &["k1", "k2"], &["a1"]);
    assert_eq!(eval(&mut c, "return {KEYS[1], ARGV[2]}", &["x"], &["y", "z"]), Reply::Array(vec![bulk("x"), bulk("z")]));
}

#[test]
fn functions_load_call_list_and_delete() {
    // FUNCTION LOAD registers a library's functions, FCALL/FCALL_RO call them (names are
    // case-insensitive), FUNCTION LIST shows them, DELETE removes them; the library's code sees
    // only the loading API while it loads.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let library = "#!lua name=counters\n\
        redis.register_function('bump', function(keys, args) return redis.call('INCRBY', keys[1], args[1]) end)\n\
        redis.register_function{function_name = 'peek', callback = function(keys) return redis.call('GET', keys[1]) end, flags = {'no-writes'}}";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", library]), bulk("counters"));
    assert!(err_text(&c.cmd(&["FUNCTION", "LOAD", library])).contains("already exists"));
    assert_eq!(c.cmd(&["FCALL", "bump", "1", "n", "5"]), int(5));
    assert_eq!(c.cmd(&["FCALL", "BUMP", "1", "n", "2"]), int(7));
    assert_eq!(c.cmd(&["FCALL_RO", "peek", "1", "n"]), bulk("7"));
    assert!(err_text(&c.cmd(&["FCALL_RO", "bump", "1", "n", "1"])).contains("write flag"));
    let Reply::Array(libraries) = c.cmd(&["FUNCTION", "LIST"]) else { panic!("FUNCTION LIST is an array") };
    let Reply::Array(fields) = &libraries[0] else { panic!("a library is a flat map in RESP2") };
    assert_eq!(fields[..4], [bulk("library_name"), bulk("counters"), bulk("engine"), bulk("LUA")]);
    let Reply::Array(functions) = &fields[5] else { panic!("functions is an array") };
    let names: Vec<String> = functions.iter().map(|f| f.texts()[1].clone()).collect();
    assert_eq!(names, ["bump", "peek"]);
    let escape = c.cmd(&["FUNCTION", "LOAD", "#!lua name=bad\nredis.call('SET', 'x', 'y')"]);
    assert!(err_text(&escape).starts_with("ERR Error registering functions"), "{escape:?}");
    assert_eq!(c.cmd(&["FUNCTION", "DELETE", "counters"]).text(), "OK");
    assert!(err_text(&c.cmd(&["FCALL", "bump", "1", "n", "1"])).contains("Function not found"));
    assert_eq!(c.cmd(&["GET", "n"]), bulk("7"));
}
