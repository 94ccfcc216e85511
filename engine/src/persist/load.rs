//! Loading the snapshot at start, before the mesh starts: clients that connect meanwhile get
//! `LOADING` and `/readyz` answers 503.
//!
//! Loading merges the file's effects into the (empty) keyspace, as a peer's full sync would,
//! and moves the clock past the snapshot's. The node then resyncs with its peers as after any
//! restart. A snapshot whose node had heard from no peer for longer than
//! `tombstone-gc-seconds` (counting the time it was down) may hold keys whose tombstones the
//! peers have since dropped, so the node starts stale (`Mesh::restore_silence`): it wipes and
//! takes a full sync at its first reconnect, the mesh's rule, and never resurrects a delete.
//!
//! A snapshot that fails its checks (`format`) is refused whole: what was merged from it is
//! wiped, the file is moved aside to `<dbfilename>.corrupt-<unix ms>` (kept for inspection,
//! never overwritten by the next save), and the node starts empty and full-syncs; with
//! `snapshot-load-error refuse-start` the server exits instead.
//!
//! A Redis RDB file in the snapshot's place (recognised by its `REDIS` header) is imported
//! (`rdb`), the way Redis loads its `dump.rdb` at start: migrating from Redis is copying the
//! file into `dir`. A file that does not decode is refused by the same rule, and so is one
//! that holds a type KeyMesh has no value for, unless `rdb-import-unsupported skip` has such
//! keys left out (each one logged by name, type and database, counted in `INFO persistence`).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use tracing::{error, info, warn};

use super::format::FrameReader;
use super::{snapshot_path, unix_ms, PersistError};
use crate::server::Server;

/// What loading found.
#[derive(Debug)]
pub enum LoadOutcome {
    NoSnapshot,
    Loaded {
        keys: u64,
        ops: u64,
        age_ms: u64,
        stale: bool,
    },
    /// A Redis RDB file, imported as writes of this node (`persist::rdb`).
    Imported {
        keys: u64,
        expired: u64,
    },
    /// Refused (`reason`) and moved to `moved_to`; the node starts empty.
    Refused {
        reason: String,
        moved_to: Option<PathBuf>,
    },
}

/// Loads `dir`/`dbfilename` if present. `Err` only when the file was refused and
/// `snapshot-load-error` is `refuse-start`.
pub fn load(server: &Server) -> Result<LoadOutcome, PersistError> {
    server.persist.begin_loading();
    let outcome = load_snapshot(server);
    server.persist.end_loading();
    outcome
}

fn load_snapshot(server: &Server) -> Result<LoadOutcome, PersistError> {
    let (path, refuse_start) = {
        let s = server.settings();
        (snapshot_path(&s), s.snapshot_load_error == crate::config::settings::SnapshotLoadError::RefuseStart)
    };
    if !path.exists() {
        info!(path = %path.display(), "no snapshot to load: starting empty");
        return Ok(LoadOutcome::NoSnapshot);
    }
    match merge_file(server, &path) {
        Ok(loaded) => Ok(loaded),
        Err(e) if refuse_start => {
            server.store.wipe();
            error!(error = %e, "snapshot refused; not starting (snapshot-load-error refuse-start)");
            Err(e)
        }
        Err(e) => {
            server.store.wipe();
            let moved_to = move_aside(&path);
            error!(
                error = %e,
                moved_to = %moved_to.as_ref().map_or("(could not move it)".to_string(), |p| p.display().to_string()),
                "snapshot refused: starting empty and resyncing from the mesh"
            );
            Ok(LoadOutcome::Refused { reason: e.to_string(), moved_to })
        }
    }
}

