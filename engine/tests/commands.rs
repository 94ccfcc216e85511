//! Black-box tests of every command family over TCP: one test per family, each checking the
//! replies Redis gives (the Redis Tcl suite, run by scripts/test.sh, covers them in depth).

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::{wait_blocked, Conn, Reply, Server};

fn int(n: i64) -> Reply {
    Reply::Int(n)
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

fn ok() -> Reply {
    Reply::Status("OK".into())
}

#[test]
fn strings_and_counters() {
    // SET options, counters, ranges and their errors behave as in Redis.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["SET", "s", "hello"]), ok());
    assert_eq!(c.cmd(&["SET", "s", "x", "NX"]), Reply::Nil);
    assert_eq!(c.cmd(&["SET", "s", "world", "XX", "GET"]), bulk("hello"));
    assert_eq!(c.cmd(&["APPEND", "s", "!"]), int(6));
    assert_eq!(c.cmd(&["GETRANGE", "s", "0", "-2"]), bulk("world"));
    assert_eq!(c.cmd(&["SETRANGE", "s", "0", "W"]), int(6));
    assert_eq!(c.cmd(&["STRLEN", "s"]), int(6));
    assert_eq!(c.cmd(&["INCR", "n"]), int(1));
    assert_eq!(c.cmd(&["INCRBY", "n", "41"]), int(42));
    assert_eq!(c.cmd(&["DECRBY", "n", "2"]), int(40));
    assert_eq!(c.cmd(&["INCRBYFLOAT", "n", "0.5"]), bulk("40.5"));
    assert_eq!(c.cmd(&["INCR", "s"]), Reply::Error("ERR value is not an integer or out of range".into()));
    assert_eq!(c.cmd(&["SET", "max", "9223372036854775807"]), ok());
    assert_eq!(c.cmd(&["INCR", "max"]), Reply::Error("ERR increment or decrement would overflow".into()));
    assert_eq!(c.cmd(&["MSET", "a", "1", "b", "2"]), ok());
    assert_eq!(c.cmd(&["MGET", "a", "b", "nope"]), Reply::Array(vec![bulk("1"), bulk("2"), Reply::Nil]));
    assert_eq!(c.cmd(&["MSETNX", "a", "9", "c", "3"]), int(0));
    assert_eq!(c.cmd(&["GETDEL", "a"]), bulk("1"));
    assert_eq!(c.cmd(&["GETSET", "b", "20"]), bulk("2"));
    assert_eq!(c.cmd(&["LCS", "s", "b"]), bulk(""));
    assert_eq!(c.cmd(&["HSET", "h", "f", "v"]), int(1));
    assert_eq!(c.cmd(&["GET", "h"]), Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into()));
}

