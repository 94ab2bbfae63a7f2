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

use crate::auth::ClientCert;
use crate::transport::switch::{Signal, Switch};

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

/// Write progress of one connection, and when its stall check is due. Relaxed throughout:
/// health flags a timer reads, ordered with nothing else (and the check times are written and
/// read by the one task that serves the connection or stream).
#[derive(Debug)]
struct ConnState {
    /// The last write found the socket full and nothing has got through since.
    blocked: AtomicBool,
    /// When a write last got through, in milliseconds of `epoch_ms`.
    progress_ms: AtomicU64,
    /// When the next stall check is due, in milliseconds of `epoch_ms`; 0: none.
    check_at_ms: AtomicU64,
    /// When the stall rule of the request being served starts to apply (a watch's deadline
    /// plus the grace); 0: none. A check before it only schedules the next.
    last_due_ms: AtomicU64,
    /// When the LIST or GET being served must have ended, whatever its progress; 0: none.
    request_due_ms: AtomicU64,
    /// How long the writes may stay blocked (the grace period).
    grace_ms: AtomicU64,
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
            check_at_ms: AtomicU64::new(0),
            last_due_ms: AtomicU64::new(0),
            request_due_ms: AtomicU64::new(0),
            grace_ms: AtomicU64::new(0),
        }
    }

    /// Makes the next check due at `due` at the latest.
    fn check_sooner(&self, due: u64) {
        let _ = self
            .check_at_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |at| {
                Some(if at == 0 { due } else { at.min(due) })
            });
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
    /// when it is polled; but a client that stopped reading leaves that end (and what was
    /// buffered before it) unflushed, and the connection open. So, `grace` after the deadline
    /// and every `grace` after that, while the connection lives and its writes are blocked:
    /// once they have been blocked for `grace`, drop it. A connection that is idle or writing
    /// (the client reads, or has gone on to other requests) is left alone.
    ///
    /// No task of its own: the check is the [`StallTimer`] of the task that serves this
    /// connection (or stream), which runs the handlers and so sees this call at its next look.
    pub(crate) fn end_if_stalled_after(&self, deadline: Duration, grace: Duration) {
        // Saturating: a deadline and a grace period of any size are a time to wait, never an
        // overflow.
        let due = epoch_ms()
            .saturating_add(millis(deadline))
            .saturating_add(millis(grace))
            .max(1);
        let state = &self.state;
        state.grace_ms.store(millis(grace), Ordering::Relaxed);
        // Stored, not the latest of all: a connection serves one request at a time (an HTTP/2
        // stream one request; HTTP/1 in turn), and the rule is this request's.
        state.last_due_ms.store(due, Ordering::Relaxed);
        state.check_sooner(due);
    }

    /// A LIST or GET must have ended `timeout` from now, as the apiserver's request timeout
    /// ends a request that is not long-running, however fast its client reads: past it, the
    /// stream is reset (an HTTP/1 connection dropped), which frees the snapshot its body holds.
    /// The returned guard is the request's, for its body to hold. Dropped (the body ended, or
    /// was handed whole to the connection, as hyper takes an HTTP/1 body before it is sent),
    /// the deadline becomes a stall rule like a watch's: from the deadline plus `grace`, a
    /// connection whose writes stay blocked for `grace` is dropped. A later request of the
    /// connection replaces it.
    pub(crate) fn end_request_after(&self, timeout: Duration, grace: Duration) -> RequestDeadline {
        let due = epoch_ms().saturating_add(millis(timeout)).max(1);
        let state = &self.state;
        state.grace_ms.store(millis(grace), Ordering::Relaxed);
        state.request_due_ms.store(due, Ordering::Relaxed);
        // This request's stall rule, if a watch before it on this connection left one, is gone.
        state.last_due_ms.store(0, Ordering::Relaxed);
        state.check_sooner(due);
        RequestDeadline {
            state: Arc::clone(state),
            due,
        }
    }

    /// A new request on this connection (HTTP/1, in turn): what an earlier one asked of the
    /// stall checks is its own, not this one's.
    pub(crate) fn new_request(&self) {
        self.state.last_due_ms.store(0, Ordering::Relaxed);
    }

    /// The timer that carries out [`Connection::end_if_stalled_after`], for the task that
    /// serves this connection (or stream) to poll.
    pub(crate) fn stall_timer(&self) -> StallTimer {
        StallTimer {
            kill: self.kill.clone(),
            state: Arc::clone(&self.state),
            parent: self.parent.clone(),
            peer: self.peer,
            sleep: None,
        }
    }
}

