//! End-to-end tests of day-two changes on the local cluster (issue 9): live settings, rolling
//! upgrades under load, a single-pod upgrade with surge, pause and resume, a failed upgrade and
//! its rollback, and the operator's leader election when the leader's path to the apiserver is
//! cut. The cluster runs two engine builds that report different versions: the workspace
//! version and `<version>-next` (`scripts/build-next-engine.sh`).
//!
//! Needs root (network namespaces), the cached control plane and tools, and the release builds;
//! one cluster at a time (`local_cluster::serial`); each test prints what it measured.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use keymesh_e2e::local_cluster::cache::ClusterView;
use keymesh_e2e::local_cluster::load::{LoadOptions, Targets, WriteLoad};
use keymesh_e2e::local_cluster::{next_version, serial, LocalCluster, Options, EXAMPLE_NAME, OPERATOR_NAMESPACE, RELEASE, VERSION};
use keymesh_e2e::require_netns;
use keymesh_e2e::resp::Reply;

const NS: &str = "default";
const NAME: &str = EXAMPLE_NAME;
/// A 3-pod upgrade of a cluster with 100,000 keys, on a loaded 2-core machine.
const UPGRADE: Duration = Duration::from_secs(240);
const SETTLE: Duration = Duration::from_secs(90);
const CONVERGE: Duration = Duration::from_secs(30);
/// Keys in the cluster while it is upgraded (the issue asks for the time of a 3-pod upgrade of
/// a cluster holding 100,000 keys).
const BULK_KEYS: usize = 100_000;

fn start() -> (Arc<LocalCluster>, ClusterView, String) {
    let cluster = LocalCluster::start(Options::release_build().with_next_engine()).unwrap_or_else(|e| panic!("local cluster did not start: {e}"));
    let view = cluster.create_example(NS, SETTLE).unwrap_or_else(|e| panic!("the example did not become Ready: {e}"));
    let password = cluster.password(NS, NAME).unwrap();
    (Arc::new(cluster), view, password)
}

fn retrying_load(cluster: &Arc<LocalCluster>, name: &str, password: &str) -> WriteLoad {
    let targets = Targets::ServiceEndpoints { namespace: NS.into(), service: name.into() };
    WriteLoad::start(cluster.clone(), LoadOptions { targets, password: password.to_owned(), hot_keys: 50, rate: 100, prefix: "load:".into(), retry_once: true })
}

fn pods_by_name(view: &ClusterView) -> BTreeMap<String, (String, i64, String)> {
    view.pods.iter().map(|p| (p.name.clone(), (p.uid.clone(), p.restarts, p.revision.clone()))).collect()
}

/// Samples the cluster's pods every 200 ms in the background: how many of the `expected` pods
/// are not Ready (or missing) at once, at most, and every pod incarnation (uid) seen.
struct PodSampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<SamplerState>>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default, Clone)]
struct SamplerState {
    samples: u64,
    max_not_ready: usize,
    /// The sample with the most pods not ready: `(time, pods)`.
    worst: Option<(Duration, Vec<String>)>,
    most_pods: usize,
    uids: BTreeMap<String, BTreeSet<String>>,
}

impl PodSampler {
    fn start(cluster: &Arc<LocalCluster>, name: &str, expected: Vec<String>) -> PodSampler {
        let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(SamplerState::default())));
        let (cluster, name, flag, state) = (cluster.clone(), name.to_owned(), stop.clone(), seen.clone());
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if let Ok(view) = cluster.cache_view(NS, &name) {
                    let not_ready: Vec<String> =
                        expected.iter().filter(|e| !view.pods.iter().any(|p| &p.name == *e && p.ready && !p.deleting)).cloned().collect();
                    let mut s = state.lock().unwrap();
                    s.samples += 1;
                    s.most_pods = s.most_pods.max(view.pods.len());
                    if not_ready.len() > s.max_not_ready {
                        s.max_not_ready = not_ready.len();
                        s.worst = Some((started.elapsed(), not_ready));
                    }
                    for p in &view.pods {
                        s.uids.entry(p.name.clone()).or_default().insert(p.uid.clone());
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        PodSampler { stop, seen, thread: Some(thread) }
    }

    fn state(&self) -> SamplerState {
        self.seen.lock().unwrap().clone()
    }

    fn stop(mut self) -> SamplerState {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.state()
    }
}

