//! The replicated `FUNCTION` libraries: each library name is an LWW register
//! (`LibraryRegister`) holding the library's whole `FUNCTION LOAD` payload, or a tombstone
//! (`FUNCTION DELETE`), at the version of the write that set it; `FUNCTION FLUSH` is a flush
//! point (`Registers::flushed`) that dominates every older library version, as a database's
//! flush point dominates its keys.
//!
//! The registers live in the `Store` beside the keyspace, so the mesh (`repl::merge`), the
//! full sync and the snapshot file (`repl::snapshot`) carry them as they carry keys. What a
//! node can call is compiled from them by `script::Scripts::sync_functions` in the node's own
//! Lua VMs, whenever they changed (`Store::functions_generation`).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::effect::{Effect, EffectKind};
use super::lattice::Merge;
use super::Store;
use crate::hlc::Version;

/// One library name's state: its code (the whole payload, shebang included), or `None` for
/// a deleted library, at the version that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryRegister {
    pub code: Option<Bytes>,
    pub version: Version,
}

impl LibraryRegister {
    /// The register's order: its version, then (only for two states at one version, which a
    /// correct mesh never makes: a version names one write) a tombstone below any code, and
    /// codes by their bytes. A total order, so the merge is a lattice on every input.
    fn rank(&self) -> (Version, Option<&[u8]>) {
        (self.version, self.code.as_deref())
    }
}

/// An LWW register: the greater state by `rank` wins.
///
/// Laws: the maximum of a total order, so commutative, associative and idempotent, ties
/// included (`rank` breaks them by content).
impl Merge for LibraryRegister {
    fn merge(&mut self, other: &LibraryRegister) -> bool {
        let changed = other.rank() > self.rank();
        if changed {
            *self = other.clone();
        }
        changed
    }
}

/// Every library register a node holds and the `FUNCTION FLUSH` point. Normalised: no
/// register at or below `flushed` is kept (the flush point stands for them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registers {
    pub flushed: Version,
    pub libraries: BTreeMap<String, LibraryRegister>,
}

/// The flush point (a max register) and each name's register, with what the flush point
/// dominates dropped.
///
/// Laws: a product of max registers (the flush point, each name's `LibraryRegister`) with
/// registers at or below the flush point identified with their absence; merging takes the
/// greater flush point, drops what it dominates, then merges each surviving register, so it
/// is commutative, associative and idempotent (property-tested below).
impl Merge for Registers {
    fn merge(&mut self, other: &Registers) -> bool {
        let mut changed = self.flush(other.flushed);
        for (name, register) in &other.libraries {
            changed |= self.merge_library(name, register);
        }
        changed
    }
}

impl Registers {
    /// A flush at `v`: every library register older than it dies. Returns whether it was new.
    pub fn flush(&mut self, v: Version) -> bool {
        if !self.flushed.merge(&v) {
            return false;
        }
        self.libraries.retain(|_, r| r.version > v);
        true
    }

    /// One library's register from a peer (or this node's own write): taken if newer than
    /// the flush point and than what is held of `name`. Returns whether it was taken.
    pub fn merge_library(&mut self, name: &str, register: &LibraryRegister) -> bool {
        if register.version <= self.flushed {
            return false;
        }
        match self.libraries.get_mut(name) {
            Some(held) => held.merge(register),
            None => {
                self.libraries.insert(name.to_string(), register.clone());
                true
            }
        }
    }

    /// The newest version this state holds for `name` (its register, else the flush point):
    /// a local write to `name` is stamped after it.
    pub fn floor(&self, name: &str) -> Version {
        self.libraries.get(name).map_or(self.flushed, |r| r.version.max(self.flushed))
    }

    /// The newest version anywhere in this state: a local `FUNCTION FLUSH` is stamped after it.
    pub fn newest(&self) -> Version {
        self.libraries.values().map(|r| r.version).fold(self.flushed, Version::max)
    }

    /// The live libraries (name, code, version).
    pub fn live(&self) -> impl Iterator<Item = (&String, &Bytes, Version)> {
        self.libraries.iter().filter_map(|(name, r)| r.code.as_ref().map(|code| (name, code, r.version)))
    }

