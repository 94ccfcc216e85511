//! Configuration: keydb.conf-style files (`directive value...` lines, `include`), the same
//! directives as command-line flags (`--port 7000`), and `CONFIG GET/SET` for the ones that
//! can change live. Names follow KeyDB where KeyDB has one.
//!
//! Every directive is declared once in `DIRECTIVES` with its default and whether it can
//! change at run time; values are validated when read, and an error names the file and line
//! (or the flag) that was wrong. Values the engine cannot honour are errors, not ignored.
//!
//! `Config` is the text store: what `CONFIG GET` answers and the admin API echoes, and the
//! `replicaof` list. The engine reads the typed `settings::Settings` instead, parsed from it
//! once per load or `CONFIG SET`; adding a directive is three steps, listed in `settings`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::glob::glob_match;

pub mod settings;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("failed to read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
}

/// How a directive's value is checked and normalised.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Bool,
    /// An integer within bounds.
    Int(i64, i64),
    /// An integer within bounds, or empty (unset).
    OptionalInt(i64, i64),
    /// A size with optional unit (`100mb`, `1gb`).
    Bytes,
    Str,
    Enum(&'static [&'static str]),
    /// A value that must equal one of these exactly (a feature the engine does not have).
    Fixed(&'static [&'static str]),
    /// `save <seconds> <changes> ...` or `""` (`persist::schedule`).
    SaveSchedule,
    /// Keyspace-notification classes (`KEA`, `""`), kept in Redis's canonical order.
    KeyspaceEvents,
}

struct Directive {
    name: &'static str,
    default: &'static str,
    kind: Kind,
    /// Can `CONFIG SET` change it while running?
    live: bool,
}

pub const EVICTION_POLICIES: &[&str] =
    &["noeviction", "allkeys-lru", "allkeys-lfu", "volatile-lru", "volatile-lfu", "volatile-ttl", "allkeys-random", "volatile-random"];

