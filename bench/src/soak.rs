//! A soak: `watchcache serve` with churn, watchers that read and reconnect as informers do,
//! watchers that stop reading, and periodic paged LISTs, for minutes. It samples the server's
//! RSS, open file descriptors and open watches, and counts every error by kind: a leak shows
//! as growth after warm-up, a stuck connection as a climbing fd count.
//!
//! * Readers watch with a random `timeoutSeconds` and bookmarks; on a clean end they resume
//!   from the last resourceVersion seen, on an in-stream 410 they list again first.
//! * Stalled clients send a watch and never read; the server drops each a grace period after
//!   its deadline, and the client then stalls again on a new connection.
//! * A lister pages through every pod with `limit` and `continue`; a 410 on a later page is
//!   the expected answer when its snapshot is gone, and it starts over.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use memchr::memmem;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::alloc::rss_bytes;
use crate::http::{get, start_server, wait_ready};

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    pub watchers: usize,
    /// Of the watchers, how many never read.
    pub stalled: usize,
    pub churn: f64,
    pub seed_pods: usize,
    pub minutes: f64,
    /// Seconds between samples.
    pub sample_every: f64,
}

/// One sample of the server.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at_secs: f64,
    pub rss: u64,
    pub fds: u64,
    pub open_watches: u64,
}

/// Counts of what happened, by kind.
#[derive(Debug, Default)]
pub struct Counts {
    pub events: AtomicU64,
    pub clean_ends: AtomicU64,
    pub expired_410: AtomicU64,
    pub relists: AtomicU64,
    /// Stalled connections given up by their client (each a minute old) and opened anew.
    pub stalled_reopened: AtomicU64,
    pub list_pages: AtomicU64,
    pub list_continue_410: AtomicU64,
    /// Anything else: a refused connection, a non-200 answer, a malformed frame.
    pub errors: AtomicU64,
}

/// What a soak measured.
#[derive(Debug)]
pub struct Outcome {
    pub samples: Vec<Sample>,
    pub counts: Arc<Counts>,
}

