//! The StatefulSet's revision history: its ControllerRevisions hold every pod template it had
//! (up to `revisionHistoryLimit`, 10 by default), which is where a rollback finds the template
//! of the revision it returns to.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::ListParams;
use kube::Api;

use crate::build::{pod_selector, PodTemplate};
use crate::names::ClusterNames;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("failed to list the ControllerRevisions of StatefulSet {name}: {source}")]
    List { name: String, source: kube::Error },
}

/// The pod template of revision `hash` from the StatefulSet's history (the newest if several
/// carry it), or `None` if the history no longer has it.
pub async fn find_template(client: &kube::Client, names: &ClusterNames, hash: &str) -> Result<Option<PodTemplate>, HistoryError> {
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &names.namespace);
    let list =
        revisions.list(&ListParams::default().labels(&pod_selector(names))).await.map_err(|source| HistoryError::List { name: names.statefulset(), source })?;
    Ok(template_of(list.items, hash))
}

/// The newest revision's template whose hash is `hash`.
pub fn template_of(mut revisions: Vec<ControllerRevision>, hash: &str) -> Option<PodTemplate> {
    revisions.sort_by_key(|r| std::cmp::Reverse(r.revision));
    revisions.into_iter().filter_map(|r| template(&r)).find(|t| t.hash == hash)
}

/// A StatefulSet ControllerRevision's `data` is a patch `{"spec": {"template": {..., "$patch":
/// "replace"}}}` holding the whole pod template.
fn template(revision: &ControllerRevision) -> Option<PodTemplate> {
    let mut template = revision.data.as_ref()?.0.get("spec")?.get("template")?.clone();
    if let Some(object) = template.as_object_mut() {
        object.remove("$patch");
    }
    let template: PodTemplateSpec = serde_json::from_value(template).ok()?;
    PodTemplate::from_history(template)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
    use serde_json::json;

    fn revision(number: i64, hash: &str, image: &str) -> ControllerRevision {
        ControllerRevision {
            revision: number,
            data: Some(RawExtension(json!({"spec": {"template": {
                "$patch": "replace",
                "metadata": {"annotations": {"keymesh.io/template-hash": hash}},
                "spec": {"containers": [{"name": "keymesh", "image": image}]}
            }}}))),
            ..ControllerRevision::default()
        }
    }

    #[test]
    fn finds_the_newest_revision_with_the_hash() {
        let revisions = vec![revision(1, "aaa", "old"), revision(3, "aaa", "newer-same-hash"), revision(2, "bbb", "other")];
        let found = template_of(revisions, "aaa").expect("revision aaa is in the history");
        assert_eq!(found.hash, "aaa");
        let image = found.template.spec.as_ref().and_then(|s| s.containers[0].image.clone());
        assert_eq!(image.as_deref(), Some("newer-same-hash"));
        assert!(template_of(vec![revision(1, "aaa", "old")], "zzz").is_none());
    }
}
