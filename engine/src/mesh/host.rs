//! What the mesh needs from the node it runs in, and nothing more.
//!
//! The mesh sees the keyspace (`Store`), its own backlog (`ReplLog`) and the clock through the
//! store, and everything else through the two traits below, which the server implements
//! (`crate::mesh_host`). It never holds the `Server`: a link cannot reach into client
//! connections, the config text or the command table, and a test can run a mesh against a
//! host of its own.

use std::time::Duration;

use bytes::Bytes;

use crate::db::Key;
use crate::hlc::Timestamp;

/// What merges from peers cause beyond the keyspace: messages published on a peer, and the
/// keys whose values changed (clients blocked on them are served, as a local write would).
pub trait Delivery: Send + Sync {
    /// A message published on a peer (`PUBLISH` replicates as an effect).
    fn publish(&self, channel: &Bytes, message: &Bytes);

    /// Whether anyone wants to hear which keys a merge changed. Asked once per batch, so a
    /// full sync of a million keys collects nothing while nobody listens.
    fn wants_changed_keys(&self) -> bool;

    /// The `(database, key)`s a batch of merges changed, in the order they were merged.
    fn keys_changed(&self, keys: Vec<(usize, Key)>);
}

/// The settings a link reads at every (re)connect.
#[derive(Debug, Clone)]
pub struct LinkSettings {
    /// The password this node presents to its peers (`masterauth`).
    pub masterauth: String,
    /// A stream silent for this long is given up and re-made (`repl-timeout`).
    pub repl_timeout: Duration,
}

/// The node around the mesh: its password, its transport security, the settings links read,
/// what its snapshots cover, and where merges deliver.
pub trait Host: Delivery {
    /// Whether `given` is this node's password (constant time: `crate::auth`). Subscribers
    /// present it in `Hello`, the operator on every admin call.
    fn password_ok(&self, given: &[u8]) -> bool;

    /// Whether the mesh runs on mutual TLS (`tls-replication yes`): subscribers must present
    /// a certificate from this node's CA, and links present this node's.
    fn tls_replication(&self) -> bool;

    /// The TLS client settings for a link to `peer_host`, when the mesh runs on TLS (the
    /// current certificate: links are re-made at every reconnect and when TLS changes).
    fn link_tls(&self, peer_host: &str) -> Option<tonic::transport::ClientTlsConfig>;

    /// The settings a link reads at every (re)connect.
    fn link_settings(&self) -> LinkSettings;

    /// The newest version the snapshot a restart would load is sure to hold
    /// (`persist::Persistence::frontier_cap`); `Timestamp::MAX` without snapshots.
    fn snapshot_frontier_cap(&self) -> Timestamp;
}
