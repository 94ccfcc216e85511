//! Introspection over TCP: SLOWLOG (what is logged, when, and how) and which reads leave a
//! key's access time alone (OBJECT IDLETIME), as Redis 7 behaves. Redis's Tcl units
//! unit/slowlog and unit/introspection-2 (scripts/test.sh) cover the rest.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::{blocked_clients, wait_blocked, Reply, Server};

/// The argument lists of the SLOWLOG GET reply, newest first.
fn logged(reply: Reply) -> Vec<String> {
    let Reply::Array(entries) = reply else { panic!("{reply:?}") };
    entries
        .into_iter()
        .map(|e| {
            let Reply::Array(fields) = e else { panic!("{e:?}") };
            assert_eq!(fields.len(), 6, "id, time, duration, args, peer, name: {fields:?}");
            let Reply::Array(args) = &fields[3] else { panic!("{fields:?}") };
            args.iter().map(|a| if let Reply::Bulk(b) = a { String::from_utf8_lossy(b).into_owned() } else { panic!("{a:?}") }).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

#[test]
fn slowlog_logs_what_clients_ran_with_secrets_redacted() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["SLOWLOG", "LEN"]), Reply::Int(0), "the default threshold (10 ms) logs nothing fast");
    assert_eq!(c.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]), Reply::Status("OK".into()));
    c.cmd(&["CLIENT", "SETNAME", "app"]);
    c.cmd(&["SET", "k", "v"]);
    c.cmd(&["MULTI"]);
    c.cmd(&["INCR", "n"]);
    c.cmd(&["EXEC"]);
    c.cmd(&["CONFIG", "SET", "requirepass", "", "maxmemory", "0"]);
    c.cmd(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]);
    // A blocked command is logged once served, not when it blocks.
    let mut blocked = server.connect();
    blocked.send(&["BLPOP", "queue", "0"]);
    wait_blocked(&mut c, 1);
    c.cmd(&["RPUSH", "queue", "job"]);
    assert!(matches!(blocked.read(), Some(Reply::Array(_))));
    let entries: Vec<String> = logged(c.cmd(&["SLOWLOG", "GET", "-1"])).into_iter().filter(|e| e != "INFO clients").collect();
    assert_eq!(
        entries[..8],
        [
            "BLPOP queue 0",
            "RPUSH queue job",
            "EVAL return redis.call('get', KEYS[1]) 1 k",
            "get k",
            "CONFIG SET requirepass (redacted) maxmemory 0",
            "INCR n",
            "MULTI",
            "SET k v",
        ],
        "{entries:?}"
    );
    assert!(!entries.iter().any(|e| e.eq_ignore_ascii_case("exec")), "EXEC is logged as its commands: {entries:?}");
    let Reply::Array(newest) = c.cmd(&["SLOWLOG", "GET", "1"]) else { panic!() };
    let Reply::Array(fields) = &newest[0] else { panic!() };
    assert!(matches!(&fields[4], Reply::Bulk(peer) if peer.starts_with(b"127.0.0.1:")), "{fields:?}");
    assert_eq!(c.cmd(&["SLOWLOG", "GET", "-2"]), Reply::Error("ERR count should be greater than or equal to -1".into()));
    assert_eq!(c.cmd(&["CONFIG", "SET", "slowlog-max-len", "2"]), Reply::Status("OK".into()));
    assert_eq!(c.cmd(&["SLOWLOG", "LEN"]), Reply::Int(2), "a smaller limit trims at once");
    assert_eq!(c.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "-1"]), Reply::Status("OK".into()));
    assert_eq!(c.cmd(&["SLOWLOG", "RESET"]), Reply::Status("OK".into()));
    c.cmd(&["SET", "k", "v"]);
    assert_eq!(c.cmd(&["SLOWLOG", "LEN"]), Reply::Int(0), "a negative threshold turns the log off");
    assert!(matches!(c.cmd(&["SLOWLOG", "NOPE"]), Reply::Error(e) if e.contains("unknown subcommand")));
}

