//! A steady write load on a CacheCluster, and the check that no acknowledged write was lost.
//!
//! One client thread writes `SET <key> <seq>` with `seq` counting up, paced to a rate. Odd
//! writes go to a fresh key each (`<prefix>u<seq>`: a lost acknowledged write cannot hide behind
//! a later overwrite), even ones to one of a few hot keys (`<prefix>h<n>`: each is overwritten
//! many times, by writes that went to different pods, so last-write-wins decides). Writes go
//! round-robin over the targets: the ready endpoints of the client Service (what
//! kube-proxy would balance over) or every pod with an address. Each write goes to the target
//! pod over a connection opened from inside that pod's network namespace, so a partition never
//! separates the client from the pod it writes to: both sides of a partition keep taking writes.
//!
//! With [`LoadOptions::retry_once`] a write that fails (an error reply, a broken connection, no
//! connection) is sent once more, with the same value, to the next target, as a client library
//! with one retry does; [`Progress`] counts attempts, retries and every error text.
//!
//! The [`Ledger`] records, per key, the last acknowledged `seq` and the later writes whose
//! outcome is unknown (the connection failed before the reply); a write answered with an error
//! (e.g. `READONLY` from a pod handed off for a scale down) did not happen. The writes are
//! sequential in time on one machine's clock, so under last-write-wins a key's final value is
//! its last acknowledged `seq`, or one of those later unknown writes; anything else (absent,
//! older) is a lost acknowledged write, or a refused one that was applied after all.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{LocalCluster, LocalClusterError};
use crate::resp::{Conn, Reply};

const CALL_TIMEOUT: Duration = Duration::from_secs(2);
const TARGET_REFRESH: Duration = Duration::from_secs(1);
const MGET_CHUNK: usize = 500;

/// Where the load writes.
#[derive(Debug, Clone)]
pub enum Targets {
    /// The ready endpoints of Service `namespace/service`, re-read every second.
    ServiceEndpoints { namespace: String, service: String },
    /// Every pod of CacheCluster `namespace/cluster` that has an address and is not being
    /// deleted, ready or not.
    AllPods { namespace: String, cluster: String },
}

impl Targets {
    fn namespace(&self) -> &str {
        match self {
            Targets::ServiceEndpoints { namespace, .. } | Targets::AllPods { namespace, .. } => namespace,
        }
    }
}

/// How hard and where to write.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub targets: Targets,
    pub password: String,
    /// How many hot keys the even writes overwrite.
    pub hot_keys: u64,
    /// Writes per second (at most; one connection, one write in flight).
    pub rate: u32,
    pub prefix: String,
    /// Retry a failed write once on the next target.
    pub retry_once: bool,
}

/// What the load has done so far.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub acked: u64,
    /// Writes sent whose reply never came (outcome unknown).
    pub failed: u64,
    /// Writes answered with an error (not applied), e.g. `READONLY` from a draining pod.
    pub refused: u64,
    /// Writes not sent because no connection to the target could be opened.
    pub skipped: u64,
    /// SET commands sent or tried (first tries and retries).
    pub attempts: u64,
    /// Writes tried a second time after a failed first try.
    pub retried: u64,
    /// Every failure, first tries and retries, by its text (error reply or connection error).
    pub errors: BTreeMap<String, u64>,
    /// Acknowledged writes per pod.
    pub per_pod: BTreeMap<String, u64>,
    /// The longest time between two acknowledged writes.
    pub longest_gap: Duration,
    pub targets: Vec<String>,
}

impl Progress {
    pub fn summary(&self) -> String {
        let pods: Vec<String> = self.per_pod.iter().map(|(p, n)| format!("{p}={n}")).collect();
        let errors: Vec<String> = self.errors.iter().map(|(e, n)| format!("{n}× {e:?}")).collect();
        format!(
            "{} acked, {} refused, {} unknown outcome, {} not sent (of {} attempts, {} retries); longest gap between acks {:.1?}; acks per pod {}; errors: {}",
            self.acked,
            self.refused,
            self.failed,
            self.skipped,
            self.attempts,
            self.retried,
            self.longest_gap,
            pods.join(" "),
            if errors.is_empty() { "none".to_string() } else { errors.join(", ") }
        )
    }

