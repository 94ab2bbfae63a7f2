//! Connections the server can end by itself. Every accepted socket is wrapped so that a kill
//! switch fails its reads and writes, and wakes it to notice. A watch body that ends (at its
//! deadline, or at shutdown) still has to flush its end through the socket: a client that
//! stopped reading would hold the connection, and whatever hyper buffered for it, forever, and
//! a graceful shutdown would wait on it. Each connection has its own switch, thrown when its
//! writes stay blocked past a watch's deadline (see [`Connection::end_if_stalled_after`]), and
//! all are children of one switch, thrown when a shutdown's grace period runs out.
//!
//! On HTTP/2 each stream is a [`Connection`] of its own ([`Connection::stream`]): a child
//! switch that resets the stream alone, and write progress that counts the stream's flow
//! control ("blocked" is waiting for send capacity), so that a watch's stalled stream is
//! ended as a stalled HTTP/1 connection is, and the other streams go on.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::auth::ClientCert;
use crate::switch::{Signal, Switch};

/// Accepts TCP connections as [`KillableIo`]s, each described by a [`Connection`].
pub(crate) struct KillableListener {
    inner: TcpListener,
    all: Switch,
}

impl KillableListener {
    /// Wraps `inner`; throwing `all` ends every connection it accepted.
    pub(crate) fn new(inner: TcpListener, all: Switch) -> Self {
        KillableListener { inner, all }
    }
}

/// What a handler knows of its connection: the peer, the switch that ends it, and whether its
/// writes are getting through.
#[derive(Clone, Debug)]
pub(crate) struct Connection {
    peer: SocketAddr,
    kill: Switch,
    state: Arc<ConnState>,
    /// An HTTP/2 stream's connection: its switch and write progress. A stalled stream is
    /// reset; if the connection under it is stalled too, the connection is dropped.
    parent: Option<(Switch, Arc<ConnState>)>,
    /// The client's certificate of the TLS handshake, if it presented one to a client CA.
    client_cert: Option<Arc<dyn PeerCertificate>>,
}

/// A client certificate presented in a connection's TLS handshake: what it proves at each
/// request (it may have expired since the handshake, or the client CA changed).
pub(crate) trait PeerCertificate: Send + Sync + std::fmt::Debug {
    /// What the certificate proves now.
    fn now(&self) -> ClientCert;
}

/// Write progress of one connection. Relaxed throughout: health flags a timer reads, ordered
/// with nothing else.
#[derive(Debug)]
struct ConnState {
    /// The last write found the socket full and nothing has got through since.
    blocked: AtomicBool,
    /// When a write last got through, in milliseconds of `epoch_ms`.
    progress_ms: AtomicU64,
    /// Cancelled when the socket is dropped: timers watching it stop.
    closed: CancellationToken,
}

/// Milliseconds since the first call: a cheap clock for write progress.
fn epoch_ms() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            blocked: AtomicBool::new(false),
            progress_ms: AtomicU64::new(epoch_ms()),
            closed: CancellationToken::new(),
        }
    }

    /// How long the connection's writes have been blocked, if they are.
    fn stalled_for(&self) -> Option<Duration> {
        self.blocked.load(Ordering::Relaxed).then(|| {
            Duration::from_millis(epoch_ms().saturating_sub(self.progress_ms.load(Ordering::Relaxed)))
        })
    }
}

impl Connection {
    /// A connection of no socket, for unit tests of what handlers read from it.
    #[cfg(test)]
    pub(crate) fn detached() -> Connection {
        Connection {
            peer: SocketAddr::from(([127, 0, 0, 1], 0)),
            kill: Switch::new(),
            state: Arc::new(ConnState::new()),
            parent: None,
            client_cert: None,
        }
    }

    /// The peer's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// What the client certificate of the connection's TLS handshake proves now:
    /// [`ClientCert::None`] on plaintext, without a certificate or without a client CA.
    pub(crate) fn client_cert(&self) -> ClientCert {
        self.client_cert
            .as_ref()
            .map_or(ClientCert::None, |cert| cert.now())
    }

    /// This connection, with the client certificate its TLS handshake presented.
    pub(crate) fn with_client_cert(mut self, cert: Option<Arc<dyn PeerCertificate>>) -> Self {
        self.client_cert = cert;
        self
    }

    /// A stream of this (HTTP/2) connection: the same peer and client certificate, a switch
    /// of its own under the connection's, and its own write progress, which the stream's
    /// sender reports through the returned [`StreamProgress`].
    pub(crate) fn stream(&self) -> (Connection, StreamProgress) {
        let state = Arc::new(ConnState::new());
        let stream = Connection {
            peer: self.peer,
            kill: self.kill.child(),
            state: Arc::clone(&state),
            parent: Some((self.kill.clone(), Arc::clone(&self.state))),
            client_cert: self.client_cert.clone(),
        };
        (stream, StreamProgress { state })
    }

    /// The switch that ends this connection (or stream), for its sender to check.
    pub(crate) fn killed(&self) -> Signal {
        self.kill.signal()
    }

