//! End-to-end tests of TLS on the local cluster (issue 13): a CacheCluster with
//! operator-issued certificates reaches Ready with every pod serving TLS and the mesh on mutual
//! TLS; clients connect with the CA from the Secret; the operator's renewal (a 3-minute
//! certificate renewed 2 minutes before its end) reaches every engine without a restart; with
//! cert-manager's Certificate CRD installed (pinned in e2e/fixtures), the operator creates a
//! right Certificate, reports that it waits for cert-manager, and rolls TLS in once the Secret
//! appears (written here as cert-manager would: no cert-manager controller runs locally).
//!
//! Needs root (network namespaces), the cached control plane and tools, and the release builds;
//! one cluster at a time (`local_cluster::serial`); prints what it measured.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use keymesh_e2e::local_cluster::{serial, LocalCluster, Options};
use keymesh_e2e::require_netns;

const NS: &str = "default";
const SETTLE: Duration = Duration::from_secs(180);

fn cache(name: &str, spec: &str) -> String {
    format!("apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n{spec}")
}

fn condition(cluster: &LocalCluster, name: &str, type_: &str) -> Result<(String, String, String), String> {
    let view = cluster.cache_view(NS, name)?;
    view.condition(type_).ok_or_else(|| format!("no {type_} condition: {}", view.summary()))
}

