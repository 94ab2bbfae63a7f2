//! HTTP/2 with the h2 crate: each stream's request goes to the router, and its response body
//! is piped under the stream's own kill switch.
//!
//! Why not hyper's HTTP/2 server: it polls a response body only while its stream has send
//! capacity, so a watch whose client stopped reading could not be ended by its body, and a
//! stream cannot be reset from outside. Here each stream is a [`Connection`] of its own
//! ([`Connection::stream`]): the watch handler's `end_if_stalled_after` sees the stream
//! blocked while it waits for capacity, and its switch resets the stream alone
//! (`RST_STREAM CANCEL`). Flow control is h2's, per stream: a stalled stream holds at most
//! its window (and `MAX_SEND_BUFFER` of frames) and never the other streams.
//!
//! Open connections and streams are counted in two gauges (`/metrics`), each by a guard
//! ([`Open`]) that lives as long as what it counts, so that every way out decrements.
//!
//! Shutdown sends GOAWAY and serves the open streams until they end (watches end at
//! shutdown on their own); the grace period's end drops the connection with the others.
//!
//! What one connection can make the server hold is bounded: a request's header list
//! ([`MAX_HEADER_LIST`]), and the header lists of its open streams together with the request
//! bodies being read ([`MAX_HELD_REQUEST_BYTES`], each stream's part a [`Share`]). A
//! connection with no stream open for the idle timeout gets GOAWAY (a watch is a stream open).

use std::future::poll_fn;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http_body::{Body as _, Frame};
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite};
use tower::ServiceExt;

use super::coalesce::Coalesce;
use super::linger::Linger;
use super::thrown;
use crate::transport::connection::{Connection, StallTimer, StreamProgress};
use crate::transport::switch::Signal;

/// The most of a stream's frames h2 holds before the stream waits (h2's default is 400 KiB):
/// what a client that stops reading can make the server hold per stream, beyond the socket.
const MAX_SEND_BUFFER: usize = 64 * 1024;
/// The window each stream opens for a request body (the RFC's default); bodies are at most
/// 3 MiB and read whole.
const STREAM_WINDOW: u32 = 64 * 1024;
/// The window of the connection, shared by the request bodies of its streams.
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// The largest header list a request may send, decoded (name, value and 32 bytes a field, as
/// RFC 9113 counts it). Go's default is 1 MiB; HPACK lets a few KiB of indexed fields decode
/// to that, so it is smaller here: kubectl, client-go, kube-rs and the Python client send a
/// few KiB (a bearer token, impersonation headers). A larger list is refused by h2 (431).
const MAX_HEADER_LIST: u32 = 128 * 1024;
/// The most request bytes the open streams of one connection may hold at once: the header
/// lists of its open streams and the request bodies being read (before they are whole). With
/// a body of up to 3 MiB and 1000 streams, a connection could otherwise hold 3 GB. A stream
/// whose headers do not fit is refused (`RST_STREAM REFUSED_STREAM`, which clients retry);
/// a body that does not fit fails with [`RequestBytesSpent`], answered 429.
pub(crate) const MAX_HELD_REQUEST_BYTES: usize = 32 << 20;

/// The limits of one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// For the preface and settings exchange, and for the client to close an idle connection
    /// after GOAWAY.
    pub(crate) handshake: Duration,
    /// How long the connection may have no stream open.
    pub(crate) idle: Duration,
    /// The most request bytes its streams may hold ([`MAX_HELD_REQUEST_BYTES`]; tests lower
    /// it).
    pub(crate) held_request_bytes: usize,
}

/// The server's HTTP/2 settings: `max_streams` concurrent streams per connection
/// (`--http2-max-streams-per-connection`).
pub(crate) fn builder(max_streams: u32) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(max_streams)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_header_list_size(MAX_HEADER_LIST);
    b
}

/// The gauges of open HTTP/2 connections and streams (`Metrics::http2_connections`,
/// `Metrics::http2_streams`).
#[derive(Clone, Default)]
pub(crate) struct Gauges {
    pub(crate) connections: Gauge,
    pub(crate) streams: Gauge,
}

