//! `HashedKey`: a key with its shard and its table hash, each computed once and used for every
//! lock and table probe of the key (`Store::shard_of`, `db::table`).
//!
//! A command used to hash its key once to pick the shard and again on every table probe: an
//! `INCR` hashed it about twelve times (lookup, stamp, edit, finish, ...), ~770 instructions
//! of its ~5,400 (callgrind, docs/benchmarks.md). A `HashedKey` holds the slice it was
//! computed from, so a hash cannot travel with another key; the only way to make one is
//! `HashedKey::new` (or `KeyLike::hashed`, which calls it or copies an existing one, and
//! `KeyHint::hashed`, which gives hashes computed earlier only to the very bytes they were
//! computed from). A `TableKey` is the part a shard's table needs (the key and its table
//! hash): what `Shard`'s methods probe with, so a caller already on the shard does not
//! compute a shard it has.
//!
//! Two hash functions, both `foldhash`:
//! - the shard (`shard_of`) with a fixed seed, the same in every process: a full sync's
//!   snapshot, which the origin sends shard by shard (`repl::snapshot`), then fills the
//!   receiver's shards one after another too, each shard's table and nodes still in the cache
//!   as they grow. With a shard that differed between nodes, every key of the stream landed
//!   in another shard, and a 1M-key sync cost the receiver about 1.7 times the CPU, on the
//!   cache misses of 1,024 tables growing at once (docs/benchmarks.md, "Replication");
//! - the table hash (`hash_key`) with a per-process random seed, as the tables' own hashers
//!   had, so that keys chosen to collide on one node's tables cannot be computed offline.
//!   Insertion, lookup and the table's resize (`KeyTable`'s rehash, which recomputes from the
//!   stored key) agree.
//!
//! The two seeds differ, so the keys of one shard do not share the low bits their table
//! indexes by. Each hashes the key's bytes alone, without the length prefix `Hash for [u8]`
//! adds for composite keys: foldhash mixes a byte string's length into its hash already, and
//! dropping the prefix pays for the second hash (callgrind, docs/benchmarks.md).

use std::hash::{BuildHasher, Hasher};
use std::sync::LazyLock;

use bytes::Bytes;
use foldhash::fast::FixedState;

use super::SHARDS_PER_DB;

/// The tables' hash function: seeded per process (see the module doc).
static TABLE_HASHER: LazyLock<FixedState> = LazyLock::new(|| FixedState::with_seed(rand::random()));

/// The shards' hash function: the same seed in every process and on every node.
const SHARD_HASHER: FixedState = FixedState::with_seed(0x6b65_796d_6573_6801);

#[inline]
fn hash_with(state: &FixedState, key: &[u8]) -> u64 {
    let mut hasher = state.build_hasher();
    hasher.write(key);
    hasher.finish()
}

/// The hash of a stored key (a table's resize rehashes with it).
#[inline]
pub(super) fn hash_key(key: &[u8]) -> u64 {
    hash_with(&TABLE_HASHER, key)
}

/// The shard of its database `key` lives in: the same on every node (see the module doc).
#[inline]
pub fn shard_of(key: &[u8]) -> usize {
    (hash_with(&SHARD_HASHER, key) as usize) & (SHARDS_PER_DB - 1)
}

/// A key with the hash its shard's table probes with. `Copy`: pass it by value down to the
/// table.
#[derive(Clone, Copy)]
pub struct TableKey<'k> {
    key: &'k [u8],
    hash: u64,
}

impl<'k> TableKey<'k> {
    #[inline]
    pub fn new(key: &'k [u8]) -> TableKey<'k> {
        TableKey { key, hash: hash_key(key) }
    }

    #[inline]
    pub fn key(self) -> &'k [u8] {
        self.key
    }

    /// The hash the shard's table indexes by.
    #[inline]
    pub(super) fn hash(self) -> u64 {
        self.hash
    }

