//! What the agent reads from a pod's spec: the features it refuses (so a test sees a clear
//! `Unsupported` status instead of a silently different pod), and each container's command line
//! and environment, with the kubelet's `$(VAR)` expansion.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Probe, Secret};
use kube::{Api, Client};

/// The `kubernetes` Service's address and port, as the kubelet passes them to every container.
pub const SERVICE_HOST_PORT: u16 = 443;

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const HOST_PATH_TYPES: [&str; 5] = ["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File"];

/// Every feature of `pod` the agent does not implement, or `None` when it can run the pod.
pub fn unsupported(pod: &Pod) -> Option<String> {
    let mut why = Vec::new();
    let Some(spec) = &pod.spec else { return Some("the pod has no spec".into()) };
    for (set, what) in
        [(spec.host_network, "hostNetwork"), (spec.host_pid, "hostPID"), (spec.host_ipc, "hostIPC"), (spec.share_process_namespace, "shareProcessNamespace")]
    {
        if set == Some(true) {
            why.push(format!("{what} is not supported"));
        }
    }
    if spec.host_aliases.as_ref().is_some_and(|a| !a.is_empty()) {
        why.push("hostAliases are not supported".into());
    }
    if spec.ephemeral_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        why.push("ephemeral containers are not supported".into());
    }
    for v in spec.volumes.iter().flatten() {
        let kind = if v.config_map.is_some() || v.secret.is_some() || v.empty_dir.is_some() || v.persistent_volume_claim.is_some() {
            None
        } else if let Some(hp) = &v.host_path {
            let t = hp.type_.as_deref().unwrap_or("");
            (!HOST_PATH_TYPES.contains(&t)).then(|| format!("hostPath type {t}"))
        } else {
            Some("this volume type (only configMap, secret, emptyDir, hostPath and persistentVolumeClaim are)".to_owned())
        };
        if let Some(kind) = kind {
            why.push(format!("volume {}: {kind} is not supported", v.name));
        }
    }
    let volume_names: Vec<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        container_unsupported(c, &volume_names, &mut why);
    }
    (!why.is_empty()).then(|| why.join("; "))
}

fn container_unsupported(c: &Container, volumes: &[&str], why: &mut Vec<String>) {
    let name = &c.name;
    if c.ports.iter().flatten().any(|p| p.host_port.is_some()) {
        why.push(format!("container {name}: hostPort is not supported"));
    }
    if c.lifecycle.is_some() {
        why.push(format!("container {name}: lifecycle hooks (postStart/preStop) are not supported"));
    }
    if c.volume_devices.as_ref().is_some_and(|d| !d.is_empty()) {
        why.push(format!("container {name}: volumeDevices are not supported"));
    }
    for (probe, kind) in [(&c.readiness_probe, "readinessProbe"), (&c.liveness_probe, "livenessProbe"), (&c.startup_probe, "startupProbe")] {
        if let Some(p) = probe {
            if let Some(bad) = probe_unsupported(p) {
                why.push(format!("container {name}: {kind}: {bad}"));
            }
        }
    }
    for m in c.volume_mounts.iter().flatten() {
        if !volumes.contains(&m.name.as_str()) {
            why.push(format!("container {name}: volumeMount {} names no volume of the pod", m.name));
        }
        if m.mount_propagation.as_deref().is_some_and(|p| p != "None") || m.sub_path_expr.is_some() {
            why.push(format!("container {name}: volumeMount {}: mountPropagation and subPathExpr are not supported", m.name));
        }
    }
    for e in c.env.iter().flatten() {
        if let Some(from) = &e.value_from {
            if from.resource_field_ref.is_some() {
                why.push(format!("container {name}: env {}: resourceFieldRef is not supported", e.name));
            }
            if let Some(f) = &from.field_ref {
                if field_value(&Pod::default(), &f.field_path, "", "").is_none() {
                    why.push(format!("container {name}: env {}: fieldRef {} is not supported", e.name, f.field_path));
                }
            }
        }
    }
}

