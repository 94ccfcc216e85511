//! Black-box tests of replicated `FUNCTION` libraries (docs/scripting.md, "Functions"): real
//! `keymesh-server` processes in a mesh, talking RESP. A library loaded on one node is
//! callable on every node; `LOAD REPLACE`, `DELETE` and `FLUSH` follow; concurrent changes on
//! two sides of a partition converge to the newer one; a node that joins later gets the
//! libraries by full sync, and a restarted node keeps them in its snapshot.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::data_node::{info_field, wait_for, wait_ready, DataNode as Node};
use support::{wait_blocked, Conn, Reply, Server};

/// A library whose function `<name>_v` answers `version`, and whose `<name>_set` writes
/// `KEYS[1]` (so what a function writes is seen to replicate too).
fn library(name: &str, version: &str) -> String {
    format!(
        "#!lua name={name}\n\
         redis.register_function('{name}_v', function(keys, args) return '{version}' end)\n\
         redis.register_function('{name}_set', function(keys, args) return redis.call('SET', keys[1], '{version}') end)"
    )
}

/// What `FCALL <lib>_v 0` answers on `conn`: the version, or the error text.
fn version_of(conn: &mut Conn, lib: &str) -> String {
    conn.cmd(&["FCALL", &format!("{lib}_v"), "0"]).text()
}

fn mesh(names: &[&str]) -> (Vec<Node>, Vec<Server>, Vec<Conn>) {
    let nodes: Vec<Node> = names.iter().map(|n| Node::new(&format!("fn-{n}"))).collect();
    let servers: Vec<Server> = (0..nodes.len())
        .map(|i| {
            let peers: Vec<&Node> = (0..nodes.len()).filter(|&j| j != i).map(|j| &nodes[j]).collect();
            nodes[i].start(names[i], &peers, &[])
        })
        .collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    for conn in conns.iter_mut() {
        wait_for("every link up", || info_field(conn, "replication", "master_global_link_status") == "up");
    }
    (nodes, servers, conns)
}

/// Links each node only to the nodes of its own group (both directions: every node drops its
/// peers and subscribes again to its group), as the mesh tests cut links.
fn partition(nodes: &[Node], conns: &mut [Conn], groups: &[&[usize]]) {
    for group in groups {
        for &i in group.iter() {
            assert_eq!(conns[i].cmd(&["REPLICAOF", "NO", "ONE"]).text(), "OK");
            for &j in group.iter().filter(|&&j| j != i) {
                assert_eq!(conns[i].cmd(&["REPLICAOF", "127.0.0.1", &nodes[j].port.to_string()]).text(), "OK");
            }
        }
    }
}

/// Links every node to every other again.
fn heal(nodes: &[Node], conns: &mut [Conn]) {
    for (i, conn) in conns.iter_mut().enumerate() {
        for (_, node) in nodes.iter().enumerate().filter(|(j, _)| *j != i) {
            assert_eq!(conn.cmd(&["REPLICAOF", "127.0.0.1", &node.port.to_string()]).text(), "OK");
        }
    }
}

#[test]
fn a_library_loaded_on_one_node_is_callable_on_every_node_and_replace_and_delete_follow() {
    // Proves libraries replicate as versioned registers: FUNCTION LOAD on node 0 makes the
    // functions callable on nodes 1 and 2 (and what they write replicates as any write);
    // FUNCTION LOAD REPLACE on node 1 puts the new code everywhere; FUNCTION DELETE on node 2
    // removes it everywhere, and a DELETE of a missing library errors as Redis's does.
    let (_nodes, _servers, mut conns) = mesh(&["n0", "n1", "n2"]);
    let started = Instant::now();
    assert_eq!(conns[0].cmd(&["FUNCTION", "LOAD", &library("shared", "one")]).text(), "shared");
    let mut reached = Vec::new();
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("the library on node {n}"), || version_of(conn, "shared") == "one");
        reached.push(started.elapsed());
    }
    eprintln!("FUNCTION LOAD on node 0 callable on nodes 1 and 2 after {:?} and {:?}", reached[1], reached[2]);
    assert_eq!(conns[2].cmd(&["FCALL", "shared_set", "1", "written-by"]).text(), "OK");
    wait_for("the function's write on node 0", || conns[0].cmd(&["GET", "written-by"]).text() == "one");
    assert!(conns[1].cmd(&["FUNCTION", "LOAD", &library("shared", "two")]).is_error(), "without REPLACE the library exists");

    assert_eq!(conns[1].cmd(&["FUNCTION", "LOAD", "REPLACE", &library("shared", "two")]).text(), "shared");
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("the replaced library on node {n}"), || version_of(conn, "shared") == "two");
        let Reply::Array(list) = conn.cmd(&["FUNCTION", "LIST", "WITHCODE"]) else { panic!("FUNCTION LIST is an array") };
        assert_eq!(list.len(), 1, "node {n}: {list:?}");
    }

    assert_eq!(conns[2].cmd(&["FUNCTION", "DELETE", "shared"]).text(), "OK");
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("the delete on node {n}"), || version_of(conn, "shared") == "ERR Function not found");
        assert_eq!(conn.cmd(&["FUNCTION", "LIST"]), Reply::Array(vec![]), "node {n}");
        let reply = conn.cmd(&["FUNCTION", "DELETE", "shared"]);
        assert!(reply.is_error() && reply.text().contains("Library not found"), "node {n}: {reply:?}");
    }
    assert_eq!(info_field(&mut conns[1], "memory", "function_library_errors"), "0");
}

