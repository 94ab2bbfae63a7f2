//! End to end: `watchcache serve` in its own process, `W` streaming HTTP watch clients over
//! loopback, the server's own churn writing pods, for a bounded time.
//!
//! Each churned pod carries the time it was written (annotation
//! `watchcache.dev/written-at-us`, set by the server's workload generator); a sampled client
//! subtracts it from its clock on receipt, so latency covers store, cache, encoding, HTTP and
//! the client's own scheduling. The measurement window opens once every client's watch has
//! answered. Client and server share the machine's two cores, so the clients are made cheap:
//! most only count the frames they receive in the window (a newline count per chunk); one in
//! `watchers / 64` parses each frame for its write time, counting only events written inside
//! the window, and records latencies. The server's CPU per delivered frame and its resident
//! memory per connected (idle) watch come from `/proc`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use memchr::memmem;
use tokio::net::TcpStream;

use crate::alloc::{cpu_seconds, peak_rss_of, rss_bytes};

/// How long the clients read before the window opens (see `run`).
const SETTLE: Duration = Duration::from_secs(2);

/// The annotation the server's churn stamps (see `watchcache_server::workload`).
const WRITTEN_AT: &[u8] = br#""watchcache.dev/written-at-us":""#;

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Streaming watch clients.
    pub watchers: usize,
    /// Pod updates per second (the server's `--churn`).
    pub churn: f64,
    /// How long the clients watch.
    pub seconds: f64,
    /// Pods seeded before the run (the server's `--seed-pods`).
    pub seed_pods: usize,
    /// `GLIBC_TUNABLES` for the server process.
    pub glibc_tunables: String,
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Events received, summed over clients.
    pub deliveries: u64,
    /// Time the clients watched.
    pub elapsed: Duration,
    /// Write-to-receipt latencies, microseconds.
    pub latencies_us: Vec<u64>,
    /// Clients whose watch ended early (an error or a closed stream).
    pub failed: usize,
    /// The server's peak resident set.
    pub server_peak_rss: u64,
    /// The server's resident set once every client was connected.
    pub server_rss_connected: u64,
    /// The server's resident set before any client connected.
    pub server_rss_before: u64,
    /// Of the sampled clients, the most events written inside the window that one received.
    pub written_in_window: u64,
    /// CPU the server used during the window, in cores (1.0 = one core busy throughout).
    pub server_cores: f64,
    /// CPU this process (the clients) used during the window, in cores.
    pub client_cores: f64,
}

/// Kills the server when dropped, whatever happens.
pub(crate) struct ServerProcess(pub(crate) Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A GET of `path` on a fresh connection, up to its response's head: the sender (which keeps
/// the connection open) and the response, whose body streams.
pub(crate) async fn open(
    addr: SocketAddr,
    path: &str,
) -> Result<
    (
        http1::SendRequest<Empty<Bytes>>,
        hyper::Response<hyper::body::Incoming>,
    ),
    String,
> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    Ok((sender, resp))
}

/// One GET on a fresh connection: the status and the whole body.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Result<(u16, Bytes), String> {
    let (_sender, resp) = open(addr, path).await?;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?;
    Ok((code, body.to_bytes()))
}

/// The clients' runtime: two workers, as the server has.
pub(crate) fn clients_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// What every watch client asks for: the pods, from the revision current when it opens (as an
/// informer's watch starts from its own fresh LIST), with no initial events.
const WATCH_PATH: &str =
    "/api/v1/pods?watch=1&resourceVersion=0&sendInitialEvents=false&resourceVersionMatch=NotOlderThan";

struct ClientResult {
    deliveries: u64,
    latencies: Vec<u64>,
    failed: bool,
    /// Sampled: events written inside the window that it received.
    written_in_window: u64,
}

/// When the measurement runs, shared by the runner and the clients.
struct Window {
    /// Clients whose watch has answered.
    connected: AtomicUsize,
    /// Events written from this time on (µs since the epoch) are counted; `u64::MAX` until
    /// every client is connected.
    from_us: AtomicU64,
    /// When the clients stop.
    deadline: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
}

