//! The server: shared state every connection sees, the listeners, the background tasks,
//! and graceful shutdown.
//!
//! Start-up binds the client port and the metrics port before reporting ready, so a bind
//! failure is a start-up error. SIGTERM/SIGINT stop accepting, let connections finish the
//! command they are running, and exit.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::blocking::Blocking;
use crate::client::ClientRegistry;
use crate::config::settings::{Settings, SettingsCell, SettingsGuard};
use crate::config::{Config, MetricsPort, MESH_PORT_OFFSET, METRICS_PORT_OFFSET};
use crate::db::Store;
use crate::hlc::{node_id_from_name, Hlc, OffsetClock, WallClock};
use crate::mesh::{Identity, Mesh};
use crate::metrics::Metrics;
use crate::pubsub::PubSub;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("failed to bind {what} on {addr}: {source}")]
    Bind { what: &'static str, addr: String, source: std::io::Error },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Load(#[from] crate::persist::PersistError),
}

/// Server-wide counters for `INFO stats`.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// Counted per thread (`crate::tally`): every command adds to it.
    pub commands_processed: crate::tally::Counter,
    /// Counted per thread (`crate::tally`): every read and write of a connection adds to them.
    pub net_input_bytes: crate::tally::Counter,
    pub net_output_bytes: crate::tally::Counter,
}

pub struct Server {
    pub store: Arc<Store>,
    /// This node's replication backlog (effects of local writes).
    pub repl_log: Arc<crate::repl::log::ReplLog>,
    /// The replication mesh: peer links, the mesh and admin gRPC services, readiness.
    pub mesh: Arc<Mesh>,
    /// The directives as text, for `CONFIG GET` and the admin API, and `replicaof`. The
    /// engine reads `settings` instead.
    pub config: RwLock<Config>,
    /// The directives as typed values (`crate::config::settings`), replaced at `CONFIG SET`.
    settings: SettingsCell,
    pub clients: ClientRegistry,
    pub pubsub: PubSub,
    /// Error replies by code (`INFO errorstats`).
    pub errors: crate::errorstats::ErrorStats,
    /// Client-side caching (`crate::tracking`).
    pub tracking: crate::tracking::Tracking,
    /// Lua scripts and function libraries (`crate::script`).
    pub scripts: crate::script::Scripts,
    pub blocking: Blocking,
    /// `SLOWLOG` (`crate::slowlog`).
    pub slowlog: crate::slowlog::SlowLog,
    /// `MONITOR` clients (`crate::monitor`).
    pub monitors: crate::monitor::Monitors,
    /// `LATENCY` events (`crate::latency`).
    pub latency: crate::latency::LatencyMonitor,
    /// `CLIENT PAUSE` (`crate::pause`).
    pub pause: crate::pause::Pause,
    pub metrics: Metrics,
    pub stats: ServerStats,
    pub run_id: String,
    pub node_name: String,
    /// The version this build reports (`INFO`, the admin `Status`, `--version`).
    pub version: String,
    /// Handing clients off before the node leaves the mesh (admin `Handoff`).
    pub handoff: crate::handoff::Handoff,
    /// The kernel settings that hurt the engine (`crate::kernel`).
    pub kernel: crate::kernel::KernelState,
    /// TLS material and settings, when a certificate is configured (`crate::tls`). Set at
    /// start-up: turning TLS on or off takes a restart, rotating it does not.
    pub tls: Option<crate::tls::Tls>,
    /// Snapshots on disk (`crate::persist`).
    pub persist: crate::persist::Persistence,
    pub started: Instant,
    pub port: AtomicUsize,
    shutdown: watch::Sender<bool>,
    /// This server, for work that outlives the call that starts it (`BGSAVE`).
    this: std::sync::Weak<Server>,
}