/// A duration in milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The request deadline of a LIST or GET ([`Connection::end_request_after`]), for its body
/// to hold: dropped with the body, it takes the deadline back.
#[derive(Debug)]
pub(crate) struct RequestDeadline {
    state: Arc<ConnState>,
    due: u64,
}

impl Drop for RequestDeadline {
    fn drop(&mut self) {
        let state = &self.state;
        // Only its own: a later request of the connection may have set one since.
        if state
            .request_due_ms
            .compare_exchange(self.due, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            // What was handed to the connection may still be unsent: a client that stopped
            // reading is held to the deadline as a watch is.
            let rule = self
                .due
                .saturating_add(state.grace_ms.load(Ordering::Relaxed))
                .max(1);
            state.last_due_ms.store(rule, Ordering::Relaxed);
            state.check_sooner(rule);
        }
    }
}

/// The stall checks of one connection (or HTTP/2 stream), in the task that serves it: one
/// `Sleep`, made at the first check asked for and reset for the next, rather than a task per
/// watch.
pub(crate) struct StallTimer {
    kill: Switch,
    state: Arc<ConnState>,
    parent: Option<(Switch, Arc<ConnState>)>,
    peer: SocketAddr,
    /// The check time it is set for, and the sleep.
    sleep: Option<(u64, Pin<Box<tokio::time::Sleep>>)>,
}

impl StallTimer {
    /// Makes any check that is due, and registers the task of `cx` for the next. To be called
    /// after each poll of what runs the connection's handlers.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) {
        loop {
            let at = self.state.check_at_ms.load(Ordering::Relaxed);
            if at == 0 {
                self.sleep = None;
                return;
            }
            let wait = Duration::from_millis(at.saturating_sub(epoch_ms()));
            // A check years away is as good as never: no `Instant` overflow.
            let when = tokio::time::Instant::now()
                .checked_add(wait)
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600));
            let sleep = match &mut self.sleep {
                Some((set, sleep)) => {
                    if *set != at {
                        sleep.as_mut().reset(when);
                        *set = at;
                    }
                    sleep
                }
                None => {
                    &mut self
                        .sleep
                        .insert((at, Box::pin(tokio::time::sleep_until(when))))
                        .1
                }
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return;
            }
            let next = self.check();
            // The sleep runs on tokio's clock, the check times on `epoch_ms`: a sleep that ends
            // a little before `at` by the latter finds nothing due and asks for `at` again.
            // Looked at a millisecond later, rather than spun on until then.
            let next = if next != 0 && next <= at {
                at.saturating_add(1)
            } else {
                next
            };
            // A handler of this task is the only other writer, and it is not running now.
            let _ = self
                .state
                .check_at_ms
                .compare_exchange(at, next, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The check: when the next is due (0: none).
    fn check(&self) -> u64 {
        let (state, now) = (&self.state, epoch_ms());
        let grace = state.grace_ms.load(Ordering::Relaxed);
        let request = state.request_due_ms.load(Ordering::Relaxed);
        if request != 0 && now >= request {
            tracing::info!(peer = %self.peer, "a LIST or GET ran past the request timeout: ended");
            self.end(grace);
            return 0;
        }
        // The next check for the request deadline, if one is set.
        let sooner = |at: u64| if request != 0 { at.min(request) } else { at };
        let last = state.last_due_ms.load(Ordering::Relaxed);
        if last == 0 || last > now {
            // No watch's stall rule applies yet (or at all).
            return if last > now { sooner(last) } else { request };
        }
        match state.stalled_for() {
            None => request,
            Some(stalled) if millis(stalled) >= grace => {
                let peer = self.peer;
                tracing::info!(%peer, ?stalled, "a watch's client stopped reading past its deadline: dropping the connection");
                self.end(grace);
                0
            }
            Some(_) => sooner(now.saturating_add(grace).max(1)),
        }
    }

    /// Ends the connection (or stream); a stream's reset cannot be flushed to a connection
    /// that is itself stalled for `grace`, so that connection is dropped too.
    fn end(&self, grace: u64) {
        self.kill.throw();
        if let Some((conn, conn_state)) = &self.parent
            && conn_state.stalled_for().is_some_and(|s| millis(s) >= grace)
        {
            conn.throw();
        }
    }
}

