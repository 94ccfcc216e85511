//! One client connection: read, parse every complete request in the buffer (pipelining),
//! run each, and write all replies with one flush, after the other ready connections have run.
//!
//! Bounds: the unparsed input may not exceed `client-query-buffer-limit`; replies are flushed
//! whenever 64 KiB accumulate, so a client that never reads blocks only its own connection
//! (its socket buffer fills and we stop reading its requests) and costs bounded memory.
//! A protocol error gets Redis's error reply and closes the connection, as in Redis.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::debug;

use crate::client::{BlockRequest, ClientState, ReplyMode};
use crate::cmd::Call;
use crate::frame::Frame;
use crate::handoff::Phase;
use crate::parse::{parse_request, Limits, ProtocolError, Request};
use crate::server::Server;

const FLUSH_THRESHOLD: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// How many pipelined requests are parsed ahead to prefetch their keys together: enough for
/// their cache misses to overlap (redis-benchmark's -P 16 fills one batch).
const BATCH: usize = 16;

/// Serves a plain-text client.
pub async fn serve(server: Arc<Server>, socket: TcpStream, addr: SocketAddr) {
    let laddr = socket.local_addr().unwrap_or(addr);
    tune_socket(&server, &socket);
    let (reader, writer) = socket.into_split();
    serve_split(server, reader, writer, addr, laddr).await
}

/// No Nagle delay (replies are flushed whole), and `tcp-keepalive`.
pub fn tune_socket(server: &Server, socket: &TcpStream) {
    let _ = socket.set_nodelay(true);
    if let Some(keepalive) = server.settings().tcp_keepalive {
        let ka = socket2::TcpKeepalive::new().with_time(keepalive);
        let _ = socket2::SockRef::from(socket).set_tcp_keepalive(&ka);
    }
}

