//! How a connection is served: TLS or plaintext, then HTTP/1.1 or HTTP/2.
//!
//! | file | its one job |
//! |---|---|
//! | `tls.rs` | TLS: the serving certificate and client CA read again when their files change, ALPN |
//! | `client_cert.rs` | client certificates: the key proven in the handshake, the chain verified after it, CN and O read into a user |
//! | `reload.rs` | a value made from files, made again when they change |
//! | `sniff.rs` | plaintext HTTP/2 by prior knowledge: the connection preface |
//! | `h2.rs` | HTTP/2 on the h2 crate: a stream per request, each response piped under the stream's own kill switch |
//! | `coalesce.rs` | the writes of one poll of an HTTP/2 connection in one socket write |
//! | `linger.rs` | an HTTP/2 connection read for a second after h2 closes it, so that the client's last frames meet no reset |
//! | `cert_dir.rs` | `--cert-dir`: a CA, a serving and an admin certificate and a kubeconfig, made once and reused |

pub(crate) mod cert_dir;
mod client_cert;
mod coalesce;
pub(crate) mod connection;
mod h2;
mod linger;
mod reload;
mod sniff;
pub(crate) mod switch;
mod tls;

pub(crate) use h2::Gauges as H2Gauges;
pub(crate) use h2::{MAX_HELD_REQUEST_BYTES, RequestBytesSpent};

pub(crate) use tls::{Tls, TlsFiles};

use std::pin::{Pin, pin};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite};
use tower::ServiceExt;

use crate::transport::connection::{Connection, KillableIo};
use crate::transport::switch::Signal;

/// The longest a TLS handshake (and on plaintext, the first bytes that tell HTTP/2 from
/// HTTP/1) may take; a client that has not finished by then is dropped with everything it
/// held.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may stay open with no request (an HTTP/2 connection with no stream
/// open, an HTTP/1 connection between requests): the `IdleTimeout` of the apiserver's Go
/// server.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// hyper's default for the headers of an HTTP/1 request to arrive (and, as hyper times from
/// when it starts to wait for them, for a kept-alive connection to send its next request).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What serves accepted connections.
pub(crate) struct Transport {
    tls: Option<Tls>,
    http1: hyper::server::conn::http1::Builder,
    h2: ::h2::server::Builder,
    /// The gauges of open HTTP/2 connections and streams.
    h2_gauges: H2Gauges,
    handshake_timeout: Duration,
    h2_limits: h2::Limits,
    /// How long an HTTP/1.1 connection over TLS may wait for its first request's bytes before
    /// hyper serves it: hyper's header read timeout, which would otherwise have run from the
    /// connection's start.
    first_request_timeout: Duration,
}

