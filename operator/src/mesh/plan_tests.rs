use keymesh_proto::PeerStatus;

use super::*;
use crate::test_support::{engine, names, silent};

fn run(desired: u32, statefulset_replicas: Option<u32>, members: &[MemberState]) -> ScalePlan {
    run_with_endpoints(desired, statefulset_replicas, members, &[])
}

fn run_with_endpoints(desired: u32, statefulset_replicas: Option<u32>, members: &[MemberState], endpoints: &[&str]) -> ScalePlan {
    let names = names();
    let endpoints: BTreeSet<String> = endpoints.iter().map(|e| e.to_string()).collect();
    plan(&PlanInput { names: &names, desired, statefulset_replicas, members, endpoints: &endpoints, now: k8s_openapi::jiff::Timestamp::now() })
}

/// Marks member `i` as handed off: gate closed, handoff done, writes refused, last sequence 9,
/// run `run-<i>`.
fn handed_off(members: &mut [MemberState], i: usize) {
    members[i].pod.serving = Some(false);
    let status = members[i].status.as_mut().unwrap();
    status.handoff = "done".into();
    status.draining = true;
    status.last_seq = 9;
    status.run_id = format!("run-{i}");
}

/// Member `witness` reports having merged `origin`'s run through `applied`.
fn merged(members: &mut [MemberState], witness: usize, origin: u32, applied: u64) {
    let host = peer_of(&names(), origin).host;
    let link = members[witness].status.as_mut().unwrap().peers.iter_mut().find(|p| p.peer.as_ref().is_some_and(|p| p.host == host)).unwrap();
    link.synced_run_id = format!("run-{origin}");
    link.applied_seq = applied;
}

fn update_for(plan: &ScalePlan, ordinal: u32) -> Option<Vec<String>> {
    plan.peer_updates.iter().find(|u| u.ordinal == ordinal).map(|u| u.peers.iter().map(|p| p.host.split('.').next().unwrap_or("").to_string()).collect())
}

#[test]
fn a_new_cluster_creates_every_founding_member() {
    let plan = run(3, None, &[]);
    assert_eq!(plan.step, ScaleStep::Create, "{plan:#?}");
    assert_eq!(plan.statefulset_replicas, 3, "{plan:#?}");
    assert_eq!(plan.config_peers, [0, 1, 2], "{plan:#?}");
    assert!(plan.peer_updates.is_empty(), "{plan:#?}");
}

#[test]
fn founding_members_that_list_each_other_are_steady() {
    let members = [engine(0, &[1, 2], true), engine(1, &[0, 2], true), engine(2, &[0, 1], true)];
    let plan = run(3, Some(3), &members);
    assert!(plan.settled(), "{plan:#?}");
    assert_eq!(plan.joined.len(), 3, "{plan:#?}");
}

#[test]
fn founding_members_that_are_still_starting_are_joined_because_listed() {
    // Only demo-0 answers so far, and it is still syncing; it lists the others from its config.
    let plan = run(3, Some(3), &[engine(0, &[1, 2], false), silent(1, false), silent(2, true)]);
    assert_eq!(plan.joined, BTreeSet::from([1, 2]), "{plan:#?}");
    assert_eq!(plan.step, ScaleStep::AwaitJoin { pods: vec!["demo-0".into()] }, "{plan:#?}");
    assert!(plan.peer_updates.is_empty(), "demo-0 already lists every joined member: {plan:#?}");
}

#[test]
fn scale_up_grows_the_statefulset_and_new_pods_sync_from_joined_members_only() {
    let members = [engine(0, &[1, 2], true), engine(1, &[0, 2], true), engine(2, &[0, 1], true)];
    let plan = run(5, Some(3), &members);
    assert_eq!(plan.step, ScaleStep::ScaleUp { from: 3, to: 5 }, "{plan:#?}");
    assert_eq!(plan.statefulset_replicas, 5, "{plan:#?}");
    assert_eq!(plan.config_peers, [0, 1, 2], "new pods must not name each other: {plan:#?}");
    assert_eq!(plan.joining, BTreeSet::from([3, 4]), "{plan:#?}");
    assert!(plan.peer_updates.is_empty(), "{plan:#?}");
}

#[test]
fn scale_up_waits_for_new_pods_to_sync() {
    let members = [engine(0, &[1, 2], true), engine(1, &[0, 2], true), engine(2, &[0, 1], true), engine(3, &[0, 1, 2], false), silent(4, false)];
    let plan = run(5, Some(5), &members);
    assert_eq!(plan.step, ScaleStep::AwaitJoin { pods: vec!["demo-3".into(), "demo-4".into()] }, "{plan:#?}");
    assert!(plan.peer_updates.is_empty(), "nobody lists a syncing pod: {plan:#?}");
    assert_eq!(plan.config_peers, [0, 1, 2], "{plan:#?}");
}