const DIRECTIVES: &[Directive] = &[
    Directive { name: "port", default: "6379", kind: Kind::Int(0, 65535), live: false },
    Directive { name: "bind", default: "* -::*", kind: Kind::Str, live: false },
    Directive { name: "protected-mode", default: "yes", kind: Kind::Bool, live: true },
    Directive { name: "requirepass", default: "", kind: Kind::Str, live: true },
    Directive { name: "masterauth", default: "", kind: Kind::Str, live: true },
    Directive { name: "databases", default: "16", kind: Kind::Int(1, 1024), live: false },
    Directive { name: "maxmemory", default: "0", kind: Kind::Bytes, live: true },
    Directive { name: "maxmemory-policy", default: "noeviction", kind: Kind::Enum(EVICTION_POLICIES), live: true },
    Directive { name: "maxmemory-samples", default: "5", kind: Kind::Int(1, 64), live: true },
    Directive { name: "maxclients", default: "10000", kind: Kind::Int(1, 1_000_000), live: true },
    Directive { name: "timeout", default: "0", kind: Kind::Int(0, i32::MAX as i64), live: true },
    Directive { name: "tcp-keepalive", default: "300", kind: Kind::Int(0, i32::MAX as i64), live: true },
    Directive { name: "server-threads", default: "0", kind: Kind::Int(0, 256), live: false },
    Directive { name: "active-replica", default: "no", kind: Kind::Bool, live: false },
    Directive { name: "multi-master", default: "no", kind: Kind::Bool, live: false },
    Directive { name: "repl-timeout", default: "60", kind: Kind::Int(1, i32::MAX as i64), live: true },
    Directive { name: "repl-backlog-size", default: "64mb", kind: Kind::Bytes, live: true },
    Directive { name: "dir", default: ".", kind: Kind::Str, live: false },
    Directive { name: "logfile", default: "", kind: Kind::Str, live: false },
    Directive { name: "loglevel", default: "notice", kind: Kind::Enum(&["debug", "verbose", "notice", "warning", "nothing"]), live: true },
    Directive { name: "save", default: "", kind: Kind::SaveSchedule, live: true },
    Directive { name: "dbfilename", default: "dump.rdb", kind: Kind::Str, live: true },
    // What a snapshot that fails its checks at start does: the node starts empty and
    // full-syncs (the file is moved aside), or the server refuses to start.
    Directive { name: "snapshot-load-error", default: "start-empty", kind: Kind::Enum(&["start-empty", "refuse-start"]), live: false },
    // What importing a Redis/KeyDB RDB file does with a key or section KeyMesh has no type for
    // (a stream, a module value, a function library, ...): refuse the file (naming the key),
    // or leave it out, report it in the log and import the rest (`persist::rdb`).
    Directive { name: "rdb-import-unsupported", default: "refuse", kind: Kind::Enum(&["refuse", "skip"]), live: false },
    Directive { name: "appendonly", default: "no", kind: Kind::Fixed(&["no"]), live: true },
    Directive { name: "proto-max-bulk-len", default: "512mb", kind: Kind::Bytes, live: true },
    Directive { name: "client-query-buffer-limit", default: "1gb", kind: Kind::Bytes, live: true },
    Directive { name: "node-name", default: "", kind: Kind::Str, live: false },
    // 0: derived from the client port (`Ports`).
    Directive { name: "mesh-port", default: "0", kind: Kind::Int(0, 65535), live: false },
    // Empty: derived from the client port; 0: no metrics endpoint (`Ports`).
    Directive { name: "metrics-port", default: "", kind: Kind::OptionalInt(0, 65535), live: false },
    Directive { name: "max-clock-skew-ms", default: "500", kind: Kind::Int(0, i32::MAX as i64), live: true },
    Directive { name: "tombstone-gc-seconds", default: "86400", kind: Kind::Int(1, i32::MAX as i64), live: true },
    // Redis's encoding thresholds. KeyMesh keeps one representation per type, so these only
    // decide nothing; they are accepted (and validated) so that configs, tools and test
    // suites written for Redis and KeyDB load unchanged. See README, "Compatibility".
    Directive { name: "hash-max-listpack-entries", default: "128", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "hash-max-listpack-value", default: "64", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "hash-max-ziplist-entries", default: "128", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "hash-max-ziplist-value", default: "64", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "set-max-intset-entries", default: "512", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "zset-max-listpack-entries", default: "128", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "zset-max-listpack-value", default: "64", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "zset-max-ziplist-entries", default: "128", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "zset-max-ziplist-value", default: "64", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "list-max-listpack-size", default: "-2", kind: Kind::Int(-5, i64::MAX), live: true },
    Directive { name: "list-max-ziplist-size", default: "-2", kind: Kind::Int(-5, i64::MAX), live: true },
    // A sparse HyperLogLog longer than this becomes dense (`crate::hll`; a real threshold).
    Directive { name: "hll-sparse-max-bytes", default: "3000", kind: Kind::Bytes, live: true },
    Directive { name: "list-compress-depth", default: "0", kind: Kind::Int(0, i64::MAX), live: true },
    // The listen backlog (Redis's `tcp-backlog`); capped by the kernel's net.core.somaxconn.
    Directive { name: "tcp-backlog", default: "511", kind: Kind::Int(1, 65535), live: false },
    // Where kernel settings are read from (`crate::kernel`); test hooks, to show the engine a
    // node's files without touching this machine's.
    Directive { name: "kernel-sys-dir", default: "/sys", kind: Kind::Str, live: false },
    Directive { name: "kernel-proc-sys-dir", default: "/proc/sys", kind: Kind::Str, live: false },
    // TLS (`crate::tls`), with Redis's names. tls-port 0: no TLS client port. The files are
    // re-read when they change (every tls-reload-seconds) and at once on CONFIG SET.
    Directive { name: "tls-port", default: "0", kind: Kind::Int(0, 65535), live: false },
    Directive { name: "tls-cert-file", default: "", kind: Kind::Str, live: true },
    Directive { name: "tls-key-file", default: "", kind: Kind::Str, live: true },
    Directive { name: "tls-key-file-pass", default: "", kind: Kind::Str, live: true },
    Directive { name: "tls-ca-cert-file", default: "", kind: Kind::Str, live: true },
    Directive { name: "tls-ca-cert-dir", default: "", kind: Kind::Str, live: true },
    Directive { name: "tls-auth-clients", default: "yes", kind: Kind::Enum(&["yes", "no", "optional"]), live: true },
    Directive { name: "tls-replication", default: "no", kind: Kind::Bool, live: true },
    Directive { name: "tls-protocols", default: "TLSv1.2 TLSv1.3", kind: Kind::Str, live: true },
    Directive { name: "tls-ciphersuites", default: "", kind: Kind::Str, live: true },
    Directive { name: "tls-session-caching", default: "yes", kind: Kind::Bool, live: true },
    Directive { name: "tls-reload-seconds", default: "5", kind: Kind::Int(1, 86_400), live: true },
    // Scripting (`crate::script`): Redis's time limit (`lua-time-limit` is its old name, kept
    // in step by `set`) and KeyMesh's per-thread Lua memory cap.
    // µs; negative: off, 0: every command (Redis's meaning and defaults).
    Directive { name: "slowlog-log-slower-than", default: "10000", kind: Kind::Int(i64::MIN, i64::MAX), live: true },
    Directive { name: "slowlog-max-len", default: "128", kind: Kind::Int(0, i64::MAX), live: true },
    // ms; 0: the latency monitor is off (Redis's default).
    Directive { name: "latency-monitor-threshold", default: "0", kind: Kind::Int(0, i64::MAX), live: true },
    // Keyspace notifications (`crate::notify`): Redis's classes, "" (off) by default.
    Directive { name: "notify-keyspace-events", default: "", kind: Kind::KeyspaceEvents, live: true },
    // Client-side caching (`crate::tracking`): keys past this are evicted from the tracking
    // table, invalidating them (Redis's default; 0: no limit).
    Directive { name: "tracking-table-max-keys", default: "1000000", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "busy-reply-threshold", default: "5000", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "lua-time-limit", default: "5000", kind: Kind::Int(0, i64::MAX), live: true },
    Directive { name: "lua-memory-limit", default: "256mb", kind: Kind::Bytes, live: true },
    // Test hook: shifts this node's wall clock, to prove convergence under clock skew.
    Directive { name: "clock-offset-ms", default: "0", kind: Kind::Int(-86_400_000, 86_400_000), live: false },
];

