//! Watch clients over the server's real transports, and a run of `watchcache serve` under
//! them: HTTP/1.1 or HTTP/2 (h2c with prior knowledge), each plaintext or over TLS with the
//! admin client certificate of `--cert-dir`. The `http` and `kubelets` scenarios describe
//! their watches as a [`Plan`] (which watches share a connection) and [`run`] measures it.
//!
//! A run has four phases, the server's CPU and resident set read from `/proc` between them:
//! every connection is opened (TCP, then TLS, then for HTTP/2 the preface and settings), with
//! a bounded number in flight: the server's CPU over that phase per connection is its
//! handshake cost; every watch is opened on its connection; the churn is started (the server
//! runs with `--churn-wait` and the runner creates its start object), so the resident set
//! measured before it is that of idle connections and streams; and after a settling time the
//! clients count what they receive for the window. On HTTP/1.1 each watch is a connection of
//! its own, so its "connections" and "streams" are the same watches, measured twice; in
//! plaintext HTTP/1.1 the watch is sent as its connection opens (the server drops a
//! connection that says nothing for 10 s), so the connection phase holds all of it.
//!
//! Clients are cheap: a counting client only counts newlines in the DATA it receives; a
//! sampled one parses each frame for the time it was written (the workload's annotation)
//! and records its latency.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use memchr::memmem;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::alloc::{cpu_ns_of_threads, cpu_seconds, peak_rss_of, rss_bytes};
use crate::http::{ServerProcess, clients_runtime, start_server};

/// How long the clients read after the churn starts before the window opens.
const SETTLE: Duration = Duration::from_secs(2);

/// How long the sampled clients read on after the window closes, for the window's last
/// events still in flight (not counted as deliveries: the CPU window is closed).
pub(crate) const DRAIN: Duration = Duration::from_secs(2);

/// Connections (or HTTP/1.1 watches) being opened at once.
const IN_FLIGHT: usize = 64;

/// How long one connection or one watch may take to open before it counts as failed.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

/// The annotation the server's workload stamps (see `watchcache_server::workload`).
pub(crate) const WRITTEN_AT: &[u8] = br#""watchcache.dev/written-at-us":""#;

/// How the clients reach the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// HTTP/1.1 in plaintext: a connection per watch.
    H1,
    /// HTTP/2 in plaintext (h2c with prior knowledge): watches multiplexed as streams.
    H2,
    /// HTTP/1.1 over TLS.
    H1Tls,
    /// HTTP/2 over TLS (by ALPN).
    H2Tls,
}

impl Transport {
    /// Every transport, in the order tables show them.
    pub const ALL: [Transport; 4] = [Transport::H1, Transport::H2, Transport::H1Tls, Transport::H2Tls];

    /// The name `--transport` takes.
    pub fn name(self) -> &'static str {
        match self {
            Transport::H1 => "h1",
            Transport::H2 => "h2",
            Transport::H1Tls => "h1-tls",
            Transport::H2Tls => "h2-tls",
        }
    }

    /// Over TLS.
    pub fn tls(self) -> bool {
        matches!(self, Transport::H1Tls | Transport::H2Tls)
    }

    /// Several watches on one connection.
    pub fn multiplexed(self) -> bool {
        matches!(self, Transport::H2 | Transport::H2Tls)
    }
}

/// `--transport`'s comma-separated list: at least one, each once, in the order given.
pub fn parse_transports(list: &str) -> Result<Vec<Transport>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(t) = Transport::ALL.into_iter().find(|t| t.name() == name) else {
            return Err(format!(
                "unknown transport {name:?}; the transports are h1, h2, h1-tls, h2-tls"
            ));
        };
        if out.contains(&t) {
            return Err(format!("transport {name:?} named twice"));
        }
        out.push(t);
    }
    if out.is_empty() {
        return Err("--transport names no transport".into());
    }
    Ok(out)
}

/// The connections `groups` (watches that would share a connection) take on `transport`: as
/// they are when it multiplexes, else a connection per watch.
pub fn connections<T>(groups: Vec<Vec<T>>, transport: Transport) -> Vec<Vec<T>> {
    if transport.multiplexed() {
        groups.into_iter().filter(|g| !g.is_empty()).collect()
    } else {
        groups.into_iter().flatten().map(|w| vec![w]).collect()
    }
}

