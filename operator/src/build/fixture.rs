//! Test fixture: builds children from an inline YAML spec, with the inputs a first reconcile
//! of that spec would have, and prints objects as YAML in assertion messages.

use super::{build_children, engine_settings, pod_template, BuildInput, Capabilities, Children, EngineSettings, PdbVersion, PodTemplate};
use crate::api::CacheCluster;
use crate::names::ClusterNames;
use crate::test_support::cluster;
use crate::tls::TlsStep;
use crate::validate::{validate, AuthSource, ValidatedSpec};

pub struct Fixture {
    pub cluster: CacheCluster,
    pub spec: ValidatedSpec,
    pub names: ClusterNames,
    pub statefulset_replicas: i32,
    pub config_peers: Vec<u32>,
    pub password: Option<String>,
    pub capabilities: Capabilities,
    pub template: PodTemplate,
    pub partition: u32,
    pub operator_namespace: Option<String>,
    pub tls: TlsStep,
}

impl Fixture {
    pub fn new(spec_yaml: &str) -> Fixture {
        let cluster = cluster(spec_yaml);
        let spec = validate(&cluster).unwrap_or_else(|e| panic!("fixture spec is invalid: {e}\n{spec_yaml}"));
        let replicas = spec.replicas;
        let password = matches!(spec.auth, AuthSource::Generated { .. }).then(|| "s3cret-pw".to_string());
        let names = ClusterNames::new("demo", "cache", "cluster.local");
        let template = pod_template(&spec, &names, &engine_settings(&spec, &names, None), None);
        Fixture {
            cluster,
            spec,
            names,
            template,
            partition: 0,
            statefulset_replicas: replicas,
            config_peers: (0..replicas.unsigned_abs()).collect(),
            password,
            capabilities: Capabilities { pdb: Some(PdbVersion::V1), service_monitor: true, cert_manager: false, pvc_retention_policy: false },
            operator_namespace: None,
            tls: TlsStep::off(),
        }
    }

    pub fn input(&self) -> BuildInput<'_> {
        BuildInput {
            cluster: &self.cluster,
            spec: &self.spec,
            names: &self.names,
            statefulset_replicas: self.statefulset_replicas,
            config_peers: &self.config_peers,
            generated_password: self.password.as_deref(),
            capabilities: self.capabilities,
            template: &self.template,
            partition: self.partition,
            tuner_image: "keymesh/keymesh-operator:test",
            operator_namespace: self.operator_namespace.as_deref(),
            tls: &self.tls,
        }
    }

    pub fn settings(&self) -> EngineSettings {
        engine_settings(&self.spec, &self.names, None)
    }

    pub fn build(&self) -> Children {
        build_children(&self.input()).unwrap_or_else(|e| panic!("build failed: {e}"))
    }
}

/// Children of a first reconcile of `spec_yaml`.
pub fn build(spec_yaml: &str) -> Children {
    Fixture::new(spec_yaml).build()
}

/// An object as YAML, for assertion messages.
pub fn yaml<T: serde::Serialize>(object: &T) -> String {
    serde_yaml::to_string(object).unwrap_or_else(|e| format!("<unprintable: {e}>"))
}