/// Serves a client over any stream (plain TCP halves, or a TLS stream split in two).
pub async fn serve_split<R, W>(server: Arc<Server>, mut reader: R, mut writer: W, addr: SocketAddr, laddr: SocketAddr)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if let Some(refusal) = refuse(&server, addr) {
        let _ = writer.write_all(refusal.as_bytes()).await;
        return;
    }
    let (handle, mut pushes) = server.clients.register(addr, laddr);
    let mut client = ClientState::new(handle.clone(), !server.settings().has_password());
    // Its writes' ops are published once per batch (below) and before replies are written
    // (`flush`), not once per command.
    client.writes.batch();
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    // Reused for every batch (`take_batch`): moving an inline array of 16 requests around
    // cost more than a GET at -P 1.
    let mut batch = Vec::with_capacity(BATCH);
    let mut shutdown = server.shutdown_signal();
    let mut handoff = server.handoff.subscribe();
    // Set when a handoff begins while this connection is open: it closes once idle.
    let mut leaving = false;
    let mut settings_cache = server.settings_cache();
    // Kill, shutdown, handoff and pushes are rare: between requests the connection waits on
    // its handle's atomic waker (`ClientHandle::wake_control`, `ClientHandle::push`), not on
    // three `Notify`-based futures and a channel that each wait would register and drop (at
    // -P 1 the futures were a third of a GET's instructions, the channel 6%). Requests are
    // read first (`biased`); `control_changed` after every read sees a signal that a client
    // sending without pause would keep the wait from noticing.

    'connection: loop {
        if leaving && is_idle(&client, &input) {
            debug!(client = client.id, "handoff: closing idle client");
            break;
        }
        // The settings once per read, from this connection's cache (`SettingsCache`); a
        // CONFIG SET applies from the next read on.
        let (idle, query_buffer_limit, limits) = {
            let settings = settings_cache.load();
            // `timeout` applies to ordinary idle clients, not to subscribers or blocked ones.
            let idle = settings.idle_timeout.filter(|_| client.subscriptions() == 0);
            (idle, settings.client_query_buffer_limit, Limits::of(settings))
        };
        tokio::select! {
            biased;
            read = reader.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    server.stats.net_input_bytes.incr_by(n as u64);
                    // Activity is noted per read, as Redis's `lastinteraction`, not per
                    // pipelined command (a clock read each).
                    handle.touch();
                    if control_changed(&client, &mut shutdown, &mut handoff, &mut leaving) {
                        break;
                    }
                }
            },
            () = std::future::poll_fn(|cx| handle.poll_control(cx)) => {
                if control_changed(&client, &mut shutdown, &mut handoff, &mut leaving) {
                    break;
                }
                // A push (a pub/sub message, an invalidation, a MONITOR line) wakes it too.
                drain_pushes(&client, &mut pushes, &mut output);
                if flush(&server, &mut client, &mut writer, &mut output).await.is_err() { break; }
                continue;
            }
            _ = sleep_or_forever(idle) => { debug!(client = client.id, "closing idle client"); break }
        }
        if handle.killed.load(Ordering::Acquire) {
            break;
        }
        if input.len() > query_buffer_limit {
            debug!(client = client.id, "closing client that exceeded client-query-buffer-limit");
            break;
        }
        // Messages queued before these requests arrived go first (an invalidation sent
        // before a client's next command must reach it before that command's reply).
        drain_pushes(&client, &mut pushes, &mut output);
        // Requests run since the read: one is answered at once, a pipeline's in one burst.
        let mut requests = 0usize;
        loop {
            // Up to `BATCH` pipelined requests are parsed ahead and their keys prefetched
            // together (`cmd::prefetch`), then run in order. A protocol error is answered
            // after the requests before it, as when they were parsed one by one.
            let protocol_error = take_batch(&mut input, &limits, &mut batch);
            if batch.is_empty() && protocol_error.is_none() {
                break;
            }
            if batch.len() > 1 {
                crate::cmd::prefetch(&server, &client, &mut batch);
            }
            requests += batch.len();
            for call in batch.drain(..) {
                // CLIENT PAUSE: a command the pause covers waits here, after the replies before it.
                if server.pause.current().is_some()
                    && crate::pause::holds(&server, &client, &call.argv)
                    && (flush(&server, &mut client, &mut writer, &mut output).await.is_err() || !server.pause.wait(&server, &client, &call.argv).await)
                {
                    break 'connection;
                }
                let mode_before = client.reply_mode;
                let reply = crate::cmd::dispatch(&server, &mut client, call);
                let suppress = match (mode_before, client.reply_mode) {
                    (_, ReplyMode::Off) => true,
                    (ReplyMode::On, ReplyMode::Skip) => true,
                    (ReplyMode::Skip, ReplyMode::Skip) => {
                        client.reply_mode = ReplyMode::On;
                        true
                    }
                    _ => false,
                };
                if let Some(block) = client.block.take() {
                    // Everything before the blocking command is answered first.
                    if flush(&server, &mut client, &mut writer, &mut output).await.is_err() {
                        cancel_block(&server, &block);
                        break 'connection;
                    }
                    let Some(frame) = wait_blocked(&server, &client, block, &mut reader, &mut input, &mut handoff).await else {
                        break 'connection;
                    };
                    frame.encode(client.resp, &mut output);
                } else if suppress {
                    encode_pushes_only(&client, &reply, &mut output);
                } else {
                    reply.encode(client.resp, &mut output);
                }
                if client.closing {
                    if flush(&server, &mut client, &mut writer, &mut output).await.is_ok() && client.send_rdb {
                        let _ = crate::persist::rdb::send_sync(&server, &mut writer).await;
                    }
                    break 'connection;
                }
                if output.len() >= FLUSH_THRESHOLD && flush(&server, &mut client, &mut writer, &mut output).await.is_err() {
                    break 'connection;
                }
            }
            // The batch's writes reach the backlog together, at most `BATCH` commands after
            // the first of them ran.
            client.writes.publish(&server.repl_log);
            if let Some(e) = protocol_error {
                Frame::error(format!("ERR {e}")).encode(client.resp, &mut output);
                let _ = flush(&server, &mut client, &mut writer, &mut output).await;
                break 'connection;
            }
            // Everything read was run (the usual case): nothing to parse until the next read.
            if input.is_empty() {
                break;
            }
        }
        drain_pushes(&client, &mut pushes, &mut output);
        // Replies to a pipeline wait for the other connections that are ready to run their
        // requests first (tokio runs a yielded task again after it has polled for I/O), so a
        // worker writes its replies in one burst, as Redis does in `beforeSleep`. Written one
        // by one, each reply woke the client for itself: against redis-benchmark -P 16 the
        // client slept and was woken 8x as often (31,341 against 3,856 epoll_waits per
        // 400,000 LPUSHes), and the wake-ups cost this worker 15% of its CPU
        // (docs/benchmarks.md, "Replies in one burst"). A single request's reply goes out at
        // once: the yield was 12% of a GET's instructions at -P 1, where there is no pipeline
        // to fill, and on 16 cores a worker serving 256 such clients used 10% less CPU per
        // request without it ("A single request's reply at once").
        if !output.is_empty() && requests > 1 {
            tokio::task::yield_now().await;
        }
        if flush(&server, &mut client, &mut writer, &mut output).await.is_err() {
            break;
        }
        if input.capacity() - input.len() < READ_CHUNK / 4 {
            input.reserve(READ_CHUNK);
        }
    }
    crate::cmd::connection::disconnect(&server, &mut client);
}

