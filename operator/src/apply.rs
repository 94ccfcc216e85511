//! The apply step: server-side apply of every child under one field manager
//! (`keymesh-operator`, forced, so the operator's intent wins over drift), in this order:
//!
//! 1. Secret (generated auth) and 2. ConfigMap: what pods need before they can start;
//! 3. headless Service: the pods' DNS names, before the pods exist;
//! 4. client Service; 5. StatefulSet (its `replicas` is the scale plan's answer);
//! 6. PodDisruptionBudget; 7. ServiceMonitor.
//!
//! An optional child that is switched off (PDB, ServiceMonitor) is deleted if it exists.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::build::{service_monitor_resource, Capabilities, Children, FIELD_MANAGER};
use crate::names::ClusterNames;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("failed to apply {kind} {name}: {source}")]
    Apply { kind: String, name: String, source: kube::Error },
    #[error("failed to delete {kind} {name}: {source}")]
    Delete { kind: String, name: String, source: kube::Error },
}

/// Applies every child, in the documented order.
pub async fn apply_children(client: &kube::Client, names: &ClusterNames, children: Children, capabilities: Capabilities) -> Result<(), ApplyError> {
    let Children { secret, config_map, headless_service, client_service, statefulset, pdb, service_monitor } = children;
    let ns = names.namespace.as_str();
    if let Some(secret) = secret {
        apply(&Api::namespaced(client.clone(), ns), &secret).await?;
    }
    apply(&Api::namespaced(client.clone(), ns), &config_map).await?;
    apply(&Api::namespaced(client.clone(), ns), &headless_service).await?;
    apply(&Api::namespaced(client.clone(), ns), &client_service).await?;
    apply(&Api::namespaced(client.clone(), ns), &statefulset).await?;
    if let Some(version) = capabilities.pdb {
        apply_or_delete(client, ns, &version.api_resource(), pdb, &names.statefulset()).await?;
    }
    if capabilities.service_monitor {
        apply_or_delete(client, ns, &service_monitor_resource(), service_monitor, &names.statefulset()).await?;
    }
    Ok(())
}

async fn apply<K>(api: &Api<K>, object: &K) -> Result<(), ApplyError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = object.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(object)).await.map_err(|source| ApplyError::Apply { kind: K::kind(&()).into_owned(), name, source })?;
    Ok(())
}

async fn apply_or_delete(client: &kube::Client, ns: &str, resource: &ApiResource, object: Option<DynamicObject>, name: &str) -> Result<(), ApplyError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    match object {
        Some(object) => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(name, &params, &Patch::Apply(&object)).await.map_err(|source| ApplyError::Apply {
                kind: resource.kind.clone(),
                name: name.to_string(),
                source,
            })?;
        }
        None => match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => return Err(ApplyError::Delete { kind: resource.kind.clone(), name: name.to_string(), source }),
        },
    }
    Ok(())
}
