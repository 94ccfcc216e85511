//! Black-box tests of HyperLogLogs in a mesh: PFADDs made on nodes that were cut off from
//! each other all count once the nodes link (full sync, then the live stream), a later DEL
//! still wins, and an HLL is a plain string that moves between nodes with GET and SET.

#![allow(clippy::unwrap_used)]

mod support;

use support::data_node::{wait_for, DataNode};
use support::{encode, Conn, Reply};

const MESH: [&str; 4] = ["--active-replica", "yes", "--multi-master", "yes"];

fn pfadd(conn: &mut Conn, key: &str, prefix: &str, n: usize) {
    let elements: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let mut args = vec!["PFADD", key];
    args.extend(elements.iter().map(String::as_str));
    assert_eq!(conn.cmd(&args), Reply::Int(1));
}

fn pfcount(conn: &mut Conn, key: &str) -> i64 {
    match conn.cmd(&["PFCOUNT", key]) {
        Reply::Int(n) => n,
        other => panic!("PFCOUNT {key}: {other:?}"),
    }
}

#[test]
fn pfadds_made_apart_all_count_once_the_nodes_link_and_a_later_del_wins() {
    // Proves the HLL merge end to end: a and b, not linked, both create `visits` with PFADD
    // (the same incarnation: created from the same empty past) and add different elements.
    // Linked, each takes the other's HLL by full sync and both count the union — exactly
    // the estimate of one HLL fed every element (computed on a third, standalone node).
    // Live PFADDs then stream register by register; a DEL made later on one node removes the
    // key everywhere, and a PFADD after it starts afresh on both.
    let (a, b, c) = (DataNode::new("hll-a"), DataNode::new("hll-b"), DataNode::new("hll-c"));
    let (sa, sb, sc) = (a.start("a", &[], &MESH), b.start("b", &[], &MESH), c.start("c", &[], &[]));
    let (mut ca, mut cb, mut cc) = (sa.connect(), sb.connect(), sc.connect());
    pfadd(&mut ca, "visits", "a-", 400);
    pfadd(&mut cb, "visits", "b-", 600);
    pfadd(&mut cb, "visits", "a-", 100);
    for prefix_count in [("a-", 400), ("b-", 600)] {
        pfadd(&mut cc, "visits", prefix_count.0, prefix_count.1);
    }
    let union = pfcount(&mut cc, "visits");
    assert!((980..=1020).contains(&union), "estimate of 1000 elements: {union}");

    assert_eq!(ca.cmd(&["REPLICAOF", "127.0.0.1", &b.port.to_string()]).text(), "OK");
    assert_eq!(cb.cmd(&["REPLICAOF", "127.0.0.1", &a.port.to_string()]).text(), "OK");
    for (name, conn) in [("a", &mut ca), ("b", &mut cb)] {
        wait_for(&format!("the union on {name}"), || pfcount(conn, "visits") == union);
    }

    pfadd(&mut ca, "visits", "live-", 300);
    pfadd(&mut cc, "visits", "live-", 300);
    let union = pfcount(&mut cc, "visits");
    wait_for("the live adds on b", || pfcount(&mut cb, "visits") == union);

    assert_eq!(cb.cmd(&["DEL", "visits"]), Reply::Int(1));
    wait_for("the DEL on a", || ca.cmd(&["EXISTS", "visits"]) == Reply::Int(0));
    pfadd(&mut ca, "visits", "after-", 3);
    wait_for("the new HLL on b", || pfcount(&mut cb, "visits") == 3);
    assert_eq!(pfcount(&mut ca, "visits"), 3);
}

#[test]
fn an_hll_is_a_string_that_get_and_set_carry_between_nodes() {
    // Proves HLLs are plain strings in Redis's format: the bytes a node returns for GET set on
    // another node give the same count, PFMERGE with them works, and a string that is not an
    // HLL is refused with Redis's error.
    let (a, b) = (DataNode::new("hll-get-a"), DataNode::new("hll-get-b"));
    let (sa, sb) = (a.start("a", &[], &[]), b.start("b", &[], &[]));
    let (mut ca, mut cb) = (sa.connect(), sb.connect());
    pfadd(&mut ca, "h", "x", 5000);
    let Reply::Bulk(bytes) = ca.cmd(&["GET", "h"]) else { panic!("GET of an HLL") };
    assert!(bytes.starts_with(b"HYLL"));
    cb.send_raw(&encode(&[&b"SET"[..], b"copy", &bytes])).unwrap();
    assert_eq!(cb.read(), Some(Reply::Status("OK".into())));
    assert_eq!(pfcount(&mut cb, "copy"), pfcount(&mut ca, "h"));
    pfadd(&mut cb, "other", "y", 10);
    assert_eq!(cb.cmd(&["PFMERGE", "both", "copy", "other"]).text(), "OK");
    let both = pfcount(&mut cb, "both");
    assert!((4950..=5110).contains(&both), "{both}");
    cb.cmd(&["SET", "plain", "hello"]);
    assert_eq!(cb.cmd(&["PFADD", "plain", "z"]), Reply::Error("WRONGTYPE Key is not a valid HyperLogLog string value.".into()));
}
