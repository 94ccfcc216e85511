//! Per-pod sysctls (`spec.securityContext.sysctls`) as a kubelet applies them: checked against an
//! allow-list first — the sysctls Kubernetes deems safe, plus those the node's operator allowed
//! with `--allowed-unsafe-sysctls` (`AgentOptions::allowed_unsafe_sysctls`) — and a pod asking
//! for another one is rejected as the kubelet rejects it (phase `Failed`, reason
//! `SysctlForbidden`, message `Pod forbidden sysctl: "<name>" not allowlisted`); allowed ones are
//! written inside the pod's own network namespace before its containers start (they are
//! per-namespace settings: the node's own values do not change).
//!
//! Also the node's kernel files the node-tuning tests read and write: each node's hostPath root
//! gets `sys/kernel/mm/transparent_hugepage/enabled` and `proc/sys/vm/overcommit_memory` with
//! what a real kernel shows by default (`always [madvise] never`, `0`), never this machine's
//! own files.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

/// The sysctls Kubernetes allows without `--allowed-unsafe-sysctls` (its safe set).
pub const SAFE_SYSCTLS: [&str; 9] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// The pod's sysctls, `(name, value)`.
pub fn of(pod: &Pod) -> Vec<(String, String)> {
    pod.spec.iter().flat_map(|s| s.security_context.iter().flat_map(|c| c.sysctls.iter().flatten())).map(|s| (s.name.clone(), s.value.clone())).collect()
}

/// The kubelet's rejection message for the first sysctl that is not allowed, if any.
pub fn forbidden(pod: &Pod, allowed_unsafe: &[String]) -> Option<String> {
    of(pod)
        .into_iter()
        .find(|(name, _)| !SAFE_SYSCTLS.contains(&name.as_str()) && !allowed_unsafe.iter().any(|a| a == name))
        .map(|(name, _)| format!("Pod forbidden sysctl: \"{name}\" not allowlisted"))
}

/// Writes the sysctls inside network namespace `netns` (`ip netns exec <netns> sysctl -w`).
pub fn apply(netns: &str, sysctls: &[(String, String)]) -> Result<(), String> {
    for (name, value) in sysctls {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", netns, "sysctl", "-w", &format!("{name}={value}")])
            .output()
            .map_err(|e| format!("failed to run sysctl for {name}: {e}"))?;
        if !out.status.success() {
            return Err(format!("sysctl {name}={value} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
    }
    Ok(())
}

/// Lays out a node's kernel files under its hostPath root, as a fresh node shows them.
pub fn init_node_files(node_root: &Path) -> std::io::Result<()> {
    for (path, content) in [("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n"), ("proc/sys/vm/overcommit_memory", "0\n")] {
        let path = node_root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, content)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(sysctls: &str) -> Pod {
        serde_yaml::from_str(&format!("metadata: {{name: p}}\nspec:\n  containers: []\n  securityContext: {{sysctls: {sysctls}}}\n")).expect("a pod")
    }

    #[test]
    fn the_safe_set_and_the_allowed_unsafe_ones_pass_others_are_forbidden_as_the_kubelet_says() {
        let p = pod("[{name: net.ipv4.tcp_syncookies, value: '1'}, {name: net.core.somaxconn, value: '8192'}]");
        assert_eq!(forbidden(&p, &[]).as_deref(), Some("Pod forbidden sysctl: \"net.core.somaxconn\" not allowlisted"));
        assert_eq!(forbidden(&p, &["net.core.somaxconn".to_string()]), None);
        assert_eq!(of(&p).len(), 2);
    }
}