/// Why a request body could not be read: the streams of its connection hold as many request
/// bytes as they may ([`MAX_HELD_REQUEST_BYTES`]).
#[derive(Debug, thiserror::Error)]
#[error("the requests open on this HTTP/2 connection hold all the bytes they may: try again")]
pub(crate) struct RequestBytesSpent;

/// The request bytes a connection's streams hold, and the most they may.
struct Held {
    bytes: AtomicUsize,
    limit: usize,
}

/// One stream's part of its connection's [`Held`] bytes, given back when dropped.
struct Share {
    held: Arc<Held>,
    bytes: usize,
}

impl Share {
    fn new(held: &Arc<Held>) -> Share {
        Share {
            held: Arc::clone(held),
            bytes: 0,
        }
    }

    /// Takes `n` more bytes; false (and nothing taken) if the connection's bytes would pass
    /// the limit. Relaxed: a count, ordered with nothing else.
    fn grow(&mut self, n: usize) -> bool {
        let limit = self.held.limit;
        let taken = self
            .held
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(n).filter(|&h| h <= limit)
            });
        if taken.is_ok() {
            self.bytes += n;
        }
        taken.is_ok()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.held.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The bytes of a request's header list as h2 bounds it: each field's name and value and 32,
/// the pseudo-headers included.
fn header_bytes<B>(request: &axum::http::Request<B>) -> usize {
    let uri = request.uri();
    let pseudo = uri.path_and_query().map_or(0, |p| p.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.scheme_str().map_or(0, str::len)
        + request.method().as_str().len()
        + 4 * 32;
    pseudo
        + request
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 32)
            .sum::<usize>()
}

/// Whether a connection is idle: no stream open since when.
struct Idle {
    /// Streams open. Decremented by the streams' tasks, read by the connection's.
    open: AtomicUsize,
    /// When the last stream ended, in milliseconds from `base`.
    since_ms: AtomicU64,
    base: tokio::time::Instant,
}

impl Idle {
    fn new() -> Idle {
        Idle {
            open: AtomicUsize::new(0),
            since_ms: AtomicU64::new(0),
            base: tokio::time::Instant::now(),
        }
    }

    /// A stream opens (on the connection's task).
    fn opened(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream ended (on its own task).
    fn closed(&self) {
        let now = self.base.elapsed().as_millis() as u64;
        self.since_ms.store(now, Ordering::Relaxed);
        // Release pairs with the Acquire in `idle_for`: who sees no stream open sees when the
        // last one ended.
        self.open.fetch_sub(1, Ordering::Release);
    }

    /// How long no stream has been open; none while one is.
    fn idle_for(&self) -> Option<Duration> {
        // Acquire pairs with the Release in `closed`.
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.since_ms.load(Ordering::Relaxed));
        Some(self.base.elapsed().saturating_sub(since))
    }
}

/// A stream's place among its connection's open streams, from its making to its drop (its
/// task's end, or the task dropped unfinished).
struct StreamPlace(Arc<Idle>);

impl StreamPlace {
    fn new(idle: &Arc<Idle>) -> StreamPlace {
        idle.opened();
        StreamPlace(Arc::clone(idle))
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.0.closed();
    }
}

/// One open connection or stream, counted in its gauge from its making to its drop.
struct Open(Gauge);