/// Waits for `TLSReady=True` and returns its message.
fn tls_ready(cluster: &LocalCluster, name: &str) -> String {
    cluster
        .wait_for(&format!("{name}: TLSReady=True"), SETTLE, || match condition(cluster, name, "TLSReady")? {
            (status, _, message) if status == "True" => Ok(message),
            other => Err(format!("{other:?}")),
        })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Key `key` of Secret `name`, decoded.
fn secret_key(cluster: &LocalCluster, name: &str, key: &str) -> String {
    let encoded = cluster.control_plane().jsonpath(&["get", "secret", name, "-n", NS], &format!("{{.data.{}}}", key.replace('.', "\\."))).unwrap();
    let out = Command::new("base64").arg("-d").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().and_then(|mut child| {
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(encoded.as_bytes())?;
        child.wait_with_output()
    });
    String::from_utf8(out.unwrap().stdout).unwrap()
}

/// `redis-cli --tls` from inside pod `from` to `host`'s TLS port, trusting `ca` (a file).
fn tls_cli(cluster: &LocalCluster, from: &str, host: &str, ca: &Path, password: &str, args: &[&str]) -> Result<String, String> {
    let ca = ca.display().to_string();
    let mut all = vec!["--tls", "--cacert", &ca, "-h", host, "-p", "6380", "-a", password, "--no-auth-warning"];
    all.extend_from_slice(args);
    let out = cluster.agent().pod_output(NS, from, Duration::from_secs(10), "redis-cli", &all).map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !stdout.is_empty() && !stdout.starts_with("ERR") {
        Ok(stdout)
    } else {
        Err(format!("redis-cli --tls {} from {from}: {} {stdout} {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn info_field(info: &str, field: &str) -> String {
    info.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap_or_default().trim().to_string()
}

/// Pod name → (uid, engine restart count).
fn identities(cluster: &LocalCluster, name: &str) -> BTreeMap<String, (String, i64)> {
    let pods = cluster.get_json(&["pods", "-n", NS, "-l", &format!("app.kubernetes.io/name=keymesh,app.kubernetes.io/instance={name}")]).unwrap();
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let restarts = p["status"]["containerStatuses"].as_array().and_then(|c| c.first()).and_then(|c| c["restartCount"].as_i64()).unwrap_or(-1);
            (p["metadata"]["name"].as_str().unwrap_or_default().to_string(), (p["metadata"]["uid"].as_str().unwrap_or_default().to_string(), restarts))
        })
        .collect()
}

fn pod_dns(cluster: &str, ordinal: u32) -> String {
    format!("{cluster}-{ordinal}.{cluster}-headless.{NS}.svc.cluster.local")
}

/// Proves operator-issued TLS end to end: Ready with every pod serving the certificate of
/// `status.tls` and the mesh on mutual TLS; a client with only the Secret's `ca.crt` reads on
/// every pod what another pod wrote, over TLS; the certificate renewal reaches every engine
/// (new handshakes show the new serial) with pod UIDs and restart counts unchanged; turning TLS
/// off rolls the pods back to plain text with the data kept and the mesh whole.
#[test]
fn operator_issued_certificates_serve_every_pod_and_renew_without_restarts() {
    require_netns!();
    let _serial = serial();
    let cluster = LocalCluster::start(Options::release_build()).unwrap_or_else(|e| panic!("local cluster did not start: {e}"));
    let started = Instant::now();
    cluster.control_plane().apply(&cache("secure", "  replicas: 3\n  tls: {enabled: true, duration: 3m, renewBefore: 2m}\n")).unwrap();
    cluster.wait_cache_ready(NS, "secure", SETTLE).unwrap_or_else(|e| panic!("{e}"));
    let message = tls_ready(&cluster, "secure");
    let ready_after = started.elapsed();
    assert!(message.contains("the mesh streams over mutual TLS"), "{message}");
    let status = cluster.get_json(&["cachecluster", "secure", "-n", NS]).unwrap()["status"]["tls"].clone();
    let serial = status["serial"].as_str().unwrap().to_string();
    assert_eq!(
        (status["secretName"].as_str(), status["pods"].as_i64(), status["replication"].as_bool()),
        (Some("secure-tls"), Some(3), Some(true)),
        "{status}"
    );

    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, secret_key(&cluster, "secure-tls", "ca.crt")).unwrap();
    let password = cluster.password(NS, "secure").unwrap();
    assert_eq!(tls_cli(&cluster, "secure-0", &pod_dns("secure", 0), &ca, &password, &["SET", "over-tls", "yes"]).unwrap(), "OK");
    for i in 0..3 {
        let info = tls_cli(&cluster, "secure-0", &pod_dns("secure", i), &ca, &password, &["INFO", "tls"]).unwrap();
        assert_eq!(info_field(&info, "tls_certificate_serial"), serial, "secure-{i}:\n{info}");
        assert_eq!(info_field(&info, "tls_replication"), "yes", "secure-{i}:\n{info}");
        assert_eq!(info_field(&info, "tls_mesh_subscribers"), "2", "secure-{i}: both peers stream over TLS:\n{info}");
        cluster
            .wait_for("the write over TLS on every pod", Duration::from_secs(15), || {
                tls_cli(&cluster, "secure-0", &pod_dns("secure", i), &ca, &password, &["GET", "over-tls"])
                    .and_then(|v| if v == "yes" { Ok(()) } else { Err(v) })
            })
            .unwrap();
    }
    // Through the client Service's name too (its certificate names the Service).
    assert_eq!(tls_cli(&cluster, "secure-1", &format!("secure.{NS}.svc"), &ca, &password, &["GET", "over-tls"]).unwrap(), "yes");
    eprintln!("MEASURED tls: 3 pods Ready with TLSReady=True (mesh on mutual TLS) {ready_after:.1?} after apply; certificate {serial}");

    // Renewal: the 3-minute certificate is renewed once less than 2 minutes are left.
    let before = identities(&cluster, "secure");
    let renewed = cluster
        .wait_for("a renewed certificate in status.tls", Duration::from_secs(120), || {
            let now = cluster.get_json(&["cachecluster", "secure", "-n", NS])?["status"]["tls"]["serial"].as_str().unwrap_or_default().to_string();
            if !now.is_empty() && now != serial {
                Ok(now)
            } else {
                Err(format!("still {now}"))
            }
        })
        .unwrap();
    let renewed_at = Instant::now();
    for i in 0..3 {
        cluster
            .wait_for(&format!("secure-{i} to serve the renewed certificate"), Duration::from_secs(30), || {
                let info = tls_cli(&cluster, "secure-2", &pod_dns("secure", i), &ca, &password, &["INFO", "tls"])?;
                if info_field(&info, "tls_certificate_serial") == renewed {
                    Ok(())
                } else {
                    Err(info)
                }
            })
            .unwrap();
    }
    let reached = renewed_at.elapsed();
    assert_eq!(identities(&cluster, "secure"), before, "no pod was replaced or restarted by the renewal");
    assert_eq!(tls_cli(&cluster, "secure-2", &pod_dns("secure", 1), &ca, &password, &["GET", "over-tls"]).unwrap(), "yes");
    let events = cluster.control_plane().kubectl(["get", "events", "-n", NS, "--field-selector", "reason=CertificateRenewed", "-o", "name"]).unwrap();
    assert!(!events.trim().is_empty(), "a CertificateRenewed Event");
    tls_ready(&cluster, "secure");
    eprintln!("MEASURED tls: renewed certificate {renewed} served by all 3 pods {reached:.1?} after status showed it; pod UIDs and restart counts unchanged");

    // Turning TLS off rolls the pods back to plain text; the mesh switches to plain text first.
    let off = Instant::now();
    cluster.patch_cache(NS, "secure", r#"{"spec":{"tls":{"enabled":false}}}"#).unwrap();
    cluster
        .wait_for("every pod replaced without TLS, Ready", SETTLE, || {
            let pods = cluster.get_json(&["pods", "-n", NS, "-l", "app.kubernetes.io/name=keymesh,app.kubernetes.io/instance=secure"])?;
            let mounting = pods["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["spec"]["volumes"].as_array().is_some_and(|v| v.iter().any(|v| v["name"] == "tls")))
                .count();
            let view = cluster.cache_view(NS, "secure")?;
            match view.condition("Ready") {
                Some((status, _, _)) if status == "True" && mounting == 0 && view.phase() == "Running" => Ok(()),
                other => Err(format!("{mounting} pods still mount TLS; Ready {other:?}")),
            }
        })
        .unwrap();
    for i in 0..3 {
        let value = cluster.redis_cli(NS, "secure-0", &pod_dns("secure", i), &password, &["GET", "over-tls"]).unwrap();
        assert_eq!(value, "yes", "secure-{i} kept the data through both rolls");
    }
    assert_eq!(cluster.redis_cli(NS, "secure-2", &pod_dns("secure", 0), &password, &["SET", "after-tls", "1"]).unwrap(), "OK");
    cluster
        .wait_for("a plain-text write reaches every pod", Duration::from_secs(15), || {
            (0..3).try_for_each(|i| match cluster.redis_cli(NS, "secure-1", &pod_dns("secure", i), &password, &["GET", "after-tls"]) {
                Ok(v) if v == "1" => Ok(()),
                other => Err(format!("secure-{i}: {other:?}")),
            })
        })
        .unwrap();
    assert!(cluster.get_json(&["cachecluster", "secure", "-n", NS]).unwrap()["status"]["tls"].is_null(), "status.tls gone with TLS off");
    eprintln!("MEASURED tls: TLS turned off: 3 pods rolled to plain text and Ready {:.1?} after the patch, data kept", off.elapsed());
}

/// Proves the cert-manager path: with the Certificate CRD installed, the operator creates
/// Certificate `<name>-tls` (issuer, every pod's name, server and client auth), reports
/// `TLSReady=False` while the Secret does not exist (pods serve without TLS meanwhile), and once
/// the Secret appears (written here as cert-manager would) the pods roll onto it.
#[test]
fn cert_manager_certificate_is_created_and_its_secret_rolled_in() {
    require_netns!();
    let _serial = serial();
    let cluster = LocalCluster::start(Options::release_build()).unwrap_or_else(|e| panic!("local cluster did not start: {e}"));
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/crds/cert-manager-v1.21.1-certificates.yaml");
    cluster.control_plane().kubectl(["create", "--validate=false", "-f", &crd.display().to_string()]).unwrap();
    cluster
        .wait_for("the Certificate CRD served", Duration::from_secs(30), || {
            cluster.control_plane().kubectl(["get", "certificates.cert-manager.io", "-n", NS]).map(|_| ()).map_err(|e| e.to_string())
        })
        .unwrap();
    let spec = "  replicas: 1\n  tls: {enabled: true, certManager: {issuerRef: {name: ca-issuer, kind: ClusterIssuer}, duration: 2160h, renewBefore: 360h}}\n";
    cluster.control_plane().apply(&cache("managed", spec)).unwrap();
    let waiting = cluster
        .wait_for("TLSReady=False while cert-manager has not issued", SETTLE, || match condition(&cluster, "managed", "TLSReady")? {
            (status, reason, message) if status == "False" && reason == "SecretMissing" => Ok(message),
            other => Err(format!("{other:?}")),
        })
        .unwrap();
    assert!(waiting.contains("waiting for cert-manager to issue Certificate managed-tls"), "{waiting}");
    let certificate = cluster.get_json(&["certificates.cert-manager.io", "managed-tls", "-n", NS]).unwrap();
    let spec = &certificate["spec"];
    assert_eq!(spec["secretName"], "managed-tls", "{certificate:#}");
    assert_eq!((spec["issuerRef"]["name"].as_str(), spec["issuerRef"]["kind"].as_str()), (Some("ca-issuer"), Some("ClusterIssuer")), "{certificate:#}");
    assert_eq!(spec["duration"], "2160h", "{certificate:#}");
    assert!(spec["dnsNames"].as_array().is_some_and(|n| n.iter().any(|d| d == "*.managed-headless.default.svc.cluster.local")), "{certificate:#}");
    assert!(spec["usages"].as_array().is_some_and(|u| u.iter().any(|x| x == "client auth") && u.iter().any(|x| x == "server auth")), "{certificate:#}");
    assert_eq!(certificate["metadata"]["ownerReferences"][0]["kind"], "CacheCluster", "{certificate:#}");
    cluster.wait_cache_ready(NS, "managed", SETTLE).unwrap_or_else(|e| panic!("serving without TLS meanwhile: {e}"));

    // cert-manager's part, done by hand: a CA and a certificate for the names asked.
    let dir = tempfile::tempdir().unwrap();
    let dns: Vec<String> = spec["dnsNames"].as_array().unwrap().iter().map(|d| format!("DNS:{}", d.as_str().unwrap())).collect();
    std::fs::write(
        dir.path().join("ext.cnf"),
        format!("subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n", dns.join(",")),
    )
    .unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir.path()).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=ca-issuer",
        "-days",
        "2",
    ]);
    openssl(&["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=managed"]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "tls.crt",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    ]);
    let file = |name: &str| dir.path().join(name).display().to_string();
    cluster
        .control_plane()
        .kubectl([
            "create",
            "secret",
            "generic",
            "managed-tls",
            "-n",
            NS,
            &format!("--from-file=tls.crt={}", file("tls.crt")),
            &format!("--from-file=tls.key={}", file("tls.key")),
            &format!("--from-file=ca.crt={}", file("ca.crt")),
        ])
        .unwrap();
    let appeared = Instant::now();
    let message = tls_ready(&cluster, "managed");
    assert!(message.contains("from Secret managed-tls"), "{message}");
    let password = cluster.password(NS, "managed").unwrap();
    let info = tls_cli(&cluster, "managed-0", &pod_dns("managed", 0), &dir.path().join("ca.crt"), &password, &["INFO", "tls"]).unwrap();
    assert_eq!(info_field(&info, "tls_port"), "6380", "{info}");
    eprintln!("MEASURED tls: cert-manager Secret rolled in, TLSReady=True {:.1?} after it appeared", appeared.elapsed());
}