/// The list's resourceVersion, by a LIST of one item.
async fn list_revision(addr: SocketAddr, counts: &Counts) -> Option<String> {
    match get(addr, "/api/v1/pods?limit=1").await {
        Ok((200, body)) => {
            counts.relists.fetch_add(1, Ordering::Relaxed);
            let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
            v["metadata"]["resourceVersion"].as_str().map(str::to_owned)
        }
        _ => {
            counts.errors.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The resourceVersion in a frame (`"resourceVersion":"N"`), if any.
fn frame_revision(line: &[u8], finder: &memmem::Finder<'_>) -> Option<String> {
    let at = finder.find(line)? + finder.needle().len();
    let end = line[at..].iter().position(|b| *b == b'"')?;
    Some(String::from_utf8_lossy(&line[at..at + end]).into_owned())
}

/// A reader: watches, resumes from the last revision on a clean end, relists on a 410.
async fn reader(addr: SocketAddr, seed: u64, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    let finder = memmem::Finder::new(br#""resourceVersion":""#);
    let mut rng = seed | 1;
    let mut from: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        let rv = match from.take() {
            Some(rv) => rv,
            None => match list_revision(addr, &counts).await {
                Some(rv) => rv,
                None => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let timeout = 20 + rng % 40;
        let path = format!(
            "/api/v1/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds={timeout}&resourceVersion={rv}"
        );
        let Ok(stream) = TcpStream::connect(addr).await else {
            counts.errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let Ok((mut sender, conn)) = http1::handshake(TokioIo::new(stream)).await else {
            counts.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        tokio::spawn(conn);
        let req = http::Request::get(path)
            .header("host", addr.to_string())
            .body(Empty::<Bytes>::new())
            .expect("a valid request");
        let resp = match sender.send_request(req).await {
            Ok(r) if r.status() == 200 => r,
            _ => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut body = resp.into_body();
        let mut partial: Vec<u8> = Vec::new();
        let mut last = Some(rv);
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match tokio::time::timeout(Duration::from_secs(1), body.frame()).await {
                Err(_) => continue,
                Ok(None) => {
                    // A clean end at the deadline: resume from the last revision.
                    counts.clean_ends.fetch_add(1, Ordering::Relaxed);
                    from = last;
                    break;
                }
                Ok(Some(Err(_))) => {
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                    from = last;
                    break;
                }
                Ok(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else { continue };
                    partial.extend_from_slice(&data);
                    let mut start = 0;
                    let mut expired = false;
                    while let Some(nl) = memchr::memchr(b'\n', &partial[start..]) {
                        let line = &partial[start..start + nl];
                        start += nl + 1;
                        if line.starts_with(br#"{"type":"ERROR""#) {
                            expired = memmem::find(line, b"\"code\":410").is_some();
                            if !expired {
                                counts.errors.fetch_add(1, Ordering::Relaxed);
                            }
                            break;
                        }
                        counts.events.fetch_add(1, Ordering::Relaxed);
                        if let Some(rv) = frame_revision(line, &finder) {
                            last = Some(rv);
                        }
                    }
                    partial.drain(..start.min(partial.len()));
                    if expired {
                        counts.expired_410.fetch_add(1, Ordering::Relaxed);
                        from = None; // list again
                        break;
                    }
                }
            }
        }
    }
}

/// A client that sends a watch and never reads, then after a minute drops its socket and
/// stalls again on a new one. The server is meant to have dropped each of these connections
/// (its watch's deadline, 30 s, plus the grace period, 5 s) long before: if it does not, the
/// server's open fds and watches climb.
async fn stalled(addr: SocketAddr, offset: Duration, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    // Staggered, so that the stalled connections are not all between cycles at once (a sample
    // would then never see them).
    tokio::time::sleep(offset).await;
    while !stop.load(Ordering::Relaxed) {
        let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
            return;
        };
        // A small fixed receive buffer, so the server's writes block soon.
        let _ = socket.set_recv_buffer_size(16 * 1024);
        let Ok(mut s) = socket.connect(addr).await else {
            counts.errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let req = format!(
            "GET /api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=30 HTTP/1.1\r\nHost: {addr}\r\n\r\n"
        );
        if s.write_all(req.as_bytes()).await.is_err() {
            counts.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        for _ in 0..60 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        counts.stalled_reopened.fetch_add(1, Ordering::Relaxed);
    }
}

/// Pages through every pod again and again.
async fn lister(addr: SocketAddr, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    while !stop.load(Ordering::Relaxed) {
        let mut path = "/api/v1/pods?limit=100".to_owned();
        loop {
            match get(addr, &path).await {
                Ok((200, body)) => {
                    counts.list_pages.fetch_add(1, Ordering::Relaxed);
                    let v: serde_json::Value = match serde_json::from_slice(&body) {
                        Ok(v) => v,
                        Err(_) => {
                            counts.errors.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    };
                    match v["metadata"]["continue"].as_str().filter(|t| !t.is_empty()) {
                        Some(token) => path = format!("/api/v1/pods?limit=100&continue={token}"),
                        None => break,
                    }
                }
                Ok((410, _)) => {
                    counts.list_continue_410.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                _ => {
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

async fn open_watches(addr: SocketAddr) -> u64 {
    let Ok((200, text)) = get(addr, "/metrics").await else {
        return 0;
    };
    String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| l.starts_with("watchcache_watchers{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Starts `binary serve` and soaks it; `progress(elapsed seconds)` after each sample.
pub fn run(binary: &Path, p: &Params, progress: &(dyn Fn(u64) + Sync)) -> Result<Outcome, String> {
    let (server, addr) = start_server(
        binary,
        &[
            "--seed-pods",
            &p.seed_pods.to_string(),
            "--churn",
            &p.churn.to_string(),
            "--max-watchers",
            &(p.watchers + 64).to_string(),
            "--shutdown-grace",
            "5",
        ],
        &[],
    )?;
    let pid = server.0.id();
    let rt = crate::http::clients_runtime()?;
    rt.block_on(async {
        wait_ready(addr, binary).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let mut tasks = Vec::new();
        for i in 0..p.watchers {
            let (stop, counts) = (stop.clone(), counts.clone());
            tasks.push(if i < p.stalled {
                let offset = Duration::from_secs_f64(60.0 * i as f64 / p.stalled as f64);
                tokio::spawn(stalled(addr, offset, stop, counts))
            } else {
                tokio::spawn(reader(addr, 0x9E37_79B9_7F4A_7C15 ^ i as u64, stop, counts))
            });
        }
        tasks.push(tokio::spawn(lister(addr, stop.clone(), counts.clone())));
        let started = Instant::now();
        let total = Duration::from_secs_f64(p.minutes * 60.0);
        let mut samples = Vec::new();
        let mut ticker = tokio::time::interval(Duration::from_secs_f64(p.sample_every));
        while started.elapsed() < total {
            ticker.tick().await;
            samples.push(Sample {
                at_secs: started.elapsed().as_secs_f64(),
                rss: rss_bytes(pid).unwrap_or(0),
                fds: open_fds(pid),
                open_watches: open_watches(addr).await,
            });
            progress(started.elapsed().as_secs());
        }
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        Ok(Outcome { samples, counts })
    })
}