/// Directives that may appear more than once; their values accumulate.
const REPEATABLE: &[&str] = &["replicaof"];

/// The mesh port is the client port + 10000 unless `mesh-port` is set, as Redis Cluster's bus.
pub const MESH_PORT_OFFSET: u16 = 10000;
/// The metrics port is the client port + 2742 unless `metrics-port` is set: 9121 (the
/// usual Redis exporter port) for 6379, and a distinct port for every other client port, so
/// several servers run on one host without configuring it.
pub const METRICS_PORT_OFFSET: u16 = 2742;

/// Where a node listens. `None`/`FromClient`: derived from an ephemeral client port once it
/// is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// The plain-text client port; with `port 0` and a `tls-port`, none (`plain_disabled`).
    pub client: u16,
    /// `tls-port` (`None`: no TLS client port).
    pub tls: Option<u16>,
    pub mesh: Option<u16>,
    pub metrics: MetricsPort,
}

impl Ports {
    /// `port 0` with a `tls-port`: clients connect over TLS only.
    pub fn plain_disabled(&self) -> bool {
        self.client == 0 && self.tls.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsPort {
    At(u16),
    FromClient,
    /// `metrics-port 0`: no HTTP endpoint.
    Off,
}

/// A validated configuration: every directive has a value.
#[derive(Debug, Clone)]
pub struct Config {
    values: BTreeMap<&'static str, String>,
    pub replicaof: Vec<(String, u16)>,
}

impl Default for Config {
    fn default() -> Self {
        let mut config = Config { values: BTreeMap::new(), replicaof: Vec::new() };
        for d in DIRECTIVES {
            // Defaults go through the same normalisation as user values ("1gb" → bytes).
            if config.set(d.name, d.default).is_err() {
                config.values.insert(d.name, d.default.to_string());
            }
        }
        config
    }
}

fn invalid(origin: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { origin: origin.to_string(), message: message.into() }
}

/// Sizes (`100`, `1k`, `1kb`, `5mb`, `2gb`: k = 1000, kb = 1024, as Redis reads them) are
/// parsed by the one parser the operator validates with too.
pub use keymesh_proto::size::parse_bytes;

impl Config {
    /// Parses command-line arguments: an optional config file first, then `--directive
    /// value...` flags, which override the file.
    pub fn from_args(args: &[String]) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let mut rest = args;
        if let Some(first) = rest.first() {
            if !first.starts_with("--") {
                config.load_file(Path::new(first), 0)?;
                rest = &rest[1..];
            }
        }
        let mut i = 0;
        while i < rest.len() {
            let flag = &rest[i];
            let Some(name) = flag.strip_prefix("--") else {
                return Err(invalid(&format!("argument '{flag}'"), "expected a --directive"));
            };
            let mut values = Vec::new();
            i += 1;
            while i < rest.len() && !rest[i].starts_with("--") {
                values.push(rest[i].clone());
                i += 1;
            }
            config.apply(name, &values, &format!("flag --{name}"))?;
        }
        // Port derivations are checked before anything is bound.
        config.ports()?;
        Ok(config)
    }

    /// The ports to listen on (module `Ports`), or an error naming the directive whose
    /// derived port would be out of range.
    pub fn ports(&self) -> Result<Ports, ConfigError> {
        let client = self.int("port") as u16;
        let tls = Some(self.int("tls-port") as u16).filter(|&p| p != 0);
        // As in Redis, `port 0` with a tls-port turns the plain port off; the other ports then
        // derive from the TLS port (and `REPLICAOF host port` names the peer's TLS port).
        // Without a tls-port, `port 0` is an ephemeral port (tests).
        let (base, base_name) = match (client, tls) {
            (0, Some(tls)) => (tls, "tls-port"),
            _ => (client, "port"),
        };
        let derive = |name: &str, offset: u16| -> Result<Option<u16>, ConfigError> {
            match base {
                // An ephemeral client port: derived once it is bound.
                0 => Ok(None),
                _ => base.checked_add(offset).map(Some).ok_or_else(|| {
                    let derived = u32::from(base) + u32::from(offset);
                    invalid(name, format!("{name} defaults to {base_name} + {offset}, and {base} + {offset} = {derived} is above 65535; set {name} explicitly"))
                }),
            }
        };
        let mesh = match self.int("mesh-port") as u16 {
            0 => derive("mesh-port", MESH_PORT_OFFSET)?,
            port => Some(port),
        };
        let metrics = match self.get("metrics-port") {
            "" => derive("metrics-port", METRICS_PORT_OFFSET)?.map_or(MetricsPort::FromClient, MetricsPort::At),
            "0" => MetricsPort::Off,
            _ => MetricsPort::At(self.int("metrics-port") as u16),
        };
        Ok(Ports { client, tls, mesh, metrics })
    }

    /// A configuration from the text of a config file named `name` (errors name it and the
    /// line); `include` lines are read relative to the current directory.
    pub fn from_text(text: &str, name: &str) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        config.load_text(text, Path::new(name), 0)?;
        config.ports()?;
        Ok(config)
    }