#[test]
fn looking_at_a_key_does_not_use_it() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["SET", "k", "v"]);
    std::thread::sleep(Duration::from_millis(2100));
    for look in [&["TTL", "k"][..], &["PTTL", "k"], &["TYPE", "k"], &["EXISTS", "k"], &["OBJECT", "IDLETIME", "k"]] {
        c.cmd(look);
    }
    let Reply::Int(idle) = c.cmd(&["OBJECT", "IDLETIME", "k"]) else { panic!() };
    assert!(idle >= 2, "TTL, TYPE, EXISTS and OBJECT leave the access time alone: idle {idle}");
    assert_eq!(c.cmd(&["TOUCH", "k", "missing"]), Reply::Int(1));
    assert_eq!(c.cmd(&["OBJECT", "IDLETIME", "k"]), Reply::Int(0), "TOUCH uses the key");
}

/// The next MONITOR line, without its timestamp.
fn shown(monitor: &mut support::Conn) -> String {
    match monitor.read() {
        Some(Reply::Status(line)) => line.split_once(' ').map(|(_, rest)| rest.to_string()).unwrap_or(line),
        other => panic!("expected a MONITOR line, got {other:?}"),
    }
}

#[test]
fn monitor_shows_commands_in_the_order_they_ran() {
    let server = Server::start(&[]);
    let mut monitor = server.connect();
    assert_eq!(monitor.cmd(&["MONITOR"]), Reply::Status("OK".into()));
    let mut c = server.connect();
    let Reply::Bulk(me) = c.cmd(&["CLIENT", "INFO"]) else { panic!() };
    let addr = String::from_utf8_lossy(&me).split_whitespace().find_map(|f| f.strip_prefix("addr=")).unwrap().to_string();
    c.cmd(&["SET", "k", "a \"quoted\"\nvalue"]);
    c.cmd(&["CONFIG", "GET", "maxmemory"]); // admin: not shown
    c.cmd(&["MULTI"]);
    c.cmd(&["INCR", "n"]);
    c.cmd(&["EXEC"]);
    c.cmd(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]);
    c.cmd(&["AUTH", "not-a-password"]);
    c.cmd(&["SELECT", "3"]);
    c.cmd(&["GET", "x"]);
    let expected = [
        format!(r#"[0 {addr}] "CLIENT" "INFO""#),
        format!(r#"[0 {addr}] "SET" "k" "a \"quoted\"\nvalue""#),
        format!(r#"[0 {addr}] "MULTI""#),
        format!(r#"[0 {addr}] "INCR" "n""#),
        format!(r#"[0 {addr}] "EXEC""#),
        format!(r#"[0 {addr}] "EVAL" "return redis.call('get', KEYS[1])" "1" "k""#),
        r#"[0 lua] "get" "k""#.to_string(),
        format!(r#"[0 {addr}] "AUTH" "(redacted)""#),
        format!(r#"[3 {addr}] "SELECT" "3""#),
        format!(r#"[3 {addr}] "GET" "x""#),
    ];
    for line in expected {
        assert_eq!(shown(&mut monitor), line);
    }
    assert_eq!(monitor.cmd(&["RESET"]), Reply::Status("RESET".into()));
    c.cmd(&["SET", "after", "reset"]);
    assert_eq!(monitor.cmd(&["PING"]), Reply::Status("PONG".into()), "no MONITOR line after RESET");
}

#[test]
fn latency_monitor_and_histograms() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["LATENCY", "LATEST"]), Reply::Array(vec![]), "off by default");
    assert!(matches!(c.cmd(&["LATENCY", "DOCTOR"]), Reply::Bulk(text) if String::from_utf8_lossy(&text).contains("latency-monitor-threshold")));
    // A script that spins for ~30 ms is a slow command the monitor records at a 10 ms threshold.
    c.cmd(&["CONFIG", "SET", "latency-monitor-threshold", "10"]);
    c.cmd(&["CONFIG", "SET", "busy-reply-threshold", "0"]);
    let spin = "local t = redis.call('time'); local start = t[1] * 1000000 + t[2]; repeat t = redis.call('time') until t[1] * 1000000 + t[2] - start > 30000; return 1";
    assert_eq!(c.cmd(&["EVAL", spin, "0"]), Reply::Int(1));
    let Reply::Array(latest) = c.cmd(&["LATENCY", "LATEST"]) else { panic!() };
    let Reply::Array(event) = &latest[0] else { panic!("{latest:?}") };
    assert_eq!(event[0], Reply::Bulk(b"command".to_vec()));
    assert!(matches!(event[2], Reply::Int(ms) if ms >= 30), "{event:?}");
    let Reply::Array(history) = c.cmd(&["LATENCY", "HISTORY", "command"]) else { panic!() };
    assert_eq!(history.len(), 1);
    assert!(matches!(c.cmd(&["LATENCY", "GRAPH", "command"]), Reply::Bulk(g) if g.starts_with(b"command - high")));
    assert_eq!(c.cmd(&["LATENCY", "GRAPH", "nothing"]), Reply::Error("ERR No samples available for event 'nothing'".into()));
    assert_eq!(c.cmd(&["LATENCY", "RESET"]), Reply::Int(1));
    assert_eq!(c.cmd(&["LATENCY", "LATEST"]), Reply::Array(vec![]));

    c.cmd(&["CONFIG", "RESETSTAT"]);
    c.cmd(&["SET", "a", "1"]);
    c.cmd(&["SET", "b", "2"]);
    c.cmd(&["GET", "a"]);
    let Reply::Array(histograms) = c.cmd(&["LATENCY", "HISTOGRAM", "set", "nope", "get", "zadd"]) else { panic!() };
    assert_eq!(histograms.len(), 4, "set and get, each with its histogram; unknown and unused names skipped: {histograms:?}");
    assert_eq!(histograms[0], Reply::Bulk(b"set".to_vec()));
    let Reply::Array(set) = &histograms[1] else { panic!() };
    assert_eq!(set[..2], [Reply::Bulk(b"calls".to_vec()), Reply::Int(2)]);
    let Reply::Array(cdf) = &set[3] else { panic!("{set:?}") };
    assert_eq!(cdf.last(), Some(&Reply::Int(2)), "the cumulative count reaches the calls: {cdf:?}");
}

/// The names of a `LATENCY HISTOGRAM` reply (a map read as name, histogram, name, ...).
fn histogram_names(reply: Reply) -> Vec<String> {
    let Reply::Array(items) = reply else { panic!("{reply:?}") };
    items.iter().step_by(2).map(Reply::text).collect()
}

#[test]
fn subcommands_are_counted_under_their_full_names() {
    // As Redis 7: `CLIENT ID` counts as `client|id` in LATENCY HISTOGRAM and INFO
    // commandstats; a container's name gives its subcommands, `parent|sub` just that one.
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["CONFIG", "RESETSTAT"]);
    assert_eq!(histogram_names(c.cmd(&["LATENCY", "HISTOGRAM"])), ["config|resetstat"], "RESETSTAT counts itself after resetting");
    c.cmd(&["CLIENT", "ID"]);
    c.cmd(&["client", "LIST"]);
    c.cmd(&["CLIENT", "ID"]);
    let mut names = histogram_names(c.cmd(&["LATENCY", "HISTOGRAM", "client"]));
    names.sort();
    assert_eq!(names, ["client|id", "client|list"]);
    let Reply::Array(one) = c.cmd(&["LATENCY", "HISTOGRAM", "CLIENT|ID", "client|nope", "nope|id"]) else { panic!() };
    assert_eq!(one[0], Reply::Bulk(b"client|id".to_vec()));
    let Reply::Array(h) = &one[1] else { panic!("{one:?}") };
    assert_eq!(h[..2], [Reply::Bulk(b"calls".to_vec()), Reply::Int(2)]);
    assert_eq!(one.len(), 2, "unknown names are skipped: {one:?}");
    let stats = c.cmd(&["INFO", "commandstats"]).text();
    assert!(stats.contains("cmdstat_client|id:calls=2,"), "{stats}");
    assert!(stats.contains("cmdstat_client|list:calls=1,"), "{stats}");
    assert!(!stats.contains("cmdstat_client:"), "nothing ran as the bare container: {stats}");
    // An unknown subcommand is the container's own failed call.
    assert!(c.cmd(&["CLIENT", "NOPE"]).is_error());
    let stats = c.cmd(&["INFO", "commandstats"]).text();
    assert!(stats.contains("cmdstat_client:calls=1,") && stats.contains("failed_calls=1"), "{stats}");
}

#[test]
fn an_expiry_pass_is_in_latency_latest_when_its_key_is_gone() {
    // unit/latency-monitor's "LATENCY of expire events are correctly collected": once DBSIZE
    // says the big key is gone, LATENCY LATEST already has the pass that deleted it (the
    // sample is recorded before the pass releases the key's shard, and DBSIZE counts the key
    // until it is deleted, as Redis's does).
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["CONFIG", "SET", "latency-monitor-threshold", "1"]);
    for round in 0..3 {
        c.cmd(&["LATENCY", "RESET"]);
        let fill = "for i = 1, tonumber(ARGV[1]) do redis.call('sadd', KEYS[1], i) end return 1";
        assert_eq!(c.cmd(&["EVAL", fill, "1", "big", "300000"]), Reply::Int(1));
        assert_eq!(c.cmd(&["PEXPIRE", "big", "20"]), Reply::Int(1));
        std::thread::sleep(Duration::from_millis(30));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while c.cmd(&["DBSIZE"]) != Reply::Int(0) {
            assert!(std::time::Instant::now() < deadline, "the key never expired");
            std::thread::sleep(Duration::from_millis(1));
        }
        let Reply::Array(latest) = c.cmd(&["LATENCY", "LATEST"]) else { panic!() };
        let events: Vec<String> = latest.iter().map(|e| e.texts()[0].clone()).collect();
        assert!(events.iter().any(|e| e == "expire-cycle"), "round {round}: {events:?}");
    }
}

/// A `CLIENT INFO` field.
fn client_field(c: &mut support::Conn, field: &str) -> String {
    let info = c.cmd(&["CLIENT", "INFO"]).text();
    let prefix = format!("{field}=");
    info.split_whitespace().find_map(|f| f.strip_prefix(prefix.as_str())).map(str::to_string).unwrap_or_else(|| panic!("no {field} in {info}"))
}

#[test]
fn client_list_idle_counts_from_the_last_request() {
    // `idle=` is the seconds since the connection last read a request, as Redis's
    // `lastinteraction`; another client's requests do not reset it.
    let server = Server::start(&[]);
    let mut quiet = server.connect();
    let Reply::Int(quiet_id) = quiet.cmd(&["CLIENT", "ID"]) else { panic!() };
    let mut busy = server.connect();
    let idle_of = |busy: &mut support::Conn, id: i64| -> u64 {
        let list = busy.cmd(&["CLIENT", "LIST", "ID", &id.to_string()]).text();
        let field = list.split_whitespace().find_map(|f| f.strip_prefix("idle=")).unwrap_or_else(|| panic!("no idle in {list}"));
        field.parse().unwrap()
    };
    let silent_since = std::time::Instant::now();
    assert_eq!(idle_of(&mut busy, quiet_id), 0);
    for _ in 0..11 {
        std::thread::sleep(Duration::from_millis(200));
        busy.cmd(&["PING"]);
    }
    let idle = idle_of(&mut busy, quiet_id);
    let silence = silent_since.elapsed().as_secs();
    assert!(idle >= 2 && idle <= silence + 1, "idle={idle} after {silence} s of silence (at least 2.2 s)");
    assert_eq!(client_field(&mut busy, "idle"), "0", "a client's own request resets its idle time");
    quiet.cmd(&["PING"]);
    assert_eq!(idle_of(&mut busy, quiet_id), 0);
}

#[test]
fn client_no_touch_leaves_access_times_alone_but_touch_uses_them() {
    // CLIENT NO-TOUCH as Redis 7.2: the client's reads (plain, in a transaction, in a script)
    // do not update a key's access time; TOUCH still does; OFF restores it. The flags show
    // `T` and `e` (NO-EVICT).
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["SET", "k", "v"]);
    c.cmd(&["SET", "t", "v"]);
    assert_eq!(client_field(&mut c, "flags"), "N");
    assert_eq!(c.cmd(&["CLIENT", "NO-TOUCH", "on"]), Reply::Status("OK".into()));
    assert_eq!(c.cmd(&["CLIENT", "NO-EVICT", "ON"]), Reply::Status("OK".into()));
    assert_eq!(client_field(&mut c, "flags"), "eT");
    assert_eq!(c.cmd(&["CLIENT", "NO-TOUCH", "maybe"]), Reply::Error("ERR syntax error".into()));
    std::thread::sleep(Duration::from_millis(2100));
    c.cmd(&["GET", "k"]);
    c.cmd(&["MULTI"]);
    c.cmd(&["GET", "k"]);
    c.cmd(&["EXEC"]);
    c.cmd(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]);
    assert_eq!(c.cmd(&["TOUCH", "t"]), Reply::Int(1));
    let Reply::Int(idle) = c.cmd(&["OBJECT", "IDLETIME", "k"]) else { panic!() };
    assert!(idle >= 2, "a NO-TOUCH client's reads leave the access time alone: idle {idle}");
    assert_eq!(c.cmd(&["OBJECT", "IDLETIME", "t"]), Reply::Int(0), "TOUCH still touches");
    c.cmd(&["CLIENT", "NO-TOUCH", "OFF"]);
    c.cmd(&["CLIENT", "NO-EVICT", "off"]);
    assert_eq!(client_field(&mut c, "flags"), "N");
    c.cmd(&["GET", "k"]);
    assert_eq!(c.cmd(&["OBJECT", "IDLETIME", "k"]), Reply::Int(0));
}

#[test]
fn client_list_shows_tracking_flags_and_redirect() {
    // `t` tracking, `B` BCAST, `R` a redirect target that went away; redir= its id.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(client_field(&mut c, "redir"), "-1");
    c.cmd(&["CLIENT", "TRACKING", "ON", "BCAST"]);
    assert_eq!(client_field(&mut c, "flags"), "tB");
    assert_eq!(client_field(&mut c, "redir"), "0");
    let mut target = server.connect();
    let Reply::Int(target_id) = target.cmd(&["CLIENT", "ID"]) else { panic!() };
    let mut redirected = server.connect();
    redirected.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", &target_id.to_string()]);
    redirected.cmd(&["GET", "k"]);
    assert_eq!(client_field(&mut redirected, "flags"), "t");
    assert_eq!(client_field(&mut redirected, "redir"), target_id.to_string());
    target.cmd(&["QUIT"]);
    c.cmd(&["SET", "k", "v"]);
    assert_eq!(client_field(&mut redirected, "flags"), "tR", "the invalidation found its target gone");
    let list = c.cmd(&["CLIENT", "LIST"]).text();
    assert!(list.lines().any(|l| l.contains(" flags=tR ")), "{list}");
}

#[test]
fn shutdown_checks_its_arguments_as_redis() {
    // Redis 7.0's checks: an unknown argument, SAVE with NOSAVE, ABORT with anything else are
    // syntax errors; ABORT alone has no shutdown to abort; while a script is busy only
    // SHUTDOWN NOSAVE stops the node.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let syntax = Reply::Error("ERR syntax error".into());
    for args in [
        &["SHUTDOWN", "NOPE"][..],
        &["SHUTDOWN", "SAVE", "NOSAVE"],
        &["SHUTDOWN", "ABORT", "NOW"],
        &["SHUTDOWN", "NOSAVE", "ABORT"],
        &["SHUTDOWN", "FORCE", "ABORT"],
    ] {
        assert_eq!(c.cmd(args), syntax, "{args:?}");
    }
    assert_eq!(c.cmd(&["SHUTDOWN", "ABORT"]), Reply::Error("ERR No shutdown in progress.".into()));
    c.cmd(&["MULTI"]);
    assert_eq!(c.cmd(&["SHUTDOWN"]), Reply::Error("ERR Command not allowed inside a transaction".into()));
    c.cmd(&["DISCARD"]);
    assert!(c.cmd(&["EVAL", "return redis.call('shutdown')", "0"]).is_error(), "not from a script");
    c.cmd(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
    let mut busy = server.connect();
    busy.send(&["EVAL", "local t = redis.call('time'); local start = t[1]; repeat t = redis.call('time') until t[1] - start > 3; return 1", "0"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(matches!(c.cmd(&["SHUTDOWN"]), Reply::Error(e) if e.starts_with("BUSY")), "a busy script keeps the node up without NOSAVE");
    assert!(matches!(c.cmd(&["SHUTDOWN", "SAVE"]), Reply::Error(e) if e.starts_with("BUSY")));
    assert_eq!(c.cmd(&["SHUTDOWN", "NOSAVE"]), Reply::Status("OK".into()));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", server.port)).is_ok() {
        assert!(std::time::Instant::now() < deadline, "the node did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn client_pause_write_holds_writes_and_lets_reads_through() {
    // As Redis 7.0's unit/pause: WRITE holds writes, PUBLISH, PFCOUNT, scripts that may write
    // and an EXEC of a write (replies come once the pause ends, nothing is refused); reads,
    // read-only scripts and errors are answered at once; UNPAUSE or the timeout ends it.
    let server = Server::start(&[]);
    let mut admin = server.connect();
    let mut reader = server.connect();
    admin.cmd(&["PFADD", "hll", "a"]);
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "100000", "WRITE"]), Reply::Status("OK".into()));
    assert_eq!(reader.cmd(&["GET", "k"]), Reply::Nil);
    assert_eq!(reader.cmd(&["EVAL", "#!lua flags=no-writes\nreturn redis.call('get', 'hll') and 1 or 0", "0"]), Reply::Int(1));
    assert_eq!(reader.cmd(&["EVAL_RO", "return 2", "0"]), Reply::Int(2));
    assert_eq!(reader.cmd(&["SET", "k"]), Reply::Error("ERR wrong number of arguments for 'set' command".into()));
    reader.cmd(&["MULTI"]);
    reader.cmd(&["GET", "k"]);
    assert_eq!(reader.cmd(&["EXEC"]), Reply::Array(vec![Reply::Nil]), "a read-only transaction runs");
    let mut held: Vec<(support::Conn, &[&str], Reply)> = Vec::new();
    let writes: [(&[&str], Reply); 5] = [
        (&["SET", "k", "v"], Reply::Status("OK".into())),
        (&["PUBLISH", "ch", "m"], Reply::Int(0)),
        (&["PFCOUNT", "hll"], Reply::Int(1)),
        (&["EVAL", "return 3", "0"], Reply::Int(3)),
        (&["INCR", "n"], Reply::Int(1)),
    ];
    for (i, (command, reply)) in writes.into_iter().enumerate() {
        let mut c = server.connect();
        c.send(command);
        wait_blocked(&mut admin, i + 1);
        held.push((c, command, reply));
    }
    let mut tx = server.connect();
    tx.cmd(&["MULTI"]);
    assert_eq!(tx.cmd(&["GET", "k"]), Reply::Status("QUEUED".into()));
    tx.send(&["SET", "k2", "v2"]);
    wait_blocked(&mut admin, 6);
    assert_eq!(reader.cmd(&["GET", "k"]), Reply::Nil, "held writes have not run");
    let list = admin.cmd(&["CLIENT", "LIST"]).text();
    let blocked = list.lines().filter(|l| l.split_whitespace().any(|f| f.starts_with("flags=") && f.contains('b'))).count();
    assert_eq!(blocked, 6, "held clients show flag b: {list}");
    assert_eq!(admin.cmd(&["CLIENT", "UNPAUSE"]), Reply::Status("OK".into()));
    for (mut c, command, reply) in held {
        assert_eq!(c.read(), Some(reply), "{command:?}");
    }
    assert_eq!(tx.read(), Some(Reply::Status("QUEUED".into())));
    assert_eq!(tx.cmd(&["EXEC"]), Reply::Array(vec![Reply::Bulk(b"v".to_vec()), Reply::Status("OK".into())]));
    assert_eq!(blocked_clients(&mut admin), 0);

    // ALL holds reads too, until the timeout.
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "300"]), Reply::Status("OK".into()));
    let started = std::time::Instant::now();
    assert_eq!(reader.cmd(&["GET", "k"]), Reply::Bulk(b"v".to_vec()));
    assert!(started.elapsed() >= Duration::from_millis(250), "the read waited for the pause: {:?}", started.elapsed());
    // A shorter pause does not shorten a longer one.
    let started = std::time::Instant::now();
    admin.cmd(&["CLIENT", "PAUSE", "400", "WRITE"]);
    admin.cmd(&["CLIENT", "PAUSE", "10", "WRITE"]);
    assert_eq!(reader.cmd(&["SET", "k", "w"]), Reply::Status("OK".into()));
    assert!(started.elapsed() >= Duration::from_millis(350), "the longer pause held it: {:?}", started.elapsed());
    for (args, error) in [
        (&["CLIENT", "PAUSE", "10", "NOPE"][..], "ERR CLIENT PAUSE mode must be WRITE or ALL"),
        (&["CLIENT", "PAUSE", "-1"], "ERR timeout is negative"),
        (&["CLIENT", "PAUSE", "soon"], "ERR timeout is not an integer or out of range"),
    ] {
        assert_eq!(admin.cmd(args), Reply::Error(error.into()), "{args:?}");
    }
    assert!(reader.cmd(&["EVAL_RO", "return redis.call('publish', 'ch', 'm')", "0"]).is_error(), "PUBLISH counts as a write in a read-only script");
}