#[test]
fn keys_expiry_and_iteration() {
    // TTLs, EXPIRE options, RENAME/COPY/MOVE and SCAN.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["SET", "k", "v", "PX", "100000"]), ok());
    assert!(matches!(c.cmd(&["PTTL", "k"]), Reply::Int(n) if n > 99_000 && n <= 100_000));
    assert_eq!(c.cmd(&["EXPIRE", "k", "50", "GT"]), int(0));
    assert_eq!(c.cmd(&["EXPIRE", "k", "50", "LT"]), int(1));
    assert_eq!(c.cmd(&["TTL", "k"]), int(50));
    assert_eq!(c.cmd(&["PERSIST", "k"]), int(1));
    assert_eq!(c.cmd(&["TTL", "k"]), int(-1));
    assert_eq!(c.cmd(&["TTL", "missing"]), int(-2));
    assert_eq!(c.cmd(&["SET", "short", "v", "PX", "50"]), ok());
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(c.cmd(&["EXISTS", "short"]), int(0));
    assert_eq!(c.cmd(&["RENAME", "k", "k2"]), ok());
    assert_eq!(c.cmd(&["RENAME", "nope", "x"]), Reply::Error("ERR no such key".into()));
    assert_eq!(c.cmd(&["COPY", "k2", "k3", "DB", "1"]), int(1));
    assert_eq!(c.cmd(&["MOVE", "k2", "2"]), int(1));
    assert_eq!(c.cmd(&["TYPE", "k2"]), Reply::Status("none".into()));
    assert_eq!(c.cmd(&["SELECT", "2"]), ok());
    assert_eq!(c.cmd(&["GET", "k2"]), bulk("v"));
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    for i in 0..500 {
        c.cmd(&["SET", &format!("scan:{i}"), "x"]);
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = "0".to_string();
    loop {
        let reply = c.cmd(&["SCAN", &cursor, "MATCH", "scan:*", "COUNT", "20"]);
        let Reply::Array(parts) = reply else { panic!("SCAN reply {reply:?}") };
        cursor = parts[0].text();
        seen.extend(parts[1].texts());
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 500);
    assert_eq!(c.cmd(&["KEYS", "scan:49?"]).texts().len(), 10);
    assert!(matches!(c.cmd(&["RANDOMKEY"]), Reply::Bulk(_)));
    assert_eq!(c.cmd(&["DEL", "scan:1", "scan:2", "nope"]), int(2));
}

#[test]
fn hashes_sets_sorted_sets_and_lists() {
    // One round trip through each collection family.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["HSET", "h", "a", "1", "b", "2"]), int(2));
    assert_eq!(c.cmd(&["HINCRBY", "h", "a", "5"]), int(6));
    assert_eq!(c.cmd(&["HMGET", "h", "a", "x"]), Reply::Array(vec![bulk("6"), Reply::Nil]));
    assert_eq!(c.cmd(&["HDEL", "h", "a", "b"]), int(2));
    assert_eq!(c.cmd(&["EXISTS", "h"]), int(0), "an emptied hash is deleted");

    assert_eq!(c.cmd(&["SADD", "s1", "a", "b", "c"]), int(3));
    assert_eq!(c.cmd(&["SADD", "s2", "b", "c", "d"]), int(3));
    let mut inter = c.cmd(&["SINTER", "s1", "s2"]).texts();
    inter.sort();
    assert_eq!(inter, vec!["b", "c"]);
    assert_eq!(c.cmd(&["SUNIONSTORE", "s3", "s1", "s2"]), int(4));
    assert_eq!(c.cmd(&["SINTERCARD", "2", "s1", "s2", "LIMIT", "1"]), int(1));
    assert_eq!(c.cmd(&["SISMEMBER", "s3", "d"]), int(1));

    assert_eq!(c.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]), int(3));
    assert_eq!(c.cmd(&["ZADD", "z", "GT", "CH", "0", "a", "5", "b"]), int(1));
    assert_eq!(c.cmd(&["ZRANGE", "z", "0", "-1"]).texts(), vec!["a", "c", "b"]);
    assert_eq!(c.cmd(&["ZRANGE", "z", "(1", "+inf", "BYSCORE", "LIMIT", "0", "1"]).texts(), vec!["c"]);
    assert_eq!(c.cmd(&["ZSCORE", "z", "b"]), bulk("5"));
    assert_eq!(c.cmd(&["ZRANK", "z", "b"]), int(2));
    assert_eq!(c.cmd(&["ZPOPMIN", "z"]).texts(), vec!["a", "1"]);

    assert_eq!(c.cmd(&["RPUSH", "l", "a", "b", "c", "b"]), int(4));
    assert_eq!(c.cmd(&["LPOS", "l", "b", "RANK", "2"]), int(3));
    assert_eq!(c.cmd(&["LINSERT", "l", "BEFORE", "c", "x"]), int(5));
    assert_eq!(c.cmd(&["LRANGE", "l", "0", "-1"]).texts(), vec!["a", "b", "x", "c", "b"]);
    assert_eq!(c.cmd(&["LMOVE", "l", "l2", "LEFT", "RIGHT"]), bulk("a"));
    assert_eq!(c.cmd(&["LTRIM", "l", "1", "-1"]), ok());
    assert_eq!(c.cmd(&["LLEN", "l"]), int(3));
}

