//! `KeyTable`: a shard's key → entry map, stored as a hash table of pointers to boxed
//! `(key, entry)` nodes.
//!
//! Why not `HashMap<Key, Entry>`: a hash table keeps its slots inline and grows by doubling,
//! so at a typical 45–85% load each key pays for ~2 slots. With 64-byte slots that was 136
//! bytes per key at 1M keys (measured: 1.54x Redis's RSS); with 8-byte pointer slots it is 17.
//! Keys up to `INLINE_KEY` bytes live inside the node, so a lookup follows one pointer, not
//! two (the second cache miss was the top of a SET profile): one 64-byte node (24 bytes of key,
//! a 40-byte `Entry` whose `Value` is 16 bytes, `db::strbuf`). See docs/benchmarks.md.

use std::hash::BuildHasher;

use hashbrown::hash_table::{Entry as Slot, HashTable};

use super::entry::{Entry, Key};

/// Keys this long or shorter are stored inside the node.
const INLINE_KEY: usize = 22;

enum NodeKey {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(Key),
}

impl NodeKey {
    fn new(key: &[u8]) -> NodeKey {
        if key.len() <= INLINE_KEY {
            let mut bytes = [0; INLINE_KEY];
            bytes[..key.len()].copy_from_slice(key);
            NodeKey::Inline { len: key.len() as u8, bytes }
        } else {
            NodeKey::Heap(key.into())
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            NodeKey::Inline { len, bytes } => &bytes[..*len as usize],
            NodeKey::Heap(key) => key,
        }
    }
}

struct Node {
    key: NodeKey,
    entry: Entry,
}

#[derive(Default)]
pub struct KeyTable {
    table: HashTable<Box<Node>>,
    hasher: foldhash::fast::RandomState,
}

impl std::fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyTable").field("len", &self.table.len()).finish()
    }
}

impl KeyTable {
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.table.find(self.hash(key), |n| n.key.as_bytes() == key).map(|n| &n.entry)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let hash = self.hash(key);
        self.table.find_mut(hash, |n| n.key.as_bytes() == key).map(|n| &mut n.entry)
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Inserts or replaces; returns the previous entry.
    pub fn insert(&mut self, key: &[u8], entry: Entry) -> Option<Entry> {
        let hash = self.hash(key);
        let hasher = &self.hasher;
        match self.table.entry(hash, |n| n.key.as_bytes() == key, |n| hasher.hash_one(n.key.as_bytes())) {
            Slot::Occupied(mut slot) => Some(std::mem::replace(&mut slot.get_mut().entry, entry)),
            Slot::Vacant(slot) => {
                slot.insert(Box::new(Node { key: NodeKey::new(key), entry }));
                None
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let hash = self.hash(key);
        match self.table.find_entry(hash, |n| n.key.as_bytes() == key) {
            Ok(slot) => Some(slot.remove().0.entry),
            Err(_) => None,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.table.iter().map(|n| (n.key.as_bytes(), &n.entry))
    }

    pub fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.table.iter_mut().map(|n| &mut n.entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Value;
    use crate::hlc::Version;

    #[test]
    fn insert_replace_remove() {
        let mut t = KeyTable::default();
        assert!(t.insert(b"a", Entry::new(Value::Int(1), Version::ZERO)).is_none());
        assert!(t.insert(b"a", Entry::new(Value::Int(2), Version::ZERO)).is_some());
        assert!(matches!(t.get(b"a").map(|e| &e.value), Some(Value::Int(2))));
        assert_eq!(t.len(), 1);
        assert!(t.remove(b"a").is_some());
        assert!(t.is_empty());
        assert_eq!(std::mem::size_of::<Node>(), 64, "a node should fit jemalloc's 64-byte size class");
        let long = vec![b'k'; 100];
        t.insert(&long, Entry::new(Value::Int(3), Version::ZERO));
        assert!(t.get(&long).is_some() && t.get(&long[..99]).is_none());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Vec<u8>, Vec<u8>),
        Remove(Vec<u8>),
        Append(Vec<u8>, u8),
    }

    fn value_bytes(entry: &Entry) -> Vec<u8> {
        match &entry.value {
            Value::Str(s) => s.to_vec(),
            Value::Int(n) => n.to_string().into_bytes(),
            other => panic!("only strings are stored here: {other:?}"),
        }
    }

    proptest::proptest! {
        /// The table against a `HashMap` model: inline (≤ 22 bytes) and heap keys, empty,
        /// integer and heap string values, enough keys to resize, values edited in place.
        #[test]
        fn behaves_like_a_hash_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut t = KeyTable::default();
            let mut model = std::collections::HashMap::<Vec<u8>, Vec<u8>>::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let old = t.insert(&k, Entry::new(Value::string(&v), Version::ZERO)).map(|e| value_bytes(&e));
                        let expected = model.insert(k.clone(), v.clone());
                        // `Value::string` keeps canonical integers as `Int`, which print back the same.
                        proptest::prop_assert_eq!(old, expected);
                    }
                    Op::Remove(k) => {
                        proptest::prop_assert_eq!(t.remove(&k).map(|e| value_bytes(&e)), model.remove(&k));
                    }
                    Op::Append(k, b) => {
                        // An in-place edit through `get_mut`, as APPEND does.
                        if let Some(e) = t.get_mut(&k) {
                            let mut bytes = value_bytes(e);
                            bytes.push(b);
                            e.value = Value::Str(bytes.clone().into());
                            model.insert(k, bytes);
                        } else {
                            proptest::prop_assert!(!model.contains_key(&k));
                        }
                    }
                }
                proptest::prop_assert_eq!(t.len(), model.len());
            }
            for (k, v) in &model {
                let got = t.get(k).map(value_bytes);
                proptest::prop_assert_eq!(got.as_ref(), Some(v));
            }
            let mut listed: Vec<(Vec<u8>, Vec<u8>)> = t.iter().map(|(k, e)| (k.to_vec(), value_bytes(e))).collect();
            listed.sort();
            let mut expected: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
            expected.sort();
            proptest::prop_assert_eq!(listed, expected);
        }
    }

    fn key() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        // Few short keys (so operations meet), some at the inline limit, some long.
        prop_oneof![
            (0u8..40).prop_map(|i| format!("k{i}").into_bytes()),
            (0u8..8).prop_map(|i| vec![b'a' + i; INLINE_KEY]),
            (0u8..8).prop_map(|i| vec![b'a' + i; INLINE_KEY + 1 + i as usize * 10]),
        ]
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let value = prop_oneof![Just(Vec::new()), any::<i64>().prop_map(|n| n.to_string().into_bytes()), proptest::collection::vec(any::<u8>(), 0..200),];
        prop_oneof![
            4 => (key(), value).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => key().prop_map(Op::Remove),
            1 => (key(), any::<u8>()).prop_map(|(k, b)| Op::Append(k, b)),
        ]
    }
}
