//! `SYNC` as `redis-cli --rdb` asks for it: the keyspace as an RDB file streamed in Redis's
//! diskless framing, `$EOF:<40-character mark>\r\n`, the file, the mark (`rdb.c`,
//! `rdbSaveToSlavesSockets`; redis-cli 6.0 and later read it, `getRDB`). The length is not
//! known before the scan ends, and with this framing the file never has to be held whole:
//! a blocking thread exports it shard by shard (`export_chunked`) into a small channel that
//! the connection writes out, so the server holds a few 1 MiB chunks, not the file.

use std::sync::Arc;

use rand::Rng;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::export::{export_chunked, Export};
use crate::server::Server;

/// About this much of the file is produced before it is handed to the connection.
const CHUNK: usize = 1 << 20;
/// Chunks produced but not yet written: the most the export runs ahead of the socket.
const IN_FLIGHT: usize = 2;

/// Writes the keyspace to `writer` as an RDB file in the `EOF:` framing. An error is the
/// writer's (the client went away); the export then stops at its next chunk.
pub async fn send<W: AsyncWrite + Unpin>(server: &Arc<Server>, writer: &mut W) -> std::io::Result<Export> {
    let started = std::time::Instant::now();
    let mark: String = {
        let mut rng = rand::rng();
        (0..40).map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)])).collect()
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(IN_FLIGHT);
    let source = server.clone();
    let producer =
        tokio::task::spawn_blocking(move || export_chunked(&source.store, &source.version, CHUNK, &mut |chunk| tx.blocking_send(chunk.to_vec()).is_ok()));
    writer.write_all(format!("$EOF:{mark}\r\n").as_bytes()).await?;
    let mut sent = 0u64;
    while let Some(chunk) = rx.recv().await {
        writer.write_all(&chunk).await?;
        sent += chunk.len() as u64;
    }
    writer.write_all(mark.as_bytes()).await?;
    writer.flush().await?;
    let written = producer.await.ok().flatten().unwrap_or_default();
    server.stats.net_output_bytes.incr_by(sent + 40);
    tracing::info!(keys = written.keys, bytes = written.bytes, ms = started.elapsed().as_millis() as u64, "RDB file sent (SYNC)");
    Ok(written)
}