    /// A watch's deadline is `deadline` from now. Its body ends the response cleanly then,
    /// when hyper polls it; but a client that stopped reading leaves that end (and what hyper
    /// buffered before it) unflushed, and the connection open. So, `grace` after the deadline
    /// and every `grace` after that, while the connection lives and its writes are blocked:
    /// once they have been blocked for `grace`, drop it. A connection that is idle or writing
    /// (the client reads, or has gone on to other requests) is left alone.
    pub(crate) fn end_if_stalled_after(&self, deadline: Duration, grace: Duration) {
        let (kill, state, peer) = (self.kill.clone(), Arc::clone(&self.state), self.peer);
        let parent = self.parent.clone();
        tokio::spawn(async move {
            // Saturating: a deadline and a grace period of any size are a time to wait, never
            // an overflow that would end this task and leave the connection to its client.
            let mut wait = deadline.saturating_add(grace);
            loop {
                tokio::select! {
                    _ = state.closed.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                match state.stalled_for() {
                    None => return,
                    Some(stalled) if stalled >= grace => {
                        tracing::info!(%peer, ?stalled, "a watch's client stopped reading past its deadline: dropping the connection");
                        kill.throw();
                        // A stream's reset cannot be flushed to a connection that is itself
                        // stalled: drop the connection too.
                        if let Some((conn, conn_state)) = &parent
                            && conn_state.stalled_for().is_some_and(|s| s >= grace)
                        {
                            conn.throw();
                        }
                        return;
                    }
                    Some(_) => wait = grace,
                }
            }
        });
    }
}

/// What an HTTP/2 stream's sender reports of its writes: blocked while it waits for send
/// capacity, progress when a frame is handed to the connection. Dropped when the stream ends,
/// which stops the timers watching it.
#[derive(Debug)]
pub(crate) struct StreamProgress {
    state: Arc<ConnState>,
}

impl StreamProgress {
    /// The stream waits for send capacity (the client's window is closed, or the frames it was
    /// given are still buffered).
    pub(crate) fn blocked(&self) {
        self.state.blocked.store(true, Ordering::Relaxed);
    }

    /// A frame went to the connection.
    pub(crate) fn wrote(&self) {
        self.state.progress_ms.store(epoch_ms(), Ordering::Relaxed);
        self.state.blocked.store(false, Ordering::Relaxed);
    }
}

impl Drop for StreamProgress {
    fn drop(&mut self) {
        self.state.closed.cancel();
    }
}

/// A TCP stream whose reads and writes fail once its switch is thrown, and which records
/// whether its writes get through.
pub(crate) struct KillableIo {
    inner: TcpStream,
    /// Checked on every read and write: two flag loads, the switch's token polled only when
    /// the connection task's waker changes (see `switch.rs`).
    killed: Signal,
    state: Arc<ConnState>,
}

impl KillableIo {
    /// `Err` once the switch is thrown; otherwise registers the task to be woken when it is.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.killed.poll_thrown(cx) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the server ended this connection",
            ));
        }
        Ok(())
    }

    /// Records what a write did: progress, or a full socket.
    fn wrote(&self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match &polled {
            Poll::Ready(Ok(_)) => {
                self.state.progress_ms.store(epoch_ms(), Ordering::Relaxed);
                self.state.blocked.store(false, Ordering::Relaxed);
            }
            Poll::Pending => self.state.blocked.store(true, Ordering::Relaxed),
            Poll::Ready(Err(_)) => {}
        }
        polled
    }
}

impl Drop for KillableIo {
    fn drop(&mut self) {
        self.state.closed.cancel();
    }
}

impl AsyncRead for KillableIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Listener for KillableListener {
    type Io = KillableIo;
    type Addr = Connection;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, peer)) => {
                    // Watch frames are small writes flushed as events arrive: without
                    // TCP_NODELAY, Nagle's algorithm holds a frame behind the client's delayed
                    // ACK of the previous one.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::warn!(error = %e, "cannot set TCP_NODELAY");
                    }
                    let kill = self.all.child();
                    let state = Arc::new(ConnState::new());
                    let io = KillableIo {
                        inner: stream,
                        killed: kill.signal(),
                        state: Arc::clone(&state),
                    };
                    let conn = Connection {
                        peer,
                        kill,
                        state,
                        parent: None,
                        client_cert: None,
                    };
                    return (io, conn);
                }
                // Out of file descriptors and the like: wait, as axum's own listener does,
                // rather than spin.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(Connection {
            peer: self.inner.local_addr()?,
            kill: self.all.child(),
            state: Arc::new(ConnState::new()),
            parent: None,
            client_cert: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A certificate whose proof the test sets.
    #[derive(Debug)]
    struct Proves(Mutex<ClientCert>);

    impl PeerCertificate for Proves {
        fn now(&self) -> ClientCert {
            self.0.lock().unwrap().clone()
        }
    }

    #[test]
    fn each_request_asks_the_certificate_what_it_proves_now_on_every_stream_of_the_connection() {
        assert!(matches!(Connection::detached().client_cert(), ClientCert::None));
        let user = Arc::new(crate::auth::UserInfo::authenticated("jane", "", vec![]));
        let cert = Arc::new(Proves(Mutex::new(ClientCert::Valid(user))));
        let conn = Connection::detached().with_client_cert(Some(cert.clone()));
        let (stream, _progress) = conn.stream();
        assert!(matches!(stream.client_cert(), ClientCert::Valid(_)));
        *cert.0.lock().unwrap() = ClientCert::Invalid("expired".into());
        assert!(matches!(conn.client_cert(), ClientCert::Invalid(_)));
        assert!(matches!(stream.client_cert(), ClientCert::Invalid(_)));
    }
}
