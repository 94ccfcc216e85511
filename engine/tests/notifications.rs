//! Black-box tests of keyspace notifications (`notify-keyspace-events`): Redis's channels and
//! event names for local writes, expiries and evictions, nothing when they are off, and the
//! events a node fires for writes merged from a peer (docs/compatibility.md, "Keyspace
//! notifications").

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::data_node::{wait_for, DataNode};
use support::{Conn, Reply, Server};

/// A connection subscribed to every keyspace and keyevent channel.
fn subscriber(server: &Server) -> Conn {
    let mut conn = server.connect();
    conn.set_timeout(Duration::from_secs(10));
    assert_eq!(conn.cmd(&["PSUBSCRIBE", "__key*__:*"]).texts(), ["psubscribe", "__key*__:*", "1"]);
    conn
}

/// The next message's `(channel, payload)`.
fn next(conn: &mut Conn) -> (String, String) {
    let message = conn.read().expect("a keyspace message").texts();
    assert_eq!(message[0], "pmessage", "{message:?}");
    (message[2].clone(), message[3].clone())
}

/// Reads both messages of one event (keyspace, then keyevent) and checks them.
fn expect_event(conn: &mut Conn, db: usize, key: &str, event: &str) {
    assert_eq!(next(conn), (format!("__keyspace@{db}__:{key}"), event.to_string()));
    assert_eq!(next(conn), (format!("__keyevent@{db}__:{event}"), key.to_string()));
}

#[test]
fn local_writes_fire_redis_event_names_in_order() {
    // Proves the classes and names of Redis 7.0 for a sample of commands, with the command's
    // own event before the `del` of a collection it emptied, and `new` only for a new key.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).text(), "OK");
    assert_eq!(c.cmd(&["CONFIG", "GET", "notify-keyspace-events"]).texts(), ["notify-keyspace-events", "AKE"]);
    let mut sub = subscriber(&server);
    c.cmd(&["SET", "s", "1", "EX", "100"]);
    expect_event(&mut sub, 0, "s", "set");
    expect_event(&mut sub, 0, "s", "expire");
    c.cmd(&["INCRBY", "s", "2"]);
    expect_event(&mut sub, 0, "s", "incrby");
    c.cmd(&["RENAME", "s", "t"]);
    expect_event(&mut sub, 0, "s", "rename_from");
    expect_event(&mut sub, 0, "t", "rename_to");
    c.cmd(&["RPUSH", "l", "a"]);
    expect_event(&mut sub, 0, "l", "rpush");
    c.cmd(&["LPOP", "l"]);
    expect_event(&mut sub, 0, "l", "lpop");
    expect_event(&mut sub, 0, "l", "del");
    c.cmd(&["HSET", "h", "f", "1"]);
    expect_event(&mut sub, 0, "h", "hset");
    c.cmd(&["ZINCRBY", "z", "1", "m"]);
    expect_event(&mut sub, 0, "z", "zincr");
    c.cmd(&["SADD", "set", "x"]);
    c.cmd(&["SREM", "set", "absent"]);
    c.cmd(&["DEL", "set", "missing"]);
    expect_event(&mut sub, 0, "set", "sadd");
    expect_event(&mut sub, 0, "set", "del");

    assert_eq!(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "En"]).text(), "OK");
    c.cmd(&["SET", "fresh", "1"]);
    c.cmd(&["SET", "fresh", "2"]);
    c.cmd(&["SELECT", "3"]);
    c.cmd(&["SET", "other-db", "1"]);
    assert_eq!(next(&mut sub), ("__keyevent@0__:new".to_string(), "fresh".to_string()));
    assert_eq!(next(&mut sub), ("__keyevent@3__:new".to_string(), "other-db".to_string()));

    let refused = c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEw"]);
    assert!(refused.text().contains("Invalid event class character"), "{refused:?}");
}

#[test]
fn nothing_is_published_when_notifications_are_off_or_the_class_is_masked() {
    // Proves the default (off) and a class mask: the first message the subscriber gets is a
    // plain PUBLISH sent after the writes.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let mut sub = subscriber(&server);
    assert_eq!(sub.cmd(&["PSUBSCRIBE", "marker"]).texts(), ["psubscribe", "marker", "2"]);
    c.cmd(&["SET", "a", "1"]);
    c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Kl"]);
    c.cmd(&["SET", "b", "1"]);
    c.cmd(&["HSET", "h", "f", "v"]);
    c.cmd(&["PUBLISH", "marker", "done"]);
    assert_eq!(sub.read().unwrap().texts(), ["pmessage", "marker", "marker", "done"]);
}

