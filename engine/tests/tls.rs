//! TLS, black-box: real `keymesh-server` processes with certificates from a throwaway CA
//! (`support::pki`), real clients (`redis-cli --tls`, redis-py with `ssl=True`, a rustls
//! client that reports the server certificate's serial), a 3-node mesh with mutual TLS, and
//! rotation by replacing files and by `CONFIG SET`.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use support::pki::{Ca, Files, Validity, VALID};
use support::{free_port, free_port_with, Conn, Server};

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A client identity: certificate and key PEM.
struct Identity<'a> {
    cert_pem: &'a str,
    key_pem: &'a str,
}

fn client_config(ca_pem: &str, identity: Option<Identity>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some(id) => {
            let chain = CertificateDer::pem_slice_iter(id.cert_pem.as_bytes()).map(Result::unwrap).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap()).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Connects over TLS and completes the handshake; the error says why it failed.
fn tls_connect(port: u16, config: &Arc<rustls::ClientConfig>) -> Result<Conn<TlsStream>, String> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut session = rustls::ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap()).map_err(|e| e.to_string())?;
    while session.is_handshaking() {
        session.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    Ok(Conn::over(rustls::StreamOwned::new(session, tcp)))
}

/// The serial (hex) of the certificate a new handshake on `port` presents.
fn served_serial(port: u16, config: &Arc<rustls::ClientConfig>) -> String {
    let conn = tls_connect(port, config).unwrap();
    let leaf = &conn.stream().conn.peer_certificates().unwrap()[0];
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).unwrap();
    cert.raw_serial_as_string().replace(':', "")
}

/// A PING over a TLS connection: `Ok` with the reply, `Err` when the server refused or closed.
fn ping(conn: &mut Conn<TlsStream>) -> Result<String, String> {
    conn.send_raw(b"*1\r\n$4\r\nPING\r\n").map_err(|e| e.to_string())?;
    conn.read().map(|r| r.text()).ok_or_else(|| "connection closed".to_string())
}

fn info_field(conn: &mut Conn, section: &str, field: &str) -> String {
    let info = conn.cmd(&["INFO", section]).text();
    info.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap_or_else(|| panic!("{field} not in INFO {section}:\n{info}")).trim().to_string()
}

fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server with a plain port and a TLS port.
fn start_tls(files: &Files, extra: &[&str]) -> (Server, u16) {
    let tls_port = free_port();
    let mut args: Vec<String> = vec!["--tls-port".into(), tls_port.to_string()];
    args.extend(files.server_flags());
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Server::start(&args), tls_port)
}

fn redis_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new("redis-cli").args(args).output().expect("redis-cli runs (apt-get install redis-tools)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !text.contains("ERR") && !text.contains("Could not connect"), text)
}

