//! Parsing past what KeyMesh has no type for, against byte layouts written from Redis's and
//! KeyDB's sources (`skip.rs` names them), and what an import does with it in each mode.
//! Streams and function libraries written by a real `redis-server` are tested in
//! `tests/persistence_rdb.rs`.

use super::read::{Entry, RdbValue, Section, Unsupported};
use super::tests::{entries, rdb, rec, records, store};
use super::{export, import_with, OnUnsupported, RdbError};

// The bytes of an RDB body, written the way `rdb.c` writes them (the shared test builder).
use super::builder::RdbBytes as Body;

/// The layouts of what KeyMesh parses past.
impl Body {
    fn string_key(&mut self, key: &str, value: &str) -> &mut Self {
        self.op(0).s(key.as_bytes()).s(value.as_bytes())
    }

    /// A stream of layout `revision` (type 15, 19 or 21), as `rdbSaveObject` writes it: two radix-tree nodes
    /// (the second's listpack LZF-compressed), 7 entries, two groups with two pending entries
    /// each and one consumer owning them.
    fn stream(&mut self, key: &str, revision: u8) -> &mut Self {
        self.op([15, 19, 21][usize::from(revision)]).s(key.as_bytes()).len(2);
        self.s(&[0; 16]).s(b"\x1b\x00\x00\x00\x02\x00listpack-bytes-not-decoded\xff");
        self.s(&[1; 16]).raw(&[0xc3]).len(5).len(40).raw(b"lzf!!");
        self.len(7).len(1_700_000_000_000).len(3);
        if revision >= 1 {
            // First id, max deleted id, entries added.
            self.len(1_700_000_000_000).len(0).len(0).len(0).len(9);
        }
        self.len(2);
        for group in ["g1", "g2"] {
            self.s(group.as_bytes()).len(1_700_000_000_000).len(1);
            if revision >= 1 {
                self.len(5);
            }
            self.len(2);
            for id in [[7u8; 16], [8; 16]] {
                self.raw(&id).ms(1_700_000_000_123).len(3);
            }
            self.len(1).s(b"alice").ms(1_700_000_000_456);
            if revision >= 2 {
                self.ms(1_700_000_000_789);
            }
            self.len(2).raw(&[7; 16]).raw(&[8; 16]);
        }
        self
    }

    /// Opcode-annotated module data, as `RedisModule_Save*` writes it, then the EOF opcode.
    fn module_data(&mut self) -> &mut Self {
        self.len(1).len(0x81); // SINT (a length, as Redis writes it)
        self.len(2).len(1 << 40); // UINT
        self.len(3).raw(&1.5f32.to_le_bytes()); // FLOAT
        self.len(4).raw(&2.5f64.to_le_bytes()); // DOUBLE
        self.len(5).s(b"module string"); // STRING
        self.len(0) // EOF
    }
}

/// A module type id: 9 characters of 6 bits, then a 10-bit encoding version (`moduleTypeEncodeId`).
fn module_id(name: &str, encver: u64) -> u64 {
    const CHARSET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits = name.bytes().fold(0u64, |acc, c| acc << 6 | CHARSET.iter().position(|&x| x == c).unwrap() as u64);
    bits << 10 | encver
}

fn unsupported(db: usize, key: &str, expire_ms: Option<u64>, kind: &str) -> Entry {
    Entry::Unsupported(Unsupported { db, key: key.as_bytes().to_vec(), expire_ms, kind: kind.into() })
}

fn key(db: usize, name: &str, value: &str) -> Entry {
    Entry::Key(rec(db, name, None, RdbValue::Str(value.as_bytes().to_vec())))
}

