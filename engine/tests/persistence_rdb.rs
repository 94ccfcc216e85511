//! Black-box tests of RDB import and export against Debian's `redis-server` 7.0 (package
//! redis-server, scripts/install-deps.sh): a `dump.rdb` it writes with every type and encoding
//! (listpack integers of every width, intsets of every width, quicklists with packed and plain
//! nodes, hash tables, skiplists, integer and LZF strings, expiries, several databases) and the
//! older files in `testdata/rdb` it still reads are imported by KeyMesh with identical keys,
//! values and expiry times; `redis-cli --rdb` against KeyMesh writes a file `redis-server`
//! loads with identical data; corrupt, truncated and stream-holding files are refused.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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
    let Reply::Bulk(file) = c.cmd(&["SYNC"]) else { panic!("SYNC answers a bulk") };
    assert!(file.starts_with(b"REDIS0010"));
    assert!(c.read().is_none(), "the connection closes after the file");
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

/// A directory next to the node's, removed with it.
fn data_dir_for(node: &DataNode, name: &str) -> PathBuf {
    let dir = node.dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
