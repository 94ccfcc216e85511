//! Black-box tests of `BITFIELD`/`BITFIELD_RO`: Redis's replies, overflow handling and
//! errors, and replication of the resulting string to a peer (last write wins on the key).

#![allow(clippy::unwrap_used)]

mod support;

use support::data_node::{wait_for, DataNode};
use support::{Reply, Server};

fn ints(reply: Reply) -> Vec<Option<i64>> {
    match reply {
        Reply::Array(items) => items
            .into_iter()
            .map(|r| match r {
                Reply::Int(n) => Some(n),
                Reply::Nil => None,
                other => panic!("not an integer: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

#[test]
fn bitfield_answers_and_overflows_as_redis_and_refuses_bad_input() {
    // Proves the subcommands and the three overflow policies on values Redis's own tests use,
    // `#N` offsets, and one clear error per kind of bad input.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(ints(c.cmd(&["BITFIELD", "b", "SET", "i8", "0", "255", "SET", "i8", "0", "100", "GET", "i8", "0"])), [Some(0), Some(-1), Some(100)]);
    c.cmd(&["DEL", "b"]);
    for (i, ch) in ["65", "66", "67"].iter().enumerate() {
        c.cmd(&["BITFIELD", "b", "SET", "u8", &format!("#{i}"), ch]);
    }
    assert_eq!(c.cmd(&["GET", "b"]).text(), "ABC");
    c.cmd(&["BITFIELD", "b", "SET", "u8", "#0", "100"]);
    assert_eq!(ints(c.cmd(&["BITFIELD", "b", "OVERFLOW", "WRAP", "INCRBY", "u8", "#0", "257"])), [Some(101)]);
    assert_eq!(ints(c.cmd(&["BITFIELD", "b", "OVERFLOW", "SAT", "INCRBY", "u8", "#0", "257"])), [Some(255)]);
    // FAIL: nil, and the value is left alone.
    assert_eq!(ints(c.cmd(&["BITFIELD", "b", "OVERFLOW", "FAIL", "INCRBY", "u8", "#0", "1", "GET", "u8", "#0"])), [None, Some(255)]);
    assert_eq!(
        ints(c.cmd(&["BITFIELD", "b", "OVERFLOW", "WRAP", "INCRBY", "i64", "100", "9223372036854775807", "INCRBY", "i64", "100", "1"])),
        [Some(i64::MAX), Some(i64::MIN)]
    );
    assert_eq!(ints(c.cmd(&["BITFIELD_RO", "b", "GET", "u8", "#0"])), [Some(255)]);
    let errors = [
        (vec!["BITFIELD", "b", "GET", "u64", "0"], "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."),
        (vec!["BITFIELD", "b", "GET", "i8", "-1"], "ERR bit offset is not an integer or out of range"),
        (vec!["BITFIELD", "b", "GET", "i8", "4294967296"], "ERR bit offset is not an integer or out of range"),
        (vec!["BITFIELD", "b", "SET", "i8", "0", "x"], "ERR value is not an integer or out of range"),
        (vec!["BITFIELD", "b", "OVERFLOW", "BOUNCE"], "ERR Invalid OVERFLOW type specified"),
        (vec!["BITFIELD", "b", "GET", "i8"], "ERR syntax error"),
        (vec!["BITFIELD_RO", "b", "INCRBY", "i8", "0", "1"], "ERR BITFIELD_RO only supports the GET subcommand"),
    ];
    for (args, want) in errors {
        assert_eq!(c.cmd(&args), Reply::Error(want.into()), "{args:?}");
    }
    c.cmd(&["LPUSH", "list", "x"]);
    assert!(c.cmd(&["BITFIELD", "list", "GET", "i8", "0"]).text().starts_with("WRONGTYPE"));
    // The i64 at bit 100 ends in byte 20; the refused commands wrote nothing.
    assert_eq!(c.cmd(&["STRLEN", "b"]), Reply::Int(21));
}

#[test]
fn a_bitfield_write_reaches_a_peer_as_the_resulting_string() {
    // Proves BITFIELD replicates like SETRANGE: the peer holds the same bytes (and its TTL),
    // and a later write on the peer wins on both nodes.
    let mesh = ["--active-replica", "yes", "--multi-master", "yes"];
    let (a, b) = (DataNode::new("bitfield-a"), DataNode::new("bitfield-b"));
    let (sa, sb) = (a.start("a", &[&b], &mesh), b.start("b", &[&a], &mesh));
    let (mut ca, mut cb) = (sa.connect(), sb.connect());
    ca.cmd(&["SET", "counters", "", "EX", "1000"]);
    assert_eq!(ints(ca.cmd(&["BITFIELD", "counters", "INCRBY", "u16", "#3", "500", "SET", "i5", "1", "-7"])), [Some(500), Some(0)]);
    let bytes = ca.cmd(&["GET", "counters"]);
    wait_for("the bitfield on b", || cb.cmd(&["GET", "counters"]) == bytes);
    assert_eq!(ints(cb.cmd(&["BITFIELD_RO", "counters", "GET", "u16", "#3", "GET", "i5", "1"])), [Some(500), Some(-7)]);
    assert!(matches!(cb.cmd(&["TTL", "counters"]), Reply::Int(t) if t > 900));
    cb.cmd(&["BITFIELD", "counters", "INCRBY", "u16", "#3", "1"]);
    wait_for("b's later write on a", || ints(ca.cmd(&["BITFIELD_RO", "counters", "GET", "u16", "#3"])) == [Some(501)]);
}