    fn load_file(&mut self, path: &Path, depth: usize) -> Result<(), ConfigError> {
        if depth > 8 {
            return Err(invalid(&path.display().to_string(), "include nesting deeper than 8"));
        }
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        self.load_text(&text, path, depth)
    }

    /// Applies the lines of a config file at `path` (which names them in errors).
    fn load_text(&mut self, text: &str, path: &Path, depth: usize) -> Result<(), ConfigError> {
        for (n, line) in text.lines().enumerate() {
            let origin = format!("{}:{}", path.display(), n + 1);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words = crate::parse::split_args(line.as_bytes())
                .ok_or_else(|| invalid(&origin, "unbalanced quotes"))?
                .into_iter()
                .map(|w| String::from_utf8_lossy(&w).into_owned())
                .collect::<Vec<_>>();
            let Some((name, values)) = words.split_first() else {
                continue;
            };
            if name.eq_ignore_ascii_case("include") {
                let [file] = values else {
                    return Err(invalid(&origin, "include takes one file"));
                };
                let included = path.parent().unwrap_or(Path::new(".")).join(file);
                self.load_file(&included, depth + 1)?;
            } else {
                self.apply(name, values, &origin)?;
            }
        }
        Ok(())
    }

    /// Applies one directive from a file or a flag.
    fn apply(&mut self, name: &str, values: &[String], origin: &str) -> Result<(), ConfigError> {
        let name = name.to_ascii_lowercase();
        if REPEATABLE.contains(&name.as_str()) {
            return self.apply_replicaof(values, origin);
        }
        let mut value = values.join(" ");
        // As in Redis, `save` lines in files and flags add save points; `save ""` clears them.
        if name == "save" && !self.get("save").is_empty() && !crate::persist::schedule::parse(&value).is_ok_and(|p| p.is_empty()) {
            value = format!("{} {value}", self.get("save"));
        }
        self.set(&name, &value).map_err(|m| invalid(origin, m))
    }