    /// Writes that did not succeed (refused, unknown outcome, not sent), even after a retry.
    pub fn unsuccessful(&self) -> u64 {
        self.refused + self.failed + self.skipped
    }
}

/// One key's history: see the module docs.
#[derive(Debug, Clone, Default)]
struct KeyHistory {
    last_acked: Option<u64>,
    /// Which pod acknowledged `last_acked`, and when (since the load started).
    acked_by: Option<(String, Duration)>,
    unknown_after: Vec<u64>,
}

/// Every write the load made; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    keys: BTreeMap<String, KeyHistory>,
    pub progress: Progress,
    pub elapsed: Duration,
}

impl Ledger {
    /// The keys written.
    pub fn keys(&self) -> Vec<String> {
        self.keys.keys().cloned().collect()
    }

    /// Keys with an acknowledged write.
    pub fn acked_keys(&self) -> usize {
        self.keys.values().filter(|h| h.last_acked.is_some()).count()
    }

    /// What is wrong with `read` (key → value as read from one pod): one line per key whose value
    /// is neither its last acknowledged write nor a later write of unknown outcome.
    pub fn check(&self, read: &BTreeMap<String, Option<String>>) -> Vec<String> {
        let mut wrong = Vec::new();
        for (key, history) in &self.keys {
            let value = read.get(key).cloned().flatten();
            let seen: Option<u64> = value.as_deref().and_then(|v| v.parse().ok());
            let fine = match (history.last_acked, seen) {
                (None, None) => true,
                (_, Some(s)) if history.unknown_after.contains(&s) => true,
                (Some(a), Some(s)) => s == a,
                (Some(_), None) | (None, Some(_)) => false,
            };
            if !fine {
                let by = history.acked_by.as_ref().map(|(pod, at)| format!(" by {pod} at {at:.1?}")).unwrap_or_default();
                wrong.push(format!("{key}: read {value:?}, last acknowledged {:?}{by}, unknown after it {:?}", history.last_acked, history.unknown_after));
            }
        }
        wrong
    }
}

/// A running write load; stop it with [`WriteLoad::stop`] to get its [`Ledger`].
pub struct WriteLoad {
    started: Instant,
    stop: Arc<AtomicBool>,
    progress: Arc<Mutex<Progress>>,
    thread: Option<JoinHandle<Ledger>>,
}

