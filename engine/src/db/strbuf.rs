//! `StrBuf`: a string value's bytes in 12 bytes (a pointer and a 32-bit length), so `Value`
//! is 16 bytes instead of 24 and the `Entry` 32 (see `db::node`, `db::table` and
//! docs/benchmarks.md, Memory).
//!
//! The bytes are an ordinary `Box<[u8]>` allocation (capacity == length), so converting to
//! and from `Vec<u8>`/`Box<[u8]>` moves the allocation without copying (the HLL commands
//! edit a string as a `Vec` and put it back). A string of `u32::MAX` bytes or more (possible
//! only with a raised `proto-max-bulk-len`) is kept behind one more box: the length field
//! says `u32::MAX` and the pointer is a `Box<Box<[u8]>>`.
//!
//! One of the four modules allowed `unsafe` (the workspace denies it; the others are
//! `db::node`, `script::active` and `script::stack`, and beside them one function,
//! `repl::wire`'s `StringSetOp::write_framed`): no safe type stores a slice's length
//! outside its allocation in 12 bytes. Each block says why it is sound; the tests check every
//! operation against a `Vec` model, and `db::table`'s against a `HashMap`.
#![allow(unsafe_code)]

use std::ptr::NonNull;

/// Marks the boxed representation of a string too long for the length field.
const LONG: u32 = u32::MAX;

/// Packed to 4-byte alignment so that inside `Value` the length sits beside the tag (and the
/// pointer on its natural 8-byte boundary): the enum stays 16 bytes
/// (`tests::value_is_16_bytes`).
#[repr(C, packed(4))]
pub struct StrBuf {
    len: u32,
    /// `len < LONG`: the start of a `Box<[u8]>` of `len` bytes (dangling when empty).
    /// `len == LONG`: a `Box<Box<[u8]>>`.
    ptr: NonNull<u8>,
}

// SAFETY: a `StrBuf` owns its allocation exclusively, like the `Box<[u8]>` it was made of
// (no shared or interior state), so it can move to and be shared with other threads as that
// box can.
unsafe impl Send for StrBuf {}
// SAFETY: as above; `&StrBuf` only gives `&[u8]`.
unsafe impl Sync for StrBuf {}

impl StrBuf {
    pub fn len(&self) -> usize {
        let len = self.len;
        if len == LONG {
            self.long().len()
        } else {
            len as usize
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn long(&self) -> &[u8] {
        let ptr = self.ptr;
        // SAFETY: `len == LONG` means `ptr` came from `Box::into_raw` of a `Box<Box<[u8]>>`
        // (`From<Box<[u8]>>`) that this value owns until `drop`/`into_box`.
        unsafe { ptr.cast::<Box<[u8]>>().as_ref() }
    }

    pub fn as_slice(&self) -> &[u8] {
        let (ptr, len) = (self.ptr, self.len);
        if len == LONG {
            return self.long();
        }
        // SAFETY: `len < LONG` means `ptr` is the start of an owned `Box<[u8]>` of `len` bytes
        // (or dangling and aligned with `len == 0`), alive while `self` is; the slice borrows
        // `self`, so it cannot outlive it.
        unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len as usize) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let (ptr, len) = (self.ptr, self.len);
        if len == LONG {
            // SAFETY: as in `long`, and `&mut self` makes this the only access.
            return unsafe { &mut *ptr.cast::<Box<[u8]>>().as_ptr() };
        }
        // SAFETY: as in `as_slice`; `&mut self` gives exclusive access to the bytes.
        unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len as usize) }
    }

    /// The bytes as the box they were made of, without copying.
    pub fn into_box(self) -> Box<[u8]> {
        let this = std::mem::ManuallyDrop::new(self);
        let (ptr, len) = (this.ptr, this.len);
        if len == LONG {
            // SAFETY: `ptr` came from `Box::into_raw` of a `Box<Box<[u8]>>` and is taken back
            // once: `this` will not be dropped.
            return *unsafe { Box::from_raw(ptr.cast::<Box<[u8]>>().as_ptr()) };
        }
        // SAFETY: `ptr`/`len` came from `Box::into_raw` of a `Box<[u8]>` of `len` bytes (or are
        // dangling with 0 bytes, which `Box` accepts for an empty slice), taken back once.
        unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), len as usize)) }
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.into_box().into_vec()
    }
}