    /// With its shard: the table hash is kept, the shard computed.
    #[inline]
    fn located(self) -> HashedKey<'k> {
        HashedKey { table: self, shard: shard_of(self.key) }
    }
}

/// A key with its shard and its table hash. `Copy`: pass it by value.
#[derive(Clone, Copy)]
pub struct HashedKey<'k> {
    table: TableKey<'k>,
    shard: usize,
}

impl<'k> HashedKey<'k> {
    #[inline]
    pub fn new(key: &'k [u8]) -> HashedKey<'k> {
        TableKey::new(key).located()
    }

    #[inline]
    pub fn key(self) -> &'k [u8] {
        self.table.key
    }

    /// The shard of its database the key lives in.
    #[inline]
    pub fn shard(self) -> usize {
        self.shard
    }

    /// The key and its table hash.
    #[inline]
    pub fn table_key(self) -> TableKey<'k> {
        self.table
    }
}

impl std::fmt::Debug for HashedKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HashedKey({:?})", String::from_utf8_lossy(self.key()))
    }
}

/// A command's first key as it was hashed before the command ran (a pipelined batch's
/// prefetch, or the command's lock), so that the command's own lookups do not hash it again:
/// at -P 16 a `SET`'s key was hashed three times (the prefetch, the lock's shard, the write),
/// ~130 of its ~3,700 instructions (docs/benchmarks.md, "A request's key hashed once").
///
/// It names the bytes it was computed from by their address and length, and holds no borrow
/// of them, so it can cross from the batch to the command's `Ctx` (which lives inside the
/// command and does not borrow its arguments). It is used only for a slice at that address
/// of that length (`hashed`, `shard_of`): while the arguments it was made from are alive,
/// which is for the whole command (a `Ctx` holds it no longer), no other bytes can sit
/// there, and for any other slice it hashes as `HashedKey::new` does. `KeyHint::NONE`
/// matches no slice (no slice starts at address 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHint {
    at: usize,
    len: usize,
    hash: u64,
    shard: usize,
}

impl KeyHint {
    pub const NONE: KeyHint = KeyHint { at: 0, len: 0, hash: 0, shard: 0 };

    #[inline]
    fn names(self, key: &[u8]) -> bool {
        key.as_ptr() as usize == self.at && key.len() == self.len
    }

    /// `key` with its hashes: the hint's if it was made from these very bytes, else computed.
    #[inline]
    pub fn hashed(self, key: &[u8]) -> HashedKey<'_> {
        if self.names(key) {
            HashedKey { table: TableKey { key, hash: self.hash }, shard: self.shard }
        } else {
            HashedKey::new(key)
        }
    }

    /// `key`'s shard: the hint's if it was made from these very bytes, else computed.
    #[inline]
    pub fn shard_of(self, key: &[u8]) -> usize {
        if self.names(key) {
            self.shard
        } else {
            shard_of(key)
        }
    }
}

impl HashedKey<'_> {
    /// The hint that lets a later lookup of these same bytes skip hashing them (`KeyHint`).
    #[inline]
    pub fn hint(self) -> KeyHint {
        let key = self.key();
        KeyHint { at: key.as_ptr() as usize, len: key.len(), hash: self.table.hash, shard: self.shard }
    }
}

/// What the shard API takes as a key: a `HashedKey` or `TableKey` (what it carries is reused)
/// or any byte string (hashed on the call, only as far as the call needs). Lets a caller that
/// touches a key several times hash it once, while one-off callers keep passing slices.
pub trait KeyLike {
    /// The key's bytes.
    fn key_bytes(&self) -> &[u8];

