//! The node's one password check. A client's `AUTH` (and `HELLO ... AUTH`), a peer's mesh
//! subscription (its `masterauth`) and the operator's admin API calls (`authorization: Bearer`)
//! are all compared with `requirepass` here, in constant time (`subtle`): how long a refusal
//! takes says nothing about how much of the password was right.

use subtle::ConstantTimeEq;

/// Whether `given` opens a node whose `requirepass` is `requirepass` (empty: no password is
/// set, and everyone is let in).
pub fn password_ok(requirepass: &str, given: &[u8]) -> bool {
    requirepass.is_empty() || bool::from(requirepass.as_bytes().ct_eq(given))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_password_opens_a_protected_node() {
        assert!(password_ok("", b""), "no password set");
        assert!(password_ok("", b"anything"), "no password set");
        assert!(password_ok("s3cret", b"s3cret"));
        for wrong in [&b""[..], b"s3cre", b"s3cret!", b"S3cret", b"s3creT"] {
            assert!(!password_ok("s3cret", wrong), "{:?}", String::from_utf8_lossy(wrong));
        }
    }
}