impl Drop for StrBuf {
    fn drop(&mut self) {
        let (ptr, len) = (self.ptr, self.len);
        if len == LONG {
            // SAFETY: as in `into_box`: the `Box<Box<[u8]>>` this value owns, freed once.
            drop(unsafe { Box::from_raw(ptr.cast::<Box<[u8]>>().as_ptr()) });
        } else {
            // SAFETY: as in `into_box`: the `Box<[u8]>` of `len` bytes this value owns, freed once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), len as usize)) });
        }
    }
}

impl Default for StrBuf {
    fn default() -> StrBuf {
        StrBuf { ptr: NonNull::dangling(), len: 0 }
    }
}

impl From<Box<[u8]>> for StrBuf {
    fn from(bytes: Box<[u8]>) -> StrBuf {
        match u32::try_from(bytes.len()) {
            Ok(len) if len != LONG => {
                // Empty boxes are dangling already; keep them so (`into_box` rebuilds them).
                StrBuf { ptr: NonNull::from(Box::leak(bytes)).cast(), len }
            }
            _ => StrBuf { ptr: NonNull::from(Box::leak(Box::new(bytes))).cast(), len: LONG },
        }
    }
}

impl From<Vec<u8>> for StrBuf {
    fn from(bytes: Vec<u8>) -> StrBuf {
        bytes.into_boxed_slice().into()
    }
}

impl From<&[u8]> for StrBuf {
    fn from(bytes: &[u8]) -> StrBuf {
        let copy = Box::<[u8]>::from(bytes);
        if !copy.is_empty() {
            super::node::prefetch_next_allocation(copy.as_ptr(), copy.len());
        }
        copy.into()
    }
}

impl std::ops::Deref for StrBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for StrBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl Clone for StrBuf {
    fn clone(&self) -> StrBuf {
        StrBuf::from(self.as_slice())
    }
}

impl PartialEq for StrBuf {
    fn eq(&self, other: &StrBuf) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for StrBuf {}

impl std::fmt::Debug for StrBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_slice(), f)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn value_is_16_bytes() {
        assert_eq!(std::mem::size_of::<StrBuf>(), 12);
        assert_eq!(std::mem::size_of::<crate::db::Value>(), 16);
        assert_eq!(std::mem::size_of::<crate::db::Entry>(), 32, "the expiry register lives at the node's tail (`db::node`)");
    }

    #[test]
    fn empty_and_long_forms() {
        let empty = StrBuf::default();
        assert!(empty.is_empty() && empty.as_slice().is_empty());
        assert_eq!(empty.clone().into_vec(), Vec::<u8>::new());
        let from_empty = StrBuf::from(Vec::new());
        assert_eq!(from_empty, empty);
        // The boxed form, built directly (a 4 GiB string is too much for a unit test).
        let mut long = StrBuf { ptr: NonNull::from(Box::leak(Box::new(Box::<[u8]>::from(&b"abc"[..])))).cast(), len: LONG };
        assert_eq!(long.len(), 3);
        long.as_mut_slice()[0] = b'x';
        assert_eq!(&*long, b"xbc");
        assert_eq!(long.clone(), StrBuf::from(&b"xbc"[..]));
        assert_eq!(long.into_vec(), b"xbc");
        let dropped = StrBuf { ptr: NonNull::from(Box::leak(Box::new(Box::<[u8]>::from(&b"d"[..])))).cast(), len: LONG };
        drop(dropped);
    }

    #[test]
    fn moves_without_copying() {
        let v = b"registers".to_vec().into_boxed_slice();
        let at = v.as_ptr();
        let s = StrBuf::from(v);
        assert_eq!(s.as_ptr(), at);
        let back = s.into_vec();
        assert_eq!(back.as_ptr(), at);
    }

    proptest! {
        /// Every operation agrees with a `Vec<u8>` model (run under Miri or ASan to check the
        /// allocation handling as well).
        #[test]
        fn behaves_like_a_vec(bytes in prop::collection::vec(any::<u8>(), 0..300), edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
            let mut model = bytes.clone();
            let mut s = StrBuf::from(bytes.clone());
            prop_assert_eq!(s.len(), model.len());
            for (at, b) in edits {
                if !model.is_empty() {
                    let i = at % model.len();
                    model[i] = b;
                    s[i] = b;
                }
            }
            prop_assert_eq!(&s[..], &model[..]);
            let c = s.clone();
            prop_assert_eq!(&c[..], &model[..]);
            prop_assert_eq!(s.into_vec(), model.clone());
            prop_assert_eq!(StrBuf::from(&model[..]).into_box(), model.into_boxed_slice());
        }
    }
}