impl Server {
    /// A server for `config`; `version` is what it reports itself as (the binary's build
    /// version, see `main.rs`).
    pub fn new(config: Config, version: &str) -> Result<Arc<Server>, ServerError> {
        let settings = Settings::from_config(&config);
        if !config.replicaof.is_empty() && !settings.mesh_mode {
            return Err(ServerError::Config(
                "replicaof needs 'active-replica yes' and 'multi-master yes': KeyMesh has no read-only replicas, every node is a master of a mesh".into(),
            ));
        }
        let node_name = match settings.node_name.as_str() {
            "" => std::env::var("HOSTNAME").unwrap_or_else(|_| format!("keymesh-{}", config.get("port"))),
            name => name.to_string(),
        };
        let clock: Arc<dyn WallClock> = Arc::new(OffsetClock(settings.clock_offset_ms));
        let hlc = Hlc::new(clock, settings.max_clock_skew_ms);
        let store = Arc::new(Store::new(settings.databases, hlc, node_id_from_name(&node_name)));
        let (shutdown, _) = watch::channel(false);
        let run_id = crate::mesh::new_run_id();
        if settings.active_replica || !config.replicaof.is_empty() {
            store.enable_replication();
        }
        let repl_log = Arc::new(crate::repl::log::ReplLog::new(settings.repl_backlog_size));
        let node_id = store.node_id;
        let metrics = Metrics::new();
        let tls = match crate::tls::TlsSettings::from_config(&config).map_err(ServerError::Config)? {
            Some(settings) => Some(crate::tls::Tls::start(settings, metrics.registry()).map_err(|e| ServerError::Config(format!("TLS: {e}")))?),
            None => None,
        };
        let persist = crate::persist::Persistence::new(metrics.registry());
        let server = Arc::new_cyclic(|weak: &std::sync::Weak<Server>| Server {
            mesh: Mesh::new(
                weak.clone(),
                store.clone(),
                repl_log.clone(),
                Identity { node_name: node_name.clone(), node_id, run_id: run_id.clone() },
                metrics.registry(),
            ),
            this: weak.clone(),
            store,
            repl_log,
            config: RwLock::new(config),
            settings: SettingsCell::new(settings),
            clients: ClientRegistry::default(),
            pubsub: PubSub::default(),
            errors: crate::errorstats::ErrorStats::default(),
            tracking: crate::tracking::Tracking::default(),
            scripts: crate::script::Scripts::default(),
            blocking: Blocking::default(),
            slowlog: crate::slowlog::SlowLog::default(),
            monitors: crate::monitor::Monitors::default(),
            latency: crate::latency::LatencyMonitor::default(),
            pause: crate::pause::Pause::default(),
            metrics,
            stats: ServerStats::default(),
            run_id,
            node_name,
            version: version.to_string(),
            handoff: crate::handoff::Handoff::default(),
            kernel: crate::kernel::KernelState::default(),
            tls,
            persist,
            started: Instant::now(),
            port: AtomicUsize::new(0),
            shutdown,
        });
        let weak = Arc::downgrade(&server);
        server.store.notify.set_sink(Box::new(move |channel, message| {
            if let Some(server) = weak.upgrade() {
                server.pubsub.publish(&channel, &message);
            }
        }));
        server.apply_settings();
        Ok(server)
    }

    /// This server as an `Arc`, for background work; `None` once it is being dropped.
    pub fn handle(&self) -> Option<Arc<Server>> {
        self.this.upgrade()
    }

    /// Whether `given` is this node's password (`crate::auth`: every password check asks this).
    pub fn password_ok(&self, given: &[u8]) -> bool {
        crate::auth::password_ok(&self.settings().requirepass, given)
    }

    /// The current settings: a snapshot, taken without a lock; drop it soon (it pins one
    /// version of the settings).
    pub fn settings(&self) -> SettingsGuard {
        self.settings.load()
    }

