//! The generated auth Secret `<name>-auth`. The password is an input (the controller reads the
//! existing Secret's, or generates one only when there is none), so re-reconciling never
//! rotates it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;

use super::{child_metadata, BuildError, BuildInput};
use crate::validate::{AuthSource, GENERATED_SECRET_KEY};

/// `None` when the user references their own Secret (the operator never writes that one).
pub fn build_secret(input: &BuildInput) -> Result<Option<Secret>, BuildError> {
    let (AuthSource::Generated { secret_name }, Some(password)) = (&input.spec.auth, input.generated_password) else {
        return Ok(None);
    };
    Ok(Some(Secret {
        metadata: child_metadata(input, secret_name.clone())?,
        type_: Some("Opaque".to_string()),
        data: Some(BTreeMap::from([(GENERATED_SECRET_KEY.to_string(), ByteString(password.as_bytes().to_vec()))])),
        ..Secret::default()
    }))
}

#[cfg(test)]
mod tests {
    use crate::build::fixture::{build, yaml, Fixture};

    #[test]
    fn a_generated_secret_holds_the_given_password() {
        let children = build("{}");
        let secret = children.secret.expect("a generated Secret without auth.secretRef");
        assert_eq!(secret.metadata.name.as_deref(), Some("demo-auth"), "{}", yaml(&secret));
        let password = secret.data.as_ref().and_then(|d| d.get("password")).map(|b| b.0.clone());
        assert_eq!(password.as_deref(), Some(&b"s3cret-pw"[..]), "{}", yaml(&secret));
        assert!(secret.metadata.owner_references.is_some(), "{}", yaml(&secret));
    }

    #[test]
    fn a_referenced_secret_is_not_built() {
        let fixture = Fixture::new("auth: {secretRef: {name: creds}}");
        assert!(fixture.build().secret.is_none());
    }
}
