//! The certificates and keys of one test control plane, made with the `openssl` CLI, and the
//! kubeconfig files that use them.
//!
//! Everything is written into the control plane's own directory: a CA, the apiserver's serving
//! certificate (valid for loopback, the in-cluster service names and the service IP), an admin
//! client certificate (`O=system:masters`, so RBAC lets it do anything) and the RSA key pair the
//! apiserver signs and checks ServiceAccount tokens with. Certificates use P-256 keys (fast to
//! make); the ServiceAccount key is RSA, as the 1.20 token controller expects.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::ControlPlaneError;

/// The files [`generate`] writes.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub apiserver_cert: PathBuf,
    pub apiserver_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

/// Makes a fresh CA and the certificates and keys above in `dir`. `service_ip` is the first IP
/// of the service CIDR (the `kubernetes` Service's address), added to the serving certificate.
pub fn generate(dir: &Path, service_ip: &str) -> Result<Pki, ControlPlaneError> {
    let file = |name: &str| dir.join(name);
    let pki = Pki {
        ca_cert: file("ca.crt"),
        ca_key: file("ca.key"),
        apiserver_cert: file("apiserver.crt"),
        apiserver_key: file("apiserver.key"),
        admin_cert: file("admin.crt"),
        admin_key: file("admin.key"),
        service_account_key: file("sa.key"),
        service_account_pub: file("sa.pub"),
    };
    openssl(
        dir,
        "req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -keyout ca.key -out ca.crt -days 3650 -subj /CN=keymesh-test-ca \
         -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )?;
    let sans = ["DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"]
        .into_iter()
        .map(String::from)
        .chain(["127.0.0.1", service_ip].map(|ip| format!("IP:{ip}")))
        .collect::<Vec<_>>()
        .join(",");
    signed_cert(dir, "apiserver", "/CN=kube-apiserver", &format!("extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n"))?;
    signed_cert(dir, "admin", "/O=system:masters/CN=admin", "extendedKeyUsage=clientAuth\n")?;
    openssl(dir, "genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key")?;
    openssl(dir, "pkey -in sa.key -pubout -out sa.pub")?;
    Ok(pki)
}

/// `<name>.key` and `<name>.crt` signed by the CA in `dir`, for `subject` (no spaces), with
/// `extensions` (openssl extension-file lines) besides the usual leaf-certificate ones.
fn signed_cert(dir: &Path, name: &str, subject: &str, extensions: &str) -> Result<(), ControlPlaneError> {
    let ext = dir.join(format!("{name}.ext"));
    let text = format!("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n{extensions}");
    std::fs::write(&ext, text).map_err(|source| ControlPlaneError::Files { path: ext.clone(), source })?;
    openssl(dir, &format!("req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -keyout {name}.key -out {name}.csr -subj {subject}"))?;
    openssl(dir, &format!("x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile {name}.ext -out {name}.crt"))
}

/// Runs `openssl` in `dir` with `args` split at whitespace (none of them contains any).
fn openssl(dir: &Path, args: &str) -> Result<(), ControlPlaneError> {
    let command = || format!("openssl {}", args.split_whitespace().collect::<Vec<_>>().join(" "));
    let out = Command::new("openssl")
        .args(args.split_whitespace())
        .current_dir(dir)
        .output()
        .map_err(|e| ControlPlaneError::Command { command: command(), reason: format!("{e} (is the openssl CLI installed?)") })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ControlPlaneError::Command { command: command(), reason: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()) })
    }
}

/// Who a kubeconfig authenticates as.
pub enum Credentials<'a> {
    /// A client certificate and its key.
    Certificate { cert: &'a Path, key: &'a Path },
    /// A bearer token (a ServiceAccount's).
    Token(&'a str),
}

/// Writes a kubeconfig at `path` for `https://127.0.0.1:<port>`, trusting `ca_cert`, with one
/// context named `user` whose default namespace is `namespace`.
pub fn write_kubeconfig(path: &Path, port: u16, ca_cert: &Path, user: &str, namespace: &str, credentials: Credentials<'_>) -> Result<(), ControlPlaneError> {
    // YAML accepts JSON strings, so `json` quotes every value that could need it.
    let user_fields = match credentials {
        Credentials::Certificate { cert, key } => format!("    client-certificate: {}\n    client-key: {}\n", json(cert.display()), json(key.display())),
        Credentials::Token(token) => format!("    token: {}\n", json(token)),
    };
    let (user, namespace, ca) = (json(user), json(namespace), json(ca_cert.display()));
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: keymesh-test
  cluster:
    server: https://127.0.0.1:{port}
    certificate-authority: {ca}
users:
- name: {user}
  user:
{user_fields}contexts:
- name: {user}
  context:
    cluster: keymesh-test
    user: {user}
    namespace: {namespace}
current-context: {user}
"
    );
    std::fs::write(path, text).map_err(|source| ControlPlaneError::Files { path: path.to_owned(), source })
}

/// `value` as a JSON string literal.
fn json(value: impl std::fmt::Display) -> String {
    let mut out = String::from('"');
    for c in value.to_string().chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