#[test]
fn expiries_and_evictions_fire_expired_and_evicted() {
    // Proves `expired` for a key nobody reads again (the active expiry cycle) and for one read
    // after its deadline, and `evicted` for a key maxmemory pushed out.
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Exe"]);
    let mut sub = subscriber(&server);
    c.cmd(&["PSETEX", "soon", "50", "v"]);
    assert_eq!(next(&mut sub), ("__keyevent@0__:expired".to_string(), "soon".to_string()));
    c.cmd(&["PSETEX", "read-late", "30", "v"]);
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(c.cmd(&["GET", "read-late"]), Reply::Nil);
    assert_eq!(next(&mut sub), ("__keyevent@0__:expired".to_string(), "read-late".to_string()));

    // Eviction samples random shards: enough keys that it finds some.
    let keys: Vec<String> = (0..2000).map(|i| format!("victim-{i}")).collect();
    let mut mset = vec!["MSET"];
    for key in &keys {
        mset.extend([key.as_str(), "v"]);
    }
    assert_eq!(c.cmd(&mset).text(), "OK");
    c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    c.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    // Nothing fits under one byte: the write evicts what it finds, then is refused.
    assert!(c.cmd(&["SET", "more", "v"]).is_error());
    c.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    let (channel, key) = next(&mut sub);
    assert_eq!(channel, "__keyevent@0__:evicted");
    assert!(key.starts_with("victim-"), "{key}");
    let Reply::Int(left) = c.cmd(&["DBSIZE"]) else { panic!("DBSIZE") };
    assert!(left < 2000, "{left} keys left");
}

#[test]
fn a_write_made_on_one_node_fires_its_event_on_a_peer() {
    // Proves merged writes notify: a subscriber on node a hears the writes clients made on
    // node b, as the event of what each did to the key (a string write `set`, hash fields
    // `hset`/`hdel`, set members `sadd`/`srem`, sorted-set members `zadd`/`zrem`, a counter's
    // contribution `incrby`, an expiry register `expire` (`persist` when it clears the TTL), a
    // tombstone `del`, a list's value `lset`, and `del` for the list a pop emptied; a `SET … EX`
    // `set` and then `expire`, as on the node that took it).
    let (a, b) = (DataNode::new("notify-a"), DataNode::new("notify-b"));
    let sa = a.start("a", &[&b], &["--notify-keyspace-events", "KA"]);
    let sb = b.start("b", &[&a], &[]);
    let (mut ca, mut cb) = (sa.connect(), sb.connect());
    // The link is up once a write on b shows on a.
    cb.cmd(&["SET", "probe", "1"]);
    wait_for("the mesh", || ca.cmd(&["EXISTS", "probe"]) == Reply::Int(1));
    let mut sub = sa.connect();
    sub.set_timeout(Duration::from_secs(10));
    assert_eq!(sub.cmd(&["PSUBSCRIBE", "__keyspace@0__:k*"]).texts(), ["psubscribe", "__keyspace@0__:k*", "1"]);
    cb.cmd(&["SET", "k1", "v"]);
    cb.cmd(&["HSET", "k2", "f", "v", "g", "w"]);
    cb.cmd(&["HDEL", "k2", "f"]);
    cb.cmd(&["SADD", "k3", "a", "b"]);
    cb.cmd(&["SREM", "k3", "a"]);
    cb.cmd(&["ZADD", "k4", "1", "m", "2", "n"]);
    cb.cmd(&["ZREM", "k4", "m"]);
    cb.cmd(&["INCR", "k5"]);
    cb.cmd(&["INCRBY", "k5", "2"]);
    cb.cmd(&["EXPIRE", "k1", "100"]);
    cb.cmd(&["PERSIST", "k1"]);
    cb.cmd(&["DEL", "k2"]);
    cb.cmd(&["RPUSH", "k6", "a", "b"]);
    cb.cmd(&["LPOP", "k6"]);
    cb.cmd(&["LPOP", "k6"]);
    // A string written with its TTL: two ops a peer merges as one write, for a new key and for
    // one it holds.
    cb.cmd(&["SET", "k7", "v", "EX", "100"]);
    cb.cmd(&["SETEX", "k7", "200", "w"]);
    let expected = [
        ("k1", "set"),
        ("k2", "hset"),
        ("k2", "hdel"),
        ("k3", "sadd"),
        ("k3", "srem"),
        ("k4", "zadd"),
        ("k4", "zrem"),
        ("k5", "incrby"),
        ("k5", "incrby"),
        ("k1", "expire"),
        ("k1", "persist"),
        ("k2", "del"),
        ("k6", "lset"),
        ("k6", "lset"),
        ("k6", "del"),
        ("k7", "set"),
        ("k7", "expire"),
        ("k7", "set"),
        ("k7", "expire"),
    ];
    let mut heard = Vec::new();
    while heard.len() < expected.len() {
        heard.push(next(&mut sub));
    }
    let expected: Vec<(String, String)> = expected.iter().map(|(k, e)| (format!("__keyspace@0__:{k}"), e.to_string())).collect();
    assert_eq!(heard, expected);
}

