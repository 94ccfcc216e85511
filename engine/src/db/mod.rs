//! The keyspace: `databases` numbered databases, each split into `SHARDS_PER_DB` shards by
//! key hash, each shard behind its own short-held mutex.
//!
//! Guarantees: a command locks every shard it touches before it starts (in ascending
//! `(db, shard)` order, so two commands never deadlock) and releases them before it replies;
//! no lock is held across an `.await`. Commands that walk a whole database (`KEYS`, `SCAN`,
//! `DBSIZE`) take one shard at a time, so they never stall the others.

pub mod counter;
pub mod ctx;
pub mod edit;
pub mod effect;
pub mod entry;
pub mod evict;
pub mod expire;
pub mod expiry_index;
pub mod field_tombstones;
pub mod fieldmap;
pub mod flush_point;
pub mod functions;
pub mod ghost;
pub mod hashed;
pub mod hll;
pub mod lattice;
pub mod name;
pub mod node;
pub mod pending;
pub mod ranked;
pub mod slots;
pub mod strbuf;
pub mod table;
pub mod zset;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::hlc::{Hlc, Version};
pub use entry::{Entry, Expiry, Key, Kind, Value};
use expiry_index::ExpiryIndex;
pub use ghost::{Ghost, Tombstoned};
pub use hashed::{HashedKey, KeyHint, KeyLike, TableKey};
pub use table::{EntryMut, EntryRef, Removed};
use table::{Probed, VacantKey};

/// What `Shard::live_mut` found.
pub enum Lookup<'a> {
    Live(EntryMut<'a>),
    /// The key had expired: it is deleted now (lazy expiry).
    Expired,
    Missing,
}

/// What `Shard::entry` found.
pub enum KeyEntry<'a> {
    Found(EntryMut<'a>),
    Missing(MissingKey<'a>),
}

/// A key the shard does not hold, ready to insert: the probe that found it missing found the
/// bucket it goes to. What the shard remembers of the key (its ghost, an expiry register that
/// came before it), which decides how a write creating it is stamped or whether a merged one
/// wins, is at hand until the insert.
pub struct MissingKey<'a> {
    vacant: VacantKey<'a>,
    /// The shard's `tombstones`.
    pub tombstones: &'a mut SparseMap<Ghost>,
    /// The shard's `orphan_expiry`.
    pub orphan_expiry: &'a mut SparseMap<Expiry>,
    /// The shard's `expiry_index`, for a key inserted with its TTL (`insert_expiring`).
    expiry_index: &'a mut ExpiryIndex,
    /// The key's table hash, which the index keeps.
    hash: u64,
}

impl MissingKey<'_> {
    /// The newest version the shard remembers of the key (`remembered`): a write creating it
    /// is stamped after it.
    #[inline]
    pub fn remembered(&self) -> Version {
        remembered(self.tombstones, self.orphan_expiry, self.vacant.key())
    }

    /// Inserts the key with its first entry. It has no expiry register, so the expiry index
    /// is unchanged (as `Shard::insert` leaves it for a key that was missing).
    pub fn insert(self, entry: Entry) {
        self.vacant.insert(entry);
    }

    /// Inserts the key with its first entry and its expiry register (`SET EX`), keeping the
    /// expiry index in step: one allocation, where `insert` and then `Shard::set_expiry`
    /// moved the node to a larger one.
    pub fn insert_expiring(self, db: &Db, entry: Entry, expiry: Expiry) {
        reindex(self.expiry_index, db, self.hash, None, expiry.deadline());
        self.vacant.insert_expiring(entry, expiry);
    }
}

/// The newest version a shard remembers of a key it holds no value for: its ghost's (a
/// deleted key, a collection emptied by removals) and its early expiry register's. A local
/// write that creates the key is stamped after it (and after the last flush), so that it
/// supersedes them here as on every peer. Always inline: both maps are empty nearly always,
/// and as a call (which `#[inline]` left it) it cost a new key's `SET` ~20 instructions
/// (callgrind).
#[inline(always)]
fn remembered<K: KeyLike + ?Sized>(tombstones: &SparseMap<Ghost>, orphan_expiry: &SparseMap<Expiry>, key: &K) -> Version {
    let ghost = tombstones.get(key).map_or(Version::ZERO, Ghost::newest);
    let orphan = orphan_expiry.get(key).map_or(Version::ZERO, |e| e.version);
    ghost.max(orphan)
}

/// Shards per database. A power of two well above any thread count, and small enough per
/// shard that a `SCAN` step can return whole shards (see `cmd::keys::scan`).
pub const SHARDS_PER_DB: usize = 1024;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A map of keys that is empty nearly always: a shard's tombstones and early expiry registers,
/// which every replicated write looks at. A lookup in an empty map returns at once, before the
/// key is hashed: the two a merged `SET` made cost a peer ~200 instructions when they hashed
/// it first (callgrind, docs/benchmarks.md).
///
/// Entries are placed by the key's table hash (`hashed::hash_key`: what the shard's table
/// indexes by), so a caller holding the key's `TableKey` or `HashedKey` finds its entry without
/// hashing the key again. Hashed by a `std` map, a `DEL` of a key no node holds hashed it three
/// times on the node that took it and twice on each peer (docs/benchmarks.md). Growth rehashes
/// from the stored keys, as the table's does: keeping each entry's hash beside it cost a
/// tombstone 17 bytes (`used_memory` 134 → 151 B each) and measured no cheaper.
/// A caller with only the bytes passes them (`KeyLike`), and they are hashed on the call.
#[derive(Debug)]
pub struct SparseMap<V>(hashbrown::HashTable<(Key, V)>);

impl<V> SparseMap<V> {
    // `get`, `get_mut` and `remove` inline up to their check for an empty map (most calls),
    // the search out of line: as a call, a merged `SET`'s two removals cost ~20 instructions
    // (callgrind).
    #[inline(always)]
    pub fn get<K: KeyLike + ?Sized>(&self, key: &K) -> Option<&V> {
        if self.0.is_empty() {
            return None;
        }
        self.find(key.table_key())
    }

