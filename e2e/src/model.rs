//! The keyspace a KeyMesh cluster must converge to after a sequence of acknowledged writes,
//! made on any nodes, on any side of any partitions.
//!
//! The model replays the writes in the order they were acknowledged, as one Redis would. That
//! is exactly KeyMesh's merge semantics (DESIGN.md, "Merge semantics") when writes are spaced
//! a few milliseconds apart on one machine, because then acknowledgement order is HLC order:
//! strings, hash fields, set and sorted-set members and expiry are last-write-wins registers,
//! a counter is the sum of every increment since the last `DEL`, whichever side made it, and a
//! `DEL` hides everything older than it (nothing deleted comes back).
//!
//! A removal is a removal whatever the node found: a `DEL`, `HDEL`, `SREM` or `ZREM` that
//! answered 0 because its node never saw the write it removes (made across the partition, or
//! not arrived yet) still removes it everywhere, as every write command is a versioned write
//! (DESIGN.md, Merge semantics).
//!
//! Where the spec leaves the outcome open, the key becomes *indeterminate* and is not checked
//! (all nodes must still agree on it): when a node's reply shows its local view disagreed with
//! the global order in a way that changes the result, e.g. an `EXPIRE` on a key the node does
//! not hold yet (a TTL for a missing key is refused, and replicates nothing) or holds but the
//! other side deleted; and when a write's outcome is unknown (the connection failed). A later
//! acknowledged `DEL` (or `SET` of a string) makes the key determinate again, since it
//! dominates everything before it.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::Rng;

use crate::keyspace::{self, Entry, Keyspace, Value};
use crate::resp::Reply;

/// One write of the randomized workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Set { key: Vec<u8>, value: Vec<u8> },
    Del { key: Vec<u8> },
    Expire { key: Vec<u8>, secs: i64 },
    IncrBy { key: Vec<u8>, by: i64 },
    HSet { key: Vec<u8>, field: Vec<u8>, value: Vec<u8> },
    HDel { key: Vec<u8>, field: Vec<u8> },
    SAdd { key: Vec<u8>, member: Vec<u8> },
    SRem { key: Vec<u8>, member: Vec<u8> },
    ZAdd { key: Vec<u8>, member: Vec<u8>, score: i64 },
    ZRem { key: Vec<u8>, member: Vec<u8> },
}

impl Op {
    /// The key the write touches.
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Set { key, .. }
            | Op::Del { key }
            | Op::Expire { key, .. }
            | Op::IncrBy { key, .. }
            | Op::HSet { key, .. }
            | Op::HDel { key, .. }
            | Op::SAdd { key, .. }
            | Op::SRem { key, .. }
            | Op::ZAdd { key, .. }
            | Op::ZRem { key, .. } => key,
        }
    }

    /// Whether the write removes something (a key, field or member).
    pub fn is_removal(&self) -> bool {
        matches!(self, Op::Del { .. } | Op::HDel { .. } | Op::SRem { .. } | Op::ZRem { .. })
    }

    /// The command that performs the write.
    pub fn command(&self) -> Vec<Vec<u8>> {
        let c = |parts: &[&[u8]]| parts.iter().map(|p| p.to_vec()).collect();
        match self {
            Op::Set { key, value } => c(&[b"SET", key, value]),
            Op::Del { key } => c(&[b"DEL", key]),
            Op::Expire { key, secs } => c(&[b"EXPIRE", key, secs.to_string().as_bytes()]),
            Op::IncrBy { key, by } => c(&[b"INCRBY", key, by.to_string().as_bytes()]),
            Op::HSet { key, field, value } => c(&[b"HSET", key, field, value]),
            Op::HDel { key, field } => c(&[b"HDEL", key, field]),
            Op::SAdd { key, member } => c(&[b"SADD", key, member]),
            Op::SRem { key, member } => c(&[b"SREM", key, member]),
            Op::ZAdd { key, member, score } => c(&[b"ZADD", key, score.to_string().as_bytes(), member]),
            Op::ZRem { key, member } => c(&[b"ZREM", key, member]),
        }
    }
}

