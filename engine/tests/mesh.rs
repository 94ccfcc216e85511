//! Black-box tests of the replication mesh: real `keymesh-server` processes on loopback,
//! wired by `replicaof`, talking RESP, `/readyz` and `/metrics`.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::{free_mesh_port, free_port, wait_blocked, Conn, Server};

const DEADLINE: Duration = Duration::from_secs(15);

/// A mesh node: its client port (the mesh port is client port + 10000) and metrics port.
#[derive(Clone, Copy)]
struct Node {
    port: u16,
    metrics_port: u16,
}

impl Node {
    fn new() -> Node {
        Node { port: free_mesh_port(), metrics_port: free_port() }
    }

    /// Starts this node as an active replica of `peers`, with extra flags, and waits until it
    /// has loaded.
    fn start(&self, name: &str, peers: &[Node], extra: &[&str]) -> Server {
        let mut args: Vec<String> = ["--node-name", name, "--active-replica", "yes", "--multi-master", "yes"].iter().map(|s| s.to_string()).collect();
        for p in peers {
            args.extend(["--replicaof".to_string(), "127.0.0.1".to_string(), p.port.to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_on(self.port, self.metrics_port, &args)
    }
}

/// Polls `check` every 20 ms until it returns true; panics with `what` after `DEADLINE`.
fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out after {DEADLINE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get(conn: &mut Conn, key: &str) -> String {
    conn.cmd(&["GET", key]).text()
}

fn info_replication(conn: &mut Conn) -> String {
    conn.cmd(&["INFO", "replication"]).text()
}

fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().to_string()))
}

/// The value of a Prometheus sample whose line starts with `prefix` (name and labels).
fn metric(server: &Server, prefix: &str) -> u64 {
    let (status, body) = server.http_get("/metrics");
    assert_eq!(status, 200);
    body.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn resyncs(server: &Server, origin: Node, kind: &str) -> u64 {
    metric(server, &format!("keymesh_mesh_resyncs_total{{kind=\"{kind}\",peer=\"127.0.0.1:{}\"}}", origin.port + 10000))
}

fn link_connected(conn: &mut Conn) -> bool {
    let info = info_replication(conn);
    info_field(&info, "master_global_link_status").as_deref() == Some("up")
}

#[test]
fn a_write_to_a_database_a_peer_lacks_leaves_its_link_merging_the_rest() {
    // A node configured with more `databases` than its peer writes to one the peer lacks.
    // The peer's link used to fail on it (the batch's prefetch indexed the database before the
    // merge refused it), so nothing after it arrived; now the op is skipped and the stream goes on.
    let (wide, narrow) = (Node::new(), Node::new());
    let wide_server = wide.start("wide", &[narrow], &["--databases", "32"]);
    let narrow_server = narrow.start("narrow", &[wide], &[]);
    let (mut on_wide, mut on_narrow) = (wide_server.connect(), narrow_server.connect());
    wait_for("both links up", || link_connected(&mut on_wide) && link_connected(&mut on_narrow));
    assert_eq!(on_wide.cmd(&["SELECT", "20"]).text(), "OK");
    assert_eq!(on_wide.cmd(&["SET", "in-20", "x"]).text(), "OK");
    assert_eq!(on_wide.cmd(&["SELECT", "0"]).text(), "OK");
    assert_eq!(on_wide.cmd(&["SET", "after", "y"]).text(), "OK");
    wait_for("the write after it on the narrow node", || get(&mut on_narrow, "after") == "y");
    assert_eq!(on_narrow.cmd(&["SET", "back", "z"]).text(), "OK");
    wait_for("the narrow node's write on the wide node", || get(&mut on_wide, "back") == "z");
}

#[test]
fn a_write_on_any_of_three_nodes_reaches_all_of_them() {
    // Proves the full mesh: each node streams the writes it originated to both others, so a
    // SET, an HSET and a DEL issued on any node become visible on every node.
    let nodes = [Node::new(), Node::new(), Node::new()];
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            let peers: Vec<Node> = (0..3).filter(|&j| j != i).map(|j| nodes[j]).collect();
            nodes[i].start(&format!("node-{i}"), &peers, &[])
        })
        .collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    for conn in conns.iter_mut() {
        wait_for("every link up", || link_connected(conn));
    }
    for (i, conn) in conns.iter_mut().enumerate() {
        assert_eq!(conn.cmd(&["SET", &format!("from-{i}"), &format!("value-{i}")]).text(), "OK");
        conn.cmd(&["HSET", "shared-hash", &format!("field-{i}"), &i.to_string()]);
    }
    for (n, conn) in conns.iter_mut().enumerate() {
        for i in 0..3 {
            wait_for(&format!("from-{i} on node {n}"), || get(conn, &format!("from-{i}")) == format!("value-{i}"));
        }
        wait_for(&format!("all hash fields on node {n}"), || conn.cmd(&["HLEN", "shared-hash"]).text() == "3");
    }
    conns[2].cmd(&["DEL", "from-0"]);
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("delete of from-0 on node {n}"), || conn.cmd(&["EXISTS", "from-0"]).text() == "0");
    }
    let info = info_replication(&mut conns[0]);
    assert_eq!(info_field(&info, "role").as_deref(), Some("active-replica"), "{info}");
    assert_eq!(info_field(&info, "connected_slaves").as_deref(), Some("2"), "{info}");
    assert!(info_field(&info, "master_1_host").is_some(), "second master block missing: {info}");
    // Each field once: the first master's merged offset is Redis's `slave_repl_offset`, and
    // `master_repl_offset` is the node's own (its SET and HSET).
    let mut names: Vec<&str> = info.lines().filter_map(|l| l.split_once(':').map(|(name, _)| name)).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "a field named twice: {info}");
    assert!(info_field(&info, "slave_repl_offset").is_some(), "{info}");
    assert_eq!(info_field(&info, "master_repl_offset").as_deref(), Some("2"), "{info}");
    // Node 0 originated a SET and an HSET, each streamed to two subscribers, in at least one
    // batch per subscriber and at most one per op.
    assert_eq!(metric(&servers[0], "keymesh_mesh_sent_ops_total"), 4);
    assert!((2..=4).contains(&metric(&servers[0], "keymesh_mesh_sent_batches_total")));
}

