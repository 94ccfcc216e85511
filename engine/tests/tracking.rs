//! Black-box tests of client-side caching (`CLIENT TRACKING`): real `keymesh-server`
//! processes, RESP3 invalidation pushes, RESP2 redirection on `__redis__:invalidate`, BCAST
//! prefixes, OPTIN/OPTOUT, and invalidation on one node of a write made on another.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::{free_mesh_port, free_port, Conn, Reply, Server};

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// The RESP3 push naming `keys`.
fn invalidate(keys: &[&str]) -> Reply {
    Reply::Push(vec![bulk("invalidate"), Reply::Array(keys.iter().map(|k| bulk(k)).collect())])
}

/// A RESP3 connection with tracking turned on with `options`.
fn tracking(server: &Server, options: &[&str]) -> Conn {
    let mut conn = server.connect();
    conn.set_timeout(Duration::from_secs(10));
    assert!(matches!(conn.cmd(&["HELLO", "3"]), Reply::Map(_)));
    let mut args = vec!["CLIENT", "TRACKING", "ON"];
    args.extend_from_slice(options);
    assert_eq!(conn.cmd(&args), Reply::Status("OK".into()));
    conn
}

/// The keys of the next invalidation push, sorted.
fn next_keys(conn: &mut Conn) -> Vec<String> {
    match conn.read().expect("an invalidation") {
        Reply::Push(items) if items.first() == Some(&bulk("invalidate")) => {
            let mut keys = items[1].texts();
            keys.sort();
            keys
        }
        other => panic!("expected an invalidate push, got {other:?}"),
    }
}

#[test]
fn resp3_clients_hear_of_keys_they_read_once_and_their_own_writes_after_the_reply() {
    let server = Server::start(&[]);
    let mut writer = server.connect();
    let mut reader = tracking(&server, &[]);
    assert_eq!(writer.cmd(&["SET", "k", "1"]), Reply::Status("OK".into()));
    assert_eq!(reader.cmd(&["GET", "k"]), bulk("1"));
    assert_eq!(writer.cmd(&["SET", "unread", "1"]), Reply::Status("OK".into()));
    assert_eq!(writer.cmd(&["SET", "k", "2"]), Reply::Status("OK".into()));
    assert_eq!(reader.read(), Some(invalidate(&["k"])));
    // Forgotten once invalidated: another write says nothing until the key is read again.
    assert_eq!(writer.cmd(&["SET", "k", "3"]), Reply::Status("OK".into()));
    assert_eq!(reader.cmd(&["PING"]), Reply::Status("PONG".into()));

    // The reader's own write: the reply first, then the invalidation.
    assert_eq!(reader.cmd(&["HSET", "h", "f", "1"]), Reply::Int(1));
    assert_eq!(reader.cmd(&["HGET", "h", "f"]), bulk("1"));
    assert_eq!(reader.cmd(&["HDEL", "h", "f"]), Reply::Int(1));
    assert_eq!(reader.read(), Some(invalidate(&["h"])));

    // A flush invalidates everything: a null instead of keys.
    assert_eq!(reader.cmd(&["GET", "k"]), bulk("3"));
    assert_eq!(writer.cmd(&["FLUSHALL"]), Reply::Status("OK".into()));
    assert_eq!(reader.read(), Some(Reply::Push(vec![bulk("invalidate"), Reply::Nil])));

    let info = writer.cmd(&["INFO"]).text();
    assert!(info.contains("tracking_clients:1\r\n"), "{info}");
    assert!(info.contains("tracking_total_keys:0\r\n"), "{info}");
}

#[test]
fn resp2_clients_get_invalidations_through_a_redirect_client_subscribed_to_the_channel() {
    let server = Server::start(&[]);
    let mut redirect = server.connect();
    redirect.set_timeout(Duration::from_secs(10));
    let id = redirect.cmd(&["CLIENT", "ID"]).text();
    assert_eq!(redirect.cmd(&["SUBSCRIBE", "__redis__:invalidate"]).texts(), ["subscribe", "__redis__:invalidate", "1"]);
    let mut cached = server.connect();
    assert_eq!(cached.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]), Reply::Status("OK".into()));
    assert_eq!(cached.cmd(&["CLIENT", "GETREDIR"]), Reply::Int(id.parse().unwrap()));
    assert_eq!(cached.cmd(&["MGET", "a", "b"]), Reply::Array(vec![Reply::Nil, Reply::Nil]));
    let mut writer = server.connect();
    assert_eq!(writer.cmd(&["SET", "b", "1"]), Reply::Status("OK".into()));
    let message = redirect.read().unwrap();
    assert_eq!(message, Reply::Array(vec![bulk("message"), bulk("__redis__:invalidate"), Reply::Array(vec![bulk("b")])]));

    // Bad input is refused with Redis's errors.
    assert_eq!(cached.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"]).text(), "ERR The client ID you want redirect to does not exist");
    assert_eq!(cached.cmd(&["CLIENT", "TRACKING", "ON", "PREFIX", "x"]).text(), "ERR PREFIX option requires BCAST mode to be enabled");
    assert_eq!(cached.cmd(&["CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"]).text(), "ERR You can't use both OPTIN and OPTOUT");
    assert_eq!(cached.cmd(&["CLIENT", "TRACKING", "MAYBE"]).text(), "ERR syntax error");
}

