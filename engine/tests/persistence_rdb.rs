//! Black-box tests of RDB import and export against Debian's `redis-server` 7.0 (package
//! redis-server, scripts/install-deps.sh): a `dump.rdb` it writes with every type and encoding
//! (listpack integers of every width, intsets of every width, quicklists with packed and plain
//! nodes, hash tables, skiplists, integer and LZF strings, expiries, several databases) and the
//! older files in `testdata/rdb` it still reads are imported by KeyMesh with identical keys,
//! values and expiry times; `redis-cli --rdb` against KeyMesh writes a file `redis-server`
//! loads with identical data; corrupt, truncated and stream-holding files are refused, and
//! with `rdb-import-unsupported skip` the streams and function libraries of a Redis file are
//! left out by name while every other key imports. No KeyDB binary is available here: files
//! laid out as KeyDB 6.3's `src/rdb.cpp` writes them are built byte by byte (`RdbBytes::keydb_6_3`).

#![allow(clippy::unwrap_used)]

#[path = "../src/persist/rdb/builder.rs"]
mod rdb_builder;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rdb_builder::RdbBytes;
use support::data_node::{info_field, wait_for, wait_ready, DataNode};
use support::{free_port, Conn, Reply, Server};

/// A Debian `redis-server` loading and saving `dir`/`dbfilename`.
struct Redis {
    port: u16,
    child: Child,
}