    #[inline(always)]
    pub fn get_mut<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<&mut V> {
        if self.0.is_empty() {
            return None;
        }
        self.find_mut(key.table_key())
    }

    #[inline(always)]
    pub fn remove<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<V> {
        if self.0.is_empty() {
            return None;
        }
        self.take(key.table_key())
    }

    fn find(&self, key: TableKey<'_>) -> Option<&V> {
        self.0.find(key.hash(), holds(key)).map(|(_, value)| value)
    }

    fn find_mut(&mut self, key: TableKey<'_>) -> Option<&mut V> {
        self.0.find_mut(key.hash(), holds(key)).map(|(_, value)| value)
    }

    fn take(&mut self, key: TableKey<'_>) -> Option<V> {
        let found = self.0.find_entry(key.hash(), holds(key)).ok()?;
        Some(found.remove().0 .1)
    }

    /// Sets `key`'s value; returns the one it replaced.
    pub fn insert<K: KeyLike + ?Sized>(&mut self, key: &K, value: V) -> Option<V> {
        let key = key.table_key();
        match self.entry(key) {
            hashbrown::hash_table::Entry::Occupied(mut held) => Some(std::mem::replace(&mut held.get_mut().1, value)),
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert((Key::from(key.key()), value));
                None
            }
        }
    }

    /// `key`'s value, a default one put there first if it has none.
    pub fn get_or_default<K: KeyLike + ?Sized>(&mut self, key: &K) -> &mut V
    where
        V: Default,
    {
        let key = key.table_key();
        let held = self.entry(key).or_insert_with(|| (Key::from(key.key()), V::default()));
        &mut held.into_mut().1
    }

    fn entry<'m>(&'m mut self, key: TableKey<'_>) -> hashbrown::hash_table::Entry<'m, (Key, V)> {
        self.0.entry(key.hash(), holds(key), |(held, _)| hashed::hash_key(held))
    }

    /// Keeps the entries `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(&Key, &mut V) -> bool) {
        self.0.retain(|(key, value)| keep(key, value));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.0.iter().map(|(key, value)| (key, value))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit(|(held, _)| hashed::hash_key(held));
    }
}

