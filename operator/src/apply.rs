//! The apply step: server-side apply of every child under one field manager
//! (`keymesh-operator`, forced, so the operator's intent wins over drift), in this order:
//!
//! 1. Secrets (generated auth, operator-issued TLS) and the cert-manager Certificate, 2. the settings ConfigMap and 3. the peers ConfigMap: what
//!    pods need before they can start;
//! 4. the node-tuning DaemonSet: nodes are tuned before the pods come;
//! 5. headless Service: the pods' DNS names, before the pods exist;
//! 6. client Service; 7. NetworkPolicy, so no pod is ever reachable without it;
//! 8. StatefulSet (its `replicas` is the scale plan's answer, its template
//!    and partition the upgrade's; held back while a new cluster's nodes are being tuned);
//! 9. PodDisruptionBudget; 10. ServiceMonitor.
//!
//! An optional child that is switched off (NetworkPolicy, PDB, ServiceMonitor, node tuning) is deleted if it
//! exists. The
//! settings ConfigMaps of earlier revisions are deleted once no upgrade is in flight or on
//! record (`collect_old_config_maps`): until then a pod may restart, or be rolled back, onto
//! one of them.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;

use crate::build::{certificate_resource, common_labels, network_policy_resource, service_monitor_resource, Capabilities, Children, FIELD_MANAGER};
use crate::names::ClusterNames;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("failed to apply {kind} {name}: {source}")]
    Apply { kind: String, name: String, source: kube::Error },
    #[error("failed to delete {kind} {name}: {source}")]
    Delete { kind: String, name: String, source: kube::Error },
    #[error("failed to list the ConfigMaps of CacheCluster {name}: {source}")]
    List { name: String, source: kube::Error },
}

/// Deletes the StatefulSet but not its pods (`propagationPolicy: Orphan`), so it can be created
/// again with other claim templates (`crate::persistence`); the new one adopts the pods.
pub async fn orphan_statefulset(client: &kube::Client, names: &ClusterNames) -> Result<(), ApplyError> {
    let api: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    match api.delete(&names.statefulset(), &DeleteParams::orphan()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApplyError::Delete { kind: "StatefulSet".to_string(), name: names.statefulset(), source }),
    }
}

/// Deletes the cluster's settings ConfigMaps other than `keep` (earlier revisions'). Only
/// called while no upgrade is in flight or on record.
pub async fn collect_old_config_maps(client: &kube::Client, names: &ClusterNames, keep: &str) -> Result<(), ApplyError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &names.namespace);
    let selector = common_labels(names).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    let list = api.list(&ListParams::default().labels(&selector)).await.map_err(|source| ApplyError::List { name: names.name.clone(), source })?;
    // `<name>-config` itself is what operator 0.1 mounted.
    let legacy = names.config_map_prefix();
    let prefix = format!("{legacy}-");
    for old in list.items.iter().map(|c| c.name_any()).filter(|n| (n.starts_with(&prefix) || *n == legacy) && n != keep) {
        match api.delete(&old, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(config_map = %old, "deleted the settings of an earlier revision"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => return Err(ApplyError::Delete { kind: "ConfigMap".to_string(), name: old, source }),
        }
    }
    Ok(())
}

/// Applies every child, in the documented order.
/// `node_tuning_exists`: the DaemonSet exists (it is deleted when tuning is off).
pub async fn apply_children(
    client: &kube::Client,
    names: &ClusterNames,
    children: Children,
    capabilities: Capabilities,
    node_tuning_exists: bool,
) -> Result<(), ApplyError> {
    let Children {
        secret,
        tls_secrets,
        certificate,
        config_map,
        peers_config_map,
        headless_service,
        client_service,
        statefulset,
        pdb,
        service_monitor,
        node_tuning,
        network_policy,
    } = children;
    let ns = names.namespace.as_str();
    for secret in secret.iter().chain(&tls_secrets) {
        apply(&Api::namespaced(client.clone(), ns), secret).await?;
    }
    if capabilities.cert_manager {
        apply_or_delete(client, ns, &certificate_resource(), certificate, &names.tls_secret()).await?;
    }
    apply(&Api::namespaced(client.clone(), ns), &config_map).await?;
    apply(&Api::namespaced(client.clone(), ns), &peers_config_map).await?;
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    match node_tuning {
        Some(daemonset) => apply(&daemonsets, &daemonset).await?,
        // Its tuners restore the nodes' values when they stop.
        None if node_tuning_exists => delete_if_present(&daemonsets, &names.node_tuning()).await?,
        None => {}
    }
    apply(&Api::namespaced(client.clone(), ns), &headless_service).await?;
    apply(&Api::namespaced(client.clone(), ns), &client_service).await?;
    apply_or_delete(client, ns, &network_policy_resource(), network_policy, &names.statefulset()).await?;
    if let Some(statefulset) = statefulset {
        apply(&Api::namespaced(client.clone(), ns), &statefulset).await?;
    }
    if let Some(version) = capabilities.pdb {
        apply_or_delete(client, ns, &version.api_resource(), pdb, &names.statefulset()).await?;
    }
    if capabilities.service_monitor {
        apply_or_delete(client, ns, &service_monitor_resource(), service_monitor, &names.statefulset()).await?;
    }
    Ok(())
}

async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), ApplyError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApplyError::Delete { kind: K::kind(&()).into_owned(), name: name.to_string(), source }),
    }
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
