//! End-to-end tests of kernel tuning on the local cluster (issue 10): the node-tuning DaemonSet
//! writes each node's transparent-huge-pages and overcommit files (the agent lays them out under
//! each node's root as a fresh kernel shows them, never this machine's), reports and undoes an
//! outside change, restores the nodes when tuning is turned off or the cluster deleted, and
//! does not fight another cluster over a setting; `spec.sysctls` reach each engine pod's own
//! network namespace, and a sysctl the kubelet (the agent) does not allow is reported with how
//! to allow it.
//!
//! Needs root (network namespaces), the cached control plane and tools, and the release builds;
//! one cluster at a time (`local_cluster::serial`); each test prints what it measured.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use keymesh_e2e::local_cluster::{serial, LocalCluster, Options};
use keymesh_e2e::require_netns;

const NS: &str = "default";
const SETTLE: Duration = Duration::from_secs(120);

const THP: &str = "sys/kernel/mm/transparent_hugepage/enabled";
const OVERCOMMIT: &str = "proc/sys/vm/overcommit_memory";

fn start() -> LocalCluster {
    LocalCluster::start(Options::release_build()).unwrap_or_else(|e| panic!("local cluster did not start: {e}"))
}

fn nodes(cluster: &LocalCluster) -> Vec<String> {
    cluster.agent().nodes().iter().map(|n| n.name.clone()).collect()
}

fn node_file(cluster: &LocalCluster, node: &str, file: &str) -> PathBuf {
    cluster.agent().node_root(node).expect("a node of the agent").join(file)
}

/// The value a kernel file holds: the bracketed mode of THP, else the trimmed content.
fn value(cluster: &LocalCluster, node: &str, file: &str) -> String {
    let content = std::fs::read_to_string(node_file(cluster, node, file)).unwrap_or_default();
    match (content.find('['), content.find(']')) {
        (Some(a), Some(b)) if a < b => content[a + 1..b].to_string(),
        _ => content.trim().to_string(),
    }
}

fn every_node(cluster: &LocalCluster, file: &str, want: &str) -> Result<(), String> {
    let values: Vec<(String, String)> = nodes(cluster).into_iter().map(|n| (n.clone(), value(cluster, &n, file))).collect();
    if values.iter().all(|(_, v)| v == want) {
        Ok(())
    } else {
        Err(format!("{file}: {values:?}"))
    }
}

fn condition(cluster: &LocalCluster, name: &str, type_: &str) -> Result<(String, String, String), String> {
    let view = cluster.cache_view(NS, name)?;
    view.condition(type_).ok_or_else(|| format!("no {type_} condition: {}", view.summary()))
}

fn cache(name: &str, spec: &str) -> String {
    format!("apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n{spec}")
}

