//! `Node`: one key of a shard's table (`db::table`) in one allocation behind a thin
//! pointer, laid out so that a short key's node fits jemalloc's 48-byte size class:
//!
//! ```text
//! offset 0    the `Entry` (32 bytes: value, version, access clock)
//! offset 32   tag byte: bit 7 set = the key has an expiry register (at the tail);
//!             bits 0-6 = the key's length, or 127 = "long": a usize length follows
//! offset 33   the key's bytes (offset 33 + 8 for a long key), at their exact length
//! then        the `Expiry` register (24 bytes) at the next 8-byte boundary, if bit 7
//! ```
//!
//! A 14-byte key without a TTL takes 32 + 1 + 14 = 47 bytes, the 48-byte class (it was a
//! 64-byte node: the key inline in 24 bytes and a 40-byte `Entry` with a `Box<Expiry>`
//! pointer); with a TTL 48 + 24 = 72 bytes, the 80-byte class (it was 64 + a 32-byte box). The register is reallocated onto or off the tail when
//! a key first gets one or loses it (`set_expiry`); the key and entry stay where they are
//! in the allocation, so `realloc` moves them as bytes.
//!
//! The workspace's second `unsafe` module (beside `db::strbuf`; the others are `script::active`
//! and `script::stack`): no safe type stores a variable-length key and an optional tail behind
//! one 8-byte pointer.
//! Each block says why it is sound; `db::table`'s `HashMap`-model proptest drives every
//! operation (keys of many lengths, registers set, changed and removed, replacing, removing,
//! iterating).
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::mem::{align_of, size_of};
use std::ptr::NonNull;

use super::entry::{Entry, Expiry};

/// Where the tag byte sits: right after the entry.
const TAG: usize = size_of::<Entry>();
/// Tag bit: the register is at the tail.
const HAS_EXPIRY: u8 = 0x80;
/// Tag length value meaning "the length is the `usize` after the tag".
const LONG: u8 = 0x7f;
/// Every node's alignment: the entry's and the register's.
const ALIGN: usize = if align_of::<Entry>() > align_of::<Expiry>() { align_of::<Entry>() } else { align_of::<Expiry>() };

/// Where a key's bytes start and how the node is laid out, from the key's length and
/// whether the register is present (everything a node's size depends on).
#[derive(Clone, Copy)]
struct Shape {
    key_at: usize,
    key_len: usize,
    expiry: bool,
}

impl Shape {
    fn new(key_len: usize, expiry: bool) -> Shape {
        let key_at = if key_len < LONG as usize { TAG + 1 } else { TAG + 1 + size_of::<usize>() };
        Shape { key_at, key_len, expiry }
    }

    fn expiry_at(self) -> usize {
        (self.key_at + self.key_len).next_multiple_of(align_of::<Expiry>())
    }

    fn size(self) -> usize {
        if self.expiry {
            self.expiry_at() + size_of::<Expiry>()
        } else {
            self.key_at + self.key_len
        }
    }

    fn layout(self) -> Layout {
        Layout::from_size_align(self.size(), ALIGN).expect("a key's node is smaller than isize::MAX")
    }

    fn tag(self) -> u8 {
        let len = if self.key_len < LONG as usize { self.key_len as u8 } else { LONG };
        if self.expiry {
            len | HAS_EXPIRY
        } else {
            len
        }
    }
}

