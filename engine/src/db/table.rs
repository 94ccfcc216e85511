//! `KeyTable`: a shard's key → entry map, stored as a hash table of pointers to boxed
//! `(key, entry)` nodes.
//!
//! Why not `HashMap<Key, Entry>`: a hash table keeps its slots inline and grows by doubling,
//! so at a typical 45–85% load each key pays for ~2 slots. With 64-byte slots that was 136
//! bytes per key at 1M keys (measured: 1.54x Redis's RSS); with 8-byte pointer slots it is 17.
//! Keys up to `INLINE_KEY` bytes live inside the node, so a lookup follows one pointer, not
//! two (the second cache miss was the top of a SET profile), at the same memory: one 80-byte
//! node instead of a 64-byte node plus a 16-byte key. See docs/benchmarks.md.

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
        assert_eq!(std::mem::size_of::<Node>(), 72, "a node should fit jemalloc's 80-byte size class");
        let long = vec![b'k'; 100];
        t.insert(&long, Entry::new(Value::Int(3), Version::ZERO));
        assert!(t.get(&long).is_some() && t.get(&long[..99]).is_none());
    }
}