/// Proves node tuning end to end, with a second cluster asking for a conflicting setting:
/// enabling it makes every node's files read `never` and `1` and `NodeTuned=True` before the
/// engine pods exist; `spec.sysctls` `net.core.somaxconn=8192` (this kernel's default is 4096)
/// shows inside every engine pod's network namespace; an outside change of a node's file makes
/// `NodeTuned=False` within 30 s and the tuner puts the value back; a second cluster asking for
/// `madvise` on the same nodes gets a conflict condition and nothing flip-flops; turning tuning
/// off restores every node's original values, and so does deleting the cluster.
#[test]
fn node_tuning_applies_reports_drift_and_conflicts_and_restores_the_nodes() {
    require_netns!();
    let _serial = serial();
    let cluster = start();
    for node in nodes(&cluster) {
        assert_eq!((value(&cluster, &node, THP), value(&cluster, &node, OVERCOMMIT)), ("madvise".into(), "0".into()), "a fresh node");
    }
    let started = Instant::now();
    cluster.control_plane().apply(&cache("tuned", "  replicas: 3\n  nodeTuning: {enabled: true}\n  sysctls: {net.core.somaxconn: '8192'}\n")).unwrap();
    let view = cluster.wait_cache_ready(NS, "tuned", SETTLE).unwrap_or_else(|e| panic!("{e}"));
    let ready_after = started.elapsed();
    let tuned = condition(&cluster, "tuned", "NodeTuned").unwrap();
    assert_eq!(tuned.0, "True", "{tuned:?}");
    every_node(&cluster, THP, "never").unwrap();
    every_node(&cluster, OVERCOMMIT, "1").unwrap();

    // The engine pods came after their nodes' tuners were ready.
    let tuners = cluster.get_json(&["pods", "-n", NS, "-l", "app.kubernetes.io/name=keymesh-node-tuning,app.kubernetes.io/instance=tuned"]).unwrap();
    let tuner_ready: Vec<String> = tuners["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?["lastTransitionTime"].as_str().map(str::to_owned))
        .collect();
    let engine_created: Vec<String> = cluster.get_json(&["pods", "-n", NS, "-l", "app.kubernetes.io/name=keymesh,app.kubernetes.io/instance=tuned"]).unwrap()
        ["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["creationTimestamp"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(tuner_ready.len(), 3, "a tuner per node: {tuners}");
    let last_tuned = tuner_ready.iter().max().unwrap();
    assert!(engine_created.iter().all(|c| c >= last_tuned), "engine pods created {engine_created:?} before the last tuner was ready {last_tuned}");

    // Per-pod sysctls, in each engine pod's own network namespace.
    for pod in &view.pods {
        let out = cluster.agent().pod_output(NS, &pod.name, Duration::from_secs(5), "sysctl", ["-n", "net.core.somaxconn"]).unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "8192", "net.core.somaxconn inside {}", pod.name);
    }
    let host = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap_or_default();
    eprintln!("MEASURED tuning: Ready with NodeTuned=True in {ready_after:.1?}; somaxconn 8192 in every engine pod (this machine's: {})", host.trim());

    // An outside change on one node.
    let victim = nodes(&cluster)[1].clone();
    std::fs::write(node_file(&cluster, &victim, THP), "[always] madvise never\n").unwrap();
    let changed = Instant::now();
    let reported = cluster
        .wait_for("NodeTuned=False after the outside change", Duration::from_secs(30), || match condition(&cluster, "tuned", "NodeTuned")? {
            (status, _, message) if status == "False" => Ok(message),
            other => Err(format!("{other:?}")),
        })
        .unwrap();
    let reported_after = changed.elapsed();
    assert!(reported.contains(&victim) && reported.contains("changed to always"), "{reported}");
    cluster
        .wait_for("the tuner to put the value back", Duration::from_secs(60), || {
            every_node(&cluster, THP, "never")?;
            match condition(&cluster, "tuned", "NodeTuned")? {
                (s, _, _) if s == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .unwrap();
    eprintln!("MEASURED tuning: outside change on {victim} reported after {reported_after:.1?}, reapplied and NodeTuned=True after {:.1?}", changed.elapsed());

    // A second cluster wanting madvise on the same nodes: a conflict, reported, not fought over.
    cluster.control_plane().apply(&cache("other", "  replicas: 1\n  nodeTuning: {enabled: true, transparentHugePages: madvise}\n")).unwrap();
    let conflict = cluster
        .wait_for("the conflict on the second cluster", SETTLE, || match condition(&cluster, "other", "NodeTuned")? {
            (s, _, m) if s == "False" && m.contains("another CacheCluster on this node wants a different value") => Ok(m),
            other => Err(format!("{other:?}")),
        })
        .unwrap();
    assert!(conflict.contains("default/tuned wants never"), "{conflict}");
    let watching = Instant::now();
    while watching.elapsed() < Duration::from_secs(15) {
        every_node(&cluster, THP, "never").unwrap_or_else(|e| panic!("the first cluster's value flipped: {e}"));
        assert_eq!(condition(&cluster, "tuned", "NodeTuned").unwrap().0, "True", "the first cluster stays tuned");
        std::thread::sleep(Duration::from_millis(500));
    }
    cluster.control_plane().kubectl(["delete", "cachecluster", "other", "-n", NS, "--wait=true", "--timeout=60s"]).unwrap();
    eprintln!("MEASURED tuning: a second cluster asking madvise got a conflict condition; THP stayed never for 15 s on every node");

    // Tuning off: the original values come back.
    cluster.patch_cache(NS, "tuned", r#"{"spec":{"nodeTuning":{"enabled":false}}}"#).unwrap();
    let off = Instant::now();
    cluster
        .wait_for("the original values back on every node", SETTLE, || {
            every_node(&cluster, THP, "madvise")?;
            every_node(&cluster, OVERCOMMIT, "0")
        })
        .unwrap();
    eprintln!("MEASURED tuning: enabled=false restored every node in {:.1?}", off.elapsed());

    // On again, then the cluster deleted: restored again.
    cluster.patch_cache(NS, "tuned", r#"{"spec":{"nodeTuning":{"enabled":true}}}"#).unwrap();
    cluster.wait_for("tuned again", SETTLE, || every_node(&cluster, THP, "never")).unwrap();
    cluster.control_plane().kubectl(["delete", "cachecluster", "tuned", "-n", NS, "--wait=false"]).unwrap();
    let deleted = Instant::now();
    cluster
        .wait_for("the original values back after the delete", SETTLE, || {
            every_node(&cluster, THP, "madvise")?;
            every_node(&cluster, OVERCOMMIT, "0")
        })
        .unwrap();
    eprintln!("MEASURED tuning: deleting the CacheCluster restored every node in {:.1?}", deleted.elapsed());
}

/// Proves a sysctl the kubelet does not allow is reported, not retried blindly: the pods are
/// refused (`SysctlForbidden`), `SysctlsAllowed=False` names the sysctl and how to allow it, and
/// the cluster becomes Ready once the spec drops it.
#[test]
fn a_refused_sysctl_is_reported_with_the_fix_and_the_cluster_recovers_without_it() {
    require_netns!();
    let _serial = serial();
    let cluster = start();
    cluster.control_plane().apply(&cache("refused", "  replicas: 2\n  sysctls: {net.ipv4.tcp_fastopen: '3'}\n")).unwrap();
    let refused = cluster
        .wait_for("SysctlsAllowed=False", SETTLE, || match condition(&cluster, "refused", "SysctlsAllowed")? {
            (s, _, m) if s == "False" => Ok(m),
            other => Err(format!("{other:?}")),
        })
        .unwrap();
    assert!(refused.contains("net.ipv4.tcp_fastopen") && refused.contains("--allowed-unsafe-sysctls=net.ipv4.tcp_fastopen"), "{refused}");
    let dropped = Instant::now();
    cluster.patch_cache(NS, "refused", r#"{"spec":{"sysctls":null}}"#).unwrap();
    cluster.wait_cache_ready(NS, "refused", SETTLE).unwrap_or_else(|e| panic!("{e}"));
    let allowed = condition(&cluster, "refused", "SysctlsAllowed").unwrap();
    assert_eq!(allowed.0, "True", "{allowed:?}");
    eprintln!("MEASURED sysctls: refused sysctl reported ({refused}); Ready {:.1?} after the spec dropped it", dropped.elapsed());
}
