//! Black-box tests of snapshots: `SAVE`, `BGSAVE`, `LASTSAVE`, `INFO persistence`, the save
//! schedule, restarts from a snapshot (alone and in a mesh), loading, and refused files.

#![allow(clippy::unwrap_used)]

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::data_node::{info_field, metric, wait_for, wait_ready, DataNode as Node};
use support::{Conn, Reply};

fn bgsave_done(conn: &mut Conn) {
    wait_for("the background save to finish", || info_field(conn, "persistence", "rdb_bgsave_in_progress") == "0");
}

#[test]
fn save_bgsave_lastsave_and_info_persistence_report_what_was_written() {
    // Proves SAVE and BGSAVE write the snapshot at dir/dbfilename, and that LASTSAVE, INFO
    // persistence (Redis's field names) and the metrics report it.
    let node = Node::new("info");
    let server = node.start("info", &[], &["--dbfilename", "snap.km"]);
    let mut c = server.connect();
    let started = c.cmd(&["LASTSAVE"]);
    for i in 0..100 {
        // Half of them with a TTL: a `SET … EX` is one change, as in Redis (value and TTL are
        // one write).
        match i % 2 {
            0 => c.cmd(&["SET", &format!("k{i}"), "v"]),
            _ => c.cmd(&["SET", &format!("k{i}"), "v", "EX", "1000"]),
        };
    }
    assert_eq!(info_field(&mut c, "persistence", "rdb_changes_since_last_save"), "100");
    assert_eq!(info_field(&mut c, "persistence", "rdb_saves"), "0");
    assert_eq!(c.cmd(&["SAVE"]), Reply::Status("OK".into()));
    let bytes = std::fs::read(node.dir.join("snap.km")).unwrap();
    assert!(bytes.starts_with(b"KEYMESH-SNAP"), "the file is a KeyMesh snapshot");
    assert_eq!(info_field(&mut c, "persistence", "rdb_changes_since_last_save"), "0");
    assert_eq!(info_field(&mut c, "persistence", "rdb_saves"), "1");
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_bgsave_status"), "ok");
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_save_keys"), "100");
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_save_bytes"), bytes.len().to_string());
    assert_eq!(info_field(&mut c, "persistence", "loading"), "0");
    let Reply::Int(last) = c.cmd(&["LASTSAVE"]) else { panic!("LASTSAVE is an integer") };
    assert!(last >= started.text().parse::<i64>().unwrap());
    assert_eq!(metric(&server, "keymesh_snapshot_last_bytes"), bytes.len() as f64);
    assert_eq!(metric(&server, "keymesh_snapshot_last_status"), 1.0);

    c.cmd(&["SET", "after", "x"]);
    assert_eq!(c.cmd(&["BGSAVE"]), Reply::Status("Background saving started".into()));
    bgsave_done(&mut c);
    assert_eq!(info_field(&mut c, "persistence", "rdb_saves"), "2");
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_save_keys"), "101");
    assert_eq!(metric(&server, "keymesh_snapshots_total{result=\"ok\"}"), 2.0);
    assert!(c.cmd(&["BGSAVE", "nonsense"]).is_error());
    let leftovers: Vec<_> =
        std::fs::read_dir(&node.dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("temp-")).collect();
    assert!(leftovers.is_empty(), "no temporary file is left behind: {leftovers:?}");
}

#[test]
fn a_save_to_a_missing_directory_fails_clearly_and_is_reported() {
    // Proves a failed save is an error to the client, `err` in INFO and 0 in the status metric.
    let node = Node::new("faildir");
    let server = node.start("faildir", &[], &[]);
    let mut c = server.connect();
    c.cmd(&["SET", "k", "v"]);
    std::fs::remove_dir_all(&node.dir).unwrap();
    let reply = c.cmd(&["SAVE"]);
    assert!(reply.is_error() && reply.text().contains("failed to write snapshot"), "{reply:?}");
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_bgsave_status"), "err");
    assert_eq!(metric(&server, "keymesh_snapshot_last_status"), 0.0);
    assert_eq!(metric(&server, "keymesh_snapshots_total{result=\"failed\"}"), 1.0);
}