/// Whether a `SparseMap` entry is `key`'s.
fn holds<V>(key: TableKey<'_>) -> impl Fn(&(Key, V)) -> bool + '_ {
    move |(held, _)| held[..] == *key.key()
}

impl<V> Default for SparseMap<V> {
    fn default() -> Self {
        SparseMap(hashbrown::HashTable::new())
    }
}

/// Set when a watched key is modified; `EXEC` aborts if any of its flags is set.
pub type WatchFlag = Arc<AtomicBool>;

/// Keyspace-wide counters reported by `INFO stats`.
#[derive(Debug, Default)]
pub struct KeyspaceStats {
    pub expired_keys: AtomicU64,
    pub evicted_keys: AtomicU64,
    /// Counted per thread (`crate::tally`): every read adds to one of them.
    pub keyspace_hits: crate::tally::Counter,
    pub keyspace_misses: crate::tally::Counter,
    /// Writes since start (Redis's `rdb_changes_since_last_save` analogue), counted per
    /// thread (`crate::tally`): every write and every merged op adds to it.
    pub dirty: crate::tally::Counter,
}

/// One shard of one database.
#[derive(Debug, Default)]
pub struct Shard {
    map: table::KeyTable,
    /// Every volatile key by its deadline, so active expiry finds due keys directly.
    expiry_index: ExpiryIndex,
    watchers: Map<Key, Vec<WatchFlag>>,
    /// Replication: what remains of deleted keys and of collections emptied by removals, so an
    /// older write arriving later cannot resurrect them. Kept at most `tombstone-gc-seconds`.
    pub tombstones: SparseMap<Ghost>,
    /// Replication: expiry registers that arrived before the key they belong to.
    pub orphan_expiry: SparseMap<Expiry>,
}

pub struct Db {
    /// Allocated on first use (`Db::shards`): 1024 empty shards cost ~190 KiB, and most of a
    /// server's 16 databases are never used. Whole-keyspace passes skip a database whose
    /// shards do not exist (`Store::in_use`): it holds nothing.
    shards: OnceLock<Box<[Mutex<Shard>]>>,
    /// Replication: the version of the last FLUSHDB/FLUSHALL, which dominates every older
    /// entry and write in this database.
    pub flushed: flush_point::FlushPoint,
    /// Keys with a deadline, so the expiry cycle skips databases without any.
    volatile_keys: AtomicUsize,
}

/// The whole keyspace plus the clock that versions it.
pub struct Store {
    dbs: Box<[Db]>,
    pub hlc: Hlc,
    pub node_id: crate::hlc::NodeId,
    pub stats: KeyspaceStats,
    /// Whether local writes record their effects (a mesh is or was configured).
    replicating: AtomicBool,
    /// `tombstone-gc-seconds` in ms: ghosts older than this are dropped.
    pub tombstone_gc_ms: AtomicU64,
    /// This run's identity for counter contributions: a restarted node that has not synced
    /// yet must not overwrite its previous run's increments (totals merge by maximum).
    pub counter_origin: crate::hlc::NodeId,
    /// `hll-sparse-max-bytes`: a sparse HyperLogLog longer than this becomes dense.
    pub hll_sparse_max_bytes: AtomicUsize,
    /// Whether accesses count as LFU counters (`maxmemory-policy` is an LFU policy) rather
    /// than times. This keyspace's own: two servers in one process evict independently.
    pub lfu_access: AtomicBool,
    /// `maxmemory` (0: no limit), which every write command that may grow memory checks
    /// before it runs (`cmd::check`): a load here, where a settings snapshot is an `ArcSwap`
    /// load and its guard, two atomic read-modify-writes per command.
    pub maxmemory: AtomicU64,
    /// `notify-keyspace-events`: the switch, and where events are published.
    pub notify: crate::notify::Notifier,
    /// Client-side caching (`crate::tracking`) wants to hear which keys writes modify. One
    /// relaxed load per write: nothing is recorded while no client tracks.
    pub tracking: AtomicBool,
    /// Keys active expiry and eviction removed while `tracking` is on: they go away outside
    /// any command, so the server collects them from here (`Store::take_removed`).
    removed: Mutex<Vec<Key>>,
    /// Whether `removed` holds keys (so a command need not lock it to find out).
    removed_pending: AtomicBool,
    /// The `FUNCTION` libraries' replicated registers (`functions`).
    functions: Mutex<functions::Registers>,
    /// Moves whenever `functions` changes (`Scripts::sync_functions` compiles what changed).
    functions_generation: AtomicU64,
}

/// The keys a command's writes modified, recorded only while `Store::tracking` is on
/// (client-side caching invalidates them once the command is done).
#[derive(Debug, Default)]
pub struct Modified {
    pub keys: Vec<Key>,
    /// A `FLUSHDB`/`FLUSHALL` ran: every cached key is stale.
    pub flushed: bool,
}

impl Modified {
    /// Records that `key` changed, if a client tracks keys.
    pub fn note(&mut self, store: &Store, key: &[u8]) {
        if store.tracking.load(Ordering::Relaxed) {
            self.keys.push(key.into());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && !self.flushed
    }
}

impl Store {
    pub fn new(databases: usize, hlc: Hlc, node_id: crate::hlc::NodeId) -> Store {
        let dbs =
            (0..databases).map(|_| Db { shards: OnceLock::new(), flushed: flush_point::FlushPoint::default(), volatile_keys: AtomicUsize::new(0) }).collect();
        Store {
            dbs,
            hlc,
            node_id,
            stats: KeyspaceStats::default(),
            replicating: AtomicBool::new(false),
            tombstone_gc_ms: AtomicU64::new(86_400_000),
            // Never 0: that id marks a base-only counter delta.
            counter_origin: rand::random::<crate::hlc::NodeId>() | 1,
            hll_sparse_max_bytes: AtomicUsize::new(crate::hll::DEFAULT_SPARSE_MAX_BYTES),
            lfu_access: AtomicBool::new(false),
            maxmemory: AtomicU64::new(0),
            notify: crate::notify::Notifier::default(),
            tracking: AtomicBool::new(false),
            removed: Mutex::new(Vec::new()),
            removed_pending: AtomicBool::new(false),
            functions: Mutex::new(functions::Registers::default()),
            functions_generation: AtomicU64::new(0),
        }
    }

    /// Notes a key removed outside any command (active expiry, eviction) for client-side
    /// caching, if a client tracks keys.
    pub fn note_removed(&self, key: &[u8]) {
        if self.tracking.load(Ordering::Relaxed) {
            self.removed.lock().push(key.into());
            self.removed_pending.store(true, Ordering::Release);
        }
    }

    pub fn has_removed(&self) -> bool {
        self.removed_pending.load(Ordering::Acquire)
    }

    /// The keys `note_removed` collected since the last call.
    pub fn take_removed(&self) -> Vec<Key> {
        if !self.has_removed() {
            return Vec::new();
        }
        let mut removed = self.removed.lock();
        self.removed_pending.store(false, Ordering::Release);
        std::mem::take(&mut *removed)
    }

    pub fn replicating(&self) -> bool {
        self.replicating.load(Ordering::Relaxed)
    }

    /// Turns on effect recording (never off again: a peer may come back for a partial resync).
    pub fn enable_replication(&self) {
        self.replicating.store(true, Ordering::Relaxed);
    }

    pub fn databases(&self) -> usize {
        self.dbs.len()
    }

    /// The shard `key` lives in (in every database), the same on every node
    /// (`hashed::shard_of`). A caller that goes on to use the key should hash it once
    /// (`HashedKey::new`) and take the shard from that.
    pub fn shard_of(&self, key: &[u8]) -> usize {
        hashed::shard_of(key)
    }

    /// Starts loading what the lookups of `keys` in `db` will touch, for a pipelined batch
    /// about to run: each key's shard lock, its table's control bytes and slots (those a new
    /// key's insert writes among them), its node, then its string's bytes. Run one
    /// after another, every lookup of a large keyspace waits for its cache misses in turn;
    /// started together, a batch's misses overlap. A hint only: nothing is read or changed
    /// that a command could see, and a key missing or changed before its command runs costs
    /// a wasted load. The keys come hashed: their callers hash each once, for this and for the
    /// lookups that follow (a batch's commands, `cmd::prefetch`; a link's merge).
    pub fn prefetch<'k>(&self, db: usize, keys: impl IntoIterator<Item = HashedKey<'k>>) {
        if !self.in_use(db) {
            return;
        }
        let shards = self.dbs[db].shards();
        // Filled where they lie (`extend`): `collect` builds a vector and then moves it, a copy
        // of its 640 inline bytes per batch.
        let mut located: SmallVec<[(&Mutex<Shard>, HashedKey<'_>); 16]> = SmallVec::new();
        located.extend(keys.into_iter().map(|key| (&shards[key.shard()], key)));
        for (shard, _) in &located {
            node::prefetch(std::ptr::from_ref(*shard).cast());
        }
        // Every lock is taken before any table is read: a locked instruction waits for the
        // loads before it, so locking key by key would queue the keys' misses again. With
        // `try_lock` there is no lock order to keep; a shard locked elsewhere, or twice in
        // the batch, is skipped. Then one pass per level, each loading what the next reads.
        let mut held: SmallVec<[(MutexGuard<'_, Shard>, HashedKey<'_>); 16]> = SmallVec::new();
        held.extend(located.iter().filter_map(|&(shard, key)| Some((shard.try_lock()?, key))));
        for (shard, key) in &held {
            shard.map.prefetch_slots(key.table_key());
        }
        for (shard, key) in &held {
            shard.map.prefetch(key.table_key());
        }
        let mut collections = false;
        for (shard, key) in &held {
            collections |= shard.map.prefetch_value(key.table_key());
        }
        // A fourth level only where there is one: a string's batch would look its keys up
        // once more for nothing.
        if collections {
            for (shard, key) in &held {
                shard.map.prefetch_items(key.table_key());
            }
        }
    }

    /// Starts loading what the commands of a pipelined batch on collections will read inside
    /// them: for each `(key, element name)`, the name's probe in the key's hash or set
    /// (`Value::prefetch_element`), once `prefetch` has loaded the keys. Into one big
    /// collection, each command's probe is a cache miss of its own (`SADD` -P 16 into one
    /// growing set spent 28% of its time in them), and a new element's insert stores into a
    /// slot no probe loaded (docs/benchmarks.md, "Elements of one big collection"). Each
    /// shard is try-locked; one locked elsewhere is skipped. A hint only.
    pub fn prefetch_elements(&self, db: usize, pairs: &[(&[u8], &[u8])]) {
        if !self.in_use(db) {
            return;
        }
        let shards = self.dbs[db].shards();
        // A run of pairs naming one key: the key is looked up once, under one lock.
        for run in pairs.chunk_by(|a, b| a.0 == b.0) {
            let key = HashedKey::new(run[0].0);
            let Some(shard) = shards[key.shard()].try_lock() else { continue };
            if let Some(found) = shard.map.get(key.table_key()) {
                run.iter().for_each(|&(_, name)| found.entry().value.prefetch_element(name));
            }
        }
    }

    /// Locks one shard. Callers holding other shard locks must use `lock_many` instead.
    pub fn lock_shard(&self, db: usize, shard: usize) -> MutexGuard<'_, Shard> {
        self.dbs[db].shards()[shard].lock()
    }

    /// Locks every `(db, shard)` in `wanted` in ascending order (deduplicated).
    pub fn lock_many(&self, mut wanted: Vec<(usize, usize)>) -> Locks<'_> {
        wanted.sort_unstable();
        wanted.dedup();
        let guards = wanted.into_iter().map(|(db, shard)| ((db, shard), self.lock_shard(db, shard))).collect();
        Locks { guards }
    }

    /// Locks one shard: `lock_many` of one, without its sorting.
    pub fn lock_one(&self, db: usize, shard: usize) -> Locks<'_> {
        Locks { guards: smallvec::smallvec![((db, shard), self.lock_shard(db, shard))] }
    }

    /// Locks every shard of every database (for `EXEC` blocks that contain whole-keyspace
    /// commands).
    pub fn lock_all(&self) -> Locks<'_> {
        let wanted = (0..self.dbs.len()).flat_map(|db| (0..SHARDS_PER_DB).map(move |s| (db, s))).collect();
        self.lock_many(wanted)
    }

    /// `stamp` at a wall time read already (a command's `Ctx::now_ms`): saves a clock read
    /// per write (`Hlc::now_after_at`).
    pub fn stamp_at(&self, wall_ms: u64, stored: Option<Version>) -> Version {
        let hlc = self.hlc.now_after_at(wall_ms, stored.map_or(0, |v| v.hlc));
        Version { hlc, node: self.node_id }
    }

    /// A fresh version for a local write that supersedes `stored`.
    pub fn stamp(&self, stored: Option<Version>) -> Version {
        self.stamp_at(self.hlc.wall_ms(), stored)
    }

    /// Drops every key and every replication tombstone, in every database, without recording
    /// a replicated effect: for a node that must take its whole state from its peers
    /// (`Mesh::wipe_for_resync`). Returns the keys dropped.
    pub fn wipe(&self) -> usize {
        let mut keys = 0;
        for (i, db) in self.dbs.iter().enumerate() {
            // A database never used holds nothing (and locking a shard would allocate it).
            if self.in_use(i) {
                keys += (0..SHARDS_PER_DB).map(|s| self.lock_shard(i, s).wipe(db)).sum::<usize>();
            }
            db.flushed.reset();
        }
        *self.functions.lock() = functions::Registers::default();
        self.functions_generation.fetch_add(1, Ordering::AcqRel);
        keys
    }

    /// Ghosts (tombstones of deleted keys) held, in all databases.
    pub fn tombstones_held(&self) -> usize {
        self.dbs_in_use().map(|db| (0..SHARDS_PER_DB).map(|s| self.lock_shard(db, s).tombstones.len()).sum::<usize>()).sum()
    }

    pub fn volatile_keys(&self, db: usize) -> usize {
        self.dbs[db].volatile_keys.load(Ordering::Relaxed)
    }

    /// The mean time to live of `db`'s volatile keys at `now_ms`, in milliseconds, 0 with none
    /// (`INFO keyspace`'s `avg_ttl`): from every shard's deadlines added up, one shard at a
    /// time. A key past its deadline that active expiry has not yet taken (it takes one
    /// within ~100 ms) pulls the mean down by how far past it is, where Redis's samples skip it.
    pub fn avg_ttl_ms(&self, db: usize, now_ms: u64) -> u64 {
        if !self.in_use(db) {
            return 0;
        }
        let (sum, keys) =
            (0..SHARDS_PER_DB).map(|s| self.lock_shard(db, s).expiry_index.deadlines()).fold((0u128, 0usize), |(sum, keys), (s, k)| (sum + s, keys + k));
        if keys == 0 {
            return 0;
        }
        (sum / keys as u128).saturating_sub(u128::from(now_ms)) as u64
    }

    /// Live keys in `db`, one shard at a time.
    pub fn dbsize(&self, db: usize) -> usize {
        if !self.in_use(db) {
            return 0;
        }
        (0..SHARDS_PER_DB).map(|s| self.lock_shard(db, s).len()).sum()
    }

    /// Whether database `db` was ever used (its shards exist; locking one creates them). One
    /// that was not holds nothing, no ghosts and no pending registers, so a whole-keyspace
    /// pass that only reads or clears may skip it (and should, or it allocates them). A
    /// database this node does not have is not in use: a peer configured with more
    /// `databases` sends ops for it, and a link's prefetch asks before the merge refuses them.
    pub fn in_use(&self, db: usize) -> bool {
        self.dbs.get(db).is_some_and(|d| d.shards.get().is_some())
    }

    /// The databases in use (`in_use`), for whole-keyspace passes.
    pub fn dbs_in_use(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.dbs.len()).filter(|&db| self.in_use(db))
    }
}

