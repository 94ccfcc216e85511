//! Black-box tests of snapshots in a mesh: a node restored from its snapshot merges with peers
//! that moved on (deletes, counters, stale snapshots), and a whole mesh killed at once comes
//! back from its nodes' snapshots.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::data_node::{info_field, metric, wait_for, wait_ready, DataNode};
use support::{Conn, Reply, Server};

/// Starts every node with all the others as peers; waits until every node is ready.
fn start_mesh(nodes: &[DataNode], extra: &[&str]) -> Vec<Server> {
    let servers: Vec<Server> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let peers: Vec<&DataNode> = nodes.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, n)| n).collect();
            node.start(&format!("node-{i}"), &peers, extra)
        })
        .collect();
    for server in &servers {
        wait_ready(server);
    }
    servers
}

fn links_up(conn: &mut Conn) {
    wait_for("every link up", || info_field(conn, "replication", "master_global_link_status") == "up");
}

fn get(conn: &mut Conn, key: &str) -> Reply {
    conn.cmd(&["GET", key])
}

#[test]
fn a_restored_node_merges_with_peers_that_deleted_and_counted_after_its_snapshot() {
    // Proves versions, tombstones and counter contributions survive a snapshot: a node restored
    // from a snapshot taken before a peer deleted a key does not bring the key back, a key it
    // deleted before its snapshot stays deleted though a peer restored from an older snapshot
    // still holds it, and counters count every increment exactly once.
    let nodes: Vec<DataNode> = (0..2).map(|i| DataNode::new(&format!("merge{i}"))).collect();
    let mut servers = start_mesh(&nodes, &[]);
    let mut a = servers[0].connect();
    let mut b = servers[1].connect();
    links_up(&mut a);
    links_up(&mut b);
    a.cmd(&["SET", "deleted-by-b", "v"]);
    a.cmd(&["SET", "deleted-by-a", "v"]);
    for _ in 0..5 {
        a.cmd(&["INCR", "n"]);
    }
    for _ in 0..3 {
        b.cmd(&["INCR", "n"]);
    }
    wait_for("both nodes to count 8", || get(&mut a, "n").text() == "8" && get(&mut b, "n").text() == "8");
    // b's snapshot still holds deleted-by-a; then a deletes it and saves.
    assert_eq!(b.cmd(&["SAVE"]), Reply::Status("OK".into()));
    a.cmd(&["DEL", "deleted-by-a"]);
    wait_for("the delete to reach b", || b.cmd(&["EXISTS", "deleted-by-a"]) == Reply::Int(0));
    assert_eq!(a.cmd(&["SAVE"]), Reply::Status("OK".into()));
    let server_a = servers.remove(0);
    server_a.kill();

    // While a is down, b deletes a key a's snapshot holds and counts on.
    b.cmd(&["DEL", "deleted-by-b"]);
    b.cmd(&["INCRBY", "n", "2"]);
    let server_a = nodes[0].start("node-0", &[&nodes[1]], &[]);
    wait_ready(&server_a);
    let mut a = server_a.connect();
    links_up(&mut a);
    wait_for("a to take b's counts", || get(&mut a, "n").text() == "10");
    assert_eq!(get(&mut a, "deleted-by-b"), Reply::Nil, "b's delete after a's snapshot wins over the snapshot's older value");
    assert_eq!(get(&mut b, "deleted-by-b"), Reply::Nil, "a's restored value does not come back on b");

    // Every tombstone is acknowledged by now (frontiers trail the clock by 5 s, see
    // mesh/frontier.rs), but b's snapshot predates both deletes: the tombstones stay on a,
    // because b acknowledges only up to the snapshot it would restart from.
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(metric(&server_a, "keymesh_tombstones"), 2.0, "a keeps the tombstones b's snapshot needs");
    // Now b restarts from its older snapshot, which still holds both deleted keys.
    servers.remove(0).kill();
    let server_b = nodes[1].start("node-1", &[&nodes[0]], &[]);
    wait_ready(&server_b);
    let mut b = server_b.connect();
    links_up(&mut b);
    assert_eq!(a.cmd(&["INCR", "n"]), Reply::Int(11));
    wait_for("b to take a's latest count", || get(&mut b, "n").text() == "11");
    assert_eq!(get(&mut b, "deleted-by-a"), Reply::Nil, "a's tombstone, restored from its snapshot, dominates b's older value");
    assert_eq!(get(&mut a, "deleted-by-a"), Reply::Nil);
    assert_eq!(get(&mut b, "deleted-by-b"), Reply::Nil, "b's own delete, newer than its snapshot, comes back to it from a");
    // Once b saves past the deletes, nothing needs the tombstones any more.
    assert_eq!(b.cmd(&["SAVE"]), Reply::Status("OK".into()));
    assert_eq!(a.cmd(&["SAVE"]), Reply::Status("OK".into()));
    wait_for("the tombstones to be collected", || metric(&server_a, "keymesh_tombstones") == 0.0);
}

