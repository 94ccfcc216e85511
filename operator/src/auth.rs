//! The engines' password: read from the generated Secret `<name>-auth` when it exists (so it is
//! generated once and never rotated), generated when it does not, or read from the user's
//! Secret. The operator needs it to call the engines' admin API.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rand::distr::{Alphanumeric, SampleString};

use crate::validate::AuthSource;

/// Length of a generated password (alphanumeric, ~190 bits).
pub const GENERATED_PASSWORD_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("failed to read Secret {name}: {source}")]
    Read { name: String, source: kube::Error },
}

/// The password and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Password {
    /// The generated Secret's (existing, or new and about to be applied).
    Generated(String),
    /// The user's Secret's.
    Referenced(String),
    /// The user's Secret or key does not exist (yet): pods cannot start, engines cannot be
    /// called.
    Missing { secret: String, key: String },
}

impl Password {
    pub fn value(&self) -> Option<&str> {
        match self {
            Password::Generated(p) | Password::Referenced(p) => Some(p),
            Password::Missing { .. } => None,
        }
    }

    /// The password the generated Secret must hold, if the operator manages one.
    pub fn generated(&self) -> Option<&str> {
        match self {
            Password::Generated(p) => Some(p),
            _ => None,
        }
    }
}

pub fn generate_password() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), GENERATED_PASSWORD_LEN)
}

/// Reads (or generates) the password.
pub async fn password(secrets: &Api<Secret>, auth: &AuthSource) -> Result<Password, AuthError> {
    let name = auth.secret_name();
    let secret = secrets.get_opt(name).await.map_err(|source| AuthError::Read { name: name.to_string(), source })?;
    let value = secret.and_then(|s| s.data).and_then(|d| d.get(auth.key()).map(|b| String::from_utf8_lossy(&b.0).into_owned())).filter(|p| !p.is_empty());
    Ok(match (auth, value) {
        (AuthSource::Generated { .. }, Some(existing)) => Password::Generated(existing),
        (AuthSource::Generated { .. }, None) => Password::Generated(generate_password()),
        (AuthSource::Referenced { .. }, Some(value)) => Password::Referenced(value),
        (AuthSource::Referenced { secret_name, key }, None) => Password::Missing { secret: secret_name.clone(), key: key.clone() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_passwords_are_long_and_differ() {
        let (a, b) = (generate_password(), generate_password());
        assert_eq!(a.len(), GENERATED_PASSWORD_LEN);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, b);
    }
}