#[derive(Debug, Clone)]
enum Slot {
    Str(Vec<u8>),
    Counter(i64),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
    ZSet(BTreeMap<Vec<u8>, i64>),
}

/// Why a key is not checked (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unchecked {
    /// A node's reply showed its local view disagreed with the global order in a way that
    /// changes the result.
    ReplyDisagreed,
    /// A write on it got no reply.
    OutcomeUnknown,
    /// A container with an expiry lost its last member: whether the old expiry applies when
    /// the key is re-created depends on how the engine keeps expiry registers. Also when a
    /// member was removed from a container with an expiry that holds members another node
    /// wrote: the removing node may not have seen them, and a container that empties in a
    /// node's view drops its expiry there (Redis deletes an emptied key), which then applies
    /// to the members it had not seen.
    EmptiedWithExpiry,
    /// A node incremented a counter both before and after another node's DEL/SET of it. The
    /// engine's per-origin totals are cumulative (README, "Replication"): if that node had not
    /// seen the DEL yet, its earlier increments still count. Nodes must agree; the value is
    /// not checked.
    CounterSpansDelete,
}

#[derive(Debug, Clone)]
struct ModelEntry {
    slot: Slot,
    expire_at_ms: Option<i64>,
}

/// The expected keyspace; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct Model {
    keys: BTreeMap<Vec<u8>, ModelEntry>,
    indeterminate: BTreeMap<Vec<u8>, Unchecked>,
    applied: usize,
    /// Per counter key: nodes that incremented it before its last DEL/SET (by another node),
    /// and nodes that incremented it since.
    incr_before: BTreeMap<Vec<u8>, BTreeSet<usize>>,
    incr_since: BTreeMap<Vec<u8>, BTreeSet<usize>>,
    /// Per container key: the node that last wrote each member.
    writers: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, usize>>,
}

impl Model {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a write that node answered with `reply`, acknowledged at `acked_at_ms` (Unix ms).
    /// An error reply means the write did not happen.
    pub fn apply(&mut self, node: usize, op: &Op, reply: &Reply, acked_at_ms: i64) {
        if reply.is_error() {
            return;
        }
        self.applied += 1;
        let key = op.key().to_vec();
        self.track_counter_epochs(node, op, &key);
        let predicted = self.predicted_count(op);
        let got = reply.as_int();
        let disagrees = match (predicted, got) {
            // A removal removes whatever its node saw (module docs).
            _ if op.is_removal() => false,
            // Removing what the global order says is already gone is harmless either way...
            (Some(0), Some(1)) => matches!(op, Op::Expire { .. }),
            // ...but a no-op where the global order says something was there leaves it open.
            (Some(p), Some(g)) => p != g,
            _ => false,
        };
        let had_expiry = self.keys.get(&key).is_some_and(|e| e.expire_at_ms.is_some());
        match op {
            Op::Set { value, .. } => {
                self.keys.insert(key.clone(), ModelEntry { slot: Slot::Str(value.clone()), expire_at_ms: None });
                self.writers.remove(&key);
            }
            Op::Del { .. } => {
                self.keys.remove(&key);
                self.writers.remove(&key);
            }
            Op::Expire { secs, .. } => {
                if let Some(e) = self.keys.get_mut(&key) {
                    e.expire_at_ms = Some(acked_at_ms + secs * 1000);
                }
            }
            Op::IncrBy { by, .. } => {
                let e = self.keys.entry(key.clone()).or_insert(ModelEntry { slot: Slot::Counter(0), expire_at_ms: None });
                if let Slot::Counter(n) = &mut e.slot {
                    *n += by;
                }
            }
            Op::HSet { field, value, .. } => {
                if let Slot::Hash(h) = &mut self.container(&key, || Slot::Hash(BTreeMap::new())).slot {
                    h.insert(field.clone(), value.clone());
                }
                self.writers.entry(key.clone()).or_default().insert(field.clone(), node);
            }
            Op::SAdd { member, .. } => {
                if let Slot::Set(s) = &mut self.container(&key, || Slot::Set(BTreeSet::new())).slot {
                    s.insert(member.clone());
                }
                self.writers.entry(key.clone()).or_default().insert(member.clone(), node);
            }
            Op::ZAdd { member, score, .. } => {
                if let Slot::ZSet(z) = &mut self.container(&key, || Slot::ZSet(BTreeMap::new())).slot {
                    z.insert(member.clone(), *score);
                }
                self.writers.entry(key.clone()).or_default().insert(member.clone(), node);
            }
            Op::HDel { field: m, .. } | Op::SRem { member: m, .. } | Op::ZRem { member: m, .. } => {
                if let Some(e) = self.keys.get_mut(&key) {
                    let now_empty = match &mut e.slot {
                        Slot::Hash(h) => h.remove(m).is_some() && h.is_empty(),
                        Slot::Set(s) => s.remove(m) && s.is_empty(),
                        Slot::ZSet(z) => z.remove(m).is_some() && z.is_empty(),
                        Slot::Str(_) | Slot::Counter(_) => false,
                    };
                    let writers = self.writers.entry(key.clone()).or_default();
                    writers.remove(m);
                    let others_wrote = writers.values().any(|&w| w != node);
                    if now_empty {
                        self.keys.remove(&key);
                        self.writers.remove(&key);
                    }
                    // Does the old expiry register apply to a container re-created later, or
                    // to members the removing node may not have seen (see `Unchecked`)?
                    if had_expiry && (now_empty || others_wrote) {
                        self.indeterminate.insert(key.clone(), Unchecked::EmptiedWithExpiry);
                    }
                }
            }
        }
        // A DEL dominates everything before it whether or not its node held the key.
        let dominates = matches!(op, Op::Set { .. } | Op::Del { .. });
        if disagrees {
            self.indeterminate.insert(key, Unchecked::ReplyDisagreed);
        } else if dominates {
            self.indeterminate.remove(&key);
        }
    }