#[test]
fn a_restart_restores_every_type_with_its_ttl() {
    // Proves a snapshot carries strings, counters, hashes, sets, sorted sets, lists, expiries
    // and several databases, and that a killed node starts from it.
    let node = Node::new("types");
    let server = node.start("types", &[], &[]);
    let mut c = server.connect();
    c.cmd(&["SET", "s", "hello"]);
    for _ in 0..5 {
        c.cmd(&["INCR", "n"]);
    }
    c.cmd(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);
    c.cmd(&["HDEL", "h", "b"]);
    c.cmd(&["SADD", "set", "x", "y", "z"]);
    c.cmd(&["SREM", "set", "y"]);
    c.cmd(&["ZADD", "z", "1", "one", "2", "two"]);
    c.cmd(&["RPUSH", "l", "a", "b", "c"]);
    c.cmd(&["SET", "ttl", "v", "EX", "1000"]);
    c.cmd(&["SET", "gone", "v"]);
    c.cmd(&["DEL", "gone"]);
    c.cmd(&["SELECT", "3"]);
    c.cmd(&["SET", "in3", "three"]);
    assert_eq!(c.cmd(&["SAVE"]), Reply::Status("OK".into()));
    server.kill();

    let server = node.start("types", &[], &[]);
    wait_ready(&server);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["GET", "s"]).text(), "hello");
    assert_eq!(c.cmd(&["INCR", "n"]), Reply::Int(6), "the counter goes on from its saved total");
    let mut fields = c.cmd(&["HGETALL", "h"]).texts();
    fields.sort();
    assert_eq!(fields, vec!["1", "3", "a", "c"]);
    let mut members = c.cmd(&["SMEMBERS", "set"]).texts();
    members.sort();
    assert_eq!(members, vec!["x", "z"]);
    assert_eq!(c.cmd(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]).texts(), vec!["one", "1", "two", "2"]);
    assert_eq!(c.cmd(&["LRANGE", "l", "0", "-1"]).texts(), vec!["a", "b", "c"]);
    let Reply::Int(ttl) = c.cmd(&["TTL", "ttl"]) else { panic!("TTL is an integer") };
    assert!((990..=1000).contains(&ttl), "the expiry is kept as an absolute deadline: {ttl}");
    assert_eq!(c.cmd(&["EXISTS", "gone"]), Reply::Int(0));
    c.cmd(&["SELECT", "3"]);
    assert_eq!(c.cmd(&["GET", "in3"]).text(), "three");
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_load_keys_loaded"), "8");
    assert_eq!(info_field(&mut c, "persistence", "rdb_changes_since_last_save"), "1", "loading is not a change; the INCR is");
}