#[test]
fn transactions_are_atomic_and_honour_watch() {
    // MULTI/EXEC queues and runs; a write to a watched key aborts EXEC.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let mut other = server.connect();
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["SET", "a", "1"]), Reply::Status("QUEUED".into()));
    assert_eq!(c.cmd(&["INCR", "a"]), Reply::Status("QUEUED".into()));
    assert_eq!(c.cmd(&["EXEC"]), Reply::Array(vec![ok(), int(2)]));
    assert_eq!(c.cmd(&["WATCH", "a"]), ok());
    assert_eq!(other.cmd(&["SET", "a", "changed"]), ok());
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["SET", "a", "mine"]), Reply::Status("QUEUED".into()));
    assert_eq!(c.cmd(&["EXEC"]), Reply::Nil);
    assert_eq!(c.cmd(&["GET", "a"]), bulk("changed"));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert!(c.cmd(&["NOSUCHCOMMAND"]).is_error());
    assert!(c.cmd(&["EXEC"]).text().starts_with("EXECABORT"));
    assert_eq!(c.cmd(&["EXEC"]), Reply::Error("ERR EXEC without MULTI".into()));
}

#[test]
fn pubsub_delivers_to_channels_and_patterns_in_resp2_and_resp3() {
    // Messages reach channel and pattern subscribers; RESP3 uses push frames.
    let server = Server::start(&[]);
    let mut sub = server.connect();
    let mut sub3 = server.connect();
    let mut publisher = server.connect();
    assert_eq!(sub.cmd(&["SUBSCRIBE", "news"]), Reply::Array(vec![bulk("subscribe"), bulk("news"), int(1)]));
    assert!(matches!(sub3.cmd(&["HELLO", "3"]), Reply::Map(_)));
    assert_eq!(sub3.cmd(&["PSUBSCRIBE", "ne*"]), Reply::Push(vec![bulk("psubscribe"), bulk("ne*"), int(1)]));
    assert_eq!(publisher.cmd(&["PUBLISH", "news", "hi"]), int(2));
    assert_eq!(sub.read(), Some(Reply::Array(vec![bulk("message"), bulk("news"), bulk("hi")])));
    assert_eq!(sub3.read(), Some(Reply::Push(vec![bulk("pmessage"), bulk("ne*"), bulk("news"), bulk("hi")])));
    assert!(sub.cmd(&["GET", "x"]).text().starts_with("ERR Can't execute 'get'"));
    assert_eq!(sub3.cmd(&["GET", "x"]), Reply::Nil, "RESP3 clients may run commands while subscribed");
    assert_eq!(publisher.cmd(&["PUBSUB", "NUMSUB", "news"]), Reply::Array(vec![bulk("news"), int(1)]));
    assert_eq!(publisher.cmd(&["PUBSUB", "NUMPAT"]), int(1));
}