/// Frames in a chunk of a watch body: they end in newlines.
pub fn count_frames(data: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', data).count() as u64
}

/// The write time stamped in a watch event's line, if it has one.
pub fn written_at(finder: &memmem::Finder<'_>, line: &[u8]) -> Option<u64> {
    let at = finder.find(line)?;
    let digits = &line[at + WRITTEN_AT.len()..];
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// Raises this process's soft limit of open files to its hard limit (children inherit it);
/// the limit now.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit that the call only reads.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return raised.rlim_cur;
        }
    }
    lim.rlim_cur
}

pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A byte stream to the server: TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
/// A boxed [`Io`].
pub type BoxIo = Pin<Box<dyn Io>>;

/// Opens connections to one server on one transport.
pub struct Client {
    transport: Transport,
    addr: SocketAddr,
    /// For watches (ALPN of the transport) and for one-off requests (HTTP/1.1).
    tls: Option<(tokio_rustls::TlsConnector, tokio_rustls::TlsConnector)>,
}

fn connector(dir: &Path, alpn: &[u8]) -> Result<tokio_rustls::TlsConnector, String> {
    let read = |f: &str| dir.join(f);
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(read("ca.crt")).map_err(|e| format!("ca.crt: {e}"))? {
        roots
            .add(c.map_err(|e| format!("ca.crt: {e}"))?)
            .map_err(|e| format!("ca.crt: {e}"))?;
    }
    let chain = CertificateDer::pem_file_iter(read("admin.crt"))
        .map_err(|e| format!("admin.crt: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("admin.crt: {e}"))?;
    let key = PrivateKeyDer::from_pem_file(read("admin.key")).map_err(|e| format!("admin.key: {e}"))?;
    let mut config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// An open connection, before its watches.
pub enum Conn {
    /// HTTP/1.1: the stream, taken by its one watch.
    H1(Option<BoxIo>),
    /// HTTP/1.1 in plaintext: its watch, opened with the connection (the server drops a
    /// plaintext connection that sends nothing for 10 s, so one cannot wait for the others).
    H1Open(Option<(Keep, Body)>),
    /// HTTP/2: the handle that opens streams.
    H2(h2::client::SendRequest<Bytes>),
}

/// What keeps an HTTP/1.1 connection open while its watch streams.
pub enum Keep {
    /// HTTP/1.1: the request sender.
    H1(http1::SendRequest<Full<Bytes>>),
    /// HTTP/2: the connection's handle holds it.
    H2,
}

/// A watch's streaming body.
pub enum Body {
    /// HTTP/1.1.
    H1(hyper::body::Incoming),
    /// HTTP/2 (its flow-control window is given back as data is read).
    H2(h2::RecvStream),
}

impl Body {
    /// The next chunk of data; `None` at the end of the stream.
    pub async fn data(&mut self) -> Option<Result<Bytes, String>> {
        match self {
            Body::H1(b) => loop {
                match b.frame().await? {
                    Ok(f) => {
                        if let Ok(d) = f.into_data() {
                            return Some(Ok(d));
                        }
                    }
                    Err(e) => return Some(Err(e.to_string())),
                }
            },
            Body::H2(b) => Some(match b.data().await? {
                Ok(d) => {
                    let _ = b.flow_control().release_capacity(d.len());
                    Ok(d)
                }
                Err(e) => Err(e.to_string()),
            }),
        }
    }
}

impl Client {
    /// A client of the server at `addr`; over TLS, with the CA and admin certificate of
    /// `cert_dir`.
    pub fn new(transport: Transport, addr: SocketAddr, cert_dir: Option<&Path>) -> Result<Client, String> {
        let tls = match (transport.tls(), cert_dir) {
            (false, _) => None,
            (true, None) => return Err("TLS needs a certificate directory".into()),
            (true, Some(dir)) => {
                let alpn: &[u8] = if transport.multiplexed() {
                    b"h2"
                } else {
                    b"http/1.1"
                };
                Some((connector(dir, alpn)?, connector(dir, b"http/1.1")?))
            }
        };
        Ok(Client { transport, addr, tls })
    }

    async fn io(&self, one_off: bool) -> Result<BoxIo, String> {
        let tcp = TcpStream::connect(self.addr).await.map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => Ok(Box::pin(tcp)),
            Some((watches, one_offs)) => {
                let c = if one_off { one_offs } else { watches };
                let name = ServerName::from(self.addr.ip());
                let tls = c.connect(name, tcp).await.map_err(|e| e.to_string())?;
                Ok(Box::pin(tls))
            }
        }
    }

    /// Opens a connection: TCP, TLS, and for HTTP/2 the preface and settings; in plaintext
    /// HTTP/1.1, also its watch of `first`.
    pub async fn connect(&self, first: &str) -> Result<Conn, String> {
        let io = self.io(false).await?;
        if self.transport == Transport::H1 {
            let mut conn = Conn::H1(Some(io));
            let opened = self.watch(&mut conn, first).await?;
            return Ok(Conn::H1Open(Some(opened)));
        }
        if !self.transport.multiplexed() {
            return Ok(Conn::H1(Some(io)));
        }
        // Windows as large as a Go client's, so that a busy stream never waits on one.
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(4 << 20)
            .initial_connection_window_size(64 << 20)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Conn::H2(send))
    }

    fn uri(&self, path: &str) -> String {
        let scheme = if self.transport.tls() { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// Opens a watch (a GET of `path`) on `conn`: answered 200, its body.
    pub async fn watch(&self, conn: &mut Conn, path: &str) -> Result<(Keep, Body), String> {
        match conn {
            Conn::H1Open(opened) => opened
                .take()
                .ok_or_else(|| "an HTTP/1.1 connection carries one watch".into()),
            Conn::H1(io) => {
                let io = io.take().ok_or("an HTTP/1.1 connection carries one watch")?;
                let (sender, resp) = self.h1_request(io, "GET", path, None).await?;
                if resp.status() != 200 {
                    return Err(format!("WATCH answered {}", resp.status()));
                }
                Ok((Keep::H1(sender), Body::H1(resp.into_body())))
            }
            Conn::H2(send) => {
                let mut send = send.clone().ready().await.map_err(|e| e.to_string())?;
                let req = http::Request::get(self.uri(path))
                    .body(())
                    .map_err(|e| e.to_string())?;
                let (resp, _) = send.send_request(req, true).map_err(|e| e.to_string())?;
                let resp = resp.await.map_err(|e| e.to_string())?;
                if resp.status() != 200 {
                    return Err(format!("WATCH answered {}", resp.status()));
                }
                Ok((Keep::H2, Body::H2(resp.into_body())))
            }
        }
    }

    async fn h1_request(
        &self,
        io: BoxIo,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<
        (
            http1::SendRequest<Full<Bytes>>,
            hyper::Response<hyper::body::Incoming>,
        ),
        String,
    > {
        let (mut sender, conn) = http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        Ok((sender, resp))
    }

    /// One request over HTTP/1.1 on a connection of its own: the status and the whole body.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<(u16, Bytes), String> {
        let io = self.io(true).await?;
        let (_sender, resp) = self.h1_request(io, method, path, body).await?;
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(|e| e.to_string())?;
        Ok((code, body.to_bytes()))
    }
}

/// One watch of a plan.
#[derive(Clone, Debug)]
pub struct Watch {
    /// The request's path and query.
    pub path: String,
    /// Which of the plan's kinds it is counted under.
    pub kind: usize,
    /// Whether it parses every frame for its latency (else it only counts frames).
    pub sampled: bool,
}

/// What a run opens: its watches, grouped by connection (see [`connections`]).
#[derive(Clone, Debug)]
pub struct Plan {
    /// The kinds of watch results are reported under.
    pub kinds: Vec<&'static str>,
    /// The watches of each connection.
    pub connections: Vec<Vec<Watch>>,
}

/// What the watches of one kind received.
#[derive(Clone, Debug)]
pub struct KindOutcome {
    /// Watches of this kind.
    pub streams: usize,
    /// Frames received in the window, summed.
    pub deliveries: u64,
    /// Of the sampled watches: events written inside the window that they received, summed.
    pub written_in_window: u64,
    /// Of the sampled watches: the most events written inside the window that one received.
    pub max_written_in_window: u64,
    /// Of the sampled watches: the fewest events written inside the window that one received
    /// (`u64::MAX` with no sampled watch).
    pub min_written_in_window: u64,
    /// Sampled watches.
    pub sampled: usize,
    /// Write-to-receipt latencies, microseconds.
    pub latencies_us: Vec<u64>,
    /// Watches that did not open, or ended before the window closed.
    pub failed: usize,
}

impl Default for KindOutcome {
    fn default() -> KindOutcome {
        KindOutcome {
            streams: 0,
            deliveries: 0,
            written_in_window: 0,
            max_written_in_window: 0,
            min_written_in_window: u64::MAX,
            sampled: 0,
            latencies_us: Vec::new(),
            failed: 0,
        }
    }
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Per kind of the plan.
    pub kinds: Vec<KindOutcome>,
    /// The window the clients counted.
    pub elapsed: Duration,
    /// When the window opened and closed, µs since the epoch: the sampled clients count the
    /// events written in it, whenever they arrive (up to 2 s after it).
    pub window_us: (u64, u64),
    /// Server RSS at the window's end.
    pub rss_end: u64,
    /// Connections opened (asked for: some may have failed).
    pub connections: usize,
    /// Connections that did not open.
    pub failed_connections: usize,
    /// Watches opened (asked for).
    pub streams: usize,
    /// Server RSS before the first connection, after every connection opened, after every
    /// watch opened (no churn yet), and its peak.
    pub rss_before: u64,
    /// See `rss_before`.
    pub rss_connected: u64,
    /// See `rss_before`.
    pub rss_streams: u64,
    /// See `rss_before`.
    pub rss_peak: u64,
    /// Server CPU seconds over the connection phase, and over the watch phase.
    pub connect_cpu_s: f64,
    /// See `connect_cpu_s`.
    pub watch_cpu_s: f64,
    /// How long the connection phase took.
    pub connect_secs: f64,
    /// Server CPU in the window, in cores.
    pub server_cores: f64,
    /// The clients' CPU in the window, in cores.
    pub client_cores: f64,
    /// The CPU of the process [`Server::also_measured`] names (the etcd behind the server), in
    /// the window, in cores.
    pub also_cores: f64,
}

/// When the measurement runs, shared by the runner and the clients.
struct Window {
    /// Watches that answered.
    opened: AtomicUsize,
    /// Events written from this time on (µs since the epoch) are counted as in the window.
    from_us: AtomicU64,
    /// … and up to this time (exclusive).
    to_us: AtomicU64,
    /// When the clients stop counting deliveries (set when the window opens).
    deadline: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    /// When the clients close their watches: after the server's CPU was read (a close is work
    /// for the server) and the sampled clients drained.
    close: tokio::sync::watch::Receiver<bool>,
}

struct WatchResult {
    kind: usize,
    sampled: bool,
    deliveries: u64,
    written_in_window: u64,
    latencies: Vec<u64>,
    failed: bool,
}

/// Reads one watch: deliveries until the deadline; on a sampled watch, every event written in
/// the window, until the close.
async fn read(mut body: Body, keep: Keep, w: Watch, window: Arc<Window>) -> WatchResult {
    let _keep = keep;
    let mut out = WatchResult {
        kind: w.kind,
        sampled: w.sampled,
        deliveries: 0,
        written_in_window: 0,
        latencies: Vec::new(),
        failed: true,
    };
    let mut deadline_rx = window.deadline.clone();
    let mut close_rx = window.close.clone();
    let mut deadline: Option<tokio::time::Instant> = *deadline_rx.borrow();
    // Past the deadline: deliveries are no longer counted, and an end is no failure.
    let mut past = false;
    let finder = memmem::Finder::new(WRITTEN_AT);
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let until_deadline = async {
            match deadline {
                Some(d) if !past => tokio::time::sleep_until(d).await,
                _ => std::future::pending().await,
            }
        };
        let data = tokio::select! {
            biased;
            _ = close_rx.wait_for(|c| *c) => return out,
            () = until_deadline => {
                past = true;
                out.failed = false;
                continue;
            }
            changed = deadline_rx.changed(), if deadline.is_none() => {
                if changed.is_err() {
                    return out;
                }
                deadline = *deadline_rx.borrow();
                continue;
            }
            data = body.data() => data,
        };
        let Some(Ok(data)) = data else {
            // The stream ended (an ERROR frame ends it): failed if before the deadline.
            return out;
        };
        if deadline.is_none() {
            continue;
        }
        if !w.sampled {
            if !past {
                out.deliveries += count_frames(&data);
            }
            continue;
        }
        let from = window.from_us.load(Ordering::Relaxed);
        let to = window.to_us.load(Ordering::Relaxed);
        let received = now_us();
        partial.extend_from_slice(&data);
        let mut start = 0;
        while let Some(nl) = memchr::memchr(b'\n', &partial[start..]) {
            let line = &partial[start..start + nl];
            start += nl + 1;
            if line.starts_with(br#"{"type":"ERROR""#) {
                return out;
            }
            if !past {
                out.deliveries += 1;
            }
            // Events written outside the window have no latency here.
            if let Some(written) = written_at(&finder, line).filter(|w| (from..to).contains(w)) {
                out.written_in_window += 1;
                out.latencies.push(received.saturating_sub(written));
            }
        }
        partial.drain(..start);
    }
}

/// The server of a run: the binary, its workload flags, and the glibc tunables.
pub struct Server<'a> {
    /// The `watchcache` binary.
    pub binary: &'a Path,
    /// Its workload flags (`--seed-pods`, `--churn`, …); the run adds the watch and stream
    /// limits, `--churn-wait` when the server's own churn writes, and over TLS `--cert-dir`.
    pub args: Vec<String>,
    /// `GLIBC_TUNABLES` for it.
    pub glibc_tunables: String,
    /// Who writes once every watch is open.
    pub churn: Churn<'a>,
    /// Another process whose CPU over the window is measured too (the etcd the server
    /// follows): [`Outcome::also_cores`].
    pub also_measured: Option<u32>,
    /// CPU seconds of this process that are not the clients' (a writer thread), read at the
    /// window's start and end and left out of [`Outcome::client_cores`].
    pub not_clients: Option<&'a (dyn Fn() -> Option<f64> + Sync)>,
}

/// Who writes the events the watches count.
pub enum Churn<'a> {
    /// The server's own workload (`--churn`), held back by `--churn-wait` until the runner
    /// creates its start object.
    Server,
    /// A writer outside the server, started by calling this (the server runs no churn).
    Outside(&'a (dyn Fn() + Sync)),
}

/// A fresh certificate directory, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits (up to 120 s: seeding takes time) until the server answers `/readyz`.
async fn ready(client: &Client, server: &mut ServerProcess) -> Result<(), String> {
    let by = Instant::now() + Duration::from_secs(120);
    loop {
        if matches!(client.request("GET", "/readyz", None).await, Ok((200, _))) {
            return Ok(());
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(format!("the server exited ({status})"));
        }
        if Instant::now() > by {
            return Err("the server did not become ready in 120 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts the server, opens `plan` on `transport`, starts the churn, counts for `seconds`,
/// calling `progress(elapsed seconds)`.
pub fn run(
    server: &Server<'_>,
    transport: Transport,
    plan: &Plan,
    seconds: f64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Outcome, String> {
    let limit = raise_nofile();
    let streams: usize = plan.connections.iter().map(Vec::len).sum();
    let sockets = if transport.multiplexed() {
        plan.connections.len()
    } else {
        streams
    };
    if (sockets as u64) + 256 > limit {
        return Err(format!(
            "{sockets} connections need more open files than the limit ({limit}; `ulimit -Hn` caps it)"
        ));
    }
    let widest = plan.connections.iter().map(Vec::len).max().unwrap_or(1);
    let dir = TempDir(std::env::temp_dir().join(format!(
        "watchcache-bench-certs-{}-{}",
        std::process::id(),
        now_us()
    )));
    let mut args = server.args.clone();
    if matches!(server.churn, Churn::Server) {
        args.push("--churn-wait".to_owned());
    }
    args.extend([
        "--max-watchers".to_owned(),
        (streams + 64).to_string(),
        "--http2-max-streams-per-connection".to_owned(),
        widest.max(1000).to_string(),
    ]);
    if transport.tls() {
        args.extend(["--cert-dir".to_owned(), dir.0.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut process, addr) = start_server(
        server.binary,
        &args,
        &[("GLIBC_TUNABLES", server.glibc_tunables.as_str())],
    )?;
    let pid = process.0.id();
    let rt = clients_runtime()?;
    rt.block_on(async {
        if transport.tls() {
            // The server makes the directory as it starts.
            let by = Instant::now() + Duration::from_secs(60);
            while !dir.0.join("admin.kubeconfig").exists() {
                if Instant::now() > by {
                    return Err("the server made no certificates in 60 s".to_owned());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let client = Arc::new(Client::new(transport, addr, Some(&dir.0))?);
        ready(&client, &mut process).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut out = Outcome {
            kinds: vec![KindOutcome::default(); plan.kinds.len()],
            connections: plan.connections.len(),
            streams,
            rss_before: rss_bytes(pid).unwrap_or(0),
            ..Outcome::default()
        };
        for c in &plan.connections {
            for w in c {
                out.kinds[w.kind].streams += 1;
                out.kinds[w.kind].sampled += usize::from(w.sampled);
            }
        }

        // Connections, a bounded number in flight.
        let cpu0 = cpu_seconds(pid).unwrap_or(0.0);
        let started = Instant::now();
        let conns: Vec<Option<Conn>> = futures_util::stream::iter(&plan.connections)
            .map(|watches| {
                let client = client.clone();
                let first = watches.first().map(|w| w.path.clone()).unwrap_or_default();
                async move {
                    tokio::time::timeout(OPEN_TIMEOUT, client.connect(&first))
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
            })
            .buffered(IN_FLIGHT)
            .collect()
            .await;
        out.connect_secs = started.elapsed().as_secs_f64();
        let cpu1 = cpu_seconds(pid).unwrap_or(0.0);
        out.connect_cpu_s = cpu1 - cpu0;
        out.failed_connections = conns.iter().filter(|c| c.is_none()).count();
        tokio::time::sleep(Duration::from_secs(1)).await;
        out.rss_connected = rss_bytes(pid).unwrap_or(0);

        // Watches, a bounded number of connections opening theirs at once.
        let cpu2 = cpu_seconds(pid).unwrap_or(0.0);
        let (set_deadline, deadline) = tokio::sync::watch::channel(None);
        let (set_close, close) = tokio::sync::watch::channel(false);
        let window = Arc::new(Window {
            opened: AtomicUsize::new(0),
            from_us: AtomicU64::new(u64::MAX),
            to_us: AtomicU64::new(u64::MAX),
            deadline,
            close,
        });
        let opening = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        let mut tasks = Vec::new();
        for (conn, watches) in conns.into_iter().zip(&plan.connections) {
            let Some(mut conn) = conn else {
                for w in watches {
                    out.kinds[w.kind].failed += 1;
                }
                continue;
            };
            let (client, window, opening, watches) =
                (client.clone(), window.clone(), opening.clone(), watches.clone());
            tasks.push(tokio::spawn(async move {
                let mut readers = Vec::new();
                let mut failed = Vec::new();
                {
                    let _permit = opening.acquire().await;
                    for w in watches {
                        match tokio::time::timeout(OPEN_TIMEOUT, client.watch(&mut conn, &w.path)).await {
                            Ok(Ok((keep, body))) => {
                                window.opened.fetch_add(1, Ordering::Relaxed);
                                readers.push(tokio::spawn(read(body, keep, w, window.clone())));
                            }
                            _ => failed.push(w.kind),
                        }
                    }
                }
                let mut results = Vec::new();
                for r in readers {
                    if let Ok(r) = r.await {
                        results.push(r);
                    }
                }
                drop(conn);
                (results, failed)
            }));
        }
        let expected = streams - out.kinds.iter().map(|k| k.failed).sum::<usize>();
        let by = Instant::now() + OPEN_TIMEOUT * 2;
        while window.opened.load(Ordering::Relaxed) < expected && Instant::now() < by {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        out.watch_cpu_s = cpu_seconds(pid).unwrap_or(0.0) - cpu2;
        out.rss_streams = rss_bytes(pid).unwrap_or(0);

        // The churn.
        match server.churn {
            Churn::Server => {
                let start = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"churn-start"}}"#;
                let (code, body) = client
                    .request(
                        "POST",
                        "/api/v1/namespaces/default/configmaps",
                        Some(start.to_owned()),
                    )
                    .await?;
                if code != 201 {
                    return Err(format!(
                        "creating the churn's start object answered {code}: {}",
                        String::from_utf8_lossy(&body)
                    ));
                }
            }
            Churn::Outside(start) => start(),
        }
        tokio::time::sleep(SETTLE).await;
        // Relaxed: the deadline's watch channel publishes it to the clients.
        let from_us = now_us();
        let to_us = from_us + (seconds * 1e6) as u64;
        window.from_us.store(from_us, Ordering::Relaxed);
        window.to_us.store(to_us, Ordering::Relaxed);
        let started = Instant::now();
        let also = server.also_measured;
        let not_clients = || server.not_clients.and_then(|f| f()).unwrap_or(0.0);
        let cpu_at_start = (
            cpu_seconds(pid),
            cpu_seconds(std::process::id()),
            also.and_then(cpu_ns_of_threads),
            not_clients(),
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(seconds);
        let _ = set_deadline.send(Some(deadline));
        until(deadline, &|s| progress(s), started).await;
        let window_secs = started.elapsed().as_secs_f64();
        out.window_us = (from_us, to_us);
        let cores = |before: Option<f64>, pid: u32| match (before, cpu_seconds(pid)) {
            (Some(b), Some(a)) => (a - b) / window_secs,
            _ => 0.0,
        };
        out.server_cores = cores(cpu_at_start.0, pid);
        out.client_cores =
            cores(cpu_at_start.1, std::process::id()) - (not_clients() - cpu_at_start.3) / window_secs;
        if let (Some(also), Some(before)) = (also, cpu_at_start.2) {
            let after = cpu_ns_of_threads(also).unwrap_or(before);
            out.also_cores = after.saturating_sub(before) as f64 / 1e9 / window_secs;
        }
        out.rss_end = rss_bytes(pid).unwrap_or(0);
        out.rss_peak = peak_rss_of(pid).unwrap_or(0);
        // The sampled clients take the window's last events; then every watch closes.
        tokio::time::sleep(DRAIN).await;
        let _ = set_close.send(true);
        for t in tasks {
            let (results, failed) = t.await.map_err(|e| e.to_string())?;
            for kind in failed {
                out.kinds[kind].failed += 1;
            }
            for r in results {
                let k = &mut out.kinds[r.kind];
                k.deliveries += r.deliveries;
                k.failed += usize::from(r.failed);
                if r.sampled {
                    k.written_in_window += r.written_in_window;
                    k.max_written_in_window = k.max_written_in_window.max(r.written_in_window);
                    k.min_written_in_window = k.min_written_in_window.min(r.written_in_window);
                    k.latencies_us.extend(r.latencies);
                }
            }
        }
        out.elapsed = Duration::from_secs_f64(window_secs);
        drop(process);
        Ok(out)
    })
}

/// Waits until `deadline`, calling `progress` with the seconds since `started` every second.
pub(crate) async fn until(deadline: tokio::time::Instant, progress: &(dyn Fn(u64) + Sync), started: Instant) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return,
            _ = ticker.tick() => progress(started.elapsed().as_secs()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_parse_in_order_and_refuse_unknown_or_repeated_names() {
        assert_eq!(
            parse_transports("h2-tls,h1").unwrap(),
            vec![Transport::H2Tls, Transport::H1]
        );
        assert_eq!(
            parse_transports("h1,h2,h1-tls,h2-tls").unwrap(),
            Transport::ALL.to_vec()
        );
        assert!(parse_transports("h3").unwrap_err().contains("h3"));
        assert!(parse_transports("h1,h1").unwrap_err().contains("twice"));
        assert!(parse_transports(" , ").is_err());
    }

    #[test]
    fn http1_gives_each_watch_its_connection_and_http2_keeps_the_groups() {
        let groups = vec![vec![1, 2, 3], vec![], vec![4]];
        assert_eq!(
            connections(groups.clone(), Transport::H2Tls),
            vec![vec![1, 2, 3], vec![4]]
        );
        assert_eq!(
            connections(groups, Transport::H1Tls),
            vec![vec![1], vec![2], vec![3], vec![4]]
        );
    }

    #[test]
    fn frames_are_counted_by_newline_and_the_write_time_is_read_from_its_annotation() {
        assert_eq!(count_frames(b"{\"a\":1}\n{\"b\":2}\n{\"c\""), 2);
        assert_eq!(count_frames(b""), 0);
        let finder = memmem::Finder::new(WRITTEN_AT);
        let line = br#"{"type":"MODIFIED","object":{"metadata":{"annotations":{"watchcache.dev/written-at-us":"1700000000123456","x":"y"}}}}"#;
        assert_eq!(written_at(&finder, line), Some(1_700_000_000_123_456));
        assert_eq!(written_at(&finder, br#"{"type":"ADDED","object":{}}"#), None);
        // Cut off inside the digits: no time rather than a wrong one.
        assert_eq!(
            written_at(&finder, br#"{"watchcache.dev/written-at-us":"17000"#),
            None
        );
    }
}