/// The shard locks a command holds while it runs.
pub struct Locks<'a> {
    /// Sorted by `(db, shard)`. Inline for one shard, so the common one-key command locks
    /// without allocating.
    guards: SmallVec<[LockedShard<'a>; 1]>,
}

type LockedShard<'a> = ((usize, usize), MutexGuard<'a, Shard>);

impl<'a> Locks<'a> {
    pub fn none() -> Locks<'a> {
        Locks { guards: SmallVec::new() }
    }

    /// Adds the lock of `(db, shard)` out of order (a script touching a key it did not
    /// declare), waiting at most `wait`: blocking without a bound could deadlock against a
    /// command that holds it and waits for one of ours. Returns whether it is held now.
    pub fn try_add(&mut self, store: &'a Store, db: usize, shard: usize, wait: std::time::Duration) -> bool {
        let Err(at) = self.guards.binary_search_by(|(k, _)| k.cmp(&(db, shard))) else {
            return true;
        };
        let lock = &store.dbs[db].shards()[shard];
        let guard = if wait.is_zero() { lock.try_lock() } else { lock.try_lock_for(wait) };
        match guard {
            Some(guard) => {
                self.guards.insert(at, ((db, shard), guard));
                true
            }
            None => false,
        }
    }

    pub fn holds(&self, db: usize, shard: usize) -> bool {
        self.guards.binary_search_by(|(k, _)| k.cmp(&(db, shard))).is_ok()
    }

    /// Two different locked shards at once (`SWAPDB`).
    pub fn pair(&mut self, a: (usize, usize), b: (usize, usize)) -> (&mut Shard, &mut Shard) {
        let find =
            |guards: &[LockedShard<'a>], k| guards.binary_search_by(|(g, _)| g.cmp(&k)).unwrap_or_else(|_| panic!("shard {k:?} used without being locked"));
        let (i, j) = (find(&self.guards, a), find(&self.guards, b));
        assert_ne!(i, j, "pair needs two different shards");
        if i < j {
            let (left, right) = self.guards.split_at_mut(j);
            (&mut left[i].1, &mut right[0].1)
        } else {
            let (left, right) = self.guards.split_at_mut(i);
            (&mut right[0].1, &mut left[j].1)
        }
    }

    /// The locked shard. Locking is decided before a command runs from its key positions, so
    /// asking for an unlocked shard is a bug in the command table, not a runtime condition.
    pub fn get(&mut self, db: usize, shard: usize) -> &mut Shard {
        // The common one-key command holds one lock: no search.
        let at = if self.guards.len() == 1 && self.guards[0].0 == (db, shard) {
            0
        } else {
            match self.guards.binary_search_by(|(k, _)| k.cmp(&(db, shard))) {
                Ok(i) => i,
                Err(_) => panic!("shard ({db}, {shard}) used without being locked; fix the command's key spec"),
            }
        };
        &mut self.guards[at].1
    }
}

