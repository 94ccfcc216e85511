//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager): two operator
//! replicas can run, and only the Lease holder reconciles. The holder renews every ~5 s
//! (lease duration 15 s, renewing when 10 s are left); another replica takes over at most 15 s
//! after the holder stops renewing. Releasing on shutdown hands over at once.

use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::build::FIELD_MANAGER;

pub const LEASE_DURATION_SECONDS: u64 = 15;
/// Renew when this many seconds of the lease are left: every ~5 s.
pub const RENEW_GRACE_SECONDS: u64 = 10;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("failed to set up the leader Lease {namespace}/{name}: {source}")]
    Setup { namespace: String, name: String, source: LeaseManagerError },
    #[error("the leader election task stopped")]
    Stopped,
}

/// A running election.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Leadership {
    /// Starts competing for the Lease `namespace/name` as `identity` (the pod name).
    pub async fn start(client: kube::Client, namespace: &str, name: &str, identity: &str) -> Result<Leadership, LeaderError> {
        let manager = LeaseManagerBuilder::new(client, name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(LEASE_DURATION_SECONDS)
            .with_grace(RENEW_GRACE_SECONDS)
            .with_field_manager(format!("{FIELD_MANAGER}-leader-{identity}"))
            .build()
            .await
            .map_err(|source| LeaderError::Setup { namespace: namespace.to_string(), name: name.to_string(), source })?;
        let (state, task) = manager.watch().await;
        Ok(Leadership { state, task })
    }

    /// Resolves once this replica holds the Lease.
    pub async fn acquired(&mut self) -> Result<(), LeaderError> {
        self.state.wait_for(|leader| *leader).await.map(|_| ()).map_err(|_| LeaderError::Stopped)
    }

    /// Resolves when this replica no longer holds the Lease.
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(|leader| !*leader).await;
    }

    /// Releases the Lease (if held) and stops competing.
    pub async fn release(self) {
        drop(self.state);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("released the leader Lease"),
            Ok(Err(e)) => tracing::warn!(error = %e, "failed to release the leader Lease"),
            Err(e) => tracing::warn!(error = %e, "leader election task failed"),
        }
    }
}