    /// The current settings for a reader that reads them over and over: `SettingsCache::load`
    /// brings them up to date without `settings`'s atomic read-modify-writes.
    pub fn settings_cache(&self) -> crate::config::settings::SettingsCache<'_> {
        self.settings.cache()
    }

    /// Pushes the current settings into the subsystems that keep their own copy.
    fn apply_settings(&self) {
        let s = self.settings();
        self.store.lfu_access.store(s.maxmemory_policy.lfu(), Ordering::Relaxed);
        self.store.maxmemory.store(s.maxmemory, Ordering::Relaxed);
        self.store.hlc.set_max_skew_ms(s.max_clock_skew_ms);
        self.repl_log.set_capacity(s.repl_backlog_size);
        self.scripts.busy_threshold_ms.store(s.busy_reply_threshold_ms, Ordering::Relaxed);
        self.scripts.memory_limit.store(s.lua_memory_limit, Ordering::Relaxed);
        self.store.hll_sparse_max_bytes.store(s.hll_sparse_max_bytes, Ordering::Relaxed);
        self.store.tombstone_gc_ms.store(s.tombstone_gc.as_millis() as u64, Ordering::Relaxed);
        self.slowlog.configure(s.slowlog_log_slower_than, s.slowlog_max_len);
        self.latency.set_threshold_ms(s.latency_monitor_threshold_ms);
        self.store.notify.set_classes(s.notify_keyspace_events);
        self.tracking.set_max_keys(s.tracking_table_max_keys);
    }

    /// Changes directives that can change live, all or nothing (`CONFIG SET`, admin
    /// `SetConfig`). The error names the directive that was refused.
    pub fn set_live_config<'a>(&self, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<(), String> {
        let mut next = self.config.read().clone();
        let mut tls_changed = false;
        for (name, value) in pairs {
            next.set_live(name, value).map_err(|m| format!("CONFIG SET failed (possibly related to argument '{name}') - {m}"))?;
            tls_changed |= name.to_ascii_lowercase().starts_with("tls-");
        }
        if tls_changed {
            self.apply_tls(&next).map_err(|m| format!("CONFIG SET failed (TLS) - {m}"))?;
        }
        // Under the text store's lock, so concurrent changes publish in the order they store.
        let mut config = self.config.write();
        self.settings.store(Settings::from_config(&next));
        *config = next;
        drop(config);
        self.apply_settings();
        Ok(())
    }

    /// Rebuilds TLS from `config`'s `tls-*` settings, or refuses them (the material in use
    /// stays). A change of `tls-replication` re-makes the mesh links, and turning it on ends
    /// plain-text subscriber streams.
    fn apply_tls(&self, config: &Config) -> Result<(), String> {
        let settings = crate::tls::TlsSettings::from_config(config)?;
        let (tls, settings) = match (&self.tls, settings) {
            (Some(tls), Some(settings)) => (tls, settings),
            (None, None) => return Ok(()),
            (None, Some(_)) => return Err("TLS was not configured at start-up: set tls-cert-file and tls-key-file in the configuration and restart".into()),
            (Some(_), None) => return Err("TLS cannot be turned off while running: remove the tls-* directives from the configuration and restart".into()),
        };
        let was_replication = tls.current().settings.replication;
        tls.apply(settings)?;
        let replication = tls.current().settings.replication;
        if replication != was_replication {
            info!(replication, "tls-replication changed: re-making the mesh links");
            self.mesh.reconnect_all(replication);
        }
        Ok(())
    }

    /// Where the kernel's settings are read from, and the listen backlog.
    pub fn kernel_files(&self) -> (crate::kernel::KernelFiles, u32) {
        let s = self.settings();
        let files = crate::kernel::KernelFiles { sys: s.kernel_sys_dir.clone(), proc_sys: s.kernel_proc_sys_dir.clone() };
        (files, s.tcp_backlog)
    }

    /// Ready to receive client traffic? A serving node is ready once the mesh says so
    /// (DESIGN.md, "Readiness": synced from a peer, no peers, or none reachable in time).
    pub fn readiness(&self) -> Result<(), String> {
        if *self.shutdown.borrow() {
            return Err("shutting down".into());
        }
        if self.persist.loading() {
            return Err("loading the snapshot".into());
        }
        if self.handoff.phase() != crate::handoff::Phase::Serving {
            return Err(format!("handing clients off before leaving the mesh ({})", self.handoff.phase().as_str()));
        }
        self.mesh.readiness()
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
        // Client connections wait on their own waker between requests, not on the signal.
        self.clients.wake_all();
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// Serves the mesh port: the mesh's own service, which peers subscribe to, and the operator's
/// `Admin` service, plain text and TLS on the same port (`tls::mesh_io`).
fn serve_mesh_port(server: &Arc<Server>, listener: TcpListener) {
    let local = listener.local_addr().ok();
    let routes = tonic::service::Routes::new(server.mesh.origin_service()).add_service(crate::admin::service(server.clone()));
    let mut stop = server.shutdown_signal();
    let incoming = crate::tls::mesh_io::incoming(server.clone(), listener);
    tokio::spawn(async move {
        let mut builder = tonic::transport::Server::builder().http2_keepalive_interval(Some(Duration::from_secs(10)));
        let serve = builder.add_routes(routes).serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.wait_for(|s| *s).await;
        });
        if let Err(e) = serve.await {
            warn!(addr = ?local, error = %e, "mesh port stopped serving");
        }
    });
    info!(addr = ?local, "mesh port listening");
}