fn merge_file(server: &Server, path: &Path) -> Result<LoadOutcome, PersistError> {
    let store = &server.store;
    let refused = |source| PersistError::Refused { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(|source| PersistError::Open { path: path.to_path_buf(), source })?;
    let total = file.metadata().map_or(0, |m| m.len());
    server.persist.load_total.store(total, Ordering::Relaxed);
    let mut input = BufReader::with_capacity(1 << 20, file);
    // Peeked, not consumed: the file is read once (it may be a pipe).
    let head = input.fill_buf().map_err(|source| PersistError::Open { path: path.to_path_buf(), source })?;
    if head.starts_with(b"REDIS") {
        drop(input);
        return import_rdb(server, path);
    }
    let (mut reader, header) = FrameReader::open(input).map_err(refused)?;
    store.hlc.receive(header.hlc);
    let mut ops = 0u64;
    while let Some(batch) = reader.next_batch().map_err(refused)? {
        store.hlc.receive(batch.hlc);
        ops += batch.ops.len() as u64;
        // The file's edge: each op decoded into an `Effect` (`repl::wire`); one that carries no
        // effect this node merges is skipped, as the merge always skipped it.
        for op in batch.ops {
            if let Ok(op) = crate::db::effect::Effect::try_from(op) {
                crate::repl::merge::apply_op(store, &op);
            }
        }
        server.persist.load_bytes.store(reader.offset, Ordering::Relaxed);
    }
    let keys: u64 = (0..store.databases()).map(|db| store.dbsize(db) as u64).sum();
    server.persist.set_loaded(keys, store.stats.dirty.value(), header.stable_frontier);
    let age_ms = unix_ms().saturating_sub(header.last_contact_unix_ms);
    server.mesh.restore_silence(age_ms);
    let cap_ms = store.tombstone_gc_ms.load(Ordering::Relaxed);
    let stale = age_ms > cap_ms;
    if stale {
        warn!(
            age_s = age_ms / 1000,
            cap_s = cap_ms / 1000,
            "the snapshot's node heard from no peer for longer than tombstone-gc-seconds: it will wipe and full-sync at its first reconnect to a peer"
        );
    }
    info!(path = %path.display(), keys, ops, age_s = age_ms / 1000, saved_by = %header.node_name, "snapshot loaded");
    Ok(LoadOutcome::Loaded { keys, ops, age_ms, stale })
}

/// Imports a Redis RDB file found at `dir`/`dbfilename`, the way Redis loads it at start.
/// The file is kept as `<dbfilename>.imported` (a hard link), and a KeyMesh snapshot of the
/// imported keys replaces `dbfilename` at once. The imported keys are writes of this node: the
/// peers get them in the full sync they take from a restarted node.
fn import_rdb(server: &Server, path: &Path) -> Result<LoadOutcome, PersistError> {
    let bytes = std::fs::read(path).map_err(|source| PersistError::Open { path: path.to_path_buf(), source })?;
    server.persist.load_total.store(bytes.len() as u64, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let on_unsupported = server.settings().rdb_import_unsupported;
    let imported = super::rdb::import_with(&server.store, &bytes, on_unsupported).map_err(|source| PersistError::Rdb { path: path.to_path_buf(), source })?;
    for u in &imported.skipped {
        warn!(key = %String::from_utf8_lossy(&u.key), db = u.db, kind = %u.kind, "RDB import skipped a key KeyMesh has no type for (rdb-import-unsupported skip)");
    }
    for section in &imported.sections_skipped {
        warn!(what = %section.what, hint = section.hint, "RDB import skipped a section (rdb-import-unsupported skip)");
    }
    server.persist.load_bytes.store(bytes.len() as u64, Ordering::Relaxed);
    let mut kept = path.as_os_str().to_os_string();
    kept.push(".imported");
    if let Err(e) = std::fs::hard_link(path, &kept) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            warn!(error = %e, "could not keep a copy of the imported RDB file");
        }
    }
    server.persist.set_loaded(imported.keys, server.store.stats.dirty.value(), 0);
    server.persist.set_import_counts(imported.expired, imported.skipped.len() as u64);
    // Saved at once in KeyMesh's format: a restart must load these writes with the versions
    // they were given now, not import the RDB again with newer ones (which would override
    // writes made after this import).
    if let Err(e) = super::save(server) {
        warn!(error = %e, "could not save the imported keys: a restart imports the RDB file again, over any later writes");
    }
    info!(
        path = %path.display(),
        keys = imported.keys,
        expired = imported.expired,
        empty = imported.empty,
        skipped = imported.skipped.len(),
        sections_skipped = imported.sections_skipped.len(),
        members_expired = imported.members_expired,
        rdb_version = imported.version,
        redis_version = imported.redis_version.as_deref().unwrap_or("unknown"),
        ms = started.elapsed().as_millis() as u64,
        "Redis RDB file imported"
    );
    Ok(LoadOutcome::Imported { keys: imported.keys, expired: imported.expired })
}

/// Moves a refused file out of the way so that the next save cannot overwrite it.
fn move_aside(path: &Path) -> Option<PathBuf> {
    let mut name = path.file_name()?.to_os_string();
    name.push(format!(".corrupt-{}", unix_ms()));
    let target = path.with_file_name(name);
    std::fs::rename(path, &target).ok().map(|_| target)
}
