//! `spec.tls` checked and resolved (part of the validate step): where the certificate comes
//! from, and what the engines are told to do with it.

use std::time::Duration;

use crate::api::{IssuerRef, TlsSpec};
use crate::names::ClusterNames;

/// TLS as the operator runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub source: CertificateSource,
    /// The engines' `tls-auth-clients`: `yes`, `no` or `optional`.
    pub auth_clients: String,
    /// Mutual TLS between the engines (`tls-replication`), once every pod has a certificate.
    pub replication: bool,
}

/// Where the pods' certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateSource {
    /// The operator's own CA (`<name>-tls-ca`) issues `<name>-tls` and renews it.
    Operator { validity: Duration, renew_before: Duration },
    /// The user's Secret; the operator only reads it.
    Secret { name: String },
    /// A cert-manager `Certificate` `<name>-tls` writes the Secret `<name>-tls`.
    CertManager { issuer_ref: IssuerRef, duration: Option<String>, renew_before: Option<String> },
}

impl TlsSettings {
    /// The Secret the pods mount (`tls.crt`, `tls.key`, `ca.crt`).
    pub fn secret_name(&self, names: &ClusterNames) -> String {
        match &self.source {
            CertificateSource::Secret { name } => name.clone(),
            CertificateSource::Operator { .. } | CertificateSource::CertManager { .. } => names.tls_secret(),
        }
    }
}

/// `None` when TLS is off; problems go to `errors`, each naming its field; fields set but
/// without effect for the chosen source go to `warnings` (the `SpecWarnings` condition).
pub fn tls_settings(spec: &TlsSpec, errors: &mut Vec<String>, warnings: &mut Vec<String>) -> Option<TlsSettings> {
    if !spec.enabled {
        return None;
    }
    let auth_clients = spec.auth_clients.clone().unwrap_or_else(|| "no".to_string());
    if !["yes", "no", "optional"].contains(&auth_clients.as_str()) {
        errors.push(format!("spec.tls.authClients: must be \"yes\", \"no\" or \"optional\" (quoted), got '{auth_clients}'"));
    }
    let source = match (&spec.secret_name, &spec.cert_manager) {
        (Some(_), Some(_)) => {
            errors.push("spec.tls: set secretName or certManager, not both".to_string());
            return None;
        }
        (Some(name), None) if name.trim().is_empty() => {
            errors.push("spec.tls.secretName: must not be empty (leave it out to have the operator issue certificates)".to_string());
            return None;
        }
        (Some(name), None) => {
            unused_validity(spec, "spec.tls.secretName (the Secret's certificate is used as it is)", warnings);
            CertificateSource::Secret { name: name.clone() }
        }
        (None, Some(cm)) => {
            if cm.issuer_ref.name.trim().is_empty() {
                errors.push("spec.tls.certManager.issuerRef.name: must not be empty".to_string());
            }
            if !["Issuer", "ClusterIssuer"].contains(&cm.issuer_ref.kind.as_str()) && cm.issuer_ref.group == "cert-manager.io" {
                errors.push(format!("spec.tls.certManager.issuerRef.kind: cert-manager.io issuers are Issuer or ClusterIssuer, got '{}'", cm.issuer_ref.kind));
            }
            for (field, value) in [("duration", &cm.duration), ("renewBefore", &cm.renew_before)] {
                if let Some(value) = value {
                    if go_duration(value).is_none() {
                        errors.push(format!("spec.tls.certManager.{field}: '{value}' is not a duration like 2160h or 90m"));
                    }
                }
            }
            unused_validity(spec, "spec.tls.certManager (set certManager.duration and certManager.renewBefore)", warnings);
            CertificateSource::CertManager { issuer_ref: cm.issuer_ref.clone(), duration: cm.duration.clone(), renew_before: cm.renew_before.clone() }
        }
        (None, None) => {
            let validity = duration_field("spec.tls.duration", &spec.duration, errors)?;
            let renew_before = duration_field("spec.tls.renewBefore", &spec.renew_before, errors)?;
            if renew_before >= validity {
                errors.push(format!("spec.tls.renewBefore: {} must be shorter than spec.tls.duration {}", spec.renew_before, spec.duration));
            }
            CertificateSource::Operator { validity, renew_before }
        }
    };
    Some(TlsSettings { source, auth_clients, replication: spec.replication })
}