/// Addresses to listen on: Redis's `bind` syntax, where `-addr` means "skip if unavailable"
/// and `*` means every IPv4 interface.
fn bind_addrs(bind: &str, port: u16) -> Vec<(SocketAddr, bool)> {
    bind.split_whitespace()
        .filter_map(|word| {
            let (optional, host) = match word.strip_prefix('-') {
                Some(h) => (true, h),
                None => (false, word),
            };
            let host = match host {
                "*" => "0.0.0.0",
                "::*" => "::",
                h => h,
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.parse().ok().map(|ip| (SocketAddr::new(ip, port), optional))
        })
        .collect()
}

/// What `bind` opened.
pub struct Listeners {
    /// The plain-text client port (none with `port 0` and a `tls-port`).
    pub plain: Vec<TcpListener>,
    /// The TLS client port (`tls-port`).
    pub tls: Vec<TcpListener>,
    pub metrics: Option<TcpListener>,
}

/// Binds `port` on every address of `bind`; returns the bound sockets, not yet listening, and
/// the port bound (for an ephemeral port 0).
fn bind_client(bind: &str, port: u16, what: &'static str) -> Result<(Vec<TcpSocket>, u16), ServerError> {
    let mut sockets = Vec::new();
    let mut actual_port = port;
    for (addr, optional) in bind_addrs(bind, port) {
        let addr = SocketAddr::new(addr.ip(), actual_port);
        match bind_reuse(addr) {
            Ok(socket) => {
                actual_port = socket.local_addr().map(|a| a.port()).unwrap_or(actual_port);
                sockets.push(socket);
            }
            Err(e) if optional => warn!(%addr, error = %e, "skipping optional bind address"),
            Err(source) => return Err(ServerError::Bind { what, addr: addr.to_string(), source }),
        }
    }
    if sockets.is_empty() {
        return Err(ServerError::Config(format!("bind '{bind}' names no usable address")));
    }
    Ok((sockets, actual_port))
}

/// Starts listening on bound client sockets.
fn listen_all(sockets: Vec<TcpSocket>, backlog: u32, what: &'static str) -> Result<Vec<TcpListener>, ServerError> {
    sockets
        .into_iter()
        .map(|socket| {
            let addr = socket.local_addr().map(|a| a.to_string()).unwrap_or_default();
            socket.listen(backlog).map_err(|source| ServerError::Bind { what, addr, source })
        })
        .collect()
}

/// Binds every listener: the client port(s) first, then the mesh and metrics ports derived
/// from the client port (the TLS port when the plain one is off). The client ports listen
/// last: a client (or a test, or a probe) that got through to the client port finds the
/// metrics and mesh ports open too, and a failed bind never accepted anyone.
pub async fn bind(server: &Server) -> Result<Listeners, ServerError> {
    let (bind, ports, backlog) = {
        let c = server.config.read();
        (server.settings().bind.clone(), c.ports().map_err(|e| ServerError::Config(e.to_string()))?, server.settings().tcp_backlog)
    };
    let (plain, plain_port) = match ports.plain_disabled() {
        true => (Vec::new(), 0),
        false => bind_client(&bind, ports.client, "client port")?,
    };
    let (tls, tls_port) = match ports.tls {
        Some(port) => bind_client(&bind, port, "TLS port")?,
        None => (Vec::new(), 0),
    };
    server.port.store(plain_port as usize, Ordering::Relaxed);
    let (actual_port, primary) = if ports.plain_disabled() { (tls_port, &tls) } else { (plain_port, &plain) };
    // Derived from an ephemeral client port only now that it is bound.
    let derived = |name: &str, offset: u16| {
        actual_port
            .checked_add(offset)
            .ok_or_else(|| ServerError::Config(format!("{name}: client port {actual_port} + {offset} is above 65535; set {name} explicitly")))
    };
    let mesh_port = match ports.mesh {
        Some(port) => port,
        None => derived("mesh-port", MESH_PORT_OFFSET)?,
    };
    let metrics_port = match ports.metrics {
        MetricsPort::At(port) => Some(port),
        MetricsPort::FromClient => Some(derived("metrics-port", METRICS_PORT_OFFSET)?),
        MetricsPort::Off => None,
    };
    let bound: Vec<SocketAddr> = primary.iter().filter_map(|l| l.local_addr().ok()).collect();
    server.mesh.bind(&bound, mesh_port).map_err(|(addr, source)| ServerError::Bind { what: "mesh port", addr: addr.to_string(), source })?;
    let metrics = match metrics_port {
        None => None,
        Some(metrics_port) => {
            let host = bound.first().map(|a| a.ip()).unwrap_or([0, 0, 0, 0].into());
            let addr = SocketAddr::new(host, metrics_port);
            let listener = bind_reuse(addr).and_then(|socket| socket.listen(511));
            let listener = listener.map_err(|source| ServerError::Bind { what: "metrics port", addr: addr.to_string(), source })?;
            // CONFIG GET metrics-port reports the port serving, derived or not.
            let _ = server.config.write().set("metrics-port", &metrics_port.to_string());
            Some(listener)
        }
    };
    let plain = listen_all(plain, backlog, "client port")?;
    let tls = listen_all(tls, backlog, "TLS port")?;
    Ok(Listeners { plain, tls, metrics })
}

/// A socket bound to `addr`, not yet listening: the client, metrics and mesh ports'. An IPv6
/// one takes IPv6 only, as Redis's do (`anetV6Only`): the default `bind * -::*` binds
/// 0.0.0.0 and :: on one port, and a dual-stack :: socket clashed with the IPv4 one (a node
/// started without `bind` failed with "address already in use" on its mesh port).
pub(crate) fn bind_reuse(addr: SocketAddr) -> std::io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if addr.is_ipv6() {
        socket2::SockRef::from(&socket).set_only_v6(true)?;
    }
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// Runs until SIGTERM/SIGINT (or `SHUTDOWN`). Fails only when the snapshot is refused and
/// `snapshot-load-error` is `refuse-start`.
pub async fn run(server: Arc<Server>, listeners: Listeners) -> Result<(), ServerError> {
    let (monitored, tracked) = (Arc::downgrade(&server), Arc::downgrade(&server));
    let took = move |took: std::time::Duration| {
        if let Some(server) = monitored.upgrade() {
            server.latency.add_if_needed("expire-cycle", took.as_millis() as u64);
        }
    };
    tokio::spawn(crate::db::expire::run_active_expiry(server.store.clone(), took, move || {
        if let Some(server) = tracked.upgrade() {
            // Expired keys invalidate client-side caches (no command carries them).
            server.tracking.merged(&server.clients, &server.store, crate::db::Modified::default());
        }
    }));
    // The first look happens before any client connects, so INFO never shows it unknown.
    let (files, backlog) = server.kernel_files();
    let thp_off = crate::kernel::disable_thp_if_always(&files);
    server.kernel.update(crate::kernel::inspect(&files, backlog, thp_off));
    tokio::spawn(check_kernel(server.clone(), thp_off));
    let settings_of = server.clone();
    tokio::spawn(crate::memory::run_refresher(move || settings_of.settings().maxmemory));
    // Clients connect while the snapshot loads (they get LOADING, INFO says loading:1, /readyz
    // is 503); the mesh starts once it is loaded, so peers merge with the whole snapshot. Set
    // before any listener starts: /readyz served a moment earlier answered 200 (no peers, not
    // loading yet), and a probe or test that saw it sent commands into the load.
    server.persist.begin_loading();
    if let Some(listener) = listeners.metrics {
        let app = crate::http::router(server.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                warn!(error = %e, "metrics endpoint stopped");
            }
        });
    }
    for listener in listeners.plain {
        tokio::spawn(accept_loop(server.clone(), listener, "plain", crate::connection::serve));
    }
    for listener in listeners.tls {
        tokio::spawn(accept_loop(server.clone(), listener, "tls", crate::tls::listener::handshake));
    }
    if server.tls.is_some() {
        tokio::spawn(reload_tls(server.clone()));
    }
    let loading = server.clone();
    let loaded = tokio::task::spawn_blocking(move || crate::persist::load::load(&loading)).await;
    if let Ok(Err(e)) = loaded {
        server.begin_shutdown();
        return Err(e.into());
    }
    tokio::spawn(crate::persist::schedule::run(server.clone()));
    let peers: Vec<_> = server.config.read().replicaof.iter().filter_map(|(h, p)| crate::mesh::PeerAddr::from_client_port(h, *p).ok()).collect();
    for listener in server.mesh.take_listeners() {
        serve_mesh_port(&server, listener);
    }
    server.mesh.start(peers);
    info!(port = server.port.load(Ordering::Relaxed), node = %server.node_name, run_id = %server.run_id, "ready to accept connections");
    let mut stop = server.shutdown_signal();
    tokio::select! {
        _ = signal_received() => server.begin_shutdown(),
        _ = stop.changed() => {}
    }
    info!("shutting down: closing listeners and client connections");
    // Give connections a moment to finish the command they are running and flush replies.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.clients.count() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    final_save(&server).await;
    Ok(())
}