#[test]
fn concurrent_replaces_on_two_sides_of_a_partition_converge_to_the_newer_one() {
    // Proves the LWW rule across a partition: nodes {0, 1} and {2} are cut apart; node 0
    // replaces library `a` and, later, node 2 replaces it too; for library `b` the minority
    // side writes first and the majority later. Each side serves its own code while cut off;
    // once the links are back every node serves the newer code of each library, whichever side
    // wrote it.
    let (nodes, _servers, mut conns) = mesh(&["p0", "p1", "p2"]);
    assert_eq!(conns[0].cmd(&["FUNCTION", "LOAD", &library("a", "base")]).text(), "a");
    assert_eq!(conns[0].cmd(&["FUNCTION", "LOAD", &library("b", "base")]).text(), "b");
    for conn in conns.iter_mut() {
        wait_for("both libraries everywhere", || version_of(conn, "a") == "base" && version_of(conn, "b") == "base");
    }
    partition(&nodes, &mut conns, &[&[0, 1], &[2]]);
    conns[0].cmd(&["FUNCTION", "LOAD", "REPLACE", &library("a", "majority-older")]);
    conns[2].cmd(&["FUNCTION", "LOAD", "REPLACE", &library("b", "minority-older")]);
    std::thread::sleep(Duration::from_millis(20));
    conns[2].cmd(&["FUNCTION", "LOAD", "REPLACE", &library("a", "minority-newer")]);
    conns[1].cmd(&["FUNCTION", "LOAD", "REPLACE", &library("b", "majority-newer")]);
    wait_for("node 0 has node 1's b", || version_of(&mut conns[0], "b") == "majority-newer");
    assert_eq!(version_of(&mut conns[0], "a"), "majority-older", "the cut holds");
    assert_eq!(version_of(&mut conns[2], "a"), "minority-newer");
    assert_eq!(version_of(&mut conns[2], "b"), "minority-older", "the cut holds");

    heal(&nodes, &mut conns);
    let healed = Instant::now();
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("convergence on node {n}"), || version_of(conn, "a") == "minority-newer" && version_of(conn, "b") == "majority-newer");
    }
    eprintln!("converged {:?} after the links were restored", healed.elapsed());
    std::thread::sleep(Duration::from_millis(300));
    for (n, conn) in conns.iter_mut().enumerate() {
        assert_eq!(version_of(conn, "a"), "minority-newer", "node {n} after settling");
        assert_eq!(version_of(conn, "b"), "majority-newer", "node {n} after settling");
    }
}

#[test]
fn a_flush_dominates_older_loads_made_across_a_partition_and_not_newer_ones() {
    // Proves FUNCTION FLUSH is a flush point: while cut off, node 2 loads `older`; then node 0,
    // which holds no library at all, runs FUNCTION FLUSH (it still stamps its flush point);
    // then node 2 loads `newer`. Once linked, `older` is gone everywhere and `newer` is
    // everywhere.
    let (nodes, _servers, mut conns) = mesh(&["f0", "f1", "f2"]);
    partition(&nodes, &mut conns, &[&[0, 1], &[2]]);
    assert_eq!(conns[2].cmd(&["FUNCTION", "LOAD", &library("older", "1")]).text(), "older");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(conns[0].cmd(&["FUNCTION", "FLUSH"]).text(), "OK");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(conns[2].cmd(&["FUNCTION", "LOAD", &library("newer", "2")]).text(), "newer");
    heal(&nodes, &mut conns);
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("the flush and the newer load on node {n}"), || {
            version_of(conn, "older") == "ERR Function not found" && version_of(conn, "newer") == "2"
        });
    }
}