#[test]
fn a_restarted_node_is_not_ready_until_it_has_full_synced() {
    // Proves sync-gated readiness: a node restarted with a new run id answers 503 on /readyz
    // while its peers cannot serve it, then full-syncs, and the first moment it reports ready
    // it already holds every key the mesh held.
    let (a, b, c) = (Node::new(), Node::new(), Node::new());
    let sa = a.start("a", &[b, c], &[]);
    let sb = b.start("b", &[a, c], &[]);
    let sc = c.start("c", &[a, b], &[]);
    let (mut ca, mut cb) = (sa.connect(), sb.connect());
    wait_for("a linked", || link_connected(&mut ca));
    wait_for("b linked", || link_connected(&mut cb));
    for i in 0..300 {
        let conn = if i % 2 == 0 { &mut ca } else { &mut cb };
        conn.cmd(&["SET", &format!("key-{i}"), &format!("v{i}")]);
    }
    sc.kill();
    for i in 300..400 {
        ca.cmd(&["SET", &format!("key-{i}"), &format!("v{i}")]);
    }
    wait_for("a and b converged", || get(&mut ca, "key-299") == "v299" && get(&mut cb, "key-399") == "v399");

    // While neither peer can answer, the restarted node must not report ready.
    sa.signal("STOP");
    sb.signal("STOP");
    let sc = c.start("c", &[a, b], &[]);
    let watched_until = Instant::now() + Duration::from_millis(1500);
    let mut not_ready_seen = 0;
    while Instant::now() < watched_until {
        let (status, body) = sc.http_get("/readyz");
        if status != 503 {
            sa.signal("CONT");
            sb.signal("CONT");
            panic!("restarted node reported ready before syncing: {status} {body}");
        }
        not_ready_seen += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    sa.signal("CONT");
    sb.signal("CONT");
    assert!(not_ready_seen > 5);
    wait_for("restarted node ready", || sc.http_get("/readyz").0 == 200);
    // No waiting from here on: ready means the data is there.
    let mut cc = sc.connect();
    for i in 0..400 {
        assert_eq!(get(&mut cc, &format!("key-{i}")), format!("v{i}"), "key-{i} missing right after /readyz turned 200");
    }
    let info = info_replication(&mut cc);
    assert!(info.contains("_full_resyncs:1"), "restarted node should have full-synced: {info}");
}

#[test]
fn re_adding_a_peer_resumes_by_partial_resync() {
    // Proves partial resync: a subscriber that drops its link (REPLICAOF NO ONE) and re-adds
    // the same origin resumes from the origin's backlog — the writes made meanwhile arrive and
    // the metrics count a partial resync, not a second full one.
    let (a, b) = (Node::new(), Node::new());
    let sa = a.start("a", &[b], &[]);
    let sb = b.start("b", &[a], &[]);
    let (mut ca, mut cb) = (sa.connect(), sb.connect());
    wait_for("b linked to a", || link_connected(&mut cb));
    ca.cmd(&["SET", "before", "1"]);
    wait_for("before on b", || get(&mut cb, "before") == "1");
    let (partial0, full0) = (resyncs(&sb, a, "partial"), resyncs(&sb, a, "full"));
    assert_eq!(full0, 1, "the first link does a full sync");

    assert_eq!(cb.cmd(&["REPLICAOF", "NO", "ONE"]).text(), "OK");
    assert_eq!(info_field(&info_replication(&mut cb), "role").as_deref(), Some("master"));
    for i in 0..50 {
        ca.cmd(&["SET", &format!("during-{i}"), &i.to_string()]);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(get(&mut cb, "during-0"), "Nil", "b should not receive writes while unlinked");
    assert_eq!(cb.cmd(&["REPLICAOF", "127.0.0.1", &a.port.to_string()]).text(), "OK");
    for i in 0..50 {
        wait_for(&format!("during-{i} on b"), || get(&mut cb, &format!("during-{i}")) == i.to_string());
    }
    assert_eq!(resyncs(&sb, a, "partial"), partial0 + 1, "re-adding the peer should resume by partial resync");
    assert_eq!(resyncs(&sb, a, "full"), full0, "re-adding the peer must not full-sync");
}

#[test]
fn a_stalled_origin_is_resumed_by_partial_resync() {
    // Proves that a short outage of an origin (its process stopped longer than repl-timeout,
    // then continued) ends in a partial resync, with the writes made around it delivered.
    let (a, b) = (Node::new(), Node::new());
    let sa = a.start("a", &[b], &["--repl-timeout", "1"]);
    let sb = b.start("b", &[a], &["--repl-timeout", "1"]);
    let (mut ca, mut cb) = (sa.connect(), sb.connect());
    wait_for("b linked to a", || link_connected(&mut cb));
    ca.cmd(&["SET", "k", "before"]);
    wait_for("k on b", || get(&mut cb, "k") == "before");
    let (partial0, full0) = (resyncs(&sb, a, "partial"), resyncs(&sb, a, "full"));

    sa.signal("STOP");
    wait_for("b to notice the stalled origin", || !link_connected(&mut cb));
    sa.signal("CONT");
    ca.cmd(&["SET", "k", "after"]);
    wait_for("k=after on b", || get(&mut cb, "k") == "after");
    wait_for("b linked again", || link_connected(&mut cb));
    assert!(resyncs(&sb, a, "partial") > partial0, "the reconnect should be a partial resync");
    assert_eq!(resyncs(&sb, a, "full"), full0, "the reconnect must not full-sync");
}

#[test]
fn a_wrong_masterauth_keeps_the_link_down_and_info_says_why() {
    // Proves stream authentication: with requirepass on the origin, a subscriber with the
    // wrong masterauth gets no data and INFO shows the link down with the reason; fixing
    // masterauth live brings the link up.
    let (a, b) = (Node::new(), Node::new());
    let sa = a.start("a", &[], &["--requirepass", "s3cret"]);
    let sb = b.start("b", &[a], &["--masterauth", "wrong"]);
    let mut ca = sa.connect();
    assert_eq!(ca.cmd(&["AUTH", "s3cret"]).text(), "OK");
    ca.cmd(&["SET", "secret-key", "v"]);
    let mut cb = sb.connect();
    wait_for("INFO to report the auth failure", || {
        let info = info_replication(&mut cb);
        info_field(&info, "master_link_status").as_deref() == Some("down")
            && info_field(&info, "master_last_error").is_some_and(|e| e.contains("authentication failed"))
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(get(&mut cb, "secret-key"), "Nil", "no data may flow without the password");
    assert_eq!(info_field(&info_replication(&mut ca), "connected_slaves").as_deref(), Some("0"));

    assert_eq!(cb.cmd(&["CONFIG", "SET", "masterauth", "s3cret"]).text(), "OK");
    wait_for("secret-key on b once masterauth is right", || get(&mut cb, "secret-key") == "v");
}

#[test]
fn replicaof_needs_active_replica_and_multi_master() {
    // Proves KeyMesh refuses single-master replication instead of silently dropping data.
    let server = Server::start(&[]);
    let mut conn = server.connect();
    let reply = conn.cmd(&["REPLICAOF", "127.0.0.1", "6379"]);
    assert!(reply.is_error() && reply.text().contains("active-replica"), "{reply:?}");
    assert_eq!(conn.cmd(&["REPLICAOF", "NO", "ONE"]).text(), "OK");
    assert_eq!(conn.cmd(&["ROLE"]).texts()[0], "master");
}

#[test]
fn a_node_with_a_fast_clock_still_converges_and_the_skew_is_reported() {
    // Proves the HLC rules under clock skew: node A's wall clock runs 3 s ahead (beyond
    // max-clock-skew-ms 500). B applies A's writes without letting A's clock drag its own, and
    // reports the skew; a write B makes after reading A's value still supersedes it (local writes
    // stamp max(now, stored + 1)), so both nodes converge on B's later write.
    let (a, b) = (Node::new(), Node::new());
    let fast = a.start("fast", &[b], &["--clock-offset-ms", "3000"]);
    let slow = b.start("slow", &[a], &[]);
    let (mut ca, mut cb) = (fast.connect(), slow.connect());
    wait_for("links up", || link_connected(&mut ca) && link_connected(&mut cb));
    assert_eq!(ca.cmd(&["SET", "k", "from-fast"]).text(), "OK");
    wait_for("fast's write on slow", || get(&mut cb, "k") == "from-fast");
    assert_eq!(cb.cmd(&["SET", "k", "from-slow"]).text(), "OK");
    wait_for("slow's later write on fast", || get(&mut ca, "k") == "from-slow");
    assert_eq!(get(&mut cb, "k"), "from-slow");
    // Writes in the other direction converge too.
    assert_eq!(ca.cmd(&["HSET", "h", "f", "1"]).text(), "1");
    wait_for("fast's hash on slow", || cb.cmd(&["HGET", "h", "f"]).text() == "1");
    wait_for("skew reported on slow", || {
        let info = info_replication(&mut cb);
        let skew: i64 = info_field(&info, "master_clock_skew_ms").and_then(|v| v.parse().ok()).unwrap_or(0);
        let skewed: u64 = info_field(&info, "skewed_receives").and_then(|v| v.parse().ok()).unwrap_or(0);
        skew >= 2500 && skewed > 0
    });
    assert!(metric(&slow, "keymesh_clock_skewed_receives_total") > 0);
}

#[test]
fn tombstones_are_kept_for_replication_and_collected_after_the_gc_cap() {
    // Proves deletes leave a tombstone while replicating (so an older write arriving later
    // cannot resurrect the key), and that tombstones older than tombstone-gc-seconds are dropped.
    let node = Node::new();
    let server = node.start("gc", &[], &["--tombstone-gc-seconds", "1"]);
    let mut c = server.connect();
    for i in 0..5 {
        c.cmd(&["SET", &format!("k{i}"), "v"]);
        c.cmd(&["DEL", &format!("k{i}")]);
    }
    assert_eq!(metric(&server, "keymesh_tombstones "), 5);
    wait_for("tombstones collected after 1 s", || metric(&server, "keymesh_tombstones ") == 0);
}

/// Starts `n` nodes, each with a `replicaof` line for every other one, and waits for every link.
fn full_mesh(n: usize, extra: &[&str]) -> (Vec<Node>, Vec<Server>, Vec<Conn>) {
    let nodes: Vec<Node> = (0..n).map(|_| Node::new()).collect();
    let servers: Vec<Server> = (0..n)
        .map(|i| {
            let peers: Vec<Node> = (0..n).filter(|&j| j != i).map(|j| nodes[j]).collect();
            nodes[i].start(&format!("node-{i}"), &peers, extra)
        })
        .collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    for conn in conns.iter_mut() {
        wait_for("every link up", || link_connected(conn));
    }
    (nodes, servers, conns)
}

#[test]
fn a_peer_list_that_names_the_node_itself_ignores_that_entry() {
    // Proves a node given a peer list with every member, itself included (what the operator's
    // config file holds), treats its own entry as no peer: it replicates with the others, is
    // ready, and reports only the real peer.
    let nodes = [Node::new(), Node::new()];
    let servers: Vec<Server> = (0..2).map(|i| nodes[i].start(&format!("self-{i}"), &nodes, &[])).collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    for conn in conns.iter_mut() {
        wait_for("the link to the other node up", || link_connected(conn));
    }
    conns[0].cmd(&["SET", "from-0", "a"]);
    conns[1].cmd(&["SET", "from-1", "b"]);
    wait_for("from-0 on node 1", || get(&mut conns[1], "from-0") == "a");
    wait_for("from-1 on node 0", || get(&mut conns[0], "from-1") == "b");
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(server.http_get("/readyz").0, 200, "node {i} not ready");
        let info = info_replication(&mut conns[i]);
        assert_eq!(info_field(&info, "connected_masters").as_deref(), Some("1"), "node {i} counts itself as a peer:\n{info}");
    }
}

#[test]
fn tombstones_are_collected_once_every_peer_is_past_them_and_kept_while_one_is_away() {
    // Proves DESIGN.md's tombstone rule: with the default one-day cap, the tombstones of
    // deleted keys and of deleted hash fields are dropped on every node a few seconds after
    // every node has merged them (the nodes' Acks carry their stable frontiers), and a
    // tombstone is kept while a peer that has not seen it is unreachable.
    let (_nodes, mut servers, mut conns) = full_mesh(3, &[]);
    for i in 0..5 {
        conns[0].cmd(&["SET", &format!("gone-{i}"), "v"]);
        conns[0].cmd(&["DEL", &format!("gone-{i}")]);
    }
    // Each origin's stream arrives in order, so a key written after the deletes marks them
    // received (`gone-4` missing says nothing: it is missing before its writes arrive too).
    conns[0].cmd(&["SET", "after-deletes", "1"]);
    conns[1].cmd(&["HSET", "h", "f1", "1", "f2", "2"]);
    conns[1].cmd(&["HDEL", "h", "f1"]);
    for conn in conns.iter_mut() {
        wait_for("the deletes everywhere", || get(conn, "after-deletes") == "1" && conn.cmd(&["HLEN", "h"]).text() == "1");
    }
    assert_eq!(metric(&servers[2], "keymesh_tombstones "), 5, "ghosts of the deleted keys are held while replicating");
    // The frontier margin (5 s), then a hash field's tombstone waits for the pass that walks
    // its shard (one walk of every key per `FIELD_TOMBSTONE_PASSES` seconds): ~13 s here.
    let deadline = Instant::now() + Duration::from_secs(45);
    for (i, server) in servers.iter().enumerate() {
        while metric(server, "keymesh_tombstones ") > 0 || metric(server, "keymesh_tombstones_collected_total") < 6 {
            assert!(Instant::now() < deadline, "node {i} still holds tombstones every peer is past");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let away = servers.pop().unwrap();
    away.kill();
    conns[0].cmd(&["SET", "kept", "v"]);
    conns[0].cmd(&["DEL", "kept"]);
    // Longer than the frontier margin plus several heartbeats and Acks.
    std::thread::sleep(Duration::from_secs(8));
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(metric(server, "keymesh_tombstones "), 1, "node {i} dropped a tombstone an unreachable peer has not seen");
    }
}

#[test]
fn a_push_replicated_from_a_peer_serves_a_client_blocked_in_blpop() {
    // Proves blocking pops see merged writes: a client blocked in BLPOP on one node is served
    // by an LPUSH on another node, and the pop then replicates back.
    let (_nodes, _servers, mut conns) = full_mesh(2, &[]);
    let mut blocked = _servers[0].connect();
    blocked.send(&["BLPOP", "queue", "10"]);
    wait_blocked(&mut conns[0], 1);
    assert_eq!(conns[1].cmd(&["LPUSH", "queue", "job-1"]).text(), "1");
    blocked.set_timeout(Duration::from_secs(5));
    let reply = blocked.read().expect("BLPOP answered after a push on the peer");
    assert_eq!(reply.texts(), vec!["queue", "job-1"]);
    for conn in conns.iter_mut() {
        wait_for("the pop replicated", || conn.cmd(&["EXISTS", "queue"]).text() == "0");
    }
}

#[test]
fn a_delete_of_a_key_not_yet_received_wins_over_the_older_write() {
    // Proves DESIGN.md's rule that every write is versioned, no-ops included (issue 11's
    // minimal case): b writes k while cut off from a; later a, which never saw k, deletes it
    // (reply 0), removes a hash field, a set and a sorted-set member it does not hold, and
    // persists a key without a TTL. Once linked, every node holds the newer outcome: the
    // deletes win, the PERSIST wins. The control key, written after a's delete, survives.
    let (a, b) = (Node::new(), Node::new());
    let (sa, sb) = (a.start("a", &[], &[]), b.start("b", &[], &[]));
    let (mut ca, mut cb) = (sa.connect(), sb.connect());
    assert_eq!(cb.cmd(&["SET", "k", "old"]).text(), "OK");
    assert_eq!(cb.cmd(&["HSET", "h", "f", "old", "g", "kept"]).text(), "2");
    assert_eq!(cb.cmd(&["SADD", "s", "m"]).text(), "1");
    assert_eq!(cb.cmd(&["ZADD", "z", "1", "m"]).text(), "1");
    assert_eq!(cb.cmd(&["SET", "ttl", "v", "EX", "1000"]).text(), "OK");
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(ca.cmd(&["DEL", "control"]).text(), "0");
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(cb.cmd(&["SET", "control", "newer"]).text(), "OK");
    assert_eq!(ca.cmd(&["DEL", "k"]).text(), "0");
    assert_eq!(ca.cmd(&["HDEL", "h", "f"]).text(), "0");
    assert_eq!(ca.cmd(&["SREM", "s", "m"]).text(), "0");
    assert_eq!(ca.cmd(&["ZREM", "z", "m"]).text(), "0");
    assert_eq!(ca.cmd(&["PERSIST", "ttl"]).text(), "0");

    assert_eq!(ca.cmd(&["REPLICAOF", "127.0.0.1", &b.port.to_string()]).text(), "OK");
    assert_eq!(cb.cmd(&["REPLICAOF", "127.0.0.1", &a.port.to_string()]).text(), "OK");
    // Every key in the wait: a's first sync from b is a snapshot, sent shard by shard rather
    // than in b's write order, so `ttl` and `control` can be there before `h` (the HGETALL
    // once asserted after the wait failed that way under load).
    for (name, conn) in [("a", &mut ca), ("b", &mut cb)] {
        wait_for(&format!("the removals on {name}"), || {
            conn.cmd(&["EXISTS", "k", "s", "z"]).text() == "0"
                && conn.cmd(&["TTL", "ttl"]).text() == "-1"
                && get(conn, "control") == "newer"
                && conn.cmd(&["HGETALL", "h"]).texts() == ["g", "kept"]
        });
    }
}

#[test]
fn a_delete_55_ms_after_an_add_on_another_node_wins_though_the_add_had_not_arrived() {
    // Proves issue 11's cache-invalidation race is settled by the newest write: node 1's link
    // to node 0 is down (it subscribes to node 2 only, which does not forward node 0's writes),
    // node 0 runs SADD, and 55 ms later node 1 runs DEL of that key, which it has not received
    // (reply 0); the same for HSET then HDEL. Once node 1 links to node 0 again, every node
    // ends without the key and the field: the later removals win.
    let (nodes, _servers, mut conns) = full_mesh(3, &[]);
    assert_eq!(conns[1].cmd(&["REPLICAOF", "NO", "ONE"]).text(), "OK");
    assert_eq!(conns[1].cmd(&["REPLICAOF", "127.0.0.1", &nodes[2].port.to_string()]).text(), "OK");
    wait_for("node 1 linked to node 2", || link_connected(&mut conns[1]));
    assert_eq!(conns[0].cmd(&["SADD", "t4", "m0"]).text(), "1");
    assert_eq!(conns[0].cmd(&["HSET", "h", "f", "v", "g", "kept"]).text(), "2");
    std::thread::sleep(Duration::from_millis(55));
    let del = conns[1].cmd(&["DEL", "t4"]).text();
    let hdel = conns[1].cmd(&["HDEL", "h", "f"]).text();
    eprintln!("DEL replied {del}, HDEL replied {hdel} on the node without the link");
    assert_eq!(conns[1].cmd(&["REPLICAOF", "127.0.0.1", &nodes[0].port.to_string()]).text(), "OK");
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("the removals on node {n}"), || conn.cmd(&["EXISTS", "t4"]).text() == "0" && conn.cmd(&["HLEN", "h"]).text() == "1");
    }
    // Nothing comes back once the mesh has settled.
    std::thread::sleep(Duration::from_millis(300));
    for conn in conns.iter_mut() {
        assert_eq!(conn.cmd(&["EXISTS", "t4"]).text(), "0");
        assert_eq!(conn.cmd(&["HGETALL", "h"]).texts(), vec!["g", "kept"]);
    }
}

#[test]
fn a_script_replicates_as_the_effects_of_its_writes_never_re_run_on_peers() {
    // Proves scripts replicate by effects: a script on node 0 writes the time and random
    // numbers and increments a counter; every node ends with the values the script saw on
    // node 0 (a re-run would read another time and other random numbers, and increment
    // again), and the peers never ran it (no EVAL in their command stats, the script is not
    // in their cache). Its writes are versioned like any other: a later SET on a peer wins.
    let (_nodes, _servers, mut conns) = full_mesh(3, &[]);
    let script = "local t = redis.call('TIME') \
        local now = t[1] .. '.' .. t[2] \
        local r = tostring(math.random()) \
        redis.call('SET', KEYS[1], now) \
        redis.call('HSET', KEYS[2], 'random', r, 'time', now) \
        local n = redis.call('INCR', KEYS[3]) \
        redis.call('RPUSH', KEYS[4], r, now) \
        return {now, r, n}";
    let reply = conns[0].cmd(&["EVAL", script, "4", "s:time", "s:hash", "s:count", "s:list"]).texts();
    let (now, random, count) = (&reply[0], &reply[1], &reply[2]);
    assert_eq!(count, "1");
    let sha = conns[0].cmd(&["SCRIPT", "LOAD", script]).text();
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("the script's effects on node {n}"), || get(conn, "s:count") == "1" && conn.cmd(&["LLEN", "s:list"]).text() == "2");
        assert_eq!(&get(conn, "s:time"), now, "node {n}");
        assert_eq!(conn.cmd(&["HGETALL", "s:hash"]).texts().len(), 4, "node {n}");
        assert_eq!(&conn.cmd(&["HGET", "s:hash", "random"]).text(), random, "node {n}");
        assert_eq!(&conn.cmd(&["HGET", "s:hash", "time"]).text(), now, "node {n}");
        assert_eq!(conn.cmd(&["LRANGE", "s:list", "0", "-1"]).texts(), vec![random.clone(), now.clone()], "node {n}");
        if n > 0 {
            let stats = conn.cmd(&["INFO", "commandstats"]).text();
            assert!(!stats.contains("cmdstat_eval"), "node {n} ran EVAL: {stats}");
            assert_eq!(conn.cmd(&["SCRIPT", "EXISTS", &sha]).texts(), vec!["0"], "node {n} has the script");
        }
    }
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(conns[2].cmd(&["SET", "s:time", "later"]).text(), "OK");
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("the later SET on node {n}"), || get(conn, "s:time") == "later");
    }
}