/// One watch client: reads frames until the deadline. Sampled, it parses each frame for its
/// write time, counting the events written inside the window and recording their latency;
/// otherwise it only counts the frames it receives once the window is open.
async fn watch(addr: SocketAddr, path: String, window: Arc<Window>, sampled: bool) -> ClientResult {
    let mut out = ClientResult {
        deliveries: 0,
        latencies: Vec::new(),
        failed: true,
        written_in_window: 0,
    };
    let Ok((_sender, resp)) = open(addr, &path).await else {
        return out;
    };
    if resp.status() != 200 {
        return out;
    }
    window.connected.fetch_add(1, Ordering::Relaxed);
    // Frames are read from the start (a client that did not read until the window opened
    // would find a backlog there), and counted once the window is open.
    let mut deadline_rx = window.deadline.clone();
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut body = resp.into_body();
    let finder = memmem::Finder::new(WRITTEN_AT);
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let frame = match deadline {
            Some(d) => match tokio::time::timeout_at(d, body.frame()).await {
                Err(_) => {
                    out.failed = false;
                    return out;
                }
                Ok(frame) => frame,
            },
            None => tokio::select! {
                frame = body.frame() => frame,
                changed = deadline_rx.changed() => {
                    if changed.is_err() {
                        return out;
                    }
                    deadline = *deadline_rx.borrow();
                    continue;
                }
            },
        };
        let Some(Ok(frame)) = frame else {
            // The stream ended before the deadline (an ERROR frame ends it): failed.
            return out;
        };
        let Ok(data) = frame.into_data() else { continue };
        if deadline.is_none() {
            continue;
        }
        if !sampled {
            // Frames are newline-terminated: count them, look at nothing else.
            out.deliveries += memchr::memchr_iter(b'\n', &data).count() as u64;
            continue;
        }
        let from = window.from_us.load(Ordering::Relaxed);
        let received = now_us();
        partial.extend_from_slice(&data);
        let mut start = 0;
        while let Some(nl) = memchr::memchr(b'\n', &partial[start..]) {
            let line = &partial[start..start + nl];
            start += nl + 1;
            if line.starts_with(br#"{"type":"ERROR""#) {
                return out;
            }
            out.deliveries += 1;
            let written = finder.find(line).and_then(|at| {
                let digits = &line[at + WRITTEN_AT.len()..];
                let end = digits.iter().position(|b| !b.is_ascii_digit()).unwrap_or(0);
                std::str::from_utf8(&digits[..end]).ok()?.parse::<u64>().ok()
            });
            // Events written before the window (while clients were still connecting) have
            // no latency here.
            if let Some(written) = written.filter(|w| *w >= from) {
                out.written_in_window += 1;
                out.latencies.push(received.saturating_sub(written));
            }
        }
        partial.drain(..start);
    }
}

/// Starts `binary serve` on a free loopback port with `args` and `env` added; the server is
/// killed when the returned guard drops.
pub(crate) fn start_server(
    binary: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(ServerProcess, SocketAddr), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))?
        .port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    Ok((start_server_at(binary, addr, args, env)?, addr))
}