/// Every type and section KeyMesh parses past, each followed by a plain key that must come
/// out intact (a skip that is a byte off would garble it).
fn everything() -> (Vec<u8>, Vec<Entry>) {
    let mut b = Body::default();
    let far = 4_000_000_000_000u64;
    b.op(250).s(b"redis-ver").s(b"7.4.0");
    b.op(244).len(5).len(1).len(0); // SLOT_INFO
    b.op(245).s(b"#!lua name=mylib\nredis.register_function('f', function() return 1 end)");
    b.string_key("k0", "v0");
    b.stream("s15", 0).string_key("k1", "v1");
    b.op(254).len(3); // SELECTDB 3
    b.stream("s19", 1).string_key("k2", "v2");
    b.op(252).ms(far).stream("s21", 2).string_key("k3", "v3");
    b.op(7).s(b"m7").len(module_id("ReJSON-RL", 3)).module_data().string_key("k4", "v4");
    // Hashes with field expiries (Redis 7.4 `rdbLoadObject`).
    b.op(22).s(b"h22").len(2).len(far).s(b"f1").s(b"v1").len(0).s(b"f2").s(b"v2");
    b.op(23).s(b"h23").s(b"listpack of field, value, ttl");
    b.op(24).s(b"h24").ms(far).len(1).len(1).s(b"f").s(b"v");
    b.op(25).s(b"h25").ms(far).s(b"listpack of field, value, ttl");
    b.string_key("k5", "v5");
    // KeyDB's cron job: script, start, interval, keys, arguments.
    b.op(64).s(b"cron").s(b"return 1").ms(1_700_000_000_000).ms(1000).len(1).s(b"key").len(2).s(b"a").s(b"b");
    b.op(247).len(module_id("graphdata", 1)).len(2).len(2).module_data(); // MODULE_AUX
    b.op(246).s(b"oldlib").s(b"LUA").len(1).s(b"a description").s(b"return 1"); // FUNCTION_PRE_GA
    b.string_key("k6", "v6");
    let hfe = "hash with field expiries (Redis 7.4 HEXPIRE)";
    let stream = "stream (7 entries, 2 consumer groups, 4 pending)";
    let want = vec![
        Entry::Section(Section { what: "function library \"mylib\"".into(), hint: "load it with FUNCTION LOAD on each KeyMesh node" }),
        key(0, "k0", "v0"),
        unsupported(0, "s15", None, stream),
        key(0, "k1", "v1"),
        unsupported(3, "s19", None, stream),
        key(3, "k2", "v2"),
        unsupported(3, "s21", Some(far), stream),
        key(3, "k3", "v3"),
        unsupported(3, "m7", None, "module value (module type \"ReJSON-RL\")"),
        key(3, "k4", "v4"),
        unsupported(3, "h22", None, "hash with field expiries (2 fields; Redis 7.4 HEXPIRE)"),
        unsupported(3, "h23", None, hfe),
        unsupported(3, "h24", None, "hash with field expiries (1 fields; Redis 7.4 HEXPIRE)"),
        unsupported(3, "h25", None, hfe),
        key(3, "k5", "v5"),
        unsupported(3, "cron", None, "KeyDB cron job (KEYDB.CRON)"),
        Entry::Section(Section { what: "auxiliary data of module type \"graphdata\"".into(), hint: "KeyMesh loads no Redis modules" }),
        Entry::Section(Section {
            what: "function library \"oldlib\" (Redis 7.0 release-candidate format)".into(),
            hint: "load it with FUNCTION LOAD on each KeyMesh node",
        }),
        key(3, "k6", "v6"),
    ];
    (b.0, want)
}

#[test]
fn every_unsupported_type_and_section_is_parsed_past_exactly() {
    let (body, want) = everything();
    assert_eq!(entries(&rdb(&body, 12)).unwrap(), want);
}

#[test]
fn a_body_cut_anywhere_is_an_error_or_a_shorter_file_never_a_panic() {
    // Each cut gets a valid EOF and checksum, so the parser itself meets the cut.
    let (body, want) = everything();
    let mut errors = 0;
    for cut in 0..body.len() {
        match entries(&rdb(&body[..cut], 12)) {
            Err(_) => errors += 1,
            Ok(got) => assert!(got.len() <= want.len(), "cut at {cut}: {got:?}"),
        }
    }
    assert!(errors > body.len() * 9 / 10, "most cuts land inside a value: {errors} errors in {} cuts", body.len());
}

#[test]
fn a_pre_release_module_value_cannot_be_skipped_and_is_refused_in_both_modes() {
    let file = rdb(&Body::default().string_key("a", "1").op(6).s(b"old-module").len(12345).raw(b"opaque").0, 9);
    for mode in [OnUnsupported::Refuse, OnUnsupported::Skip] {
        let err = import_with(&store(), &file, mode).unwrap_err();
        assert!(matches!(&err, RdbError::Unskippable { db: 0, key } if key == "old-module"), "{err}");
        assert!(err.to_string().contains("cannot be skipped"), "{err}");
    }
}

