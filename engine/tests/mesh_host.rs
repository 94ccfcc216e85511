//! The mesh runs against any `mesh::Host`, not only the server: here a link of an in-process
//! `Mesh` whose host is a test double subscribes to a real `keymesh-server`. Its merges land
//! in its own `Store`, and what they cause beyond the keyspace (published messages, changed
//! keys) reaches the double's `Delivery`: the mesh needs nothing else from the node.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keymesh_engine::db::{Key, Store};
use keymesh_engine::hlc::{node_id_from_name, Hlc, OffsetClock, Timestamp};
use keymesh_engine::mesh::{Delivery, Host, Identity, LinkSettings, Mesh, PeerAddr};
use keymesh_engine::repl::log::ReplLog;
use parking_lot::Mutex;
use support::{encode, free_mesh_port, free_port, Server};

/// A host that records what the mesh delivers.
#[derive(Default)]
struct RecordingHost {
    published: Mutex<Vec<(Bytes, Bytes)>>,
    changed: Mutex<Vec<(usize, Key)>>,
    /// When set: for each message delivered, whether this store held the key the message
    /// names at that moment.
    store: std::sync::OnceLock<Arc<Store>>,
    held_at_publish: Mutex<Vec<bool>>,
}

impl Delivery for RecordingHost {
    fn publish(&self, channel: &Bytes, message: &Bytes) {
        if let Some(store) = self.store.get() {
            self.held_at_publish.lock().push(holds(store, message));
        }
        self.published.lock().push((channel.clone(), message.clone()));
    }

    fn wants_changed_keys(&self) -> bool {
        true
    }

    fn keys_changed(&self, keys: Vec<(usize, Key)>) {
        self.changed.lock().extend(keys);
    }
}

impl Host for RecordingHost {
    fn password_ok(&self, given: &[u8]) -> bool {
        given == b"secret"
    }

    fn tls_replication(&self) -> bool {
        false
    }

    fn link_tls(&self, _peer_host: &str) -> Option<tonic::transport::ClientTlsConfig> {
        None
    }

    fn link_settings(&self) -> LinkSettings {
        LinkSettings { masterauth: "secret".into(), repl_timeout: Duration::from_secs(5) }
    }

    fn snapshot_frontier_cap(&self) -> Timestamp {
        Timestamp::MAX
    }
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An in-process mesh with a `RecordingHost`, subscribed to the node on client port `port`.
fn double_subscribed_to(port: u16) -> (tokio::runtime::Runtime, Arc<RecordingHost>, Arc<Store>, Arc<Mesh>) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let host = Arc::new(RecordingHost::default());
    let store = Arc::new(Store::new(16, Hlc::new(Arc::new(OffsetClock(0)), 60_000), node_id_from_name("double")));
    store.enable_replication();
    let identity = Identity { node_name: "double".into(), node_id: store.node_id, run_id: keymesh_engine::mesh::new_run_id() };
    let weak: Weak<dyn Host> = Arc::downgrade(&host) as Weak<dyn Host>;
    let mesh = Mesh::new(weak, store.clone(), Arc::new(ReplLog::new(1 << 20)), identity, &prometheus::Registry::new());
    runtime.block_on(async { mesh.start(vec![PeerAddr::from_client_port("127.0.0.1", port).unwrap()]) });
    (runtime, host, store, mesh)
}

fn holds(store: &Store, key: &[u8]) -> bool {
    store.lock_shard(0, store.shard_of(key)).raw(key).is_some()
}

