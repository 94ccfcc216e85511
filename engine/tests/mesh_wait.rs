//! `WAIT`, `CLIENT PAUSE` and blocking commands on a mesh node (docs/compatibility.md,
//! "Introspection"): WAIT counts the peers whose Acks cover the client's last write, a paused
//! node keeps merging its peers' writes, and a write answered before a command that blocks
//! reaches the peers while that command waits.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::data_node::{info_field, wait_for, DataNode};
use support::{encode, Reply, Server};

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
    // A pipeline's replies come once its writes are in the backlog: by then another client
    // sees every one of them in the node's offset.
    let mut other = servers[0].connect();
    // This node's own offset.
    let offset = |c: &mut support::Conn| {
        let info = c.cmd(&["INFO", "replication"]).text();
        let own = info.lines().find_map(|l| l.strip_prefix("master_repl_offset:"));
        own.unwrap_or_else(|| panic!("no own offset in {info}")).trim().parse::<u64>().unwrap()
    };
    let before = offset(&mut other);
    let burst: Vec<u8> = (0..40).flat_map(|i| encode(&["SET", &format!("burst{i}"), "x"])).collect();
    a.send_raw(&burst).unwrap();
    for _ in 0..40 {
        assert_eq!(a.read(), Some(Reply::Status("OK".into())));
    }
    assert_eq!(offset(&mut other) - before, 40);
    // A stopped peer does not ack: WAIT gives up after its timeout with the one that did.
    // Stopped once both peers acked the last write, so that only a WAIT that covers the writes
    // pipelined before it (a transaction's among them) counts one peer, not two: a connection
    // publishes a batch's writes to the backlog together, after the batch, and a WAIT in the
    // batch publishes what its client wrote before it first.
    assert_eq!(a.cmd(&["WAIT", "2", "5000"]), Reply::Int(2));
    servers[2].signal("STOP");
    let pipeline: Vec<u8> =
        [&["SET", "p1", "a"][..], &["MULTI"], &["SET", "p2", "b"], &["EXEC"], &["WAIT", "2", "100"]].iter().flat_map(|c| encode(c)).collect();
    a.send_raw(&pipeline).unwrap();
    let replies: Vec<Reply> = (0..5).map(|_| a.read().unwrap()).collect();
    assert_eq!(replies[4], Reply::Int(1), "{replies:?}");
    let mut b = servers[1].connect();
    assert_eq!((b.cmd(&["GET", "p1"]), b.cmd(&["GET", "p2"])), (Reply::Bulk(b"a".to_vec()), Reply::Bulk(b"b".to_vec())), "acked means merged");
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

/// A connection publishes its writes to the backlog after each pipelined batch, and before it
/// writes any reply (`client::ClientWrites`): a write answered before a blocking command in the
/// same pipeline reaches the peers while that command waits, not once it returns.
#[test]
fn a_write_answered_before_a_blocking_command_reaches_the_peers_while_it_waits() {
    let (_nodes, servers) = mesh(["block-a", "block-b", "block-c"]);
    let mut a = servers[0].connect();
    let pipeline: Vec<u8> = [&["SET", "before-block", "1"][..], &["BLPOP", "block-list", "0"]].iter().flat_map(|c| encode(c)).collect();
    a.send_raw(&pipeline).unwrap();
    assert_eq!(a.read(), Some(Reply::Status("OK".into())));
    let mut b = servers[1].connect();
    wait_for("the answered write merged on a peer", || b.cmd(&["GET", "before-block"]) == Reply::Bulk(b"1".to_vec()));
    assert_eq!(servers[0].connect().cmd(&["LPUSH", "block-list", "x"]), Reply::Int(1));
    assert_eq!(a.read(), Some(Reply::Array(vec![Reply::Bulk(b"block-list".to_vec()), Reply::Bulk(b"x".to_vec())])));
}