impl Shard {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The entry, whether or not it has expired.
    ///
    /// The key arguments of `Shard`'s methods are `KeyLike`: a `HashedKey` or `TableKey` is
    /// probed with the hash it carries, a plain byte string is hashed on the call.
    #[inline]
    pub fn raw<K: KeyLike + ?Sized>(&self, key: &K) -> Option<EntryRef<'_>> {
        self.map.get(key.table_key())
    }

    #[inline]
    pub fn raw_mut<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<EntryMut<'_>> {
        self.map.get_mut(key.table_key())
    }

    /// `remembered` of `key`, which this shard holds no value for.
    #[inline]
    pub fn remembered<K: KeyLike + ?Sized>(&self, key: &K) -> Version {
        remembered(&self.tombstones, &self.orphan_expiry, key)
    }

    /// `raw_mut`, or, for a missing key, where its insert goes: a write that may create its
    /// key probes the table once (`table::KeyTable::entry`).
    pub fn entry<'a, K: KeyLike + ?Sized>(&'a mut self, key: &'a K) -> KeyEntry<'a> {
        let Shard { map, tombstones, orphan_expiry, expiry_index, .. } = self;
        let key = key.table_key();
        match map.entry(key) {
            Probed::Found(entry) => KeyEntry::Found(entry),
            Probed::Vacant(vacant) => KeyEntry::Missing(MissingKey { vacant, tombstones, orphan_expiry, expiry_index, hash: key.hash() }),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], EntryRef<'_>)> {
        self.map.iter()
    }

    /// A key at random, or `None` (`table::KeyTable::draw`).
    pub fn draw(&self, rng: &mut impl rand::Rng) -> Option<(&[u8], EntryRef<'_>)> {
        self.map.draw(rng)
    }

    /// Inserts or replaces a key's entry (without an expiry register: the replaced entry's
    /// goes with it), keeping the expiry index in step.
    pub fn insert<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K, entry: Entry) -> Option<Removed> {
        let key = key.table_key();
        let old = self.map.insert(key, entry);
        let old_deadline = old.as_ref().and_then(Removed::deadline);
        self.reindex(db, key, old_deadline, None);
        old
    }

    pub fn remove<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K) -> Option<Removed> {
        let key = key.table_key();
        let old = self.map.remove(key)?;
        self.reindex(db, key, old.deadline(), None);
        Some(old)
    }

    /// Sets a key's expiry register, keeping the expiry index in step: the one way to change
    /// a stored register. Nothing happens if the key is missing.
    pub fn set_expiry<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K, expiry: Option<Expiry>) {
        let key = key.table_key();
        let new_deadline = expiry.as_ref().and_then(Expiry::deadline);
        let Some(old) = self.map.set_expiry(key, expiry) else { return };
        let old_deadline = old.as_ref().and_then(Expiry::deadline);
        self.reindex(db, key, old_deadline, new_deadline);
    }

    fn reindex(&mut self, db: &Db, key: TableKey<'_>, old: Option<u64>, new: Option<u64>) {
        reindex(&mut self.expiry_index, db, key.hash(), old, new);
    }

    /// The live entry of `key` at `now_ms`, with one table probe. An expired key is deleted on
    /// the way (its watchers touched, the expiry index kept in step) and reported as such:
    /// the caller counts it and fires its event.
    pub fn live_mut<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K, now_ms: u64) -> Lookup<'_> {
        let hashed = key.table_key();
        // Field by field: the entry found borrows `map` only.
        let Shard { map, expiry_index, watchers, .. } = self;
        match map.get_live_mut(hashed, |entry| entry.is_expired(now_ms)) {
            table::Live::Found(entry) => Lookup::Live(entry),
            table::Live::Missing => Lookup::Missing,
            table::Live::Removed(old) => {
                reindex(expiry_index, db, hashed.hash(), old.deadline(), None);
                touch_watchers(watchers, hashed.key());
                Lookup::Expired
            }
        }
    }

    /// Keys whose deadline has passed, earliest first, at most `limit`.
    pub fn due_keys(&self, now_ms: u64, limit: usize) -> Vec<Key> {
        let due = self.expiry_index.due(now_ms);
        due.flat_map(|(deadline, hash)| self.map.expiring_at(hash, deadline)).take(limit).map(Key::from).collect()
    }

    /// Drops the field/member tombstones of live hashes, sets and sorted sets that `keep`
    /// rejects (`expire::collect_tombstones`). Returns how many.
    pub fn retain_field_tombstones(&mut self, keep: &impl Fn(&Version) -> bool) -> usize {
        let mut dropped = 0;
        for entry in self.map.entries_mut() {
            let removed = match &mut entry.value {
                Value::Hash(c) => &mut c.removed,
                Value::Set(c) => &mut c.removed,
                Value::ZSet(z) => &mut z.removed,
                _ => continue,
            };
            if !removed.is_empty() {
                let before = removed.len();
                removed.retain(|_, v| keep(v));
                dropped += before - removed.len();
            }
        }
        dropped
    }

    /// Forgets everything, replication state included (`Store::wipe`).
    fn wipe(&mut self, db: &Db) -> usize {
        self.touch_existing();
        let n = self.clear(db);
        self.tombstones = SparseMap::default();
        self.orphan_expiry = SparseMap::default();
        n
    }

    pub fn clear(&mut self, db: &Db) -> usize {
        let n = self.map.len();
        db.volatile_keys.fetch_sub(self.expiry_index.len(), Ordering::Relaxed);
        self.map = table::KeyTable::default();
        self.expiry_index = ExpiryIndex::default();
        n
    }

    /// Exchanges the data (not the watchers) of the same shard in two databases (`SWAPDB`).
    pub fn swap_data(&mut self, db: &Db, other: &mut Shard, other_db: &Db) {
        let (mine, theirs) = (self.expiry_index.len(), other.expiry_index.len());
        std::mem::swap(&mut self.map, &mut other.map);
        std::mem::swap(&mut self.expiry_index, &mut other.expiry_index);
        db.volatile_keys.fetch_add(theirs, Ordering::Relaxed);
        db.volatile_keys.fetch_sub(mine, Ordering::Relaxed);
        other_db.volatile_keys.fetch_add(mine, Ordering::Relaxed);
        other_db.volatile_keys.fetch_sub(theirs, Ordering::Relaxed);
    }

    /// Removes an entry that became empty (or was superseded whole), leaving a ghost with its
    /// key-level and field tombstones for replication.
    /// The expiry register outlives the value (as an orphan): whether a later incarnation keeps
    /// it is decided by versions — a delete or whole write drops older registers, and a
    /// collection emptied by a local removal writes a "no TTL" register (see `Ctx::finish`) —
    /// never by the order in which a replica happened to see the writes.
    pub fn bury<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K) {
        let key = key.table_key();
        let Some(Removed { entry, expiry }) = self.remove(db, &key) else { return };
        if let Some(e) = expiry {
            if self.orphan_expiry.get(&key).is_none_or(|o| o.version < e.version) {
                self.orphan_expiry.insert(&key, e);
            }
        }
        let mut ghost = self.tombstones.remove(&key).unwrap_or_default();
        ghost.kind = Some(entry.value.kind());
        let (cleared, removed) = match &entry.value {
            Value::Hash(h) => (h.cleared, Some(&h.removed)),
            Value::Set(s) => (s.cleared, Some(&s.removed)),
            Value::ZSet(z) => (z.cleared, Some(&z.removed)),
            // A plain value dies only by a newer delete or write, which records itself.
            _ => (Version::ZERO, None),
        };
        ghost.cleared = ghost.cleared.max(cleared);
        if let Some(removed) = removed {
            ghost.add_removed(removed.iter());
        }
        self.tombstones.insert(&key, ghost);
    }

    pub fn watch(&mut self, key: &[u8], flag: WatchFlag) {
        self.watchers.entry(key.into()).or_default().push(flag);
    }

    pub fn unwatch(&mut self, key: &[u8], flag: &WatchFlag) {
        if let Some(list) = self.watchers.get_mut(key) {
            list.retain(|f| !Arc::ptr_eq(f, flag));
            if list.is_empty() {
                self.watchers.remove(key);
            }
        }
    }

    /// Marks every client watching `key` as dirty (Redis's `touchWatchedKey`).
    pub fn touch(&mut self, key: &[u8]) {
        touch_watchers(&self.watchers, key);
    }

    /// Marks watchers of every key that exists (a flush touches only those).
    pub fn touch_existing(&mut self) {
        for (key, list) in &self.watchers {
            if self.map.contains_key(TableKey::new(key)) {
                for flag in list {
                    flag.store(true, Ordering::Release);
                }
            }
        }
    }
}

