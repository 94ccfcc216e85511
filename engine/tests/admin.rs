//! Black-box tests of the operator's admin API and the mesh handshake's versioning: real
//! `keymesh-server` processes on loopback, called over gRPC as the operator calls them.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use keymesh_proto as pb;
use keymesh_proto::admin_client::AdminClient;
use keymesh_proto::mesh_client::MeshClient;
use support::{free_mesh_port, free_port, Conn, Reply, Server};
use tonic::transport::Channel;

const DEADLINE: Duration = Duration::from_secs(15);
const PASSWORD: &str = "admin-test-secret";

fn start(name: &str, port: u16, peers: &[u16]) -> Server {
    let mut args: Vec<String> = ["--node-name", name, "--active-replica", "yes", "--multi-master", "yes", "--requirepass", PASSWORD, "--masterauth", PASSWORD]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for p in peers {
        args.extend(["--replicaof".to_string(), "127.0.0.1".to_string(), p.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_on(port, free_port(), &args)
}

fn authed(port: u16) -> Conn {
    let mut conn = Conn::connect(port);
    assert_eq!(conn.cmd(&["AUTH", PASSWORD]).text(), "OK");
    conn
}

async fn admin(port: u16) -> AdminClient<Channel> {
    AdminClient::connect(format!("http://127.0.0.1:{}", port + 10000)).await.unwrap()
}

fn request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("authorization", format!("Bearer {PASSWORD}").parse().unwrap());
    request
}

async fn status(port: u16, config_keys: &[&str]) -> pb::NodeStatus {
    let keys = config_keys.iter().map(|k| k.to_string()).collect();
    admin(port).await.status(request(pb::StatusRequest { config_keys: keys })).await.unwrap().into_inner()
}

async fn handoff(port: u16, start: bool, grace_ms: u64) -> pb::NodeStatus {
    admin(port).await.handoff(request(pb::HandoffRequest { start, grace_ms })).await.unwrap().into_inner()
}

async fn wait_until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + DEADLINE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out after {DEADLINE:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True once the server closed `conn` (a read sees end of file).
fn closed(conn: &mut Conn) -> bool {
    conn.set_timeout(Duration::from_secs(5));
    conn.read().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_closes_idle_clients_at_once_busy_ones_after_the_grace_then_refuses_writes() {
    // Proves the engine half of the handoff: idle connections close as soon as it starts (their
    // clients reconnect elsewhere), a connection in MULTI stays until the grace runs out, a
    // client that connects meanwhile is still served, /readyz says 503 throughout, and once the
    // handoff is done writes are refused while reads work, `last_seq` stops moving, and a
    // cancel makes the node take writes again.
    let port = free_mesh_port();
    let server = start("leaving", port, &[]);
    let mut idle = authed(port);
    let mut busy = authed(port);
    assert_eq!(busy.cmd(&["MULTI"]).text(), "OK");
    assert_eq!(server.http_get("/readyz").0, 200);

    let started = Instant::now();
    let closing = handoff(port, true, 1500).await;
    assert_eq!(closing.handoff, "closing", "{closing:?}");
    assert!(!closing.ready && server.http_get("/readyz").0 == 503, "not ready while handing off: {closing:?}");
    assert!(closed(&mut idle), "an idle client is closed at once");
    assert!(started.elapsed() < Duration::from_millis(1000), "closed after {:?}", started.elapsed());
    assert_eq!(busy.cmd(&["SET", "queued", "1"]).text(), "QUEUED", "a client in MULTI keeps its connection during the grace");
    let mut late = authed(port);
    assert_eq!(late.cmd(&["SET", "late", "1"]).text(), "OK", "a client that connects during the grace is served");

    wait_until("the handoff to finish", || async { status(port, &[]).await.handoff == "done" }).await;
    assert!(started.elapsed() >= Duration::from_millis(1400), "done after {:?}, before the grace ran out", started.elapsed());
    assert!(closed(&mut busy), "busy clients are closed once the grace ran out");
    assert!(closed(&mut late), "clients from the grace are closed too");
    let done = status(port, &[]).await;
    assert!(done.draining && done.clients == 0 && done.last_seq >= 1, "{done:?}");

    let mut after = authed(port);
    let refused = after.cmd(&["SET", "after", "1"]);
    assert!(matches!(&refused, Reply::Error(e) if e.starts_with("READONLY")), "writes are refused after the handoff: {refused:?}");
    assert_eq!(after.cmd(&["GET", "late"]).text(), "1", "reads are served");
    assert_eq!(status(port, &[]).await.last_seq, done.last_seq, "nothing originated after the handoff");

    let cancelled = handoff(port, false, 0).await;
    assert!(cancelled.handoff == "serving" && !cancelled.draining, "{cancelled:?}");
    assert_eq!(after.cmd(&["SET", "after", "1"]).text(), "OK", "a cancelled handoff takes writes again");
    assert_eq!(server.http_get("/readyz").0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_report_applying_a_leaving_nodes_writes_through_its_last_sequence() {
    // Proves the handoff handshake's data: once the leaving node refuses writes, its
    // `last_seq` is final, and its peer reports having merged that run through that sequence
    // (`synced_run_id`, `applied_seq`) — the exact condition the operator waits for before it
    // deletes the pod — and holds every write the leaving node acknowledged.
    let (a, b) = (free_mesh_port(), free_mesh_port());
    let _servers = [start("a", a, &[b]), start("b", b, &[a])];
    let mut on_b = authed(b);
    for i in 0..200 {
        assert_eq!(on_b.cmd(&["SET", &format!("k{i}"), &i.to_string()]).text(), "OK");
    }
    let leaving = handoff(b, true, 0).await;
    // With no busy client and no grace, the handoff may be over before the call returns.
    assert!(matches!(leaving.handoff.as_str(), "closing" | "done"), "{leaving:?}");
    wait_until("b's handoff", || async { status(b, &[]).await.handoff == "done" }).await;
    let leaving = status(b, &[]).await;
    assert!(leaving.last_seq >= 200, "{leaving:?}");
    wait_until("a to confirm b's last sequence", || async {
        status(a, &[]).await.peers.iter().any(|p| p.synced_run_id == leaving.run_id && p.applied_seq >= leaving.last_seq)
    })
    .await;
    let mut on_a = authed(a);
    assert_eq!(on_a.cmd(&["DBSIZE"]).text(), "200");
    assert_eq!(on_a.cmd(&["GET", "k199"]).text(), "199");
}

async fn subscribe(port: u16, protocol_version: u32) -> Result<pb::Welcome, tonic::Status> {
    let mut client = MeshClient::connect(format!("http://127.0.0.1:{}", port + 10000)).await.unwrap();
    let hello = pb::Hello { node_name: format!("probe-v{protocol_version}"), node_id: 77, password: PASSWORD.into(), protocol_version, ..pb::Hello::default() };
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(pb::SubscriberMessage { body: Some(pb::subscriber_message::Body::Hello(hello)) }).await.unwrap();
    let mut stream = client.subscribe(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    match stream.message().await? {
        Some(pb::OriginMessage { body: Some(pb::origin_message::Body::Welcome(w)) }) => Ok(w),
        other => panic!("expected a Welcome, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adjacent_mesh_protocol_versions_interoperate_and_others_are_refused_visibly() {
    // Proves the version rule of the mesh handshake: a subscriber one version older or newer is
    // welcomed with this node's version; one that sends no version speaks version 1 (welcomed
    // while this node speaks 2, refused from 3 on); one further apart is refused with
    // FAILED_PRECONDITION naming both versions, and the refusals show in INFO, /metrics and the
    // admin Status.
    let port = free_mesh_port();
    let server = start("origin", port, &[]);
    let ours = status(port, &[]).await.protocol_version;
    assert!(ours >= 2, "{ours}");
    for adjacent in [ours - 1, ours, ours + 1] {
        let welcome = subscribe(port, adjacent).await.unwrap_or_else(|e| panic!("version {adjacent} refused: {e}"));
        assert_eq!(welcome.protocol_version, ours);
    }
    let unversioned = subscribe(port, 0).await;
    let mut refusals = 1;
    if ours <= 2 {
        assert!(unversioned.is_ok(), "{unversioned:?}");
    } else {
        let refused = unversioned.expect_err("version 1 is two versions apart");
        assert!(refused.message().contains("the peer speaks version 1"), "{refused:?}");
        refusals += 1;
    }
    let refused = subscribe(port, ours + 5).await.expect_err("a version 5 apart is refused");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(refused.message().contains("incompatible mesh protocol") && refused.message().contains(&(ours + 5).to_string()), "{refused:?}");

    let info = authed(port).cmd(&["INFO", "replication"]).text();
    assert!(info.contains(&format!("mesh_refused_subscribers:{refusals}\r\n")), "{info}");
    assert!(info.lines().any(|l| l.starts_with("mesh_last_refusal:probe-v") && l.contains("incompatible mesh protocol")), "{info}");
    let (_, metrics) = server.http_get("/metrics");
    assert!(metrics.contains(&format!("keymesh_mesh_refused_subscribers_total{{reason=\"protocol\"}} {refusals}")), "{metrics}");
    let admin_view = status(port, &[]).await;
    assert!(admin_view.refused.iter().any(|r| r.contains("incompatible mesh protocol")), "{admin_view:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_config_changes_live_directives_all_or_nothing() {
    // Proves the operator's live-config path: SetConfig changes what CONFIG SET may change,
    // Status reports the values asked for, and a request naming a restart-only directive is
    // refused whole (its valid part is not applied either).
    let port = free_mesh_port();
    let _server = start("config", port, &[]);
    let mut client = admin(port).await;
    let values = [("maxmemory-policy", "allkeys-lru"), ("maxmemory", "104857600")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let applied = client.set_config(request(pb::SetConfigRequest { values })).await.unwrap().into_inner();
    assert_eq!(applied.config.get("maxmemory-policy").map(String::as_str), Some("allkeys-lru"), "{applied:?}");
    let mut conn = authed(port);
    assert_eq!(conn.cmd(&["CONFIG", "GET", "maxmemory"]).texts(), ["maxmemory", "104857600"]);

    let values = [("maxmemory-policy", "allkeys-lfu"), ("port", "1")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let refused = client.set_config(request(pb::SetConfigRequest { values })).await.expect_err("port cannot change live");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("can't set immutable config 'port'"), "{refused:?}");
    let now = status(port, &["maxmemory-policy", "maxmemory"]).await;
    assert_eq!(now.config.get("maxmemory-policy").map(String::as_str), Some("allkeys-lru"), "nothing applied: {now:?}");

    let unauthorized = AdminClient::connect(format!("http://127.0.0.1:{}", port + 10000))
        .await
        .unwrap()
        .set_config(pb::SetConfigRequest::default())
        .await
        .expect_err("no password");
    assert_eq!(unauthorized.code(), tonic::Code::Unauthenticated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_origin_shows_no_lag_left_over_from_its_previous_run() {
    // Proves the lag a peer reports for a restarted origin counts that origin's new run only:
    // the old run's higher sequence numbers must not leave a lag that never drains (an upgrade
    // waits for lag 0 before it replaces the next pod).
    let (a, b) = (free_mesh_port(), free_mesh_port());
    let server_a = start("a", a, &[b]);
    let server_b = start("b", b, &[a]);
    let mut on_b = authed(b);
    for i in 0..300 {
        assert_eq!(on_b.cmd(&["SET", &format!("k{i}"), "v"]).text(), "OK");
    }
    let lag_on_a = || async { status(a, &[]).await.peers.first().map(|p| (p.link.clone(), p.lag_ops, p.applied_seq)) };
    wait_until("a to merge b's 300 writes", || async {
        lag_on_a().await.is_some_and(|(link, lag, applied)| link == "connected" && lag == 0 && applied >= 300)
    })
    .await;
    drop(server_b);
    let _server_b = start("b", b, &[a]);
    wait_until("a to resync from b's new run with no lag", || async {
        let peer = status(a, &[]).await.peers.into_iter().next();
        peer.is_some_and(|p| p.link == "connected" && p.lag_ops == 0 && p.initial_sync_done && p.applied_seq < 300)
    })
    .await;
    drop(server_a);
}
