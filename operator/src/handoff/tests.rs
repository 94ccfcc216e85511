//! The handoff steps from observed states: each gate of the sequence holds the pod back until
//! its fact is observed.

use std::collections::BTreeMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::*;
use crate::mesh::peer_of;
use crate::test_support::{engine, full_mesh, names};

/// Member `ordinal` of a full 3-mesh with its gate, handoff phase and last sequence.
fn leaving(serving: Option<bool>, handoff: &str, last_seq: u64) -> MemberState {
    let mut m = full_mesh(3).remove(2);
    m.pod.serving = serving;
    m.pod.serving_since = Some(Timestamp::UNIX_EPOCH);
    m.pod.containers_ready = true;
    if let Ok(s) = &mut m.status {
        s.handoff = handoff.to_string();
        s.run_id = "run-2".to_string();
        s.last_seq = last_seq;
        s.draining = handoff == "done";
    }
    m
}

/// A witness that merged run `run` of pod 2 through `applied`.
fn witness(ordinal: u32, run: &str, applied: u64) -> MemberState {
    let mut m = engine(ordinal, &[0, 1, 2], true);
    if let Ok(s) = &mut m.status {
        for p in &mut s.peers {
            if p.peer.as_ref().is_some_and(|peer| *peer == peer_of(&names(), 2)) {
                p.synced_run_id = run.to_string();
                p.applied_seq = applied;
            }
        }
    }
    m
}

#[test]
fn each_step_waits_for_its_fact() {
    let names = names();
    let (w0, w1) = (witness(0, "run-2", 40), witness(1, "run-2", 42));
    let witnesses = [&w0, &w1];
    assert_eq!(step(&names, &leaving(Some(true), "serving", 42), true, &witnesses, false, Timestamp::now()), HandoffStep::CloseGate);
    assert_eq!(
        step(&names, &leaving(None, "serving", 42), true, &witnesses, false, Timestamp::now()),
        HandoffStep::CloseGate,
        "a pod without the condition is open"
    );
    assert_eq!(step(&names, &leaving(Some(false), "serving", 42), true, &witnesses, false, Timestamp::now()), HandoffStep::AwaitEndpoints);
    assert_eq!(step(&names, &leaving(Some(false), "serving", 42), false, &witnesses, false, Timestamp::now()), HandoffStep::Start);
    assert!(matches!(step(&names, &leaving(Some(false), "closing", 42), false, &witnesses, false, Timestamp::now()), HandoffStep::AwaitClients { .. }));
    assert_eq!(
        step(&names, &leaving(Some(false), "done", 42), false, &witnesses, false, Timestamp::now()),
        HandoffStep::AwaitPeers { last_seq: 42, behind: vec!["demo-0".to_string()] },
        "demo-0 merged only through 40"
    );
    let caught_up = witness(0, "run-2", 42);
    assert_eq!(step(&names, &leaving(Some(false), "done", 42), false, &[&caught_up, &w1], false, Timestamp::now()), HandoffStep::Complete);
}

#[test]
fn the_engine_keeps_serving_until_the_endpoints_change_has_propagated() {
    let names = names();
    let witness = witness(0, "run-2", 0);
    let mut m = leaving(Some(false), "serving", 42);
    let closed = Timestamp::now();
    m.pod.serving_since = Some(closed);
    assert_eq!(step(&names, &m, false, &[&witness], false, closed + SignedDuration::from_secs(2)), HandoffStep::AwaitPropagation);
    assert_eq!(step(&names, &m, false, &[&witness], false, closed + PROPAGATION), HandoffStep::Start);
}

#[test]
fn a_witness_synced_from_another_run_does_not_count() {
    // A witness that holds a sync of the pod's previous process (before a restart) has not
    // merged this run's writes, however high its sequence.
    let names = names();
    let stale = witness(0, "run-1", 1000);
    let w1 = witness(1, "run-2", 42);
    let step = step(&names, &leaving(Some(false), "done", 42), false, &[&stale, &w1], false, Timestamp::now());
    assert_eq!(step, HandoffStep::AwaitPeers { last_seq: 42, behind: vec!["demo-0".to_string()] });
}

#[test]
fn a_silent_witness_holds_the_handoff_and_a_dead_pod_completes_it() {
    let names = names();
    let silent = crate::test_support::silent(0, true);
    let w1 = witness(1, "run-2", 42);
    assert_eq!(
        step(&names, &leaving(Some(false), "done", 42), false, &[&silent, &w1], false, Timestamp::now()),
        HandoffStep::AwaitPeers { last_seq: 42, behind: vec!["demo-0".to_string()] }
    );
    let mut dead = crate::test_support::silent(2, true);
    dead.pod.serving = Some(false);
    dead.pod.serving_since = Some(Timestamp::UNIX_EPOCH);
    assert_eq!(step(&names, &dead, false, &[&w1], false, Timestamp::now()), HandoffStep::Complete, "not ready and silent: nothing to hand off");
    dead.pod.containers_ready = true;
    assert!(matches!(step(&names, &dead, false, &[&w1], false, Timestamp::now()), HandoffStep::AwaitEngine { .. }), "ready containers may still hold clients");
}

