//! A CacheCluster as the API server shows it: its status (conditions, members), its engine pods
//! (node, zone, IP, readiness), its generated password; and waiting for it to be Ready.
//!
//! "Ready" here is stricter than the `Ready` condition alone (see [`ready`]): the operator has
//! observed the current generation, the phase is `Running` (every pod ready, the mesh fully
//! connected, the scale plan settled), and every member of the desired size reports itself
//! ready and synced. That is what a user waits for after `kubectl apply`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::{LocalCluster, LocalClusterError};

/// The engine pods' label selector for CacheCluster `name` (the operator's selector labels).
pub fn pod_selector(name: &str) -> String {
    format!("app.kubernetes.io/name=keymesh,app.kubernetes.io/instance={name}")
}

/// One engine pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnginePod {
    pub name: String,
    pub uid: String,
    /// `spec.nodeName` (empty while unscheduled).
    pub node: String,
    /// The `topology.kubernetes.io/zone` label of that node.
    pub zone: String,
    pub ip: String,
    /// The pod's `Ready` condition.
    pub ready: bool,
    /// Has a deletion timestamp.
    pub deleting: bool,
    /// The pod-template revision it was created from (`keymesh.io/template-hash`).
    pub revision: String,
    /// Restarts of its engine container.
    pub restarts: i64,
}

/// A CacheCluster object and its engine pods, read at one moment.
#[derive(Debug, Clone)]
pub struct ClusterView {
    pub object: Value,
    pub pods: Vec<EnginePod>,
}

impl ClusterView {
    /// `(status, reason, message)` of condition `type_`.
    pub fn condition(&self, type_: &str) -> Option<(String, String, String)> {
        condition(&self.object, type_)
    }

    pub fn phase(&self) -> String {
        self.object["status"]["phase"].as_str().unwrap_or("").to_owned()
    }

    /// A one-line summary: phase, conditions, members.
    pub fn summary(&self) -> String {
        summary(&self.object)
    }
}

/// `(status, reason, message)` of condition `type_` of a CacheCluster.
pub fn condition(object: &Value, type_: &str) -> Option<(String, String, String)> {
    let c = object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or("").to_owned();
    Some((s("status"), s("reason"), s("message")))
}

/// Phase, conditions and members of a CacheCluster, on one line.
pub fn summary(object: &Value) -> String {
    let status = &object["status"];
    let conditions: Vec<String> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{}={}({})", c["type"].as_str().unwrap_or("?"), c["status"].as_str().unwrap_or("?"), c["reason"].as_str().unwrap_or("")))
        .collect();
    let members: Vec<String> = status["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            format!(
                "{}[ready={} synced={} peers={} lag={}]",
                m["pod"].as_str().unwrap_or("?"),
                m["ready"].as_bool().unwrap_or(false),
                m["synced"].as_bool().unwrap_or(false),
                m["connectedPeers"],
                m["lagOps"]
            )
        })
        .collect();
    format!(
        "phase {} gen {}/{} ready {}; {}; members {}",
        status["phase"].as_str().unwrap_or("-"),
        status["observedGeneration"],
        object["metadata"]["generation"],
        status["readyReplicas"],
        conditions.join(" "),
        members.join(" ")
    )
}

/// `Ok` when the CacheCluster is Ready in the sense of the module docs; otherwise what is
/// missing.
pub fn ready(object: &Value) -> Result<(), String> {
    let status = &object["status"];
    let why = |what: &str| Err(format!("{what}; {}", summary(object)));
    if status["observedGeneration"] != object["metadata"]["generation"] {
        return why("the operator has not observed the latest generation");
    }
    if !matches!(condition(object, "Ready"), Some((s, _, _)) if s == "True") {
        return why("Ready is not True");
    }
    if status["phase"] != "Running" {
        return why("phase is not Running");
    }
    let desired = object["spec"]["replicas"].as_u64().unwrap_or(0) as usize;
    let members = status["members"].as_array().cloned().unwrap_or_default();
    let in_size = |m: &&Value| m["pod"].as_str().and_then(|p| p.rsplit('-').next()).and_then(|o| o.parse::<usize>().ok()).is_some_and(|o| o < desired);
    let good = members.iter().filter(in_size).filter(|m| m["ready"] == true && m["synced"] == true).count();
    if good != desired || members.len() != desired {
        return why(&format!("{good} of {desired} members ready and synced, {} members listed", members.len()));
    }
    Ok(())
}