#[test]
fn reads_that_miss_fire_keymiss_and_writes_do_not() {
    // Class `m`, as Redis 7.0's `lookupKeyRead`: a read of a missing key fires `keymiss`
    // (EXISTS, TYPE, TTL and TOUCH included, and the keys a write command only reads, such as
    // SUNIONSTORE's sources or SET ... GET's old value); a write's own lookup, a hit and
    // OBJECT fire nothing.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Em"]).text(), "OK");
    assert_eq!(c.cmd(&["CONFIG", "GET", "notify-keyspace-events"]).texts(), ["notify-keyspace-events", "Em"]);
    c.cmd(&["SET", "here", "1"]);
    let mut sub = subscriber(&server);
    let reads: &[&[&str]] = &[
        &["GET", "r1"],
        &["MGET", "here", "r2"],
        &["EXISTS", "r3"],
        &["TYPE", "r4"],
        &["TTL", "r5"],
        &["STRLEN", "r6"],
        &["HGET", "r7", "f"],
        &["LRANGE", "r8", "0", "-1"],
        &["SMEMBERS", "r9"],
        &["ZSCORE", "r10", "m"],
        &["SUNIONSTORE", "w1", "r11"],
        &["TOUCH", "r12"],
        &["SET", "w2", "v", "GET"],
        &["PFCOUNT", "r13"],
        &["BITCOUNT", "r14"],
        &["GETRANGE", "r15", "0", "1"],
    ];
    let writes: &[&[&str]] = &[
        &["GET", "here"],
        &["SET", "w3", "v"],
        &["INCR", "w4"],
        &["APPEND", "w5", "x"],
        &["SETBIT", "w6", "1", "1"],
        &["SETRANGE", "w7", "1", "x"],
        &["HSET", "w8", "f", "v"],
        &["LPUSH", "w9", "a"],
        &["LPOP", "w10"],
        &["SADD", "w11", "a"],
        &["ZADD", "w12", "1", "a"],
        &["DEL", "w13"],
        &["EXPIRE", "w14", "10"],
        &["PFADD", "w15", "a"],
        &["BITFIELD", "w16", "SET", "u8", "0", "1"],
        &["OBJECT", "IDLETIME", "w17"],
    ];
    for command in reads.iter().chain(writes) {
        assert!(!c.cmd(command).is_error(), "{command:?}");
    }
    c.cmd(&["GET", "the-end"]);
    let mut missed = Vec::new();
    loop {
        let (channel, key) = next(&mut sub);
        assert_eq!(channel, "__keyevent@0__:keymiss");
        if key == "the-end" {
            break;
        }
        missed.push(key);
    }
    let mut expected: Vec<String> = (1..=12).map(|i| format!("r{i}")).collect();
    expected.push("w2".into());
    expected.extend((13..=15).map(|i| format!("r{i}")));
    assert_eq!(missed, expected);
    assert!(c.cmd(&["INFO", "stats"]).text().contains("keyspace_misses:17"), "every miss counted once");
}
