//! `COMMAND` answers with Redis 7.0's metadata: for every command and subcommand KeyMesh runs,
//! `COMMAND INFO` and `COMMAND DOCS` equal what Debian's redis-server 7.0 answers, and the list
//! of subcommands KeyMesh claims (`cmd::meta::SUBCOMMANDS`) is exactly the set it runs.

#![allow(clippy::unwrap_used)]

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{free_port, Conn, Reply, Server};

struct RedisServer(Child);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis_server() -> (RedisServer, Conn) {
    let port = free_port();
    let server = RedisServer(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/install-deps.sh installs it)"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            return (server, Conn::over(stream));
        }
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A RESP2 map (a flat array) as pairs, without the `subcommands` entry (its order is Redis's
/// hash order, checked one subcommand at a time instead).
fn without_subcommands(docs: &Reply) -> Vec<(Reply, Reply)> {
    let Reply::Array(items) = docs else { panic!("expected docs, got {docs:?}") };
    items.chunks(2).map(|p| (p[0].clone(), p[1].clone())).filter(|(k, _)| k.text() != "subcommands").collect()
}

/// Every string in a reply, nested ones included, joined by spaces.
fn flat(reply: &Reply) -> String {
    match reply {
        Reply::Array(items) => items.iter().map(flat).collect::<Vec<_>>().join(" "),
        Reply::Map(pairs) => pairs.iter().map(|(k, v)| format!("{} {}", flat(k), flat(v))).collect::<Vec<_>>().join(" "),
        other => other.text(),
    }
}

/// Subcommands a later Redis added that KeyMesh runs (`LATER_COMMANDS` in
/// scripts/gen-command-meta.py): Debian's redis-server 7.0 does not know them.
const LATER: &[&str] = &["client|setinfo"];

#[test]
fn client_setinfo_is_listed_and_described_as_redis_7_2_describes_it() {
    // Proves CLIENT SETINFO (Redis 7.2; redis-py, go-redis and Lettuce send it on connect) is
    // in CLIENT's subcommands for COMMAND INFO and COMMAND DOCS, with Redis 7.2's arity,
    // flags, categories and arguments, and that it runs.
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert!(c.cmd(&["COMMAND", "LIST"]).texts().contains(&"client|setinfo".to_string()));
    let Reply::Array(info) = c.cmd(&["COMMAND", "INFO", "client|setinfo"]) else { panic!("COMMAND INFO") };
    let Reply::Array(info) = &info[0] else { panic!("COMMAND INFO client|setinfo: {info:?}") };
    assert_eq!(info[0].text(), "client|setinfo");
    assert_eq!(info[1], Reply::Int(4));
    assert_eq!(info[2].texts(), ["noscript", "loading", "stale"]);
    assert_eq!(info[6].texts(), ["@slow", "@connection"]);
    let Reply::Array(client) = c.cmd(&["COMMAND", "INFO", "client"]) else { panic!("COMMAND INFO client") };
    let Reply::Array(client) = &client[0] else { panic!("{client:?}") };
    let Reply::Array(subs) = &client[9] else { panic!("{client:?}") };
    assert!(subs.iter().any(|s| matches!(s, Reply::Array(i) if i[0].text() == "client|setinfo")), "{subs:?}");
    let docs = flat(&c.cmd(&["COMMAND", "DOCS", "client|setinfo"]));
    for part in ["7.2.0", "LIB-NAME", "LIB-VER", "Sets information specific to the client or connection."] {
        assert!(docs.contains(part), "COMMAND DOCS client|setinfo lacks {part}: {docs}");
    }
    assert!(flat(&c.cmd(&["COMMAND", "DOCS", "client"])).contains("client|setinfo"));
    assert_eq!(c.cmd(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]).text(), "OK");
    assert_eq!(c.cmd(&["CLIENT", "SETINFO", "LIB-VER", "5.0.1"]).text(), "OK");
}