#[test]
fn actions_move_leaving_pods_on_and_open_every_other_pod() {
    let mut members = full_mesh(4);
    members[0].pod.serving = Some(true);
    members[1].pod.serving = None;
    members[2].pod.serving = Some(false);
    if let Ok(s) = &mut members[2].status {
        s.handoff = "done".into();
    }
    members[3].pod.serving = Some(true);
    let leaving = BTreeMap::from([(3, HandoffStep::CloseGate)]);
    let actions = actions(&members, &leaving);
    assert_eq!(
        actions,
        [
            HandoffAction::SetGate { ordinal: 1, pod: "demo-1".into(), serving: true },
            HandoffAction::SetGate { ordinal: 2, pod: "demo-2".into(), serving: true },
            HandoffAction::SetGate { ordinal: 3, pod: "demo-3".into(), serving: false },
            HandoffAction::Cancel { ordinal: 2, pod: "demo-2".into() },
        ],
        "demo-2 is not leaving any more: its handoff is cancelled and its gate opened"
    );
    let started = actions_for(&members, 3, HandoffStep::Start);
    assert!(started.contains(&HandoffAction::Start { ordinal: 3, pod: "demo-3".into() }), "{started:?}");
    let waiting = actions_for(&members, 3, HandoffStep::AwaitPeers { last_seq: 1, behind: vec![] });
    assert!(!waiting.iter().any(|a| matches!(a, HandoffAction::SetGate { ordinal: 3, .. } | HandoffAction::Start { ordinal: 3, .. })), "{waiting:?}");
}

fn actions_for(members: &[MemberState], ordinal: u32, step: HandoffStep) -> Vec<HandoffAction> {
    actions(members, &BTreeMap::from([(ordinal, step)]))
}

#[test]
fn terminating_pods_are_left_alone() {
    let mut members = full_mesh(2);
    members[1].pod.deleting = true;
    members[1].pod.serving = None;
    members[0].pod.serving = Some(true);
    assert!(actions(&members, &BTreeMap::new()).is_empty());
}

/// With persistence, a pod an upgrade replaces is released only after a snapshot that started
/// once it refused writes and covers its last write; a failed one is asked for again.
#[test]
fn a_replaced_pod_snapshots_after_its_peers_confirmed() {
    let names = names();
    let (w0, w1) = (witness(0, "run-2", 42), witness(1, "run-2", 42));
    let with_snapshot = |snapshot: Option<keymesh_proto::SnapshotStatus>| {
        let mut m = leaving(Some(false), "done", 42);
        if let Ok(s) = &mut m.status {
            s.snapshot = snapshot;
        }
        m
    };
    let enabled = keymesh_proto::SnapshotStatus { enabled: true, last_ok: true, ..Default::default() };
    let run = |m: &MemberState, snapshot: bool| step(&names, m, false, &[&w0, &w1], snapshot, Timestamp::now());

    assert_eq!(run(&with_snapshot(Some(enabled.clone())), false), HandoffStep::Complete, "scale down: no snapshot");
    assert_eq!(run(&with_snapshot(Some(enabled.clone())), true), HandoffStep::Snapshot { error: None }, "none yet");
    let before_handoff = keymesh_proto::SnapshotStatus { last_save_unix_ms: 5, last_save_seq: 42, last_save_after_handoff: false, ..enabled.clone() };
    assert_eq!(run(&with_snapshot(Some(before_handoff)), true), HandoffStep::Snapshot { error: None }, "a snapshot from before the handoff does not count");
    let running = keymesh_proto::SnapshotStatus { in_progress: true, ..enabled.clone() };
    assert_eq!(run(&with_snapshot(Some(running)), true), HandoffStep::AwaitSnapshot);
    let failed = keymesh_proto::SnapshotStatus { last_ok: false, last_error: "No space left on device".into(), ..enabled.clone() };
    assert_eq!(run(&with_snapshot(Some(failed)), true), HandoffStep::Snapshot { error: Some("No space left on device".into()) });
    let done = keymesh_proto::SnapshotStatus { last_save_unix_ms: 9, last_save_seq: 42, last_save_after_handoff: true, ..enabled.clone() };
    assert_eq!(run(&with_snapshot(Some(done)), true), HandoffStep::Complete);
    let short = keymesh_proto::SnapshotStatus { last_save_unix_ms: 9, last_save_seq: 41, last_save_after_handoff: true, ..enabled.clone() };
    assert_eq!(run(&with_snapshot(Some(short)), true), HandoffStep::Snapshot { error: None }, "it must cover the last write");
    let off = keymesh_proto::SnapshotStatus { enabled: false, ..Default::default() };
    assert_eq!(run(&with_snapshot(Some(off)), true), HandoffStep::Complete, "an engine without a volume has nothing to save");

    let members = vec![with_snapshot(Some(enabled))];
    assert_eq!(actions_for(&members, 2, HandoffStep::Snapshot { error: None }), [HandoffAction::Save { ordinal: 2, pod: "demo-2".into() }]);
}
