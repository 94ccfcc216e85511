//! Black-box tests of the wire protocol: malformed input gets Redis's error and a closed
//! connection, never a crash, a hang or unbounded memory, and other clients keep being served.

#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{Conn, Reply, Server};

/// Sends `bytes` on a fresh connection and returns the reply and whether the server closed.
fn send_bad(server: &Server, bytes: &[u8]) -> (Option<Reply>, bool) {
    let mut conn = server.connect();
    // The server may close before it has read everything; that is the expected outcome.
    let _ = conn.send_raw(bytes);
    let reply = conn.read();
    let closed = conn.read().is_none();
    (reply, closed)
}

#[test]
fn malformed_lengths_and_nesting_get_protocol_errors_and_close() {
    // Every malformed header is answered with Redis's protocol error, then the connection closes.
    let server = Server::start(&[]);
    let cases: &[(&[u8], &str)] = &[
        (b"*abc\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*99999999999\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*1\r\n$-5\r\n", "ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$99999999999\r\n", "ERR Protocol error: invalid bulk length"),
        (b"*1\r\n*1\r\n$4\r\nPING\r\n", "ERR Protocol error: expected '$', got '*'"),
        (b"*2\r\n$3\r\nGET\r\n:1\r\n", "ERR Protocol error: expected '$', got ':'"),
        (b"SET k \"unbalanced\r\n", "ERR Protocol error: unbalanced quotes in request"),
    ];
    for (bytes, expected) in cases {
        let (reply, closed) = send_bad(&server, bytes);
        assert_eq!(reply, Some(Reply::Error(expected.to_string())), "input {:?}", String::from_utf8_lossy(bytes));
        assert!(closed, "connection stays open after {:?}", String::from_utf8_lossy(bytes));
    }
    assert_reply!(server.connect(), ["PING"], "PONG");
}

#[test]
fn deep_nesting_is_rejected_without_recursion() {
    // A request nested ten thousand levels deep is refused at the first nested header.
    let server = Server::start(&[]);
    let nested = "*1\r\n".repeat(10_000);
    let (reply, closed) = send_bad(&server, nested.as_bytes());
    assert_eq!(reply, Some(Reply::Error("ERR Protocol error: expected '$', got '*'".into())));
    assert!(closed);
}

#[test]
fn binary_garbage_never_crashes_the_server() {
    // Random bytes on many connections leave the server serving everyone else.
    let server = Server::start(&[]);
    let mut state: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..50 {
        let garbage: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let _ = s.write_all(&garbage);
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut sink = [0u8; 65536];
        let _ = s.read(&mut sink);
    }
    assert_reply!(server.connect(), ["PING"], "PONG");
}

