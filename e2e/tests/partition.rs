//! Partition tests of the replication mesh (DESIGN.md testing ladder, item 3): real servers in
//! private network namespaces, faults injected with `ip`, and after every heal all nodes must
//! hold the same keyspace, equal to what the acknowledged writes imply (see `model`).
//!
//! Knobs (environment): `KEYMESH_E2E_TRIALS` (randomized trials, default 12),
//! `KEYMESH_E2E_OPS` (writes per partition phase, default 25), `KEYMESH_E2E_SEED` (default:
//! time-based, always printed), `KEYMESH_E2E_CONVERGE_SECS` (how long to wait for convergence
//! after a heal, default 30), `KEYMESH_E2E_SPACING_MS` (pause between writes, default 3; must
//! stay >= 2 so acknowledgement order is HLC order), `KEYMESH_E2E_ONE_LINK_SECS` (the one-link
//! cut's length, default 3), `KEYMESH_SERVER` (the binary).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keymesh_e2e::model::{random_op, Model, Op};
use keymesh_e2e::{require_netns, MeshCluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Expiry deadlines are stamped by the model at acknowledgement, by the server at execution.
const TTL_TOLERANCE_MS: i64 = 2000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn converge_timeout() -> Duration {
    Duration::from_secs(env_u64("KEYMESH_E2E_CONVERGE_SECS", 30))
}

fn spacing() -> Duration {
    Duration::from_millis(env_u64("KEYMESH_E2E_SPACING_MS", 3).max(2))
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Issues writes, records them in the model and in a log that failures print.
struct Driver<'a> {
    cluster: &'a MeshCluster,
    model: Model,
    log: Vec<String>,
    started: Instant,
}

impl<'a> Driver<'a> {
    fn new(cluster: &'a MeshCluster) -> Self {
        Driver { cluster, model: Model::new(), log: Vec::new(), started: Instant::now() }
    }

    fn note(&mut self, line: String) {
        self.log.push(format!("{:>7.3}s {line}", self.started.elapsed().as_secs_f64()));
    }

    /// Runs `op` on node `node`, records it, then waits the write spacing.
    fn write(&mut self, node: usize, op: Op) {
        let command: Vec<String> = op.command().iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        match self.cluster.call(node, &op.command()) {
            Ok(reply) => {
                self.model.apply(node, &op, &reply, now_ms());
                self.note(format!("n{node} {} -> {reply:?}", command.join(" ")));
            }
            Err(e) => {
                self.model.unknown(&op);
                self.note(format!("n{node} {} -> outcome unknown: {e}", command.join(" ")));
            }
        }
        std::thread::sleep(spacing());
    }

    /// Waits until every node's keys under `prefix` are identical and match the model; panics
    /// with the difference and the write log otherwise.
    fn assert_converges(&mut self, prefix: &str, context: &str) -> Duration {
        let t = Instant::now();
        let model = &self.model;
        let result = self.cluster.wait_converged_matching(&format!("{prefix}*"), converge_timeout(), |ks| model.check(ks, TTL_TOLERANCE_MS));
        if let Err(e) = result {
            panic!(
                "{context}: {e}\n--- writes ({} acknowledged, indeterminate keys {:?}) ---\n{}",
                self.model.applied(),
                self.indeterminate(),
                self.log.join("\n")
            );
        }
        t.elapsed()
    }

    fn indeterminate(&self) -> Vec<String> {
        self.model.indeterminate().iter().map(|(k, why)| format!("{} ({why:?})", String::from_utf8_lossy(k))).collect()
    }
}

fn start(n: usize) -> MeshCluster {
    MeshCluster::start(n).unwrap_or_else(|e| panic!("failed to start a {n}-node mesh: {e}"))
}

/// Proves KeyDB issue #366 is fixed: two nodes that both write one key while partitioned
/// converge after the heal on the newer write (A's), never swap values or stay diverged; both
/// for a route partition and for a cut link.
#[test]
fn keydb_366_partition_then_heal() {
    require_netns!();
    let cluster = start(2);
    let mut d = Driver::new(&cluster);
    d.write(0, Op::Set { key: b"k366:base".to_vec(), value: b"mesh-up".to_vec() });
    d.assert_converges("k366:", "the mesh did not replicate a write before any fault");
    for fault in ["routes", "link"] {
        let key = format!("k366:{fault}").into_bytes();
        match fault {
            "routes" => cluster.net().partition(&[0], &[1]).expect("partition"),
            _ => cluster.net().cut(1).expect("cut n1"),
        }
        d.note(format!("fault: {fault}"));
        d.write(1, Op::Set { key: key.clone(), value: b"older-from-b".to_vec() });
        std::thread::sleep(Duration::from_millis(5));
        d.write(0, Op::Set { key: key.clone(), value: b"newer-from-a".to_vec() });
        assert_eq!(cluster.get(1, &key).expect("GET on B"), Some(b"older-from-b".to_vec()), "B must keep serving its own write while partitioned");
        cluster.net().heal_all().expect("heal");
        d.note("healed".into());
        d.assert_converges("k366:", &format!("after healing the {fault} partition"));
        for node in 0..2 {
            assert_eq!(cluster.get(node, &key).expect("GET"), Some(b"newer-from-a".to_vec()), "n{node} after the {fault} heal");
        }
    }
}

/// Applies a random fault to a 3-node (or larger) network; returns what it did.
fn random_fault(rng: &mut StdRng, cluster: &MeshCluster) -> String {
    let net = cluster.net();
    let n = cluster.len();
    let a = rng.random_range(0..n);
    let b = (a + rng.random_range(1..n)) % n;
    match rng.random_range(0..4) {
        0 => {
            net.isolate(a).expect("isolate");
            format!("isolate n{a} (routes)")
        }
        1 => {
            net.cut(a).expect("cut");
            format!("cut n{a}'s link")
        }
        2 => {
            net.partition(&[a], &[b]).expect("partition pair");
            format!("partition n{a} | n{b} only (others still reach both)")
        }
        _ => {
            (0..n).try_for_each(|i| net.isolate(i)).expect("isolate all");
            "every node alone".to_owned()
        }
    }
}

/// Proves partition safety for the mixed workload: over many trials of random partitions (of
/// several kinds, switched mid-trial) with random writes of every type on every side, after the
/// heal all nodes hold identical keyspaces equal to the model of the acknowledged writes (LWW
/// by acknowledgement order, counters summing every side's increments, deletes never undone).
#[test]
fn randomized_partitions_converge_to_the_model() {
    require_netns!();
    let trials = env_u64("KEYMESH_E2E_TRIALS", 12);
    let ops = env_u64("KEYMESH_E2E_OPS", 25);
    let seed = env_u64("KEYMESH_E2E_SEED", now_ms() as u64);
    eprintln!("randomized partitions: KEYMESH_E2E_SEED={seed} KEYMESH_E2E_TRIALS={trials} KEYMESH_E2E_OPS={ops}");
    let mut rng = StdRng::seed_from_u64(seed);
    let cluster = start(3);
    for trial in 0..trials {
        let prefix = format!("t{trial}:");
        let mut d = Driver::new(&cluster);
        for _ in 0..ops / 2 {
            let op = random_op(&mut rng, &prefix, &d.model);
            d.write(rng.random_range(0..cluster.len()), op);
        }
        for _ in 0..rng.random_range(1..=2) {
            cluster.net().heal_all().expect("heal before the next fault");
            let fault = random_fault(&mut rng, &cluster);
            d.note(format!("fault: {fault}"));
            for _ in 0..ops {
                let op = random_op(&mut rng, &prefix, &d.model);
                d.write(rng.random_range(0..cluster.len()), op);
            }
        }
        cluster.net().heal_all().expect("heal");
        d.note("healed".into());
        let took = d.assert_converges(&prefix, &format!("seed {seed}, trial {trial}"));
        eprintln!("trial {trial}: {} writes acknowledged, converged {took:?} after the heal, unchecked keys {:?}", d.model.applied(), d.indeterminate());
    }
}

/// Proves a node that restarts empty while cut off (new run id: its peers' backlogs cannot
/// resume it) takes a full sync after the heal without losing or resurrecting anything: the
/// peers' writes and deletes made while it was away and its own writes made after the restart
/// all survive, and counter increments from before and after its restart all count.
#[test]
fn restart_full_sync_under_partition_heal() {
    require_netns!();
    let cluster = start(3);
    let mut d = Driver::new(&cluster);
    let k = |s: &str| format!("rs:{s}").into_bytes();
    let v = |s: &str| s.as_bytes().to_vec();
    for i in 0..6 {
        d.write(i % 3, Op::Set { key: k(&format!("s{i}")), value: v(&format!("first-{i}")) });
    }
    for node in 0..3 {
        d.write(node, Op::IncrBy { key: k("ctr"), by: 10 });
        d.write(node, Op::HSet { key: k("hash"), field: v(&format!("f{node}")), value: v("x") });
        d.write(node, Op::SAdd { key: k("set"), member: v(&format!("m{node}")) });
    }
    d.assert_converges("rs:", "before the fault");

    cluster.net().cut(2).expect("cut n2");
    d.note("fault: cut n2".into());
    d.write(0, Op::Del { key: k("s0") });
    d.write(1, Op::Set { key: k("s1"), value: v("peers-while-n2-away") });
    d.write(0, Op::HDel { key: k("hash"), field: v("f2") });
    d.write(1, Op::SRem { key: k("set"), member: v("m0") });
    d.write(0, Op::IncrBy { key: k("ctr"), by: 5 });
    d.write(1, Op::Expire { key: k("s4"), secs: 5000 });

    cluster.restart(2).expect("restart n2 while cut off");
    d.note("restarted n2 (empty keyspace)".into());
    d.write(2, Op::Set { key: k("s2"), value: v("n2-after-restart") });
    d.write(2, Op::IncrBy { key: k("ctr"), by: 100 });
    d.write(2, Op::SAdd { key: k("set"), member: v("m9") });
    d.write(2, Op::Set { key: k("fresh"), value: v("only-on-n2") });

    cluster.net().heal(2).expect("heal n2");
    d.note("healed".into());
    d.assert_converges("rs:", "after n2's restart and heal");
    assert!(d.model.indeterminate().is_empty(), "every key of this scenario is determinate: {:?}", d.indeterminate());
    assert_eq!(cluster.get(2, k("ctr")).expect("GET ctr"), Some(v("135")), "3*10 + 5 + 100: no increment lost");
    assert_eq!(cluster.get(2, k("s0")).expect("GET s0"), None, "the delete made while n2 was away stays deleted");
}

/// Proves DESIGN.md's rule for a node cut off longer than `tombstone-gc-seconds`: its peers
/// drop a delete's tombstone by the time cap while it is away, so merging its stale copy would
/// resurrect the key; instead, at the heal, it wipes and full-syncs. The deleted key stays
/// deleted on every node, the peers' writes reach it, and its own writes made while it was
/// cut off are discarded (the documented price of the rule). Small backlogs force full syncs
/// both ways, the path by which a stale copy would otherwise spread.
#[test]
fn a_node_cut_off_longer_than_the_tombstone_cap_wipes_and_resyncs() {
    require_netns!();
    let mut opts = keymesh_e2e::ClusterOptions::new(3);
    opts.extra_args.extend(["--tombstone-gc-seconds", "3", "--repl-backlog-size", "16kb"].map(String::from));
    let cluster = MeshCluster::start_with(opts).expect("start 3 meshed nodes");
    for i in 0..3 {
        cluster.wait_ready(i, Duration::from_secs(30)).expect("ready");
    }
    cluster.set(0, "gc:deleted", "old").expect("SET");
    cluster.set(0, "gc:kept", "v").expect("SET");
    cluster.wait_converged_matching("gc:*", converge_timeout(), |_| Ok(())).expect("converged before the cut");
    cluster.net().cut(2).expect("cut n2");
    cluster.call_ok(0, &["DEL", "gc:deleted"]).expect("DEL on n0");
    cluster.set(0, "gc:while-away", "from-n0").expect("SET on n0");
    cluster.set(2, "gc:written-on-the-cut-off-node", "lost").expect("SET on n2");
    // Overflow every backlog, so every reconnect is a full sync.
    let filler = "x".repeat(1024);
    for i in 0..40 {
        cluster.set(0, format!("fill:{i}"), &filler).expect("fill n0");
        cluster.set(2, format!("fill2:{i}"), &filler).expect("fill n2");
    }
    // Past the cap (3 s) and a GC pass: n0 and n1 have dropped the tombstone, n2 is stale.
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.info_field(0, "replication", "mesh_tombstones").expect("INFO") != "0"
        || cluster.info_field(2, "replication", "mesh_stale").expect("INFO") != "1"
    {
        assert!(Instant::now() < deadline, "n0 kept the tombstone or n2 never went stale");
        std::thread::sleep(Duration::from_millis(200));
    }
    cluster.net().heal(2).expect("heal n2");
    let expected = ["gc:kept", "gc:while-away"];
    let keys_are_expected = |ks: &keymesh_e2e::Keyspace| {
        let keys: Vec<String> = ks.keys().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
        if keys == expected {
            Ok(())
        } else {
            Err(format!("keys {keys:?}, expected {expected:?} (the deleted key came back, or the cut-off node's writes spread)"))
        }
    };
    cluster.wait_converged_matching("gc:*", converge_timeout(), keys_are_expected).expect("converged after the heal");
    // Still so once every link has settled (a late full sync must not bring anything back).
    std::thread::sleep(Duration::from_secs(3));
    cluster.wait_converged_matching("gc:*", Duration::from_secs(5), keys_are_expected).expect("still converged");
    assert_eq!(cluster.get(2, "fill:39").expect("GET"), Some(filler.into_bytes()), "n0's writes reached the wiped node");
    assert_eq!(cluster.info_field(2, "replication", "mesh_wipes").expect("INFO"), "1");
    assert_eq!(cluster.info_field(0, "replication", "mesh_wipes").expect("INFO"), "0");
}

/// Measures and pins down the non-transitive partition (README, "Replication"): with the
/// n0–n1 link cut while both still reach n2, n2 holds both sides' writes within moments, but
/// each node streams only the writes it originated (no relay through n2), so n1 holds none of
/// n0's writes, nor n0 any of n1's, until the link heals; after the heal all three converge.
/// Prints how stale n1 was when the cut ended and how long the heal took.
#[test]
fn a_one_link_cut_leaves_that_pair_stale_until_the_link_heals() {
    require_netns!();
    let cluster = start(3);
    let mut d = Driver::new(&cluster);
    d.write(0, Op::Set { key: b"onelink:from-n0".to_vec(), value: b"before".to_vec() });
    d.write(1, Op::Set { key: b"onelink:from-n1".to_vec(), value: b"before".to_vec() });
    d.assert_converges("onelink:", "the mesh did not replicate before the cut");
    // On a loaded machine a link may still be in its first (full) sync when the data has
    // converged through the other links; cut only a settled mesh (see `wait_full_mesh`).
    cluster.wait_full_mesh(Duration::from_secs(30)).expect("every link up and synced");
    cluster.net().partition(&[0], &[1]).expect("cut the n0-n1 link");
    let cut = Instant::now();
    let mut n2_lag = Vec::new();
    // KEYMESH_E2E_ONE_LINK_SECS: how long the cut lasts (default 3; past repl-timeout, 60 s,
    // the pair's streams break and the heal goes through a reconnect).
    let rounds = env_u64("KEYMESH_E2E_ONE_LINK_SECS", 3) * 10;
    for i in 1..=rounds {
        let value = format!("v{i}").into_bytes();
        // From before the first write: includes both acknowledgements and the write spacing.
        let written = Instant::now();
        d.write(0, Op::Set { key: b"onelink:from-n0".to_vec(), value: value.clone() });
        d.write(1, Op::Set { key: b"onelink:from-n1".to_vec(), value: value.clone() });
        // n2 reaches both: it must hold both writes at once.
        let deadline = written + Duration::from_secs(5);
        while cluster.get(2, "onelink:from-n0").expect("GET on n2") != Some(value.clone())
            || cluster.get(2, "onelink:from-n1").expect("GET on n2") != Some(value.clone())
        {
            assert!(Instant::now() < deadline, "n2, which reaches both sides, did not get write {i} within 5 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        n2_lag.push(written.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let cut_for = cut.elapsed();
    assert_eq!(
        cluster.get(1, "onelink:from-n0").expect("GET on n1"),
        Some(b"before".to_vec()),
        "n1 got n0's write across the cut: was relaying added? update README and this test"
    );
    assert_eq!(cluster.get(0, "onelink:from-n1").expect("GET on n0"), Some(b"before".to_vec()), "n0 got n1's write across the cut");
    cluster.net().heal_all().expect("heal");
    d.note("healed".into());
    let healed_in = d.assert_converges("onelink:", "after the one-link cut healed");
    n2_lag.sort();
    eprintln!(
        "one-link cut of {cut_for:?}: n2 held both sides' writes {:?} (median) / {:?} (max) after the first was sent; n1 and n0 stayed at each other's pre-cut value for the whole cut and converged {healed_in:?} after the heal",
        n2_lag[n2_lag.len() / 2],
        n2_lag[n2_lag.len() - 1]
    );
}