/// Redis refuses a connection past `maxclients`, and in protected mode a non-loopback
/// client when no password is set.
fn refuse(server: &Server, addr: SocketAddr) -> Option<&'static str> {
    if server.clients.count() >= server.settings().maxclients {
        server.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
        server.metrics.connection_rejected();
        return Some("-ERR max number of clients reached\r\n");
    }
    let protected = server.settings().protected();
    if protected && !addr.ip().is_loopback() {
        return Some("-DENIED Running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. Set a password with `requirepass`, bind explicitly to the interfaces clients use, or disable protected mode with `protected-mode no`.\r\n");
    }
    None
}

/// Applies a kill, shutdown or handoff signal: returns whether the connection must close
/// now. A handoff's `Closing` marks it `leaving` (it closes once idle); `Serving` undoes that.
fn control_changed(client: &ClientState, shutdown: &mut watch::Receiver<bool>, handoff: &mut watch::Receiver<Phase>, leaving: &mut bool) -> bool {
    if client.handle.killed.load(Ordering::Acquire) || shutdown.has_changed().unwrap_or(true) {
        return true;
    }
    if handoff.has_changed().unwrap_or(false) {
        match *handoff.borrow_and_update() {
            Phase::Serving => *leaving = false,
            Phase::Closing => *leaving = true,
            Phase::Done => {
                debug!(client = client.id, "handoff done: closing client");
                return true;
            }
        }
    }
    false
}

/// Between requests, with nothing half-received and no state a close would lose: a handoff may
/// close it now without cutting off anything the client is waiting for.
fn is_idle(client: &ClientState, input: &BytesMut) -> bool {
    input.is_empty() && client.multi.is_none() && client.subscriptions() == 0
}

async fn sleep_or_forever(limit: Option<Duration>) {
    match limit {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Moves the complete requests at the head of `input` into the empty `batch`, at most `BATCH`
/// (empty requests skipped); returns the protocol error that stopped the parse, if any.
fn take_batch(input: &mut BytesMut, limits: &Limits, batch: &mut Vec<Call>) -> Option<ProtocolError> {
    while batch.len() < BATCH && !input.is_empty() {
        match parse_request(input, limits) {
            Ok(Some(request)) => {
                let argv = take_args(input, request);
                if !argv.is_empty() {
                    batch.push(Call::new(argv));
                }
            }
            Ok(None) => break,
            Err(e) => return Some(e),
        }
    }
    None
}

/// The request's arguments, each a slice of the request's bytes taken out of `input`. Every
/// handle on those bytes costs an atomic increment of their shared count when made and a
/// decrement when dropped (`lock`-prefixed, ~1% of a pipelined GET's time each: perf, issue
/// 16), so the last argument is the request's own handle cut down, not one more slice of it.
fn take_args(input: &mut BytesMut, request: Request) -> Vec<Bytes> {
    let mut raw = input.split_to(request.consumed()).freeze();
    match request {
        Request::Multibulk { args, .. } => {
            let mut argv = Vec::with_capacity(args.len());
            let Some((last, rest)) = args.split_last() else { return argv };
            argv.extend(rest.iter().map(|r| raw.slice(r.clone())));
            raw.truncate(last.end);
            raw.advance(last.start);
            argv.push(raw);
            argv
        }
        Request::Inline { args, .. } => args.into_iter().map(Bytes::from).collect(),
    }
}

/// With `CLIENT REPLY OFF|SKIP` only push frames (subscription confirmations) go out, in
/// either protocol, as in Redis.
fn encode_pushes_only(client: &ClientState, frame: &Frame, output: &mut BytesMut) {
    match frame {
        // Pub/sub confirmations go out whatever the protocol, as Redis's CLIENT_PUSHING.
        Frame::Push(_) => frame.encode(client.resp, output),
        Frame::Sequence(frames) => frames.iter().for_each(|f| encode_pushes_only(client, f, output)),
        _ => {}
    }
}

fn encode_push(client: &ClientState, frame: &Frame, output: &mut BytesMut) {
    let before = output.len();
    frame.encode(client.resp, output);
    let size = (output.len() - before) as u64;
    let _ = client.handle.pending_push.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(size)));
}

