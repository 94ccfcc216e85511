//! The engine accepts the configuration the operator writes for `spec.persistence`, and acts on
//! it: a release `keymesh-server` started from the generated config file (its include and its
//! `dir` pointed at temporary paths, its ports at free ones) reports the schedule, saves on it
//! to `dir`, takes a new schedule live the way the operator sends one, and comes back from its
//! snapshot after a kill. Needs the release `keymesh-server` and `redis-cli`; skipped otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keymesh_operator::api::CacheCluster;
use keymesh_operator::build::engine_settings;
use keymesh_operator::names::ClusterNames;
use keymesh_operator::persistence::DATA_DIR;
use keymesh_operator::validate::validate;

fn server_binary() -> PathBuf {
    if let Ok(path) = std::env::var("KEYMESH_SERVER") {
        return PathBuf::from(path);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or(root.join("target"));
    target.join("release/keymesh-server")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Engine(Child);

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &Path, port: u16) -> Engine {
    let child = Command::new(server_binary())
        .arg(config)
        .args(["--port", &port.to_string(), "--mesh-port", &free_port().to_string(), "--metrics-port", "0", "--bind", "127.0.0.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("keymesh-server starts");
    let engine = Engine(child);
    wait_for("the engine to load and answer", || cli(port, &["PING"]) == "PONG");
    engine
}

#[test]
fn the_engine_accepts_and_acts_on_the_persistence_settings_the_operator_writes() {
    if !server_binary().is_file() || Command::new("redis-cli").arg("--version").output().is_err() {
        eprintln!("skipped: needs {} and redis-cli", server_binary().display());
        return;
    }
    let yaml = "apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata:\n  name: demo\n  namespace: cache\nspec:\n  persistence: {enabled: true, size: 1Gi, snapshotIntervalSeconds: 1}\n";
    let cluster: CacheCluster = serde_yaml::from_str(yaml).unwrap();
    let spec = validate(&cluster).unwrap_or_else(|e| panic!("{e}"));
    let settings = engine_settings(&spec, &ClusterNames::new("demo", "cache", "cluster.local"), None);
    assert_eq!(settings.live.get("save").map(String::as_str), Some("1 1"), "the schedule changes live: {:?}", settings.live);

    let work = std::env::temp_dir().join(format!("keymesh-operator-engine-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let data = work.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(work.join("peers.conf"), "").unwrap();
    let mut text = String::new();
    for line in settings.text.lines() {
        let line = match line.split_once(' ') {
            Some(("include", _)) => format!("include {}", work.join("peers.conf").display()),
            Some(("dir", dir)) => {
                assert_eq!(dir, DATA_DIR, "the engine's dir is the claim's mount");
                format!("dir {}", data.display())
            }
            _ => line.to_string(),
        };
        text.push_str(&line);
        text.push('\n');
    }
    let config = work.join("keymesh.conf");
    std::fs::write(&config, text).unwrap();

    let port = free_port();
    let engine = start(&config, port);
    assert_eq!(cli(port, &["CONFIG", "GET", "save"]), "save\n1 1");
    cli(port, &["SET", "k", "v"]);
    wait_for("the scheduled snapshot", || data.join("dump.rdb").is_file());
    // The operator's live change (admin SetConfig, the same path as CONFIG SET).
    assert_eq!(cli(port, &["CONFIG", "SET", "save", "3600 1"]), "OK");
    assert_eq!(cli(port, &["CONFIG", "GET", "save"]), "save\n3600 1");
    drop(engine);

    let _engine = start(&config, port);
    assert_eq!(cli(port, &["GET", "k"]), "v", "the engine came back from its snapshot");
    let _ = std::fs::remove_dir_all(&work);
}
