//! A link's `Subscribe` call, made on the channel without tonic's generated client, whose
//! `Streaming` copies every chunk of the response into one buffer before it decodes a message
//! (tonic's `decode.rs`: `self.buf.put(data)`): on a peer, a copy of every replicated write.
//! A peer merging a SET spent 1,827 instructions with it and spends 1,672 without (callgrind,
//! docs/benchmarks.md, "Thirty-first pass"). The response's chunks go to a
//! `keymesh_proto::deframe::Deframer` instead, and a batch keeps the chunk its ops arrived in
//! as its ops (`keymesh_proto::codec::decode_origin_message`). The origin's side of the same
//! call is `origin::MeshService`, which frames its messages itself too.
//!
//! What tonic's client did around the stream is done here as it did it: the request's
//! headers (`te: trailers`, gRPC's content type), each message the link sends framed as
//! tonic frames one (uncompressed), and the call's status read from a trailers-only response,
//! the response's HTTP status, or the trailers that end the stream.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as _, Frame};
use keymesh_proto as pb;
use keymesh_proto::codec::{decode_origin_message, frame_message};
use keymesh_proto::deframe::Deframer;
use tokio::sync::mpsc;
use tonic::codegen::{http, Service};
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Calls `Subscribe` on `channel`, sending what `up` yields; `max_message` bounds each message
/// received. Fails with the call's status when the origin refuses it (a wrong password, no
/// such method) or the channel cannot carry it.
pub async fn subscribe(channel: &mut Channel, up: mpsc::Receiver<pb::SubscriberMessage>, max_message: usize) -> Result<OriginStream, Status> {
    let request = http::Request::builder()
        .method(http::Method::POST)
        // The channel adds the scheme and authority it was made for.
        .uri(format!("/{}/Subscribe", pb::mesh_server::SERVICE_NAME))
        .version(http::Version::HTTP_2)
        .header(http::header::TE, "trailers")
        .header(http::header::CONTENT_TYPE, tonic::metadata::GRPC_CONTENT_TYPE)
        .body(tonic::body::Body::new(SubscriberBody { up }))
        .map_err(|e| Status::internal(format!("the Subscribe request: {e}")))?;
    std::future::poll_fn(|cx| channel.poll_ready(cx)).await.map_err(|e| Status::from_error(Box::new(e)))?;
    let response = channel.call(request).await.map_err(|e| Status::from_error(Box::new(e)))?;
    let mut stream = OriginStream { body: tonic::body::Body::empty(), frames: Deframer::new(max_message), ended: false };
    // A trailers-only response: the call ended before any message, with this status.
    if let Some(status) = Status::from_header_map(response.headers()) {
        if status.code() != Code::Ok {
            return Err(status);
        }
        stream.ended = true;
        return Ok(stream);
    }
    if response.status() != http::StatusCode::OK {
        return Err(http_status(response.status()));
    }
    stream.body = response.into_body();
    Ok(stream)
}

/// The messages of a `Subscribe` response.
pub struct OriginStream {
    body: tonic::body::Body,
    frames: Deframer,
    /// The body ended (its trailers read): what `frames` holds is all there is.
    ended: bool,
}

impl OriginStream {
    /// The next message; `None` once the origin ended the stream with an OK status. An error
    /// for the status it ended with otherwise, or the transport's. Safe to drop while it
    /// waits (`tokio::select!`): a chunk received is kept before this returns to the caller.
    pub async fn message(&mut self) -> Result<Option<pb::OriginMessage>, Status> {
        loop {
            if let Some(pieces) = self.frames.next_message()? {
                return decode_origin_message(pieces).map(Some);
            }
            if self.ended {
                return if self.frames.is_empty() { Ok(None) } else { Err(Status::internal("Unexpected EOF decoding stream.")) };
            }
            let frame = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(chunk) => self.frames.push(chunk),
                    Err(frame) => {
                        self.ended = true;
                        match frame.into_trailers().ok().as_ref().and_then(Status::from_header_map) {
                            Some(status) if status.code() == Code::Ok => {}
                            Some(status) => return Err(status),
                            None => return Err(Status::unknown("the stream ended without a grpc-status")),
                        }
                    }
                },
                Some(Err(status)) => {
                    self.ended = true;
                    return Err(status);
                }
                // An end without trailers: no status, as gRPC requires one (tonic says the same).
                None => {
                    self.ended = true;
                    return Err(Status::unknown("the stream ended without a grpc-status"));
                }
            }
        }
    }
}

/// The gRPC code of an HTTP status that came without a `grpc-status` (gRPC's mapping, as
/// tonic applies it).
fn http_status(status: http::StatusCode) -> Status {
    let code = match status {
        http::StatusCode::BAD_REQUEST => Code::Internal,
        http::StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        http::StatusCode::FORBIDDEN => Code::PermissionDenied,
        http::StatusCode::NOT_FOUND => Code::Unimplemented,
        http::StatusCode::TOO_MANY_REQUESTS | http::StatusCode::BAD_GATEWAY | http::StatusCode::SERVICE_UNAVAILABLE | http::StatusCode::GATEWAY_TIMEOUT => {
            Code::Unavailable
        }
        _ => Code::Unknown,
    };
    Status::new(code, format!("the mesh stream was answered with HTTP status {status}"))
}

/// The request's body: each message the link sends, framed as tonic frames one; it ends when
/// the link drops its sender.
struct SubscriberBody {
    up: mpsc::Receiver<pb::SubscriberMessage>,
}

impl http_body::Body for SubscriberBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.up.poll_recv(cx).map(|message| message.map(|m| frame_message(&m).map(Frame::data)))
    }
}