#[test]
fn a_synced_pod_joins_every_peer_list() {
    let members = [engine(0, &[1, 2], true), engine(1, &[0, 2], true), engine(2, &[0, 1], true), engine(3, &[0, 1, 2], true), engine(4, &[0, 1, 2], false)];
    let plan = run(5, Some(5), &members);
    assert_eq!(plan.joined, BTreeSet::from([0, 1, 2, 3]), "{plan:#?}");
    for ordinal in 0..3 {
        let expected: Vec<String> = (0..4).filter(|&j| j != ordinal).map(|j| format!("demo-{j}")).collect();
        assert_eq!(update_for(&plan, ordinal), Some(expected), "{plan:#?}");
    }
    assert_eq!(update_for(&plan, 3), None, "demo-3 already lists 0..2: {plan:#?}");
    assert_eq!(
        update_for(&plan, 4),
        Some(vec!["demo-0".into(), "demo-1".into(), "demo-2".into(), "demo-3".into()]),
        "a joining pod lists every joined member: {plan:#?}"
    );
    assert_eq!(plan.peer_updates[0].adds, [3], "{plan:#?}");
    assert_eq!(plan.config_peers, [0, 1, 2, 3], "{plan:#?}");
}

#[test]
fn scale_down_hands_leaving_pods_off_and_keeps_them_listed_until_their_writes_are_merged() {
    let all = |i: u32| (0..5).filter(|&j| j != i).collect::<Vec<_>>();
    let mut members: Vec<MemberState> = (0..5).map(|i| engine(i, &all(i), true)).collect();
    let plan = run_with_endpoints(3, Some(5), &members, &["demo-3"]);
    assert_eq!(plan.step, ScaleStep::HandOffLeaving { pods: vec!["demo-3".into(), "demo-4".into()] }, "{plan:#?}");
    assert_eq!(plan.handoffs, BTreeMap::from([(3, HandoffStep::CloseGate), (4, HandoffStep::CloseGate)]), "{plan:#?}");
    assert!(plan.peer_updates.is_empty(), "nobody drops a leaving pod before its writes are merged: {plan:#?}");
    assert_eq!(plan.statefulset_replicas, 5, "{plan:#?}");
    assert!(!plan.settled());

    // Gates closed long enough ago; demo-3 is still in the Service's endpoints, demo-4 is out.
    for m in &mut members[3..] {
        m.pod.serving = Some(false);
        m.pod.serving_since = Some(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    }
    let plan = run_with_endpoints(3, Some(5), &members, &["demo-3"]);
    assert_eq!(plan.handoffs, BTreeMap::from([(3, HandoffStep::AwaitEndpoints), (4, HandoffStep::Start)]), "{plan:#?}");

    // Both handed off; demo-0 merged demo-3 through its last sequence but lags behind demo-4.
    handed_off(&mut members, 3);
    handed_off(&mut members, 4);
    for w in 0..3 {
        merged(&mut members, w, 3, 9);
        merged(&mut members, w, 4, if w == 0 { 7 } else { 9 });
    }
    let plan = run(3, Some(5), &members);
    assert_eq!(plan.step, ScaleStep::HandOffLeaving { pods: vec!["demo-4".into()] }, "{plan:#?}");
    assert_eq!(plan.handoffs[&4], HandoffStep::AwaitPeers { last_seq: 9, behind: vec!["demo-0".into()] }, "{plan:#?}");
    assert_eq!(update_for(&plan, 0), Some(vec!["demo-1".into(), "demo-2".into(), "demo-4".into()]), "demo-3 is merged and goes, demo-4 stays: {plan:#?}");
}

#[test]
fn scale_down_removes_leaving_pods_from_peer_lists_before_shrinking() {
    let all = |i: u32| (0..5).filter(|&j| j != i).collect::<Vec<_>>();
    let mut members: Vec<MemberState> = (0..5).map(|i| engine(i, &all(i), true)).collect();
    for leaving in [3, 4] {
        handed_off(&mut members, leaving);
        for w in 0..3 {
            merged(&mut members, w, leaving as u32, 9);
        }
    }
    let plan = run(3, Some(5), &members);
    assert!(plan.handoffs.values().all(HandoffStep::complete), "{plan:#?}");
    assert_eq!(plan.step, ScaleStep::RemoveLeaving { pods: vec!["demo-3".into(), "demo-4".into()] }, "{plan:#?}");
    assert_eq!(plan.statefulset_replicas, 5, "the StatefulSet keeps the leaving pods for now: {plan:#?}");
    assert_eq!(plan.leaving, BTreeSet::from([3, 4]), "{plan:#?}");
    assert_eq!(update_for(&plan, 0), Some(vec!["demo-1".into(), "demo-2".into()]), "{plan:#?}");
    assert_eq!(plan.peer_updates.iter().find(|u| u.ordinal == 0).map(|u| u.removes.clone()), Some(vec![3, 4]), "{plan:#?}");
    assert!(update_for(&plan, 3).is_none() && update_for(&plan, 4).is_none(), "leaving pods are left alone: {plan:#?}");
    assert_eq!(plan.config_peers, [0, 1, 2], "{plan:#?}");
}

#[test]
fn scale_down_shrinks_once_no_remaining_member_lists_a_leaving_pod() {
    let members = [engine(0, &[1, 2], true), engine(1, &[0, 2], true), engine(2, &[0, 1], true), engine(3, &[0, 1, 2, 4], true), silent(4, false)];
    let plan = run(3, Some(5), &members);
    assert_eq!(plan.step, ScaleStep::ScaleDown { from: 5, to: 3 }, "{plan:#?}");
    assert_eq!(plan.statefulset_replicas, 3, "{plan:#?}");
    assert!(plan.peer_updates.is_empty(), "{plan:#?}");
}

#[test]
fn scale_down_waits_for_every_remaining_engine_to_answer() {
    let members = [engine(0, &[1, 2], true), silent(1, true), engine(2, &[0, 1], true), engine(3, &[0, 1, 2], true)];
    let plan = run(3, Some(4), &members);
    assert_eq!(plan.step, ScaleStep::AwaitPeerRemoval { unanswered: vec!["demo-1".into()] }, "{plan:#?}");
    assert_eq!(plan.statefulset_replicas, 4, "{plan:#?}");
    // A remaining pod without an IP is not running, so it lists nobody: no need to wait.
    let members = [engine(0, &[1, 2], true), silent(1, false), engine(2, &[0, 1], true), engine(3, &[0, 1, 2], true)];
    assert_eq!(run(3, Some(4), &members).step, ScaleStep::ScaleDown { from: 4, to: 3 });
}

#[test]
fn stale_and_foreign_peers_are_replaced_by_the_joined_members() {
    let names = names();
    let mut restarted = engine(1, &[0], true);
    if let Ok(status) = restarted.status.as_mut() {
        status.peers.push(PeerStatus { peer: Some(Peer { host: "10.1.2.3".into(), port: 16379 }), ..PeerStatus::default() });
    }
    let members = [engine(0, &[1, 2], true), restarted, engine(2, &[0, 1], true)];
    let endpoints = BTreeSet::new();
    let plan = plan(&PlanInput {
        names: &names,
        desired: 3,
        statefulset_replicas: Some(3),
        members: &members,
        endpoints: &endpoints,
        now: k8s_openapi::jiff::Timestamp::now(),
    });
    assert_eq!(update_for(&plan, 1), Some(vec!["demo-0".into(), "demo-2".into()]), "{plan:#?}");
    assert_eq!(plan.peer_updates.len(), 1, "{plan:#?}");
}

#[test]
fn nobody_answering_keeps_the_size_and_assumes_the_existing_members() {
    let plan = run(3, Some(3), &[silent(0, true), silent(1, true), silent(2, false)]);
    assert_eq!(plan.statefulset_replicas, 3, "{plan:#?}");
    assert_eq!(plan.config_peers, [0, 1, 2], "{plan:#?}");
    assert!(plan.peer_updates.is_empty(), "{plan:#?}");
}

#[test]
fn dns_names_match_with_a_trailing_dot_and_any_case() {
    let mut e = engine(0, &[], true);
    if let Ok(status) = e.status.as_mut() {
        status.peers = vec![
            PeerStatus { peer: Some(Peer { host: "DEMO-1.demo-headless.cache.svc.cluster.local.".into(), port: 16379 }), ..PeerStatus::default() },
            PeerStatus { peer: Some(peer_of(&names(), 2)), ..PeerStatus::default() },
        ];
    }
    let plan = run(3, Some(3), &[e, engine(1, &[0, 2], true), engine(2, &[0, 1], true)]);
    assert!(plan.settled(), "{plan:#?}");
}