    fn apply_replicaof(&mut self, values: &[String], origin: &str) -> Result<(), ConfigError> {
        let [host, port] = values else {
            return Err(invalid(origin, "replicaof takes a host and a port"));
        };
        let port: u16 = port.parse().map_err(|_| invalid(origin, format!("invalid port '{port}'")))?;
        self.replicaof.push((host.clone(), port));
        Ok(())
    }

    /// Validates and stores a value. The error message is Redis's wording where Redis has
    /// one.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        if let Some(alias) = alias_of(name) {
            self.set_one(alias, value)?;
        }
        self.set_one(name, value)
    }

    fn set_one(&mut self, name: &str, value: &str) -> Result<(), String> {
        let directive = DIRECTIVES.iter().find(|d| d.name == name).ok_or_else(|| format!("unknown directive '{name}'"))?;
        let normalised = match directive.kind {
            Kind::Bool => match value.to_ascii_lowercase().as_str() {
                "yes" | "true" => "yes".to_string(),
                "no" | "false" => "no".to_string(),
                _ => return Err(format!("argument must be 'yes' or 'no' for '{name}'")),
            },
            Kind::OptionalInt(_, _) if value.is_empty() => String::new(),
            Kind::Int(min, max) | Kind::OptionalInt(min, max) => {
                let n: i64 = value.parse().map_err(|_| format!("argument couldn't be parsed into an integer for '{name}'"))?;
                if n < min || n > max {
                    return Err(format!("argument must be between {min} and {max} inclusive for '{name}'"));
                }
                n.to_string()
            }
            Kind::Bytes => parse_bytes(value).ok_or_else(|| format!("argument must be a memory value for '{name}'"))?.to_string(),
            Kind::Str => value.to_string(),
            Kind::Enum(options) => {
                let v = value.to_ascii_lowercase();
                if !options.contains(&v.as_str()) {
                    return Err(format!("argument(s) must be one of the following: {} for '{name}'", options.join(", ")));
                }
                v
            }
            Kind::Fixed(options) => {
                if !options.contains(&value) {
                    return Err(format!(
                        "'{name} {value}' is not supported: KeyMesh persists by snapshots (save, BGSAVE) and replication, not an append-only file (only '{}' is accepted)",
                        options.join("', '")
                    ));
                }
                value.to_string()
            }
            Kind::SaveSchedule => {
                let points = crate::persist::schedule::parse(value).map_err(|m| format!("{m} for '{name}'"))?;
                points.iter().map(|p| format!("{} {}", p.seconds, p.changes)).collect::<Vec<_>>().join(" ")
            }
            Kind::KeyspaceEvents => crate::notify::format_classes(crate::notify::parse_classes(value)?),
        };
        self.values.insert(directive.name, normalised);
        Ok(())
    }

    /// `CONFIG SET`: like `set`, but only for directives that can change live.
    pub fn set_live(&mut self, name: &str, value: &str) -> Result<(), String> {
        let name = name.to_ascii_lowercase();
        match DIRECTIVES.iter().find(|d| d.name == name) {
            None => Err(format!("Unknown option or number of arguments for CONFIG SET - '{name}'")),
            Some(d) if !d.live => Err(format!("can't set immutable config '{name}'")),
            Some(_) => self.set(&name, value),
        }
    }

    /// `CONFIG GET`: every directive matching the glob pattern, with its value.
    pub fn get_matching(&self, pattern: &[u8]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> =
            self.values.iter().filter(|(k, _)| glob_match(pattern, k.as_bytes(), true)).map(|(k, v)| (k.to_string(), v.clone())).collect();
        if glob_match(pattern, b"replicaof", true) {
            let v = self.replicaof.iter().map(|(h, p)| format!("{h} {p}")).collect::<Vec<_>>().join(" ");
            out.push(("replicaof".into(), v));
        }
        out
    }

    pub fn get(&self, name: &str) -> &str {
        self.values.get(name).map(String::as_str).unwrap_or("")
    }

    pub fn int(&self, name: &str) -> i64 {
        self.get(name).parse().unwrap_or(0)
    }

    pub fn flag(&self, name: &str) -> bool {
        self.get(name) == "yes"
    }
}

