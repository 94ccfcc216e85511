//! The upgrade step (DESIGN.md, "Rolling upgrade"): any change of the pod template (version,
//! image, resources, restart-only engine settings) replaces the pods one at a time, highest
//! ordinal first, without losing an acknowledged write:
//!
//! - **Revisions** are pod-template hashes (`build::TEMPLATE_HASH_ANNOTATION`). The target is
//!   the spec's template, or, while a failed upgrade rolls back, the previous one (taken from
//!   the StatefulSet's ControllerRevision history, `history`).
//! - **The partition** of the StatefulSet's `RollingUpdate` strategy is the lever: pods below
//!   it keep the current revision even when they are recreated for another reason (a crash, a
//!   node loss), so the template never runs ahead of the roll. A new target freezes it at the
//!   top; it moves down past a pod only once that pod is *released*: handed off
//!   (`crate::handoff`: out of the Service, clients moved, writes refused, every other member
//!   confirms it merged the pod's writes through its last sequence) — or, for a pod that serves
//!   nothing (not ready, engine silent), at once. The StatefulSet controller then deletes the
//!   pod and creates it again from the new template; the new pod is not ready until it has
//!   full-synced from its peers.
//! - **Gates** before a pod's handoff starts: the scale plan is settled, the upgrade is not
//!   paused, and every member is ready and synced with every mesh link up and no lag.
//! - **Surge**: with one replica (or `upgrade.surge`), one extra pod of the new revision joins
//!   first (`surge`), so the pod being replaced is never the only copy of the data; it leaves
//!   through the scale-down handoff once every other pod runs the new revision.
//! - **Failure**: a pod of the new revision that cannot start its image, restarts three times,
//!   or is not ready within `readyTimeoutSeconds` fails the upgrade (`UpgradeFailed`). With
//!   `autoRollback` the pods on the failed revision go back to the previous one; the spec that
//!   failed is not retried until it changes, and a changed spec is always accepted.
//!
//! `intent` and `plan` are pure (observed state in, decisions out), tested like
//! `mesh::plan`; `history` reads ControllerRevisions.

mod history;
mod plan;

pub use history::{find_template, HistoryError};
pub use plan::{intent, plan, Intent, UpgradeInput, UpgradePlan};

#[cfg(test)]
mod plan_tests;