#[test]
fn refuse_names_the_first_unsupported_key_and_skip_imports_the_rest() {
    let mut b = Body::default();
    b.string_key("before", "1").op(254).len(2).stream("events", 1);
    b.op(252).ms(1000).stream("old-events", 1); // expired in 1970: gone either way
    b.op(245).s(b"#!lua name=lib1\nreturn 1").string_key("after", "2");
    let file = rdb(&b.0, 10);

    let err = import_with(&store(), &file, OnUnsupported::Refuse).unwrap_err();
    assert!(matches!(&err, RdbError::Unsupported { db: 2, key, .. } if key == "events"), "{err}");
    let text = err.to_string();
    assert!(text.contains("key \"events\" in database 2 is a stream (7 entries") && text.contains("rdb-import-unsupported skip"), "{text}");

    // Without the stream, the function library is what refuses the file.
    let mut b = Body::default();
    b.op(245).s(b"#!lua name=lib1\nreturn 1").string_key("after", "2");
    let err = import_with(&store(), &rdb(&b.0, 10), OnUnsupported::Refuse).unwrap_err();
    assert!(err.to_string().contains("function library \"lib1\", which an import does not load (load it with FUNCTION LOAD"), "{err}");

    let s = store();
    let imported = import_with(&s, &file, OnUnsupported::Skip).unwrap();
    assert_eq!((imported.keys, imported.expired), (2, 1));
    assert_eq!(imported.skipped.iter().map(|u| (u.db, u.key.as_slice())).collect::<Vec<_>>(), vec![(2, &b"events"[..])]);
    assert_eq!(imported.sections_skipped.len(), 1);
    assert_eq!((s.dbsize(0), s.dbsize(2)), (1, 1), "\"before\" and \"after\", in the databases they were in");
}

#[test]
fn keydb_member_expiries_drop_expired_members_and_refuse_or_skip_pending_ones() {
    // KeyDB 6.3 `rdbSaveKeyValuePair`: `mvcc-tstamp` before the key (active replicas), the
    // `keydb-subexpire-key`/`-when` pairs after it.
    let far = (crate::persist::unix_ms() + 3_600_000).to_string();
    let mut b = Body::default();
    b.op(250).s(b"mvcc-tstamp").s(b"1782930123456789");
    b.op(2).s(b"set").len(3).s(b"keep").s(b"gone").s(b"also-gone");
    b.op(250).s(b"keydb-subexpire-key").s(b"gone").op(250).s(b"keydb-subexpire-when").s(b"1000");
    b.op(250).s(b"keydb-subexpire-key").s(b"also-gone").op(250).s(b"keydb-subexpire-when").s(b"2000");
    b.op(250).s(b"mvcc-tstamp").s(b"1782930123456790");
    b.op(4).s(b"hash").len(2).s(b"f1").s(b"v1").s(b"f2").s(b"v2");
    b.op(250).s(b"keydb-subexpire-key").s(b"f2").op(250).s(b"keydb-subexpire-when").s(far.as_bytes());
    b.string_key("plain", "v");
    let file = rdb(&b.0, 9);

    let got = entries(&file).unwrap();
    let Entry::Key(set) = &got[0] else { panic!("{got:?}") };
    assert_eq!(set.member_expiries, vec![(b"gone".to_vec(), 1000), (b"also-gone".to_vec(), 2000)]);

    let err = import_with(&store(), &file, OnUnsupported::Refuse).unwrap_err();
    assert!(err.to_string().contains("key \"hash\" in database 0 is a hash with member expiries (KeyDB EXPIREMEMBER: \"f2\" expires at"), "{err}");

    let s = store();
    let imported = import_with(&s, &file, OnUnsupported::Skip).unwrap();
    assert_eq!((imported.keys, imported.members_expired, imported.skipped.len()), (2, 2, 1));
    let mut out = Vec::new();
    export(&s, "test", &mut out);
    let mut keys = records(&out).unwrap();
    keys.sort_by(|a, b| a.key.cmp(&b.key));
    let want = [rec(0, "plain", None, RdbValue::Str(b"v".to_vec())), rec(0, "set", None, RdbValue::Set(vec![b"keep".to_vec()]))];
    assert_eq!(keys, want, "the hash skipped, the set without its expired members");

    // A malformed `-when` is corrupt, not ignored.
    let mut b = Body::default();
    b.op(2).s(b"set").len(1).s(b"m");
    b.op(250).s(b"keydb-subexpire-key").s(b"m").op(250).s(b"keydb-subexpire-when").s(b"soon");
    assert!(matches!(entries(&rdb(&b.0, 9)), Err(RdbError::Corrupt { .. })));
}