/// The value of `directive` on `pod`'s engine (CONFIG GET).
fn config_get(cluster: &LocalCluster, pod: &str, password: &str, directive: &str) -> Result<String, String> {
    let mut conn = cluster.connect(NS, pod, password, Duration::from_secs(3))?;
    let reply = conn.call(&["CONFIG", "GET", directive]).map_err(|e| e.to_string())?;
    match &reply {
        Reply::Array(items) => items.get(1).and_then(Reply::as_bytes).map(|b| String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
    .ok_or_else(|| format!("CONFIG GET {directive}: {reply:?}"))
}

/// Proves two day-two changes on one cluster. First, live settings (`engine.evictionPolicy`,
/// `engine.maxmemory`) reach every engine with no pod restart (same pod uids, restart counts
/// and revisions). Then a rolling upgrade of the 3-pod cluster holding 100,000 keys to an
/// engine build that reports another version, under a steady write load through the Service's
/// ready endpoints that retries a failed write once: the status reaches the new version, never
/// more than one pod is not ready at a time, no acknowledged write is lost, and at most 0.5% of
/// the writes fail even with the retry.
#[test]
fn live_settings_change_without_restarts_and_an_upgrade_under_load_loses_nothing() {
    require_netns!();
    let _serial = serial();
    let (cluster, view, password) = start();
    let before = pods_by_name(&view);

    // Live settings.
    let changed = Instant::now();
    cluster.patch_cache(NS, NAME, r#"{"spec":{"engine":{"evictionPolicy":"allkeys-lru","maxmemory":"256mb"}}}"#).unwrap();
    for pod in before.keys() {
        cluster
            .wait_for(&format!("the live settings on {pod}"), SETTLE, || {
                let policy = config_get(&cluster, pod, &password, "maxmemory-policy")?;
                let maxmemory = config_get(&cluster, pod, &password, "maxmemory")?;
                if policy == "allkeys-lru" && maxmemory == (256u64 << 20).to_string() {
                    Ok(())
                } else {
                    Err(format!("maxmemory-policy {policy}, maxmemory {maxmemory}"))
                }
            })
            .unwrap();
    }
    let live_took = changed.elapsed();
    let after = pods_by_name(&cluster.cache_view(NS, NAME).unwrap());
    assert_eq!(before, after, "a live setting restarts and replaces nothing: pod (uid, restarts, revision) before and after");
    eprintln!("MEASURED live settings: evictionPolicy and maxmemory on all 3 engines {live_took:.1?} after the patch; no pod restarted or replaced");

    // The upgrade, with 100,000 keys, under load.
    let preloading = Instant::now();
    cluster.preload(NS, "demo-0", &password, BULK_KEYS).unwrap();
    for pod in before.keys() {
        cluster
            .wait_for(&format!("{BULK_KEYS} keys on {pod}"), CONVERGE, || match cluster.dbsize(NS, pod, &password)? {
                n if n >= BULK_KEYS as i64 => Ok(()),
                n => Err(format!("DBSIZE {n}")),
            })
            .unwrap();
    }
    eprintln!("MEASURED upgrade: {BULK_KEYS} keys preloaded and replicated in {:.1?}", preloading.elapsed());
    let expected: Vec<String> = before.keys().cloned().collect();
    let sampler = PodSampler::start(&cluster, NAME, expected.clone());
    let load = retrying_load(&cluster, NAME, &password);
    std::thread::sleep(Duration::from_secs(3));
    let next = next_version();
    let upgrading = Instant::now();
    cluster.patch_cache(NS, NAME, &format!(r#"{{"spec":{{"version":"{next}"}}}}"#)).unwrap();
    let saw_upgrading = cluster.wait_for("phase Upgrading", Duration::from_secs(30), || {
        let view = cluster.cache_view(NS, NAME)?;
        if view.phase() == "Upgrading" {
            Ok(view.object["status"]["upgrade"].clone())
        } else {
            Err(view.summary())
        }
    });
    let upgraded = cluster.wait_version(NS, NAME, &next, UPGRADE).unwrap_or_else(|e| panic!("{e}"));
    let took = upgrading.elapsed();
    std::thread::sleep(Duration::from_secs(3));
    let ledger = load.stop();
    let sampled = sampler.stop();
    eprintln!("MEASURED upgrade: load {:.0?}: {}", ledger.elapsed, ledger.progress.summary());
    let names: Vec<String> = upgraded.pods.iter().map(|p| p.name.clone()).collect();
    let converged = cluster.verify_writes(NS, &names, &password, &ledger, CONVERGE).unwrap_or_else(|e| panic!("{e}"));
    let sizes: Vec<i64> = names.iter().map(|p| cluster.dbsize(NS, p, &password).unwrap()).collect();
    let info = cluster.redis_cli(NS, "demo-0", &cluster.pod_ip(NS, "demo-0").unwrap().to_string(), &password, &["INFO", "server"]).unwrap();
    eprintln!(
        "MEASURED upgrade: 3 pods, {BULK_KEYS} keys: {VERSION} -> {next} in {took:.1?}; at most {} pod(s) not ready at once ({} samples, worst {:?}); \
         every pod replaced once: {:?}; DBSIZE after {sizes:?}; acknowledged writes on all pods {converged:.1?} after the load stopped",
        sampled.max_not_ready,
        sampled.samples,
        sampled.worst,
        sampled.uids.iter().map(|(p, u)| (p, u.len())).collect::<Vec<_>>()
    );
    assert!(saw_upgrading.is_ok(), "the status never showed phase Upgrading: {saw_upgrading:?}");
    assert!(info.contains(&format!("keymesh_version:{next}")), "the engine reports the new version: {info}");
    assert!(sampled.max_not_ready <= 1, "more than one pod was not ready at once: {sampled:?}");
    assert!(names.iter().all(|p| sampled.uids.get(p).is_some_and(|u| u.len() == 2)), "each pod replaced exactly once: {:?}", sampled.uids);
    assert!(sizes.iter().all(|&n| n >= BULK_KEYS as i64), "every pod holds the preloaded keys: {sizes:?}");
    let p = &ledger.progress;
    assert!(p.unsuccessful() * 200 <= p.acked + p.unsuccessful(), "more than 0.5% of the writes failed even with a retry: {}", p.summary());
}

/// Proves a single-pod cluster survives an upgrade with its data: the operator first adds one
/// pod of the new revision (surge), replaces the old pod once the extra one holds everything,
/// then removes the extra pod; every key written before is there after.
#[test]
fn a_single_pod_cluster_upgrades_with_a_surge_pod_and_keeps_every_key() {
    require_netns!();
    let _serial = serial();
    let cluster = Arc::new(LocalCluster::start(Options::release_build().with_next_engine()).unwrap_or_else(|e| panic!("local cluster did not start: {e}")));
    let solo = "apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata: {name: solo}\nspec: {replicas: 1}\n";
    cluster.control_plane().apply(solo).unwrap();
    cluster.wait_cache_ready(NS, "solo", SETTLE).unwrap_or_else(|e| panic!("{e}"));
    let password = cluster.password(NS, "solo").unwrap();
    cluster.preload(NS, "solo-0", &password, 20_000).unwrap();
    let sampler = PodSampler::start(&cluster, "solo", vec!["solo-0".into()]);
    let next = next_version();
    let started = Instant::now();
    cluster.patch_cache(NS, "solo", &format!(r#"{{"spec":{{"version":"{next}"}}}}"#)).unwrap();
    let done = cluster.wait_version(NS, "solo", &next, UPGRADE).unwrap_or_else(|e| panic!("{e}"));
    let took = started.elapsed();
    cluster
        .wait_for("the surge pod gone", SETTLE, || {
            let view = cluster.cache_view(NS, "solo")?;
            if view.pods.len() == 1 {
                Ok(())
            } else {
                Err(format!("{:?}", view.pods.iter().map(|p| &p.name).collect::<Vec<_>>()))
            }
        })
        .unwrap();
    let sampled = sampler.stop();
    let size = cluster.dbsize(NS, "solo-0", &password).unwrap();
    eprintln!(
        "MEASURED surge: 1 pod, 20000 keys: {VERSION} -> {next} in {took:.1?}; pods at most {} (a surge pod), solo-0 incarnations {}; DBSIZE after {size}",
        sampled.most_pods,
        sampled.uids.get("solo-0").map_or(0, BTreeSet::len)
    );
    assert_eq!(done.pods.len(), 1);
    assert_eq!(sampled.most_pods, 2, "a second pod joined for the upgrade: {sampled:?}");
    assert_eq!(sampled.uids.get("solo-0").map(BTreeSet::len), Some(2), "solo-0 was replaced: {sampled:?}");
    assert!(size >= 20_000, "every key written before the upgrade is there after it: DBSIZE {size}");
    let read = cluster.read_keys(NS, "solo-0", &password, &["bulk:0".to_string(), "bulk:19999".to_string()]).unwrap();
    assert!(read.values().all(Option::is_some), "{read:?}");
}

/// Proves failure, rollback, a corrected spec and pause/resume: an upgrade to an image tag the
/// node cannot start fails with the pod's own message (`UpgradeFailed`, Progressing=False),
/// rolls back to the previous revision automatically and leaves the cluster Ready with all its
/// data; a corrected spec is accepted and rolls; paused after its first pod, no further pod is
/// replaced for 30 s, and after resuming it finishes.
#[test]
fn a_failed_upgrade_rolls_back_and_a_corrected_one_pauses_resumes_and_finishes() {
    require_netns!();
    let _serial = serial();
    let (cluster, view, password) = start();
    cluster.preload(NS, "demo-0", &password, 10_000).unwrap();
    let original: BTreeMap<String, String> = view.pods.iter().map(|p| (p.name.clone(), p.revision.clone())).collect();

    // An image the nodes cannot start.
    let failing = Instant::now();
    cluster.patch_cache(NS, NAME, r#"{"spec":{"version":"0.0.0-broken"}}"#).unwrap();
    let failed = cluster
        .wait_for("UpgradeFailed with the pod's message", SETTLE, || {
            let view = cluster.cache_view(NS, NAME)?;
            let progressing = view.condition("Progressing").unwrap_or_default();
            let pulled = progressing.2.contains("ErrImagePull") || progressing.2.contains("ImagePullBackOff");
            if view.phase() == "UpgradeFailed" && progressing.0 == "False" && pulled {
                Ok(progressing.2)
            } else {
                Err(view.summary())
            }
        })
        .unwrap();
    let failed_after = failing.elapsed();
    let events = cluster.get_json(&["events", "-n", NS, "--field-selector", "involvedObject.name=demo,reason=UpgradeFailed"]).unwrap();
    assert!(events["items"].as_array().is_some_and(|e| !e.is_empty()), "an UpgradeFailed Event: {events}");
    let rolled_back = cluster
        .wait_for("the rollback: every pod on its first revision, Ready", SETTLE, || {
            let view = cluster.cache_view(NS, NAME)?;
            let revisions: BTreeMap<String, String> = view.pods.iter().map(|p| (p.name.clone(), p.revision.clone())).collect();
            let state = view.object["status"]["upgrade"]["state"].as_str().unwrap_or("").to_owned();
            if revisions == original && view.pods.iter().all(|p| p.ready) && state == "RolledBack" {
                Ok(view)
            } else {
                Err(format!("{} revisions {revisions:?} state {state}", view.summary()))
            }
        })
        .unwrap();
    let rollback_after = failing.elapsed();
    assert_eq!(rolled_back.object["status"]["currentVersion"], VERSION, "{}", rolled_back.object["status"]);
    for pod in original.keys() {
        assert!(cluster.dbsize(NS, pod, &password).unwrap() >= 10_000, "{pod} kept its data");
    }
    eprintln!("MEASURED failure: UpgradeFailed {failed_after:.1?} after the patch ({failed}); rolled back and Ready {rollback_after:.1?} after it");

    // A corrected spec rolls; paused after its first pod is replaced.
    let next = next_version();
    cluster.patch_cache(NS, NAME, &format!(r#"{{"spec":{{"version":"{next}"}}}}"#)).unwrap();
    cluster
        .wait_for("the first pod on the new revision", UPGRADE, || {
            let view = cluster.cache_view(NS, NAME)?;
            let updated = view.object["status"]["upgrade"]["updatedReplicas"].as_i64().unwrap_or(0);
            if updated >= 1 {
                Ok(())
            } else {
                Err(view.summary())
            }
        })
        .unwrap();
    cluster.patch_cache(NS, NAME, r#"{"spec":{"upgrade":{"paused":true}}}"#).unwrap();
    let paused = cluster
        .wait_for("the upgrade paused", SETTLE, || {
            let view = cluster.cache_view(NS, NAME)?;
            let progressing = view.condition("Progressing").unwrap_or_default();
            if progressing.1 == "UpgradePaused" && view.pods.iter().all(|p| p.ready && !p.deleting) {
                Ok(view)
            } else {
                Err(view.summary())
            }
        })
        .unwrap();
    let held = pods_by_name(&paused);
    let pause_started = Instant::now();
    while pause_started.elapsed() < Duration::from_secs(30) {
        let now = pods_by_name(&cluster.cache_view(NS, NAME).unwrap());
        assert_eq!(now, held, "a pod was replaced while paused ({:.1?} into the pause)", pause_started.elapsed());
        std::thread::sleep(Duration::from_secs(1));
    }
    let on_next = paused.object["status"]["upgrade"]["updatedReplicas"].as_i64().unwrap_or(0);
    cluster.patch_cache(NS, NAME, r#"{"spec":{"upgrade":{"paused":false}}}"#).unwrap();
    let resumed = Instant::now();
    let done = cluster.wait_version(NS, NAME, &next, UPGRADE).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "MEASURED pause: paused with {on_next}/3 pods on {next}; no pod replaced for 30 s; resumed and finished {:.1?} later ({})",
        resumed.elapsed(),
        done.summary()
    );
    for pod in original.keys() {
        assert!(cluster.dbsize(NS, pod, &password).unwrap() >= 10_000, "{pod} holds the data after the roll");
    }
}

/// One operator replica, as the test sees it: its pod, whether it holds the Lease, its log.
fn operator_pods(cluster: &LocalCluster) -> Vec<String> {
    let pods = cluster.get_json(&["pods", "-n", OPERATOR_NAMESPACE, "-l", &format!("app.kubernetes.io/instance={RELEASE}")]).unwrap();
    let mut names: Vec<String> = pods["items"].as_array().into_iter().flatten().filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned)).collect();
    names.sort();
    names
}

fn lease_holder(cluster: &LocalCluster) -> Result<String, String> {
    let leases = cluster.get_json(&["lease", "-n", OPERATOR_NAMESPACE])?;
    leases["items"][0]["spec"]["holderIdentity"].as_str().map(str::to_owned).ok_or_else(|| format!("no holder: {leases}"))
}

/// `keymesh_operator_mutating_calls_total` summed over targets, and the last call's time, from
/// the replica's own /metrics (scraped inside its network namespace).
fn mutating_calls(cluster: &LocalCluster, pod: &str) -> Option<(f64, f64)> {
    let out =
        cluster.agent().pod_output(OPERATOR_NAMESPACE, pod, Duration::from_secs(3), "curl", ["-s", "--max-time", "2", "http://127.0.0.1:8080/metrics"]).ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = |line: &str| line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
    let calls: f64 = text.lines().filter(|l| l.starts_with("keymesh_operator_mutating_calls_total{")).filter_map(value).sum();
    let last = text.lines().find(|l| l.starts_with("keymesh_operator_last_mutating_call_timestamp_seconds")).and_then(value)?;
    Some((calls, last))
}

/// The time (Unix seconds) of the first log line of `pod` containing `needle` logged at or
/// after `since` (Unix seconds). The log spans the container's restarts, and leadership may
/// have moved before the test began (a replica that stops leading exits and restarts), so
/// earlier lines are not about the moment the test looks at.
fn logged_at(cluster: &LocalCluster, pod: &str, needle: &str, since: f64) -> Option<f64> {
    let log = std::fs::read_to_string(cluster.agent().log_path(OPERATOR_NAMESPACE, pod, "operator")).ok()?;
    log.lines().filter(|l| l.contains(needle)).find_map(|l| {
        let line = strip_ansi(l);
        let ts: k8s_openapi::jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
        let at = ts.as_millisecond() as f64 / 1000.0;
        (at >= since).then_some(at)
    })
}

/// `text` without terminal colour codes (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// Proves leader election holds with two operator replicas when the leader's path to the
/// apiserver is cut (a blackhole route in its pod's network namespace): the leader stops
/// acting (its log says so, its count of mutating calls stops) before the other replica starts
/// (its log says when); the other takes over within a lease duration and two retry periods
/// of the cut, and reconciles a change made meanwhile. At no instant do both act.
#[test]
fn a_leader_cut_from_the_apiserver_stops_acting_before_the_other_replica_takes_over() {
    require_netns!();
    let _serial = serial();
    let (cluster, _view, password) = start();
    let replicas = operator_pods(&cluster);
    assert_eq!(replicas.len(), 2, "the chart runs two operator replicas: {replicas:?}");
    // Leadership may have moved while the cluster started on a loaded machine (a leader that
    // cannot renew in time exits, and its pod restarts after a back-off): cut only once both
    // replicas run and are ready, so the follower can take over rather than sit in a back-off.
    cluster
        .wait_for("both operator replicas running and ready", SETTLE, || {
            let pods = cluster.get_json(&["pods", "-n", OPERATOR_NAMESPACE, "-l", &format!("app.kubernetes.io/instance={RELEASE}")])?;
            let ready = pods["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")))
                .count();
            if ready == 2 {
                Ok(())
            } else {
                Err(format!("{ready}/2 ready"))
            }
        })
        .unwrap();
    let leader = lease_holder(&cluster).unwrap();
    let follower = replicas.iter().find(|p| **p != leader).unwrap().clone();
    let leader_before = cluster
        .wait_for("the leader to act", Duration::from_secs(60), || match mutating_calls(&cluster, &leader) {
            Some(calls) if calls.0 > 0.0 => Ok(calls),
            other => Err(format!("{other:?}")),
        })
        .unwrap();
    let follower_before = mutating_calls(&cluster, &follower).expect("the follower's metrics");
    assert!(leader_before.0 > 0.0 && follower_before.0 == 0.0, "only the leader acted so far: leader {leader_before:?}, follower {follower_before:?}");

    let net = cluster.agent().pod(OPERATOR_NAMESPACE, &leader).and_then(|p| p.net).expect("the leader's network namespace");
    let cut = std::process::Command::new("ip").args(["netns", "exec", &net.ns, "ip", "route", "add", "blackhole", "10.96.0.1/32"]).status().unwrap();
    assert!(cut.success(), "blackhole route");
    let cut_at = Instant::now();
    let cut_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    // A change for whoever leads next.
    cluster.patch_cache(NS, NAME, r#"{"spec":{"engine":{"evictionPolicy":"allkeys-lfu"}}}"#).unwrap();
    let mut last_leader_calls = leader_before;
    let took_over = cluster
        .wait_for("the other replica to take the Lease", Duration::from_secs(60), || {
            // The old leader's process exits once it stops acting and restarts with fresh
            // counters: keep what the first process reached.
            if let Some(calls) = mutating_calls(&cluster, &leader).filter(|c| c.0 >= last_leader_calls.0) {
                last_leader_calls = calls;
            }
            match lease_holder(&cluster)? {
                h if h == follower => Ok(cut_at.elapsed()),
                h => Err(format!("holder {h}")),
            }
        })
        .unwrap();
    cluster
        .wait_for("the new leader to apply the change", SETTLE, || {
            let view = cluster.cache_view(NS, NAME)?;
            let policies: BTreeSet<String> =
                view.pods.iter().map(|p| config_get(&cluster, &p.name, &password, "maxmemory-policy").unwrap_or_default()).collect();
            if policies == BTreeSet::from(["allkeys-lfu".to_string()]) {
                Ok(())
            } else {
                Err(format!("{policies:?}"))
            }
        })
        .unwrap();
    let follower_after = mutating_calls(&cluster, &follower).expect("the new leader's metrics");
    let stopped = logged_at(&cluster, &leader, "stopped acting as leader", cut_unix).expect("the old leader logs that it stopped acting");
    let started = logged_at(&cluster, &follower, "became leader", cut_unix).expect("the new leader logs that it became leader");
    let _ = std::process::Command::new("ip").args(["netns", "exec", &net.ns, "ip", "route", "del", "blackhole", "10.96.0.1/32"]).status();
    eprintln!(
        "MEASURED leader cut: {follower} took the Lease {took_over:.1?} after the cut; {leader} stopped acting at {stopped:.3} \
         (its last mutating call at {:.3}, {} calls), {follower} became leader at {started:.3} ({:.1} s later; {} mutating calls since)",
        last_leader_calls.1,
        last_leader_calls.0,
        started - stopped,
        follower_after.0
    );
    assert!(stopped < started, "the old leader stopped acting before the new one started");
    assert!(last_leader_calls.0 >= leader_before.0 && last_leader_calls.1 > 0.0, "the old leader's counters were read: {last_leader_calls:?}");
    assert!(last_leader_calls.1 <= stopped + 0.5, "no mutating call after the old leader stopped acting: last {} stopped {stopped}", last_leader_calls.1);
    assert!(follower_after.0 > 0.0, "the new leader acts");
    // The follower starts its lease-duration wait when it first sees the old leader's last
    // record (up to a retry period after that renewal, which came before the cut) and checks
    // once per retry period: a lease duration and two retry periods, plus a second for the
    // calls themselves on a loaded machine.
    assert!(took_over <= Duration::from_secs(20), "took over within a lease duration and two retry periods of the cut: {took_over:?}");
}