/// Directives that are two names for one setting, as in Redis.
fn alias_of(name: &str) -> Option<&'static str> {
    match name {
        "lua-time-limit" => Some("busy-reply-threshold"),
        "busy-reply-threshold" => Some("lua-time-limit"),
        _ => None,
    }
}

pub const HELP: &str = "\
Usage: keymesh-server [/path/to/keymesh.conf] [--directive value ...]
       keymesh-server --help | --version

Directives (file lines `name value`, or flags `--name value`):
  port, bind, protected-mode, requirepass, masterauth, databases, maxmemory,
  maxmemory-policy, maxmemory-samples, maxclients, timeout, tcp-keepalive, server-threads,
  active-replica, multi-master, replicaof, repl-timeout, repl-backlog-size, dir, logfile,
  loglevel, save, dbfilename, appendonly no, proto-max-bulk-len, client-query-buffer-limit,
  node-name, mesh-port, metrics-port, max-clock-skew-ms, tombstone-gc-seconds,
  snapshot-load-error, rdb-import-unsupported

Ports: mesh-port defaults to port + 10000, metrics-port to port + 2742 (9121 for 6379);
metrics-port 0 turns the HTTP endpoint off.

Examples:
  keymesh-server --port 7000
  keymesh-server /etc/keymesh.conf --loglevel verbose