    /// The effects that recreate this state on a peer (full sync, the snapshot file).
    pub fn effects(&self) -> Vec<Effect> {
        let mut out = Vec::with_capacity(self.libraries.len() + 1);
        if self.flushed > Version::ZERO {
            out.push(Effect::function_flush(self.flushed));
        }
        for (name, r) in &self.libraries {
            out.push(Effect::library(name, r.code.clone(), r.version));
        }
        out
    }
}

impl Store {
    /// A copy of the library registers (for `Scripts::sync_functions`, tests).
    pub fn function_registers(&self) -> Registers {
        self.functions.lock().clone()
    }

    /// Moves whenever the library registers change.
    pub fn functions_generation(&self) -> u64 {
        self.functions_generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Merges a library effect (from a peer, a file, or this node's own write). Returns
    /// whether the registers changed.
    pub fn merge_function_effect(&self, effect: &Effect) -> bool {
        let mut registers = self.functions.lock();
        let changed = match &effect.kind {
            EffectKind::Library { code, version } => match std::str::from_utf8(&effect.key) {
                Ok(name) => registers.merge_library(name, &LibraryRegister { code: code.clone(), version: *version }),
                // Library names are ASCII (`script::functions::valid_name`): no node writes this.
                Err(_) => false,
            },
            EffectKind::FunctionFlush { version } => registers.flush(*version),
            _ => false,
        };
        if changed {
            self.functions_generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            self.stats.dirty.incr();
        }
        changed
    }

    /// A local `FUNCTION LOAD` (`code`) or `FUNCTION DELETE` (`None`) of `name`: stamps a
    /// version newer than anything this node holds for it, writes the register, and returns
    /// the version and the effect for the peers. Commands go through `Ctx::write_library`,
    /// which emits the effect.
    pub(super) fn write_library(&self, name: &str, code: Option<Bytes>) -> (Version, Effect) {
        let version = self.stamp(Some(self.functions.lock().floor(name)));
        let effect = Effect::library(name, code, version);
        self.merge_function_effect(&effect);
        (version, effect)
    }

    /// A local `FUNCTION FLUSH`: a flush point newer than every library this node holds
    /// (stamped even when it holds none, so it still dominates older loads on their way).
    /// Commands go through `Ctx::flush_libraries`, which emits the effect.
    pub(super) fn flush_libraries(&self) -> Effect {
        let effect = {
            let registers = self.functions.lock();
            Effect::function_flush(self.stamp(Some(registers.newest())))
        };
        self.merge_function_effect(&effect);
        effect
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::db::lattice::check_laws;
    use crate::db::lattice::strategies::{name, version};

    /// A register as a correct mesh makes it: the code a write at `v` wrote, or a tombstone.
    fn register() -> impl Strategy<Value = (String, LibraryRegister)> {
        (name(), version(), any::<bool>()).prop_map(|(n, v, live)| {
            let code = live.then(|| Bytes::from(format!("#!lua name=x\n-- {}", crate::db::lattice::strategies::written(&n, v))));
            (String::from_utf8_lossy(&n).into_owned(), LibraryRegister { code, version: v })
        })
    }

    fn registers() -> impl Strategy<Value = Registers> {
        (prop::option::of(version()), prop::collection::vec(register(), 0..5)).prop_map(|(flushed, libs)| {
            let mut r = Registers::default();
            if let Some(f) = flushed {
                r.flush(f);
            }
            for (n, l) in libs {
                r.merge_library(&n, &l);
            }
            r
        })
    }

    /// Any two states of a register, even two at one version with different code.
    fn any_register() -> impl Strategy<Value = LibraryRegister> {
        (version(), prop::option::of(0u8..3)).prop_map(|(version, code)| LibraryRegister { code: code.map(|c| Bytes::from(vec![c])), version })
    }

    proptest! {
        #[test]
        fn a_library_register_is_a_lattice_even_with_ties(a in any_register(), b in any_register(), c in any_register()) {
            check_laws(&a, &b, &c, |x, y| x == y);
        }

        #[test]
        fn the_function_registers_are_a_lattice(a in registers(), b in registers(), c in registers()) {
            check_laws(&a, &b, &c, |x, y| x == y);
        }

        /// Merging is normalising: nothing at or below the flush point survives, and every
        /// register newer than the greater flush point does.
        #[test]
        fn a_flush_dominates_exactly_the_older_libraries(a in registers(), b in registers()) {
            let mut m = a.clone();
            m.merge(&b);
            prop_assert_eq!(m.flushed, a.flushed.max(b.flushed));
            prop_assert!(m.libraries.values().all(|r| r.version > m.flushed));
            for (name, r) in a.libraries.iter().chain(&b.libraries) {
                if r.version > m.flushed {
                    prop_assert!(m.libraries.get(name).is_some_and(|held| held.version >= r.version));
                }
            }
        }
    }

    fn store(node: u32) -> Store {
        use crate::hlc::{Hlc, SystemClock};
        Store::new(1, Hlc::new(std::sync::Arc::new(SystemClock), 500), node)
    }

    /// The merge through the keyspace's entry point (`apply_op`, what the mesh and the file
    /// loader call), in any order and with duplicates, and the full sync / snapshot effects
    /// (`repl::snapshot`) recreate the same registers on a fresh node.
    #[test]
    fn library_effects_merge_in_any_order_and_a_snapshot_recreates_them() {
        use crate::repl::merge::{apply_op, ApplyOutcome};
        let (a, b) = (store(1), store(2));
        let mut effects = vec![
            a.write_library("lib", Some(Bytes::from_static(b"#!lua name=lib\n-- 1"))).1,
            a.write_library("gone", Some(Bytes::from_static(b"#!lua name=gone\n-- 1"))).1,
        ];
        effects.push(a.flush_libraries());
        effects.push(a.write_library("lib", Some(Bytes::from_static(b"#!lua name=lib\n-- 2"))).1);
        effects.push(a.write_library("deleted", None).1);
        for order in [effects.clone(), effects.iter().rev().cloned().collect::<Vec<_>>()] {
            let c = store(3);
            for e in order.iter().chain(&order) {
                assert_ne!(apply_op(&c, e), ApplyOutcome::Applied, "a library effect changes no key");
            }
            assert_eq!(c.function_registers(), a.function_registers());
        }
        let live: Vec<_> = a.function_registers().live().map(|(n, c, _)| (n.clone(), c.clone())).collect();
        assert_eq!(live, [("lib".to_string(), Bytes::from_static(b"#!lua name=lib\n-- 2"))]);
        let mut synced = Vec::new();
        crate::repl::snapshot::snapshot(&a, &mut |batch| synced.extend(batch));
        for e in &synced {
            assert_eq!(apply_op(&b, e), ApplyOutcome::Functions);
        }
        assert_eq!(b.function_registers(), a.function_registers(), "a full sync carries the flush point, the code and the tombstones");
        let before = b.functions_generation();
        assert_eq!(apply_op(&b, &synced[1]), ApplyOutcome::Superseded, "a replay changes nothing");
        assert_eq!(b.functions_generation(), before);
    }

    #[test]
    fn a_newer_write_wins_a_tombstone_beats_older_code_and_a_flush_beats_older_loads() {
        let v = |hlc, node| Version { hlc, node };
        let code = |s: &str| Some(Bytes::from(s.to_string()));
        let mut r = Registers::default();
        assert!(r.merge_library("lib", &LibraryRegister { code: code("a"), version: v(10, 1) }));
        assert!(!r.merge_library("lib", &LibraryRegister { code: code("old"), version: v(9, 2) }), "older code loses");
        assert!(r.merge_library("lib", &LibraryRegister { code: code("b"), version: v(10, 2) }), "same ms, higher node wins");
        assert!(r.merge_library("lib", &LibraryRegister { code: None, version: v(11, 1) }), "a newer delete wins");
        assert_eq!(r.live().count(), 0);
        assert!(r.merge_library("other", &LibraryRegister { code: code("c"), version: v(20, 1) }));
        assert!(r.flush(v(15, 1)));
        assert!(!r.libraries.contains_key("lib"), "the flush dropped the older tombstone");
        assert_eq!(r.live().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>(), ["other"], "a load newer than the flush survives it");
        assert!(!r.merge_library("lib", &LibraryRegister { code: code("late"), version: v(12, 3) }), "an older load arriving late loses to the flush");
        assert!(!r.flush(v(14, 1)), "an older flush changes nothing");
    }
}
