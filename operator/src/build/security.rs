//! The engine pods' security contexts: compatible with the Pod Security Standards' `restricted`
//! profile (non-root, no privilege escalation, every capability dropped, the runtime's default
//! seccomp profile), plus a read-only root filesystem: the engine writes nothing to disk (it
//! keeps data in memory and logs to stderr). The one exception is the user's own `spec.sysctls`:
//! `restricted` allows only the "safe" sysctls, and `net.core.somaxconn` is not one of them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext, SeccompProfile, SecurityContext, Sysctl};

/// The user and group the engine runs as (distroless "nonroot"; the engine image's `USER`).
pub const ENGINE_UID: i64 = 65532;

/// The pod's security context, with `sysctls` (name → value) as its per-pod sysctls.
pub fn engine_pod_security_context(sysctls: &BTreeMap<String, String>) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(ENGINE_UID),
        run_as_group: Some(ENGINE_UID),
        fs_group: Some(ENGINE_UID),
        seccomp_profile: Some(runtime_default()),
        sysctls: (!sysctls.is_empty()).then(|| sysctls.iter().map(|(name, value)| Sysctl { name: name.clone(), value: value.clone() }).collect()),
        ..PodSecurityContext::default()
    }
}

pub fn engine_container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_string()]), add: None }),
        seccomp_profile: Some(runtime_default()),
        ..SecurityContext::default()
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile { type_: "RuntimeDefault".to_string(), localhost_profile: None }
}

#[cfg(test)]
mod tests {
    use crate::build::fixture::{build, yaml};

    #[test]
    fn engine_pods_are_non_root_read_only_and_drop_every_capability() {
        let sts = build("{}").statefulset.expect("a StatefulSet");
        let pod = sts.spec.as_ref().and_then(|s| s.template.spec.as_ref()).expect("a pod template");
        let pod_context = pod.security_context.as_ref().expect("a pod securityContext");
        assert_eq!(pod_context.run_as_non_root, Some(true), "{}", yaml(&sts));
        assert_eq!(pod_context.run_as_user, Some(super::ENGINE_UID), "{}", yaml(&sts));
        assert_eq!(pod_context.seccomp_profile.as_ref().map(|p| p.type_.as_str()), Some("RuntimeDefault"), "{}", yaml(&sts));
        for container in &pod.containers {
            let context = container.security_context.as_ref().expect("a container securityContext");
            assert_eq!(context.allow_privilege_escalation, Some(false), "{}", yaml(&sts));
            assert_eq!(context.read_only_root_filesystem, Some(true), "{}", yaml(&sts));
            assert_eq!(context.capabilities.as_ref().and_then(|c| c.drop.clone()), Some(vec!["ALL".to_string()]), "{}", yaml(&sts));
            assert!(context.capabilities.as_ref().is_some_and(|c| c.add.is_none()), "{}", yaml(&sts));
        }
    }

    #[test]
    fn sysctls_join_the_restricted_settings() {
        let sts = build("sysctls: {net.core.somaxconn: '8192'}").statefulset.expect("a StatefulSet");
        let pod = sts.spec.as_ref().and_then(|s| s.template.spec.as_ref()).expect("a pod template");
        let context = pod.security_context.as_ref().expect("a pod securityContext");
        assert_eq!(context.run_as_non_root, Some(true), "{}", yaml(&sts));
        let sysctls = context.sysctls.clone().unwrap_or_default();
        assert_eq!(sysctls.iter().map(|s| (s.name.as_str(), s.value.as_str())).collect::<Vec<_>>(), [("net.core.somaxconn", "8192")], "{}", yaml(&sts));
    }
}
