//! The TLS step (between reading the password and observing the pods): finds the pods'
//! certificate, issues or renews it when the operator is its source, and says whether the pods
//! can use it yet.
//!
//! - Operator-issued (neither `secretName` nor `certManager`): the cluster's CA lives in
//!   `<name>-tls-ca` (created once), the pods' certificate in `<name>-tls` (`tls.crt`,
//!   `tls.key`, `ca.crt`). It is issued again when it is missing, unreadable, not from the
//!   current CA, missing a name, or within `renewBefore` of its end. The Secrets are built by
//!   `build::tls` from what this step decided, so re-reconciling never re-issues.
//! - `secretName`: the user's Secret, read only.
//! - `certManager`: a `Certificate` `<name>-tls` (built by `build::tls` where the CRD exists)
//!   makes cert-manager write the Secret `<name>-tls`.
//!
//! Pods get TLS only once the Secret holds a valid certificate (`TlsState::Ready`): until
//! then the pod template stays as it is and the `TLSReady` condition says what is missing.
//! Mounted Secrets update in place (no `subPath`) and the engines re-read their files, so a
//! renewal reaches every pod without a restart.
//!
//! Turning TLS off: while pods still mount a certificate, the step reads it (`TlsStep::admin`)
//! so the operator can still call those pods and switch their `tls-replication` off before the
//! roll replaces them.

mod certificates;
mod settings;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Api;

pub use certificates::{inspect, issue, new_ca, CertificateError, CertificateInfo, Pem, CA_VALIDITY};
pub use settings::{go_duration, tls_settings, CertificateSource, TlsSettings};

use crate::names::ClusterNames;

/// Keys of a TLS Secret (`kubernetes.io/tls` plus cert-manager's `ca.crt`).
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";
pub const CA_KEY: &str = "ca.crt";

/// Where the pods mount the TLS Secret (a whole-directory mount: it updates in place).
pub const TLS_DIR: &str = "/etc/keymesh/tls";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to read Secret {name}: {source}")]
    Read { name: String, source: kube::Error },
    #[error("failed to issue the TLS certificate of {name}: {source}")]
    Issue { name: String, source: CertificateError },
}

/// The certificate the pods use, and what the operator's admin client needs to call them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    pub secret_name: String,
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub info: CertificateInfo,
    /// When the operator will issue the next one (operator-issued only).
    pub renew_at: Option<Timestamp>,
}

/// Where TLS stands for a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsState {
    Off,
    /// The Secret holds a valid certificate: pods mount it.
    Ready(Arc<TlsMaterial>),
    /// TLS is on but the certificate is not usable yet; pods keep their template.
    Waiting {
        reason: &'static str,
        message: String,
    },
}

impl TlsState {
    pub fn material(&self) -> Option<&Arc<TlsMaterial>> {
        match self {
            TlsState::Ready(material) => Some(material),
            _ => None,
        }
    }
}

/// What the TLS step decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsStep {
    pub state: TlsState,
    /// Operator-issued: the CA and the pods' certificate the Secrets must hold.
    pub issued: Option<Issued>,
    /// What admin calls to pods that mount a certificate use: the current certificate, or,
    /// while TLS is being turned off, the one the pods still mount.
    pub admin: Option<Arc<TlsMaterial>>,
}

/// The operator's CA and the pods' certificate (`renewed`: issued by this reconcile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub ca: Pem,
    pub leaf: Pem,
    pub renewed: bool,
}

impl TlsStep {
    pub fn off() -> TlsStep {
        TlsStep { state: TlsState::Off, issued: None, admin: None }
    }

    fn decided(state: TlsState, issued: Option<Issued>) -> TlsStep {
        let admin = state.material().cloned();
        TlsStep { state, issued, admin }
    }
}

