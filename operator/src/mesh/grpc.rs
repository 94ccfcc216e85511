//! `MeshClient` over gRPC: a fresh connection per call with short timeouts, so one hung engine
//! costs a reconcile a few seconds, never forever.

use std::time::Duration;

use keymesh_proto::admin_client::AdminClient;
use std::collections::BTreeMap;

use keymesh_proto::{HandoffRequest, NodeStatus, Peer, SaveRequest, SetConfigRequest, SetPeersRequest, StatusRequest};
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::{Member, MeshClient, MeshError};

#[derive(Debug, Clone)]
pub struct GrpcMeshClient {
    pub connect_timeout: Duration,
    pub call_timeout: Duration,
}

impl Default for GrpcMeshClient {
    fn default() -> Self {
        GrpcMeshClient { connect_timeout: Duration::from_secs(2), call_timeout: Duration::from_secs(3) }
    }
}

impl GrpcMeshClient {
    async fn connect(&self, member: &Member) -> Result<AdminClient<Channel>, MeshError> {
        let connect_error = |message: String| MeshError::Connect { pod: member.pod.clone(), endpoint: member.admin_endpoint.clone(), message };
        if member.admin_endpoint.is_empty() {
            return Err(connect_error("the pod has no IP yet".to_string()));
        }
        let mut endpoint = Endpoint::from_shared(member.admin_endpoint.clone()).map_err(|e| connect_error(e.to_string()))?;
        if let Some(tls) = &member.tls {
            // Reached by IP, checked by the pod's stable name (the certificate's wildcard).
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem))
                .domain_name(member.peer.host.clone());
            endpoint = endpoint.tls_config(config).map_err(|e| connect_error(format!("TLS: {e}")))?;
        }
        let channel = endpoint.connect_timeout(self.connect_timeout).timeout(self.call_timeout).connect().await.map_err(|e| connect_error(e.to_string()))?;
        Ok(AdminClient::new(channel))
    }
}

/// A request carrying `authorization: Bearer <password>` when there is a password.
fn request<T>(member: &Member, call: &'static str, message: T, password: Option<&str>) -> Result<tonic::Request<T>, MeshError> {
    let mut request = tonic::Request::new(message);
    if let Some(password) = password {
        let value = MetadataValue::try_from(format!("Bearer {password}")).map_err(|_| MeshError::Invalid {
            pod: member.pod.clone(),
            call,
            message: "the password is not a valid gRPC metadata value".to_string(),
        })?;
        request.metadata_mut().insert("authorization", value);
    }
    Ok(request)
}

#[tonic::async_trait]
impl MeshClient for GrpcMeshClient {
    async fn status(&self, member: &Member, password: Option<&str>, config_keys: &[String]) -> Result<NodeStatus, MeshError> {
        let mut client = self.connect(member).await?;
        let request = request(member, "Status", StatusRequest { config_keys: config_keys.to_vec() }, password)?;
        let reply = client.status(request).await.map_err(|status| MeshError::Call { pod: member.pod.clone(), call: "Status", status: Box::new(status) })?;
        Ok(reply.into_inner())
    }

    async fn set_peers(&self, member: &Member, peers: Vec<Peer>, password: Option<&str>) -> Result<Vec<Peer>, MeshError> {
        let mut client = self.connect(member).await?;
        let request = request(member, "SetPeers", SetPeersRequest { peers }, password)?;
        let reply =
            client.set_peers(request).await.map_err(|status| MeshError::Call { pod: member.pod.clone(), call: "SetPeers", status: Box::new(status) })?;
        Ok(reply.into_inner().peers)
    }

    async fn handoff(&self, member: &Member, start: bool, grace_ms: u64, password: Option<&str>) -> Result<NodeStatus, MeshError> {
        let mut client = self.connect(member).await?;
        let request = request(member, "Handoff", HandoffRequest { start, grace_ms }, password)?;
        let reply = client.handoff(request).await.map_err(|status| MeshError::Call { pod: member.pod.clone(), call: "Handoff", status: Box::new(status) })?;
        Ok(reply.into_inner())
    }

    async fn set_config(&self, member: &Member, values: BTreeMap<String, String>, password: Option<&str>) -> Result<NodeStatus, MeshError> {
        let mut client = self.connect(member).await?;
        let request = request(member, "SetConfig", SetConfigRequest { values: values.into_iter().collect() }, password)?;
        let reply =
            client.set_config(request).await.map_err(|status| MeshError::Call { pod: member.pod.clone(), call: "SetConfig", status: Box::new(status) })?;
        Ok(reply.into_inner())
    }

    async fn save(&self, member: &Member, password: Option<&str>) -> Result<NodeStatus, MeshError> {
        let mut client = self.connect(member).await?;
        let request = request(member, "Save", SaveRequest {}, password)?;
        let reply = client.save(request).await.map_err(|status| MeshError::Call { pod: member.pod.clone(), call: "Save", status: Box::new(status) })?;
        Ok(reply.into_inner())
    }
}