#[test]
fn blocking_pops_wake_in_order_and_time_out() {
    // BLPOP waits for a push, serves clients first-come first-served, and times out with nil.
    let server = Server::start(&[]);
    let mut first = server.connect();
    let mut second = server.connect();
    let mut pusher = server.connect();
    first.send(&["BLPOP", "q", "0"]);
    wait_blocked(&mut pusher, 1);
    second.send(&["BLPOP", "q", "0"]);
    wait_blocked(&mut pusher, 2);
    assert_eq!(pusher.cmd(&["RPUSH", "q", "a", "b"]), int(2));
    assert_eq!(first.read(), Some(Reply::Array(vec![bulk("q"), bulk("a")])));
    assert_eq!(second.read(), Some(Reply::Array(vec![bulk("q"), bulk("b")])));
    assert_eq!(pusher.cmd(&["BLPOP", "q", "0.1"]), Reply::Nil);
    first.send(&["BLMOVE", "src", "dst", "LEFT", "RIGHT", "0"]);
    wait_blocked(&mut pusher, 1);
    assert_eq!(pusher.cmd(&["LPUSH", "src", "x"]), int(1));
    assert_eq!(first.read(), Some(bulk("x")));
    assert_eq!(pusher.cmd(&["LRANGE", "dst", "0", "-1"]), Reply::Array(vec![bulk("x")]));
    // A blocked client that disconnects stops waiting: the next push is not popped for it.
    let mut quitter = server.connect();
    quitter.send(&["BLPOP", "gone", "0"]);
    wait_blocked(&mut pusher, 1);
    drop(quitter);
    wait_blocked(&mut pusher, 0);
    assert_eq!(pusher.cmd(&["RPUSH", "gone", "kept"]), int(1));
    assert_eq!(pusher.cmd(&["LRANGE", "gone", "0", "-1"]), Reply::Array(vec![bulk("kept")]));
    second.send(&["BZPOPMIN", "zq", "0"]);
    wait_blocked(&mut pusher, 1);
    assert_eq!(pusher.cmd(&["ZADD", "zq", "1", "m"]), int(1));
    assert_eq!(second.read(), Some(Reply::Array(vec![bulk("zq"), bulk("m"), bulk("1")])));
}

#[test]
fn a_blocked_move_refused_by_its_target_leaves_the_element_for_the_next_client() {
    // Redis's "BRPOPLPUSH with multiple blocked clients", with the order made explicit: the
    // first client to block is served first; its target holds a string, so it gets WRONGTYPE
    // and pops nothing, and the element goes to the second client.
    let server = Server::start(&[]);
    let mut first = server.connect();
    let mut second = server.connect();
    let mut pusher = server.connect();
    assert_eq!(pusher.cmd(&["SET", "target1", "nolist"]).text(), "OK");
    first.send(&["BRPOPLPUSH", "blist", "target1", "0"]);
    wait_blocked(&mut pusher, 1);
    second.send(&["BRPOPLPUSH", "blist", "target2", "0"]);
    wait_blocked(&mut pusher, 2);
    assert_eq!(pusher.cmd(&["LPUSH", "blist", "foo"]), int(1));
    assert!(matches!(first.read(), Some(Reply::Error(e)) if e.starts_with("WRONGTYPE")));
    assert_eq!(second.read(), Some(bulk("foo")));
    assert_eq!(pusher.cmd(&["LRANGE", "target2", "0", "-1"]), Reply::Array(vec![bulk("foo")]));
    assert_eq!(pusher.cmd(&["EXISTS", "blist"]), int(0));
    assert_eq!(pusher.cmd(&["GET", "target1"]), bulk("nolist"));
}

#[test]
fn connection_handshake_auth_and_client_commands() {
    // HELLO, AUTH, CLIENT SETNAME/GETNAME/ID/LIST/KILL behave as Redis's.
    let server = Server::start(&["--requirepass", "s3cret"]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["GET", "x"]), Reply::Error("NOAUTH Authentication required.".into()));
    assert_eq!(c.cmd(&["AUTH", "wrong"]), Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into()));
    let Reply::Map(hello) = c.cmd(&["HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "app"]) else { panic!("HELLO 3 is a map") };
    assert_eq!(hello[2], (bulk("proto"), int(3)));
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), bulk("app"));
    assert_eq!(c.cmd(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]), ok());
    let Reply::Int(id) = c.cmd(&["CLIENT", "ID"]) else { panic!("CLIENT ID is an integer") };
    assert!(c.cmd(&["CLIENT", "LIST"]).text().contains(&format!("id={id} ")));
    assert!(c.cmd(&["CLIENT", "LIST"]).text().contains("lib-name=redis-py"));
    let mut victim = server.connect();
    assert_eq!(victim.cmd(&["AUTH", "s3cret"]), ok());
    let Reply::Int(victim_id) = victim.cmd(&["CLIENT", "ID"]) else { panic!() };
    assert_eq!(c.cmd(&["CLIENT", "KILL", "ID", &victim_id.to_string()]), int(1));
    assert_eq!(victim.read(), None, "a killed client is disconnected");
    assert_eq!(c.cmd(&["SELECT", "99"]), Reply::Error("ERR DB index is out of range".into()));
    assert_eq!(c.cmd(&["RESET"]), Reply::Status("RESET".into()));
    assert_eq!(c.cmd(&["PING"]), Reply::Error("NOAUTH Authentication required.".into()));
}