fn probe_unsupported(p: &Probe) -> Option<String> {
    if p.grpc.is_some() {
        return Some("grpc probes are not supported".into());
    }
    if let Some(h) = &p.http_get {
        if h.scheme.as_deref().is_some_and(|s| s != "HTTP") || h.host.is_some() {
            return Some("only plain HTTP probes of the pod's own address are supported".into());
        }
    }
    (p.http_get.is_none() && p.tcp_socket.is_none() && p.exec.is_none()).then(|| "a probe needs httpGet, tcpSocket or exec".into())
}

/// The value of a downward-API `fieldRef`, or `None` for a path the agent does not provide.
pub fn field_value(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let keyed = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.as_ref().and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    match path {
        "metadata.name" => Some(meta.name.clone().unwrap_or_default()),
        "metadata.namespace" => Some(meta.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Some(meta.uid.clone().unwrap_or_default()),
        "spec.nodeName" => Some(spec.node_name.unwrap_or_default()),
        "spec.serviceAccountName" => Some(spec.service_account_name.unwrap_or_default()),
        "status.podIP" | "status.podIPs" => Some(pod_ip.to_owned()),
        "status.hostIP" | "status.hostIPs" => Some(host_ip.to_owned()),
        _ => keyed("metadata.labels['", &meta.labels).or_else(|| keyed("metadata.annotations['", &meta.annotations)),
    }
}

/// Kubernetes' `$(VAR)` expansion: a defined variable is replaced, `$$` is a literal `$`, and
/// anything else is left as written.
pub fn expand(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => out.push_str(&format!("$({name})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The ConfigMaps and Secrets of one namespace, fetched once per pod start.
pub struct Sources {
    client: Client,
    config_maps: Api<ConfigMap>,
    secrets: Api<Secret>,
    cm_cache: BTreeMap<String, Option<ConfigMap>>,
    secret_cache: BTreeMap<String, Option<Secret>>,
}

impl Sources {
    pub fn new(client: Client, namespace: &str) -> Self {
        Sources {
            client: client.clone(),
            config_maps: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client, namespace),
            cm_cache: BTreeMap::new(),
            secret_cache: BTreeMap::new(),
        }
    }

    /// ConfigMap `name`, `None` when it does not exist.
    pub async fn config_map(&mut self, name: &str) -> Result<Option<ConfigMap>, String> {
        if !self.cm_cache.contains_key(name) {
            let got = self.config_maps.get_opt(name).await.map_err(|e| format!("failed to read ConfigMap {name}: {e}"))?;
            self.cm_cache.insert(name.to_owned(), got);
        }
        Ok(self.cm_cache.get(name).cloned().flatten())
    }

    /// The directory of the volume bound to claim `name`, which must be pinned to `node`.
    pub async fn claim_dir(&mut self, name: &str, node: &str, node_root: &Path) -> Result<PathBuf, String> {
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        let namespace = self.config_maps.namespace().unwrap_or_default().to_string();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &namespace);
        let claim = claims.get_opt(name).await.map_err(|e| format!("failed to read PersistentVolumeClaim {name}: {e}"))?;
        let claim = claim.ok_or_else(|| format!("PersistentVolumeClaim {name} not found"))?;
        let volume = claim.spec.and_then(|s| s.volume_name).filter(|v| !v.is_empty());
        let volume = volume.ok_or_else(|| format!("PersistentVolumeClaim {name} is not bound yet"))?;
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let pv = pvs.get(&volume).await.map_err(|e| format!("failed to read PersistentVolume {volume}: {e}"))?;
        match super::provisioner::volume_node(&pv) {
            Some(n) if n == node => {}
            other => return Err(format!("PersistentVolume {volume} is pinned to {}, not {node}", other.unwrap_or_else(|| "no node".into()))),
        }
        let dir = super::provisioner::volume_dir(node_root, &pv).ok_or_else(|| format!("PersistentVolume {volume} is not a local directory"))?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("failed to create {}: {e}", dir.display()))?;
        Ok(dir)
    }

    /// Secret `name`, `None` when it does not exist.
    pub async fn secret(&mut self, name: &str) -> Result<Option<Secret>, String> {
        if !self.secret_cache.contains_key(name) {
            let got = self.secrets.get_opt(name).await.map_err(|e| format!("failed to read Secret {name}: {e}"))?;
            self.secret_cache.insert(name.to_owned(), got);
        }
        Ok(self.secret_cache.get(name).cloned().flatten())
    }

    /// Key `key` of ConfigMap `name` (`Ok(None)` when absent and `optional`).
    async fn config_map_key(&mut self, name: &str, key: &str, optional: bool) -> Result<Option<String>, String> {
        let value = self.config_map(name).await?.and_then(|cm| cm.data.and_then(|d| d.get(key).cloned()));
        match value {
            None if !optional => Err(format!("key {key} of ConfigMap {name} not found")),
            v => Ok(v),
        }
    }

    async fn secret_key(&mut self, name: &str, key: &str, optional: bool) -> Result<Option<String>, String> {
        let value = self.secret(name).await?.and_then(|s| s.data.and_then(|d| d.get(key).map(|b| String::from_utf8_lossy(&b.0).into_owned())));
        match value {
            None if !optional => Err(format!("key {key} of Secret {name} not found")),
            v => Ok(v),
        }
    }
}

/// A container's program, arguments and environment, ready to start.
#[derive(Debug, Clone)]
pub struct Launch {
    pub binary: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Resolves `c`'s environment (kubelet order: the `kubernetes` Service variables, `envFrom`,
/// then `env`, each `value` expanded against what came before) and command line. An error is the
/// reason the container cannot start yet (a missing ConfigMap or Secret key).
pub async fn launch(pod: &Pod, c: &Container, binary: PathBuf, pod_ip: &str, host_ip: &str, service_ip: &str, sources: &mut Sources) -> Result<Launch, String> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOSTNAME".into(), hostname(pod)),
        ("KUBERNETES_SERVICE_HOST".into(), service_ip.into()),
        ("KUBERNETES_SERVICE_PORT".into(), SERVICE_HOST_PORT.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), SERVICE_HOST_PORT.to_string()),
        ("KUBERNETES_PORT".into(), format!("tcp://{service_ip}:{SERVICE_HOST_PORT}")),
    ];
    let set = |env: &mut Vec<(String, String)>, name: String, value: String| {
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match sources.config_map(&r.name).await? {
                Some(cm) => cm.data.unwrap_or_default().into_iter().for_each(|(k, v)| set(&mut env, format!("{prefix}{k}"), v)),
                None if r.optional == Some(true) => {}
                None => return Err(format!("ConfigMap {} not found", r.name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            match sources.secret(&r.name).await? {
                Some(s) => {
                    s.data.unwrap_or_default().into_iter().for_each(|(k, v)| set(&mut env, format!("{prefix}{k}"), String::from_utf8_lossy(&v.0).into_owned()))
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("Secret {} not found", r.name)),
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value = match &e.value_from {
            None => Some(expand(e.value.as_deref().unwrap_or(""), |n| lookup(&env, n))),
            Some(from) => {
                if let Some(f) = &from.field_ref {
                    field_value(pod, &f.field_path, pod_ip, host_ip)
                } else if let Some(k) = &from.secret_key_ref {
                    sources.secret_key(&k.name, &k.key, k.optional == Some(true)).await?
                } else if let Some(k) = &from.config_map_key_ref {
                    sources.config_map_key(&k.name, &k.key, k.optional == Some(true)).await?
                } else {
                    None
                }
            }
        };
        if let Some(value) = value {
            set(&mut env, e.name.clone(), value);
        }
    }
    // `command` names a program inside the image; here the image is the one mapped binary, so
    // `command[0]` stands for it and the rest are its first arguments.
    let words = c.command.iter().flatten().skip(1).chain(c.args.iter().flatten());
    let args = words.map(|w| expand(w, |n| lookup(&env, n))).collect();
    Ok(Launch { binary, args, env })
}

fn lookup(env: &[(String, String)], name: &str) -> Option<String> {
    env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// The pod's hostname: `spec.hostname`, else its name.
pub fn hostname(pod: &Pod) -> String {
    pod.spec.as_ref().and_then(|s| s.hostname.clone()).or_else(|| pod.metadata.name.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_the_kubelet() {
        let env = |n: &str| (n == "POD_NAME").then(|| "db-0".to_owned());
        assert_eq!(expand("--node-name $(POD_NAME)", env), "--node-name db-0");
        assert_eq!(expand("$$(POD_NAME) $(MISSING) $ $(", env), "$(POD_NAME) $(MISSING) $ $(");
    }
}