impl Open {
    fn new(gauge: &Gauge) -> Open {
        gauge.inc();
        Open(gauge.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What h2 accepts: a stream, a connection error, or the connection's end.
type Accepted = Option<Result<(axum::http::Request<RecvStream>, SendResponse<Bytes>), h2::Error>>;

/// An idle connection sent GOAWAY a `handshake` limit ago, and its client has not closed it.
struct Abandoned;

/// Serves one HTTP/2 connection (its preface not read yet) until it closes; at `stop`, sends
/// GOAWAY and serves the open streams to their end. The preface and settings exchange must
/// come within `limits.handshake`. A connection with no stream open for `limits.idle` gets
/// GOAWAY too, and is dropped if the client has not closed it a `limits.handshake` after.
pub(crate) async fn serve<IO>(
    io: IO,
    builder: &h2::server::Builder,
    gauges: &Gauges,
    conn: Connection,
    app: Router,
    mut stop: Signal,
    limits: &Limits,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (limit, idle) = (limits.handshake, limits.idle);
    let handshake = tokio::time::timeout(
        limit,
        builder.handshake::<_, Bytes>(Coalesce::new(Linger::new(io))),
    );
    let mut h2 = tokio::select! {
        done = handshake => match done {
            Ok(Ok(h2)) => h2,
            Ok(Err(e)) => {
                tracing::debug!(peer = %conn.peer(), error = %e, "HTTP/2 handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(peer = %conn.peer(), "HTTP/2 handshake timed out");
                return;
            }
        },
        () = thrown(&mut stop) => return,
    };
    let _open = Open::new(&gauges.connections);
    let held = Arc::new(Held {
        bytes: AtomicUsize::new(0),
        limit: limits.held_request_bytes,
    });
    let streams = Arc::new(Idle::new());
    let mut idle_timer = pin!(tokio::time::sleep(idle));
    let mut idle_closing = false;
    let mut stopping = false;
    loop {
        let next: Result<Accepted, Abandoned> = poll_fn(|cx| {
            if !stopping && stop.poll_thrown(cx) {
                stopping = true;
                h2.graceful_shutdown();
            }
            while idle_timer.as_mut().poll(cx).is_ready() {
                let wait = match streams.idle_for() {
                    Some(_) if idle_closing => return Poll::Ready(Err(Abandoned)),
                    Some(for_) if for_ >= idle => {
                        tracing::debug!(peer = %conn.peer(), "an idle HTTP/2 connection: GOAWAY");
                        idle_closing = true;
                        if !stopping {
                            stopping = true;
                            h2.graceful_shutdown();
                        }
                        limit
                    }
                    Some(for_) => idle - for_,
                    // A stream is open (a watch, say; or one the client opened before it
                    // read GOAWAY): looked at again later.
                    None if idle_closing => limit,
                    None => idle,
                };
                idle_timer.as_mut().reset(tokio::time::Instant::now() + wait);
            }
            h2.poll_accept(cx).map(Ok)
        })
        .await;
        match next {
            Ok(Some(Ok((request, mut respond)))) => {
                let mut headers = Share::new(&held);
                if !headers.grow(header_bytes(&request)) {
                    tracing::debug!(peer = %conn.peer(), "HTTP/2 requests hold too much: stream refused");
                    respond.send_reset(Reason::REFUSED_STREAM);
                    continue;
                }
                let (stream, progress) = conn.stream();
                let open = Open::new(&gauges.streams);
                // Spawned as it is: an `async move` around it would hold its future twice (the
                // captured one and the one awaited).
                tokio::spawn(serve_stream(
                    request,
                    respond,
                    stream,
                    progress,
                    app.clone(),
                    Kept {
                        open,
                        headers,
                        held: Arc::clone(&held),
                        place: StreamPlace::new(&streams),
                    },
                ));
            }
            Ok(Some(Err(e))) => {
                tracing::debug!(peer = %conn.peer(), error = %e, "HTTP/2 connection failed");
                return;
            }
            Ok(None) => return,
            Err(Abandoned) => {
                tracing::debug!(peer = %conn.peer(), "an idle HTTP/2 connection did not close after GOAWAY: dropped");
                return;
            }
        }
    }
}

/// Headers HTTP/2 forbids (RFC 9113, section 8.2.2).
const CONNECTION_HEADERS: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// One stream: the router's answer, its body piped to the stream. Ends when the body does,
/// when the client resets the stream, or when the stream's switch is thrown (reset here).
/// `open` counts it until then.
///
/// Not an `async fn`: what only the handler needs (the request, the router, the connection)
/// goes into the handler's boxed future here, so that the stream's task, which lives as long
/// as an idle watch, holds only what piping needs.
fn serve_stream(
    request: axum::http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
    stream: Connection,
    progress: StreamProgress,
    app: Router,
    kept: Kept,
) -> impl Future<Output = ()> + Send + 'static {
    let killed = stream.killed();
    let stall = stream.stall_timer();
    let head = request.method() == axum::http::Method::HEAD;
    // The router never reads a GET's or HEAD's body. Whatever such a stream still sends (DATA,
    // or trailers of up to a header list each, which h2 keeps for a body it was told is not
    // read) is read here and dropped, so that a long watch cannot be made to hold it.
    let unread_body = head || request.method() == axum::http::Method::GET;
    let mut discard = None;
    let mut request = request.map(|body| {
        if unread_body {
            discard = (!body.is_end_stream()).then_some(body);
            axum::body::Body::empty()
        } else {
            axum::body::Body::new(RecvBody {
                recv: body,
                data_done: false,
                share: Share::new(&kept.held),
            })
        }
    });
    request.extensions_mut().insert(ConnectInfo(stream));
    // Boxed: the handler's future is freed once it has answered, rather than sizing the task
    // that pipes an idle watch for as long as it lives.
    let handler = Box::pin(app.oneshot(request));
    let Kept {
        open,
        headers,
        held,
        place,
    } = kept;
    drop(held);
    async move {
        // Dropped in this order when the stream ends, its place last.
        let _kept = (open, headers, place);
        let discarding = async {
            if let Some(body) = discard {
                discard_body(body).await;
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            () = pipe_response(handler, respond, head, killed, stall, progress) => {}
            () = discarding => {}
        }
    }
}

/// Reads a request body the router does not want to its end, dropping each frame as it
/// comes. The window of the first [`STREAM_WINDOW`] bytes is given back (to the connection's
/// window too), none after: a client cannot keep a watch's stream as an upload for its life.
/// (A stream that sends more keeps up to a stream window of its connection's window until it
/// ends: the client's own connection's, which only its own request bodies use. The body is
/// still read, not dropped: h2 would keep the trailers of a body no one reads.)
async fn discard_body(mut body: RecvStream) {
    let mut released = 0usize;
    while let Some(data) = body.data().await {
        match data {
            Ok(data) => {
                let n = data.len().min((STREAM_WINDOW as usize).saturating_sub(released));
                if n > 0 {
                    let _ = body.flow_control().release_capacity(n);
                    released += n;
                }
            }
            Err(_) => return,
        }
    }
    let _ = body.trailers().await;
}

/// What a stream's task keeps while it lives: its place in the gauge, its header list's
/// share of its connection's request bytes, and its place among the connection's open
/// streams (which keeps the connection from counting as idle).
struct Kept {
    open: Open,
    headers: Share,
    held: Arc<Held>,
    place: StreamPlace,
}

/// The handler's answer, its head sent and its body piped (see [`serve_stream`]).
async fn pipe_response(
    handler: Pin<Box<tower::util::Oneshot<Router, axum::http::Request<axum::body::Body>>>>,
    mut respond: SendResponse<Bytes>,
    head: bool,
    mut killed: Signal,
    mut stall: StallTimer,
    progress: StreamProgress,
) {
    let response = tokio::select! {
        response = handler => match response {
            Ok(response) => response,
            Err(never) => match never {},
        },
        _ = poll_fn(|cx| respond.poll_reset(cx)) => return,
        () = thrown(&mut killed) => {
            respond.send_reset(Reason::CANCEL);
            return;
        }
    };
    let (mut parts, body) = response.into_parts();
    for name in CONNECTION_HEADERS {
        parts.headers.remove(name);
    }
    let end = head || body.is_end_stream();
    let Ok(mut send) = respond.send_response(axum::http::Response::from_parts(parts, ()), end) else {
        return;
    };
    if end {
        return;
    }
    if let Err(why) = pipe(&mut send, body, &mut killed, &progress, &mut stall).await {
        if why == Ended::Killed {
            send.send_reset(Reason::CANCEL);
        }
        tracing::debug!(?why, "an HTTP/2 stream ended early");
    }
}

/// Why a body was not piped to its end.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The stream's switch: reset it.
    Killed,
    /// The client reset the stream, or the connection failed.
    Gone,
    /// The body failed: reset it.
    Body,
}

/// Sends `body` on `send` frame by frame, each data frame as its stream's flow control
/// allows, until it ends (then END_STREAM) or the stream is killed or gone. The stream's
/// stall checks (`stall`, asked for by its handler) run here, and throw `killed`.
async fn pipe(
    send: &mut SendStream<Bytes>,
    body: axum::body::Body,
    killed: &mut Signal,
    progress: &StreamProgress,
    stall: &mut StallTimer,
) -> Result<(), Ended> {
    let mut body = pin!(body);
    loop {
        let frame = tokio::select! {
            biased;
            () = thrown(killed) => return Err(Ended::Killed),
            _ = poll_fn(|cx| send.poll_reset(cx)) => return Err(Ended::Gone),
            frame = poll_fn(|cx| body.as_mut().poll_frame(cx)) => frame,
            never = checks(stall) => match never {},
        };
        let frame = match frame {
            None => return send.send_data(Bytes::new(), true).map_err(|_| Ended::Gone),
            Some(Err(_)) => {
                send.send_reset(Reason::INTERNAL_ERROR);
                return Err(Ended::Body);
            }
            Some(Ok(frame)) => frame,
        };
        let mut data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return send.send_trailers(trailers).map_err(|_| Ended::Gone);
                }
                continue;
            }
        };
        while !data.is_empty() {
            send.reserve_capacity(data.len());
            let mut capacity = send.capacity();
            if capacity == 0 {
                progress.blocked();
                capacity = tokio::select! {
                    biased;
                    () = thrown(killed) => return Err(Ended::Killed),
                    c = poll_fn(|cx| send.poll_capacity(cx)) => match c {
                        Some(Ok(c)) => c,
                        _ => return Err(Ended::Gone),
                    },
                    never = checks(stall) => match never {},
                };
            }
            let chunk = data.split_to(capacity.min(data.len()));
            send.send_data(chunk, false).map_err(|_| Ended::Gone)?;
            progress.wrote();
        }
    }
}

