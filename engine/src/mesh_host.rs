//! How the server provides what the mesh needs (`mesh::Host`, `mesh::Delivery`): the mesh gets
//! this narrow view of the node, never the `Server` itself.

use bytes::Bytes;

use crate::db::Key;
use crate::hlc::Timestamp;
use crate::mesh::{Delivery, Host, LinkSettings};
use crate::server::Server;

impl Delivery for Server {
    fn publish(&self, channel: &Bytes, message: &Bytes) {
        self.pubsub.publish(channel, message);
    }

    fn wants_changed_keys(&self) -> bool {
        self.blocking.blocked_clients() > 0 || self.store.tracking.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn keys_changed(&self, keys: Vec<(usize, Key)>) {
        // Client-side caches first (the merge already happened), then blocked clients.
        self.tracking.invalidate_merged(&self.clients, &self.store, &keys);
        crate::cmd::blocking::wake_ready(self, keys);
    }
}

impl Host for Server {
    fn password_ok(&self, given: &[u8]) -> bool {
        Server::password_ok(self, given)
    }

    fn tls_replication(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.current().settings.replication)
    }

    fn link_tls(&self, peer_host: &str) -> Option<tonic::transport::ClientTlsConfig> {
        self.tls.as_ref().filter(|t| t.current().settings.replication).map(|t| t.client_config(peer_host))
    }

    fn link_settings(&self) -> LinkSettings {
        let s = self.settings();
        LinkSettings { masterauth: s.masterauth.clone(), repl_timeout: s.repl_timeout }
    }

    fn snapshot_frontier_cap(&self) -> Timestamp {
        self.persist.frontier_cap(!self.settings().save.is_empty())
    }
}
