//! Settings belong to a server, not to the process: two servers started in one process
//! (as tests and embedders do) keep their own eviction policy, password and limits, and a
//! `CONFIG SET` on one leaves the other alone.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;

use keymesh_engine::config::Config;
use keymesh_engine::server::{self, Server};
use support::{Conn, Reply};

/// The data directory of the in-process server `name` (removed when the test ends).
fn data_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("keymesh-settings-{}-{name}", std::process::id()))
}

/// Starts a server in this process on an ephemeral loopback port with `flags`; its tasks run
/// on `runtime`. Returns the server and its client port.
fn start_in_process(runtime: &tokio::runtime::Runtime, name: &str, flags: &[&str]) -> (Arc<Server>, u16) {
    let dir = data_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mesh_port = support::free_port().to_string();
    let mut args: Vec<String> =
        ["--port", "0", "--bind", "127.0.0.1", "--metrics-port", "0", "--mesh-port", &mesh_port, "--node-name", name].iter().map(|s| s.to_string()).collect();
    args.extend(["--dir".to_string(), dir.display().to_string()]);
    args.extend(flags.iter().map(|s| s.to_string()));
    let server = Server::new(Config::from_args(&args).unwrap(), "test").unwrap();
    let listeners = runtime.block_on(server::bind(&server)).unwrap();
    let port = server.port.load(std::sync::atomic::Ordering::Relaxed) as u16;
    runtime.spawn(server::run(server.clone(), listeners));
    (server, port)
}

/// Waits until the server on `port` has loaded its snapshot: `server::run` loads it after the
/// listeners start, and a command sent before then meets LOADING. `password` answers NOAUTH
/// (which a server sends before LOADING).
fn await_loaded(port: u16, password: Option<&str>) {
    let mut c = Conn::connect(port);
    for _ in 0..1000 {
        let reply = c.cmd(&["PING"]).text();
        if reply == "PONG" {
            return;
        }
        if let (true, Some(p)) = (reply.starts_with("NOAUTH"), password) {
            c.cmd(&["AUTH", p]);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the server on port {port} did not finish loading");
}

#[test]
fn two_servers_in_one_process_keep_their_own_settings() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // Started in this order, a process-wide policy would end as the second server's.
    let (lfu, lfu_port) = start_in_process(&runtime, "lfu", &["--maxmemory-policy", "allkeys-lfu", "--requirepass", "secret"]);
    let (plain, plain_port) = start_in_process(&runtime, "plain", &["--maxmemory-policy", "noeviction", "--maxmemory", "1gb"]);
    await_loaded(lfu_port, Some("secret"));
    await_loaded(plain_port, None);
    let mut a = Conn::connect(lfu_port);
    let mut b = Conn::connect(plain_port);

    assert!(a.cmd(&["SET", "k", "v"]).text().starts_with("NOAUTH"), "the first server has a password");
    assert_eq!(a.cmd(&["AUTH", "secret"]).text(), "OK");
    assert_eq!(b.cmd(&["SET", "k", "v"]).text(), "OK", "the second has none");
    assert_eq!(a.cmd(&["SET", "k", "v"]).text(), "OK");

    // OBJECT FREQ answers only under an LFU policy: each server answers by its own.
    assert!(matches!(a.cmd(&["OBJECT", "FREQ", "k"]), Reply::Int(_)), "the LFU server counts frequencies");
    let refused = b.cmd(&["OBJECT", "FREQ", "k"]);
    assert!(refused.is_error() && refused.text().contains("LFU"), "the noeviction server does not: {refused:?}");
    let info = |c: &mut Conn| c.cmd(&["INFO", "memory"]).text();
    assert!(info(&mut a).contains("maxmemory:0\r\nmaxmemory_policy:allkeys-lfu\r\n"), "{}", info(&mut a));
    assert!(info(&mut b).contains("maxmemory:1073741824\r\nmaxmemory_policy:noeviction\r\n"), "{}", info(&mut b));

    // CONFIG SET on one server changes that server only.
    assert_eq!(b.cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-lfu"]).text(), "OK");
    assert!(matches!(b.cmd(&["OBJECT", "FREQ", "k"]), Reply::Int(_)), "the second server now counts too");
    assert_eq!(a.cmd(&["CONFIG", "GET", "maxmemory-policy"]).texts(), ["maxmemory-policy", "allkeys-lfu"]);
    assert_eq!(a.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]).text(), "OK");
    assert!(a.cmd(&["OBJECT", "FREQ", "k"]).is_error(), "the first server stopped counting");
    assert!(matches!(b.cmd(&["OBJECT", "FREQ", "k"]), Reply::Int(_)), "and the second did not");
    assert_eq!(lfu.settings().maxmemory_policy.name(), "allkeys-lru");
    assert_eq!(plain.settings().maxmemory_policy.name(), "volatile-lfu");

    lfu.begin_shutdown();
    plain.begin_shutdown();
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    for name in ["lfu", "plain"] {
        std::fs::remove_dir_all(data_dir(name)).unwrap();
    }
}
