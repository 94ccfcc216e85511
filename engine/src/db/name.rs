//! `Name`: an element's name as a collection stores it (a hash's field, a set's or a sorted
//! set's member, a removed one's tombstone; `FieldMap`'s keys), in 24 bytes: up to
//! `INLINE` bytes inside the handle itself, longer ones in a boxed slice of exactly their length.
//! A hash field's value and a list's item are kept the same way (`entry::Field`,
//! `entry::ListValue`), for the same reasons.
//!
//! Why not `Bytes` (32 bytes, and always an allocation of its own): most names are short (ids,
//! words, `element:000000123456`), and a table bucket holds its element's name. Inline, a
//! lookup compares the name where the bucket already is instead of loading a second line
//! from elsewhere in memory, an insert makes no allocation for it, and a set's member costs
//! its bucket alone (docs/benchmarks.md, "Names inside the table").

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

use bytes::Bytes;

/// The longest name kept inside the handle: what fits beside its length and the variant's
/// tag in the 24 bytes the boxed form takes anyway (`tests::a_name_is_24_bytes`).
pub const INLINE: usize = 22;

#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<[u8]>),
}

impl Name {
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..*len as usize],
            Repr::Boxed(bytes) => bytes,
        }
    }

    /// The name as a `Bytes` (a reply's, an effect's): a copy.
    pub fn to_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_slice())
    }

    /// Heap bytes the name holds besides its handle (`MEMORY USAGE`).
    pub fn heap_size(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Boxed(bytes) => bytes.len(),
        }
    }
}

impl From<&[u8]> for Name {
    fn from(name: &[u8]) -> Name {
        if name.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..name.len()].copy_from_slice(name);
            Name(Repr::Inline { len: name.len() as u8, bytes })
        } else {
            Name(Repr::Boxed(name.into()))
        }
    }
}

impl From<Bytes> for Name {
    fn from(name: Bytes) -> Name {
        Name::from(&name[..])
    }
}

impl From<Name> for Bytes {
    fn from(name: Name) -> Bytes {
        match name.0 {
            Repr::Inline { .. } => name.to_bytes(),
            // The allocation moves into the `Bytes`, no copy.
            Repr::Boxed(bytes) => Bytes::from(bytes),
        }
    }
}

impl std::ops::Deref for Name {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Name {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A map of names is searched with a slice: equal names must hash as their slices do.
impl Borrow<[u8]> for Name {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Hash for Name {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Name {}

impl PartialEq<Bytes> for Name {
    fn eq(&self, other: &Bytes) -> bool {
        self.as_slice() == &other[..]
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&Bytes::copy_from_slice(self.as_slice()), f)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn a_name_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Name>(), 24);
    }

    /// Every length either side of `INLINE`: the bytes, the order, the hash (a slice's, for
    /// lookups by slice) and the conversions back to `Bytes` are the name's.
    #[test]
    fn a_name_is_its_bytes_inline_or_boxed() {
        let hasher = RandomState::new();
        let names: Vec<Vec<u8>> = (0..=INLINE + 2).map(|n| (0..n as u8).map(|b| b.wrapping_mul(37)).collect()).collect();
        for bytes in &names {
            let name = Name::from(&bytes[..]);
            assert_eq!(&name[..], &bytes[..]);
            assert_eq!(name.heap_size(), if bytes.len() <= INLINE { 0 } else { bytes.len() });
            assert_eq!(hasher.hash_one(&name), hasher.hash_one(&bytes[..]));
            assert_eq!(Bytes::from(name.clone()), bytes[..]);
            assert_eq!(name.to_bytes(), bytes[..]);
            assert_eq!(format!("{name:?}"), format!("{:?}", Bytes::copy_from_slice(bytes)));
            for other in &names {
                let other_name = Name::from(&other[..]);
                assert_eq!(name.cmp(&other_name), bytes.cmp(other));
                assert_eq!(name == other_name, bytes == other);
            }
        }
    }
}