/// As Redis: a node with a save schedule saves when it stops (unless `SHUTDOWN NOSAVE`), so a
/// whole-cluster restart loses nothing acknowledged before the stop.
async fn final_save(server: &Arc<Server>) {
    let scheduled = !server.settings().save.is_empty();
    if !scheduled || server.persist.skip_final_save.load(Ordering::Relaxed) {
        return;
    }
    let saving = server.clone();
    // A background save that is running finishes first; then this one has the slot.
    let saved = tokio::task::spawn_blocking(move || loop {
        match crate::persist::save(&saving) {
            Err(crate::persist::PersistError::InProgress) => std::thread::sleep(Duration::from_millis(20)),
            other => return other,
        }
    })
    .await;
    match saved {
        Ok(Ok(_)) => info!("saved the final snapshot before exiting"),
        Ok(Err(e)) => warn!(error = %e, "the final snapshot failed"),
        Err(e) => warn!(error = %e, "the final snapshot stopped"),
    }
}

/// How long changed TLS files are left to settle before they are loaded.
const TLS_FILES_SETTLE: Duration = Duration::from_millis(250);

/// Re-reads the TLS files every `tls-reload-seconds` and swaps them in when they changed and
/// validate (`Tls::reload_if_changed`).
async fn reload_tls(server: Arc<Server>) {
    let mut stop = server.shutdown_signal();
    loop {
        let interval = server.tls.as_ref().map_or(Duration::from_secs(5), |t| t.current().settings.reload_interval);
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.changed() => return,
        }
        if let Some(tls) = server.tls.as_ref().filter(|t| t.files_changed()) {
            // Tools write a certificate and its key one after the other (a Secret volume swaps
            // both at once): load once they have settled, not the new certificate with the
            // old key.
            tokio::time::sleep(TLS_FILES_SETTLE).await;
            tls.reload_if_changed();
        }
    }
}