/// `spec.tls.duration`/`renewBefore` only shape the certificates the operator issues itself.
fn unused_validity(spec: &TlsSpec, source: &str, warnings: &mut Vec<String>) {
    let defaults = TlsSpec::default();
    for (field, value, default) in [("duration", &spec.duration, defaults.duration), ("renewBefore", &spec.renew_before, defaults.renew_before)] {
        if *value != default {
            warnings.push(format!("spec.tls.{field} has no effect with {source}"));
        }
    }
}

fn duration_field(field: &str, value: &str, errors: &mut Vec<String>) -> Option<Duration> {
    match go_duration(value) {
        Some(d) if d >= Duration::from_secs(60) => Some(d),
        Some(_) => {
            errors.push(format!("{field}: '{value}' is shorter than a minute"));
            None
        }
        None => {
            errors.push(format!("{field}: '{value}' is not a duration like 2160h or 90m"));
            None
        }
    }
}

/// A duration as cert-manager and Go write them (`2160h`, `1h30m`, `90s`).
pub fn go_duration(text: &str) -> Option<Duration> {
    humantime::parse_duration(text.trim()).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn validity_fields_without_effect_are_warned_about() {
        let mut warnings = Vec::new();
        let _ = tls_settings(&spec("{enabled: true, secretName: certs, duration: 24h}"), &mut Vec::new(), &mut warnings);
        assert_eq!(warnings, ["spec.tls.duration has no effect with spec.tls.secretName (the Secret's certificate is used as it is)"]);
    }

    use super::*;

    fn spec(yaml: &str) -> TlsSpec {
        serde_yaml::from_str(yaml).expect("a TlsSpec")
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(go_duration("2160h"), Some(Duration::from_secs(2160 * 3600)));
        assert_eq!(go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("soon"), None);
    }

    #[test]
    fn off_unless_enabled_and_operator_issued_by_default() {
        let mut errors = Vec::new();
        assert_eq!(tls_settings(&spec("secretName: x"), &mut errors, &mut Vec::new()), None);
        let on = tls_settings(&spec("enabled: true"), &mut errors, &mut Vec::new()).expect("settings");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(on.auth_clients, "no");
        assert!(on.replication);
        assert_eq!(on.source, CertificateSource::Operator { validity: Duration::from_secs(2160 * 3600), renew_before: Duration::from_secs(720 * 3600) });
        assert_eq!(on.secret_name(&ClusterNames::new("demo", "ns", "cluster.local")), "demo-tls");
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            ("{enabled: true, secretName: a, certManager: {issuerRef: {name: ca}}}", "spec.tls: set secretName or certManager, not both"),
            ("{enabled: true, authClients: maybe}", "spec.tls.authClients: must be \"yes\", \"no\" or \"optional\" (quoted), got 'maybe'"),
            ("{enabled: true, duration: 1h, renewBefore: 2h}", "spec.tls.renewBefore: 2h must be shorter than spec.tls.duration 1h"),
            ("{enabled: true, duration: soon}", "spec.tls.duration: 'soon' is not a duration like 2160h or 90m"),
            ("{enabled: true, certManager: {issuerRef: {name: ''}}}", "spec.tls.certManager.issuerRef.name: must not be empty"),
            (
                "{enabled: true, certManager: {issuerRef: {name: ca, kind: Vault}}}",
                "spec.tls.certManager.issuerRef.kind: cert-manager.io issuers are Issuer or ClusterIssuer, got 'Vault'",
            ),
        ];
        for (yaml, message) in cases {
            let mut errors = Vec::new();
            let _ = tls_settings(&spec(yaml), &mut errors, &mut Vec::new());
            assert!(errors.iter().any(|e| e == message), "{yaml}: {errors:?}");
        }
    }

    #[test]
    fn cert_manager_keeps_the_issuer() {
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        let settings =
            tls_settings(&spec("{enabled: true, certManager: {issuerRef: {name: ca, kind: ClusterIssuer}, duration: 48h}}"), &mut errors, &mut warnings)
                .expect("settings");
        assert!(warnings.is_empty(), "certManager.duration is the one that counts: {warnings:?}");
        let CertificateSource::CertManager { issuer_ref, duration, .. } = settings.source else { panic!("{settings:?}") };
        assert_eq!((issuer_ref.name.as_str(), issuer_ref.kind.as_str(), issuer_ref.group.as_str()), ("ca", "ClusterIssuer", "cert-manager.io"));
        assert_eq!(duration.as_deref(), Some("48h"));
    }
}
