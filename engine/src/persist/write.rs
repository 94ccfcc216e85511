//! Writing a snapshot: `SAVE` (on the caller's thread), `BGSAVE` (on a thread of its own),
//! both through `save`, which holds the node's one save slot.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use keymesh_proto as pb;
use tracing::{info, warn};

use super::format::{FrameWriter, FORMAT_VERSION};
use super::{snapshot_path, unix_ms, PersistError, SaveReport, SaveStart};
use crate::server::Server;

/// Distinguishes the temporary files of saves in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes a snapshot now, on this thread; the keyspace keeps taking writes meanwhile (one
/// shard is locked at a time). Fails with `InProgress` while another save runs.
pub fn save(server: &Server) -> Result<SaveReport, PersistError> {
    if !server.persist.begin_save() {
        return Err(PersistError::InProgress);
    }
    save_claimed(server)
}

/// Starts a save on a thread of its own. `Err(InProgress)` while one runs. The save slot is
/// taken before this returns, so `INFO` shows the save in progress at once.
pub fn bgsave(server: Arc<Server>) -> Result<(), PersistError> {
    if !server.persist.begin_save() {
        return Err(PersistError::InProgress);
    }
    let saving = server.clone();
    let spawned = std::thread::Builder::new().name("keymesh-bgsave".into()).spawn(move || {
        lower_priority();
        drop(save_claimed(&saving))
    });
    if let Err(source) = spawned {
        let failed: Result<SaveReport, _> = Err(PersistError::Write { path: PathBuf::from("(bgsave thread)"), source });
        server.persist.end_save(&failed, SaveStart::default());
        return failed.map(drop);
    }
    Ok(())
}

/// Runs the calling thread under Linux's `SCHED_IDLE` policy: it gets a core only when no
/// ordinary thread wants it, and a worker woken by a request preempts it at once. At nice 19
/// instead, the scheduler still let the save finish its time slice (milliseconds) before a
/// woken worker ran: p99 of a write load with the server on one core went from 0.3 to 4.8 ms
/// (docs/benchmarks.md, "Snapshots"). Best effort: a failure is logged and the save goes on.
fn lower_priority() {
    use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if let Err(e) = thread_priority::set_thread_priority_and_policy(thread_priority::thread_native_id(), ThreadPriority::Min, idle) {
        warn!(error = ?e, "could not run the background save at idle priority");
    }
}

/// The save itself, once the slot is held; frees it.
fn save_claimed(server: &Server) -> Result<SaveReport, PersistError> {
    // Noted before the scan: every write counted here, every write this node originated
    // through `seq` and every write it holds stamped at or below `frontier` is in the snapshot.
    let start = SaveStart {
        dirty: server.store.stats.dirty.value(),
        seq: server.mesh.last_seq(),
        draining: server.mesh.draining(),
        frontier: server.mesh.stable_frontier(),
    };
    let path = snapshot_path(&server.settings());
    let outcome = write_snapshot(server, &path, start.frontier);
    match &outcome {
        Ok(r) => info!(path = %path.display(), keys = r.keys, bytes = r.bytes, ms = r.duration_ms, "snapshot saved"),
        Err(e) => warn!(error = %e, "snapshot failed"),
    }
    server.persist.end_save(&outcome, start);
    outcome
}

/// Writes the snapshot to a temporary file in the same directory, fsyncs it, renames it over
/// `path` and fsyncs the directory. The temporary file is removed on failure.
fn write_snapshot(server: &Server, path: &Path, frontier: u64) -> Result<SaveReport, PersistError> {
    let started = Instant::now();
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let temp = dir.join(format!("temp-{}-{}.keymesh", std::process::id(), TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)));
    let written = write_file(server, &temp, frontier).map_err(|source| PersistError::Write { path: temp.clone(), source });
    let (keys, ops, bytes) = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
    };
    if let Err(source) = std::fs::rename(&temp, path) {
        let _ = std::fs::remove_file(&temp);
        return Err(PersistError::Rename { path: path.to_path_buf(), source });
    }
    // The rename is durable only once the directory is.
    File::open(dir).and_then(|d| d.sync_all()).map_err(|source| PersistError::Write { path: dir.to_path_buf(), source })?;
    Ok(SaveReport { keys, ops, bytes, duration_ms: started.elapsed().as_millis() as u64 })
}

/// Streams the keyspace into `temp`, shard by shard. Returns (keys, ops, bytes).
fn write_file(server: &Server, temp: &Path, frontier: u64) -> std::io::Result<(u64, u64, u64)> {
    let store = &server.store;
    let file = File::create(temp)?;
    let mut out = FrameWriter::new(BufWriter::with_capacity(1 << 20, file))?;
    let header = pb::SnapshotHeader {
        format_version: FORMAT_VERSION,
        node_name: server.node_name.clone(),
        node_id: store.node_id,
        run_id: server.mesh.run_id(),
        started_unix_ms: unix_ms(),
        hlc: store.hlc.now(),
        last_contact_unix_ms: server.mesh.last_contact_unix_ms(),
        databases: store.databases() as u32,
        engine_version: server.version.clone(),
        stable_frontier: frontier,
    };
    out.write(&frame(pb::snapshot_frame::Body::Header(header)))?;
    let (mut batches, mut failed) = (0u64, None);
    let (keys, ops) = crate::repl::snapshot::snapshot(store, &mut |ops| {
        if failed.is_none() {
            batches += 1;
            let batch = pb::Batch { first_seq: 0, ops: ops.into_iter().map(pb::Op::from).collect(), hlc: store.hlc.now() };
            failed = out.write(&frame(pb::snapshot_frame::Body::Batch(batch))).err();
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    out.write(&frame(pb::snapshot_frame::Body::End(pb::SnapshotEnd { keys, ops, batches, finished_unix_ms: unix_ms() })))?;
    let bytes = out.bytes;
    let file = out.into_inner().into_inner().map_err(std::io::IntoInnerError::into_error)?;
    file.sync_all()?;
    Ok((keys, ops, bytes))
}

fn frame(body: pb::snapshot_frame::Body) -> pb::SnapshotFrame {
    pb::SnapshotFrame { body: Some(body) }
}

#[cfg(test)]
mod tests {
    use thread_priority::{NormalThreadSchedulePolicy, ThreadSchedulePolicy};

    /// The background save's thread really runs at `SCHED_IDLE` (an unprivileged thread may
    /// lower its own policy), so a request's worker preempts it.
    #[test]
    fn the_save_thread_runs_at_idle_priority() {
        let policy = std::thread::spawn(|| {
            super::lower_priority();
            thread_priority::thread_schedule_policy()
        })
        .join()
        .expect("the thread panicked");
        assert_eq!(policy.expect("policy readable"), ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle));
    }
}