/// Asks the CPU to start loading the cache line holding `addr`, and returns at once: a
/// hint that lets the lookups of a pipelined batch overlap their cache misses
/// (`Store::prefetch`) instead of paying them one after another. Any address is fine: the
/// instruction never faults and reads nothing the program can see.
#[inline]
pub(crate) fn prefetch(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 belongs to SSE, which every x86_64 CPU has; it only moves a cache
    // line closer and never faults or reads memory architecturally, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Starts loading the lines just past a fresh allocation of `size` bytes at `ptr`: where the
/// allocator's next allocation of the same size most likely lies, since jemalloc hands out a
/// fresh slab's regions in address order. A key inserted into a growing keyspace writes its
/// node and its value into lines no one has touched; the stores do not wait, but the next
/// locked instruction (a shard's unlock, an atomic count) waits until they complete: a memory
/// round trip per write, unless the lines were loaded while the write before ran. A hint
/// only: where the next allocation lies elsewhere (reused memory, already in the cache),
/// nothing but the prefetches is spent (docs/benchmarks.md, "A new key's slot, and the lines
/// after a fresh allocation").
pub(crate) fn prefetch_next_allocation(ptr: *const u8, size: usize) {
    for offset in [size, size + 64, (2 * size).saturating_sub(1)] {
        prefetch(ptr.wrapping_add(offset));
    }
}

/// An owning thin pointer to a node (see the module doc).
pub struct Node(NonNull<u8>);

// SAFETY: a `Node` owns its allocation exclusively, as a `Box<(Entry, [u8], Option<Expiry>)>`
// would (no shared or interior state), and `Entry` and `Expiry` are `Send` and `Sync`, so the
// node can move to and be shared with other threads as that box could.
unsafe impl Send for Node {}
// SAFETY: as above; `&Node` gives only shared references into the allocation.
unsafe impl Sync for Node {}

impl Node {
    /// A node for `key` holding `entry`, without an expiry register.
    pub fn new(key: &[u8], entry: Entry) -> Node {
        Node::allocate(key, entry, None)
    }

    /// A node for `key` holding `entry` and `expiry`: a key written with its TTL (`SET EX`)
    /// is allocated with the register's room at once, where `set_expiry` after `new` moved
    /// it to a larger allocation.
    pub fn with_expiry(key: &[u8], entry: Entry, expiry: Expiry) -> Node {
        Node::allocate(key, entry, Some(expiry))
    }

    /// Inlined into `new` and `with_expiry`: `new`'s register checks fold away (as a call
    /// taking `None`, they cost a merged `SET` ~17 instructions, callgrind).
    #[inline(always)]
    fn allocate(key: &[u8], entry: Entry, expiry: Option<Expiry>) -> Node {
        let shape = Shape::new(key.len(), expiry.is_some());
        let layout = shape.layout();
        // SAFETY: the layout's size is at least `TAG + 1`, never zero.
        let ptr = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(ptr) else { alloc::handle_alloc_error(layout) };
        prefetch_next_allocation(ptr.as_ptr(), layout.size());
        // SAFETY: `ptr` is a fresh allocation of `shape.size()` bytes aligned to `ALIGN` (at
        // least `Entry`'s alignment): the entry fits at 0, the tag at `TAG`, a long key's
        // length (unaligned) right after it and the key's bytes at `key_at`, all inside it
        // (`Shape::size`), and so does a register at `expiry_at` (aligned to `Expiry`) when
        // the shape has one. The key does not overlap the fresh allocation.
        unsafe {
            ptr.as_ptr().cast::<Entry>().write(entry);
            ptr.as_ptr().add(TAG).write(shape.tag());
            if shape.key_at != TAG + 1 {
                ptr.as_ptr().add(TAG + 1).cast::<usize>().write_unaligned(key.len());
            }
            std::ptr::copy_nonoverlapping(key.as_ptr(), ptr.as_ptr().add(shape.key_at), key.len());
            if let Some(e) = expiry {
                ptr.as_ptr().add(shape.expiry_at()).cast::<Expiry>().write(e);
            }
        }
        Node(ptr)
    }

    /// Starts loading the node's first bytes, where its entry, tag and (short) key sit
    /// (`prefetch`): a node can straddle two cache lines.
    pub fn prefetch(&self) {
        let start = self.0.as_ptr();
        prefetch(start);
        prefetch(start.wrapping_add(TAG + 16));
    }

    /// Starts loading the line where the node's tag and a short key's first bytes sit, for a
    /// reader of the key alone (`KeyTable::grow`, which hashes it).
    pub fn prefetch_key(&self) {
        prefetch(self.0.as_ptr().wrapping_add(TAG));
    }

    fn shape(&self) -> Shape {
        let tag = self.tag();
        let expiry = tag & HAS_EXPIRY != 0;
        let len = tag & !HAS_EXPIRY;
        if len == LONG {
            // SAFETY: a long key's length was written after the tag by `new`, inside the
            // allocation, which is alive while `self` is.
            let key_len = unsafe { self.0.as_ptr().add(TAG + 1).cast::<usize>().read_unaligned() };
            Shape::new(key_len, expiry)
        } else {
            Shape { key_at: TAG + 1, key_len: len as usize, expiry }
        }
    }

    pub fn key(&self) -> &[u8] {
        let shape = self.shape();
        // SAFETY: the key's `key_len` bytes were written at `key_at` by `new` and never
        // change; they live as long as the node, which the slice borrows.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(shape.key_at), shape.key_len) }
    }

    pub fn entry(&self) -> &Entry {
        // SAFETY: a valid `Entry` sits at offset 0, aligned, for the node's whole life (it is
        // moved out only by `into_parts`, which consumes the node); the borrow is `self`'s.
        unsafe { &*self.0.as_ptr().cast::<Entry>() }
    }

    /// The entry and the register, both borrowed from the node.
    pub fn parts(&self) -> (&Entry, Option<&Expiry>) {
        (self.entry(), self.expiry())
    }

    fn tag(&self) -> u8 {
        // SAFETY: every node has its tag at `TAG` (`new`, kept by `set_expiry`), inside the
        // allocation, which is alive while `self` is.
        unsafe { *self.0.as_ptr().add(TAG) }
    }

    pub fn expiry(&self) -> Option<&Expiry> {
        // Most keys have none: answer from the tag without working out the node's shape.
        if self.tag() & HAS_EXPIRY == 0 {
            return None;
        }
        let shape = self.shape();
        // SAFETY: with the tag's bit set, an initialised, aligned `Expiry` sits at
        // `expiry_at` (`set_expiry` writes it before setting the bit) inside the allocation.
        shape.expiry.then(|| unsafe { &*self.0.as_ptr().add(shape.expiry_at()).cast::<Expiry>() })
    }

    /// The entry to change and the register to read. The two do not overlap (the entry ends
    /// at `TAG`, the register starts after the key), so the borrows are disjoint.
    pub fn parts_mut(&mut self) -> (&mut Entry, Option<&Expiry>) {
        let base = self.0.as_ptr();
        if self.tag() & HAS_EXPIRY == 0 {
            // SAFETY: as in `entry`; `&mut self` makes this the only access to the node.
            return (unsafe { &mut *base.cast::<Entry>() }, None);
        }
        let shape = self.shape();
        // SAFETY: as in `entry` and `expiry`; `&mut self` makes this the only access to the
        // node, and the two references cover disjoint bytes of it (`[0, TAG)` and
        // `[expiry_at, size)`, `expiry_at > TAG`).
        unsafe {
            let expiry = shape.expiry.then(|| &*base.add(shape.expiry_at()).cast::<Expiry>());
            (&mut *base.cast::<Entry>(), expiry)
        }
    }

    /// Sets or removes the register, reallocating the node when it gains or loses its tail
    /// (the pointer changes: the table that holds it passes its slot). Returns the old one.
    pub fn set_expiry(&mut self, expiry: Option<Expiry>) -> Option<Expiry> {
        let old_shape = self.shape();
        let old = self.expiry().copied();
        let new_shape = Shape { expiry: expiry.is_some(), ..old_shape };
        if old_shape.expiry != new_shape.expiry {
            let (old_layout, new_layout) = (old_shape.layout(), new_shape.layout());
            // Moved by hand, not by `realloc`: the register's 24 bytes take a short key's node
            // to another size class, where jemalloc's `rallocx` first tries to grow in place,
            // then looks the old size up, allocates, copies and frees (~330 instructions of a
            // peer's merged `SETEX`, callgrind); a sized free of a known layout skips both.
            // SAFETY: the new layout's size is non-zero (`Shape::layout`).
            let ptr = unsafe { alloc::alloc(new_layout) };
            let Some(ptr) = NonNull::new(ptr) else { alloc::handle_alloc_error(new_layout) };
            // SAFETY: the first `min(old, new)` bytes of the old allocation hold the entry, tag
            // and key (both shapes share them) and fit in both; the allocations are distinct.
            // The old one was allocated with `old_layout` (its shape is the one its tag says)
            // and is freed once, its bytes moved (the entry is not dropped); `self.0` then
            // points at the new one only.
            unsafe {
                std::ptr::copy_nonoverlapping(self.0.as_ptr(), ptr.as_ptr(), old_layout.size().min(new_layout.size()));
                alloc::dealloc(self.0.as_ptr(), old_layout);
            }
            self.0 = ptr;
            // SAFETY: the tag byte is inside the (new) allocation; it now says the new shape,
            // which is the allocation's.
            unsafe { ptr.as_ptr().add(TAG).write(new_shape.tag()) };
        }
        if let Some(e) = expiry {
            // SAFETY: the node now has the register's room at `expiry_at`, aligned, inside the
            // allocation; `Expiry` is `Copy`, so overwriting the old one needs no drop.
            unsafe { self.0.as_ptr().add(new_shape.expiry_at()).cast::<Expiry>().write(e) };
        }
        old
    }

    /// The entry and register, freeing the node.
    pub fn into_parts(self) -> (Entry, Option<Expiry>) {
        let this = std::mem::ManuallyDrop::new(self);
        let expiry = this.expiry().copied();
        let layout = this.shape().layout();
        // SAFETY: the entry is read out once and the allocation freed with the layout it has
        // (`shape`); `this` is not dropped, so neither happens again.
        unsafe {
            let entry = this.0.as_ptr().cast::<Entry>().read();
            alloc::dealloc(this.0.as_ptr(), layout);
            (entry, expiry)
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let layout = self.shape().layout();
        // SAFETY: the node owns a valid entry at 0 and its allocation of `layout`; both are
        // dropped and freed once, here.
        unsafe {
            self.0.as_ptr().cast::<Entry>().drop_in_place();
            alloc::dealloc(self.0.as_ptr(), layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Value;
    use crate::hlc::Version;

    #[test]
    fn a_short_keys_node_fits_48_bytes() {
        assert_eq!(size_of::<Entry>(), 32, "the entry should stay 32 bytes");
        assert_eq!(size_of::<Expiry>(), 24);
        assert_eq!(Shape::new(14, false).size(), 47, "a 14-byte key's node is in the 48-byte class");
        assert_eq!(Shape::new(14, true).size(), 72);
        assert_eq!(Shape::new(126, false).key_at, TAG + 1);
        assert_eq!(Shape::new(127, false).key_at, TAG + 1 + size_of::<usize>());
    }

    #[test]
    fn the_register_comes_and_goes_with_the_tail() {
        let v = |n| Version { hlc: n, node: 7 };
        for len in [0, 1, 14, 15, 126, 127, 128, 300] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut n = Node::new(&key, Entry::new(Value::string(b"some bytes"), v(1)));
            assert_eq!((n.key(), n.expiry()), (&key[..], None));
            assert_eq!(n.set_expiry(Some(Expiry { deadline_ms: 5, version: v(2) })), None);
            assert_eq!(n.expiry(), Some(&Expiry { deadline_ms: 5, version: v(2) }));
            assert_eq!(n.set_expiry(Some(Expiry { deadline_ms: 6, version: v(3) })).map(|e| e.deadline_ms), Some(5));
            assert_eq!(n.key(), &key[..]);
            assert_eq!(n.entry().version(), v(1));
            n.parts_mut().0.set_version(v(4));
            assert_eq!(n.set_expiry(None).map(|e| e.deadline_ms), Some(6));
            assert_eq!((n.key(), n.expiry(), n.entry().version()), (&key[..], None, v(4)));
            n.set_expiry(Some(Expiry { deadline_ms: 0, version: v(5) }));
            let (entry, expiry) = n.into_parts();
            assert!(matches!(entry.value, Value::Str(ref s) if &s[..] == b"some bytes"));
            assert_eq!(expiry, Some(Expiry { deadline_ms: 0, version: v(5) }));
        }
    }

    #[test]
    fn a_node_made_with_its_register_is_the_node_that_took_it_after() {
        let v = |n| Version { hlc: n, node: 7 };
        for len in [0, 1, 14, 15, 126, 127, 128, 300] {
            // One register per length: a node's memory may be an earlier one's.
            let register = Expiry { deadline_ms: 9 + len as u64, version: v(2) };
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut made = Node::with_expiry(&key, Entry::new(Value::string(b"some bytes"), v(1)), register);
            let mut moved = Node::new(&key, Entry::new(Value::string(b"some bytes"), v(1)));
            moved.set_expiry(Some(register));
            assert_eq!((made.key(), made.expiry(), made.entry().version()), (moved.key(), moved.expiry(), moved.entry().version()));
            assert_eq!(made.shape().layout(), moved.shape().layout(), "one shape, freed with one layout");
            assert_eq!(made.set_expiry(None), Some(register));
            assert_eq!((made.key(), made.expiry()), (&key[..], None));
            let bare = Node::new(&key, Entry::new(Value::string(b"x"), v(1)));
            assert_eq!((bare.key(), bare.expiry(), bare.shape().layout()), (&key[..], None, Shape::new(len, false).layout()));
        }
    }
}
