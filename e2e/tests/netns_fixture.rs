//! Self-tests of the namespace fixture with plain (unmeshed) servers: they pass whatever state
//! replication is in, so a failing partition test is about the engine, not the fixture.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use keymesh_e2e::cluster::CLIENT_PORT;
use keymesh_e2e::model::{random_op, Model, Unchecked};
use keymesh_e2e::{require_netns, ClusterOptions, MeshCluster, Network};

/// Interface names in the test process's own namespace, to show the fixture never adds any.
fn own_links() -> BTreeSet<String> {
    let out = Command::new("ip").args(["-o", "link", "show"]).output().expect("ip link show");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split(':').nth(1)).map(|s| s.trim().to_owned()).collect()
}

fn namespaces_named(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().next()).filter(|n| n.starts_with(prefix)).map(str::to_owned).collect()
}

fn have_redis_cli() -> bool {
    Command::new("redis-cli").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// `PING`s host `to` from host `from`'s namespace with redis-cli (or, without it, a bare
/// connect); true on `PONG`. Bounded by `limit`.
fn reaches(net: &Network, from: usize, to: usize, limit: Duration) -> bool {
    let ip = net.host(to).ip().to_string();
    if have_redis_cli() {
        let out = net.output(from, limit, "redis-cli", ["-h", &ip, "-p", &CLIENT_PORT.to_string(), "ping"]).expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim() == "PONG"
    } else {
        net.host(from).connect((net.host(to).ip(), CLIENT_PORT).into(), limit).is_ok()
    }
}

/// Polls `reaches` until it gives `want`, for at most `limit`.
fn eventually_reaches(net: &Network, from: usize, to: usize, want: bool, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if reaches(net, from, to, Duration::from_secs(1)) == want {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Proves the fixture end to end: three servers each in its own namespace answer through it,
/// hosts reach each other over the bridge, a cut host is unreachable (fast, by timeout) while
/// it still serves its own namespace, a pairwise partition blocks only that pair, healing
/// restores everything, and dropping the cluster leaves no namespace or link behind.
#[test]
fn fixture_isolates_cuts_heals_and_cleans_up() {
    require_netns!();
    let links_before = own_links();
    let cluster = MeshCluster::start_with(ClusterOptions { mesh: false, ..ClusterOptions::new(3) }).expect("start 3 plain servers");
    let net = cluster.net();
    let name = net.name().to_owned();
    eprintln!("network {name}: {}", net.hosts().iter().map(|h| format!("{}={}", h.ns(), h.ip())).collect::<Vec<_>>().join(", "));
    assert_eq!(namespaces_named(&name).len(), 4, "three hosts and a switch");

    for i in 0..3 {
        cluster.set(i, "who", format!("n{i}")).expect("SET through the namespace");
    }
    for i in 0..3 {
        assert_eq!(cluster.get(i, "who").expect("GET"), Some(format!("n{i}").into_bytes()), "plain servers do not replicate");
    }
    for (from, to) in [(0, 1), (1, 2), (2, 0)] {
        assert!(reaches(net, from, to, Duration::from_secs(2)), "n{from} reaches n{to} over the bridge");
    }
    eprintln!("all hosts reach each other");

    net.cut(1).expect("cut n1");
    let t = Instant::now();
    assert!(!reaches(net, 0, 1, Duration::from_secs(2)), "n0 must not reach cut-off n1");
    let took = t.elapsed();
    assert!(took < Duration::from_secs(4), "an unreachable ping fails within its timeout, took {took:?}");
    eprintln!("after cut(1): n0 -> n1 fails in {took:?}");
    assert!(!reaches(net, 2, 1, Duration::from_secs(1)), "n2 must not reach cut-off n1");
    assert!(reaches(net, 0, 2, Duration::from_secs(2)), "n0 still reaches n2");
    assert_eq!(cluster.get(1, "who").expect("GET on the cut host from its own namespace"), Some(b"n1".to_vec()));

    net.heal(1).expect("heal n1");
    assert!(eventually_reaches(net, 0, 1, true, Duration::from_secs(5)), "n0 reaches n1 again after heal(1)");
    eprintln!("after heal(1): n0 -> n1 works");

    net.partition(&[0], &[2]).expect("partition n0 | n2");
    let t = Instant::now();
    assert!(!reaches(net, 0, 2, Duration::from_secs(2)) && !reaches(net, 2, 0, Duration::from_secs(2)), "n0 and n2 are partitioned");
    eprintln!("after partition([0], [2]): n0 <-> n2 fails in {:?}", t.elapsed());
    assert!(reaches(net, 0, 1, Duration::from_secs(2)) && reaches(net, 1, 2, Duration::from_secs(2)), "n1 still reaches both sides");
    net.heal_all().expect("heal all");
    assert!(eventually_reaches(net, 0, 2, true, Duration::from_secs(5)), "n0 reaches n2 again after heal_all");
    eprintln!("after heal_all(): n0 -> n2 works");

    drop(cluster);
    assert_eq!(namespaces_named(&name), Vec::<String>::new(), "no namespace left behind");
    assert_eq!(own_links(), links_before, "the test's own namespace gained or lost no interface");
    eprintln!("after drop: no namespaces named {name}*, own interfaces unchanged");
}

/// Proves that a panic while a network is alive still kills its processes and deletes its
/// namespaces (Drop runs during unwinding).
#[test]
fn network_is_removed_when_a_test_panics() {
    require_netns!();
    let child = Mutex::new(None);
    let name = Mutex::new(String::new());
    let result = std::panic::catch_unwind(|| {
        let net = Network::new(2).expect("build network");
        *name.lock().unwrap() = net.name().to_owned();
        *child.lock().unwrap() = Some(net.spawn(0, "sleep", ["60"]).expect("spawn sleep"));
        panic!("deliberate panic with the network alive");
    });
    assert!(result.is_err());
    let name = name.into_inner().unwrap();
    assert_eq!(namespaces_named(&name), Vec::<String>::new(), "no namespace left behind");
    let mut child = child.into_inner().unwrap().expect("child was spawned");
    let status = child.try_wait().expect("try_wait");
    assert!(status.is_some(), "the process spawned in the namespace was killed");
}

/// Proves the partition tests' yardstick on a single plain server, where there is nothing to
/// merge: after a random workload of every write the partition tests use, `dump` of the real
/// server equals the model exactly, and no key is left unchecked (so a failing partition test
/// points at replication, not at the model, the dump or the client).
#[test]
fn model_and_dump_agree_with_a_single_server() {
    require_netns!();
    let cluster = MeshCluster::start_with(ClusterOptions { mesh: false, ..ClusterOptions::new(1) }).expect("start 1 plain server");
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(366);
    let mut model = Model::new();
    for _ in 0..400 {
        let op = random_op(&mut rng, "solo:", &model);
        let reply = cluster.call(0, &op.command()).expect("write");
        assert!(!reply.is_error(), "{op:?} -> {reply:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
        model.apply(0, &op, &reply, now);
    }
    cluster.set(0, "other", "not under the prefix").expect("SET");
    let dump = cluster.dump_matching(0, "solo:*").expect("dump");
    let disagreed: Vec<_> = model.indeterminate().iter().filter(|(_, why)| **why != Unchecked::EmptiedWithExpiry).collect();
    assert!(disagreed.is_empty(), "one server never disagrees with the global order: {disagreed:?}");
    assert!(dump.len() >= 5, "the workload leaves keys of several types: {dump:?}");
    if let Err(diff) = model.check(&dump, 2000) {
        panic!("the model and the server disagree:\n{diff}");
    }
    assert_eq!(cluster.dump(0).expect("full dump").len(), dump.len() + 1);
    eprintln!("{} writes; final keyspace of {} keys matches the model ({} unchecked)", model.applied(), dump.len(), model.indeterminate().len());
}
