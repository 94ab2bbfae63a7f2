//! Connections the server can end by itself. Every accepted socket is wrapped so that a kill
//! switch fails its reads and writes, and wakes it to notice. A watch body that ends (at its
//! deadline, or at shutdown) still has to flush its end through the socket: a client that
//! stopped reading would hold the connection, and whatever hyper buffered for it, forever, and
//! a graceful shutdown would wait on it. Each connection has its own switch, thrown when its
//! writes stay blocked past a watch's deadline (see [`Connection::end_if_stalled_after`]), and
//! all are children of one switch, thrown when a shutdown's grace period runs out.

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
    /// The peer's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// A watch's deadline is `deadline` from now. Its body ends the response cleanly then,
    /// when hyper polls it; but a client that stopped reading leaves that end (and what hyper
    /// buffered before it) unflushed, and the connection open. So, `grace` after the deadline
    /// and every `grace` after that, while the connection lives and its writes are blocked:
    /// once they have been blocked for `grace`, drop it. A connection that is idle or writing
    /// (the client reads, or has gone on to other requests) is left alone.
    pub(crate) fn end_if_stalled_after(&self, deadline: Duration, grace: Duration) {
        let (kill, state, peer) = (self.kill.clone(), Arc::clone(&self.state), self.peer);
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
                        return;
                    }
                    Some(_) => wait = grace,
                }
            }
        });
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
                    return (io, Connection { peer, kill, state });
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
        })
    }
}
