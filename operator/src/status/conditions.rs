//! Standard `metav1.Condition`s whose `lastTransitionTime` moves only when their status moves,
//! so "since when is the mesh disconnected" stays answerable across reconciles.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition's desired state, before its transition time is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionState {
    pub type_: &'static str,
    pub status: Status,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }

    pub fn from_bool(value: bool) -> Status {
        if value {
            Status::True
        } else {
            Status::False
        }
    }
}

impl ConditionState {
    pub fn new(type_: &'static str, status: Status, reason: &'static str, message: impl Into<String>) -> Self {
        ConditionState { type_, status, reason, message: message.into() }
    }
}

/// The conditions to write: each keeps its previous `lastTransitionTime` when its status did
/// not change, and takes `now` when it did (or is new).
pub fn merge(previous: &[Condition], states: Vec<ConditionState>, generation: Option<i64>, now: Timestamp) -> Vec<Condition> {
    states
        .into_iter()
        .map(|state| {
            let status = state.status.as_str();
            let last_transition_time =
                previous.iter().find(|c| c.type_ == state.type_ && c.status == status).map(|c| c.last_transition_time.clone()).unwrap_or(Time(now));
            Condition {
                type_: state.type_.to_string(),
                status: status.to_string(),
                reason: state.reason.to_string(),
                message: state.message,
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let t0: Timestamp = "2024-01-01T00:00:00Z".parse().expect("timestamp");
        let t1: Timestamp = "2024-01-01T00:05:00Z".parse().expect("timestamp");
        let first = merge(&[], vec![ConditionState::new("Ready", Status::False, "PodsNotReady", "0/3")], Some(1), t0);
        assert_eq!(first[0].last_transition_time, Time(t0));
        let same = merge(&first, vec![ConditionState::new("Ready", Status::False, "PodsNotReady", "2/3")], Some(2), t1);
        assert_eq!(same[0].last_transition_time, Time(t0), "a new message is not a transition: {same:?}");
        assert_eq!((same[0].message.as_str(), same[0].observed_generation), ("2/3", Some(2)));
        let flipped = merge(&same, vec![ConditionState::new("Ready", Status::True, "AllPodsReady", "3/3")], Some(2), t1);
        assert_eq!(flipped[0].last_transition_time, Time(t1), "{flipped:?}");
    }
}