/// Checks the kernel settings again every `kernel::RECHECK` (a node tuner may change them).
async fn check_kernel(server: Arc<Server>, thp_off: bool) {
    let (files, backlog) = server.kernel_files();
    let mut stop = server.shutdown_signal();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(crate::kernel::RECHECK) => {}
            _ = stop.changed() => return,
        }
        server.kernel.update(crate::kernel::inspect(&files, backlog, thp_off));
    }
}

async fn signal_received() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
}

/// Accepts on a client listener until shutdown, handing each connection to `serve` in its own
/// task (`connection::serve` for the plain port, the TLS handshake for the TLS port).
/// `maxclients` is enforced per connection (see `connection::serve`), so a refused client gets
/// Redis's error rather than a silent close.
pub(crate) async fn accept_loop<F, Fut>(server: Arc<Server>, listener: TcpListener, port: &'static str, serve: F)
where
    F: Fn(Arc<Server>, tokio::net::TcpStream, std::net::SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut stop = server.shutdown_signal();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let (socket, addr) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                warn!(error = %e, port, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        server.stats.connections_received.fetch_add(1, Ordering::Relaxed);
        server.metrics.connection_accepted();
        tokio::spawn(serve(server.clone(), socket, addr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(args: &[&str]) -> Arc<Server> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Server::new(Config::from_args(&args).expect("valid arguments"), "test").expect("a server")
    }

    /// `run` ends the snapshot's load and only then starts the mesh: a `/readyz` asked in
    /// between must not find the node ready (it latched ready with no link yet, so a
    /// restarted node with peers reported ready before syncing).
    #[tokio::test]
    async fn a_node_is_not_ready_until_its_mesh_has_started() {
        let meshed = server(&["--active-replica", "yes", "--multi-master", "yes", "--replicaof", "127.0.0.1", "7001"]);
        let standalone = server(&[]);
        for node in [&meshed, &standalone] {
            assert_eq!(node.readiness(), Err("the mesh has not started yet".to_string()));
        }
        standalone.mesh.start(Vec::new());
        assert_eq!(standalone.readiness(), Ok(()), "a node without peers is ready once started");
        let peer = crate::mesh::PeerAddr::from_client_port("127.0.0.1", 7001).expect("an address");
        meshed.mesh.start(vec![peer]);
        assert!(meshed.readiness().is_err(), "a node with a peer waits for its sync");
    }

    /// Redis's default `bind * -::*`: every IPv4 and every IPv6 address, on each port.
    #[tokio::test]
    async fn the_default_bind_listens_on_ipv4_and_ipv6() {
        let node = server(&["--port", "0", "--mesh-port", "0", "--metrics-port", "0"]);
        assert_eq!(node.settings().bind, "* -::*");
        let listeners = bind(&node).await.expect("the default bind binds every port");
        let port = node.port.load(Ordering::Relaxed) as u16;
        // `-::*` is optional: a host without IPv6 listens on IPv4 alone.
        let ipv6 = std::net::TcpListener::bind("[::1]:0").is_ok();
        let expected: &[bool] = if ipv6 { &[false, true] } else { &[false] };
        let families = |listeners: &[TcpListener]| listeners.iter().map(|l| l.local_addr().expect("bound").is_ipv6()).collect::<Vec<_>>();
        assert_eq!(families(&listeners.plain), expected);
        assert!(listeners.plain.iter().all(|l| l.local_addr().expect("bound").port() == port));
        assert_eq!(families(&node.mesh.take_listeners()), expected);
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("IPv4 loopback connects");
        if ipv6 {
            std::net::TcpStream::connect(("::1", port)).expect("IPv6 loopback connects");
        }
    }
}