/// Whether a pod object's `Ready` condition is True.
pub fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// `name: phase/ready` for each pod, for messages.
pub fn pod_states(pods: &[Value]) -> String {
    pods.iter()
        .map(|p| format!("{}: {}/{}", p["metadata"]["name"].as_str().unwrap_or("?"), p["status"]["phase"].as_str().unwrap_or("?"), pod_ready(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

impl LocalCluster {
    /// The CacheCluster object and its engine pods (sorted by name), with each pod's zone.
    pub fn cache_view(&self, namespace: &str, name: &str) -> Result<ClusterView, String> {
        let object = self.get_json(&["cachecluster", name, "-n", namespace])?;
        let pods = self.get_json(&["pods", "-n", namespace, "-l", &pod_selector(name)])?;
        let nodes = self.get_json(&["nodes"])?;
        let zones: BTreeMap<String, String> = nodes["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                let name = n["metadata"]["name"].as_str().unwrap_or("").to_owned();
                (name, n["metadata"]["labels"]["topology.kubernetes.io/zone"].as_str().unwrap_or("").to_owned())
            })
            .collect();
        let mut pods: Vec<EnginePod> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let node = p["spec"]["nodeName"].as_str().unwrap_or("").to_owned();
                EnginePod {
                    name: p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                    uid: p["metadata"]["uid"].as_str().unwrap_or("").to_owned(),
                    zone: zones.get(&node).cloned().unwrap_or_default(),
                    node,
                    ip: p["status"]["podIP"].as_str().unwrap_or("").to_owned(),
                    ready: pod_ready(p),
                    deleting: !p["metadata"]["deletionTimestamp"].is_null(),
                    revision: p["metadata"]["annotations"]["keymesh.io/template-hash"].as_str().unwrap_or("").to_owned(),
                    restarts: p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0),
                }
            })
            .collect();
        pods.sort_by_key(|p| natural(&p.name));
        Ok(ClusterView { object, pods })
    }

    /// Waits until CacheCluster `namespace/name` is Ready (see [`ready`]) and returns it.
    pub fn wait_cache_ready(&self, namespace: &str, name: &str, limit: Duration) -> Result<ClusterView, LocalClusterError> {
        self.wait_for(&format!("CacheCluster {namespace}/{name} Ready"), limit, || {
            let view = self.cache_view(namespace, name)?;
            ready(&view.object)?;
            Ok(view)
        })
    }

    /// Waits until condition `type_` of the CacheCluster has `status`; returns the view.
    pub fn wait_condition(&self, namespace: &str, name: &str, type_: &str, status: &str, limit: Duration) -> Result<ClusterView, LocalClusterError> {
        self.wait_for(&format!("CacheCluster {namespace}/{name} {type_}={status}"), limit, || {
            let view = self.cache_view(namespace, name)?;
            match view.condition(type_) {
                Some((s, _, _)) if s == status => Ok(view),
                _ => Err(view.summary()),
            }
        })
    }

    /// The password in the generated Secret `<name>-auth` (key `password`).
    pub fn password(&self, namespace: &str, name: &str) -> Result<String, String> {
        let secret = format!("{name}-auth");
        let out = self
            .cp
            .kubectl(["get", "secret", &secret, "-n", namespace, "-o", "go-template={{or .data.password \"\" | base64decode}}"])
            .map_err(|e| e.to_string())?;
        if out.is_empty() {
            Err(format!("Secret {namespace}/{secret} has no password"))
        } else {
            Ok(out)
        }
    }

    /// Merge-patches CacheCluster `namespace/name` with `patch` (JSON).
    pub fn patch_cache(&self, namespace: &str, name: &str, patch: &str) -> Result<(), LocalClusterError> {
        self.cp.kubectl(["patch", "cachecluster", name, "-n", namespace, "--type", "merge", "-p", patch])?;
        Ok(())
    }

    /// Waits until every pod of CacheCluster `namespace/name` runs `version`: the status says so
    /// (`currentVersion`, phase Running, no upgrade on record, Ready) and every member's engine
    /// reports it.
    pub fn wait_version(&self, namespace: &str, name: &str, version: &str, limit: Duration) -> Result<ClusterView, LocalClusterError> {
        self.wait_for(&format!("CacheCluster {namespace}/{name} on version {version}"), limit, || {
            let view = self.cache_view(namespace, name)?;
            ready(&view.object)?;
            let status = &view.object["status"];
            let members = status["members"].as_array().cloned().unwrap_or_default();
            let on_version = members.iter().filter(|m| m["version"] == version).count();
            if status["currentVersion"] == version && status["upgrade"].is_null() && on_version == members.len() {
                Ok(view)
            } else {
                Err(format!("currentVersion {}, {on_version}/{} members on {version}, upgrade {}", status["currentVersion"], members.len(), status["upgrade"]))
            }
        })
    }

    /// Patches `spec.replicas` of CacheCluster `namespace/name`.
    pub fn scale(&self, namespace: &str, name: &str, replicas: u32) -> Result<(), LocalClusterError> {
        let patch = format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#);
        self.cp.kubectl(["patch", "cachecluster", name, "-n", namespace, "--type", "merge", "-p", &patch])?;
        Ok(())
    }
}