#[test]
fn a_node_that_joins_later_gets_the_libraries_by_full_sync() {
    // Proves the full sync carries the libraries: a third node started after a library was
    // loaded, another replaced, and a third deleted on the first two serves exactly what they
    // serve.
    let (nodes, _servers, mut conns) = mesh(&["j0", "j1"]);
    conns[0].cmd(&["FUNCTION", "LOAD", &library("kept", "1")]);
    conns[1].cmd(&["FUNCTION", "LOAD", &library("swapped", "1")]);
    conns[0].cmd(&["FUNCTION", "LOAD", &library("dropped", "1")]);
    for conn in conns.iter_mut() {
        wait_for("the libraries on both", || version_of(conn, "swapped") == "1" && version_of(conn, "dropped") == "1");
    }
    conns[0].cmd(&["FUNCTION", "LOAD", "REPLACE", &library("swapped", "2")]);
    conns[1].cmd(&["FUNCTION", "DELETE", "dropped"]);
    let late = Node::new("fn-j2");
    let started = Instant::now();
    let server = late.start("j2", &[&nodes[0], &nodes[1]], &[]);
    wait_ready(&server);
    let mut c = server.connect();
    wait_for("the libraries on the late node", || version_of(&mut c, "kept") == "1" && version_of(&mut c, "swapped") == "2");
    eprintln!("the late node served the libraries {:?} after its start", started.elapsed());
    assert_eq!(version_of(&mut c, "dropped"), "ERR Function not found");
    let Reply::Array(list) = c.cmd(&["FUNCTION", "LIST"]) else { panic!("FUNCTION LIST is an array") };
    assert_eq!(list.len(), 2, "{list:?}");
}

#[test]
fn libraries_survive_a_restart_in_the_snapshot() {
    // Proves the snapshot file carries the libraries (as Redis's RDB keeps them): a node that
    // loaded two libraries, replaced one and deleted another, saved and was killed serves the
    // same libraries after its restart, and a FUNCTION FLUSH saved later is kept too.
    let node = Node::new("fn-restart");
    let server = node.start("r0", &[], &[]);
    let mut c = server.connect();
    c.cmd(&["FUNCTION", "LOAD", &library("kept", "1")]);
    c.cmd(&["FUNCTION", "LOAD", "REPLACE", &library("kept", "2")]);
    c.cmd(&["FUNCTION", "LOAD", &library("dropped", "1")]);
    c.cmd(&["FUNCTION", "DELETE", "dropped"]);
    c.cmd(&["SET", "k", "v"]);
    assert_eq!(c.cmd(&["SAVE"]), Reply::Status("OK".into()));
    server.kill();

    let server = node.start("r0", &[], &[]);
    let mut c = server.connect();
    assert_eq!(version_of(&mut c, "kept"), "2");
    assert_eq!(version_of(&mut c, "dropped"), "ERR Function not found");
    assert_eq!(c.cmd(&["GET", "k"]).text(), "v");
    assert!(c.cmd(&["FUNCTION", "LOAD", &library("kept", "3")]).is_error(), "the restored library exists");
    assert_eq!(c.cmd(&["FUNCTION", "FLUSH"]).text(), "OK");
    assert_eq!(c.cmd(&["SAVE"]), Reply::Status("OK".into()));
    server.kill();

    let server = node.start("r0", &[], &[]);
    let mut c = server.connect();
    assert_eq!(version_of(&mut c, "kept"), "ERR Function not found");
    assert_eq!(c.cmd(&["FUNCTION", "LIST"]), Reply::Array(vec![]));
}