#[test]
fn a_full_sync_of_big_collections_leaves_the_origin_no_bigger() {
    // A peer's full sync streams the origin's keyspace. It must cost the origin nothing that
    // stays: neither a header on every stored element (names cloned into the snapshot), nor a
    // buffer the size of the biggest message kept for as long as the peer stays (one effect
    // per collection made a 100,000-field hash one message of megabytes). The build before
    // grew node a by 12.7 MB for 400,000 elements while b stayed connected.
    const N: usize = 100_000;
    let (a, b) = (Node::new(), Node::new());
    let sa = a.start("a", &[], &[]);
    let mut ca = sa.connect();
    let mut batch = Vec::new();
    for i in 0..N {
        batch.extend(support::encode(&["HSET", "hash", &format!("field:{i}"), &format!("value:{i}")]));
        batch.extend(support::encode(&["SADD", "set", &format!("member:{i}")]));
    }
    ca.send_raw(&batch).unwrap();
    for _ in 0..2 * N {
        assert!(!ca.read().expect("a reply").is_error());
    }
    let used = |conn: &mut Conn| support::data_node::info_field(conn, "memory", "used_memory").parse::<i64>().unwrap();
    let before = used(&mut ca);
    let sb = b.start("b", &[a], &[]);
    let mut cb = sb.connect();
    let n = N.to_string();
    wait_for("b synced", || cb.cmd(&["HLEN", "hash"]).text() == n && cb.cmd(&["SCARD", "set"]).text() == n);
    assert_eq!(get_field(&mut cb, "field:77"), "value:77");
    let growth = used(&mut ca) - before;
    assert!(growth < 2 << 20, "a full sync grew the origin by {growth} bytes (before: {before})");
}

fn get_field(conn: &mut Conn, field: &str) -> String {
    conn.cmd(&["HGET", "hash", field]).text()
}