#[test]
fn server_commands_config_and_info() {
    // CONFIG GET/SET round-trips live settings and refuses bad values; INFO has Redis's fields.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]), ok());
    assert_eq!(c.cmd(&["CONFIG", "GET", "maxmemory-policy"]), Reply::Array(vec![bulk("maxmemory-policy"), bulk("allkeys-lru")]));
    assert!(c.cmd(&["CONFIG", "SET", "maxmemory-policy", "bogus"]).is_error());
    assert!(c.cmd(&["CONFIG", "SET", "port", "1"]).is_error(), "port cannot change live");
    assert!(c.cmd(&["INFO"]).text().contains("redis_version:7.0.15"));
    assert!(c.cmd(&["INFO", "commandstats"]).text().contains("cmdstat_config|set:"));
    assert!(matches!(c.cmd(&["COMMAND", "COUNT"]), Reply::Int(n) if n > 150));
    assert_eq!(c.cmd(&["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"]), Reply::Array(vec![bulk("a"), bulk("b")]));
    c.cmd(&["SET", "x", "1"]);
    assert_eq!(c.cmd(&["DBSIZE"]), int(1));
    assert_eq!(c.cmd(&["FLUSHALL"]), ok());
    assert_eq!(c.cmd(&["DBSIZE"]), int(0));
    assert!(matches!(c.cmd(&["TIME"]), Reply::Array(parts) if parts.len() == 2));
}

#[test]
fn info_keyspace_counts_keys_volatile_keys_and_their_mean_ttl() {
    // Redis's `db<n>:keys=…,expires=…,avg_ttl=…` line, avg_ttl in milliseconds: here exact (the
    // volatile keys' deadlines added up), where Redis estimates it from samples.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let keyspace = |c: &mut Conn| -> Vec<String> { c.cmd(&["INFO", "keyspace"]).text().lines().filter(|l| l.starts_with("db")).map(str::to_string).collect() };
    let avg_ttl = |line: &str| -> u64 { line.rsplit_once("avg_ttl=").expect("avg_ttl").1.parse().expect("a number") };
    assert!(keyspace(&mut c).is_empty(), "an empty database is not listed");
    c.cmd(&["SET", "a", "1", "EX", "100"]);
    c.cmd(&["SET", "b", "1", "PX", "300000"]);
    c.cmd(&["SET", "plain", "1"]);
    let lines = keyspace(&mut c);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("db0:keys=3,expires=2,avg_ttl="), "{lines:?}");
    assert!((195_000..=200_000).contains(&avg_ttl(&lines[0])), "{lines:?}");
    // A deadline moved, one dropped, a key in another database.
    c.cmd(&["EXPIRE", "a", "500"]);
    assert!((395_000..=400_000).contains(&avg_ttl(&keyspace(&mut c)[0])));
    assert_eq!(c.cmd(&["PERSIST", "a"]), int(1));
    assert!((295_000..=300_000).contains(&avg_ttl(&keyspace(&mut c)[0])));
    assert_eq!(c.cmd(&["SELECT", "3"]), ok());
    c.cmd(&["SET", "other", "1", "EX", "10"]);
    let lines = keyspace(&mut c);
    assert!(lines[0].starts_with("db0:keys=3,expires=1,avg_ttl="), "{lines:?}");
    assert!(lines[1].starts_with("db3:keys=1,expires=1,avg_ttl="), "{lines:?}");
    assert!((5_000..=10_000).contains(&avg_ttl(&lines[1])), "{lines:?}");
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    assert_eq!(c.cmd(&["DEL", "b"]), int(1));
    assert_eq!(keyspace(&mut c)[0], "db0:keys=2,expires=0,avg_ttl=0");
}

