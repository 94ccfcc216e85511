//! A node's whole keyspace as plain values, so that nodes (and a model) can be compared.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Every key of a database, by name.
pub type Keyspace = BTreeMap<Vec<u8>, Entry>;

/// One key: its value and its absolute expiry (Unix ms, from `PEXPIRETIME`), if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub value: Value,
    pub expire_at_ms: Option<i64>,
}

/// A key's value, by type. Containers are never empty (an empty one is no key).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
    /// Member to score.
    ZSet(BTreeMap<Vec<u8>, f64>),
}

impl Value {
    /// Whether this is an empty container (which Redis reports as no key at all).
    pub fn is_empty(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::List(l) => l.is_empty(),
            Value::Hash(h) => h.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::ZSet(z) => z.is_empty(),
        }
    }
}

/// Bytes shown as text where they are text.
pub struct Show<'a>(pub &'a [u8]);

impl fmt::Display for Show<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.0))
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<'a>(f: &mut fmt::Formatter<'_>, items: impl Iterator<Item = (&'a [u8], Option<String>)>) -> fmt::Result {
            let shown: Vec<String> = items.map(|(k, v)| v.map_or_else(|| Show(k).to_string(), |v| format!("{}={v}", Show(k)))).collect();
            write!(f, "{}", shown.join(", "))
        }
        match self {
            Value::Str(s) => write!(f, "string {}", Show(s)),
            Value::List(l) => {
                write!(f, "list [")?;
                list(f, l.iter().map(|v| (v.as_slice(), None)))?;
                write!(f, "]")
            }
            Value::Hash(h) => {
                write!(f, "hash {{")?;
                list(f, h.iter().map(|(k, v)| (k.as_slice(), Some(Show(v).to_string()))))?;
                write!(f, "}}")
            }
            Value::Set(s) => {
                write!(f, "set {{")?;
                list(f, s.iter().map(|v| (v.as_slice(), None)))?;
                write!(f, "}}")
            }
            Value::ZSet(z) => {
                write!(f, "zset {{")?;
                list(f, z.iter().map(|(k, v)| (k.as_slice(), Some(v.to_string()))))?;
                write!(f, "}}")
            }
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.expire_at_ms {
            Some(at) => write!(f, "{} (expires at {at} ms)", self.value),
            None => write!(f, "{}", self.value),
        }
    }
}

/// Compares two keyspaces; expiry deadlines within `ttl_tolerance_ms` of each other count as
/// equal. Returns one line per differing key (at most `limit`, then a count), empty if equal.
pub fn diff(left_name: &str, left: &Keyspace, right_name: &str, right: &Keyspace, ttl_tolerance_ms: i64, limit: usize) -> Vec<String> {
    let keys: BTreeSet<&Vec<u8>> = left.keys().chain(right.keys()).collect();
    let mut lines = Vec::new();
    let mut differing = 0;
    for key in keys {
        let (l, r) = (left.get(key), right.get(key));
        let same = match (l, r) {
            (Some(l), Some(r)) => l.value == r.value && expiry_close(l.expire_at_ms, r.expire_at_ms, ttl_tolerance_ms),
            (None, None) => true,
            _ => false,
        };
        if same {
            continue;
        }
        differing += 1;
        if lines.len() < limit {
            let show = |e: Option<&Entry>| e.map_or_else(|| "(absent)".to_owned(), Entry::to_string);
            lines.push(format!("key {}: {left_name} has {}, {right_name} has {}", Show(key), show(l), show(r)));
        }
    }
    if differing > lines.len() {
        lines.push(format!("... and {} more differing keys", differing - lines.len()));
    }
    lines
}

fn expiry_close(a: Option<i64>, b: Option<i64>, tolerance: i64) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= tolerance,
        (None, None) => true,
        _ => false,
    }
}