";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn defaults_are_normalised() {
        let c = Config::default();
        assert_eq!(c.int("client-query-buffer-limit"), 1 << 30);
        assert_eq!(c.int("proto-max-bulk-len"), 512 << 20);
    }

    #[test]
    fn flags_set_directives_and_units() {
        let c = Config::from_args(&args("--port 7000 --maxmemory 1gb --replicaof a 6379 --replicaof b 6380")).unwrap();
        assert_eq!(c.int("port"), 7000);
        assert_eq!(c.get("maxmemory"), "1073741824");
        assert_eq!(c.replicaof, vec![("a".into(), 6379), ("b".into(), 6380)]);
    }

    #[test]
    fn errors_name_the_flag_or_line() {
        let e = Config::from_args(&args("--port 99999")).unwrap_err().to_string();
        assert!(e.contains("flag --port") && e.contains("between 0 and 65535"), "{e}");
        let e = Config::from_args(&args("--nosuch 1")).unwrap_err().to_string();
        assert!(e.contains("unknown directive 'nosuch'"), "{e}");
        let e = Config::from_args(&args("--appendonly yes")).unwrap_err().to_string();
        assert!(e.contains("not supported"), "{e}");
        let e = Config::from_args(&args("--save 60")).unwrap_err().to_string();
        assert!(e.contains("Invalid save parameters"), "{e}");

        let dir = std::env::temp_dir().join(format!("keymesh-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("k.conf");
        std::fs::write(&file, "# comment\nport 7001\nmaxmemory-policy sometimes\n").unwrap();
        let e = Config::from_args(&[file.display().to_string()]).unwrap_err().to_string();
        assert!(e.contains("k.conf:3") && e.contains("maxmemory-policy"), "{e}");
        // The same text, parsed without a file (the config_text fuzz target's entry point).
        let e = Config::from_text("# comment\nport 7001\nmaxmemory-policy sometimes\n", "k.conf").unwrap_err().to_string();
        assert!(e.contains("k.conf:3") && e.contains("maxmemory-policy"), "{e}");
        let e = Config::from_text("maxmemory 1gb\nport 65000\n", "k.conf").unwrap_err().to_string();
        assert!(e.contains("mesh-port"), "derived ports are checked too: {e}");
        assert_eq!(Config::from_text("maxmemory 1gb\n", "k.conf").unwrap().get("maxmemory"), "1073741824");
    }

    #[test]
    fn ports_derive_from_the_client_port_and_out_of_range_ones_are_errors() {
        let ports = |s: &str| Config::from_args(&args(s)).map(|c| c.ports().unwrap());
        let p = ports("").unwrap();
        assert_eq!((p.client, p.mesh, p.metrics), (6379, Some(16379), MetricsPort::At(9121)));
        let p = ports("--port 7001").unwrap();
        assert_eq!((p.mesh, p.metrics), (Some(17001), MetricsPort::At(9743)), "a second server on the host gets its own ports");
        let p = ports("--port 7001 --mesh-port 20000 --metrics-port 0").unwrap();
        assert_eq!((p.mesh, p.metrics), (Some(20000), MetricsPort::Off));
        let p = ports("--port 0").unwrap();
        assert_eq!((p.mesh, p.metrics), (None, MetricsPort::FromClient), "derived once the ephemeral port is bound");
        let e = ports("--port 60000").unwrap_err().to_string();
        assert!(e.contains("mesh-port") && e.contains("70000") && e.contains("set mesh-port explicitly"), "{e}");
        let e = ports("--port 63000 --mesh-port 1000").unwrap_err().to_string();
        assert!(e.contains("metrics-port") && e.contains("65742"), "{e}");
        assert!(ports("--port 63000 --mesh-port 1000 --metrics-port 9000").is_ok());
    }

    #[test]
    fn include_and_flags_override_file() {
        let dir = std::env::temp_dir().join(format!("keymesh-inc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("base.conf"), "port 7002\ndatabases 4\n").unwrap();
        std::fs::write(dir.join("main.conf"), "include base.conf\nsave \"\"\n").unwrap();
        let c = Config::from_args(&[dir.join("main.conf").display().to_string(), "--port".into(), "7003".into()]).unwrap();
        assert_eq!(c.int("databases"), 4);
        assert_eq!(c.int("port"), 7003);
    }

    #[test]
    fn save_lines_add_save_points_and_an_empty_one_clears_them() {
        let c = Config::from_args(&args("--save 900 1 --save 300 10")).unwrap();
        assert_eq!(c.get("save"), "900 1 300 10");
        let c = Config::from_args(&["--save".into(), "900".into(), "1".into(), "--save".into(), "".into()]).unwrap();
        assert_eq!(c.get("save"), "");
        let mut c = Config::default();
        c.set_live("save", "60 5").unwrap();
        assert_eq!(c.get("save"), "60 5", "CONFIG SET replaces the schedule");
    }
}