/// Sorts `demo-10` after `demo-9`.
fn natural(name: &str) -> (String, u64) {
    match name.rsplit_once('-') {
        Some((base, n)) => (base.to_owned(), n.parse().unwrap_or(u64::MAX)),
        None => (name.to_owned(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(phase: &str, ready: &str, members: Value) -> Value {
        serde_json::json!({
            "metadata": {"generation": 2},
            "spec": {"replicas": 3},
            "status": {"phase": phase, "observedGeneration": 2, "readyReplicas": 3,
                "conditions": [{"type": "Ready", "status": ready, "reason": "r"}], "members": members}
        })
    }

    fn member(pod: &str, synced: bool) -> Value {
        serde_json::json!({"pod": pod, "ready": true, "synced": synced, "connectedPeers": 2, "lagOps": 0})
    }

    #[test]
    fn ready_needs_running_ready_and_every_member_synced() {
        let all = serde_json::json!([member("demo-0", true), member("demo-1", true), member("demo-2", true)]);
        assert_eq!(ready(&cluster("Running", "True", all.clone())), Ok(()));
        assert!(ready(&cluster("Scaling", "True", all.clone())).is_err());
        assert!(ready(&cluster("Running", "False", all)).is_err());
        let unsynced = serde_json::json!([member("demo-0", true), member("demo-1", false), member("demo-2", true)]);
        assert!(ready(&cluster("Running", "True", unsynced)).unwrap_err().contains("2 of 3 members"));
        let leaving = serde_json::json!([member("demo-0", true), member("demo-1", true), member("demo-2", true), member("demo-3", true)]);
        assert!(ready(&cluster("Running", "True", leaving)).is_err(), "a leaving member still listed");
    }

    #[test]
    fn pods_sort_by_ordinal() {
        let mut names = vec!["demo-10", "demo-2", "demo-0"];
        names.sort_by_key(|n| natural(n));
        assert_eq!(names, ["demo-0", "demo-2", "demo-10"]);
    }
}