#[test]
fn maxmemory_noeviction_refuses_and_allkeys_lru_evicts() {
    // Over maxmemory, noeviction answers OOM to writes; allkeys-lru evicts to make room.
    let server = Server::start(&["--maxmemory", "64mb"]);
    let mut c = server.connect();
    let value = "v".repeat(10_000);
    let mut oom = false;
    for i in 0..20_000 {
        let reply = c.cmd(&["SET", &format!("key:{i}"), &value]);
        if reply.is_error() {
            assert!(reply.text().starts_with("OOM command not allowed"), "{reply:?}");
            oom = true;
            break;
        }
    }
    assert!(oom, "200 MB of writes under a 64 MB limit never hit OOM");
    assert_eq!(c.cmd(&["GET", "key:1"]).text().len(), value.len(), "reads still work");
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]), ok());
    for i in 20_000..30_000 {
        assert_eq!(c.cmd(&["SET", &format!("key:{i}"), &value]), ok());
    }
    let info = c.cmd(&["INFO", "stats"]).text();
    let evicted: u64 = info.lines().find_map(|l| l.strip_prefix("evicted_keys:")).and_then(|v| v.trim().parse().ok()).unwrap();
    assert!(evicted > 0, "nothing was evicted: {info}");
}

#[test]
fn a_maxmemory_set_or_lifted_live_applies_to_the_next_write() {
    // Write commands check the store's copy of the limit (`Store::maxmemory`), which CONFIG SET
    // keeps in step: set on a server started without one, it refuses the next write.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let value = "v".repeat(10_000);
    for i in 0..200 {
        assert_eq!(c.cmd(&["SET", &format!("key:{i}"), &value]), ok());
    }
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory", "1mb"]), ok());
    let reply = c.cmd(&["SET", "over", &value]);
    assert!(reply.text().starts_with("OOM command not allowed"), "a write over a limit set live went through: {reply:?}");
    assert_eq!(c.cmd(&["GET", "key:1"]).text().len(), value.len(), "reads still work");
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory", "0"]), ok());
    assert_eq!(c.cmd(&["SET", "over", &value]), ok(), "a write was refused after the limit was lifted");
}