#[test]
fn a_write_pause_holds_function_load_delete_and_flush_as_redis_does() {
    // Proves FUNCTION LOAD, DELETE and FLUSH, which Redis flags `write` and which replicate,
    // wait out CLIENT PAUSE WRITE (answered once it ends), while FUNCTION LIST and a
    // no-writes function are answered at once.
    let node = Node::new("fn-pause");
    let server = node.start("pause", &[], &[]);
    let mut admin = server.connect();
    let ro = "#!lua name=ro\nredis.register_function{function_name='ro_v', callback=function() return 'ro' end, flags={'no-writes'}}";
    assert_eq!(admin.cmd(&["FUNCTION", "LOAD", ro]).text(), "ro");
    assert_eq!(admin.cmd(&["FUNCTION", "LOAD", &library("gone", "1")]).text(), "gone");
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "100000", "WRITE"]).text(), "OK");
    // LOAD and DELETE together (they do not conflict), FLUSH in a second pause.
    let late = library("late", "1");
    let held: [(&[&str], &str); 2] = [(&["FUNCTION", "LOAD", &late], "late"), (&["FUNCTION", "DELETE", "gone"], "OK")];
    let mut waiting = Vec::new();
    for (i, (command, reply)) in held.iter().enumerate() {
        let mut c = server.connect();
        c.send(command);
        wait_blocked(&mut admin, i + 1);
        waiting.push((c, *reply));
    }
    assert_eq!(admin.cmd(&["FCALL_RO", "ro_v", "0"]).text(), "ro", "a no-writes function runs");
    let Reply::Array(list) = admin.cmd(&["FUNCTION", "LIST"]) else { panic!("FUNCTION LIST is an array") };
    assert_eq!(list.len(), 2, "nothing held has run: {list:?}");
    assert_eq!(admin.cmd(&["CLIENT", "UNPAUSE"]).text(), "OK");
    for (mut c, reply) in waiting {
        assert_eq!(c.read().map(|r| r.text()).as_deref(), Some(reply));
    }
    assert_eq!(version_of(&mut admin, "late"), "1");
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "100000", "WRITE"]).text(), "OK");
    let mut flush = server.connect();
    flush.send(&["FUNCTION", "FLUSH"]);
    wait_blocked(&mut admin, 1);
    let Reply::Array(list) = admin.cmd(&["FUNCTION", "LIST"]) else { panic!("FUNCTION LIST is an array") };
    assert_eq!(list.len(), 2, "the held FLUSH has not run: {list:?}");
    assert_eq!(admin.cmd(&["CLIENT", "UNPAUSE"]).text(), "OK");
    assert_eq!(flush.read().map(|r| r.text()).as_deref(), Some("OK"));
    assert_eq!(admin.cmd(&["FUNCTION", "LIST"]), Reply::Array(vec![]));
}

#[test]
fn function_restore_and_restore_replicate_as_the_writes_they_are() {
    // FUNCTION RESTORE FLUSH on node 0 leaves exactly the payload's libraries on every node (a
    // flush point, then each library's register); a key RESTOREd on node 1 with a TTL reaches
    // every node whole, with that TTL, and a RESTORE REPLACE on node 2 replaces it everywhere.
    let (_nodes, _servers, mut conns) = mesh(&["dr0", "dr1", "dr2"]);
    assert_eq!(conns[0].cmd(&["FUNCTION", "LOAD", &library("kept", "one")]).text(), "kept");
    assert_eq!(conns[0].cmd(&["FUNCTION", "LOAD", &library("gone", "one")]).text(), "gone");
    let Reply::Bulk(libraries) = conns[0].cmd(&["FUNCTION", "DUMP"]) else { panic!("FUNCTION DUMP is a bulk string") };
    assert_eq!(conns[0].cmd(&["FUNCTION", "DELETE", "gone"]).text(), "OK");
    assert_eq!(conns[0].cmd(&["FUNCTION", "LOAD", &library("other", "one")]).text(), "other");
    let restore = conns[0].call(&[&b"FUNCTION"[..], b"RESTORE", &libraries, b"FLUSH"]).unwrap();
    assert_eq!(restore.text(), "OK");
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("node {n} holds the restored libraries"), || {
            version_of(conn, "kept") == "one" && version_of(conn, "gone") == "one" && version_of(conn, "other").contains("not found")
        });
    }

    assert_eq!(conns[1].cmd(&["HSET", "h", "a", "1", "b", "2"]).text(), "2");
    let Reply::Bulk(hash) = conns[1].cmd(&["DUMP", "h"]) else { panic!("DUMP is a bulk string") };
    assert_eq!(conns[1].cmd(&["DEL", "h"]).text(), "1");
    assert_eq!(conns[1].call(&[&b"RESTORE"[..], b"r", b"100000", &hash]).unwrap().text(), "OK");
    assert_eq!(conns[2].cmd(&["SET", "s", "v"]).text(), "OK");
    let Reply::Bulk(string) = conns[2].cmd(&["DUMP", "s"]) else { panic!("DUMP is a bulk string") };
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("node {n} holds the restored hash"), || conn.cmd(&["HGET", "r", "b"]).text() == "2");
        let ttl = conn.cmd(&["PTTL", "r"]);
        assert!(matches!(ttl, Reply::Int(ms) if ms > 90_000 && ms <= 100_000), "node {n}: {ttl:?}");
    }
    assert_eq!(conns[2].call(&[&b"RESTORE"[..], b"r", b"0", &string, b"REPLACE"]).unwrap().text(), "OK");
    for (n, conn) in conns.iter_mut().enumerate() {
        wait_for(&format!("node {n} holds the replacing string"), || conn.cmd(&["GET", "r"]).text() == "v");
        assert_eq!(conn.cmd(&["PTTL", "r"]), Reply::Int(-1), "node {n}");
    }
}
