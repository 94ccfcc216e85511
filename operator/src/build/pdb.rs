//! The PodDisruptionBudget: at most `maxUnavailable` engine pods evicted at a time. Built as
//! `policy/v1` or `policy/v1beta1`, whichever the API server serves (1.20 serves only
//! v1beta1, 1.25+ only v1); both versions take the same fields here.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, TypeMeta};

use super::{child_metadata, selector_labels, to_dynamic, BuildError, BuildInput};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdbVersion {
    V1,
    V1beta1,
}

impl PdbVersion {
    pub fn version(self) -> &'static str {
        match self {
            PdbVersion::V1 => "v1",
            PdbVersion::V1beta1 => "v1beta1",
        }
    }

    /// What the API server's `policy` group offers, newest first.
    pub fn from_versions<'a>(mut versions: impl Iterator<Item = &'a str> + Clone) -> Option<PdbVersion> {
        if versions.clone().any(|v| v == "v1") {
            Some(PdbVersion::V1)
        } else if versions.any(|v| v == "v1beta1") {
            Some(PdbVersion::V1beta1)
        } else {
            None
        }
    }

    pub fn api_resource(self) -> ApiResource {
        ApiResource {
            group: "policy".to_string(),
            version: self.version().to_string(),
            api_version: format!("policy/{}", self.version()),
            kind: "PodDisruptionBudget".to_string(),
            plural: "poddisruptionbudgets".to_string(),
        }
    }
}

/// `None` when disabled or when the server serves no PodDisruptionBudget API.
pub fn build_pdb(input: &BuildInput) -> Result<Option<DynamicObject>, BuildError> {
    let (Some(max_unavailable), Some(version)) = (input.spec.pdb_max_unavailable, input.capabilities.pdb) else {
        return Ok(None);
    };
    let name = input.names.statefulset();
    let pdb = PodDisruptionBudget {
        metadata: child_metadata(input, name.clone())?,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(max_unavailable)),
            selector: Some(LabelSelector { match_labels: Some(selector_labels(input.names)), match_expressions: None }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    };
    let mut object = to_dynamic(&pdb, "PodDisruptionBudget", &name)?;
    let resource = version.api_resource();
    object.types = Some(TypeMeta { api_version: resource.api_version, kind: resource.kind });
    Ok(Some(object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixture::{yaml, Fixture};

    #[test]
    fn version_follows_discovery() {
        for (version, api_version) in [(PdbVersion::V1, "policy/v1"), (PdbVersion::V1beta1, "policy/v1beta1")] {
            let mut fixture = Fixture::new("{}");
            fixture.capabilities.pdb = Some(version);
            let pdb = fixture.build().pdb.expect("a PDB by default");
            assert_eq!(pdb.types.as_ref().map(|t| t.api_version.as_str()), Some(api_version), "{}", yaml(&pdb));
            assert_eq!(pdb.metadata.name.as_deref(), Some("demo"), "{}", yaml(&pdb));
            assert_eq!(pdb.data["spec"]["maxUnavailable"], 1, "{}", yaml(&pdb));
            assert_eq!(pdb.data["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"], "demo", "{}", yaml(&pdb));
            assert!(pdb.metadata.owner_references.is_some(), "{}", yaml(&pdb));
        }
    }

    #[test]
    fn disabled_or_unserved_means_none() {
        assert!(Fixture::new("podDisruptionBudget: {enabled: false}").build().pdb.is_none());
        let mut fixture = Fixture::new("podDisruptionBudget: {maxUnavailable: 2}");
        assert_eq!(fixture.build().pdb.map(|p| p.data["spec"]["maxUnavailable"].clone()), Some(2.into()));
        fixture.capabilities.pdb = None;
        assert!(fixture.build().pdb.is_none());
    }

    #[test]
    fn discovery_prefers_v1() {
        assert_eq!(PdbVersion::from_versions(["v1beta1"].into_iter()), Some(PdbVersion::V1beta1));
        assert_eq!(PdbVersion::from_versions(["v1", "v1beta1"].into_iter()), Some(PdbVersion::V1));
        assert_eq!(PdbVersion::from_versions([].into_iter()), None);
    }
}