/// Runs the TLS step. `cert_manager`: the `cert-manager.io/v1` Certificate CRD exists;
/// `mounted`: the TLS Secret some pod still mounts (read for admin calls while TLS is turned off).
pub async fn prepare(
    secrets: &Api<Secret>,
    names: &ClusterNames,
    settings: Option<&TlsSettings>,
    cert_manager: bool,
    mounted: Option<&str>,
    now: Timestamp,
) -> Result<TlsStep, TlsError> {
    let Some(settings) = settings else {
        let Some(secret) = mounted else {
            return Ok(TlsStep::off());
        };
        let data = secrets.get_opt(secret).await.map_err(|source| TlsError::Read { name: secret.to_string(), source })?.and_then(|s| s.data);
        let admin = external(secret, data.as_ref(), now, "").material().cloned();
        return Ok(TlsStep { state: TlsState::Off, issued: None, admin });
    };
    let read = |name: String| async move { secrets.get_opt(&name).await.map(|s| s.and_then(|s| s.data)).map_err(|source| TlsError::Read { name, source }) };
    let secret_name = settings.secret_name(names);
    match &settings.source {
        CertificateSource::Operator { validity, renew_before } => {
            let ca = read(names.tls_ca_secret()).await?.and_then(|data| pem_pair(&data));
            let current = read(secret_name.clone()).await?;
            let issued = operator_issued(names, ca, current.as_ref(), now, *validity, *renew_before)?;
            let info = inspect(&issued.leaf.cert).map_err(|source| TlsError::Issue { name: names.name.clone(), source })?;
            let renew_at = Timestamp::from_second(info.not_after.as_second() - renew_before.as_secs() as i64).ok();
            let material =
                TlsMaterial { secret_name, ca_pem: issued.ca.cert.clone(), cert_pem: issued.leaf.cert.clone(), key_pem: issued.leaf.key.clone(), info, renew_at };
            Ok(TlsStep::decided(TlsState::Ready(Arc::new(material)), Some(issued)))
        }
        CertificateSource::Secret { .. } => {
            let data = read(secret_name.clone()).await?;
            Ok(TlsStep::decided(external(&secret_name, data.as_ref(), now, "create it with tls.crt, tls.key and ca.crt"), None))
        }
        CertificateSource::CertManager { .. } if !cert_manager => Ok(TlsStep::decided(
            TlsState::Waiting {
                reason: "CertManagerMissing",
                message: "spec.tls.certManager needs cert-manager: the cert-manager.io/v1 Certificate CRD is not installed (install cert-manager, or use spec.tls.secretName, or leave both out to have the operator issue certificates)".to_string(),
            },
            None,
        )),
        CertificateSource::CertManager { .. } => {
            let data = read(secret_name.clone()).await?;
            let hint = format!("waiting for cert-manager to issue Certificate {}", names.tls_secret());
            Ok(TlsStep::decided(external(&secret_name, data.as_ref(), now, &hint), None))
        }
    }
}

/// The operator's CA (kept, or new) and the pods' certificate (kept, or issued again).
fn operator_issued(
    names: &ClusterNames,
    ca: Option<Pem>,
    current: Option<&BTreeMap<String, k8s_openapi::ByteString>>,
    now: Timestamp,
    validity: std::time::Duration,
    renew_before: std::time::Duration,
) -> Result<Issued, TlsError> {
    let failed = |source| TlsError::Issue { name: names.name.clone(), source };
    let ca = match ca.filter(|ca| inspect(&ca.cert).is_ok_and(|info| info.not_after > now)) {
        Some(ca) => ca,
        None => new_ca(names, now).map_err(failed)?,
    };
    let keep = current.and_then(|data| {
        let leaf = pem_pair(data)?;
        let same_ca = text(data, CA_KEY).is_some_and(|c| c == ca.cert);
        let info = inspect(&leaf.cert).ok()?;
        let names_ok = names.tls_dns_names().iter().all(|n| info.dns_names.contains(n));
        let fresh = info.not_after.as_second() - now.as_second() > renew_before.as_secs() as i64;
        (same_ca && names_ok && fresh).then_some(leaf)
    });
    Ok(match keep {
        Some(leaf) => Issued { ca, leaf, renewed: false },
        None => {
            let leaf = issue(names, &ca, now, validity).map_err(failed)?;
            Issued { ca, leaf, renewed: true }
        }
    })
}

/// A certificate someone else writes (the user, cert-manager): usable, or why not.
fn external(secret: &str, data: Option<&BTreeMap<String, k8s_openapi::ByteString>>, now: Timestamp, hint: &str) -> TlsState {
    let Some(data) = data else {
        return TlsState::Waiting { reason: "SecretMissing", message: format!("Secret {secret} does not exist yet: {hint}") };
    };
    let missing: Vec<&str> = [CERT_KEY, KEY_KEY, CA_KEY].into_iter().filter(|k| text(data, k).is_none()).collect();
    if !missing.is_empty() {
        return TlsState::Waiting { reason: "SecretIncomplete", message: format!("Secret {secret} has no {}: {hint}", missing.join(", ")) };
    }
    let (cert, key, ca) = (text(data, CERT_KEY).unwrap_or_default(), text(data, KEY_KEY).unwrap_or_default(), text(data, CA_KEY).unwrap_or_default());
    match inspect(&cert) {
        Err(e) => TlsState::Waiting { reason: "SecretInvalid", message: format!("Secret {secret}: {CERT_KEY}: {e}") },
        Ok(info) if info.not_after <= now => {
            TlsState::Waiting { reason: "CertificateExpired", message: format!("Secret {secret}: the certificate expired at {}", info.not_after) }
        }
        Ok(info) => TlsState::Ready(Arc::new(TlsMaterial { secret_name: secret.to_string(), ca_pem: ca, cert_pem: cert, key_pem: key, info, renew_at: None })),
    }
}