/// Runs `stall`'s checks; never completes (a check that ends the stream throws its switch).
async fn checks(stall: &mut StallTimer) -> std::convert::Infallible {
    poll_fn(|cx| {
        stall.poll(cx);
        Poll::Pending
    })
    .await
}

/// A request body from an HTTP/2 stream, its window released as it is read, its bytes
/// counted against its connection's [`MAX_HELD_REQUEST_BYTES`] until it is dropped.
struct RecvBody {
    recv: RecvStream,
    data_done: bool,
    share: Share,
}

impl http_body::Body for RecvBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if !this.data_done {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    if !this.share.grow(data.len()) {
                        return Poll::Ready(Some(Err(Box::new(RequestBytesSpent))));
                    }
                    // The body is read whole (bounded by the router's limit, its time by the
                    // request timeout, and what the connection holds by the share): the window
                    // goes back as soon as the bytes are taken.
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                None => this.data_done = true,
            }
        }
        match ready!(this.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request and its response handle, on an in-memory connection.
    async fn accepted() -> (axum::http::Request<RecvStream>, SendResponse<Bytes>) {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let (mut send, conn) = h2::client::handshake(client).await.unwrap();
            tokio::spawn(conn);
            let request = axum::http::Request::get("http://x/").body(()).unwrap();
            let (response, _) = send.send_request(request, true).unwrap();
            let _ = response.await;
        });
        let mut h2 = h2::server::handshake(server).await.unwrap();
        let accepted = h2.accept().await.unwrap().unwrap();
        tokio::spawn(async move { while h2.accept().await.is_some() {} });
        accepted
    }

    /// The task of a stream lives as long as its watch: what it holds is paid for every idle
    /// watch. Not the request, the router or the connection (they go to the handler's boxed
    /// future), and the future once, not twice: 1,648 bytes held twice before, 1,096 now (a
    /// debug build).
    #[tokio::test]
    async fn a_streams_task_holds_only_what_piping_needs() {
        let (request, respond) = accepted().await;
        let (stream, progress) = Connection::detached().stream();
        let gauge = Gauge::default();
        let held = Arc::new(Held {
            bytes: AtomicUsize::new(0),
            limit: usize::MAX,
        });
        let streams = Arc::new(Idle::new());
        let kept = Kept {
            open: Open::new(&gauge),
            headers: Share::new(&held),
            held,
            place: StreamPlace::new(&streams),
        };
        let served = serve_stream(request, respond, stream, progress, Router::new(), kept);
        let size = std::mem::size_of_val(&served);
        assert!(size <= 1280, "a stream's future is {size} bytes");
        assert_eq!(gauge.get(), 1, "the stream is counted while its future lives");
        assert!(streams.idle_for().is_none(), "and its connection is not idle");
        drop(served);
        assert_eq!(gauge.get(), 0);
        assert!(
            streams.idle_for().is_some(),
            "a stream's future dropped unfinished gives its place back"
        );
    }
}
