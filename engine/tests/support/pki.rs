//! A throwaway certificate authority for the TLS tests (rcgen): a CA, and certificates it
//! issues for `localhost`/`127.0.0.1`, written as files the server's `tls-*` directives name.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SerialNumber};

pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its key, as PEM, and its serial as the server reports it (hex).
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub serial: String,
}

/// Validity relative to now, in days (negative: in the past).
pub struct Validity {
    pub from_days: i64,
    pub to_days: i64,
}

pub const VALID: Validity = Validity { from_days: -1, to_days: 30 };

fn days(n: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc() + time::Duration::days(n)
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { issuer: Issuer::new(params, key), pem }
    }

    /// A certificate for `localhost` and `127.0.0.1`, usable by servers and clients alike.
    pub fn issue(&self, serial: u64, validity: Validity) -> Issued {
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "keymesh-test");
        params.serial_number = Some(SerialNumber::from(serial));
        params.not_before = days(validity.from_days);
        params.not_after = days(validity.to_days);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem(), serial: format!("{serial:02x}") }
    }
}

/// A directory of TLS files: `server.crt`/`server.key` (what the server uses), `ca.crt`.
pub struct Files {
    pub dir: PathBuf,
}

impl Files {
    pub fn new(ca: &Ca, issued: &Issued) -> Files {
        let dir = std::env::temp_dir().join(format!("keymesh-tls-{}-{}", std::process::id(), rand_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = Files { dir };
        files.write("ca.crt", &ca.pem);
        files.install(issued);
        files
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Replaces a file the way a Secret volume or an operator does: write aside, rename over.
    pub fn write(&self, name: &str, text: &str) {
        let aside = self.dir.join(format!(".{name}.new"));
        std::fs::write(&aside, text).unwrap();
        std::fs::rename(&aside, self.dir.join(name)).unwrap();
    }

    /// Puts `issued` in place as the server's certificate and key.
    pub fn install(&self, issued: &Issued) {
        self.write("server.crt", &issued.cert_pem);
        self.write("server.key", &issued.key_pem);
    }

    /// The server flags for these files.
    pub fn server_flags(&self) -> Vec<String> {
        ["--tls-cert-file", &self.path("server.crt"), "--tls-key-file", &self.path("server.key"), "--tls-ca-cert-file", &self.path("ca.crt")]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Writes a client certificate pair and returns (cert path, key path).
    pub fn client(&self, name: &str, issued: &Issued) -> (String, String) {
        self.write(&format!("{name}.crt"), &issued.cert_pem);
        self.write(&format!("{name}.key"), &issued.key_pem);
        (self.path(&format!("{name}.crt")), self.path(&format!("{name}.key")))
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) * 1_000_003 + std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64
}
