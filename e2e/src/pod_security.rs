//! Checks a pod spec (JSON, as the API server returns it) against the Kubernetes Pod Security
//! Standards' `restricted` profile (which includes `baseline`), rule by rule as the PSS page
//! lists them, and against KeyMesh's own hardening (a read-only root filesystem). Kubernetes
//! 1.20 has no PodSecurity admission, so the tests run these checks on the pods themselves.

use serde_json::Value;

/// Capabilities `restricted` lets a container add.
const RESTRICTED_ADDABLE: [&str; 1] = ["NET_BIND_SERVICE"];

/// Sysctls `baseline` allows (the "safe" set, up to Kubernetes 1.29).
const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Volume types `restricted` allows.
const RESTRICTED_VOLUMES: [&str; 8] = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];

/// Every rule of the `restricted` profile that `spec` (a PodSpec) breaks, each naming the field.
pub fn restricted_violations(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let pod = &spec["securityContext"];
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[field] == true {
            out.push(format!("spec.{field} is true"));
        }
    }
    if pod["windowsOptions"]["hostProcess"] == true {
        out.push("spec.securityContext.windowsOptions.hostProcess is true".into());
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or("?");
        let types: Vec<&String> = volume.as_object().into_iter().flat_map(|m| m.keys()).filter(|k| *k != "name").collect();
        for t in types {
            if !RESTRICTED_VOLUMES.contains(&t.as_str()) {
                out.push(format!("volume {name} is of type {t}"));
            }
        }
    }
    for sysctl in pod["sysctls"].as_array().into_iter().flatten() {
        let name = sysctl["name"].as_str().unwrap_or("?");
        if !SAFE_SYSCTLS.contains(&name) {
            out.push(format!("spec.securityContext.sysctls: {name} is not a safe sysctl"));
        }
    }
    check_selinux(pod, "spec.securityContext", &mut out);
    if pod["runAsUser"] == 0 {
        out.push("spec.securityContext.runAsUser is 0".into());
    }
    if pod["seccompProfile"]["type"] == "Unconfined" {
        out.push("spec.securityContext.seccompProfile.type is Unconfined".into());
    }
    let pod_non_root = pod["runAsNonRoot"] == true;
    let pod_seccomp = is_confined(&pod["seccompProfile"]);
    for (kind, container) in containers(spec) {
        let name = format!("{kind} {}", container["name"].as_str().unwrap_or("?"));
        let sc = &container["securityContext"];
        if sc["privileged"] == true {
            out.push(format!("{name}: privileged"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            out.push(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        if sc["runAsNonRoot"] == false || !(pod_non_root || sc["runAsNonRoot"] == true) {
            out.push(format!("{name}: runAsNonRoot is not true (on the pod or the container)"));
        }
        if sc["runAsUser"] == 0 {
            out.push(format!("{name}: runAsUser is 0"));
        }
        if sc["seccompProfile"]["type"] == "Unconfined" || !(pod_seccomp || is_confined(&sc["seccompProfile"])) {
            out.push(format!("{name}: seccompProfile is not RuntimeDefault or Localhost (on the pod or the container)"));
        }
        let drops: Vec<&str> = sc["capabilities"]["drop"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if !drops.contains(&"ALL") {
            out.push(format!("{name}: capabilities.drop does not include ALL"));
        }
        for added in sc["capabilities"]["add"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !RESTRICTED_ADDABLE.contains(&added) {
                out.push(format!("{name}: adds capability {added}"));
            }
        }
        for port in container["ports"].as_array().into_iter().flatten() {
            if port["hostPort"].as_i64().is_some_and(|p| p != 0) {
                out.push(format!("{name}: hostPort {}", port["hostPort"]));
            }
        }
        if !sc["procMount"].is_null() && sc["procMount"] != "Default" {
            out.push(format!("{name}: procMount {}", sc["procMount"]));
        }
        if sc["windowsOptions"]["hostProcess"] == true {
            out.push(format!("{name}: windowsOptions.hostProcess is true"));
        }
        check_selinux(sc, &name, &mut out);
    }
    out
}

/// KeyMesh's own rule beyond `restricted`: every container's root filesystem is read-only.
pub fn hardening_violations(spec: &Value) -> Vec<String> {
    containers(spec)
        .filter(|(_, c)| c["securityContext"]["readOnlyRootFilesystem"] != true)
        .map(|(kind, c)| format!("{kind} {}: readOnlyRootFilesystem is not true", c["name"].as_str().unwrap_or("?")))
        .collect()
}

fn containers(spec: &Value) -> impl Iterator<Item = (&'static str, &Value)> {
    [("container", "containers"), ("initContainer", "initContainers"), ("ephemeralContainer", "ephemeralContainers")]
        .into_iter()
        .flat_map(move |(kind, field)| spec[field].as_array().into_iter().flatten().map(move |c| (kind, c)))
}

fn is_confined(profile: &Value) -> bool {
    profile["type"] == "RuntimeDefault" || profile["type"] == "Localhost"
}

fn check_selinux(context: &Value, what: &str, out: &mut Vec<String>) {
    let selinux = &context["seLinuxOptions"];
    if let Some(t) = selinux["type"].as_str() {
        if !["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"].contains(&t) {
            out.push(format!("{what}.seLinuxOptions.type is {t}"));
        }
    }
    for field in ["user", "role"] {
        if selinux[field].as_str().is_some_and(|v| !v.is_empty()) {
            out.push(format!("{what}.seLinuxOptions.{field} is set"));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn restricted_pod() -> Value {
        json!({
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "config", "configMap": {"name": "c"}}],
            "containers": [{"name": "app", "securityContext": {
                "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}}}]
        })
    }

    #[test]
    fn a_restricted_pod_passes() {
        assert_eq!(restricted_violations(&restricted_pod()), Vec::<String>::new());
        assert_eq!(hardening_violations(&restricted_pod()), Vec::<String>::new());
    }

    #[test]
    fn each_broken_rule_is_named() {
        let mut pod = restricted_pod();
        pod["hostNetwork"] = json!(true);
        pod["volumes"] = json!([{"name": "host", "hostPath": {"path": "/"}}]);
        pod["securityContext"] = json!({"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]});
        pod["containers"][0]["securityContext"] = json!({"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}});
        pod["containers"][0]["ports"] = json!([{"containerPort": 6379, "hostPort": 6379}]);
        let violations = restricted_violations(&pod);
        for expected in [
            "spec.hostNetwork is true",
            "volume host is of type hostPath",
            "net.core.somaxconn is not a safe sysctl",
            "container app: privileged",
            "container app: allowPrivilegeEscalation is not false",
            "container app: runAsNonRoot is not true",
            "container app: seccompProfile is not RuntimeDefault",
            "container app: capabilities.drop does not include ALL",
            "container app: adds capability SYS_ADMIN",
            "container app: hostPort 6379",
        ] {
            assert!(violations.iter().any(|v| v.contains(expected)), "missing `{expected}` in {violations:#?}");
        }
        assert_eq!(hardening_violations(&pod), ["container app: readOnlyRootFilesystem is not true"]);
    }

    #[test]
    fn a_container_may_not_undo_the_pods_settings() {
        let mut pod = restricted_pod();
        pod["containers"][0]["securityContext"]["runAsNonRoot"] = json!(false);
        pod["containers"][0]["securityContext"]["seccompProfile"] = json!({"type": "Unconfined"});
        let violations = restricted_violations(&pod);
        assert_eq!(violations.len(), 2, "{violations:#?}");
    }
}