    fn track_counter_epochs(&mut self, node: usize, op: &Op, key: &[u8]) {
        match op {
            Op::Del { .. } | Op::Set { .. } => {
                // Nodes that counted before this or an earlier DEL/SET may still be in that epoch
                // (they may not have seen any of them); the deleting node has seen its own.
                let since = self.incr_since.remove(key).unwrap_or_default();
                let before = self.incr_before.entry(key.to_vec()).or_default();
                before.extend(since);
                before.remove(&node);
            }
            Op::IncrBy { .. } => {
                if self.incr_before.get(key).is_some_and(|b| b.contains(&node)) {
                    self.indeterminate.insert(key.to_vec(), Unchecked::CounterSpansDelete);
                }
                self.incr_since.entry(key.to_vec()).or_default().insert(node);
            }
            _ => {}
        }
    }

    /// Records a write whose outcome is unknown (no reply): its key is no longer checked.
    pub fn unknown(&mut self, op: &Op) {
        self.indeterminate.insert(op.key().to_vec(), Unchecked::OutcomeUnknown);
    }

    fn container(&mut self, key: &[u8], empty: impl FnOnce() -> Slot) -> &mut ModelEntry {
        self.keys.entry(key.to_vec()).or_insert_with(|| ModelEntry { slot: empty(), expire_at_ms: None })
    }

    /// What a single Redis replaying the global order would answer, for replies that matter.
    fn predicted_count(&self, op: &Op) -> Option<i64> {
        let entry = self.keys.get(op.key());
        let has = |f: &dyn Fn(&Slot) -> bool| i64::from(entry.is_some_and(|e| f(&e.slot)));
        match op {
            Op::Del { .. } | Op::Expire { .. } => Some(i64::from(entry.is_some())),
            Op::HDel { field, .. } => Some(has(&|s| matches!(s, Slot::Hash(h) if h.contains_key(field)))),
            Op::SRem { member, .. } => Some(has(&|s| matches!(s, Slot::Set(m) if m.contains(member)))),
            Op::ZRem { member, .. } => Some(has(&|s| matches!(s, Slot::ZSet(z) if z.contains_key(member)))),
            _ => None,
        }
    }

    /// Number of acknowledged writes recorded.
    pub fn applied(&self) -> usize {
        self.applied
    }

    /// Keys whose final state the spec leaves open (not checked), and why.
    pub fn indeterminate(&self) -> &BTreeMap<Vec<u8>, Unchecked> {
        &self.indeterminate
    }