impl WriteLoad {
    /// Starts the client thread.
    pub fn start(cluster: Arc<LocalCluster>, options: LoadOptions) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Mutex::new(Progress::default()));
        let (flag, shared, started) = (stop.clone(), progress.clone(), Instant::now());
        let thread = std::thread::Builder::new()
            .name("keymesh-write-load".into())
            .spawn(move || Writer::new(cluster, options, shared).run(&flag, started))
            .expect("spawn the write-load thread");
        WriteLoad { started, stop, progress, thread: Some(thread) }
    }

    /// Time since the load started (the clock of [`Ledger::check`]'s messages).
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// What the load has done so far.
    pub fn progress(&self) -> Progress {
        self.progress.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops the client and returns every write it made.
    pub fn stop(mut self) -> Ledger {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for WriteLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Writer {
    cluster: Arc<LocalCluster>,
    options: LoadOptions,
    shared: Arc<Mutex<Progress>>,
    ledger: Ledger,
    connections: HashMap<String, Conn>,
    targets: Vec<String>,
}

impl Writer {
    fn new(cluster: Arc<LocalCluster>, options: LoadOptions, shared: Arc<Mutex<Progress>>) -> Self {
        Writer { cluster, options, shared, ledger: Ledger::default(), connections: HashMap::new(), targets: Vec::new() }
    }

    fn run(mut self, stop: &AtomicBool, started: Instant) -> Ledger {
        let interval = Duration::from_secs_f64(1.0 / f64::from(self.options.rate.max(1)));
        let (mut next_refresh, mut next_write, mut last_ack) = (Instant::now(), Instant::now(), Instant::now());
        let (mut seq, mut round_robin): (u64, usize) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() >= next_refresh {
                if let Ok(targets) = self.read_targets() {
                    self.connections.retain(|pod, _| targets.contains(pod));
                    self.targets = targets;
                }
                next_refresh = Instant::now() + TARGET_REFRESH;
            }
            let now = Instant::now();
            if now < next_write {
                std::thread::sleep(next_write - now);
            }
            next_write += interval;
            if self.targets.is_empty() {
                continue;
            }
            seq += 1;
            // Its own counter: seq's parity picks the key kind, and must not pick the pod too.
            round_robin += 1;
            let pod = self.targets[round_robin % self.targets.len()].clone();
            let key = if seq % 2 == 1 {
                format!("{}u{seq}", self.options.prefix)
            } else {
                format!("{}h{}", self.options.prefix, (seq / 2) % self.options.hot_keys.max(1))
            };
            let (mut outcome, mut pod, mut errors) = (Outcome::NotSent, pod, Vec::new());
            for attempt in 0..=u32::from(self.options.retry_once) {
                if attempt > 0 {
                    round_robin += 1;
                    pod = self.targets[round_robin % self.targets.len()].clone();
                    // The first try may have been applied: its value is this same seq.
                    if matches!(outcome, Outcome::Unknown) {
                        self.ledger.keys.entry(key.clone()).or_default().unknown_after.push(seq);
                    }
                }
                let (result, error) = self.write(&pod, &key, seq);
                outcome = result;
                errors.extend(error);
                if matches!(outcome, Outcome::Acked) {
                    break;
                }
            }
            let mut p = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            p.attempts += 1 + u64::from(!errors.is_empty() && self.options.retry_once);
            p.retried += u64::from(!errors.is_empty() && self.options.retry_once);
            for error in errors {
                *p.errors.entry(error).or_default() += 1;
            }
            let history = self.ledger.keys.entry(key).or_default();
            match outcome {
                Outcome::Acked => {
                    history.last_acked = Some(seq);
                    history.acked_by = Some((pod.clone(), started.elapsed()));
                    history.unknown_after.clear();
                    p.acked += 1;
                    *p.per_pod.entry(pod).or_default() += 1;
                    p.longest_gap = p.longest_gap.max(last_ack.elapsed());
                    last_ack = Instant::now();
                }
                Outcome::Unknown => {
                    history.unknown_after.push(seq);
                    p.failed += 1;
                }
                Outcome::Refused => p.refused += 1,
                Outcome::NotSent => p.skipped += 1,
            }
            p.targets = self.targets.clone();
        }
        self.ledger.progress = self.shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.ledger.elapsed = started.elapsed();
        self.ledger
    }

    /// One SET of `key` to `seq` on `pod`, and the failure's text if it failed.
    fn write(&mut self, pod: &str, key: &str, seq: u64) -> (Outcome, Option<String>) {
        let ns = self.options.targets.namespace().to_owned();
        if !self.connections.contains_key(pod) {
            match self.cluster.connect(&ns, pod, &self.options.password, CALL_TIMEOUT) {
                Ok(conn) => {
                    self.connections.insert(pod.to_owned(), conn);
                }
                Err(e) => return (Outcome::NotSent, Some(format!("connect: {}", short(&e)))),
            }
        }
        let Some(conn) = self.connections.get_mut(pod) else { return (Outcome::NotSent, None) };
        match conn.call(&["SET", key, &seq.to_string()]) {
            Ok(Reply::Status(ok)) if ok == "OK" => (Outcome::Acked, None),
            // An error reply means the command did not run (as in Redis): the write must not
            // show up anywhere, which the ledger checks by not counting it.
            Ok(Reply::Error(e)) => (Outcome::Refused, Some(e)),
            other => {
                // Whatever happened, the write may have been applied; start afresh.
                self.connections.remove(pod);
                let text = match other {
                    Err(e) => format!("connection: {}", short(&e.to_string())),
                    Ok(reply) => format!("unexpected reply {reply:?}"),
                };
                (Outcome::Unknown, Some(text))
            }
        }
    }

    fn read_targets(&self) -> Result<Vec<String>, String> {
        match &self.options.targets {
            Targets::ServiceEndpoints { namespace, service } => {
                let ep = self.cluster.get_json(&["endpoints", service, "-n", namespace])?;
                let mut pods: Vec<String> = ep["subsets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|s| s["addresses"].as_array().cloned().unwrap_or_default())
                    .filter_map(|a| a["targetRef"]["name"].as_str().map(str::to_owned))
                    .collect();
                pods.sort();
                Ok(pods)
            }
            Targets::AllPods { namespace, cluster } => {
                let pods = self.cluster.get_json(&["pods", "-n", namespace, "-l", &super::cache::pod_selector(cluster)])?;
                let mut names: Vec<String> = pods["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && p["status"]["podIP"].is_string())
                    .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
                    .collect();
                names.sort();
                Ok(names)
            }
        }
    }
}

/// An error text without the address or pod that varies from one failure to the next.
fn short(text: &str) -> String {
    text.split(" (os error").next().unwrap_or(text).chars().take(80).collect()
}

enum Outcome {
    Acked,
    Refused,
    Unknown,
    NotSent,
}

impl LocalCluster {
    /// Reads `keys` from pod `namespace/pod` (MGET in chunks).
    pub fn read_keys(&self, namespace: &str, pod: &str, password: &str, keys: &[String]) -> Result<BTreeMap<String, Option<String>>, String> {
        let mut conn = self.connect(namespace, pod, password, Duration::from_secs(5))?;
        let mut out = BTreeMap::new();
        for chunk in keys.chunks(MGET_CHUNK) {
            let mut args: Vec<&str> = vec!["MGET"];
            args.extend(chunk.iter().map(String::as_str));
            let Reply::Array(values) = conn.call(&args).map_err(|e| format!("MGET on {pod}: {e}"))? else {
                return Err(format!("MGET on {pod}: not an array"));
            };
            for (key, value) in chunk.iter().zip(values) {
                out.insert(key.clone(), value.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()));
            }
        }
        Ok(out)
    }

    /// Waits until every pod in `pods` holds every acknowledged write of `ledger` (see
    /// [`Ledger::check`]); returns how long that took. The error names the first wrong keys.
    pub fn verify_writes(&self, namespace: &str, pods: &[String], password: &str, ledger: &Ledger, limit: Duration) -> Result<Duration, LocalClusterError> {
        let started = Instant::now();
        let keys = ledger.keys();
        self.wait_for(&format!("every acknowledged write on {}", pods.join(", ")), limit, || {
            for pod in pods {
                let read = self.read_keys(namespace, pod, password, &keys)?;
                let wrong = ledger.check(&read);
                if !wrong.is_empty() {
                    let first: Vec<&String> = wrong.iter().take(5).collect();
                    return Err(format!("{pod}: {} of {} keys wrong, e.g. {first:?}", wrong.len(), keys.len()));
                }
            }
            Ok(())
        })?;
        Ok(started.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(entries: &[(&str, Option<u64>, &[u64])]) -> Ledger {
        let keys = entries.iter().map(|(k, a, u)| (k.to_string(), KeyHistory { last_acked: *a, acked_by: None, unknown_after: u.to_vec() })).collect();
        Ledger { keys, ..Ledger::default() }
    }

    fn read(entries: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        entries.iter().map(|(k, v)| (k.to_string(), v.map(str::to_owned))).collect()
    }

    #[test]
    fn the_last_acknowledged_or_a_later_unknown_write_is_fine_anything_else_is_lost() {
        let l = ledger(&[("a", Some(7), &[]), ("b", Some(3), &[9]), ("c", None, &[4]), ("d", None, &[])]);
        assert!(l.check(&read(&[("a", Some("7")), ("b", Some("9")), ("c", None), ("d", None)])).is_empty());
        assert!(l.check(&read(&[("a", Some("7")), ("b", Some("3")), ("c", Some("4"))])).is_empty());
        let wrong = l.check(&read(&[("a", Some("5")), ("b", None), ("c", Some("2")), ("d", Some("1"))]));
        assert_eq!(wrong.len(), 4, "{wrong:?}");
    }
}