#[test]
fn bcast_clients_hear_of_every_key_under_their_prefixes_batched_per_command() {
    let server = Server::start(&[]);
    let mut writer = server.connect();
    let mut bcast = tracking(&server, &["BCAST", "PREFIX", "user:", "PREFIX", "cart:"]);
    assert_eq!(
        bcast.cmd(&["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "use"]).text(),
        "ERR Prefix 'use' overlaps with an existing prefix 'user:'. Prefixes for a single client must not overlap."
    );
    assert_eq!(writer.cmd(&["MSET", "user:1", "a", "user:2", "b", "other", "c"]), Reply::Status("OK".into()));
    assert_eq!(next_keys(&mut bcast), ["user:1", "user:2"]);
    assert_eq!(writer.cmd(&["SET", "cart:9", "x"]), Reply::Status("OK".into()));
    assert_eq!(next_keys(&mut bcast), ["cart:9"]);
    let info = writer.cmd(&["INFO", "stats"]).text();
    assert!(info.contains("tracking_total_prefixes:2\r\n"), "{info}");
}

#[test]
fn optin_remembers_only_after_caching_yes_and_optout_skips_after_caching_no() {
    let server = Server::start(&[]);
    let mut writer = server.connect();
    let mut optin = tracking(&server, &["OPTIN"]);
    assert_eq!(optin.cmd(&["GET", "skipped"]), Reply::Nil);
    assert_eq!(optin.cmd(&["CLIENT", "CACHING", "YES"]), Reply::Status("OK".into()));
    assert_eq!(optin.cmd(&["GET", "cached"]), Reply::Nil);
    assert_eq!(optin.cmd(&["CLIENT", "CACHING", "NO"]).text(), "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.");
    assert_eq!(writer.cmd(&["MSET", "skipped", "1", "cached", "1"]), Reply::Status("OK".into()));
    assert_eq!(next_keys(&mut optin), ["cached"]);

    let mut optout = tracking(&server, &["OPTOUT"]);
    assert_eq!(optout.cmd(&["CLIENT", "CACHING", "NO"]), Reply::Status("OK".into()));
    assert_eq!(optout.cmd(&["GET", "skipped"]), Reply::Bulk(b"1".to_vec()));
    assert_eq!(optout.cmd(&["GET", "cached"]), Reply::Bulk(b"1".to_vec()));
    assert_eq!(writer.cmd(&["MSET", "skipped", "2", "cached", "2"]), Reply::Status("OK".into()));
    assert_eq!(next_keys(&mut optout), ["cached"]);
    let info = optout.cmd(&["CLIENT", "TRACKINGINFO"]);
    assert_eq!(
        info,
        Reply::Map(vec![
            (bulk("flags"), Reply::Array(vec![bulk("on"), bulk("optout")])),
            (bulk("redirect"), Reply::Int(0)),
            (bulk("prefixes"), Reply::Array(vec![]))
        ])
    );
}

#[test]
fn a_client_tracking_a_key_on_one_node_is_invalidated_by_a_write_made_on_another() {
    // Three nodes in a full mesh; a client of node 0 caches `page` and hears of it when node
    // 2 writes it (the write arrives by merge, not by a command on node 0), and of a
    // FLUSHALL made on node 1.
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_mesh_port(), free_port())).collect();
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            let name = format!("track-{i}");
            let mut args: Vec<String> = ["--node-name", &name, "--active-replica", "yes", "--multi-master", "yes"].iter().map(|s| s.to_string()).collect();
            for (j, (port, _)) in ports.iter().enumerate() {
                if j != i {
                    args.extend(["--replicaof".to_string(), "127.0.0.1".to_string(), port.to_string()]);
                }
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Server::start_on(ports[i].0, ports[i].1, &args)
        })
        .collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    for conn in conns.iter_mut() {
        while !conn.cmd(&["INFO", "replication"]).text().contains("master_global_link_status:up") {
            assert!(Instant::now() < deadline, "mesh links did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Each write is made on a node that holds the one before it, so that it is newer: a node
    // that had not yet received `v1` could stamp `v2` with the same millisecond, and the tie
    // goes by node name (concurrent writes; the test failed 1 run in 30 that way).
    let holds = |conn: &mut Conn, value: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while conn.cmd(&["GET", "page"]) != bulk(value) {
            assert!(Instant::now() < deadline, "page = {value} did not arrive");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    assert_eq!(conns[0].cmd(&["SET", "page", "v1"]), Reply::Status("OK".into()));
    let mut cached = tracking(&servers[0], &[]);
    assert_eq!(cached.cmd(&["GET", "page"]), bulk("v1"));
    holds(&mut conns[2], "v1");
    assert_eq!(conns[2].cmd(&["SET", "page", "v2"]), Reply::Status("OK".into()));
    assert_eq!(cached.read(), Some(invalidate(&["page"])));
    assert_eq!(cached.cmd(&["GET", "page"]), bulk("v2"));
    holds(&mut conns[1], "v2");
    assert_eq!(conns[1].cmd(&["FLUSHALL"]), Reply::Status("OK".into()));
    assert_eq!(cached.read(), Some(Reply::Push(vec![bulk("invalidate"), Reply::Nil])));
}
