//! TLS on the client port (`tls-port`) and on the mesh port (the mesh stream and the admin API,
//! `tls-replication`), with Redis's directive names, and certificate rotation without a restart.
//!
//! - `material`: the certificate chain, key (optionally encrypted) and CA certificates from
//!   files, validated together.
//! - [`Tls`] holds the current server configurations (one for the client port, one for the mesh
//!   port) built from the material and the settings. Every `tls-reload-seconds` it re-reads the
//!   files; when they changed it validates the new set and swaps it in, or keeps the old one and
//!   logs and counts the failure. `CONFIG SET` of a `tls-*` directive rebuilds at once, and
//!   refuses a set that does not validate. Connections keep the configuration they were
//!   accepted with; new handshakes use the new one.
//! - `listener`: the client port's accept loop (handshakes bounded in time, failures counted).
//! - `mesh_io`: the mesh port accepts both TLS and plain connections (told apart by their first
//!   byte), so turning TLS on or off on a running cluster never splits the mesh; with
//!   `tls-replication yes` the mesh stream itself requires a client certificate from the CA
//!   (mutual TLS between nodes), and links connect with TLS.
//!
//! The metrics/health port stays plain HTTP: it carries no data, and the kubelet's probes and
//! Prometheus scrape it without client certificates.

pub mod listener;
pub mod material;
pub mod mesh_io;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use rustls::crypto::ring::{cipher_suite, default_provider};
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::{ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};
use tracing::{info, warn};

use crate::config::Config;
pub use material::{Material, MaterialError, Sources};

/// `tls-auth-clients`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthClients {
    Yes,
    No,
    Optional,
}

/// The `tls-*` settings.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub port: u16,
    pub sources: Sources,
    pub auth_clients: AuthClients,
    pub replication: bool,
    pub protocols: Vec<&'static SupportedProtocolVersion>,
    /// Empty: rustls's defaults.
    pub ciphersuites: Vec<SupportedCipherSuite>,
    pub session_caching: bool,
    pub reload_interval: Duration,
}

/// The TLS 1.3 suites by their OpenSSL names (what Redis's `tls-ciphersuites` takes).
const SUITES: [(&str, SupportedCipherSuite); 3] = [
    ("TLS_AES_128_GCM_SHA256", cipher_suite::TLS13_AES_128_GCM_SHA256),
    ("TLS_AES_256_GCM_SHA384", cipher_suite::TLS13_AES_256_GCM_SHA384),
    ("TLS_CHACHA20_POLY1305_SHA256", cipher_suite::TLS13_CHACHA20_POLY1305_SHA256),
];

