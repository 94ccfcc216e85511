//! Certificates the operator issues itself (rcgen) and reads back (x509-parser): a CA per
//! cluster and the pods' certificate it signs, valid for every name the pods answer to and for
//! both server and client authentication (the engines authenticate each other with it, and the
//! operator's admin client presents it too).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SerialNumber};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;

use crate::names::ClusterNames;

/// The CA's own validity. It is not rotated automatically (see docs/tls.md): only the pods'
/// certificate is renewed.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// A certificate and its private key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// What a certificate says, as far as the operator cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateInfo {
    /// Hex, as the engines' `INFO tls` shows it.
    pub serial: String,
    pub not_before: Timestamp,
    pub not_after: Timestamp,
    pub dns_names: Vec<String>,
    pub subject: String,
    pub issuer: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("failed to issue a certificate: {0}")]
    Issue(#[from] rcgen::Error),
    #[error("not a PEM certificate: {0}")]
    Parse(String),
}

/// The CA's distinguished name: the same for a cluster every time, so the CA's key alone is
/// enough to sign again (the CA certificate need not be parsed back).
fn ca_params(names: &ClusterNames, now: Timestamp) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, format!("keymesh {}/{} CA", names.namespace, names.name));
    params.distinguished_name.push(DnType::OrganizationName, "KeyMesh operator");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    set_validity(&mut params, now, CA_VALIDITY);
    params
}

/// A new CA for the cluster.
pub fn new_ca(names: &ClusterNames, now: Timestamp) -> Result<Pem, CertificateError> {
    let key = KeyPair::generate()?;
    let mut params = ca_params(names, now);
    params.serial_number = Some(random_serial());
    let cert = params.self_signed(&key)?;
    Ok(Pem { cert: cert.pem(), key: key.serialize_pem() })
}

/// The pods' certificate, signed by `ca`, valid from a minute ago (clock skew) for `validity`.
pub fn issue(names: &ClusterNames, ca: &Pem, now: Timestamp, validity: Duration) -> Result<Pem, CertificateError> {
    let ca_key = KeyPair::from_pem(&ca.key)?;
    let issuer = Issuer::new(ca_params(names, now), ca_key);
    let mut params = CertificateParams::new(names.tls_dns_names())?;
    params.distinguished_name.push(DnType::CommonName, names.pod_dns_wildcard());
    params.serial_number = Some(random_serial());
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    set_validity(&mut params, now, validity);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pem { cert: cert.pem(), key: key.serialize_pem() })
}

fn set_validity(params: &mut CertificateParams, now: Timestamp, validity: Duration) {
    let start = time::OffsetDateTime::from_unix_timestamp(now.as_second() - 60).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    params.not_before = start;
    params.not_after = start + validity + Duration::from_secs(60);
}

fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f; // positive, as RFC 5280 asks
    SerialNumber::from_slice(&bytes)
}

/// Reads the first certificate of a PEM text.
pub fn inspect(pem: &str) -> Result<CertificateInfo, CertificateError> {
    let (_, pem) = parse_x509_pem(pem.as_bytes()).map_err(|e| CertificateError::Parse(e.to_string()))?;
    let cert = pem.parse_x509().map_err(|e| CertificateError::Parse(e.to_string()))?;
    let time = |t: x509_parser::time::ASN1Time| Timestamp::from_second(t.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH);
    let dns_names = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| san.value.general_names.iter().filter_map(|n| if let GeneralName::DNSName(d) = n { Some(d.to_string()) } else { None }).collect())
        .unwrap_or_default();
    Ok(CertificateInfo {
        serial: cert.raw_serial().iter().map(|b| format!("{b:02x}")).collect(),
        not_before: time(cert.validity().not_before),
        not_after: time(cert.validity().not_after),
        dns_names,
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ClusterNames {
        ClusterNames::new("demo", "cache", "cluster.local")
    }

    #[test]
    fn the_pods_certificate_names_every_pod_and_service_and_is_signed_by_the_ca() {
        let now = Timestamp::now();
        let ca = new_ca(&names(), now).expect("CA");
        let leaf = issue(&names(), &ca, now, Duration::from_secs(3600)).expect("certificate");
        let (ca_info, info) = (inspect(&ca.cert).expect("CA info"), inspect(&leaf.cert).expect("info"));
        assert_eq!(info.issuer, ca_info.subject, "signed by the CA");
        assert!(info.dns_names.contains(&"*.demo-headless.cache.svc.cluster.local".to_string()), "{info:?}");
        assert!(info.dns_names.contains(&"demo.cache.svc".to_string()), "{info:?}");
        let lifetime = info.not_after.as_second() - now.as_second();
        assert!((3600..=3660).contains(&lifetime), "{lifetime}");
        let again = issue(&names(), &ca, now, Duration::from_secs(3600)).expect("certificate");
        assert_ne!(inspect(&again.cert).expect("info").serial, info.serial, "serials are random");
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(inspect("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
        assert!(inspect("hello").is_err());
    }
}