#[test]
fn a_snapshot_older_than_tombstone_gc_wipes_and_resyncs_instead_of_resurrecting() {
    // Proves the wipe-and-resync rule covers restarts: a node restored from a snapshot whose
    // node heard from no peer for longer than tombstone-gc-seconds does not merge it (its peers
    // have dropped the tombstones that would have killed its old keys); it wipes and full-syncs.
    let gc = ["--tombstone-gc-seconds", "2"];
    let nodes: Vec<DataNode> = (0..3).map(|i| DataNode::new(&format!("stale{i}"))).collect();
    let mut servers = start_mesh(&nodes, &gc);
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    for c in conns.iter_mut() {
        links_up(c);
    }
    conns[0].cmd(&["SET", "k", "old"]);
    wait_for("k everywhere", || conns.iter_mut().all(|c| get(c, "k").text() == "old"));
    assert_eq!(conns[0].cmd(&["SAVE"]), Reply::Status("OK".into()));
    servers.remove(0).kill();
    conns[1].cmd(&["DEL", "k"]);
    conns[1].cmd(&["SET", "fresh", "1"]);
    wait_for("the tombstone of k to be collected on both survivors", || servers.iter().all(|s| metric(s, "keymesh_tombstones") == 0.0));
    std::thread::sleep(Duration::from_millis(2500));

    let peers: Vec<&DataNode> = nodes[1..].iter().collect();
    let restored = nodes[0].start("node-0", &peers, &gc);
    wait_ready(&restored);
    let mut r = restored.connect();
    links_up(&mut r);
    assert_eq!(metric(&restored, "keymesh_mesh_wipes_total"), 1.0, "the stale snapshot was wiped");
    assert_eq!(get(&mut r, "fresh").text(), "1");
    assert_eq!(get(&mut r, "k"), Reply::Nil, "the deleted key is not resurrected on the restored node");
    std::thread::sleep(Duration::from_millis(500));
    for c in conns[1..].iter_mut() {
        assert_eq!(get(c, "k"), Reply::Nil, "nor on its peers");
    }
    assert!(nodes[0].log().contains("will wipe and full-sync"), "{}", nodes[0].log());
}

#[test]
fn a_whole_mesh_killed_at_once_comes_back_from_its_snapshots() {
    // Proves a full-cluster restart: three nodes with a save schedule are killed together
    // (SIGKILL: no final save) after their last scheduled snapshots, restarted from them, and
    // hold every key written before those snapshots, with deleted keys still deleted; then
    // stopped with SIGTERM, when each saves a final snapshot, and every later write is back.
    let nodes: Vec<DataNode> = (0..3).map(|i| DataNode::new(&format!("full{i}"))).collect();
    let schedule = ["--save", "1", "1"];
    let servers = start_mesh(&nodes, &schedule);
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    for c in conns.iter_mut() {
        links_up(c);
    }
    for i in 0..300 {
        conns[i % 3].cmd(&["SET", &format!("k{i}"), &i.to_string()]);
    }
    for i in (0..300).step_by(10) {
        conns[(i + 1) % 3].cmd(&["DEL", &format!("k{i}")]);
    }
    wait_for("every node to hold 270 keys", || conns.iter_mut().all(|c| c.cmd(&["DBSIZE"]) == Reply::Int(270)));
    // A scheduled save that began after every write reached every node.
    let saves: Vec<String> = conns.iter_mut().map(|c| info_field(c, "persistence", "rdb_saves")).collect();
    for (c, before) in conns.iter_mut().zip(&saves) {
        wait_for("a scheduled save after the writes", || {
            info_field(c, "persistence", "rdb_changes_since_last_save") == "0" && &info_field(c, "persistence", "rdb_saves") != before
        });
    }
    drop(conns);
    for s in servers {
        s.kill();
    }

    let servers = start_mesh(&nodes, &schedule);
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    for (n, c) in conns.iter_mut().enumerate() {
        assert_eq!(c.cmd(&["DBSIZE"]), Reply::Int(270), "node {n} is back with every key");
        for i in 0..300 {
            let expected = if i % 10 == 0 { Reply::Nil } else { Reply::Bulk(i.to_string().into_bytes()) };
            assert_eq!(get(c, &format!("k{i}")), expected, "node {n}, key k{i}");
        }
    }

    for c in conns.iter_mut() {
        links_up(c);
    }
    for i in 300..400 {
        conns[i % 3].cmd(&["SET", &format!("k{i}"), &i.to_string()]);
    }
    wait_for("every node to hold 370 keys", || conns.iter_mut().all(|c| c.cmd(&["DBSIZE"]) == Reply::Int(370)));
    drop(conns);
    for s in servers {
        assert!(s.terminate().success());
    }
    let servers = start_mesh(&nodes, &schedule);
    for (n, s) in servers.iter().enumerate() {
        let mut c = s.connect();
        assert_eq!(c.cmd(&["DBSIZE"]), Reply::Int(370), "node {n} saved its last writes as it stopped");
    }
}
