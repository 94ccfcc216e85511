//! Replication benchmarks that need network namespaces (run by `scripts/bench-mesh.sh`; a
//! benchmark, not a test: it prints numbers and fails only if the cluster cannot run).
//!
//! `keymesh-mesh-bench partition`: catch-up after a partition at a steady write rate. Three
//! meshed nodes, each in its own namespace; a writer on node 0 and one on node 2 each issue
//! `SET` of 100-byte values at a steady rate; node 2 is cut off for `BENCH_PARTITION_SECS`
//! (default 30) while both keep writing, then healed. Reported: how long after the heal each
//! side holds the other side's last write from before the heal, the resyncs (partial vs full)
//! the heal caused, and the backlog each origin held. Links run with `repl-timeout 10`, so
//! the partition really breaks the streams and the heal goes through a resync (with the
//! default 60 s a 30 s partition never breaks them: TCP just delivers the queue). The backlog
//! keeps its default size.
//!
//! Knobs: `BENCH_PARTITION_SECS` (30), `BENCH_RATE` (writes/s per side, 2000), `KEYMESH_SERVER`.
//!
//! `keymesh-mesh-bench lag PUBLISH_PORT PORTS... (SECONDS | -) DONE_FILE`: replication lag of
//! running nodes on loopback (`scripts/bench-mesh.sh` starts them). It PUBLISHes the time
//! since it started, every 5 ms, on `PUBLISH_PORT`. Each `PORTS` argument is a group of
//! subscribers, ports joined by commas (`6380,6381`): a thread per port blocks in `read` on its
//! subscription and notes each message's age as it arrives. Runs for `SECONDS`, or with `-`
//! until `DONE_FILE` exists; prints one line per group, `p50 p99 samples` (ms). A group on the
//! publishing node itself measures the same messages without the mesh hop. The probe's own
//! share is one blocking read and a short parse per message, so that what it measures is the
//! mesh and the nodes (the Python probe it replaced kept three threads behind one interpreter
//! lock: 0.5 ms more at p50 idle, 2–3 ms more at p99 under load, docs/benchmarks.md,
//! "Fifteenth pass").
//!
//! `keymesh-mesh-bench wait PORT NUMREPLICAS ROUNDS`: how long a write and the `WAIT` for it
//! take. `ROUNDS` times, one after the other on one connection: `SET` a key on `PORT`, then
//! `WAIT NUMREPLICAS 1000`. Prints `p50 p99 rounds` (ms, the `SET` and its `WAIT` together);
//! fails if a `WAIT` counted fewer peers than asked.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use keymesh_e2e::{ClusterOptions, MeshCluster};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Sum of every `INFO replication` field whose name ends with `suffix` (one per peer).
fn info_sum(cluster: &MeshCluster, node: usize, suffix: &str) -> Result<u64, String> {
    let text = match cluster.call_ok(node, &["INFO", "replication"]).map_err(|e| e.to_string())? {
        keymesh_e2e::resp::Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => return Err(format!("INFO replied {other:?}")),
    };
    Ok(text.lines().filter_map(|l| l.split_once(':')).filter(|(k, _)| k.ends_with(suffix)).filter_map(|(_, v)| v.trim().parse::<u64>().ok()).sum())
}

/// Writes `SET bench:<tag>:<i> <100 B>` on `node` at `rate` per second until `stop`; `last`
/// holds the highest `i` acknowledged.
fn write_steadily(cluster: &MeshCluster, node: usize, tag: &str, rate: u64, stop: &AtomicBool, last: &AtomicU64) -> u64 {
    let value = "v".repeat(100);
    let started = Instant::now();
    let mut failed = 0;
    for i in 1.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match cluster.set(node, format!("bench:{tag}:{i}"), &value) {
            Ok(()) => last.store(i, Ordering::Relaxed),
            Err(_) => failed += 1,
        }
        let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    failed
}

