//! The node's tuning state, shared by every tuner on the node (one per CacheCluster that tunes
//! it) through a file on the node: for each setting, the value it had before any tuner touched
//! it and which cluster claims which value. Every change is a read-modify-write under an
//! exclusive lock of `state.lock`, and the file is replaced atomically (temp file, rename).
//!
//! Rules (pure, in `claim` and `release`): a cluster may claim a setting unless another cluster
//! claims a different value (a conflict, reported, never fought over); the first claim records
//! the original value; when the last claim goes, the original value is restored.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One setting's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The value before any tuner changed it.
    pub original: String,
    /// Owner (`<namespace>/<name>`) → the value it wants.
    pub claims: BTreeMap<String, String>,
}

/// Every setting's record, by setting key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    pub settings: BTreeMap<String, Entry>,
}

/// What a claim decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The owner claims the value now; write it.
    Granted,
    /// Other owners want other values: `(owner, value)`.
    Conflict(Vec<(String, String)>),
}

/// What releasing a claim asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Nobody claims the setting any more: restore this value.
    Restore(String),
    /// Other owners still claim it; leave it.
    Keep,
    /// The owner had no claim.
    Nothing,
}

impl NodeState {
    /// `owner` asks for `value` of `key`, whose value is `current` now.
    pub fn claim(&mut self, key: &str, owner: &str, value: &str, current: &str) -> Claim {
        let entry = self.settings.entry(key.to_string()).or_insert_with(|| Entry { original: current.to_string(), claims: BTreeMap::new() });
        let others: Vec<(String, String)> = entry.claims.iter().filter(|(o, v)| *o != owner && *v != value).map(|(o, v)| (o.clone(), v.clone())).collect();
        if !others.is_empty() {
            if entry.claims.is_empty() {
                self.settings.remove(key);
            }
            return Claim::Conflict(others);
        }
        entry.claims.insert(owner.to_string(), value.to_string());
        Claim::Granted
    }

    /// `owner` gives up its claim on `key`.
    pub fn release(&mut self, key: &str, owner: &str) -> Release {
        let Some(entry) = self.settings.get_mut(key) else { return Release::Nothing };
        if entry.claims.remove(owner).is_none() {
            return Release::Nothing;
        }
        if entry.claims.is_empty() {
            let original = entry.original.clone();
            self.settings.remove(key);
            Release::Restore(original)
        } else {
            Release::Keep
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("failed to {what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("the node's tuning state {path} is not valid: {source}")]
    Corrupt { path: PathBuf, source: serde_json::Error },
}

/// The state directory on the node (a hostPath).
#[derive(Debug, Clone)]
pub struct StateDir(pub PathBuf);

impl StateDir {
    /// Runs `f` on the state under the node-wide lock and saves what it leaves.
    pub fn update<T>(&self, f: impl FnOnce(&mut NodeState) -> T) -> Result<T, StateError> {
        fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StateError {
            let path = path.to_path_buf();
            move |source| StateError::Io { what, path, source }
        }
        std::fs::create_dir_all(&self.0).map_err(io("create", &self.0))?;
        let lock_path = self.0.join("state.lock");
        let lock = File::create(&lock_path).map_err(io("create", &lock_path))?;
        lock.lock().map_err(io("lock", &lock_path))?;
        let path = self.0.join("state.json");
        let mut state = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|source| StateError::Corrupt { path: path.clone(), source })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => NodeState::default(),
            Err(source) => return Err(StateError::Io { what: "read", path, source }),
        };
        let out = f(&mut state);
        let temp = self.0.join("state.json.tmp");
        let text = serde_json::to_string_pretty(&state).map_err(|source| StateError::Corrupt { path: path.clone(), source })?;
        std::fs::write(&temp, text).map_err(io("write", &temp))?;
        std::fs::rename(&temp, &path).map_err(io("replace", &path))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claim_records_the_original_and_the_last_release_restores_it() {
        let mut state = NodeState::default();
        assert_eq!(state.claim("thp", "ns/a", "never", "madvise"), Claim::Granted);
        assert_eq!(state.claim("thp", "ns/b", "never", "never"), Claim::Granted, "the same value is no conflict");
        assert_eq!(state.settings["thp"].original, "madvise", "the value before any tuner");
        assert_eq!(state.release("thp", "ns/a"), Release::Keep);
        assert_eq!(state.release("thp", "ns/b"), Release::Restore("madvise".into()));
        assert!(state.settings.is_empty());
        assert_eq!(state.release("thp", "ns/b"), Release::Nothing);
    }

    #[test]
    fn a_different_value_is_a_conflict_and_changes_nothing() {
        let mut state = NodeState::default();
        state.claim("thp", "ns/a", "never", "madvise");
        assert_eq!(state.claim("thp", "ns/b", "madvise", "never"), Claim::Conflict(vec![("ns/a".into(), "never".into())]));
        assert_eq!(state.settings["thp"].claims.len(), 1, "the refused claim is not recorded");
        assert_eq!(state.claim("thp", "ns/a", "madvise", "never"), Claim::Granted, "an owner may change its own value");
    }

    #[test]
    fn the_state_file_is_shared_under_a_lock() {
        let dir = StateDir(std::env::temp_dir().join(format!("keymesh-tuner-state-{}", std::process::id())));
        dir.update(|s| s.claim("thp", "ns/a", "never", "madvise")).expect("first update");
        let seen = dir.update(|s| s.clone()).expect("second update");
        assert_eq!(seen.settings["thp"].claims["ns/a"], "never");
        std::fs::remove_dir_all(&dir.0).expect("cleanup");
    }
}
