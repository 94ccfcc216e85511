//! TLS children: the Secrets of an operator-issued certificate (`<name>-tls-ca` with the CA,
//! `<name>-tls` with the pods' certificate, key and `ca.crt`), and the cert-manager
//! `Certificate` `<name>-tls` when cert-manager issues it (only where its CRD exists). What
//! goes into the Secrets is decided by the TLS step (`crate::tls`), never here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;

use super::{child_metadata, BuildError, BuildInput};
use crate::tls::{CertificateSource, CA_KEY, CERT_KEY, KEY_KEY};

pub fn certificate_resource() -> ApiResource {
    ApiResource {
        group: "cert-manager.io".to_string(),
        version: "v1".to_string(),
        api_version: "cert-manager.io/v1".to_string(),
        kind: "Certificate".to_string(),
        plural: "certificates".to_string(),
    }
}

/// The operator-issued Secrets (none for other sources).
pub fn build_tls_secrets(input: &BuildInput) -> Result<Vec<Secret>, BuildError> {
    let Some(issued) = &input.tls.issued else {
        return Ok(Vec::new());
    };
    let secret = |name: String, entries: [(&str, &str); 3]| -> Result<Secret, BuildError> {
        Ok(Secret {
            metadata: child_metadata(input, name)?,
            type_: Some("Opaque".to_string()),
            data: Some(
                entries.into_iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        })
    };
    Ok(vec![
        secret(input.names.tls_ca_secret(), [(CERT_KEY, &issued.ca.cert), (KEY_KEY, &issued.ca.key), (CA_KEY, "")])?,
        secret(input.names.tls_secret(), [(CERT_KEY, &issued.leaf.cert), (KEY_KEY, &issued.leaf.key), (CA_KEY, &issued.ca.cert)])?,
    ])
}

/// The cert-manager `Certificate`, when the spec asks cert-manager and its CRD exists.
pub fn build_certificate(input: &BuildInput) -> Result<Option<DynamicObject>, BuildError> {
    let Some(CertificateSource::CertManager { issuer_ref, duration, renew_before }) = input.spec.tls.as_ref().map(|t| &t.source) else {
        return Ok(None);
    };
    if !input.capabilities.cert_manager {
        return Ok(None);
    }
    let name = input.names.tls_secret();
    let mut spec = json!({
        "secretName": name,
        "commonName": input.names.pod_dns_wildcard(),
        "dnsNames": input.names.tls_dns_names(),
        // The engines authenticate each other (and the operator) with the same certificate.
        "usages": ["server auth", "client auth", "digital signature", "key encipherment"],
        "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
        "issuerRef": {"name": issuer_ref.name, "kind": issuer_ref.kind, "group": issuer_ref.group},
    });
    if let Some(duration) = duration {
        spec["duration"] = json!(duration);
    }
    if let Some(renew_before) = renew_before {
        spec["renewBefore"] = json!(renew_before);
    }
    let mut object = DynamicObject::new(&name, &certificate_resource()).within(&input.names.namespace);
    object.metadata = child_metadata(input, name)?;
    object.data = json!({ "spec": spec });
    Ok(Some(object))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use crate::build::fixture::{yaml, Fixture};
    use crate::tls::{self, TlsStep};

    #[test]
    fn a_certificate_for_cert_manager_names_every_pod_and_both_usages() {
        let mut fixture =
            Fixture::new("tls: {enabled: true, certManager: {issuerRef: {name: ca-issuer, kind: ClusterIssuer}, duration: 48h, renewBefore: 12h}}");
        fixture.capabilities.cert_manager = true;
        let certificate = fixture.build().certificate.expect("a Certificate");
        let spec = &certificate.data["spec"];
        assert_eq!(spec["secretName"], "demo-tls", "{}", yaml(&certificate));
        assert_eq!(spec["issuerRef"]["kind"], "ClusterIssuer", "{}", yaml(&certificate));
        assert_eq!(spec["duration"], "48h", "{}", yaml(&certificate));
        assert!(spec["dnsNames"].as_array().is_some_and(|n| n.iter().any(|d| d == "*.demo-headless.cache.svc.cluster.local")), "{}", yaml(&certificate));
        assert!(spec["usages"].as_array().is_some_and(|u| u.iter().any(|x| x == "client auth")), "{}", yaml(&certificate));
        assert!(certificate.metadata.owner_references.is_some());
        fixture.capabilities.cert_manager = false;
        assert!(fixture.build().certificate.is_none(), "no Certificate without its CRD");
    }

    fn ready(fixture: &mut Fixture) {
        let names = fixture.names.clone();
        let ca = tls::new_ca(&names, Timestamp::now()).expect("CA");
        let leaf = tls::issue(&names, &ca, Timestamp::now(), std::time::Duration::from_secs(3600)).expect("leaf");
        let info = tls::inspect(&leaf.cert).expect("info");
        let material = tls::TlsMaterial { secret_name: "demo-tls".into(), ca_pem: ca.cert, cert_pem: leaf.cert, key_pem: leaf.key, info, renew_at: None };
        fixture.tls = TlsStep { state: tls::TlsState::Ready(std::sync::Arc::new(material)), issued: None, admin: None };
        let mounted = crate::build::mounted_tls(&fixture.spec, &fixture.tls.state).cloned();
        let settings = crate::build::engine_settings(&fixture.spec, &fixture.names, mounted.as_ref());
        fixture.template = crate::build::pod_template(&fixture.spec, &fixture.names, &settings, mounted.as_ref());
    }

    #[test]
    fn pods_mount_the_secret_whole_and_serve_tls_beside_the_plain_port() {
        let mut fixture = Fixture::new("tls: {enabled: true, authClients: 'optional'}");
        let plain = fixture.build();
        let spec = plain.statefulset.as_ref().and_then(|s| s.spec.as_ref()).and_then(|s| s.template.spec.clone()).expect("pod spec");
        assert!(!spec.volumes.iter().flatten().any(|v| v.name == "tls"), "no certificate yet: the template stays plain");
        assert!(!fixture.settings().text.contains("tls-port"));

        ready(&mut fixture);
        let children = fixture.build();
        let sts = children.statefulset.expect("a StatefulSet");
        let spec = sts.spec.as_ref().and_then(|s| s.template.spec.clone()).expect("pod spec");
        let volume = spec.volumes.iter().flatten().find(|v| v.name == "tls").expect("a tls volume");
        assert_eq!(volume.secret.as_ref().and_then(|s| s.secret_name.as_deref()), Some("demo-tls"), "{}", yaml(&sts));
        let mount = spec.containers[0].volume_mounts.iter().flatten().find(|m| m.name == "tls").expect("mounted");
        assert_eq!((mount.mount_path.as_str(), mount.sub_path.as_deref()), ("/etc/keymesh/tls", None), "whole directory: updates in place");
        assert!(spec.containers[0].ports.iter().flatten().any(|p| p.container_port == 6380 && p.name.as_deref() == Some("client-tls")), "{}", yaml(&sts));
        let text = &children.config_map.data.as_ref().expect("data")["keymesh.conf"];
        for line in [
            "tls-port 6380",
            "tls-cert-file /etc/keymesh/tls/tls.crt",
            "tls-ca-cert-file /etc/keymesh/tls/ca.crt",
            "tls-auth-clients optional",
            "tls-replication no",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        let ports: Vec<i32> = children.client_service.spec.iter().flat_map(|s| s.ports.iter().flatten()).map(|p| p.port).collect();
        assert_eq!(ports, [6379, 6380]);
        let policy = serde_json::to_value(children.network_policy.expect("a NetworkPolicy")).expect("json");
        assert!(policy["spec"]["ingress"].as_array().is_some_and(|rules| rules.iter().any(|r| r["ports"][0]["port"] == 6380)), "{policy:#}");
    }

    #[test]
    fn operator_issued_secrets_hold_the_ca_and_the_pods_certificate() {
        let mut fixture = Fixture::new("tls: {enabled: true}");
        let names = fixture.names.clone();
        let ca = tls::new_ca(&names, Timestamp::now()).expect("CA");
        let leaf = tls::issue(&names, &ca, Timestamp::now(), std::time::Duration::from_secs(3600)).expect("leaf");
        fixture.tls = TlsStep { state: tls::TlsState::Off, issued: Some(tls::Issued { ca: ca.clone(), leaf: leaf.clone(), renewed: true }), admin: None };
        let secrets = fixture.build().tls_secrets;
        let keys: Vec<(String, Vec<String>)> =
            secrets.iter().map(|s| (s.metadata.name.clone().unwrap_or_default(), s.data.iter().flat_map(|d| d.keys().cloned()).collect())).collect();
        assert_eq!(
            keys,
            [
                ("demo-tls-ca".to_string(), vec!["tls.crt".to_string(), "tls.key".to_string()]),
                ("demo-tls".to_string(), vec!["ca.crt".to_string(), "tls.crt".to_string(), "tls.key".to_string()])
            ]
        );
        let leaf_secret = secrets[1].data.as_ref().expect("data");
        assert_eq!(leaf_secret["ca.crt"].0, ca.cert.as_bytes());
        assert!(Fixture::new("{}").build().tls_secrets.is_empty());
    }
}