    /// Whether `key` currently exists in the model.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.keys.contains_key(key)
    }

    /// Existing fields or members of `key` (empty for strings, counters and absent keys).
    pub fn members(&self, key: &[u8]) -> Vec<Vec<u8>> {
        match self.keys.get(key).map(|e| &e.slot) {
            Some(Slot::Hash(h)) => h.keys().cloned().collect(),
            Some(Slot::Set(s)) => s.iter().cloned().collect(),
            Some(Slot::ZSet(z)) => z.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// The expected keyspace, without the indeterminate keys.
    pub fn expected(&self) -> Keyspace {
        let value = |slot: &Slot| match slot {
            Slot::Str(s) => Value::Str(s.clone()),
            Slot::Counter(n) => Value::Str(n.to_string().into_bytes()),
            Slot::Hash(h) => Value::Hash(h.clone()),
            Slot::Set(s) => Value::Set(s.clone()),
            Slot::ZSet(z) => Value::ZSet(z.iter().map(|(m, s)| (m.clone(), *s as f64)).collect()),
        };
        self.keys
            .iter()
            .filter(|(k, _)| !self.indeterminate.contains_key(*k))
            .map(|(k, e)| (k.clone(), Entry { value: value(&e.slot), expire_at_ms: e.expire_at_ms }))
            .collect()
    }

    /// Compares `actual` (one node's keyspace) with the model, ignoring indeterminate keys.
    /// Expiry deadlines may differ by `ttl_tolerance_ms` (the model stamps them at
    /// acknowledgement, the server at execution).
    pub fn check(&self, actual: &Keyspace, ttl_tolerance_ms: i64) -> Result<(), String> {
        let actual: Keyspace = actual.iter().filter(|(k, _)| !self.indeterminate.contains_key(*k)).map(|(k, e)| (k.clone(), e.clone())).collect();
        let lines = keyspace::diff("the model", &self.expected(), "the cluster", &actual, ttl_tolerance_ms, 20);
        if lines.is_empty() {
            Ok(())
        } else {
            Err(lines.join("\n"))
        }
    }
}

/// One random write on a key under `prefix`, chosen so removals usually target something the
/// model holds (a removal of nothing checks little). Five kinds of key, three of each, so
/// writes collide; TTLs are long (over 1000 s) and distinct by at least 10 s.
pub fn random_op(rng: &mut StdRng, prefix: &str, model: &Model) -> Op {
    let kind = rng.random_range(0..5);
    let key = format!("{prefix}{}{}", ["str", "ctr", "hash", "set", "zset"][kind], rng.random_range(0..3)).into_bytes();
    let pick = |rng: &mut StdRng, tag: &str| -> Vec<u8> {
        let existing = model.members(&key);
        if !existing.is_empty() && rng.random_bool(0.8) {
            existing[rng.random_range(0..existing.len())].clone()
        } else {
            format!("{tag}{}", rng.random_range(0..4)).into_bytes()
        }
    };
    let expire = |rng: &mut StdRng| Op::Expire { key: key.clone(), secs: 1000 + 10 * rng.random_range(0..100) };
    let roll = rng.random_range(0..100);
    let value = format!("v{}", rng.random_range(0..1000)).into_bytes();
    match kind {
        0 if roll < 55 => Op::Set { key, value },
        0 if roll < 80 => Op::Del { key },
        0 => expire(rng),
        1 if roll < 85 => Op::IncrBy { key, by: [-3, 1, 1, 2, 7][rng.random_range(0..5)] },
        1 => Op::Del { key },
        _ if roll < 10 => Op::Del { key },
        _ if roll < 20 => expire(rng),
        2 if roll < 65 => Op::HSet { field: pick(rng, "f"), key, value },
        2 => Op::HDel { field: pick(rng, "f"), key },
        3 if roll < 65 => Op::SAdd { member: pick(rng, "m"), key },
        3 => Op::SRem { member: pick(rng, "m"), key },
        _ if roll < 65 => Op::ZAdd { member: pick(rng, "m"), score: rng.random_range(-50..50), key },
        _ => Op::ZRem { member: pick(rng, "m"), key },
    }
}