#[test]
fn command_cut_off_mid_bulk_then_disconnect_is_harmless() {
    // A client that dies mid-request leaves no partial write behind.
    let server = Server::start(&[]);
    {
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.write_all(b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$10\r\nabc").unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut conn = server.connect();
    assert_eq!(conn.cmd(&["EXISTS", "key"]), Reply::Int(0));
    assert_eq!(conn.cmd(&["DBSIZE"]), Reply::Int(0));
}

#[test]
fn huge_claimed_bulk_does_not_allocate_what_it_claims() {
    // Claiming a 500 MB argument and sending 1 KB of it does not make the server reserve 500 MB.
    let server = Server::start(&[]);
    let before = server.rss();
    let mut conns = Vec::new();
    for _ in 0..20 {
        let mut conn = server.connect();
        conn.send_raw(b"*2\r\n$3\r\nGET\r\n$500000000\r\n").unwrap();
        conn.send_raw(&[b'x'; 1024]).unwrap();
        conns.push(conn);
    }
    std::thread::sleep(Duration::from_millis(300));
    let growth = server.rss().saturating_sub(before);
    assert!(growth < 64 * 1024 * 1024, "RSS grew by {growth} bytes for 20 half-sent 500 MB claims");
    assert_reply!(server.connect(), ["PING"], "PONG");
}

#[test]
fn query_buffer_limit_closes_the_connection() {
    // An inline request with no newline past the limit, or a multibulk request bigger than
    // client-query-buffer-limit, closes the connection.
    let server = Server::start(&["--client-query-buffer-limit", "1mb"]);
    let (reply, closed) = send_bad(&server, &vec![b'a'; 100 * 1024]);
    assert_eq!(reply, Some(Reply::Error("ERR Protocol error: too big inline request".into())));
    assert!(closed);

    let mut conn = server.connect();
    conn.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4000000\r\n").unwrap();
    let chunk = vec![b'v'; 64 * 1024];
    let mut closed = false;
    for _ in 0..64 {
        if conn.send_raw(&chunk).is_err() {
            closed = true;
            break;
        }
    }
    closed = closed || conn.read().is_none();
    assert!(closed, "a 4 MB request under a 1 MB query buffer limit was accepted");
    assert_reply!(server.connect(), ["PING"], "PONG");
}

#[test]
fn client_that_never_reads_costs_bounded_memory() {
    // A client pipelining GETs of a 1 MB value without reading replies stalls only itself.
    let server = Server::start(&[]);
    let mut setup = server.connect();
    let big = "x".repeat(1 << 20);
    assert_eq!(setup.cmd(&["SET", "big", &big]), Reply::Status("OK".into()));
    let before = server.rss();
    let mut lazy = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    lazy.set_write_timeout(Some(Duration::from_millis(500))).unwrap();
    let request = support::encode(&[b"GET", b"big"]);
    // 2000 GETs would be 2 GB of replies if the server buffered them.
    for _ in 0..2000 {
        if lazy.write_all(&request).is_err() {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let growth = server.rss().saturating_sub(before);
    assert!(growth < 256 * 1024 * 1024, "RSS grew by {growth} bytes for a client that never reads");
    let mut other = server.connect();
    assert_eq!(other.cmd(&["GET", "missing"]), Reply::Nil);
    drop(lazy);
}

#[test]
fn stored_elements_do_not_pin_the_read_buffer() {
    // Arguments arrive as slices of the connection's read buffer. Every command that stores
    // one (list elements, sorted-set, geo, hash and set members) must keep its own copy: a
    // stored slice would hold the whole read that carried it, here ~8 KB of an unrelated
    // request per element, ~80 MB in all.
    let server = Server::start(&[]);
    let mut conn = server.connect();
    let before = server.rss();
    let filler = "x".repeat(8000);
    const PER_ROUND: usize = 10;
    for round in 0..100 {
        let mut batch = Vec::new();
        for j in 0..100 {
            let i = (round * 100 + j).to_string();
            let [e, x, s, m, n, p, f, v] = ["e", "x", "s", "m", "n", "p", "f", "v"].map(|prefix| format!("{prefix}:{i}"));
            let requests: [&[&str]; PER_ROUND] = [
                &["EXISTS", &filler],
                &["LPUSH", "list", &e],
                &["RPUSH", "list", &e],
                &["LINSERT", "list", "BEFORE", &e, &x],
                &["LSET", "list", "0", &s],
                &["ZADD", "zset", "1", &m],
                &["ZINCRBY", "zset", "1", &n],
                &["GEOADD", "geo", "13.361389", "38.115556", &p],
                &["HSET", "hash", &f, &v],
                &["SADD", "set", &m],
            ];
            for request in requests {
                batch.extend(support::encode(request));
            }
        }
        conn.send_raw(&batch).unwrap();
        for _ in 0..100 * PER_ROUND {
            let reply = conn.read().expect("a reply");
            assert!(!reply.is_error(), "{reply:?}");
        }
    }
    assert_eq!(conn.cmd(&["LLEN", "list"]), Reply::Int(30_000));
    assert_eq!(conn.cmd(&["ZCARD", "zset"]), Reply::Int(20_000));
    let growth = server.rss().saturating_sub(before);
    assert!(growth < 40 * 1024 * 1024, "RSS grew by {growth} bytes for 70,000 small stored elements");
}

#[test]
fn reading_collections_does_not_grow_them() {
    // A reply must copy the stored elements it returns. Cloning one instead gives each element
    // a shared header the first time (a `Bytes` stored whole is promoted on its first clone),
    // kept as long as the element lives: ~30 bytes per element, once per element read, so a
    // read-heavy workload grew a node by a third. Every read below, of every collection type,
    // touches each of N small elements at least once on average; with a header per element
    // read it would grow `used_memory` by N × 32 bytes (3.2 MB), and each must grow it by far
    // less. The server runs without jemalloc's thread caches, so that `used_memory` counts
    // live allocations exactly: with them, what a thread's cache holds is merged into the
    // statistics late, and one read's growth swung by ±300–400 KB from run to run (SUNION read
    // +305 KB once, the next read −300 KB), enough to fail a read that retained nothing.
    const N: usize = 100_000;
    let server = Server::start_with_env(&[], &[("_RJEM_MALLOC_CONF", "tcache:false")]);
    let mut conn = server.connect();
    let pipeline = |conn: &mut Conn, requests: &[Vec<String>]| {
        let mut batch = Vec::new();
        for request in requests {
            batch.extend(support::encode(&request.iter().map(String::as_bytes).collect::<Vec<_>>()));
        }
        conn.send_raw(&batch).unwrap();
        for request in requests {
            let reply = conn.read().expect("a reply");
            assert!(!reply.is_error(), "{request:?}: {reply:?}");
        }
    };
    let request = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    // Two copies of each collection: every read runs on the warm-up copy first, so that what a
    // first read allocates for good (the connection's grown buffers) is not counted.
    for copy in ["warm", "cold"] {
        let [list, hash, set, zset] = ["list", "hash", "set", "zset"].map(|t| format!("{t}:{copy}"));
        let writes: Vec<_> = (0..N)
            .flat_map(|i| {
                let [e, f, v, m] = ["e", "f", "v", "m"].map(|prefix| format!("{prefix}:{i}"));
                [request(&["RPUSH", &list, &e]), request(&["HSET", &hash, &f, &v]), request(&["SADD", &set, &m]), request(&["ZADD", &zset, "1", &m])]
            })
            .collect();
        pipeline(&mut conn, &writes);
    }
    let (n, minus_n) = (N.to_string(), format!("-{N}"));
    let reads = |copy: &str| -> Vec<(String, Vec<Vec<String>>)> {
        let [list, hash, set, zset] = ["list", "hash", "set", "zset"].map(|t| format!("{t}:{copy}"));
        let whole: [&[&str]; 20] = [
            &["LRANGE", &list, "0", "-1"],
            &["SORT", &list, "ALPHA"],
            &["SORT", &list, "BY", "nosort", "LIMIT", "0", &n],
            &["SORT", &set, "ALPHA"],
            &["HGETALL", &hash],
            &["HKEYS", &hash],
            &["HVALS", &hash],
            &["HSCAN", &hash, "0", "COUNT", &n],
            &["HRANDFIELD", &hash, &n, "WITHVALUES"],
            &["HRANDFIELD", &hash, &minus_n, "WITHVALUES"],
            &["SMEMBERS", &set],
            &["SSCAN", &set, "0", "COUNT", &n],
            &["SRANDMEMBER", &set, &n],
            &["SRANDMEMBER", &set, &minus_n],
            &["SINTER", &set, &set],
            &["SUNION", &set, &set],
            &["SDIFF", &set, "missing"],
            &["ZRANGE", &zset, "0", "-1", "WITHSCORES"],
            &["ZRANDMEMBER", &zset, &n],
            &["LMOVE", &list, &list, "LEFT", "RIGHT"],
        ];
        let mut reads: Vec<_> = whole.iter().map(|r| (r.join(" "), vec![request(r)])).collect();
        // Reads of one element, once for each.
        type PerElement = fn(&str, usize) -> Vec<String>;
        let per_element: [(&str, &str, PerElement); 4] = [
            ("LINDEX", &list, |k, i| vec!["LINDEX".into(), k.into(), i.to_string()]),
            ("HGET", &hash, |k, i| vec!["HGET".into(), k.into(), format!("f:{i}")]),
            ("HMGET", &hash, |k, i| vec!["HMGET".into(), k.into(), format!("f:{i}")]),
            ("RPOPLPUSH", &list, |k, _| vec!["RPOPLPUSH".into(), k.into(), k.into()]),
        ];
        for (name, key, make) in per_element {
            reads.push((format!("{name} × {N}"), (0..N).map(|i| make(key, i)).collect()));
        }
        // One random element each: N / 5 picks touch 18% of the elements (a header each would
        // be 580 KB). Fewer than N because each pick walks the table (O(N), not Redis's O(1)).
        for (name, key) in [("HRANDFIELD", &hash), ("SRANDMEMBER", &set)] {
            reads.push((format!("{name} × {}", N / 5), (0..N / 5).map(|_| request(&[name, key])).collect()));
        }
        reads
    };
    let used = |conn: &mut Conn| support::data_node::info_field(conn, "memory", "used_memory").parse::<i64>().unwrap();
    for (_, requests) in reads("warm") {
        pipeline(&mut conn, &requests);
    }
    let mut grown = Vec::new();
    for (name, requests) in reads("cold") {
        let before = used(&mut conn);
        pipeline(&mut conn, &requests);

        let growth = used(&mut conn) - before;
        grown.push(format!("{name}: {growth}"));
        assert!(growth < 256 * 1024, "{name} grew used_memory by {growth} bytes; each read so far: {grown:?}");
    }
}

#[test]
fn pipelined_requests_split_at_every_byte_are_answered_in_order() {
    // The same pipeline delivered one byte at a time yields the same replies, in order.
    let server = Server::start(&[]);
    let mut pipeline = Vec::new();
    for i in 0..20 {
        pipeline.extend(support::encode(&[b"SET", format!("k{i}").as_bytes(), format!("v{i}").as_bytes()]));
        pipeline.extend(support::encode(&[b"GET", format!("k{i}").as_bytes()]));
    }
    pipeline.extend_from_slice(b"PING\r\n");
    let mut conn = server.connect();
    for byte in &pipeline {
        conn.send_raw(std::slice::from_ref(byte)).unwrap();
    }
    for i in 0..20 {
        assert_eq!(conn.read(), Some(Reply::Status("OK".into())));
        assert_eq!(conn.read(), Some(Reply::Bulk(format!("v{i}").into_bytes())));
    }
    assert_eq!(conn.read(), Some(Reply::Status("PONG".into())));
}

#[test]
fn a_long_pipeline_in_one_write_runs_in_order_across_batches_up_to_a_protocol_error() {
    // The server parses up to 16 pipelined requests ahead to prefetch their keys: a request
    // must still see every effect of the ones before it (a SELECT, a RENAME, a transaction),
    // whichever batch each falls in, and a protocol error comes after the replies before it.
    let server = Server::start(&[]);
    let mut pipeline = Vec::new();
    let mut expected = Vec::new();
    let mut push = |args: &[&str], reply: Reply| {
        pipeline.extend(support::encode(&args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>()));
        expected.push(reply);
    };
    let ok = || Reply::Status("OK".into());
    let bulk = |v: &str| Reply::Bulk(v.as_bytes().to_vec());
    for i in 0..12 {
        push(&["SET", &format!("k{i}"), &format!("db0-{i}")], ok());
    }
    push(&["SELECT", "1"], ok());
    for i in 0..12 {
        push(&["GET", &format!("k{i}")], Reply::Nil);
        push(&["SET", &format!("k{i}"), &format!("db1-{i}")], ok());
    }
    push(&["RENAME", "k0", "moved"], ok());
    push(&["GET", "moved"], bulk("db1-0"));
    push(&["MULTI"], ok());
    push(&["INCR", "n"], Reply::Status("QUEUED".into()));
    push(&["EXEC"], Reply::Array(vec![Reply::Int(1)]));
    push(&["SELECT", "0"], ok());
    for i in 0..12 {
        push(&["GET", &format!("k{i}")], bulk(&format!("db0-{i}")));
    }
    let answered = expected.len();
    assert!(answered % 16 != 0, "the error must fall inside a batch");
    pipeline.extend_from_slice(b"*1\r\n$-5\r\n");
    pipeline.extend(support::encode(&[b"GET".as_slice(), b"k1"]));
    let mut conn = server.connect();
    conn.send_raw(&pipeline).unwrap();
    for (i, want) in expected.into_iter().enumerate() {
        assert_eq!(conn.read(), Some(want), "reply {i} of {answered}");
    }
    assert_eq!(conn.read(), Some(Reply::Error("ERR Protocol error: invalid bulk length".into())));
    assert_eq!(conn.read(), None, "the connection stays open after a protocol error");
    assert_reply!(server.connect(), ["GET", "k11"], "db0-11");
}

#[test]
fn unknown_commands_and_wrong_arity_use_redis_wording() {
    // Client libraries match these messages.
    let server = Server::start(&[]);
    let mut conn: Conn = server.connect();
    assert_eq!(conn.cmd(&["FOO", "a", "b"]), Reply::Error("ERR unknown command 'FOO', with args beginning with: 'a' 'b' ".into()));
    assert_eq!(conn.cmd(&["GET"]), Reply::Error("ERR wrong number of arguments for 'get' command".into()));
    assert_eq!(conn.cmd(&["SET", "k", "v", "EX", "0"]), Reply::Error("ERR invalid expire time in 'set' command".into()));
}

#[test]
fn sigterm_shuts_down_cleanly() {
    // SIGTERM ends the process with status 0 after closing clients.
    let server = Server::start(&[]);
    let mut conn = server.connect();
    assert_reply!(conn, ["SET", "a", "1"], "OK");
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
}

#[test]
fn help_version_and_bad_flags() {
    // --help and --version answer and exit 0; a bad flag or value stops start-up naming it.
    let bin = env!("CARGO_BIN_EXE_keymesh-server");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let help = run(&["--help"]);
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("Usage: keymesh-server"));
    let version = run(&["--version"]);
    assert!(version.status.success() && String::from_utf8_lossy(&version.stdout).starts_with("keymesh-server "));
    let bad = run(&["--port", "70000"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("flag --port"), "{}", String::from_utf8_lossy(&bad.stderr));
    let unknown = run(&["--no-such-directive", "1"]);
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown directive 'no-such-directive'"));
}

#[test]
fn two_servers_on_one_host_need_only_different_client_ports() {
    // Proves the derived ports (issue 11): given only --port, a server's mesh port is port +
    // 10000 and its metrics port port + 2742, so two servers start side by side on one host
    // and each serves /healthz on its own metrics port; a client port whose derived mesh port
    // would be out of range is refused at start-up (exit 2, before anything is bound), naming
    // mesh-port.
    let bin = env!("CARGO_BIN_EXE_keymesh-server");
    let ports: Vec<u16> = (0..2).map(|_| support::free_port_with(&[10000, 2742])).collect();
    let mut children: Vec<std::process::Child> = ports
        .iter()
        .map(|p| {
            std::process::Command::new(bin)
                .args(["--port", &p.to_string(), "--bind", "127.0.0.1", "--loglevel", "warning"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for &port in &ports {
        let metrics = port + 2742;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", metrics)).is_err() {
            assert!(std::time::Instant::now() < deadline, "no metrics endpoint on {metrics} for the server on {port}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut conn = support::Conn::connect(port);
        assert_eq!(conn.cmd(&["CONFIG", "GET", "metrics-port"]).texts(), vec!["metrics-port".to_string(), metrics.to_string()]);
    }
    for child in children.iter_mut() {
        assert!(child.try_wait().unwrap().is_none(), "a server exited: two servers on one host collided");
        let _ = child.kill();
        let _ = child.wait();
    }
    let out = std::process::Command::new(bin).args(["--port", "60000", "--bind", "127.0.0.1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mesh-port") && stderr.contains("set mesh-port explicitly"), "{stderr}");
}