impl Redis {
    fn start(dir: &Path, dbfilename: &str) -> Redis {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dbfilename", dbfilename, "--dir", dir.to_str().unwrap(), "--enable-debug-command", "yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (scripts/install-deps.sh installs it)");
        wait_for("redis-server to answer", || Conn::try_connect(port).is_some_and(|mut c| c.cmd(&["PING"]) == Reply::Status("PONG".into())));
        Redis { port, child }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

trait TryConnect: Sized {
    fn try_connect(port: u16) -> Option<Self>;
}

impl TryConnect for Conn {
    fn try_connect(port: u16) -> Option<Conn> {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|s| {
            s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
            Conn::over(s)
        })
    }
}

/// Integers at the edges of every listpack, ziplist and intset width, and past them.
const INTEGERS: &[&str] = &[
    "0",
    "-1",
    "12",
    "13",
    "127",
    "128",
    "-2",
    "4095",
    "4096",
    "-4096",
    "-4097",
    "32767",
    "32768",
    "-32768",
    "-32769",
    "8388607",
    "8388608",
    "-8388608",
    "-8388609",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "9223372036854775807",
    "-9223372036854775808",
];

/// Writes every type in every encoding Redis 7.0 has for it. `redis`: the server is Redis
/// (which needs `DEBUG` to make plain quicklist nodes; KeyMesh stores lists one way).
fn fill(c: &mut Conn, redis: bool) {
    let ok = |r: Reply| assert!(!r.is_error(), "{r:?}");
    ok(c.cmd(&["SET", "str", "hello"]));
    ok(c.cmd(&["SET", "empty", ""]));
    for (i, n) in INTEGERS.iter().enumerate() {
        ok(c.cmd(&["SET", &format!("int:{i}"), n]));
    }
    ok(c.cmd(&["SET", "not-canonical", "007"]));
    ok(c.cmd(&["SET", "compressible", &"abc".repeat(7000)]));
    let noise: String = (0..3000u32).map(|i| char::from(b'!' + (i.wrapping_mul(2654435761) >> 27) as u8)).collect();
    ok(c.cmd(&["SET", "incompressible", &noise]));
    ok(c.cmd(&["SET", "ttl:ms", "v", "PX", "100000000"]));
    ok(c.cmd(&["SET", "ttl:s", "v", "EX", "200000"]));
    let mut hash = vec!["HSET", "hash:listpack"];
    let names: Vec<String> = (0..INTEGERS.len()).map(|i| format!("f{i}")).collect();
    for (name, n) in names.iter().zip(INTEGERS) {
        hash.extend([name.as_str(), n]);
    }
    ok(c.cmd(&hash));
    ok(c.cmd(&["HSET", "hash:int-names", "1", "-4096", "8388607", "x"]));
    for i in 0..600 {
        ok(c.cmd(&["HSET", "hash:hashtable", &format!("f{i}"), &format!("v{i}")]));
    }
    ok(c.cmd(&["HSET", "hash:big-value", "f", &"v".repeat(100)]));
    ok(c.cmd(&["SADD", "set:int16", "1", "2", "-5", "32767"]));
    ok(c.cmd(&["SADD", "set:int32", "1", "300000", "-70000"]));
    ok(c.cmd(&["SADD", "set:int64", "1", "5000000000", "-9223372036854775808"]));
    ok(c.cmd(&["SADD", "set:strings", "x", "y"]));
    for i in 0..600 {
        ok(c.cmd(&["SADD", "set:hashtable", &format!("m{i}")]));
    }
    let mut zset = vec!["ZADD", "zset:listpack", "1.5", "a", "-inf", "lo", "inf", "hi", "1e10", "big", "0.1", "tenth"];
    let members: Vec<String> = (0..INTEGERS.len()).map(|i| format!("m{i}")).collect();
    for (m, n) in members.iter().zip(INTEGERS) {
        zset.extend([*n, m.as_str()]);
    }
    ok(c.cmd(&zset));
    for i in 0..200 {
        ok(c.cmd(&["ZADD", "zset:skiplist", &(i - 100).to_string(), &format!("m{i}")]));
    }
    let mut list = vec!["RPUSH", "list:listpack", "a", "", "b"];
    list.extend(INTEGERS);
    ok(c.cmd(&list));
    for i in 0..2000 {
        ok(c.cmd(&["RPUSH", "list:quicklist", &format!("item-{i}")]));
    }
    if redis {
        ok(c.cmd(&["DEBUG", "QUICKLIST-PACKED-THRESHOLD", "100"]));
    }
    ok(c.cmd(&["RPUSH", "list:plain-nodes", "small", &"P".repeat(300), "-2", &"Q".repeat(150)]));
    ok(c.cmd(&["HSET", "hash:ttl", "f", "v"]));
    ok(c.cmd(&["PEXPIRE", "hash:ttl", "100000123"]));
    ok(c.cmd(&["SELECT", "2"]));
    ok(c.cmd(&["SET", "in-db2", "two"]));
    ok(c.cmd(&["SADD", "set:db2", "-4096"]));
    ok(c.cmd(&["SELECT", "15"]));
    ok(c.cmd(&["ZADD", "zset:db15", "-2", "x"]));
    ok(c.cmd(&["SELECT", "0"]));
}

/// Every key of every database, rendered with its type, value and expiry time.
fn dump(c: &mut Conn) -> BTreeMap<(usize, String), String> {
    let mut out = BTreeMap::new();
    for db in 0..16 {
        c.cmd(&["SELECT", &db.to_string()]);
        for key in c.cmd(&["KEYS", "*"]).texts() {
            out.insert((db, key.clone()), render(c, &key));
        }
    }
    c.cmd(&["SELECT", "0"]);
    out
}

fn render(c: &mut Conn, key: &str) -> String {
    let kind = c.cmd(&["TYPE", key]).text();
    let mut value = match kind.as_str() {
        "string" => vec![c.cmd(&["GET", key]).text()],
        "hash" => c.cmd(&["HGETALL", key]).texts().chunks(2).map(|p| format!("{}={}", p[0], p[1])).collect(),
        "set" => c.cmd(&["SMEMBERS", key]).texts(),
        "zset" => c.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]).texts(),
        "list" => c.cmd(&["LRANGE", key, "0", "-1"]).texts(),
        other => vec![format!("unexpected type {other}")],
    };
    if matches!(kind.as_str(), "hash" | "set") {
        value.sort();
    }
    format!("{kind} expires:{} {}", c.cmd(&["PEXPIRETIME", key]).text(), value.join(","))
}

fn assert_same(have: &BTreeMap<(usize, String), String>, want: &BTreeMap<(usize, String), String>) {
    for (key, value) in want {
        assert_eq!(have.get(key), Some(value), "key {key:?}");
    }
    assert_eq!(have.len(), want.len(), "extra keys: {:?}", have.keys().filter(|k| !want.contains_key(*k)).collect::<Vec<_>>());
}

fn encoding(c: &mut Conn, db: usize, key: &str) -> String {
    c.cmd(&["SELECT", &db.to_string()]);
    let e = c.cmd(&["OBJECT", "ENCODING", key]).text();
    c.cmd(&["SELECT", "0"]);
    e
}

/// Imports `file` into a fresh node and returns its keys, with the node (still running).
fn import(node: &DataNode, file: &Path) -> (BTreeMap<(usize, String), String>, Server) {
    std::fs::copy(file, node.snapshot()).unwrap();
    let server = node.start("rdb-import", &[], &[]);
    wait_ready(&server);
    let keys = dump(&mut server.connect());
    (keys, server)
}

