//! End-to-end test of `spec.persistence` on the local cluster (issue 15): claims provisioned by
//! the node agent as directories on the pods' nodes (`agent::provisioner`), engines saving on
//! the operator's schedule, and a whole cluster deleted at once coming back with its data.
//!
//! Needs root (network namespaces) and skips cleanly without it; takes the cluster lock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use keymesh_e2e::local_cluster::load::{LoadOptions, Targets, WriteLoad};
use keymesh_e2e::local_cluster::{serial, LocalCluster, Options};
use keymesh_e2e::require_netns;

const NS: &str = "default";
const NAME: &str = "persist";
const SETTLE: Duration = Duration::from_secs(120);
const KEYS: usize = 5_000;

const CACHE: &str = "apiVersion: keymesh.io/v1alpha1
kind: CacheCluster
metadata:
  name: persist
spec:
  replicas: 3
  persistence:
    enabled: true
    size: 64Mi
    snapshotIntervalSeconds: 1
";

fn pods() -> Vec<String> {
    (0..3).map(|i| format!("{NAME}-{i}")).collect()
}

fn wait_ready(cluster: &LocalCluster) {
    cluster
        .wait_for("the CacheCluster Ready with 3 Ready pods", SETTLE, || {
            let view = cluster.cache_view(NS, NAME)?;
            keymesh_e2e::local_cluster::cache::ready(&view.object)?;
            if view.pods.len() == 3 && view.pods.iter().all(|p| p.ready && !p.deleting) {
                Ok(())
            } else {
                Err(format!("pods {:?}", view.pods.iter().map(|p| (&p.name, p.ready, p.deleting)).collect::<Vec<_>>()))
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Proves a full-cluster restart with persistence on: every pod gets a claim bound to a local
/// volume on its node, the engines snapshot to it, and after `kubectl delete pods` of all three
/// at once under a write load, the recreated pods (on the same claims) come back Ready with
/// every preloaded key and every acknowledged write.
#[test]
fn deleting_every_pod_at_once_brings_the_data_back_from_the_volumes() {
    require_netns!();
    let _serial = serial();
    let cluster = Arc::new(LocalCluster::start(Options::release_build()).unwrap_or_else(|e| panic!("local cluster did not start: {e}")));
    cluster.ensure_namespace(NS).unwrap();
    let file = std::env::temp_dir().join(format!("keymesh-persist-e2e-{}.yaml", std::process::id()));
    std::fs::write(&file, CACHE).unwrap();
    cluster.control_plane().kubectl(["apply", "-n", NS, "-f", &file.to_string_lossy()]).unwrap();
    let _ = std::fs::remove_file(&file);
    wait_ready(&cluster);
    let password = cluster.password(NS, NAME).unwrap();
    for pod in pods() {
        let claim = cluster.get_json(&["pvc", &format!("data-{pod}"), "-n", NS]).unwrap();
        assert_eq!(claim["status"]["phase"], "Bound", "{claim}");
    }

    cluster.preload(NS, &pods()[0], &password, KEYS).unwrap();
    for pod in pods() {
        cluster
            .wait_for(&format!("{KEYS} keys on {pod}"), Duration::from_secs(30), || match cluster.dbsize(NS, &pod, &password)? {
                n if n >= KEYS as i64 => Ok(()),
                n => Err(format!("DBSIZE {n}")),
            })
            .unwrap();
    }
    let load = WriteLoad::start(
        cluster.clone(),
        LoadOptions {
            targets: Targets::ServiceEndpoints { namespace: NS.into(), service: NAME.into() },
            password: password.clone(),
            hot_keys: 50,
            rate: 100,
            prefix: "load:".into(),
            retry_once: false,
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    let ledger = load.stop();
    // Every snapshot after the load stopped holds it: wait for one on every pod.
    std::thread::sleep(Duration::from_secs(3));

    let old: Vec<String> = cluster.cache_view(NS, NAME).unwrap().pods.iter().map(|p| p.uid.clone()).collect();
    let deleted = Instant::now();
    let selector = keymesh_e2e::local_cluster::cache::pod_selector(NAME);
    cluster.control_plane().kubectl(["delete", "pods", "-n", NS, "-l", &selector, "--wait=false"]).unwrap();
    cluster
        .wait_for("three new pods, Ready", SETTLE, || {
            let view = cluster.cache_view(NS, NAME)?;
            keymesh_e2e::local_cluster::cache::ready(&view.object)?;
            let fresh = view.pods.iter().filter(|p| !old.contains(&p.uid) && p.ready && !p.deleting).count();
            if fresh == 3 && view.pods.len() == 3 {
                Ok(())
            } else {
                Err(format!("pods {:?}", view.pods.iter().map(|p| (&p.name, &p.uid, p.ready)).collect::<Vec<_>>()))
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let back = deleted.elapsed();
    let names = pods();
    for pod in &names {
        let n = cluster.dbsize(NS, pod, &password).unwrap();
        assert!(n >= KEYS as i64, "{pod} came back with {n} keys, fewer than the {KEYS} preloaded");
    }
    let converged = cluster.verify_writes(NS, &names, &password, &ledger, Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "MEASURED full-cluster restart with persistence: every pod deleted, Ready again with {KEYS} preloaded keys and {} at {back:.1?}; writes verified in {converged:.1?}",
        ledger.progress.summary()
    );
}