    /// The key with its shard and table hash.
    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        HashedKey::new(self.key_bytes())
    }

    /// The key with its table hash, for a probe of the shard's table.
    #[inline]
    fn table_key(&self) -> TableKey<'_> {
        TableKey::new(self.key_bytes())
    }

    /// The shard of its database the key lives in.
    #[inline]
    fn shard(&self) -> usize {
        shard_of(self.key_bytes())
    }

    /// `hashed`, taking the hashes from `hint` where it was made from these bytes.
    #[inline]
    fn hashed_with(&self, hint: KeyHint) -> HashedKey<'_> {
        hint.hashed(self.key_bytes())
    }

    /// `shard`, taking it from `hint` where it was made from these bytes.
    #[inline]
    fn shard_with(&self, hint: KeyHint) -> usize {
        hint.shard_of(self.key_bytes())
    }
}

impl KeyLike for HashedKey<'_> {
    #[inline]
    fn key_bytes(&self) -> &[u8] {
        self.key()
    }

    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        *self
    }

    #[inline]
    fn hashed_with(&self, _: KeyHint) -> HashedKey<'_> {
        *self
    }

    #[inline]
    fn shard_with(&self, _: KeyHint) -> usize {
        self.shard
    }

    #[inline]
    fn table_key(&self) -> TableKey<'_> {
        self.table
    }

    #[inline]
    fn shard(&self) -> usize {
        self.shard
    }
}

impl KeyLike for TableKey<'_> {
    #[inline]
    fn key_bytes(&self) -> &[u8] {
        self.key
    }

    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        self.located()
    }

    #[inline]
    fn hashed_with(&self, _: KeyHint) -> HashedKey<'_> {
        self.located()
    }

    #[inline]
    fn table_key(&self) -> TableKey<'_> {
        *self
    }
}

/// A byte string is hashed on each call (the trait's provided methods).
macro_rules! key_like_bytes {
    ($($t:ty),*) => {$(
        impl KeyLike for $t {
            #[inline]
            fn key_bytes(&self) -> &[u8] {
                self
            }
        }
    )*};
}

key_like_bytes!([u8], Vec<u8>, Box<[u8]>, Bytes);

impl<const N: usize> KeyLike for [u8; N] {
    #[inline]
    fn key_bytes(&self) -> &[u8] {
        self
    }
}

impl<T: KeyLike + ?Sized> KeyLike for &T {
    #[inline]
    fn key_bytes(&self) -> &[u8] {
        (**self).key_bytes()
    }