#[test]
fn a_dump_rdb_written_by_redis_7_imports_with_identical_data() {
    // Proves migrating by copying a dump.rdb: every type and encoding Redis 7.0 writes comes
    // back with identical values and expiry times, and stays after KeyMesh's own save.
    let node = DataNode::new("rdb-import");
    let source = data_dir_for(&node, "redis");
    let redis = Redis::start(&source, "redis.rdb");
    let mut r = Conn::connect(redis.port);
    fill(&mut r, true);
    let expected = dump(&mut r);
    // The fill reaches every encoding this test is about.
    for (db, key, want) in [
        (0, "int:0", "int"),
        (0, "str", "embstr"),
        (0, "compressible", "raw"),
        (0, "hash:listpack", "listpack"),
        (0, "hash:hashtable", "hashtable"),
        (0, "hash:big-value", "hashtable"),
        (0, "set:int16", "intset"),
        (0, "set:int64", "intset"),
        (0, "set:hashtable", "hashtable"),
        (0, "zset:listpack", "listpack"),
        (0, "zset:skiplist", "skiplist"),
        (0, "list:listpack", "quicklist"),
        (15, "zset:db15", "listpack"),
    ] {
        assert_eq!(encoding(&mut r, db, key), want, "{key}");
    }
    assert_eq!(r.cmd(&["SAVE"]), Reply::Status("OK".into()));
    drop(redis);

    let (got, server) = import(&node, &source.join("redis.rdb"));
    assert_same(&got, &expected);
    let mut c = server.connect();
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_load_keys_loaded"), expected.len().to_string());
    assert!(node.dir.join("dump.rdb.imported").exists(), "the RDB file is kept");
    // The import was saved at once in KeyMesh's format, and a restart loads that.
    assert!(std::fs::read(node.snapshot()).unwrap().starts_with(b"KEYMESH"));
    server.kill();
    let server = node.start("rdb-import", &[], &[]);
    wait_ready(&server);
    assert_same(&dump(&mut server.connect()), &expected);
}

#[test]
fn older_rdb_files_redis_7_still_reads_import_as_redis_reads_them() {
    // Proves the encodings Redis 7 no longer writes (zipmap, ziplist, quicklist 1, RDB
    // versions 3 to 10) decode as Redis 7.0 itself decodes them.
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/rdb");
    for name in ["encodings.rdb", "hash-zipmap.rdb", "hash-ziplist.rdb", "list-quicklist.rdb", "zset-ziplist.rdb"] {
        let node = DataNode::new(&format!("rdb-old-{name}"));
        let source = data_dir_for(&node, "redis");
        std::fs::copy(testdata.join(name), source.join(name)).unwrap();
        let redis = Redis::start(&source, name);
        let expected = dump(&mut Conn::connect(redis.port));
        drop(redis);
        assert!(!expected.is_empty(), "{name}: redis-server loaded keys");
        let (got, _server) = import(&node, &testdata.join(name));
        assert_same(&got, &expected);
    }
}