fn text(data: &BTreeMap<String, k8s_openapi::ByteString>, key: &str) -> Option<String> {
    data.get(key).map(|b| String::from_utf8_lossy(&b.0).into_owned()).filter(|t| !t.trim().is_empty())
}

fn pem_pair(data: &BTreeMap<String, k8s_openapi::ByteString>) -> Option<Pem> {
    Some(Pem { cert: text(data, CERT_KEY)?, key: text(data, KEY_KEY)? })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::ByteString;

    use super::*;

    fn names() -> ClusterNames {
        ClusterNames::new("demo", "cache", "cluster.local")
    }

    fn secret_data(ca: &Pem, leaf: &Pem) -> BTreeMap<String, ByteString> {
        BTreeMap::from([
            (CERT_KEY.to_string(), ByteString(leaf.cert.clone().into_bytes())),
            (KEY_KEY.to_string(), ByteString(leaf.key.clone().into_bytes())),
            (CA_KEY.to_string(), ByteString(ca.cert.clone().into_bytes())),
        ])
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn issues_once_keeps_then_renews_before_expiry() {
        let t0 = Timestamp::now();
        let first = operator_issued(&names(), None, None, t0, 10 * HOUR, 2 * HOUR).expect("issued");
        assert!(first.renewed);
        let data = secret_data(&first.ca, &first.leaf);
        let later = Timestamp::from_second(t0.as_second() + 7 * 3600).expect("time");
        let kept = operator_issued(&names(), Some(first.ca.clone()), Some(&data), later, 10 * HOUR, 2 * HOUR).expect("kept");
        assert_eq!((kept.renewed, &kept.leaf), (false, &first.leaf), "7 h into 10 h with 2 h to go: kept");
        let due = Timestamp::from_second(t0.as_second() + 8 * 3600 + 120).expect("time");
        let renewed = operator_issued(&names(), Some(first.ca.clone()), Some(&data), due, 10 * HOUR, 2 * HOUR).expect("renewed");
        assert!(renewed.renewed && renewed.leaf != first.leaf && renewed.ca == first.ca, "inside renewBefore: a new certificate from the same CA");
    }

    #[test]
    fn a_certificate_from_another_ca_is_issued_again() {
        let t0 = Timestamp::now();
        let first = operator_issued(&names(), None, None, t0, 10 * HOUR, 2 * HOUR).expect("issued");
        let other_ca = new_ca(&names(), t0).expect("CA");
        let again = operator_issued(&names(), Some(other_ca.clone()), Some(&secret_data(&first.ca, &first.leaf)), t0, 10 * HOUR, 2 * HOUR).expect("issued");
        assert!(again.renewed && again.ca == other_ca);
    }

    #[test]
    fn external_secrets_are_checked() {
        let t0 = Timestamp::now();
        let issued = operator_issued(&names(), None, None, t0, 10 * HOUR, 2 * HOUR).expect("issued");
        let mut data = secret_data(&issued.ca, &issued.leaf);
        assert!(matches!(external("s", Some(&data), t0, "hint"), TlsState::Ready(_)));
        assert!(matches!(external("s", None, t0, "hint"), TlsState::Waiting { reason: "SecretMissing", .. }));
        let late = Timestamp::from_second(t0.as_second() + 11 * 3600).expect("time");
        assert!(matches!(external("s", Some(&data), late, "hint"), TlsState::Waiting { reason: "CertificateExpired", .. }));
        data.remove(CA_KEY);
        let TlsState::Waiting { reason, message } = external("s", Some(&data), t0, "hint") else { panic!("ready without ca.crt") };
        assert_eq!((reason, message.as_str()), ("SecretIncomplete", "Secret s has no ca.crt: hint"));
    }
}
