//! What the status tests and the Argo CD health testdata share: the status a reconcile
//! computes for a cluster, given its members, StatefulSet size and upgrade step.

use k8s_openapi::jiff::Timestamp;

use super::{compute, StatusInput};
use crate::api::{CacheCluster, CacheClusterStatus};
use crate::auth::Password;
use crate::mesh::{plan, MemberState, PlanInput, WiringReport};
use crate::node_tuning::Tuners;
use crate::test_support::names;
use crate::upgrade::UpgradePlan;
use crate::validate::validate;

/// The upgrade step's answer when nothing rolls.
pub fn steady() -> UpgradePlan {
    UpgradePlan { target: "rev-1".into(), rollback: false, partition: 0, handoff: None, status: None, complete: true }
}

/// The status a reconcile computes for `cluster` with these members and StatefulSet size.
pub fn status_of(cluster: &CacheCluster, members: &[MemberState], statefulset_replicas: Option<u32>, now: Timestamp) -> CacheClusterStatus {
    status_with(cluster, members, statefulset_replicas, &steady(), now)
}

pub fn status_with(
    cluster: &CacheCluster,
    members: &[MemberState],
    statefulset_replicas: Option<u32>,
    upgrade: &UpgradePlan,
    now: Timestamp,
) -> CacheClusterStatus {
    let names = names();
    let spec = validate(cluster).expect("valid spec");
    let endpoints = std::collections::BTreeSet::new();
    let plan = plan(&PlanInput { names: &names, desired: spec.replicas.unsigned_abs(), statefulset_replicas, members, endpoints: &endpoints, now });
    let password = Password::Generated("pw".into());
    compute(&StatusInput {
        cluster,
        names: &names,
        spec: &spec,
        members,
        plan: &plan,
        upgrade,
        tuners: &Tuners::default(),
        wiring: &WiringReport::default(),
        password: &password,
        tls: &crate::tls::TlsStep::off(),
        now,
    })
}