impl Store {
    pub fn db(&self, index: usize) -> &Db {
        &self.dbs[index]
    }
}

impl Db {
    /// The database's shards, allocated on first use.
    #[inline]
    fn shards(&self) -> &[Mutex<Shard>] {
        match self.shards.get() {
            Some(shards) => shards,
            None => self.allocate(),
        }
    }

    /// The first use: off the lookup's path.
    #[cold]
    #[inline(never)]
    fn allocate(&self) -> &[Mutex<Shard>] {
        self.shards.get_or_init(|| (0..SHARDS_PER_DB).map(|_| Mutex::new(Shard::default())).collect())
    }
}

/// Keeps a shard's expiry index in step with the deadline of the key of table hash `hash`
/// going from `old` to `new` (either may be none), and the database's count of volatile keys
/// with it. Inline where the deadline is unchanged (most writes: a key without a TTL before
/// and after), the index's work out of line.
#[inline]
fn reindex(index: &mut ExpiryIndex, db: &Db, hash: u64, old: Option<u64>, new: Option<u64>) {
    if old != new {
        reindex_changed(index, db, hash, old, new);
    }
}

#[inline(never)]
fn reindex_changed(index: &mut ExpiryIndex, db: &Db, hash: u64, old: Option<u64>, new: Option<u64>) {
    if let Some(d) = old {
        index.remove(d, hash);
        db.volatile_keys.fetch_sub(1, Ordering::Relaxed);
    }
    if let Some(d) = new {
        index.insert(d, hash);
        db.volatile_keys.fetch_add(1, Ordering::Relaxed);
    }
}

