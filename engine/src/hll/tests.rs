//! The encodings and counts against values captured from redis-server 7.0.15 (Debian): the
//! same additions must give the same bytes and the same estimates.

use sha1::{Digest, Sha1};

use super::*;

fn build(elements: impl Iterator<Item = String>) -> Vec<u8> {
    let mut hll = new_empty();
    for e in elements {
        add(&mut hll, e.as_bytes(), DEFAULT_SPARSE_MAX_BYTES).expect("valid hll");
    }
    hll
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha1_hex(bytes: &[u8]) -> String {
    hex(&Sha1::digest(bytes))
}

#[test]
fn three_elements_match_redis_bytes() {
    let hll = build(["a", "b", "c"].iter().map(|s| s.to_string()));
    assert_eq!(&hll[..], b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80`\xf3\x80P\xb1\x84K\xfb\x80BZ");
    assert_eq!(decode_sparse(&hll), Ok("Z:8436 v:1,1 Z:4274 v:2,1 Z:3068 v:1,1 Z:603".to_string()));
    assert_eq!(count(&hll), Ok(3));
}

#[test]
fn sparse_two_hundred_match_redis_bytes() {
    let hll = build((0..200).map(|i| format!("e{i}")));
    let want = "48594c4c010000000000000000000080368421801980409f8408a40e88409084406c9c0190018812883884409480411c8817884055800080407a80411d8812804075800d842a8040638440768c404684414880098040d5800980409480407e9040738040628440a280408384405d84148040cb8407840d8040f080405e80068427844081803c844047840780404e80408f84039404844043840c842684406e80407380404084409d84198019802a8441028c088441298010801c884060801080404b8c4052881b8040b080406e8040bc802b8c40f58040618c1a840380407e80408080404580088440fd80405a80406684409f8040468c108c018401841e8811802384407d8440de84406280308812844065840784198040de84404684408b8814802988008402800a8840578041a79011842e844070801f840180189440f98440848c168421813c881d801380368410804089844044804147800380228040b88440bb88404684168040c684404980048440e680404380388c405c80405584409980268005800380405480409e88404c882e8840448040b080198408841f880380405b841b803f804044804055800d88128440d380405988408b800290407e800784407b801d841d8040af8418840f844045803384404f80288440a78440768040578419844048800e9022840a80406a840d8039801380409a8828804046844044";
    assert_eq!(hex(&hll), want);
    assert_eq!(count(&hll), Ok(200));
}

#[test]
fn dense_and_union_counts_match_redis() {
    let d = build((0..20000).map(|i| format!("e{i}")));
    assert_eq!(check(&d), Ok(Encoding::Dense));
    assert_eq!(d.len(), DENSE_LEN);
    assert_eq!(sha1_hex(&d), "80c8d28c0e5c72674ca1f6e63a5648f6b664ba0b");
    assert_eq!(count(&d), Ok(19901));
    let m = build((0..100000).map(|i| format!("x{i}")));
    assert_eq!(sha1_hex(&m), "1d842f6f3bd19f76440bf9161ff83d3646244dba");
    assert_eq!(count(&m), Ok(100903));
    let s = build((0..200).map(|i| format!("e{i}")));
    let mut union = [0u8; REGISTERS];
    for h in [&s, &d, &m] {
        max_into(h, &mut union).expect("valid");
    }
    assert_eq!(estimate::cardinality_of(&union), 121127);
}

#[test]
fn sparse_and_dense_agree_and_stay_within_error() {
    // Redis's PFSELFTEST test 2, at a smaller scale: the same elements in a sparse and a dense
    // HLL give the same estimate, within 6 standard errors.
    let mut sparse = new_empty();
    let mut dense = new_empty();
    to_dense(&mut dense).expect("valid");
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint = 1u64;
    for j in 1..=200_000u64 {
        let e = (j ^ 0x5eed_1234_abcd).to_le_bytes();
        add(&mut sparse, &e, DEFAULT_SPARSE_MAX_BYTES).expect("valid");
        add(&mut dense, &e, DEFAULT_SPARSE_MAX_BYTES).expect("valid");
        if j == checkpoint {
            if j < DEFAULT_SPARSE_MAX_BYTES as u64 / 2 {
                assert_eq!(check(&sparse), Ok(Encoding::Sparse), "at {j}");
            }
            let (a, b) = (count(&sparse).expect("valid"), count(&dense).expect("valid"));
            assert_eq!(a, b, "sparse and dense disagree at {j}");
            let max_err = if j == 10 { 1.0 } else { (relerr * 6.0 * j as f64).ceil() };
            assert!((a as f64 - j as f64).abs() <= max_err, "estimate {a} for {j}");
            checkpoint *= 10;
        }
    }
}

#[test]
fn corrupt_values_are_refused_not_crashed_on() {
    // Redis's Tcl "Fuzzing dense/sparse encoding": any byte anywhere may be wrong; the result
    // is an error or a number, never a panic.
    let base = build((0..300).map(|i| format!("z{i}")));
    let dense = build((0..5000).map(|i| format!("z{i}")));
    let mut seed = 7u64;
    for template in [&base, &dense] {
        for _ in 0..3000 {
            let mut hll = template.clone();
            for _ in 0..3 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let pos = (seed >> 33) as usize % hll.len();
                hll[pos] = (seed >> 20) as u8;
            }
            let _ = count(&hll);
            let _ = add(&mut hll, b"x", DEFAULT_SPARSE_MAX_BYTES);
            let _ = registers(&hll);
        }
    }
    let mut tail = base.clone();
    tail.extend_from_slice(b"hello");
    assert_eq!(count(&tail), Err(HllError::Corrupted));
    assert_eq!(check(b"0123\x01"), Err(HllError::NotHll));
    let mut short = dense.clone();
    short.pop();
    assert_eq!(check(&short), Err(HllError::NotHll));
}

#[test]
fn setting_a_register_keeps_the_maximum() {
    let mut hll = new_empty();
    assert_eq!(set_register(&mut hll, 5, 3, DEFAULT_SPARSE_MAX_BYTES), Ok(true));
    assert_eq!(set_register(&mut hll, 5, 2, DEFAULT_SPARSE_MAX_BYTES), Ok(false));
    assert_eq!(set_register(&mut hll, 16383, 40, DEFAULT_SPARSE_MAX_BYTES), Ok(true));
    assert_eq!(check(&hll), Ok(Encoding::Dense), "a value above 32 needs the dense encoding");
    let regs = registers(&hll).expect("valid");
    assert_eq!((regs[5], regs[16383], regs[0]), (3, 40, 0));
}
