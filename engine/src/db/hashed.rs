//! `HashedKey`: a key and its hash, computed once and used for both the shard the key lives in
//! (`Store::shard_of`) and every probe of that shard's table (`db::table`).
//!
//! A command used to hash its key once to pick the shard and again on every table probe: an
//! `INCR` hashed it about twelve times (lookup, stamp, edit, finish, ...), ~770 instructions
//! of its ~5,400 (callgrind, docs/benchmarks.md). A `HashedKey` holds the slice it was
//! computed from, so a hash cannot travel with another key; the only way to make one is
//! `HashedKey::new` (or `KeyLike::hashed`, which calls it or copies an existing one).
//!
//! One hash function for the whole process (`foldhash` with a per-process random seed, as the
//! tables' own hashers had): the shard choice is deterministic within a process, and insertion,
//! lookup and the table's resize (`KeyTable`'s rehash, which recomputes from the stored key)
//! agree. The shard takes bits 40..50 of the hash; hashbrown indexes buckets by the low bits
//! and tags them with the top seven, so the keys of one shard still spread over its buckets.

use std::hash::BuildHasher;
use std::sync::LazyLock;

use bytes::Bytes;

use super::SHARDS_PER_DB;

static HASHER: LazyLock<foldhash::fast::FixedState> = LazyLock::new(|| foldhash::fast::FixedState::with_seed(rand::random()));

/// Where in the hash the shard index is taken (see the module doc).
const SHARD_SHIFT: u32 = 40;

/// A key with its hash. `Copy`: pass it by value down to the table.
#[derive(Clone, Copy)]
pub struct HashedKey<'k> {
    key: &'k [u8],
    hash: u64,
}

impl<'k> HashedKey<'k> {
    #[inline]
    pub fn new(key: &'k [u8]) -> HashedKey<'k> {
        HashedKey { key, hash: hash_key(key) }
    }

    #[inline]
    pub fn key(self) -> &'k [u8] {
        self.key
    }

    /// The shard of its database the key lives in.
    #[inline]
    pub fn shard(self) -> usize {
        ((self.hash >> SHARD_SHIFT) as usize) & (SHARDS_PER_DB - 1)
    }

    /// The hash the shard's table indexes by.
    #[inline]
    pub(super) fn hash(self) -> u64 {
        self.hash
    }
}

impl std::fmt::Debug for HashedKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HashedKey({:?})", String::from_utf8_lossy(self.key))
    }
}

/// The hash of a stored key (a table's resize rehashes with it).
#[inline]
pub(super) fn hash_key(key: &[u8]) -> u64 {
    HASHER.hash_one(key)
}

/// What the shard API takes as a key: a `HashedKey` (its hash is reused) or any byte string
/// (hashed on the call). Lets a caller that touches a key several times hash it once, while
/// one-off callers keep passing slices.
pub trait KeyLike {
    fn hashed(&self) -> HashedKey<'_>;
}

impl KeyLike for HashedKey<'_> {
    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        *self
    }
}

impl KeyLike for [u8] {
    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        HashedKey::new(self)
    }
}

impl<const N: usize> KeyLike for [u8; N] {
    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        HashedKey::new(self)
    }
}

impl KeyLike for Vec<u8> {
    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        HashedKey::new(self)
    }
}

impl KeyLike for Box<[u8]> {
    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        HashedKey::new(self)
    }
}

impl KeyLike for Bytes {
    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        HashedKey::new(self)
    }
}

impl<T: KeyLike + ?Sized> KeyLike for &T {
    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        (**self).hashed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hash_for_shard_and_table_deterministic_in_the_process() {
        let k = HashedKey::new(b"user:1000");
        assert_eq!(k.hash(), hash_key(b"user:1000"));
        assert_eq!(k.shard(), HashedKey::new(b"user:1000".as_slice()).shard());
        assert_eq!(k.hashed().hash(), k.hash(), "a HashedKey passes its hash on");
        assert_eq!(Bytes::from_static(b"user:1000").hashed().hash(), k.hash());
        assert_eq!(k.key(), b"user:1000");
        // The shard bits and the table's bucket bits are different bits: the keys of one
        // shard spread over the low bits.
        let keys: Vec<String> = (0..200_000u32).map(|i| format!("k{i}")).collect();
        let in_shard: Vec<u64> = keys.iter().map(|k| HashedKey::new(k.as_bytes())).filter(|k| k.shard() == 7).map(|k| k.hash()).collect();
        assert!(in_shard.len() > 100, "{} keys in shard 7", in_shard.len());
        let low: std::collections::HashSet<u64> = in_shard.iter().map(|h| h & 0xff).collect();
        assert!(low.len() > 64, "the keys of one shard share their low bits: {} values", low.len());
    }
}