#[test]
fn client_limits_maxclients_and_idle_timeout() {
    // Past maxclients new connections get Redis's error; idle clients are closed after timeout.
    let server = Server::start(&["--maxclients", "2", "--timeout", "1"]);
    let mut a = server.connect();
    // Wait until the start-up probe's connection is gone, so it does not count against maxclients.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !a.cmd(&["INFO", "clients"]).text().contains("connected_clients:1\r\n") {
        assert!(std::time::Instant::now() < deadline, "the start-up probe connection never closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A reply proves each connection is registered before the next one is checked.
    assert_reply!(a, ["PING"], "PONG");
    let mut b = server.connect();
    assert_reply!(b, ["PING"], "PONG");
    let mut c = server.connect();
    assert_eq!(c.read(), Some(Reply::Error("ERR max number of clients reached".into())));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(a.read(), None, "an idle client outlived timeout 1");
}

#[test]
fn a_timeout_set_live_applies_to_open_connections_from_their_next_request() {
    // A connection reads the settings once per read, from its own cache (`SettingsCache`):
    // a CONFIG SET made after it opened reaches it with its next request.
    let server = Server::start(&[]);
    let mut a = server.connect();
    assert_reply!(a, ["PING"], "PONG");
    let mut admin = server.connect();
    assert_eq!(admin.cmd(&["CONFIG", "SET", "timeout", "1"]), ok());
    assert_reply!(a, ["PING"], "PONG");
    // Closed about a second later: `admin` sees itself alone (it asks every 50 ms, so it is
    // never idle for the timeout itself).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !admin.cmd(&["INFO", "clients"]).text().contains("connected_clients:1\r\n") {
        assert!(std::time::Instant::now() < deadline, "an open client outlived a timeout set live");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn http_endpoints_serve_metrics_health_and_readiness() {
    // /metrics has command counters and latency; /healthz and /readyz answer 200.
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["SET", "a", "1"]);
    c.cmd(&["GET", "a"]);
    let (status, body) = server.http_get("/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("keymesh_commands_total{command=\"set\"} 1"), "{body}");
    // The duration histogram is read from the command table's (`LATENCY HISTOGRAM`): every
    // command that ran is in it, in power-of-two µs buckets, and `+Inf` agrees with `_count`.
    let sample = |name: &str| -> f64 {
        let line = body.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {body}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let count = sample("keymesh_command_duration_seconds_count ");
    assert!(count >= 2.0, "SET and GET at least (and the start-up probe's PING): {body}");
    assert_eq!(sample("keymesh_command_duration_seconds_bucket{le=\"+Inf\"} "), count, "{body}");
    assert!(sample("keymesh_command_duration_seconds_bucket{le=\"1.048576\"} ") <= count, "{body}");
    assert!(body.contains("keymesh_command_duration_seconds_bucket{le=\"0.000001\"} "), "{body}");
    assert!(sample("keymesh_command_duration_seconds_sum ") >= 0.0, "{body}");
    assert!(body.contains("keymesh_keys 1"), "{body}");
    // The start-up probe's connection may still be closing; ours is there either way.
    assert!(body.lines().any(|l| l.starts_with("keymesh_connected_clients ") && !l.ends_with(" 0")), "{body}");
    assert_eq!(server.http_get("/healthz").0, 200);
    assert_eq!(server.http_get("/readyz").0, 200);
    // maxmemory is exported, so alerts can compare memory use with it.
    assert!(body.contains("keymesh_maxmemory_bytes 0"), "{body}");
    c.cmd(&["CONFIG", "SET", "maxmemory", "10mb"]);
    let (_, body) = server.http_get("/metrics");
    assert!(body.contains("keymesh_maxmemory_bytes 10485760"), "{body}");
}

#[test]
fn dump_and_restore_follow_redis_rules() {
    // DUMP/RESTORE round trips, RESTORE's options and errors in Redis's order, a TTL already
    // past, and IDLETIME/FREQ under the matching eviction policy (Redis's Tcl unit/dump runs
    // the rest, and tests/persistence_rdb.rs payloads to and from Redis 7.0 itself).
    let server = Server::start(&[]);
    let mut c = server.connect();
    let dump = |c: &mut support::Conn, key: &str| match c.cmd(&["DUMP", key]) {
        Reply::Bulk(payload) => payload,
        other => panic!("DUMP {key}: {other:?}"),
    };
    let restore = |c: &mut support::Conn, args: &[&[u8]]| c.call(&[&[&b"RESTORE"[..]], args].concat()).unwrap();
    assert_eq!(c.cmd(&["DUMP", "missing"]), Reply::Nil);
    assert_eq!(c.cmd(&["ZADD", "z", "1", "a", "-inf", "b"]), int(2));
    let z = dump(&mut c, "z");
    assert_eq!(restore(&mut c, &[b"z", b"0", &z]), Reply::Error("BUSYKEY Target key name already exists.".into()));
    assert_eq!(restore(&mut c, &[b"z", b"0", &z, b"nonsense"]), Reply::Error("ERR syntax error".into()), "options first");
    assert_eq!(restore(&mut c, &[b"z2", b"-1", &z]), Reply::Error("ERR Invalid TTL value, must be >= 0".into()));
    assert_eq!(restore(&mut c, &[b"z2", b"x", &z]), Reply::Error("ERR value is not an integer or out of range".into()));
    assert_eq!(restore(&mut c, &[b"z2", b"0", &z[1..]]), Reply::Error("ERR DUMP payload version or checksum are wrong".into()));
    assert_eq!(restore(&mut c, &[b"z2", b"0", &z, b"FREQ", b"256"]), Reply::Error("ERR Invalid FREQ value, must be >= 0 and <= 255".into()));
    assert_eq!(restore(&mut c, &[b"z2", b"0", &z, b"IDLETIME", b"-1"]), Reply::Error("ERR Invalid IDLETIME value, must be >= 0".into()));
    assert_eq!(restore(&mut c, &[b"z2", b"0", &z, b"IDLETIME", b"1", b"FREQ", b"1"]), Reply::Error("ERR syntax error".into()), "one or the other");
    assert_eq!(c.cmd(&["EXISTS", "z2"]), int(0), "a refused RESTORE writes nothing");
    assert_eq!(restore(&mut c, &[b"z2", b"0", &z]), ok());
    assert_eq!(c.cmd(&["ZRANGE", "z2", "0", "-1", "WITHSCORES"]).texts(), vec!["b", "-inf", "a", "1"]);

    // REPLACE of another type; a relative and an absolute TTL.
    assert_eq!(c.cmd(&["RPUSH", "l", "x", "y"]), int(2));
    let l = dump(&mut c, "l");
    assert_eq!(restore(&mut c, &[b"z2", b"5000", &l, b"REPLACE"]), ok());
    assert_eq!(c.cmd(&["LRANGE", "z2", "0", "-1"]).texts(), vec!["x", "y"]);
    assert!(matches!(c.cmd(&["PTTL", "z2"]), Reply::Int(ms) if ms > 4000 && ms <= 5000));
    let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 + 60_000;
    assert_eq!(restore(&mut c, &[b"abs", at.to_string().as_bytes(), &l, b"ABSTTL"]), ok());
    assert_eq!(c.cmd(&["PEXPIRETIME", "abs"]), int(at as i64));
    // A deadline already past: REPLACE deletes the key and nothing is created, as in Redis.
    assert_eq!(restore(&mut c, &[b"z2", b"1000", &l, b"ABSTTL", b"REPLACE"]), ok());
    assert_eq!(c.cmd(&["EXISTS", "z2"]), int(0));

    // IDLETIME under an LRU policy, FREQ under an LFU one; the other is ignored.
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]), ok());
    assert_eq!(restore(&mut c, &[b"idle", b"0", &l, b"IDLETIME", b"1000"]), ok());
    assert!(matches!(c.cmd(&["OBJECT", "IDLETIME", "idle"]), Reply::Int(s) if (1000..=1002).contains(&s)));
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]), ok());
    assert_eq!(restore(&mut c, &[b"freq", b"0", &l, b"FREQ", b"100"]), ok());
    assert_eq!(c.cmd(&["OBJECT", "FREQ", "freq"]), int(100));
    assert_eq!(restore(&mut c, &[b"freq2", b"0", &l, b"IDLETIME", b"1000"]), ok());
    assert!(matches!(c.cmd(&["OBJECT", "FREQ", "freq2"]), Reply::Int(n) if n < 100), "IDLETIME is ignored under LFU");
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]), ok());

    // FUNCTION RESTORE takes library payloads only.
    let reply = c.call(&[&b"FUNCTION"[..], b"RESTORE", &l]).unwrap();
    assert_eq!(reply, Reply::Error("ERR given type is not a function".into()));
}