fn python(script: &str) -> (bool, String) {
    let out = Command::new("python3").args(["-c", script]).output().expect("python3 runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn redis_cli_and_redis_py_work_over_tls_with_client_certificates_required() {
    let ca = Ca::new("test CA");
    let files = Files::new(&ca, &ca.issue(1, VALID));
    let (server, tls_port) = start_tls(&files, &[]);
    let (cert, key) = files.client("client", &ca.issue(2, VALID));
    let port = tls_port.to_string();
    let cacert = files.path("ca.crt");

    // redis-cli (hiredis + OpenSSL) with a client certificate.
    let (ok, out) = redis_cli(&["--tls", "--cacert", &cacert, "--cert", &cert, "--key", &key, "-p", &port, "SET", "greeting", "hello"]);
    assert!(ok && out.contains("OK"), "{out}");
    let (ok, out) = redis_cli(&["--tls", "--cacert", &cacert, "--cert", &cert, "--key", &key, "-p", &port, "GET", "greeting"]);
    assert!(ok && out.contains("hello"), "{out}");
    // Without one: refused (tls-auth-clients yes is the default, as in Redis).
    let (ok, out) = redis_cli(&["--tls", "--cacert", &cacert, "-p", &port, "GET", "greeting"]);
    assert!(!ok, "a client without a certificate was served: {out}");

    // redis-py with ssl=True.
    let script = format!(
        "import redis\nr = redis.Redis(port={port}, ssl=True, ssl_ca_certs='{cacert}', ssl_certfile='{cert}', ssl_keyfile='{key}')\nr.set('py', 'yes')\nprint(r.get('py').decode(), r.get('greeting').decode())"
    );
    let (ok, out) = python(&script);
    assert!(ok && out.contains("yes hello"), "{out}");
    let script = format!("import redis\nr = redis.Redis(port={port}, ssl=True, ssl_ca_certs='{cacert}')\nr.ping()");
    let (ok, out) = python(&script);
    assert!(!ok, "redis-py without a client certificate was served: {out}");

    // What the TLS client wrote, the plain port serves too: one keyspace.
    let mut plain = server.connect();
    assert_eq!(plain.cmd(&["GET", "py"]).text(), "yes");
    assert_eq!(info_field(&mut plain, "tls", "tls_auth_clients"), "yes");
    assert!(info_field(&mut plain, "tls", "tls_handshake_failures_client").parse::<u64>().unwrap() >= 2);
}

#[test]
fn tls_auth_clients_optional_and_no() {
    let ca = Ca::new("test CA");
    let other = Ca::new("another CA");
    let files = Files::new(&ca, &ca.issue(1, VALID));
    let (_optional, optional_port) = start_tls(&files, &["--tls-auth-clients", "optional"]);
    let anonymous = client_config(&ca.pem, None);
    let good = ca.issue(2, VALID);
    let foreign = other.issue(3, VALID);
    assert_eq!(ping(&mut tls_connect(optional_port, &anonymous).unwrap()).unwrap(), "PONG");
    let with_cert = client_config(&ca.pem, Some(Identity { cert_pem: &good.cert_pem, key_pem: &good.key_pem }));
    assert_eq!(ping(&mut tls_connect(optional_port, &with_cert).unwrap()).unwrap(), "PONG");
    // optional means "verified if presented": a certificate from another CA is refused.
    let foreign_config = client_config(&ca.pem, Some(Identity { cert_pem: &foreign.cert_pem, key_pem: &foreign.key_pem }));
    assert!(tls_connect(optional_port, &foreign_config).and_then(|mut c| ping(&mut c)).is_err());

    let (_no, no_port) = start_tls(&files, &["--tls-auth-clients", "no"]);
    assert_eq!(ping(&mut tls_connect(no_port, &anonymous).unwrap()).unwrap(), "PONG");
}

#[test]
fn bad_clients_are_refused_and_others_still_served() {
    let ca = Ca::new("test CA");
    let other = Ca::new("another CA");
    let files = Files::new(&ca, &ca.issue(1, VALID));
    let (server, tls_port) = start_tls(&files, &[]);
    let good = ca.issue(2, VALID);
    let good = client_config(&ca.pem, Some(Identity { cert_pem: &good.cert_pem, key_pem: &good.key_pem }));

    // A handshake that stalls: a TCP connection to the TLS port that sends nothing. It holds
    // one task, never the accept loop, and is closed after the handshake timeout (10 s).
    let stalled = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    stalled.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let stalled_at = Instant::now();

    // A plain-text client on the TLS port: no reply (a TLS alert at most), then closed.
    let mut plain_on_tls = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    plain_on_tls.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(&mut plain_on_tls, b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut plain_on_tls, &mut answer).expect("closed by the server");
    assert!(!String::from_utf8_lossy(&answer).contains("PONG"), "a plain-text client on the TLS port got a reply");

    // A TLS client on the plain port: its handshake fails (Redis's protocol error, then close).
    assert!(tls_connect(server.port, &good).is_err(), "TLS on the plain port must fail");

    // A certificate from another CA, and an expired one from the right CA.
    let foreign = other.issue(3, VALID);
    let foreign = client_config(&ca.pem, Some(Identity { cert_pem: &foreign.cert_pem, key_pem: &foreign.key_pem }));
    assert!(tls_connect(tls_port, &foreign).and_then(|mut c| ping(&mut c)).is_err(), "another CA's client certificate was accepted");
    let expired = ca.issue(4, Validity { from_days: -30, to_days: -1 });
    let expired = client_config(&ca.pem, Some(Identity { cert_pem: &expired.cert_pem, key_pem: &expired.key_pem }));
    assert!(tls_connect(tls_port, &expired).and_then(|mut c| ping(&mut c)).is_err(), "an expired client certificate was accepted");

    // Meanwhile good clients are served on both ports.
    assert_eq!(ping(&mut tls_connect(tls_port, &good).unwrap()).unwrap(), "PONG");
    assert_eq!(server.connect().cmd(&["PING"]).text(), "PONG");

    let mut buf = [0u8; 1];
    let n = std::io::Read::read(&mut &stalled, &mut buf).unwrap_or(0);
    let waited = stalled_at.elapsed();
    assert_eq!(n, 0, "the stalled connection got data");
    assert!(waited >= Duration::from_secs(8) && waited < Duration::from_secs(15), "stalled handshake closed after {waited:?}");

    let mut conn = server.connect();
    let failures: u64 = info_field(&mut conn, "tls", "tls_handshake_failures_client").parse().unwrap();
    assert!(failures >= 4, "handshake failures counted: {failures}");
    let (_, metrics) = server.http_get("/metrics");
    assert!(metrics.lines().any(|l| l.starts_with("keymesh_tls_handshake_failures_total{port=\"client\"}")), "{metrics}");
}

#[test]
fn port_0_turns_the_plain_port_off_and_the_mesh_port_follows_the_tls_port() {
    let ca = Ca::new("test CA");
    let files = Files::new(&ca, &ca.issue(1, VALID));
    let tls_port = free_port_with(&[10000]);
    let mut args: Vec<String> = vec!["--port".into(), "0".into(), "--tls-port".into(), tls_port.to_string(), "--tls-auth-clients".into(), "no".into()];
    args.extend(files.server_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_on(tls_port, free_port(), &args);
    let config = client_config(&ca.pem, None);
    let mut conn = tls_connect(tls_port, &config).unwrap();
    conn.send(&["INFO", "server"]);
    let info = conn.read().unwrap().text();
    assert!(info.contains("tcp_port:0"), "{info}");
    // The default mesh port is tls-port + 10000 (REPLICAOF then names the TLS port).
    assert!(TcpStream::connect(("127.0.0.1", tls_port + 10000)).is_ok(), "mesh port tls-port + 10000 not listening");
    drop(server);
}

#[test]
fn start_up_refuses_broken_material_with_a_clear_message() {
    let ca = Ca::new("test CA");
    let files = Files::new(&ca, &ca.issue(1, VALID));
    let other = ca.issue(2, VALID);
    files.write("other.key", &other.key_pem);
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_keymesh-server")).args(["--port", "0", "--metrics-port", "0"]).args(extra).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) =
        run(&["--tls-port", "0", "--tls-cert-file", &files.path("server.crt"), "--tls-key-file", &files.path("other.key"), "--tls-auth-clients", "no"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("does not match"), "{err}");
    let (code, err) = run(&["--tls-port", "7000"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("tls-cert-file"), "{err}");
    let (code, err) = run(&["--tls-cert-file", &files.path("server.crt"), "--tls-key-file", &files.path("server.key")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("tls-ca-cert-file"), "a missing CA with tls-auth-clients yes must be named: {err}");
    files.write("expired.crt", &ca.issue(3, Validity { from_days: -30, to_days: -1 }).cert_pem);
    let (code, err) = run(&["--tls-cert-file", &files.path("expired.crt"), "--tls-key-file", &files.path("server.key"), "--tls-auth-clients", "no"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not valid now"), "{err}");

    // An encrypted key (openssl pkcs8 -topk8) needs tls-key-file-pass.
    let encrypted = files.path("encrypted.key");
    let status = Command::new("openssl")
        .args(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout", "pass:s3cret", "-in", &files.path("server.key"), "-out", &encrypted])
        .status()
        .unwrap();
    assert!(status.success());
    let (code, err) = run(&["--tls-cert-file", &files.path("server.crt"), "--tls-key-file", &encrypted, "--tls-auth-clients", "no"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("tls-key-file-pass"), "{err}");
    let (_server, tls_port) = start_tls(&files, &["--tls-key-file", &encrypted, "--tls-key-file-pass", "s3cret", "--tls-auth-clients", "no"]);
    assert_eq!(ping(&mut tls_connect(tls_port, &client_config(&ca.pem, None)).unwrap()).unwrap(), "PONG");
}

#[test]
fn rotation_by_file_replacement_and_config_set_without_a_restart() {
    let ca = Ca::new("test CA");
    let files = Files::new(&ca, &ca.issue(0x11, VALID));
    let (server, tls_port) = start_tls(&files, &["--tls-reload-seconds", "1", "--tls-auth-clients", "no"]);
    let config = client_config(&ca.pem, None);
    let pid = server.pid();
    let mut plain = server.connect();
    let run_id = info_field(&mut plain, "server", "run_id");
    assert_eq!(served_serial(tls_port, &config), "11");
    let mut before = tls_connect(tls_port, &config).unwrap();
    assert_eq!(ping(&mut before).unwrap(), "PONG");

    // Replace the files: within the reload interval new handshakes show the new serial.
    let replaced = Instant::now();
    files.install(&ca.issue(0x22, VALID));
    wait_for("the new certificate on new handshakes", Duration::from_secs(5), || served_serial(tls_port, &config) == "22");
    let took = replaced.elapsed();
    assert!(took < Duration::from_secs(3), "rotation took {took:?} with tls-reload-seconds 1");
    // The connection opened before keeps working; the process did not restart.
    assert_eq!(ping(&mut before).unwrap(), "PONG");
    assert_eq!(server.pid(), pid);
    assert_eq!(info_field(&mut plain, "server", "run_id"), run_id);
    assert_eq!(info_field(&mut plain, "tls", "tls_certificate_serial"), "22");

    // A broken new pair (the key of another certificate) is refused; the old one stays.
    let third = ca.issue(0x33, VALID);
    let fourth = ca.issue(0x44, VALID);
    files.write("server.crt", &third.cert_pem);
    files.write("server.key", &fourth.key_pem);
    wait_for("the failed reload reported", Duration::from_secs(5), || info_field(&mut plain, "tls", "tls_last_reload_error").contains("does not match"));
    assert_ne!(info_field(&mut plain, "tls", "tls_reload_failures"), "0");
    assert_eq!(served_serial(tls_port, &config), "22");
    // So is an expired certificate.
    files.install(&ca.issue(0x55, Validity { from_days: -30, to_days: -1 }));
    wait_for("the expired certificate reported", Duration::from_secs(5), || info_field(&mut plain, "tls", "tls_last_reload_error").contains("not valid now"));
    assert_eq!(served_serial(tls_port, &config), "22");

    // CONFIG SET of the file names rotates at once; a broken pair is refused with an error.
    let fifth = ca.issue(0x66, VALID);
    let (cert, key) = files.client("fifth", &fifth);
    let reply = plain.cmd(&["CONFIG", "SET", "tls-cert-file", &cert, "tls-key-file", &key]);
    assert_eq!(reply.text(), "OK");
    assert_eq!(served_serial(tls_port, &config), "66");
    let reply = plain.cmd(&["CONFIG", "SET", "tls-key-file", &files.path("server.key")]);
    assert!(reply.is_error() && reply.text().contains("does not match"), "{reply:?}");
    assert_eq!(plain.cmd(&["CONFIG", "GET", "tls-key-file"]).texts()[1], key);
    assert_eq!(served_serial(tls_port, &config), "66");
    assert_eq!(ping(&mut before).unwrap(), "PONG");
    let (_, metrics) = server.http_get("/metrics");
    let failed = metrics.lines().find_map(|l| l.strip_prefix("keymesh_tls_reloads_total{result=\"failed\"} ")).and_then(|v| v.parse::<u64>().ok());
    assert!(failed >= Some(3), "{metrics}");
    assert!(metrics.contains("keymesh_tls_certificate_expiry_timestamp_seconds"));
}

/// A mesh node with TLS: its client port (mesh port = + 10000), a TLS port, its files.
struct TlsNode {
    port: u16,
    tls_port: u16,
    metrics_port: u16,
}

impl TlsNode {
    fn new() -> TlsNode {
        TlsNode { port: free_port_with(&[10000]), tls_port: free_port(), metrics_port: free_port() }
    }

    fn start(&self, name: &str, peers: &[&TlsNode], tls: Option<(&Files, &[&str])>) -> Server {
        let mut args: Vec<String> = ["--node-name", name, "--active-replica", "yes", "--multi-master", "yes"].iter().map(|s| s.to_string()).collect();
        for p in peers {
            args.extend(["--replicaof".to_string(), "127.0.0.1".to_string(), p.port.to_string()]);
        }
        if let Some((files, extra)) = tls {
            args.extend(["--tls-port".to_string(), self.tls_port.to_string()]);
            args.extend(files.server_flags());
            args.extend(extra.iter().map(|s| s.to_string()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_on(self.port, self.metrics_port, &args)
    }
}

#[test]
fn a_mesh_with_tls_replication_converges_and_refuses_a_node_from_another_ca_visibly() {
    let ca = Ca::new("mesh CA");
    let files: Vec<Files> = (0..3).map(|i| Files::new(&ca, &ca.issue(0x100 + i, VALID))).collect();
    let nodes: Vec<TlsNode> = (0..3).map(|_| TlsNode::new()).collect();
    let mtls: &[&str] = &["--tls-replication", "yes"];
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            let peers: Vec<&TlsNode> = nodes.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, n)| n).collect();
            nodes[i].start(&format!("n{i}"), &peers, Some((&files[i], mtls)))
        })
        .collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    for (i, conn) in conns.iter_mut().enumerate() {
        assert_eq!(conn.cmd(&["SET", &format!("k{i}"), &format!("v{i}")]).text(), "OK");
    }
    for conn in conns.iter_mut() {
        wait_for("every write on every node", Duration::from_secs(15), || (0..3).all(|i| conn.cmd(&["GET", &format!("k{i}")]).text() == format!("v{i}")));
        // A full sync applies its keys before its SyncDone marks the link connected: the data
        // can be here a moment before the link says "up".
        wait_for("every link up", Duration::from_secs(15), || info_field(conn, "replication", "master_global_link_status") == "up");
        assert_eq!(info_field(conn, "tls", "tls_replication"), "yes");
        wait_for("both peers streaming over TLS", Duration::from_secs(15), || info_field(conn, "tls", "tls_mesh_subscribers") == "2");
    }

    // A node whose certificate comes from another CA: its links fail (it cannot verify n0, n0
    // refuses its certificate), and n0 shows the refusal in INFO and the metrics.
    let other = Ca::new("intruder CA");
    let intruder_files = Files::new(&other, &other.issue(0x999, VALID));
    let intruder_node = TlsNode::new();
    let intruder = intruder_node.start("intruder", &[&nodes[0]], Some((&intruder_files, mtls)));
    let refused = |conn: &mut Conn| info_field(conn, "replication", "mesh_last_refusal");
    wait_for("n0 to note the refused handshake", Duration::from_secs(15), || refused(&mut conns[0]).contains("TLS handshake failed"));
    let (_, metrics) = servers[0].http_get("/metrics");
    assert!(metrics.lines().any(|l| l.starts_with("keymesh_mesh_refused_subscribers_total{reason=\"tls\"}")), "{metrics}");
    let mut intruder_conn = intruder.connect();
    assert_eq!(intruder_conn.cmd(&["GET", "k0"]).text(), "Nil");
    let links = intruder_conn.cmd(&["INFO", "replication"]).text();
    assert!(links.contains("master_global_link_status:down"), "{links}");

    // A node without TLS at all: n0 refuses its plain-text stream and says why.
    let plain_node = TlsNode::new();
    let plain = plain_node.start("plaintext", &[&nodes[0]], None);
    wait_for("n0 to refuse the plain-text subscriber", Duration::from_secs(15), || refused(&mut conns[0]).contains("requires TLS"));
    assert_eq!(plain.connect().cmd(&["GET", "k0"]).text(), "Nil");

    // The mesh itself kept working.
    assert_eq!(conns[2].cmd(&["SET", "after", "yes"]).text(), "OK");
    wait_for("a later write", Duration::from_secs(15), || conns[0].cmd(&["GET", "after"]).text() == "yes");
}

#[test]
fn tls_replication_turns_on_live_without_splitting_the_mesh() {
    // Both nodes have certificates but stream in plain text; turning tls-replication on
    // (CONFIG SET, as the operator's admin SetConfig does) re-makes the links over TLS.
    let ca = Ca::new("mesh CA");
    let files: Vec<Files> = (0..2).map(|i| Files::new(&ca, &ca.issue(0x200 + i, VALID))).collect();
    let nodes: Vec<TlsNode> = (0..2).map(|_| TlsNode::new()).collect();
    let servers: Vec<Server> = (0..2).map(|i| nodes[i].start(&format!("n{i}"), &[&nodes[1 - i]], Some((&files[i], &[][..])))).collect();
    let mut conns: Vec<Conn> = servers.iter().map(Server::connect).collect();
    conns[0].cmd(&["SET", "before", "1"]);
    wait_for("plain-text replication", Duration::from_secs(15), || conns[1].cmd(&["GET", "before"]).text() == "1");
    for conn in conns.iter_mut() {
        // One direction may have connected before the other.
        wait_for("the peer streaming in plain text", Duration::from_secs(15), || info_field(conn, "tls", "plaintext_mesh_subscribers") == "1");
    }
    for conn in conns.iter_mut() {
        assert_eq!(conn.cmd(&["CONFIG", "SET", "tls-replication", "yes"]).text(), "OK");
    }
    conns[1].cmd(&["SET", "after", "2"]);
    wait_for("replication after the switch", Duration::from_secs(15), || conns[0].cmd(&["GET", "after"]).text() == "2");
    for conn in conns.iter_mut() {
        wait_for("links up", Duration::from_secs(15), || info_field(conn, "replication", "master_global_link_status") == "up");
        // (A node that switched first may have refused the other's plain stream for a moment.)
        wait_for("the peer streaming over TLS", Duration::from_secs(15), || {
            info_field(conn, "tls", "tls_mesh_subscribers") == "1" && info_field(conn, "tls", "plaintext_mesh_subscribers") == "0"
        });
    }
}
