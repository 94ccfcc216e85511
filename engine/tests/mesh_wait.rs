//! `WAIT` and `CLIENT PAUSE` on a mesh node (docs/compatibility.md, "Introspection"): WAIT
//! counts the peers whose Acks cover the client's last write, and a paused node keeps merging
//! its peers' writes.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::data_node::{info_field, wait_for, DataNode};
use support::{Reply, Server};

/// Three nodes, each a peer of the other two, every link up.
fn mesh(names: [&str; 3]) -> (Vec<DataNode>, Vec<Server>) {
    let nodes: Vec<DataNode> = names.iter().map(|n| DataNode::new(n)).collect();
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            let peers: Vec<&DataNode> = (0..3).filter(|&j| j != i).map(|j| &nodes[j]).collect();
            nodes[i].start(names[i], &peers, &[])
        })
        .collect();
    for server in &servers {
        let mut c = server.connect();
        wait_for("every link up", || info_field(&mut c, "replication", "master_global_link_status") == "up");
    }
    (nodes, servers)
}

#[test]
fn wait_counts_the_peers_that_merged_the_last_write() {
    let (_nodes, servers) = mesh(["wait-a", "wait-b", "wait-c"]);
    let mut a = servers[0].connect();
    // Before its first write a client counts every peer subscribed to this node.
    wait_for("both peers subscribed to a", || a.cmd(&["WAIT", "2", "10"]) == Reply::Int(2));
    assert_eq!(a.cmd(&["SET", "k", "1"]), Reply::Status("OK".into()));
    let started = Instant::now();
    assert_eq!(a.cmd(&["WAIT", "2", "5000"]), Reply::Int(2));
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(servers[1].connect().cmd(&["GET", "k"]), Reply::Bulk(b"1".to_vec()), "acked means merged");
    // A waiting WAIT asks its peers to ack at once (Redis's REPLCONF GETACK): a write and its
    // WAIT take a round trip (~1 ms), not the peers' ack interval. Left to the interval, 20 of
    // them take at least 950 ms, since a peer acks at most every 50 ms; the bound below leaves
    // room for a loaded machine.
    let started = Instant::now();
    for i in 0..20 {
        assert_eq!(a.cmd(&["SET", "k", &i.to_string()]), Reply::Status("OK".into()));
        assert_eq!(a.cmd(&["WAIT", "2", "5000"]), Reply::Int(2));
    }
    assert!(started.elapsed() < Duration::from_millis(800), "20 writes, each waited for: {:?}", started.elapsed());

    // A stopped peer does not ack: WAIT gives up after its timeout with the one that did.
    servers[2].signal("STOP");
    assert_eq!(a.cmd(&["SET", "k", "2"]), Reply::Status("OK".into()));
    let started = Instant::now();
    assert_eq!(a.cmd(&["WAIT", "2", "100"]), Reply::Int(1));
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(100) && took < Duration::from_millis(900), "{took:?}");
    assert_eq!(a.cmd(&["WAIT", "1", "0"]), Reply::Int(1), "enough peers: at once");
    assert_eq!(a.cmd(&["WAIT", "0", "0"]), Reply::Int(1));
    // A client that wrote nothing counts every subscribed peer, the stopped one included (it
    // is subscribed until repl-timeout), as Redis counts every online replica.
    assert_eq!(servers[0].connect().cmd(&["WAIT", "2", "100"]), Reply::Int(2));
    // WAIT with no timeout returns when the stopped peer comes back and merges the write.
    a.send(&["WAIT", "2", "0"]);
    std::thread::sleep(Duration::from_millis(300));
    servers[2].signal("CONT");
    a.set_timeout(Duration::from_secs(20));
    assert_eq!(a.read(), Some(Reply::Int(2)));

    // Inside MULTI it answers at once; bad arguments are Redis's errors.
    a.cmd(&["MULTI"]);
    a.cmd(&["WAIT", "5", "0"]);
    assert_eq!(a.cmd(&["EXEC"]), Reply::Array(vec![Reply::Int(2)]));
    assert_eq!(a.cmd(&["WAIT", "1", "-1"]), Reply::Error("ERR timeout is negative".into()));
    assert_eq!(a.cmd(&["WAIT", "x", "0"]), Reply::Error("ERR value is not an integer or out of range".into()));
}

#[test]
fn a_paused_node_keeps_merging_its_peers_writes() {
    let (_nodes, servers) = mesh(["pause-a", "pause-b", "pause-c"]);
    let (mut a, mut b) = (servers[0].connect(), servers[1].connect());
    assert_eq!(a.cmd(&["CLIENT", "PAUSE", "100000", "WRITE"]), Reply::Status("OK".into()));
    let mut writer = servers[0].connect();
    writer.send(&["SET", "from-a", "1"]);
    assert_eq!(b.cmd(&["SET", "from-b", "1"]), Reply::Status("OK".into()));
    wait_for("b's write merged into paused a", || a.cmd(&["GET", "from-b"]) == Reply::Bulk(b"1".to_vec()));
    assert_eq!(a.cmd(&["GET", "from-a"]), Reply::Nil, "a's own client is still held");
    assert_eq!(a.cmd(&["CLIENT", "UNPAUSE"]), Reply::Status("OK".into()));
    assert_eq!(writer.read(), Some(Reply::Status("OK".into())));
    wait_for("a's write reached b", || b.cmd(&["GET", "from-a"]) == Reply::Bulk(b"1".to_vec()));
}