/// A RESP2 map reply as (name, reply) pairs.
fn pairs(reply: Reply) -> Vec<(String, Reply)> {
    let Reply::Array(items) = reply else { panic!("{reply:?}") };
    items.chunks(2).map(|p| (p[0].text(), p[1].clone())).collect()
}

#[test]
fn memory_stats_doctor_purge_and_help() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let fill = "for i = 1, 20000 do redis.call('set', 'key:' .. i, string.rep('x', 100)) end return 1";
    assert_eq!(c.cmd(&["EVAL", fill, "0"]), Reply::Int(1));
    let stats = pairs(c.cmd(&["MEMORY", "STATS"]));
    let int = |name: &str| match stats.iter().find(|(n, _)| n == name) {
        Some((_, Reply::Int(v))) => *v,
        other => panic!("{name}: {other:?} in {stats:?}"),
    };
    let double = |name: &str| match stats.iter().find(|(n, _)| n == name) {
        Some((_, Reply::Bulk(v))) => String::from_utf8_lossy(v).parse::<f64>().unwrap(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(int("keys.count"), 20000);
    let (total, startup, peak) = (int("total.allocated"), int("startup.allocated"), int("peak.allocated"));
    assert!(startup > 0 && total > startup && peak >= total, "{stats:?}");
    assert!(int("dataset.bytes") > 20000 * 100, "the values alone are 2 MB: {stats:?}");
    assert_eq!(int("overhead.total") + int("dataset.bytes"), total);
    assert!(int("keys.bytes-per-key") >= 100);
    assert!((0.0..=100.0).contains(&double("dataset.percentage")));
    assert!(double("allocator-fragmentation.ratio") >= 1.0);
    assert_eq!(int("allocator.allocated"), total);
    assert!(double("fragmentation") > 0.0);
    let doctor = c.cmd(&["MEMORY", "DOCTOR"]).text();
    assert!(!doctor.is_empty(), "{doctor}");
    let malloc = c.cmd(&["MEMORY", "MALLOC-STATS"]).text();
    assert!(malloc.contains("jemalloc"), "{malloc}");
    assert_eq!(c.cmd(&["MEMORY", "PURGE"]), Reply::Status("OK".into()));
    assert!(c.cmd(&["MEMORY", "HELP"]).texts().iter().any(|l| l == "PURGE"));
    assert_eq!(c.cmd(&["MEMORY", "STATS", "x"]), Reply::Error("ERR wrong number of arguments for 'memory|stats' command".into()));
    assert!(matches!(c.cmd(&["MEMORY", "USAGE", "key:1", "SAMPLES", "5"]), Reply::Int(n) if n > 100));
    assert_eq!(c.cmd(&["MEMORY", "USAGE", "key:1", "SAMPLES", "-1"]), Reply::Error("ERR syntax error".into()));
    assert_eq!(c.cmd(&["MEMORY", "USAGE", "key:1", "NOPE"]), Reply::Error("ERR syntax error".into()));
    assert!(matches!(c.cmd(&["MEMORY", "NOPE"]), Reply::Error(e) if e.contains("unknown subcommand")));
}
