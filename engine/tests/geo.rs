//! Black-box tests of the geo commands: Redis's documented answers (Palermo and Catania),
//! clear errors for malformed coordinates and options, and geo sets replicating per member
//! between mesh nodes like any sorted set.

#![allow(clippy::unwrap_used)]

mod support;

use support::data_node::{wait_for, DataNode};
use support::{Reply, Server};

fn texts(reply: Reply) -> Vec<String> {
    reply.texts()
}

#[test]
fn geo_commands_answer_as_redis_documents() {
    // Proves the 52-bit encoding and the searches against the values redis-server gives for
    // Redis's documentation example.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.cmd(&["GEOADD", "Sicily", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"]), Reply::Int(2));
    assert_eq!(c.cmd(&["ZSCORE", "Sicily", "Palermo"]).text(), "3479099956230698");
    assert_eq!(c.cmd(&["GEODIST", "Sicily", "Palermo", "Catania"]).text(), "166274.1516");
    assert_eq!(c.cmd(&["GEODIST", "Sicily", "Palermo", "Catania", "km"]).text(), "166.2742");
    assert_eq!(texts(c.cmd(&["GEOHASH", "Sicily", "Palermo", "Catania"])), ["sqc8b49rny0", "sqdtr74hyu0"]);
    assert_eq!(
        c.cmd(&["GEOPOS", "Sicily", "Palermo"]),
        Reply::Array(vec![Reply::Array(vec![Reply::Bulk(b"13.36138933897018433".to_vec()), Reply::Bulk(b"38.11555639549629859".to_vec())])])
    );
    assert_eq!(texts(c.cmd(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "ASC"])), ["Catania", "Palermo"]);
    let with = c.cmd(&["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km", "ASC", "WITHDIST"]);
    assert_eq!(
        format!("{with:?}"),
        format!(
            "{:?}",
            Reply::Array(vec![
                Reply::Array(vec![Reply::Bulk(b"Catania".to_vec()), Reply::Bulk(b"56.4413".to_vec())]),
                Reply::Array(vec![Reply::Bulk(b"Palermo".to_vec()), Reply::Bulk(b"190.4424".to_vec())]),
            ])
        )
    );
    assert_eq!(c.cmd(&["GEOSEARCHSTORE", "near", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", "100", "km"]), Reply::Int(1));
    assert_eq!(texts(c.cmd(&["ZRANGE", "near", "0", "-1"])), ["Palermo"]);
}

#[test]
fn malformed_coordinates_and_options_are_clear_errors() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let cases = [
        (vec!["GEOADD", "g", "200", "10", "x"], "ERR invalid longitude,latitude pair 200.000000,10.000000"),
        (vec!["GEOADD", "g", "10", "86", "x"], "ERR invalid longitude,latitude pair 10.000000,86.000000"),
        (vec!["GEOADD", "g", "east", "10", "x"], "ERR value is not a valid float"),
        (vec!["GEOADD", "g", "nan", "10", "x"], "ERR value is not a valid float"),
        (vec!["GEOADD", "g", "NX", "XX", "1", "1", "x"], "ERR syntax error"),
        (vec!["GEORADIUS", "g", "1", "1", "-1", "km"], "ERR radius cannot be negative"),
        (vec!["GEORADIUS", "g", "1", "1", "1", "parsec"], "ERR unsupported unit provided. please use M, KM, FT, MI"),
        (vec!["GEOSEARCH", "g", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "km", "ANY"], "ERR the ANY argument requires COUNT argument"),
        (vec!["GEOSEARCH", "g", "FROMLONLAT", "1", "1", "WITHDIST", "ASC"], "ERR exactly one of BYRADIUS and BYBOX can be specified for GEOSEARCH"),
    ];
    for (args, want) in cases {
        assert_eq!(c.cmd(&args), Reply::Error(want.into()), "{args:?}");
    }
    assert_eq!(c.cmd(&["EXISTS", "g"]), Reply::Int(0), "a refused GEOADD wrote nothing");
}

#[test]
fn a_geo_set_replicates_per_member_between_nodes() {
    // Proves geo sets are sorted sets in the mesh: members added on two nodes both reach the
    // other, and a search on either node finds both.
    let mesh = ["--active-replica", "yes", "--multi-master", "yes"];
    let (a, b) = (DataNode::new("geo-a"), DataNode::new("geo-b"));
    let (sa, sb) = (a.start("a", &[&b], &mesh), b.start("b", &[&a], &mesh));
    let (mut ca, mut cb) = (sa.connect(), sb.connect());
    assert_eq!(ca.cmd(&["GEOADD", "shops", "13.361389", "38.115556", "palermo"]), Reply::Int(1));
    assert_eq!(cb.cmd(&["GEOADD", "shops", "15.087269", "37.502669", "catania"]), Reply::Int(1));
    for (name, conn) in [("a", &mut ca), ("b", &mut cb)] {
        wait_for(&format!("both shops on {name}"), || {
            conn.cmd(&["GEOSEARCH", "shops", "FROMLONLAT", "14", "38", "BYRADIUS", "200", "km", "ASC"]).texts() == ["palermo", "catania"]
        });
    }
}