/// Marks every client watching `key` as dirty (Redis's `touchWatchedKey`).
fn touch_watchers(watchers: &Map<Key, Vec<WatchFlag>>, key: &[u8]) {
    if watchers.is_empty() {
        return;
    }
    if let Some(list) = watchers.get(key) {
        for flag in list {
            flag.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::hlc::SystemClock;

    /// A `SparseMap` finds an entry by the key's bytes and by its `TableKey` or `HashedKey`
    /// alike (entries are placed by the table hash), through growth, removals, `retain` and
    /// `shrink_to_fit`, which rehash the stored keys.
    #[test]
    fn a_sparse_map_finds_a_key_by_its_bytes_or_its_hash_through_growth_and_shrinking() {
        let mut map = SparseMap::<u32>::default();
        let key = |i: u32| format!("key:{i}").into_bytes();
        assert_eq!(map.get(&key(1)[..]), None, "nothing in an empty map");
        for i in 0..2_000 {
            let k = key(i);
            let inserted = match i % 3 {
                0 => map.insert(&k[..], i),
                1 => map.insert(&TableKey::new(&k), i),
                _ => std::mem::replace(map.get_or_default(&HashedKey::new(&k)), i).checked_sub(1),
            };
            assert_eq!(inserted, None, "a new key replaces nothing");
        }
        assert_eq!(map.insert(&key(7)[..], 70), Some(7));
        *map.get_or_default(&TableKey::new(&key(8))) += 1;
        *map.get_mut(&HashedKey::new(&key(9))).unwrap() += 10;
        let expected = |i: u32| match i {
            7 => 70,
            8 => 9,
            9 => 19,
            i => i,
        };
        for i in 0..2_000 {
            let k = key(i);
            assert_eq!(map.get(&k[..]), Some(&expected(i)));
            assert_eq!(map.get(&TableKey::new(&k)), Some(&expected(i)));
            assert_eq!(map.get(&HashedKey::new(&k)), Some(&expected(i)));
        }
        for i in (0..2_000).filter(|i| i % 4 != 0) {
            let k = key(i);
            let removed = if i % 2 == 0 { map.remove(&k[..]) } else { map.remove(&TableKey::new(&k)) };
            assert_eq!(removed, Some(expected(i)));
            assert_eq!(map.remove(&k[..]), None, "removed once");
        }
        map.retain(|k, v| k.ends_with(b"0") || *v < 100);
        map.shrink_to_fit();
        let held: std::collections::BTreeMap<Vec<u8>, u32> = map.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
        let model: std::collections::BTreeMap<Vec<u8>, u32> =
            (0..2_000).filter(|i| i % 4 == 0).map(|i| (key(i), expected(i))).filter(|(k, v)| k.ends_with(b"0") || *v < 100).collect();
        assert_eq!(held, model);
        assert_eq!(map.len(), model.len());
        for (k, v) in &model {
            assert_eq!(map.get(&HashedKey::new(k)), Some(v), "found by its hash after shrinking");
        }
    }

    /// Unused databases cost no memory: the whole-keyspace passes (sizes, tombstone
    /// collection, expiry, snapshots, RDB export, wipe) leave them unallocated, and the
    /// first write allocates only its own database.
    #[test]
    fn databases_are_allocated_on_first_use_only() {
        let store = Store::new(16, Hlc::new(Arc::new(SystemClock), 500), 3);
        let now = store.hlc.wall_ms();
        let passes = |store: &Store| {
            assert_eq!((0..16).map(|db| store.dbsize(db)).sum::<usize>(), store.dbsize(5));
            assert_eq!(store.tombstones_held(), 0);
            expire::expire_cycle(store, now, &|_| {});
            expire::collect_tombstones(store, now, 0, 0);
            let mut ops = 0;
            crate::repl::snapshot::snapshot(store, &mut |batch| ops += batch.len());
            crate::persist::rdb::export(store, "test", &mut Vec::new());
            evict::make_room(store, evict::Policy::AllKeysRandom, 0, 5);
            // A pipelined batch's prefetch (a hint) neither allocates nor changes anything,
            // nor fails for a database this node does not have (a peer's op for one).
            store.prefetch(5, [b"k".as_slice(), b"missing"].map(HashedKey::new));
            store.prefetch(9, [b"k".as_slice(), b"k"].map(HashedKey::new));
            store.prefetch(99, [b"k".as_slice()].map(HashedKey::new));
            assert!(!store.in_use(99));
        };
        passes(&store);
        assert_eq!(store.dbs_in_use().count(), 0, "a pass over an empty keyspace allocated a database");
        let shard = store.shard_of(b"k");
        store.lock_shard(5, shard).insert(store.db(5), b"k", Entry::new(Value::Int(1), Version::ZERO));
        assert_eq!(store.dbs_in_use().collect::<Vec<_>>(), vec![5]);
        assert_eq!(store.dbsize(5), 1);
        store.wipe();
        passes(&store);
        assert_eq!(store.dbs_in_use().collect::<Vec<_>>(), vec![5]);
        assert_eq!(store.dbsize(5), 0);
    }

    #[derive(Debug, Clone)]
    enum ExpiryOp {
        /// Written with this deadline (0: none), created with its register when missing.
        Write(u8, u64),
        /// The register of a held key set (0: removed), as `EXPIRE` and `PERSIST` set it.
        SetDeadline(u8, u64),
        Remove(u8),
        /// Read at this time: a key whose deadline passed is deleted on the way.
        Read(u8, u64),
    }

    proptest::proptest! {
        /// The expiry index, which keeps each volatile key by its deadline and table hash
        /// (`ExpiryIndex`), names exactly the keys due at any time, each once, through every
        /// write, deadline change, removal and lazy expiry, and counts the volatile keys. Few
        /// deadlines, so many keys share one.
        #[test]
        fn the_expiry_index_finds_every_due_key_and_no_other(ops in prop::collection::vec(
            prop_oneof![
                (0u8..24, 0u64..5).prop_map(|(k, d)| ExpiryOp::Write(k, d)),
                (0u8..24, 0u64..5).prop_map(|(k, d)| ExpiryOp::SetDeadline(k, d)),
                (0u8..24).prop_map(ExpiryOp::Remove),
                (0u8..24, 1u64..5).prop_map(|(k, t)| ExpiryOp::Read(k, t)),
            ],
            1..120,
        )) {
            let store = Store::new(1, Hlc::new(Arc::new(SystemClock), 500), 3);
            let db = store.db(0);
            let mut shard = Shard::default();
            let mut model: HashMap<Vec<u8>, u64> = HashMap::new();
            let register = |d: u64| Expiry { deadline_ms: d, version: Version { hlc: 1, node: 1 } };
            for op in ops {
                match op {
                    ExpiryOp::Write(k, d) => {
                        let key = format!("key:{k}").into_bytes();
                        let entry = Entry::new(Value::Int(1), Version::ZERO);
                        match shard.entry(key.as_slice()) {
                            KeyEntry::Missing(missing) if d != 0 => missing.insert_expiring(db, entry, register(d)),
                            KeyEntry::Missing(missing) => missing.insert(entry),
                            KeyEntry::Found(_) => {
                                shard.insert(db, key.as_slice(), entry);
                                if d != 0 {
                                    shard.set_expiry(db, key.as_slice(), Some(register(d)));
                                }
                            }
                        }
                        model.insert(key, d);
                    }
                    ExpiryOp::SetDeadline(k, d) => {
                        let key = format!("key:{k}").into_bytes();
                        shard.set_expiry(db, key.as_slice(), Some(register(d)));
                        if let Some(held) = model.get_mut(&key) {
                            *held = d;
                        }
                    }
                    ExpiryOp::Remove(k) => {
                        let key = format!("key:{k}").into_bytes();
                        shard.remove(db, key.as_slice());
                        model.remove(&key);
                    }
                    ExpiryOp::Read(k, now) => {
                        let key = format!("key:{k}").into_bytes();
                        let _ = shard.live_mut(db, key.as_slice(), now);
                        if model.get(&key).is_some_and(|&d| d != 0 && d <= now) {
                            model.remove(&key);
                        }
                    }
                }
                let volatile = model.values().filter(|&&d| d != 0).count();
                prop_assert_eq!(shard.expiry_index.len(), volatile);
                prop_assert_eq!(store.volatile_keys(0), volatile);
                let deadline_sum: u128 = model.values().map(|&d| u128::from(d)).sum();
                prop_assert_eq!(shard.expiry_index.deadlines(), (deadline_sum, volatile));
                for now in 0..6 {
                    let mut due: Vec<Key> = shard.due_keys(now, usize::MAX);
                    due.sort();
                    let mut expected: Vec<Key> = model.iter().filter(|(_, &d)| d != 0 && d <= now).map(|(k, _)| Key::from(k.as_slice())).collect();
                    expected.sort();
                    prop_assert_eq!(&due, &expected, "due at {}", now);
                    // Earliest first, and at most the limit.
                    let first = shard.due_keys(now, 1);
                    prop_assert!(first.len() == expected.len().min(1));
                    if let Some(k) = first.first() {
                        prop_assert_eq!(model[k.as_ref()], model.iter().filter(|(_, &d)| d != 0 && d <= now).map(|(_, &d)| d).min().unwrap());
                    }
                }
            }
        }
    }
}