#[test]
fn redis_cli_rdb_from_keymesh_loads_into_redis_7_with_identical_data() {
    // Proves the way out: `redis-cli --rdb` against KeyMesh (REPLCONF, SYNC) writes a file
    // Debian's redis-server loads with every key, value and expiry time.
    let server = Server::start(&[]);
    let mut c = server.connect();
    fill(&mut c, false);
    let expected = dump(&mut c);
    let dir = support::data_node::data_dir("rdb-export");
    let file = dir.join("export.rdb");
    let out = Command::new("redis-cli").args(["-p", &server.port.to_string(), "--rdb"]).arg(&file).output().expect("redis-cli runs");
    assert!(out.status.success(), "redis-cli --rdb: {}", String::from_utf8_lossy(&out.stderr));
    let redis = Redis::start(&dir, "export.rdb");
    assert_same(&dump(&mut Conn::connect(redis.port)), &expected);
    drop(redis);
    // And it imports back into KeyMesh.
    let node = DataNode::new("rdb-reimport");
    let (again, _server) = import(&node, &file);
    assert_same(&again, &expected);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Copies every key of `from` into the empty `to` with DUMP and RESTORE ... ABSTTL, as a
/// migration tool does key by key.
fn copy_by_dump(from: &mut Conn, to: &mut Conn) {
    for db in 0..16 {
        let select = ["SELECT", &db.to_string()];
        from.cmd(&select);
        to.cmd(&select);
        for key in from.cmd(&["KEYS", "*"]).texts() {
            let Reply::Bulk(payload) = from.cmd(&["DUMP", &key]) else { panic!("DUMP {key}") };
            let deadline = match from.cmd(&["PEXPIRETIME", &key]) {
                Reply::Int(at) if at > 0 => at.to_string(),
                _ => "0".to_string(),
            };
            let reply = to.call(&[b"RESTORE", key.as_bytes(), deadline.as_bytes(), &payload, b"ABSTTL"]).unwrap();
            assert_eq!(reply, Reply::Status("OK".into()), "RESTORE {key} in db {db}");
        }
    }
    from.cmd(&["SELECT", "0"]);
    to.cmd(&["SELECT", "0"]);
}

#[test]
fn dump_payloads_of_every_type_restore_between_redis_7_and_keymesh_both_ways() {
    // Proves DUMP/RESTORE speak Redis's payload format: every type and encoding Redis 7.0
    // dumps (listpack, intset, quicklist, skiplist, integer and LZF strings) restores into
    // KeyMesh with identical values and expiry times, and what KeyMesh dumps restores into
    // Redis 7.0 the same way. A stream's payload is refused by name.
    let dir = support::data_node::data_dir("rdb-dump-payloads");
    let source = Redis::start(&dir, "source.rdb");
    let mut r = Conn::connect(source.port);
    fill(&mut r, true);
    let expected = dump(&mut r);
    let server = Server::start(&[]);
    let mut c = server.connect();
    copy_by_dump(&mut r, &mut c);
    assert_same(&dump(&mut c), &expected);

    let keymesh = Server::start(&[]);
    let mut k = keymesh.connect();
    fill(&mut k, false);
    let expected = dump(&mut k);
    let target = Redis::start(&dir, "target.rdb");
    let mut t = Conn::connect(target.port);
    copy_by_dump(&mut k, &mut t);
    assert_same(&dump(&mut t), &expected);

    assert!(!r.cmd(&["XADD", "events", "1-1", "f", "v"]).is_error());
    let Reply::Bulk(stream) = r.cmd(&["DUMP", "events"]) else { panic!("DUMP of a stream") };
    let reply = c.call(&[&b"RESTORE"[..], b"events", b"0", &stream]).unwrap();
    assert!(matches!(&reply, Reply::Error(e) if e.starts_with("ERR the payload holds a stream")), "{reply:?}");
    assert_eq!(c.cmd(&["EXISTS", "events"]), Reply::Int(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sync_answers_what_a_replica_would_need_with_clear_errors() {
    // Proves KeyMesh does not pretend to be a Redis master: PSYNC and stream options are refused.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["REPLCONF", "capa", "eof", "capa", "psync2"]), Reply::Status("OK".into()));
    assert_eq!(c.cmd(&["REPLCONF", "rdb-only", "1"]), Reply::Status("OK".into()));
    let err = c.cmd(&["REPLCONF", "rdb-filter-only", "functions"]).text();
    assert!(err.contains("not supported"), "{err}");
    let err = c.cmd(&["PSYNC", "?", "-1"]).text();
    assert!(err.contains("PSYNC is not supported"), "{err}");
    assert_eq!(c.cmd(&["SET", "k", "v"]), Reply::Status("OK".into()));
    // SYNC streams the file in Redis's diskless framing: `$EOF:<40-byte mark>\r\n`, the
    // file, the mark; then the connection closes.
    use std::io::{Read, Write};
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    raw.write_all(b"SYNC\r\n").unwrap();
    let mut reply = Vec::new();
    raw.read_to_end(&mut reply).unwrap();
    assert!(reply.starts_with(b"$EOF:") && reply.len() > 5 + 40 + 2 + 40, "{:?}", String::from_utf8_lossy(&reply[..reply.len().min(80)]));
    let (mark, rest) = reply[5..].split_at(40);
    let file = rest.strip_prefix(b"\r\n").and_then(|f| f.strip_suffix(mark)).expect("the file ends with the mark");
    assert!(file.starts_with(b"REDIS0010"));
    let mut keys = 0;
    keymesh_engine::persist::rdb::parse(file, &mut |_| {
        keys += 1;
        Ok(())
    })
    .expect("the file between the marks is a whole RDB file");
    assert_eq!(keys, 1);
}

#[test]
fn an_imported_rdb_reaches_the_peers_and_merges_with_their_writes() {
    // Proves the import is an ordinary set of writes of the importing node: a peer gets every
    // imported key, and the peer's later write to an imported key wins on both nodes.
    let (a, b) = (DataNode::new("rdb-mesh-a"), DataNode::new("rdb-mesh-b"));
    let source = data_dir_for(&a, "redis");
    let redis = Redis::start(&source, "redis.rdb");
    let mut r = Conn::connect(redis.port);
    fill(&mut r, true);
    let expected = dump(&mut r);
    assert_eq!(r.cmd(&["SAVE"]), Reply::Status("OK".into()));
    drop(redis);
    std::fs::copy(source.join("redis.rdb"), a.snapshot()).unwrap();
    let server_b = b.start("node-b", &[&a], &[]);
    let server_a = a.start("node-a", &[&b], &[]);
    wait_ready(&server_a);
    wait_ready(&server_b);
    let mut cb = server_b.connect();
    wait_for("the peer to hold every imported key", || dump(&mut cb) == expected);
    assert_eq!(cb.cmd(&["HSET", "hash:listpack", "f0", "changed-on-b"]), Reply::Int(0));
    let mut ca = server_a.connect();
    wait_for("the peer's write to reach the importer", || ca.cmd(&["HGET", "hash:listpack", "f0"]).text() == "changed-on-b");
}

fn refused(name: &str, prepare: impl FnOnce(&mut Conn), damage: impl FnOnce(&Path), message: &str) {
    let node = DataNode::new(name);
    let source = data_dir_for(&node, "redis");
    let redis = Redis::start(&source, "redis.rdb");
    let mut r = Conn::connect(redis.port);
    for i in 0..100 {
        r.cmd(&["SET", &format!("key{i}"), "value"]);
    }
    prepare(&mut r);
    assert_eq!(r.cmd(&["SAVE"]), Reply::Status("OK".into()));
    drop(redis);
    std::fs::copy(source.join("redis.rdb"), node.snapshot()).unwrap();
    damage(&node.snapshot());
    let server = node.start(name, &[], &[]);
    wait_ready(&server);
    assert_eq!(server.connect().cmd(&["DBSIZE"]), Reply::Int(0), "nothing half-imported");
    let log = node.log();
    assert!(log.contains("refused RDB file") && log.contains(message), "the log says why ({message}): {log}");
    let kept = std::fs::read_dir(&node.dir).unwrap().filter_map(|e| e.ok()).any(|e| e.file_name().to_string_lossy().starts_with("dump.rdb.corrupt-"));
    assert!(kept, "the refused file is kept aside");
}

#[test]
fn a_corrupt_rdb_is_refused_by_its_checksum() {
    refused(
        "rdb-corrupt",
        |_| {},
        |path| {
            let mut bytes = std::fs::read(path).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x20;
            std::fs::write(path, bytes).unwrap();
        },
        "checksum mismatch",
    );
}

#[test]
fn a_truncated_rdb_is_refused() {
    refused(
        "rdb-truncated",
        |_| {},
        |path| {
            let bytes = std::fs::read(path).unwrap();
            std::fs::write(path, &bytes[..bytes.len() - 12]).unwrap();
        },
        "truncated",
    );
}

#[test]
fn an_rdb_holding_a_stream_is_refused_naming_the_key() {
    refused(
        "rdb-stream",
        |r| {
            r.cmd(&["SELECT", "3"]);
            r.cmd(&["XADD", "events", "*", "field", "value"]);
        },
        |_| {},
        "key \"events\" in database 3 is a stream",
    );
}

#[test]
fn an_rdb_holding_a_function_library_is_refused_by_default() {
    refused(
        "rdb-function",
        |r| assert!(!r.cmd(&["FUNCTION", "LOAD", LIBRARY]).is_error()),
        |_| {},
        "function library \"mylib\", which an import does not load",
    );
}

const LIBRARY: &str = "#!lua name=mylib\nredis.register_function('myfunc', function(keys, args) return 1 end)";

#[test]
fn skip_mode_leaves_streams_and_function_libraries_out_by_name_and_imports_the_rest() {
    // Proves `rdb-import-unsupported skip` against a file redis-server 7.0 writes: streams
    // (type 19) spanning a hundred listpack nodes, with consumer groups, pending entries,
    // consumers without any and deleted entries, an empty stream with a group, a stream with
    // an expiry in another database, and a function library, all among the keys of every
    // type and encoding `fill` writes. Each is parsed past exactly (the keys after it come
    // out identical), reported in the log by name, type and database, and counted in INFO.
    let node = DataNode::new("rdb-skip");
    let source = data_dir_for(&node, "redis");
    let redis = Redis::start(&source, "redis.rdb");
    let mut r = Conn::connect(redis.port);
    let ok = |r: Reply| assert!(!r.is_error(), "{r:?}");
    ok(r.cmd(&["CONFIG", "SET", "stream-node-max-entries", "10"]));
    fill(&mut r, true);
    for i in 1..=1000 {
        ok(r.cmd(&["XADD", "stream:big", &format!("1-{i}"), "field", &format!("value {i}"), "n", &i.to_string()]));
    }
    ok(r.cmd(&["XGROUP", "CREATE", "stream:big", "g1", "0"]));
    ok(r.cmd(&["XREADGROUP", "GROUP", "g1", "alice", "COUNT", "5", "STREAMS", "stream:big", ">"]));
    ok(r.cmd(&["XREADGROUP", "GROUP", "g1", "bob", "COUNT", "3", "STREAMS", "stream:big", ">"]));
    assert_eq!(r.cmd(&["XACK", "stream:big", "g1", "1-1"]), Reply::Int(1));
    ok(r.cmd(&["XGROUP", "CREATE", "stream:big", "g2", "$"]));
    ok(r.cmd(&["XGROUP", "CREATECONSUMER", "stream:big", "g2", "carol"]));
    assert_eq!(r.cmd(&["XDEL", "stream:big", "1-500"]), Reply::Int(1));
    ok(r.cmd(&["XGROUP", "CREATE", "stream:empty", "g", "$", "MKSTREAM"]));
    ok(r.cmd(&["SELECT", "2"]));
    ok(r.cmd(&["XADD", "stream:small", "5-1", "a", "1"]));
    ok(r.cmd(&["PEXPIRE", "stream:small", "100000000"]));
    ok(r.cmd(&["SELECT", "0"]));
    ok(r.cmd(&["FUNCTION", "LOAD", LIBRARY]));
    assert_eq!(encoding(&mut r, 0, "stream:big"), "stream");
    let mut expected = dump(&mut r);
    expected.retain(|(_, key), _| !key.starts_with("stream:"));
    assert_eq!(r.cmd(&["SAVE"]), Reply::Status("OK".into()));
    drop(redis);

    std::fs::copy(source.join("redis.rdb"), node.snapshot()).unwrap();
    let server = node.start("rdb-skip", &[], &["--rdb-import-unsupported", "skip", "--loglevel", "verbose"]);
    wait_ready(&server);
    let mut c = server.connect();
    assert_same(&dump(&mut c), &expected);
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_load_keys_skipped"), "3");
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_load_keys_loaded"), expected.len().to_string());
    assert_eq!(c.cmd(&["CONFIG", "GET", "rdb-import-unsupported"]).texts(), ["rdb-import-unsupported", "skip"]);
    let log = node.log();
    for (key, db, kind) in [
        ("stream:big", 0, "stream (999 entries, 2 consumer groups, 7 pending)"),
        ("stream:empty", 0, "stream (0 entries, 1 consumer groups, 0 pending)"),
        ("stream:small", 2, "stream (1 entries, 0 consumer groups, 0 pending)"),
    ] {
        let line = log.lines().find(|l| l.contains(&format!("key={key} "))).unwrap_or_else(|| panic!("no log line for {key}: {log}"));
        assert!(line.contains("skipped a key") && line.contains(&format!("db={db} ")) && line.contains(&format!("kind={kind}")), "{line}");
    }
    assert!(log.contains("skipped a section") && log.contains("what=function library \"mylib\""), "{log}");
    assert!(log.contains("skipped=3 sections_skipped=1"), "{log}");
}

/// An RDB file laid out as KeyDB 6.3 writes it (KeyDB `src/rdb.cpp` at tag v6.3.4): header
/// `REDIS0009` (`RDB_VERSION 9` in `src/rdb.h`: KeyDB 6.3 is Redis 6.2's format), the AUX
/// fields of `rdbSaveInfoAuxFields` (lines 1203-1238), per database `SELECTDB` and `RESIZEDB`
/// (`rdbSaveRio`, lines 1333-1346), per key (`rdbSaveKeyValuePair`, lines 1133-1199): the
/// expiry, an `mvcc-tstamp` AUX field on an active replica, the type, key and value in Redis
/// 6.2's encodings (`rdbSaveObjectType`, lines 676-716: ziplists, intsets, quicklists of
/// ziplists), then one `keydb-subexpire-key`/`-when` AUX pair per member expiry; after the
/// databases the script cache as `lua` AUX fields (lines 1380-1390); `EOF`; the CRC-64
/// (`RdbBytes::finish`, the builder the engine's RDB unit tests use too).
impl RdbBytes {
    fn keydb_6_3() -> RdbBytes {
        let mut f = RdbBytes::header(9);
        for (name, value) in [("redis-ver", "6.3.4"), ("redis-bits", "64"), ("ctime", "1764547200"), ("used-mem", "2245584")] {
            f.aux(name, value);
        }
        // With replication info (`rsi`), on an active replica.
        f.aux("repl-stream-db", "0").aux("repl-id", &"8".repeat(40)).aux("repl-offset", "1234");
        f.aux("repl-masters", &format!("{}:0:10.0.0.2:6379:0;", "9".repeat(40)));
        f.aux("aof-preamble", "0");
        f
    }

    /// A key's prologue: its expiry (ms, little-endian) and its MVCC timestamp.
    fn key(&mut self, kind: u8, name: &str, expire_ms: Option<u64>) -> &mut Self {
        if let Some(at) = expire_ms {
            self.op(252).ms(at);
        }
        self.aux("mvcc-tstamp", "1871279587429515264");
        self.op(kind).s(name.as_bytes())
    }

    fn subexpire(&mut self, member: &str, when_ms: u64) -> &mut Self {
        self.aux("keydb-subexpire-key", member).aux("keydb-subexpire-when", &when_ms.to_string())
    }
}

/// A ziplist as Redis 6.2's `ziplistPush` builds it: integers in their smallest encoding
/// (immediate 0..12, int8, int16), other entries as 6-bit-length strings.
fn ziplist(items: &[&str]) -> Vec<u8> {
    let (mut body, mut prev, mut tail) = (Vec::new(), 0usize, 10usize);
    for item in items {
        let start = body.len();
        tail = 10 + start;
        assert!(prev < 254);
        body.push(prev as u8);
        match item.parse::<i64>().ok().filter(|n| n.to_string() == *item) {
            Some(n @ 0..=12) => body.push(0xf1 + n as u8),
            Some(n) if i8::try_from(n).is_ok() => body.extend_from_slice(&[0xfe, n as u8]),
            Some(n) if i16::try_from(n).is_ok() => body.extend([0xc0].into_iter().chain((n as i16).to_le_bytes())),
            _ => {
                assert!(item.len() < 64);
                body.push(item.len() as u8);
                body.extend_from_slice(item.as_bytes());
            }
        }
        prev = body.len() - start;
    }
    let mut out = ((10 + body.len() + 1) as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&(tail as u32).to_le_bytes());
    out.extend_from_slice(&(items.len() as u16).to_le_bytes());
    out.extend_from_slice(&body);
    out.push(0xff);
    out
}

/// The keys every KeyDB file below holds, and what KeyMesh must show for them.
fn keydb_keys(f: &mut RdbBytes, far: u64) -> BTreeMap<(usize, String), String> {
    f.op(254).len(0).op(251).len(9).len(2);
    f.key(0, "greeting", None).s(b"hello");
    f.key(0, "counter", None).op(0xc1).0.extend_from_slice(&1000i16.to_le_bytes());
    f.key(0, "session", Some(far)).s(b"token");
    f.key(0, "old", Some(1000)).s(b"expired in 1970");
    f.key(13, "user:1", None).s(&ziplist(&["name", "ada", "age", "36"]));
    let intset = [&2u32.to_le_bytes()[..], &3u32.to_le_bytes(), &1i16.to_le_bytes(), &2i16.to_le_bytes(), &300i16.to_le_bytes()].concat();
    f.key(11, "ids", None).s(&intset);
    f.key(2, "tags", None).len(3).s(b"a").s(b"b").s(b"c");
    f.subexpire("b", 2000); // EXPIREMEMBER tags b, long passed: KeyDB would have expired it
    f.key(12, "board", Some(far)).s(&ziplist(&["alice", "1.5", "bob", "3"]));
    f.key(14, "queue", None).len(2).s(&ziplist(&["a", "b", "c"])).s(&ziplist(&["d", "7"]));
    f.op(254).len(5).op(251).len(1).len(0);
    f.key(4, "h", None).len(1).s(b"f").s(b"v");
    [
        ((0, "greeting"), "string expires:-1 hello".to_string()),
        ((0, "counter"), "string expires:-1 1000".into()),
        ((0, "session"), format!("string expires:{far} token")),
        ((0, "user:1"), "hash expires:-1 age=36,name=ada".into()),
        ((0, "ids"), "set expires:-1 1,2,300".into()),
        ((0, "tags"), "set expires:-1 a,c".into()),
        ((0, "board"), format!("zset expires:{far} alice,1.5,bob,3")),
        ((0, "queue"), "list expires:-1 a,b,c,d,7".into()),
        ((5, "h"), "hash expires:-1 f=v".into()),
    ]
    .into_iter()
    .map(|((db, k), v)| ((db, k.to_string()), v))
    .collect()
}

#[test]
fn a_keydb_6_3_rdb_imports_with_its_mvcc_timestamps_and_expired_members() {
    // Proves a file laid out as KeyDB 6.3 writes it on an active replica (RDB version 9,
    // KeyDB's AUX fields, an MVCC timestamp before every key, Redis 6.2's compact encodings,
    // a member expiry that has passed, the script cache) imports with every key, value and
    // expiry time, the expired member left out as KeyDB would have expired it.
    let far = 4_000_000_000_000;
    let mut f = RdbBytes::keydb_6_3();
    let expected = keydb_keys(&mut f, far);
    f.aux("lua", "return redis.call('GET', KEYS[1])");
    let node = DataNode::new("rdb-keydb");
    std::fs::write(node.snapshot(), f.finish()).unwrap();
    let server = node.start("rdb-keydb", &[], &["--loglevel", "verbose"]);
    wait_ready(&server);
    let mut c = server.connect();
    assert_same(&dump(&mut c), &expected);
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_load_keys_expired"), "1");
    let log = node.log();
    assert!(log.contains("redis_version=\"6.3.4\"") && log.contains("rdb_version=9") && log.contains("members_expired=1"), "{log}");
}

#[test]
fn keydb_cron_jobs_and_pending_member_expiries_are_refused_or_skipped_by_name() {
    // Proves what KeyDB 6.3 writes that KeyMesh has no type for: a KEYDB.CRON job
    // (`RDB_TYPE_CRON`, `rdbSaveObject` lines 1078-1088) and a hash with a member expiry
    // still to come refuse the file by default, and with `rdb-import-unsupported skip` are
    // left out by name while the other keys import.
    let far = 4_000_000_000_000;
    let build = || {
        let mut f = RdbBytes::keydb_6_3();
        let expected = keydb_keys(&mut f, far);
        f.key(64, "nightly", None).s(b"redis.call('INCR', KEYS[1])");
        f.0.extend_from_slice(&1_764_547_200_000u64.to_le_bytes());
        f.0.extend_from_slice(&86_400_000u64.to_le_bytes());
        f.len(1).s(b"runs").len(0);
        f.key(4, "cache", None).len(2).s(b"fresh").s(b"1").s(b"stale").s(b"2");
        f.subexpire("fresh", far);
        (f.finish(), expected)
    };
    let (file, _) = build();
    let node = DataNode::new("rdb-keydb-refuse");
    std::fs::write(node.snapshot(), &file).unwrap();
    let server = node.start("rdb-keydb-refuse", &[], &[]);
    wait_ready(&server);
    assert_eq!(server.connect().cmd(&["DBSIZE"]), Reply::Int(0), "nothing half-imported");
    assert!(node.log().contains("key \"nightly\" in database 5 is a KeyDB cron job (KEYDB.CRON)"), "{}", node.log());

    let (file, expected) = build();
    let node = DataNode::new("rdb-keydb-skip");
    std::fs::write(node.snapshot(), &file).unwrap();
    let server = node.start("rdb-keydb-skip", &[], &["--rdb-import-unsupported", "skip"]);
    wait_ready(&server);
    let mut c = server.connect();
    assert_same(&dump(&mut c), &expected);
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_load_keys_skipped"), "2");
    let log = node.log();
    assert!(log.contains("key=nightly db=5 kind=KeyDB cron job (KEYDB.CRON)"), "{log}");
    assert!(log.contains("key=cache db=5 kind=hash with member expiries (KeyDB EXPIREMEMBER: \"fresh\" expires at 4000000000000 ms, 1 in all)"), "{log}");
}

/// A directory next to the node's, removed with it.
fn data_dir_for(node: &DataNode, name: &str) -> PathBuf {
    let dir = node.dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