#[test]
fn command_info_and_docs_equal_redis_for_everything_keymesh_runs() {
    let server = Server::start(&[]);
    let mut ours = server.connect();
    let (_redis, mut theirs) = redis_server();
    let names = ours.cmd(&["COMMAND", "LIST"]).texts();
    assert!(names.contains(&"set".to_string()) && names.contains(&"client|list".to_string()), "{names:?}");
    let mut compared = 0;
    for name in &names {
        let mine = ours.cmd(&["COMMAND", "INFO", name]);
        let reference = theirs.cmd(&["COMMAND", "INFO", name]);
        if reference == Reply::Array(vec![Reply::Nil]) || reference == Reply::Array(vec![Reply::Array(vec![])]) {
            continue; // a KeyMesh-only command
        }
        let (Reply::Array(m), Reply::Array(r)) = (&mine, &reference) else { panic!("{name}: {mine:?} vs {reference:?}") };
        let (Reply::Array(m), Reply::Array(r)) = (&m[0], &r[0]) else { panic!("{name}: {mine:?} vs {reference:?}") };
        assert_eq!(m[..9], r[..9], "COMMAND INFO {name}");
        // Subcommands: every one KeyMesh lists is Redis's, with Redis's info.
        let Reply::Array(subs) = &m[9] else { panic!("{name}: subcommands {:?}", m[9]) };
        let Reply::Array(redis_subs) = &r[9] else { panic!("{name}: subcommands {:?}", r[9]) };
        for sub in subs {
            let Reply::Array(info) = sub else { panic!("{name}: subcommand {sub:?}") };
            if LATER.contains(&info[0].text().as_str()) {
                continue; // checked against its own Redis below
            }
            assert!(redis_subs.contains(sub), "{name}: subcommand {sub:?} is not Redis's");
        }
        let mine = ours.cmd(&["COMMAND", "DOCS", name]);
        let reference = theirs.cmd(&["COMMAND", "DOCS", name]);
        let (Reply::Array(m), Reply::Array(r)) = (&mine, &reference) else { panic!("{name}: {mine:?} vs {reference:?}") };
        assert_eq!(m[0], r[0], "COMMAND DOCS {name}");
        assert_eq!(without_subcommands(&m[1]), without_subcommands(&r[1]), "COMMAND DOCS {name}");
        compared += 1;
    }
    assert!(compared > 200, "compared only {compared} commands");
}

#[test]
fn the_listed_subcommands_are_exactly_the_ones_keymesh_runs() {
    let server = Server::start(&[]);
    let mut ours = server.connect();
    let (_redis, mut theirs) = redis_server();
    let listed = ours.cmd(&["COMMAND", "LIST"]).texts();
    for name in theirs.cmd(&["COMMAND", "LIST"]).texts() {
        let Some((container, sub)) = name.split_once('|') else { continue };
        if !listed.contains(&container.to_string()) {
            continue;
        }
        // Called without its arguments (on a fresh server: nothing to lose), a subcommand
        // KeyMesh runs answers anything but "unknown subcommand" or "not supported".
        let reply = ours.cmd(&[container, sub]);
        let text = reply.text().to_lowercase();
        let runs = !(reply.is_error() && (text.contains("unknown subcommand") || text.contains("not supported")));
        assert_eq!(listed.contains(&name), runs, "{name}: listed {} but the server answered {reply:?}", listed.contains(&name));
    }
    // COMMAND GETKEYSANDFLAGS as Redis's introspection-2 unit asks.
    assert_eq!(ours.cmd(&["COMMAND", "GETKEYS", "EVAL", "return 1", "0"]), Reply::Array(vec![]));
    assert_eq!(ours.cmd(&["COMMAND", "GETKEYS", "MEMORY", "USAGE", "key"]).texts(), ["key"]);
    for line in [
        &["set", "k1", "v1"][..],
        &["mset", "k1", "v1", "k2", "v2"],
        &["LMOVE", "k1", "k2", "left", "right"],
        &["sort", "k1", "store", "k2"],
        &["set", "k", "v", "GET"],
    ] {
        let mut args = vec!["COMMAND", "GETKEYSANDFLAGS"];
        args.extend_from_slice(line);
        assert_eq!(ours.cmd(&args), theirs.cmd(&args), "{line:?}");
    }
    assert_eq!(ours.cmd(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "non_existing"]), Reply::Array(vec![]));
    let scripting = ours.cmd(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "scripting"]).texts();
    assert!(scripting.contains(&"eval".to_string()) && scripting.contains(&"script|kill".to_string()) && !scripting.contains(&"set".to_string()));
}