    #[inline]
    fn hashed(&self) -> HashedKey<'_> {
        (**self).hashed()
    }

    #[inline]
    fn table_key(&self) -> TableKey<'_> {
        (**self).table_key()
    }

    #[inline]
    fn shard(&self) -> usize {
        (**self).shard()
    }

    #[inline]
    fn hashed_with(&self, hint: KeyHint) -> HashedKey<'_> {
        (**self).hashed_with(hint)
    }

    #[inline]
    fn shard_with(&self, hint: KeyHint) -> usize {
        (**self).shard_with(hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hash_each_for_shard_and_table_deterministic_in_the_process() {
        let k = HashedKey::new(b"user:1000");
        assert_eq!(k.table_key().hash(), hash_key(b"user:1000"));
        assert_eq!(k.shard(), shard_of(b"user:1000"));
        assert_eq!(k.shard(), HashedKey::new(b"user:1000".as_slice()).shard());
        assert_eq!(k.hashed().table_key().hash(), k.table_key().hash(), "a HashedKey passes its hash on");
        assert_eq!(k.table_key().hashed().shard(), k.shard(), "a TableKey's shard is the key's");
        assert_eq!(Bytes::from_static(b"user:1000").hashed().table_key().hash(), k.table_key().hash());
        assert_eq!(Bytes::from_static(b"user:1000").table_key().hash(), k.table_key().hash());
        assert_eq!(Bytes::from_static(b"user:1000").shard(), k.shard());
        assert_eq!(k.key(), b"user:1000");
        // Keys that differ only in length hash apart (no length prefix is hashed).
        assert_ne!(hash_key(b"a"), hash_key(b"a\0"));
        // The shard's hash and the table's are different functions: the keys of one shard
        // spread over the low bits the table indexes by.
        let keys: Vec<String> = (0..200_000u32).map(|i| format!("k{i}")).collect();
        let in_shard: Vec<u64> = keys.iter().map(|k| HashedKey::new(k.as_bytes())).filter(|k| k.shard() == 7).map(|k| k.table_key().hash()).collect();
        assert!(in_shard.len() > 100, "{} keys in shard 7", in_shard.len());
        let low: std::collections::HashSet<u64> = in_shard.iter().map(|h| h & 0xff).collect();
        assert!(low.len() > 64, "the keys of one shard share their low bits: {} values", low.len());
    }

    /// A hint gives its hashes to the very bytes it was made from, and to nothing else: not
    /// to a prefix at the same address, not to equal bytes elsewhere (which hash the same
    /// anyway), not to other keys; `KeyHint::NONE` to none.
    #[test]
    fn a_key_hint_serves_only_the_bytes_it_was_made_from() {
        let argv = [Bytes::from_static(b"user:1000"), Bytes::from(b"user:1000".to_vec())];
        let key: &[u8] = &argv[0];
        let hint = HashedKey::new(key).hint();
        // A hint whose hashes differ from the key's real ones shows whether it was used.
        let marked = KeyHint { hash: !hint.hash, shard: hint.shard ^ 1, ..hint };
        assert_eq!(marked.hashed(key).table_key().hash(), !hash_key(key), "the same bytes take the hint's hash");
        assert_eq!(marked.hashed(key).shard(), shard_of(key) ^ 1);
        assert_eq!(marked.shard_of(key), shard_of(key) ^ 1);
        assert_eq!(key.hashed_with(marked).shard(), shard_of(key) ^ 1, "a byte string's hashed_with asks the hint");
        assert_eq!(key.shard_with(marked), shard_of(key) ^ 1);
        let real = |k: &[u8]| (hash_key(k), shard_of(k));
        let got = |h: HashedKey<'_>| (h.table_key().hash(), h.shard());
        for other in [&key[..4], &argv[1][..], b"user:1001".as_slice(), b"".as_slice()] {
            assert_eq!(got(marked.hashed(other)), real(other), "{:?}", String::from_utf8_lossy(other));
            assert_eq!(marked.shard_of(other), shard_of(other));
        }
        assert_eq!(got(KeyHint::NONE.hashed(key)), real(key));
        // A key hashed already keeps its own hashes whatever the hint.
        let other = HashedKey::new(b"other");
        assert_eq!(got(other.hashed_with(marked)), real(b"other"));
        assert_eq!(got(other.table_key().hashed_with(marked)), real(b"other"));
        assert_eq!(got(hint.hashed(key)), real(key), "a true hint gives the key's own hashes");
    }

    const PINNED_SHARDS: [usize; 4] = [668, 103, 405, 810];

    #[test]
    fn the_shard_is_the_same_in_every_process() {
        // Fixed values, not a second computation in this process: a node and its peers must
        // agree on every key's shard for a full sync to fill shards one at a time (module
        // doc). A change here (a new seed, a foldhash upgrade) makes a mixed-version mesh's
        // full syncs slower, never wrong.
        let shards: Vec<usize> = [&b"user:1000"[..], b"key:0000000001", b"", b"a-much-longer-key-than-sixteen-bytes"].iter().map(|k| shard_of(k)).collect();
        assert_eq!(shards, PINNED_SHARDS);
        // And they spread: 1,024 shards, 100,000 keys, none much above the mean of ~98.
        let mut counts = vec![0u32; SHARDS_PER_DB];
        for i in 0..100_000u32 {
            counts[shard_of(format!("key:{i:010}").as_bytes())] += 1;
        }
        let max = *counts.iter().max().unwrap();
        assert!(max < 160 && counts.iter().all(|&c| c > 40), "uneven shards: max {max}");
    }
}