/// Encodes the frames pushed to this client since the last call; one atomic load when none
/// were (`ClientHandle::push`).
fn drain_pushes(client: &ClientState, pushes: &mut tokio::sync::mpsc::UnboundedReceiver<Frame>, output: &mut BytesMut) {
    if !client.handle.take_pushed() {
        return;
    }
    while let Ok(frame) = pushes.try_recv() {
        encode_push(client, &frame, output);
    }
}

/// Writes the replies in `output`, after publishing the client's writes (`ClientWrites`): a
/// reply goes out only once the ops of the writes it acknowledges are in the backlog.
async fn flush<W: AsyncWrite + Unpin>(server: &Server, client: &mut ClientState, writer: &mut W, output: &mut BytesMut) -> std::io::Result<()> {
    client.writes.publish(&server.repl_log);
    if output.is_empty() {
        return Ok(());
    }
    writer.write_all(output).await?;
    server.stats.net_output_bytes.incr_by(output.len() as u64);
    output.clear();
    Ok(())
}

/// Waits for a blocking command's reply: served by `blocking::wake`, timed out, or cancelled
/// by a disconnect, kill or shutdown (`None`: close the connection). Requests the client
/// pipelines meanwhile are buffered in `input` and run after the reply, as in Redis.
async fn wait_blocked<R: AsyncRead + Unpin>(
    server: &Server,
    client: &ClientState,
    mut block: BlockRequest,
    reader: &mut R,
    input: &mut BytesMut,
    handoff: &mut watch::Receiver<Phase>,
) -> Option<Frame> {
    enum Outcome {
        Served(Option<Frame>),
        TimedOut,
        Closed,
    }
    let handle = &client.handle;
    handle.blocked.store(true, Ordering::Relaxed);
    let mut shutdown = server.shutdown_signal();
    let timeout = sleep_or_forever(block.timeout);
    tokio::pin!(timeout);
    let outcome = loop {
        tokio::select! {
            reply = &mut block.reply => break Outcome::Served(reply.ok()),
            _ = &mut timeout => break Outcome::TimedOut,
            _ = handle.kill_signal.notified() => break Outcome::Closed,
            _ = shutdown.changed() => break Outcome::Closed,
            // A blocked client is busy: it stays through a handoff's grace, not past it.
            Ok(()) = handoff.changed() => {
                if *handoff.borrow_and_update() == Phase::Done {
                    break Outcome::Closed;
                }
            }
            read = reader.read_buf(input) => match read {
                // A client that goes away stops waiting: nothing may be popped on its behalf.
                Ok(0) | Err(_) => break Outcome::Closed,
                Ok(_) if input.len() > server.settings().client_query_buffer_limit => break Outcome::Closed,
                Ok(_) => {}
            },
        }
    };
    let result = match outcome {
        Outcome::Served(reply) => reply,
        // If a waker is serving us right now, its reply (with the popped data) is on the way.
        Outcome::TimedOut => match block.waiter.cancel() {
            Some(frame) => Some(frame),
            None => block.reply.await.ok(),
        },
        Outcome::Closed => {
            block.waiter.cancel();
            None
        }
    };
    handle.blocked.store(false, Ordering::Relaxed);
    server.blocking.unregister(&block.waiter);
    result
}

fn cancel_block(server: &Server, block: &BlockRequest) {
    block.waiter.cancel();
    server.blocking.unregister(&block.waiter);
}