impl TlsSettings {
    /// The settings in `config`; `None` without a certificate (TLS off).
    pub fn from_config(config: &Config) -> Result<Option<TlsSettings>, String> {
        let cert = config.get("tls-cert-file");
        let port = config.int("tls-port") as u16;
        let replication = config.flag("tls-replication");
        if cert.is_empty() {
            if port != 0 || replication {
                return Err("tls-port and tls-replication need tls-cert-file and tls-key-file".to_string());
            }
            return Ok(None);
        }
        if config.get("tls-key-file").is_empty() {
            return Err("tls-cert-file needs tls-key-file".to_string());
        }
        let optional_path = |name: &str| Some(config.get(name)).filter(|v| !v.is_empty()).map(Into::into);
        let sources = Sources {
            cert_file: cert.into(),
            key_file: config.get("tls-key-file").into(),
            key_pass: config.get("tls-key-file-pass").to_string(),
            ca_file: optional_path("tls-ca-cert-file"),
            ca_dir: optional_path("tls-ca-cert-dir"),
        };
        let auth_clients = match config.get("tls-auth-clients") {
            "no" => AuthClients::No,
            "optional" => AuthClients::Optional,
            _ => AuthClients::Yes,
        };
        if auth_clients != AuthClients::No && sources.ca_file.is_none() && sources.ca_dir.is_none() {
            return Err(
                "tls-auth-clients needs tls-ca-cert-file or tls-ca-cert-dir (set tls-auth-clients no to accept clients without certificates)".to_string()
            );
        }
        let mut protocols = Vec::new();
        for word in config.get("tls-protocols").split_whitespace() {
            match word.to_ascii_lowercase().as_str() {
                "tlsv1.2" => protocols.push(&rustls::version::TLS12),
                "tlsv1.3" => protocols.push(&rustls::version::TLS13),
                other => return Err(format!("tls-protocols: '{other}' is not supported (TLSv1.2, TLSv1.3)")),
            }
        }
        let mut ciphersuites = Vec::new();
        for name in config.get("tls-ciphersuites").split(':').filter(|n| !n.is_empty()) {
            let suite = SUITES
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| format!("tls-ciphersuites: '{name}' is not supported ({})", SUITES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")))?;
            ciphersuites.push(suite.1);
        }
        Ok(Some(TlsSettings {
            port,
            sources,
            auth_clients,
            replication,
            protocols,
            ciphersuites,
            session_caching: config.flag("tls-session-caching"),
            reload_interval: Duration::from_secs(config.int("tls-reload-seconds").max(1) as u64),
        }))
    }

    fn provider(&self) -> Arc<CryptoProvider> {
        let mut provider = default_provider();
        if !self.ciphersuites.is_empty() {
            // TLS 1.2 suites stay available for TLS 1.2 clients; the list picks the 1.3 ones.
            provider.cipher_suites.retain(|s| s.version() == &rustls::version::TLS12 || self.ciphersuites.iter().any(|c| c.suite() == s.suite()));
        }
        Arc::new(provider)
    }

    /// A server configuration for `material`, verifying client certificates as `auth` says.
    /// `alpn`: the protocols offered (the mesh port speaks HTTP/2, `h2`; RESP has none).
    fn server_config(&self, material: &Material, auth: AuthClients, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, String> {
        let builder =
            ServerConfig::builder_with_provider(self.provider()).with_protocol_versions(&self.protocols).map_err(|e| format!("tls-protocols: {e}"))?;
        let builder = match auth {
            AuthClients::No => builder.with_no_client_auth(),
            AuthClients::Yes | AuthClients::Optional => {
                let verifier = WebPkiClientVerifier::builder_with_provider(material.roots.clone(), self.provider());
                let verifier = if auth == AuthClients::Optional { verifier.allow_unauthenticated() } else { verifier };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| format!("client certificate verifier: {e}"))?)
            }
        };
        let mut config = builder.with_single_cert(material.chain.clone(), material.key.clone_key()).map_err(|e| format!("the certificate and key: {e}"))?;
        if !self.session_caching {
            config.session_storage = Arc::new(NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// What is in use now.
pub struct Loaded {
    pub material: Material,
    /// The client port's configuration.
    pub client: Arc<ServerConfig>,
    /// The mesh port's: client certificates verified when presented (the mesh stream requires
    /// one with `tls-replication yes`; the admin API authenticates with the password).
    pub mesh: Arc<ServerConfig>,
    pub settings: TlsSettings,
}

/// TLS metrics.
pub struct TlsMetrics {
    pub reloads: IntCounterVec,
    pub handshake_failures: IntCounterVec,
    pub expiry: IntGauge,
}

impl TlsMetrics {
    fn new(registry: &Registry) -> TlsMetrics {
        let reloads = IntCounterVec::new(Opts::new("keymesh_tls_reloads_total", "TLS material reloads, by result (ok, failed)."), &["result"]).expect("static");
        let handshake_failures =
            IntCounterVec::new(Opts::new("keymesh_tls_handshake_failures_total", "TLS handshakes that failed, by port (client, mesh)."), &["port"])
                .expect("static");
        let expiry = IntGauge::new("keymesh_tls_certificate_expiry_timestamp_seconds", "When the certificate in use expires (Unix seconds).").expect("static");
        for metric in [Box::new(reloads.clone()) as Box<dyn prometheus::core::Collector>, Box::new(handshake_failures.clone()), Box::new(expiry.clone())] {
            let _ = registry.register(metric);
        }
        for result in ["ok", "failed"] {
            reloads.with_label_values(&[result]);
        }
        for port in ["client", "mesh"] {
            handshake_failures.with_label_values(&[port]);
        }
        TlsMetrics { reloads, handshake_failures, expiry }
    }
}

/// The node's TLS state; see the module docs.
pub struct Tls {
    current: RwLock<Arc<Loaded>>,
    /// The files' contents when they were last loaded (or last failed to load).
    seen: Mutex<Vec<u8>>,
    last_error: Mutex<String>,
    pub metrics: TlsMetrics,
}

pub fn now_unix() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// The current bytes of every source file, to tell a change.
fn snapshot(sources: &Sources) -> Vec<u8> {
    let mut out = Vec::new();
    let mut files = vec![sources.cert_file.clone(), sources.key_file.clone()];
    files.extend(sources.ca_file.clone());
    if let Some(dir) = &sources.ca_dir {
        let mut entries: Vec<_> = std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        files.extend(entries);
    }
    for file in files {
        out.extend(file.to_string_lossy().as_bytes());
        out.extend(std::fs::read(&file).unwrap_or_default());
    }
    out
}

fn build(settings: &TlsSettings) -> Result<Loaded, String> {
    let material = material::load(&settings.sources, now_unix()).map_err(|e| e.to_string())?;
    let client = settings.server_config(&material, settings.auth_clients, &[])?;
    let mesh_auth = if material.roots.is_empty() { AuthClients::No } else { AuthClients::Optional };
    let mesh = settings.server_config(&material, mesh_auth, &[b"h2"])?;
    Ok(Loaded { material, client, mesh, settings: settings.clone() })
}

impl Tls {
    /// Loads the material; an error names what is wrong (a start-up error).
    pub fn start(settings: TlsSettings, registry: &Registry) -> Result<Tls, String> {
        let seen = snapshot(&settings.sources);
        let loaded = build(&settings)?;
        let metrics = TlsMetrics::new(registry);
        metrics.expiry.set(loaded.material.not_after);
        info!(serial = %loaded.material.serial, port = settings.port, replication = settings.replication, "TLS configured");
        Ok(Tls { current: RwLock::new(Arc::new(loaded)), seen: Mutex::new(seen), last_error: Mutex::new(String::new()), metrics })
    }

    pub fn current(&self) -> Arc<Loaded> {
        self.current.read().clone()
    }

    pub fn last_error(&self) -> String {
        self.last_error.lock().clone()
    }

    /// Builds from `settings` and swaps it in; on failure keeps what is in use and says why.
    pub fn apply(&self, settings: TlsSettings) -> Result<(), String> {
        *self.seen.lock() = snapshot(&settings.sources);
        match build(&settings) {
            Ok(loaded) => {
                self.metrics.expiry.set(loaded.material.not_after);
                self.metrics.reloads.with_label_values(&["ok"]).inc();
                let old = std::mem::replace(&mut *self.current.write(), Arc::new(loaded));
                let serial = self.current().material.serial.clone();
                if old.material.serial != serial {
                    info!(from = %old.material.serial, to = %serial, "TLS certificate rotated");
                }
                self.last_error.lock().clear();
                Ok(())
            }
            Err(e) => {
                self.metrics.reloads.with_label_values(&["failed"]).inc();
                warn!(error = %e, serial = %self.current().material.serial, "TLS reload failed; keeping the certificate in use");
                *self.last_error.lock() = e.clone();
                Err(e)
            }
        }
    }

    /// Whether the files changed since they were last loaded (or failed to load).
    pub fn files_changed(&self) -> bool {
        snapshot(&self.current().settings.sources) != *self.seen.lock()
    }

    /// Re-reads the files if they changed since the last look.
    pub fn reload_if_changed(&self) {
        if self.files_changed() {
            let _ = self.apply(self.current().settings.clone());
        }
    }

    /// The tonic client configuration for a mesh link to `host` (links are re-made at every
    /// reconnect, so they always present the current certificate).
    pub fn client_config(&self, host: &str) -> tonic::transport::ClientTlsConfig {
        let current = self.current();
        let m = &current.material;
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(m.ca_pem.clone()))
            .identity(tonic::transport::Identity::from_pem(m.cert_pem.clone(), m.key_pem.clone()))
            .domain_name(host.trim_end_matches('.').to_string())
    }

    /// The `# TLS` section of INFO; `subscribers` is how many mesh subscribers stream over
    /// TLS and in plain text.
    pub fn info(&self, subscribers: (usize, usize)) -> String {
        let current = self.current();
        let failures = |port: &str| self.metrics.handshake_failures.with_label_values(&[port]).get();
        format!(
            "# TLS\r\ntls_enabled:1\r\ntls_port:{}\r\ntls_replication:{}\r\ntls_auth_clients:{}\r\ntls_certificate_serial:{}\r\ntls_certificate_not_after:{}\r\ntls_reloads:{}\r\ntls_reload_failures:{}\r\ntls_last_reload_error:{}\r\ntls_handshake_failures_client:{}\r\ntls_handshake_failures_mesh:{}\r\ntls_mesh_subscribers:{}\r\nplaintext_mesh_subscribers:{}\r\n\r\n",
            current.settings.port,
            if current.settings.replication { "yes" } else { "no" },
            match current.settings.auth_clients {
                AuthClients::Yes => "yes",
                AuthClients::No => "no",
                AuthClients::Optional => "optional",
            },
            current.material.serial,
            current.material.not_after,
            self.metrics.reloads.with_label_values(&["ok"]).get(),
            self.metrics.reloads.with_label_values(&["failed"]).get(),
            self.last_error().replace(['\r', '\n'], " "),
            failures("client"),
            failures("mesh"),
            subscribers.0,
            subscribers.1,
        )
    }
}