/// What an HTTP/2 stream's sender reports of its writes: blocked while it waits for send
/// capacity, progress when a frame is handed to the connection.
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

    /// Polls `timer` (as the task serving its connection does) until its switch is thrown or
    /// no check is left; whether the switch was thrown.
    async fn run(timer: &mut StallTimer) -> bool {
        let ended = tokio::time::timeout(
            Duration::from_secs(30),
            std::future::poll_fn(|cx| {
                timer.poll(cx);
                if timer.kill.is_thrown() || timer.state.check_at_ms.load(Ordering::Relaxed) == 0 {
                    Poll::Ready(timer.kill.is_thrown())
                } else {
                    Poll::Pending
                }
            }),
        )
        .await;
        ended.expect("the checks end")
    }

    fn stall(conn: &Connection) {
        conn.state.blocked.store(true, Ordering::Relaxed);
    }

    #[tokio::test]
    async fn a_connection_blocked_past_a_watchs_deadline_and_grace_is_dropped() {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        stall(&conn);
        conn.end_if_stalled_after(Duration::from_millis(20), Duration::from_millis(30));
        assert!(run(&mut timer).await, "thrown");
        assert!(conn.kill.is_thrown());
    }

    /// Polls `timer` for `for_`; whether its switch was thrown meanwhile.
    async fn thrown_within(timer: &mut StallTimer, for_: Duration) -> bool {
        let thrown = std::future::poll_fn(|cx| {
            timer.poll(cx);
            if timer.kill.is_thrown() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        tokio::time::timeout(for_, thrown).await.is_ok()
    }

    #[tokio::test]
    async fn a_list_past_the_request_timeout_is_ended_even_while_its_client_reads() {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        let _list = conn.end_request_after(Duration::from_millis(30), Duration::from_millis(10));
        assert!(run(&mut timer).await, "ended with its writes flowing");
    }

    #[tokio::test]
    async fn a_requests_deadline_goes_with_its_body() {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        drop(conn.end_request_after(Duration::from_millis(30), Duration::from_millis(10)));
        // Its answer was sent: the writes flow.
        assert!(!run(&mut timer).await, "a LIST that ended ends nothing");
    }

    #[tokio::test]
    async fn an_answer_handed_whole_to_a_connection_whose_client_stops_reading_is_dropped_past_the_deadline()
    {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        // hyper takes an HTTP/1 body whole (a Table, a GET) before it is sent: the body, and
        // the deadline it held, are gone while the bytes wait for the client.
        drop(conn.end_request_after(Duration::from_millis(20), Duration::from_millis(20)));
        stall(&conn);
        assert!(
            run(&mut timer).await,
            "dropped once blocked for the grace past the deadline"
        );
    }

    #[tokio::test]
    async fn a_streams_request_deadline_resets_the_stream_and_spares_a_connection_blocked_for_less_than_the_grace()
     {
        let conn = Connection::detached();
        let (stream, _progress) = conn.stream();
        let mut timer = stream.stall_timer();
        let _list = stream.end_request_after(Duration::from_millis(20), Duration::from_secs(10));
        // The connection's socket is full this moment (the LIST being cut, to a slow reader).
        stall(&conn);
        assert!(run(&mut timer).await, "the stream is reset");
        assert!(
            !conn.kill.is_thrown(),
            "its connection, and the other streams on it, live"
        );
    }

    #[tokio::test]
    async fn a_watch_after_a_list_on_one_connection_is_held_to_its_own_deadline_only() {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        // An HTTP/1 client's LIST, then a watch on the same connection whose reader pauses:
        // the LIST's check time comes while the watch is blocked, well before its deadline.
        drop(conn.end_request_after(Duration::from_millis(20), Duration::from_millis(10)));
        conn.end_if_stalled_after(Duration::from_secs(600), Duration::from_millis(10));
        stall(&conn);
        assert!(!thrown_within(&mut timer, Duration::from_millis(300)).await);
    }

    #[tokio::test]
    async fn a_watch_after_a_shorter_watch_on_one_connection_is_held_to_its_own_deadline_only() {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        conn.end_if_stalled_after(Duration::from_millis(10), Duration::from_millis(10));
        conn.end_if_stalled_after(Duration::from_secs(600), Duration::from_millis(10));
        stall(&conn);
        assert!(!thrown_within(&mut timer, Duration::from_millis(300)).await);
        // And a LIST after a watch is held to the LIST's deadline, not the watch's stall rule.
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        conn.end_if_stalled_after(Duration::from_millis(10), Duration::from_millis(10));
        let _list = conn.end_request_after(Duration::from_secs(600), Duration::from_millis(10));
        stall(&conn);
        assert!(!thrown_within(&mut timer, Duration::from_millis(300)).await);
    }

    #[tokio::test]
    async fn a_connection_whose_writes_flow_is_left_alone_and_checked_no_more() {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        conn.end_if_stalled_after(Duration::from_millis(20), Duration::from_millis(30));
        assert!(!run(&mut timer).await, "not thrown");
        assert!(timer.sleep.is_none(), "no timer is kept");
    }

    #[tokio::test]
    async fn a_later_watchs_check_still_runs_after_an_earlier_one_found_the_writes_flowing() {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        conn.end_if_stalled_after(Duration::from_millis(10), Duration::from_millis(10));
        conn.end_if_stalled_after(Duration::from_millis(300), Duration::from_millis(10));
        // The first check (at 20 ms) finds the writes flowing; they stall after it.
        let later = conn.state.last_due_ms.load(Ordering::Relaxed);
        let check = std::future::poll_fn(|cx| {
            timer.poll(cx);
            if timer.state.check_at_ms.load(Ordering::Relaxed) == later {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        tokio::time::timeout(Duration::from_secs(30), check)
            .await
            .expect("the first check runs");
        stall(&conn);
        assert!(run(&mut timer).await, "the second check drops it");
    }

    #[tokio::test]
    async fn a_stalled_stream_of_a_stalled_connection_drops_both_and_of_a_flowing_one_itself() {
        for connection_stalled in [true, false] {
            let conn = Connection::detached();
            let (stream, _progress) = conn.stream();
            if connection_stalled {
                stall(&conn);
            }
            stall(&stream);
            let mut timer = stream.stall_timer();
            stream.end_if_stalled_after(Duration::ZERO, Duration::from_millis(20));
            assert!(run(&mut timer).await);
            assert!(stream.kill.is_thrown());
            assert_eq!(conn.kill.is_thrown(), connection_stalled);
        }
    }

    #[tokio::test]
    async fn deadlines_of_any_size_wait_rather_than_overflow() {
        let conn = Connection::detached();
        let mut timer = conn.stall_timer();
        stall(&conn);
        conn.end_if_stalled_after(Duration::MAX, Duration::MAX);
        let waker = std::task::Waker::noop();
        timer.poll(&mut Context::from_waker(waker));
        assert!(!conn.kill.is_thrown());
        assert!(timer.sleep.is_some(), "a check is set, years away");
    }

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