impl Transport {
    /// TLS if `tls`, HTTP/2 with at most `max_streams` streams per connection, each
    /// connection's streams holding at most `held_request_bytes` of requests; a connection with
    /// no request for `idle_timeout` is closed. Open connections and streams of HTTP/2 are
    /// counted in `h2_gauges`.
    pub(crate) fn new(
        tls: Option<Tls>,
        max_streams: u32,
        handshake_timeout: Duration,
        idle_timeout: Duration,
        held_request_bytes: usize,
        h2_gauges: H2Gauges,
    ) -> Self {
        let mut http1 = hyper::server::conn::http1::Builder::new();
        // The header read timeout, against clients that trickle a request in; hyper times it
        // from when it waits for a request, so it also closes a kept-alive connection that
        // sends none (sooner than the idle timeout, by default).
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT.min(idle_timeout));
        Transport {
            tls,
            http1,
            h2: h2::builder(max_streams),
            h2_gauges,
            handshake_timeout,
            first_request_timeout: HEADER_READ_TIMEOUT.min(idle_timeout),
            h2_limits: h2::Limits {
                handshake: handshake_timeout,
                idle: idle_timeout,
                held_request_bytes,
            },
        }
    }

    /// Serves one accepted connection to its end: the handshake (bounded, in this task, so it
    /// never holds up the accept loop), then HTTP/1.1 or HTTP/2. At `stop`, a connection still
    /// in its handshake is dropped, and the others end after their current responses.
    pub(crate) async fn serve(&self, io: KillableIo, conn: Connection, app: Router, mut stop: Signal) {
        let peer = conn.peer();
        let limit = self.handshake_timeout;
        match &self.tls {
            Some(tls) => {
                // Boxed, as each protocol's serving below: the task of a connection is then as
                // large as what it runs now, not as the largest of the three.
                let accepted = tokio::select! {
                    accepted = tokio::time::timeout(limit, Box::pin(tls.accept(io))) => accepted,
                    () = thrown(&mut stop) => return,
                };
                let (stream, is_h2, cert) = match accepted {
                    Ok(Ok(accepted)) => accepted,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, ?limit, "TLS handshake timed out");
                        return;
                    }
                };
                let conn = conn.with_client_cert(cert);
                if is_h2 {
                    let limits = &self.h2_limits;
                    Box::pin(h2::serve(
                        stream,
                        &self.h2,
                        &self.h2_gauges,
                        conn,
                        app,
                        stop,
                        limits,
                    ))
                    .await;
                } else {
                    let mut stream = stream;
                    // An idle connection holds no HTTP/1 state (hyper's buffers, 8 KiB to read
                    // and 8 KiB to write, and its connection) until a request comes.
                    let first = tokio::select! {
                        first = tokio::time::timeout(self.first_request_timeout, readable(&mut stream)) => first,
                        () = thrown(&mut stop) => return,
                    };
                    if !matches!(first, Ok(Ok(true))) {
                        tracing::debug!(%peer, "no request on the connection");
                        return;
                    }
                    Box::pin(self.serve_http1(stream, conn, app, stop)).await;
                }
            }
            None => {
                let sniffed = tokio::select! {
                    sniffed = tokio::time::timeout(limit, sniff::sniff(io)) => sniffed,
                    () = thrown(&mut stop) => return,
                };
                match sniffed {
                    Ok(Ok((io, true))) => {
                        let limits = &self.h2_limits;
                        Box::pin(h2::serve(io, &self.h2, &self.h2_gauges, conn, app, stop, limits)).await;
                    }
                    Ok(Ok((io, false))) => Box::pin(self.serve_http1(io, conn, app, stop)).await,
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "connection failed"),
                    Err(_) => tracing::debug!(%peer, ?limit, "no request in time"),
                }
            }
        }
    }

    /// HTTP/1.1 with hyper; at `stop`, the connection ends after its current response. The
    /// watches' stall checks run here, in the connection's task.
    async fn serve_http1<IO>(&self, io: IO, conn: Connection, app: Router, mut stop: Signal)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut stall = conn.stall_timer();
        let service = app.map_request(move |req: hyper::Request<Incoming>| {
            // hyper reads a request once the answer before it is sent: its stall rule is over.
            conn.new_request();
            let mut req = req.map(axum::body::Body::new);
            req.extensions_mut().insert(ConnectInfo(conn.clone()));
            req
        });
        let mut connection = pin!(
            self.http1
                .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
        );
        let mut stopping = false;
        let _ = std::future::poll_fn(move |cx| {
            if !stopping && stop.poll_thrown(cx) {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
            let polled = connection.as_mut().poll(cx);
            // After the connection: a handler it ran may have asked for a check.
            if polled.is_pending() {
                stall.poll(cx);
            }
            polled
        })
        .await;
    }
}

/// Waits until `io` has bytes to read: `Ok(false)` at its end.
async fn readable<IO: AsyncBufRead + Unpin>(io: &mut IO) -> std::io::Result<bool> {
    std::future::poll_fn(|cx| Pin::new(&mut *io).poll_fill_buf(cx).map_ok(|b| !b.is_empty())).await
}

/// Completes once `signal`'s switch is thrown.
pub(super) async fn thrown(signal: &mut Signal) {
    std::future::poll_fn(|cx| {
        if signal.poll_thrown(cx) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}
