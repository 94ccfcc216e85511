//! The `TLSReady` condition and `status.tls`, while `spec.tls` is on: the certificate the pods
//! serve, how many pods serve it, and whether the mesh streams over mutual TLS yet.

use crate::api::{condition_types as types, TlsStatus};
use crate::mesh::MemberState;
use crate::status::conditions::{ConditionState, Status};
use crate::tls::{TlsState, TlsStep};
use crate::validate::ValidatedSpec;

/// The engines' directive that says whether a member streams over mutual TLS.
pub const TLS_REPLICATION: &str = "tls-replication";

/// `None` when TLS is off.
pub fn tls_status(spec: &ValidatedSpec, tls: &TlsStep, members: &[MemberState]) -> Option<(ConditionState, Option<TlsStatus>)> {
    let settings = spec.tls.as_ref()?;
    let material = match &tls.state {
        TlsState::Off => return None,
        TlsState::Waiting { reason, message } => {
            let message = format!("{message}; the pods keep serving without TLS until it exists");
            return Some((ConditionState::new(types::TLS_READY, Status::False, reason, message), None));
        }
        TlsState::Ready(material) => material,
    };
    let desired = spec.replicas.unsigned_abs();
    let ours: Vec<&MemberState> = members.iter().filter(|m| m.member.ordinal < desired).collect();
    let mounted = ours.iter().filter(|m| m.pod.tls).count();
    let streaming = ours.iter().filter(|m| m.node_status().is_some_and(|s| s.config.get(TLS_REPLICATION).map(String::as_str) == Some("yes"))).count();
    let replication = settings.replication && streaming == desired as usize;
    let info = &material.info;
    let status = TlsStatus {
        secret_name: material.secret_name.clone(),
        serial: info.serial.clone(),
        not_after: info.not_after.to_string(),
        renew_at: material.renew_at.map(|t| t.to_string()),
        pods: i32::try_from(mounted).unwrap_or(i32::MAX),
        replication,
    };
    let certificate = format!("certificate {} from Secret {}, valid until {}", info.serial, material.secret_name, info.not_after);
    let condition = if mounted < desired as usize {
        ConditionState::new(
            types::TLS_READY,
            Status::False,
            "Rolling",
            format!("{mounted}/{desired} pods serve TLS ({certificate}); the others are replaced one at a time"),
        )
    } else if settings.replication && !replication {
        ConditionState::new(
            types::TLS_READY,
            Status::False,
            "MeshSwitching",
            format!("every pod serves TLS; {streaming}/{desired} stream over mutual TLS so far"),
        )
    } else {
        let mesh = if settings.replication { "; the mesh streams over mutual TLS" } else { "; the mesh streams in plain text (spec.tls.replication is false)" };
        ConditionState::new(types::TLS_READY, Status::True, "CertificateValid", format!("every pod serves TLS with {certificate}{mesh}"))
    };
    Some((condition, Some(status)))
}
