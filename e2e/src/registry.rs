//! A real OCI registry on loopback for the chart's release tests: Debian's `docker-registry`
//! (the CNCF Distribution registry, v2.8), storing blobs in a temporary directory, serving
//! plain HTTP on a free `127.0.0.1` port (so `helm push/pull` need `--plain-http`). Stopped and
//! removed on drop.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::chart::{system_tool, ChartError};

const READY_WITHIN: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Tool(#[from] ChartError),
    #[error("failed to prepare the registry's files: {0}")]
    Files(std::io::Error),
    #[error("failed to start docker-registry: {0}")]
    Spawn(std::io::Error),
    #[error("docker-registry did not answer GET /v2/ within {within:?}:\n{log}")]
    NotReady { within: Duration, log: String },
}

pub struct OciRegistry {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl OciRegistry {
    /// Starts the registry and waits until `GET /v2/` answers 200.
    pub fn start() -> Result<OciRegistry, RegistryError> {
        let binary = system_tool("docker-registry")?;
        let dir = tempfile::Builder::new().prefix("keymesh-registry-").tempdir().map_err(RegistryError::Files)?;
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(RegistryError::Files)?.port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("data").display()
            ),
        )
        .map_err(RegistryError::Files)?;
        let log = std::fs::File::create(dir.path().join("registry.log")).map_err(RegistryError::Files)?;
        let child = Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(RegistryError::Files)?)
            .stderr(log)
            .spawn()
            .map_err(RegistryError::Spawn)?;
        let registry = OciRegistry { child, port, dir };
        let started = Instant::now();
        while registry.get("/v2/").map(|(status, _)| status) != Some(200) {
            if started.elapsed() > READY_WITHIN {
                return Err(RegistryError::NotReady { within: READY_WITHIN, log: registry.log() });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(registry)
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A plain HTTP GET: `(status, body)`, or `None` when nothing answered.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n", self.host()).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        Some((status, body))
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