/// `binary serve` on `addr` (a restarted server, on the port its clients know).
pub(crate) fn start_server_at(
    binary: &Path,
    addr: SocketAddr,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<ServerProcess, String> {
    let child = Command::new(binary)
        .args(["serve", "--addr", &addr.to_string()])
        .args(args)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    Ok(ServerProcess(child))
}

/// Waits (up to 60 s) until the server at `addr` answers `/readyz`.
pub(crate) async fn wait_ready(addr: SocketAddr, binary: &Path) -> Result<(), String> {
    let ready_by = Instant::now() + Duration::from_secs(60);
    while !matches!(get(addr, "/readyz").await, Ok((200, _))) {
        if Instant::now() > ready_by {
            return Err(format!(
                "the server did not become ready in 60 s (run {} serve by hand to see why)",
                binary.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The server's resident memory per idle watch: `binary serve` with no churn, `watchers`
/// watches opened and left idle (nothing is written, so nothing is sent), and the growth of
/// its resident set between before the first connection and a second after the last one,
/// divided by the watches. Includes everything a watch holds: the connection's task and
/// buffers, the watcher, its timers, and the allocator's share.
pub fn idle_rss_per_watch(binary: &Path, watchers: usize, seed_pods: usize) -> Result<f64, String> {
    let (server, addr) = start_server(
        binary,
        &[
            "--seed-pods",
            &seed_pods.to_string(),
            "--churn",
            "0",
            "--max-watchers",
            &(watchers + 16).to_string(),
        ],
        &[],
    )?;
    let pid = server.0.id();
    let rt = clients_runtime()?;
    rt.block_on(async {
        wait_ready(addr, binary).await?;
        // Warm the server's allocator and buffers with a few watches first.
        let open = |n: usize| {
            (0..n)
                .map(|_| {
                    tokio::spawn(async move {
                        let (sender, resp) = open(addr, WATCH_PATH).await?;
                        if resp.status() != 200 {
                            return Err(format!("WATCH answered {}", resp.status()));
                        }
                        Ok::<_, String>((sender, resp))
                    })
                })
                .collect::<Vec<_>>()
        };
        let mut held = Vec::new();
        for h in open(16) {
            held.push(h.await.map_err(|e| e.to_string())??);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = rss_bytes(pid).ok_or("no RSS for the server")?;
        for h in open(watchers) {
            held.push(h.await.map_err(|e| e.to_string())??);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = rss_bytes(pid).ok_or("no RSS for the server")?;
        drop(held);
        Ok(after.saturating_sub(before) as f64 / watchers as f64)
    })
}

/// Starts `binary serve`, connects `p.watchers` clients, watches for `p.seconds`, calling
/// `progress(elapsed seconds)`.
pub fn run(binary: &Path, p: &Params, progress: &(dyn Fn(u64) + Sync)) -> Result<Outcome, String> {
    let (server, addr) = start_server(
        binary,
        &[
            "--seed-pods",
            &p.seed_pods.to_string(),
            "--churn",
            &p.churn.to_string(),
            "--max-watchers",
            &(p.watchers + 16).to_string(),
        ],
        &[("GLIBC_TUNABLES", p.glibc_tunables.as_str())],
    )?;
    let pid = server.0.id();
    let rt = clients_runtime()?;
    rt.block_on(async {
        wait_ready(addr, binary).await?;
        let (code, _) = get(addr, "/api/v1/pods?limit=1").await?;
        if code != 200 {
            return Err(format!("LIST answered {code}"));
        }
        // Each watch starts from the cache's revision when it opens, as an informer's starts
        // from its own fresh LIST: no client replays what was written while the others were
        // still connecting.
        let path = WATCH_PATH.to_owned();
        let rss_before = rss_bytes(pid).unwrap_or(0);
        let sample_every = p.watchers.div_ceil(64).max(1);
        let (set_deadline, deadline) = tokio::sync::watch::channel(None);
        let window = Arc::new(Window {
            connected: AtomicUsize::new(0),
            from_us: AtomicU64::new(u64::MAX),
            deadline,
        });
        let clients: Vec<_> = (0..p.watchers)
            .map(|i| tokio::spawn(watch(addr, path.clone(), window.clone(), i % sample_every == 0)))
            .collect();
        // The window opens once every client's watch has answered (or after 60 s, with
        // whoever made it; the others count as failed).
        let connect_by = Instant::now() + Duration::from_secs(60);
        while window.connected.load(Ordering::Relaxed) < p.watchers && Instant::now() < connect_by {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let rss_connected = rss_bytes(pid).unwrap_or(0);
        // Opening thousands of watches at once takes the server's time: the window opens a
        // little after, in the steady state.
        tokio::time::sleep(SETTLE).await;
        // Relaxed: the deadline's watch channel publishes it to the clients.
        window.from_us.store(now_us(), Ordering::Relaxed);
        let started = Instant::now();
        let cpu_at_start = (cpu_seconds(pid), cpu_seconds(std::process::id()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(p.seconds);
        let _ = set_deadline.send(Some(deadline));
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        while tokio::time::Instant::now() < deadline {
            ticker.tick().await;
            progress(started.elapsed().as_secs());
        }
        let window_secs = started.elapsed().as_secs_f64();
        let cores = |before: Option<f64>, pid: u32| match (before, cpu_seconds(pid)) {
            (Some(b), Some(a)) => (a - b) / window_secs,
            _ => 0.0,
        };
        let mut out = Outcome {
            server_rss_connected: rss_connected,
            server_rss_before: rss_before,
            server_cores: cores(cpu_at_start.0, pid),
            client_cores: cores(cpu_at_start.1, std::process::id()),
            ..Outcome::default()
        };
        for c in clients {
            let r = c.await.map_err(|e| e.to_string())?;
            out.deliveries += r.deliveries;
            out.written_in_window = out.written_in_window.max(r.written_in_window);
            out.failed += usize::from(r.failed);
            out.latencies_us.extend(r.latencies);
        }
        out.elapsed = started.elapsed().min(Duration::from_secs_f64(p.seconds));
        out.server_peak_rss = peak_rss_of(pid).unwrap_or(0);
        Ok(out)
    })
}
