//! TLS material from files: the certificate chain, its private key (optionally an encrypted
//! PKCS#8 key, `tls-key-file-pass`) and the CA certificates peers and clients are checked
//! against (`tls-ca-cert-file`, `tls-ca-cert-dir`). Loading validates the set together — the
//! key matches the certificate, the certificate is valid now, every file parses — so a broken
//! new set is refused whole and the one in use stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pkcs8::der::Decode;
use rustls::crypto::ring::sign::any_supported_type;
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Where the material comes from (the `tls-*` file directives).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub key_pass: String,
    pub ca_file: Option<PathBuf>,
    pub ca_dir: Option<PathBuf>,
}

/// A loaded, validated set.
#[derive(Debug, Clone)]
pub struct Material {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: Arc<PrivateKeyDer<'static>>,
    pub certified: Arc<CertifiedKey>,
    pub roots: Arc<RootCertStore>,
    /// The leaf certificate's serial number, hex, and validity (Unix seconds).
    pub serial: String,
    pub not_after: i64,
    /// The PEM texts, for tonic's client configuration.
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MaterialError {
    #[error("failed to read {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("the private key in {key} does not match the certificate in {cert}")]
    Mismatch { cert: String, key: String },
    #[error("the certificate in {path} is not valid now (valid from {not_before} to {not_after}, Unix seconds)")]
    NotValidNow { path: String, not_before: i64, not_after: i64 },
}

fn read(path: &Path) -> Result<Vec<u8>, MaterialError> {
    std::fs::read(path).map_err(|e| MaterialError::Read { path: path.display().to_string(), message: e.to_string() })
}

fn invalid(path: &Path, message: impl ToString) -> MaterialError {
    MaterialError::Invalid { path: path.display().to_string(), message: message.to_string() }
}

/// Loads and validates the material at `now` (Unix seconds).
pub fn load(sources: &Sources, now: i64) -> Result<Material, MaterialError> {
    let cert_bytes = read(&sources.cert_file)?;
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&cert_bytes).collect::<Result<_, _>>().map_err(|e| invalid(&sources.cert_file, format!("not PEM certificates: {e}")))?;
    let leaf = chain.first().ok_or_else(|| invalid(&sources.cert_file, "holds no certificate"))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).map_err(|e| invalid(&sources.cert_file, format!("not an X.509 certificate: {e}")))?;
    let (not_before, not_after) = (parsed.validity().not_before.timestamp(), parsed.validity().not_after.timestamp());
    if now < not_before || now > not_after {
        return Err(MaterialError::NotValidNow { path: sources.cert_file.display().to_string(), not_before, not_after });
    }
    let serial = parsed.raw_serial_as_string().replace(':', "");

    let key_bytes = read(&sources.key_file)?;
    let key = private_key(&key_bytes, &sources.key_pass, &sources.key_file)?;
    let signing = any_supported_type(&key).map_err(|e| invalid(&sources.key_file, format!("unsupported private key: {e}")))?;
    let certified = CertifiedKey::new(chain.clone(), signing);
    certified
        .keys_match()
        .map_err(|_| MaterialError::Mismatch { cert: sources.cert_file.display().to_string(), key: sources.key_file.display().to_string() })?;

    let mut roots = RootCertStore::empty();
    let mut ca_pem = String::new();
    let mut ca_files: Vec<PathBuf> = sources.ca_file.iter().cloned().collect();
    if let Some(dir) = &sources.ca_dir {
        let entries = std::fs::read_dir(dir).map_err(|e| MaterialError::Read { path: dir.display().to_string(), message: e.to_string() })?;
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
        files.sort();
        ca_files.extend(files);
    }
    for path in &ca_files {
        let bytes = read(path)?;
        for cert in CertificateDer::pem_slice_iter(&bytes) {
            let cert = cert.map_err(|e| invalid(path, format!("not PEM certificates: {e}")))?;
            roots.add(cert).map_err(|e| invalid(path, format!("not a usable CA certificate: {e}")))?;
        }
        ca_pem.push_str(&String::from_utf8_lossy(&bytes));
    }
    let key_pem = pem_of(&key);
    Ok(Material {
        chain,
        key: Arc::new(key),
        certified: Arc::new(certified),
        roots: Arc::new(roots),
        serial,
        not_after,
        cert_pem: String::from_utf8_lossy(&cert_bytes).into_owned(),
        key_pem,
        ca_pem,
    })
}

/// The private key: PKCS#8 (plain or encrypted with `pass`), PKCS#1 or SEC1.
fn private_key(bytes: &[u8], pass: &str, path: &Path) -> Result<PrivateKeyDer<'static>, MaterialError> {
    let text = String::from_utf8_lossy(bytes);
    if text.contains("BEGIN ENCRYPTED PRIVATE KEY") {
        if pass.is_empty() {
            return Err(invalid(path, "the private key is encrypted: set tls-key-file-pass"));
        }
        let (_, der) = pkcs8::der::pem::decode_vec(bytes).map_err(|e| invalid(path, format!("not PEM: {e}")))?;
        let encrypted = pkcs8::EncryptedPrivateKeyInfo::from_der(&der).map_err(|e| invalid(path, format!("not an encrypted PKCS#8 key: {e}")))?;
        let document = encrypted.decrypt(pass).map_err(|_| invalid(path, "cannot decrypt the private key with tls-key-file-pass"))?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(document.as_bytes().to_vec())));
    }
    PrivateKeyDer::from_pem_slice(bytes).map_err(|e| invalid(path, format!("no usable private key: {e}")))
}

fn pem_of(key: &PrivateKeyDer<'_>) -> String {
    let (label, der) = match key {
        PrivateKeyDer::Pkcs1(k) => ("RSA PRIVATE KEY", k.secret_pkcs1_der()),
        PrivateKeyDer::Sec1(k) => ("EC PRIVATE KEY", k.secret_sec1_der()),
        PrivateKeyDer::Pkcs8(k) => ("PRIVATE KEY", k.secret_pkcs8_der()),
        _ => ("PRIVATE KEY", &[][..]),
    };
    pkcs8::der::pem::encode_string(label, pkcs8::der::pem::LineEnding::LF, der).unwrap_or_default()
}