#[test]
fn writes_racing_a_bgsave_are_served_and_every_write_acknowledged_before_it_is_in_it() {
    // Proves BGSAVE neither stops writes nor loses them: a writer keeps being answered while
    // the snapshot of a large keyspace is written, every write acknowledged before BGSAVE was
    // sent is in the file, and a second save holds the racing writes too.
    let node = Node::new("race");
    let server = node.start("race", &[], &[]);
    let mut c = server.connect();
    populate(&mut c, "bulk", 300_000, 100);
    let port = server.port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut w = Conn::connect(port);
            let mut acked = Vec::new();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(w.cmd(&["SET", &format!("w{i}"), &i.to_string()]), Reply::Status("OK".into()));
                acked.push((i, Instant::now()));
                i += 1;
            }
            acked
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let sent = Instant::now();
    assert_eq!(c.cmd(&["BGSAVE"]), Reply::Status("Background saving started".into()));
    let mut during = 0;
    let mut polls = 0;
    while info_field(&mut c, "persistence", "rdb_bgsave_in_progress") == "1" {
        polls += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writer.join().unwrap();
    let finished = Instant::now();
    for (_, at) in &acked {
        if *at > sent && *at < finished {
            during += 1;
        }
    }
    assert!(polls > 0 && during > 0, "writes were answered while the snapshot was written ({during} during {polls} polls)");
    let before: Vec<u64> = acked.iter().filter(|(_, at)| *at < sent).map(|(i, _)| *i).collect();
    assert!(!before.is_empty());
    server.kill();

    let server = node.start("race", &[], &[]);
    wait_ready(&server);
    let mut c = server.connect();
    for i in &before {
        assert_eq!(c.cmd(&["GET", &format!("w{i}")]).text(), i.to_string(), "write w{i}, acknowledged before BGSAVE, is in the snapshot");
    }
    assert!(c.cmd(&["DBSIZE"]).text().parse::<usize>().unwrap() >= 300_000 + before.len());
    // Writes that raced the scan are either in it or were not; the next save has them all.
    let last = acked.last().unwrap().0;
    c.cmd(&["SET", &format!("w{last}"), &last.to_string()]);
    assert_eq!(c.cmd(&["SAVE"]), Reply::Status("OK".into()));
}

/// Writes `n` keys of `size` bytes, pipelined.
fn populate(c: &mut Conn, prefix: &str, n: usize, size: usize) {
    let value = "x".repeat(size);
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let mut out = Vec::new();
        for i in chunk {
            let key = format!("{prefix}:{i}");
            out.extend(support::encode(&[b"SET", key.as_bytes(), value.as_bytes()]));
        }
        c.send_raw(&out).unwrap();
        for _ in chunk {
            assert_eq!(c.read().unwrap(), Reply::Status("OK".into()));
        }
    }
}

#[test]
fn the_save_schedule_saves_after_enough_changes_and_time() {
    // Proves `save <seconds> <changes>`: no save without changes, a save once both are reached,
    // and CONFIG SET changes the schedule live.
    let node = Node::new("schedule");
    let server = node.start("schedule", &[], &["--save", "1", "3"]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["CONFIG", "GET", "save"]).texts(), vec!["save", "1 3"]);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(info_field(&mut c, "persistence", "rdb_saves"), "0", "no changes: no save");
    c.cmd(&["SET", "a", "1"]);
    c.cmd(&["SET", "b", "1"]);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(info_field(&mut c, "persistence", "rdb_saves"), "0", "two changes are fewer than three");
    c.cmd(&["SET", "c", "1"]);
    wait_for("the scheduled save", || info_field(&mut c, "persistence", "rdb_saves") == "1");
    assert!(node.snapshot().exists());
    assert_eq!(c.cmd(&["CONFIG", "SET", "save", ""]), Reply::Status("OK".into()));
    c.cmd(&["SET", "d", "1"]);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(info_field(&mut c, "persistence", "rdb_saves"), "1", "save \"\" turns the schedule off");
    assert!(c.cmd(&["CONFIG", "SET", "save", "10"]).is_error());
}

#[test]
fn a_node_loading_its_snapshot_answers_loading_and_is_not_ready() {
    // Proves loading happens before serving: while the snapshot is read (here from a pipe the
    // test fills when it chooses), commands get LOADING, INFO says loading:1 and /readyz 503.
    let node = Node::new("loading");
    let server = node.start("loading", &[], &[]);
    let mut c = server.connect();
    c.cmd(&["SET", "k", "v"]);
    c.cmd(&["SAVE"]);
    server.kill();
    let bytes = std::fs::read(node.snapshot()).unwrap();
    std::fs::remove_file(node.snapshot()).unwrap();
    let status = Command::new("mkfifo").arg(node.snapshot()).status().unwrap();
    assert!(status.success());

    let server = node.start_loading("loading", &[], &[]);
    let mut c = server.connect();
    assert_eq!(info_field(&mut c, "persistence", "loading"), "1");
    let reply = c.cmd(&["GET", "k"]);
    assert!(reply.is_error() && reply.text().starts_with("LOADING"), "{reply:?}");
    assert!(c.cmd(&["SAVE"]).text().starts_with("LOADING"));
    // What a client library sends on connect works while loading, as in Redis.
    assert_eq!(c.cmd(&["SELECT", "0"]), Reply::Status("OK".into()));
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", "app"]), Reply::Status("OK".into()));
    assert!(!c.cmd(&["HELLO", "2"]).is_error());
    assert_eq!(server.http_get("/readyz").0, 503);
    assert_eq!(metric(&server, "keymesh_snapshot_loading"), 1.0);
    std::fs::OpenOptions::new().write(true).open(node.snapshot()).unwrap().write_all(&bytes).unwrap();
    wait_ready(&server);
    assert_eq!(c.cmd(&["GET", "k"]).text(), "v");
    assert_eq!(info_field(&mut c, "persistence", "loading"), "0");
}