#[test]
fn a_mesh_merges_into_its_own_store_and_delivers_to_its_host_without_a_server() {
    let port = free_mesh_port();
    let origin = Server::start_on(port, free_port(), &["--node-name", "origin", "--active-replica", "yes", "--multi-master", "yes", "--requirepass", "secret"]);
    let mut client = origin.connect();
    assert_eq!(client.cmd(&["AUTH", "secret"]).text(), "OK");
    assert_eq!(client.cmd(&["SET", "before", "1"]).text(), "OK");

    let (runtime, host, store, _mesh) = double_subscribed_to(port);

    // The full sync: the key written before the link existed.
    wait_for("the full sync", || holds(&store, b"before"));
    // The live stream: a write and a published message.
    assert_eq!(client.cmd(&["SET", "after", "2"]).text(), "OK");
    client.cmd(&["PUBLISH", "news", "hello"]);
    wait_for("the live write", || holds(&store, b"after"));
    wait_for("the published message", || !host.published.lock().is_empty());

    assert_eq!(host.published.lock().as_slice(), &[(Bytes::from("news"), Bytes::from("hello"))]);
    let changed = host.changed.lock().clone();
    assert!(changed.contains(&(0, Key::from(&b"before"[..]))), "changed keys: {changed:?}");
    assert!(changed.contains(&(0, Key::from(&b"after"[..]))), "changed keys: {changed:?}");
    runtime.shutdown_timeout(Duration::from_secs(1));
}

/// A pipelined burst of writes with messages among them reaches the link in batches of up to
/// 512 ops, which it merges a chunk at a time between yields, or on a blocking thread when a
/// batch is large (the second round's 2 KB values), and still in order: the messages in the
/// order sent, each delivered after the write sent before it was merged.
#[test]
fn a_mesh_merges_a_burst_of_writes_and_messages_in_order_however_it_is_batched() {
    let port = free_mesh_port();
    let origin = Server::start_on(port, free_port(), &["--node-name", "origin", "--active-replica", "yes", "--multi-master", "yes", "--requirepass", "secret"]);
    let mut client = origin.connect();
    assert_eq!(client.cmd(&["AUTH", "secret"]).text(), "OK");
    let (runtime, host, store, _mesh) = double_subscribed_to(port);
    assert!(host.store.set(store.clone()).is_ok());
    assert_eq!(client.cmd(&["SET", "ready", "1"]).text(), "OK");
    wait_for("the link", || holds(&store, b"ready"));

    let (writes, every) = (3000, 25);
    let mut expected = Vec::new();
    for (round, value_len) in [(0, 10), (1, 2000)] {
        let value = "x".repeat(value_len);
        let mut burst = Vec::new();
        for i in 0..writes {
            let key = format!("r{round}:{i}");
            burst.extend(encode(&["SET", &key, &value]));
            if i % every == every - 1 {
                burst.extend(encode(&["PUBLISH", "order", &key]));
                expected.push(Bytes::from(key));
            }
        }
        client.send_raw(&burst).unwrap();
        for _ in 0..writes + writes / every {
            assert!(!client.read().unwrap().is_error());
        }
    }

    wait_for("every message", || host.published.lock().len() == expected.len());
    let messages: Vec<Bytes> = host.published.lock().iter().map(|(_, m)| m.clone()).collect();
    assert_eq!(messages, expected);
    let held = host.held_at_publish.lock().clone();
    assert!(
        held.iter().all(|&h| h),
        "messages delivered before the write sent before them: {:?}",
        held.iter().enumerate().filter(|(_, &h)| !h).map(|(i, _)| i).collect::<Vec<_>>()
    );
    assert!(holds(&store, format!("r1:{}", writes - 1).as_bytes()));
    runtime.shutdown_timeout(Duration::from_secs(1));
}

#[test]
fn a_host_whose_password_is_wrong_is_refused_by_the_origin() {
    let port = free_mesh_port();
    let origin = Server::start_on(port, free_port(), &["--node-name", "origin", "--active-replica", "yes", "--multi-master", "yes", "--requirepass", "other"]);
    let mut client = origin.connect();
    assert_eq!(client.cmd(&["AUTH", "other"]).text(), "OK");

    let (runtime, _host, store, _mesh) = double_subscribed_to(port);

    // The origin names the refusal in its INFO; the double's link keeps its error.
    wait_for("the origin to refuse the link", || {
        let info = client.cmd(&["INFO", "replication"]).text();
        info.contains("mesh_last_refusal") && info.contains("invalid password")
    });
    assert!(!holds(&store, b"anything"));
    runtime.shutdown_timeout(Duration::from_secs(1));
}