/// Polls until every `(node, key)` is present; returns, for each, how long after `since` it
/// was first seen.
fn times_until_present(cluster: &MeshCluster, wanted: &[(usize, String)], since: Instant, limit: Duration) -> Result<Vec<Duration>, String> {
    let mut seen: Vec<Option<Duration>> = vec![None; wanted.len()];
    while seen.iter().any(Option::is_none) {
        for (slot, (node, key)) in seen.iter_mut().zip(wanted) {
            if slot.is_none() && matches!(cluster.get(*node, key), Ok(Some(_))) {
                *slot = Some(since.elapsed());
            }
        }
        if since.elapsed() > limit {
            return Err(format!("not every node caught up within {limit:?}: {wanted:?} seen {seen:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(seen.into_iter().flatten().collect())
}

fn partition_catch_up() -> Result<(), String> {
    if let Some(why) = keymesh_e2e::netns::skip_reason() {
        return Err(format!("needs network namespaces: {why}"));
    }
    let partition = Duration::from_secs(env_u64("BENCH_PARTITION_SECS", 30));
    let rate = env_u64("BENCH_RATE", 2000);
    let mut opts = ClusterOptions::new(3);
    opts.extra_args.extend(["--repl-timeout", "10"].map(String::from));
    let cluster = MeshCluster::start_with(opts).map_err(|e| e.to_string())?;
    for i in 0..3 {
        cluster.wait_ready(i, Duration::from_secs(30)).map_err(|e| e.to_string())?;
    }
    let stop = AtomicBool::new(false);
    let (last0, last2) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|scope| -> Result<(), String> {
        let w0 = scope.spawn(|| write_steadily(&cluster, 0, "n0", rate, &stop, &last0));
        let w2 = scope.spawn(|| write_steadily(&cluster, 2, "n2", rate, &stop, &last2));
        std::thread::sleep(Duration::from_secs(2));
        let before = [
            info_sum(&cluster, 0, "partial_resyncs")?,
            info_sum(&cluster, 0, "full_resyncs")?,
            info_sum(&cluster, 2, "partial_resyncs")?,
            info_sum(&cluster, 2, "full_resyncs")?,
        ];
        cluster.net().cut(2).map_err(|e| e.to_string())?;
        std::thread::sleep(partition);
        let (mark0, mark2) = (last0.load(Ordering::Relaxed), last2.load(Ordering::Relaxed));
        let backlog = [info_sum(&cluster, 0, "repl_backlog_histlen")?, info_sum(&cluster, 2, "repl_backlog_histlen")?];
        cluster.net().heal(2).map_err(|e| e.to_string())?;
        let healed = Instant::now();
        let wanted = [(2, format!("bench:n0:{mark0}")), (0, format!("bench:n2:{mark2}"))];
        let took = times_until_present(&cluster, &wanted, healed, Duration::from_secs(120))?;
        let (n2_took, n0_took) = (took[0], took[1]);
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
        let failed = (w0.join().unwrap_or(u64::MAX), w2.join().unwrap_or(u64::MAX));
        let after = [
            info_sum(&cluster, 0, "partial_resyncs")?,
            info_sum(&cluster, 0, "full_resyncs")?,
            info_sum(&cluster, 2, "partial_resyncs")?,
            info_sum(&cluster, 2, "full_resyncs")?,
        ];
        println!(
            "catch-up after a {}s partition at {rate} SET/s per side (100 B): node 2 held node 0's last pre-heal write {:.2} s after the heal, node 0 held node 2's {:.2} s after (links retry with a backoff of up to 2 s); \
             resyncs on the heal: node 0 partial {} full {}, node 2 partial {} full {} (target: partial only); backlog held at the heal: node 0 {:.1} MiB, node 2 {:.1} MiB (default repl-backlog-size 64 MiB); \
             writes acknowledged: {mark0} + {mark2} before the heal, failed {} + {}",
            partition.as_secs(),
            n2_took.as_secs_f64(),
            n0_took.as_secs_f64(),
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2],
            after[3] - before[3],
            backlog[0] as f64 / 1048576.0,
            backlog[1] as f64 / 1048576.0,
            failed.0,
            failed.1,
        );
        Ok(())
    })
}

/// The probe's channel; its last message, `stop`, ends the subscribers.
const LAG_CHANNEL: &str = "lag-probe";

fn lag_probe(args: &[String]) -> Result<(), String> {
    let usage = || "usage: keymesh-mesh-bench lag PUBLISH_PORT PORT[,PORT...]... (SECONDS | -) DONE_FILE".to_string();
    let [publish_port, rest @ ..] = args else { return Err(usage()) };
    let [groups @ .., limit, done_file] = rest else { return Err(usage()) };
    if groups.is_empty() {
        return Err(usage());
    }
    let port = |p: &str| p.parse::<u16>().map_err(|_| format!("not a port: {p}"));
    let publish_port = port(publish_port)?;
    let groups = groups.iter().map(|g| g.split(',').map(port).collect::<Result<Vec<_>, _>>()).collect::<Result<Vec<_>, _>>()?;
    let until = match limit.as_str() {
        "-" => None,
        secs => Some(Duration::from_secs_f64(secs.parse().map_err(|_| format!("not a number of seconds: {secs}"))?)),
    };
    let started = Instant::now();
    let ages = std::thread::scope(|scope| -> Result<Vec<Vec<f64>>, String> {
        let subscribers: Vec<Vec<_>> = groups
            .iter()
            .map(|ports| {
                ports
                    .iter()
                    .map(|&port| {
                        // Subscribed before the first PUBLISH.
                        let conn = subscribe(port)?;
                        Ok(scope.spawn(move || receive_lag(conn, started)))
                    })
                    .collect::<Result<_, String>>()
            })
            .collect::<Result<_, String>>()?;
        std::thread::sleep(Duration::from_millis(200));
        let mut publisher = connect(publish_port)?;
        let run_started = Instant::now();
        while until.map_or_else(|| !std::path::Path::new(done_file).exists(), |limit| run_started.elapsed() < limit) {
            let sent = started.elapsed().as_nanos().to_string();
            publisher.call(&["PUBLISH", LAG_CHANNEL, &sent]).map_err(|e| format!("PUBLISH: {e}"))?;
            std::thread::sleep(Duration::from_millis(5));
        }
        // Time for the last messages to arrive; then the one that ends the subscribers.
        std::thread::sleep(Duration::from_millis(500));
        publisher.call(&["PUBLISH", LAG_CHANNEL, "stop"]).map_err(|e| format!("PUBLISH: {e}"))?;
        subscribers
            .into_iter()
            .map(|group| {
                let mut ages = Vec::new();
                for subscriber in group {
                    ages.extend(subscriber.join().map_err(|_| "a subscriber thread panicked".to_string())??);
                }
                Ok(ages)
            })
            .collect()
    })?;
    for mut ages in ages {
        if ages.is_empty() {
            println!("nan nan 0");
            continue;
        }
        ages.sort_by(f64::total_cmp);
        let at = |q: f64| ages[((ages.len() as f64 * q) as usize).min(ages.len() - 1)];
        println!("{:.2} {:.2} {}", at(0.5), at(0.99), ages.len());
    }
    Ok(())
}

fn wait_rounds(args: &[String]) -> Result<(), String> {
    let [port, replicas, rounds] = args else { return Err("usage: keymesh-mesh-bench wait PORT NUMREPLICAS ROUNDS".to_string()) };
    let port = port.parse::<u16>().map_err(|_| format!("not a port: {port}"))?;
    let wanted: i64 = replicas.parse().map_err(|_| format!("not a number of peers: {replicas}"))?;
    let rounds: usize = rounds.parse().map_err(|_| format!("not a number of rounds: {rounds}"))?;
    let mut conn = connect(port)?;
    let mut took = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let started = Instant::now();
        conn.call(&["SET", "bench:wait", &i.to_string()]).map_err(|e| format!("SET: {e}"))?;
        match conn.call(&["WAIT", replicas, "1000"]).map_err(|e| format!("WAIT: {e}"))? {
            keymesh_e2e::resp::Reply::Int(n) if n >= wanted => {}
            other => return Err(format!("WAIT {wanted} 1000 answered {other:?}: a peer did not ack within a second")),
        }
        took.push(started.elapsed().as_secs_f64() * 1e3);
    }
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    println!("{:.2} {:.2} {}", at(0.5), at(0.99), took.len());
    Ok(())
}

/// A connection subscribed to the probe's channel.
fn subscribe(port: u16) -> Result<keymesh_e2e::resp::Conn, String> {
    let mut conn = connect(port)?;
    match conn.call(&["SUBSCRIBE", LAG_CHANNEL]).map_err(|e| e.to_string())? {
        keymesh_e2e::resp::Reply::Array(_) | keymesh_e2e::resp::Reply::Push(_) => Ok(conn),
        other => Err(format!("SUBSCRIBE on port {port} replied {other:?}")),
    }
}

fn connect(port: u16) -> Result<keymesh_e2e::resp::Conn, String> {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect to port {port}: {e}"))?;
    keymesh_e2e::resp::Conn::new(stream, Duration::from_secs(30)).map_err(|e| format!("set up the connection to port {port}: {e}"))
}

/// Reads the probe's messages until `stop`; returns each one's age on arrival, in ms.
fn receive_lag(mut conn: keymesh_e2e::resp::Conn, started: Instant) -> Result<Vec<f64>, String> {
    let mut ages = Vec::new();
    loop {
        let message = conn.read_reply().map_err(|e| format!("reading the subscription: {e}"))?;
        let arrived = started.elapsed().as_nanos();
        let parts = match message {
            keymesh_e2e::resp::Reply::Array(parts) | keymesh_e2e::resp::Reply::Push(parts) => parts,
            other => return Err(format!("not a message: {other:?}")),
        };
        let [kind, _channel, payload] = parts.as_slice() else { return Err(format!("not a message: {parts:?}")) };
        if kind.as_bytes() != Some(b"message") {
            continue;
        }
        let payload = payload.text();
        if payload == "stop" {
            return Ok(ages);
        }
        let sent: u128 = payload.parse().map_err(|_| format!("not a probe message: {payload}"))?;
        ages.push(arrived.saturating_sub(sent) as f64 / 1e6);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("partition") => partition_catch_up(),
        Some("lag") => lag_probe(&args[1..]),
        Some("wait") => wait_rounds(&args[1..]),
        _ => {
            Err("usage: keymesh-mesh-bench (partition | lag PUBLISH_PORT PORT[,PORT...]... (SECONDS | -) DONE_FILE | wait PORT NUMREPLICAS ROUNDS)".to_string())
        }
    };
    if let Err(e) = result {
        eprintln!("keymesh-mesh-bench: {e}");
        std::process::exit(1);
    }
}