fn corrupt_and_restart(name: &str, damage: impl Fn(&Path)) {
    let node = Node::new(name);
    let server = node.start(name, &[], &[]);
    let mut c = server.connect();
    populate(&mut c, "k", 1000, 10);
    c.cmd(&["SAVE"]);
    server.kill();
    damage(&node.snapshot());

    let server = node.start(name, &[], &[]);
    wait_ready(&server);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["DBSIZE"]), Reply::Int(0), "a refused snapshot loads nothing, not a part");
    let log = node.log();
    assert!(log.contains("snapshot refused: starting empty and resyncing from the mesh"), "the log says why: {log}");
    let moved: Vec<String> = std::fs::read_dir(&node.dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(moved.iter().any(|n| n.starts_with("dump.rdb.corrupt-")), "the refused file is kept aside: {moved:?}");
    assert!(!node.snapshot().exists());
    c.cmd(&["SET", "fresh", "1"]);
    assert_eq!(c.cmd(&["SAVE"]), Reply::Status("OK".into()));
}

#[test]
fn a_corrupt_snapshot_is_refused_and_the_node_starts_empty() {
    // Proves a flipped byte in the middle of the file is found by its checksum.
    corrupt_and_restart("corrupt", |path| {
        let mut bytes = std::fs::read(path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(path, bytes).unwrap();
    });
}

#[test]
fn a_truncated_snapshot_is_refused_and_the_node_starts_empty() {
    // Proves a file cut short (a full disk, a crash of whatever copied it) is found.
    corrupt_and_restart("truncated", |path| {
        let bytes = std::fs::read(path).unwrap();
        std::fs::write(path, &bytes[..bytes.len() - 20]).unwrap();
    });
}

#[test]
fn with_refuse_start_a_corrupt_snapshot_stops_the_server() {
    // Proves `snapshot-load-error refuse-start`: the server exits non-zero, naming the file.
    let node = Node::new("refuse");
    std::fs::write(node.snapshot(), b"KEYMESH-SNAP\r\n\x1a\ngarbage").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_keymesh-server"))
        .args(["--port", &node.port.to_string(), "--bind", "127.0.0.1", "--metrics-port", "0", "--dir", node.dir()])
        .args(["--snapshot-load-error", "refuse-start"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("refused snapshot") && stderr.contains("dump.rdb"), "{stderr}");
    assert!(node.snapshot().exists(), "the file is left where it was");
}

#[test]
fn a_truncated_redis_rdb_file_is_refused_as_such_and_kept() {
    // Proves an RDB file at dir/dbfilename is recognised and checked as one (import:
    // tests/persistence_rdb.rs), and a bad one moved aside rather than overwritten.
    let node = Node::new("rdb");
    std::fs::write(node.snapshot(), b"REDIS0011\xfa\x09redis-ver\x057.0.0\xff").unwrap();
    let server = node.start("rdb", &[], &[]);
    wait_ready(&server);
    assert!(node.log().contains("refused RDB file") && node.log().contains("truncated"), "{}", node.log());
    assert!(!node.snapshot().exists());
}
