//! Helpers for the end-to-end tests: a server on a free loopback port, an HTTP client, and
//! the external clients (kubectl builds) with the loud-when-missing policy.

pub mod etcd;
pub mod robustness;
pub mod tls;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
pub use watchcache_server::{AuditConfig, ServeConfig, Server};

/// A config for tests: a free loopback port, short timeouts.
pub fn config(seed_pods: usize) -> ServeConfig {
    ServeConfig {
        addr: "127.0.0.1:0".parse().expect("a loopback address"),
        seed_pods,
        fresh_timeout: Duration::from_secs(2),
        bookmark_interval: Duration::from_secs(1),
        ..ServeConfig::default()
    }
}

/// Starts a server and waits until every cache is ready.
pub async fn start(config: ServeConfig) -> Server {
    start_ready(Server::start(config).await.expect("the server starts")).await
}

/// Waits until every cache of a started server is ready: a bounded wait, generous enough for
/// a machine busy with other builds (seeding thousands of pods then takes seconds).
pub async fn start_ready(server: Server) -> Server {
    let client = http();
    let mut last = Bytes::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let (code, body) = request(&client, &server, "GET", "/readyz", None).await;
        if code == 200 {
            return server;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the server did not become ready: {}",
        String::from_utf8_lossy(&last)
    );
}

/// The store a test's servers keep their data in.
pub enum Backing {
    /// The embedded store (each server has its own).
    Memory,
    /// A one-member etcd cluster of the test's own.
    Etcd(etcd::EtcdCluster),
}

impl Backing {
    /// The embedded store, or (`etcd`) a fresh etcd; `None` (after a loud note) when etcd is
    /// wanted and missing.
    pub async fn new(etcd: bool) -> Option<Backing> {
        if !etcd {
            return Some(Backing::Memory);
        }
        etcd::EtcdCluster::start(1).await.map(Backing::Etcd)
    }

    /// [`config`] on this store.
    pub fn config(&self, seed_pods: usize) -> ServeConfig {
        let mut c = config(seed_pods);
        if let Backing::Etcd(cluster) = self {
            c.etcd = cluster.endpoints();
            c.compaction_interval = Duration::ZERO;
        }
        c
    }
}

/// The store's current revision under `server`, whichever store it is.
pub async fn current_revision(server: &Server) -> u64 {
    watchcache_core::Source::current_revision(server.store())
        .await
        .expect("the store answers")
        .get()
}

/// Waits (at most 30 s) until the store's revision has stood still for a second: the server's
/// own controllers, which write when it starts and when a namespace is made (each namespace's
/// default ServiceAccount, the `kubernetes` Service), are done. For tests that must be the
/// store's only writer.
pub async fn settle(server: &Server) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = current_revision(server).await;
    while std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = current_revision(server).await;
        if now == last {
            return;
        }
        last = now;
    }
    panic!("the store's revision never stood still (last {last})");
}

/// The embedded store under `server` (tests that write to it directly).
pub fn memory(server: &Server) -> &watchcache_core::MemorySource {
    server.store().memory().expect("a server on the embedded store")
}

/// A plain HTTP/1.1 client.
pub fn http() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// Sends a request and returns the status code and the whole body.
pub async fn request(
    client: &Client<HttpConnector, Full<Bytes>>,
    server: &Server,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, Bytes) {
    let (code, _, body) = request_full(client, server, method, path, body).await;
    (code, body)
}

/// Sends a request with a body of the given `content_type` (a PATCH's patch type) and returns
/// the status code and the answer as JSON.
pub async fn request_typed(
    client: &Client<HttpConnector, Full<Bytes>>,
    server: &Server,
    method: &str,
    path: &str,
    content_type: &str,
    body: impl Into<Bytes>,
) -> (u16, serde_json::Value) {
    let (code, _, body) = send(client, server, method, path, content_type, body.into()).await;
    let value = serde_json::from_slice(&body).unwrap_or_else(|_| {
        panic!(
            "{method} {path}: a JSON answer: {}",
            String::from_utf8_lossy(&body)
        )
    });
    (code, value)
}

/// As [`request`], with the response headers.
pub async fn request_full(
    client: &Client<HttpConnector, Full<Bytes>>,
    server: &Server,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, http::HeaderMap, Bytes) {
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    send(client, server, method, path, "application/json", body).await
}

/// Sends one request, bounded in time; the status code, headers and whole body.
async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    server: &Server,
    method: &str,
    path: &str,
    content_type: &str,
    body: Bytes,
) -> (u16, http::HeaderMap, Bytes) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", server.addr()))
        .header("content-type", content_type)
        .body(Full::new(body))
        .expect("a valid request");
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .expect("an answer in time")
        .expect("the request is sent");
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("the body").to_bytes();
    (code, headers, body)
}

/// GETs `path` with `accept`, bounded in time: the status code, the Content-Type and the body.
pub async fn get_raw(server: &Server, path: &str, accept: &str) -> (u16, Option<String>, Bytes) {
    let req = http::Request::builder()
        .uri(format!("http://{}{path}", server.addr()))
        .header("accept", accept)
        .body(Full::new(Bytes::new()))
        .expect("a valid request");
    let resp = tokio::time::timeout(Duration::from_secs(30), http().request(req))
        .await
        .expect("an answer in time")
        .expect("the request is sent");
    let code = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().expect("an ASCII Content-Type").to_owned());
    let body = resp.into_body().collect().await.expect("the body").to_bytes();
    (code, ct, body)
}

/// Creates the namespaces `names` (the apiserver refuses objects in one that does not exist);
/// one that exists already is fine.
pub async fn create_namespaces(server: &Server, names: &[&str]) {
    let client = http();
    for name in names {
        let body = serde_json::json!({"metadata": {"name": name}});
        let (code, out) = request(&client, server, "POST", "/api/v1/namespaces", Some(body)).await;
        assert!(
            code == 201 || code == 409,
            "namespace {name}: {code} {}",
            String::from_utf8_lossy(&out)
        );
    }
}

/// Whether tests that need external binaries must fail when those are missing (CI).
pub fn external_required() -> bool {
    std::env::var("WATCHCACHE_REQUIRE_EXTERNAL").is_ok_and(|v| v == "1")
}

/// Says loudly that `what` is missing; fails the test when externals are required.
pub fn missing(what: &str) {
    let line = "!".repeat(78);
    eprintln!("{line}\n!! SKIPPED: {what} is not installed on this machine\n{line}");
    assert!(
        !external_required(),
        "{what} is required (WATCHCACHE_REQUIRE_EXTERNAL=1) but missing"
    );
}

/// The kubectl builds to test: /usr/bin/kubectl and, where present, the 1.27 and 1.33 builds.
pub fn kubectl_builds() -> Vec<PathBuf> {
    let main = PathBuf::from("/usr/bin/kubectl");
    if !main.exists() {
        missing("kubectl (/usr/bin/kubectl)");
        return Vec::new();
    }
    let mut out = vec![main];
    for v in ["1.27", "1.33"] {
        let p = PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.{v}"));
        if p.exists() {
            out.push(p);
        } else {
            eprintln!(
                "note: kubectl {v} is not on this image ({}); testing the others",
                p.display()
            );
        }
    }
    out
}

/// Every kubectl build on the image: /usr/bin/kubectl and each
/// /usr/lib/google-cloud-sdk/bin/kubectl.1.N, oldest first. For the tests of what changed
/// most across releases (OpenAPI v2 in protobuf before 1.29, v3 after; apply and edit).
pub fn kubectl_every_build() -> Vec<PathBuf> {
    let mut out = kubectl_builds();
    if out.is_empty() {
        return out;
    }
    let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/google-cloud-sdk/bin")
        .map(|dir| {
            dir.filter_map(|e| {
                let path = e.ok()?.path();
                let minor = path
                    .file_name()?
                    .to_str()?
                    .strip_prefix("kubectl.1.")?
                    .parse()
                    .ok()?;
                Some((minor, path))
            })
            .collect()
        })
        .unwrap_or_default();
    versioned.sort();
    out.truncate(1);
    out.extend(versioned.into_iter().map(|(_, p)| p));
    out
}

/// Reads a watch body frame by frame (newline-delimited JSON), each read bounded in time.
pub struct Frames {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

impl Frames {
    pub async fn open(server: &Server, path: &str) -> Frames {
        let (code, frames) = Frames::open_any(server, path).await;
        assert_eq!(code, 200, "a watch always answers 200");
        frames
    }

    /// Opens a watch whatever the status, returning it with the frames.
    pub async fn open_any(server: &Server, path: &str) -> (u16, Frames) {
        Frames::open_accepting(server, path, "application/json").await
    }

    /// Opens a watch with an Accept header (a Table watch, as kubectl asks for one).
    pub async fn open_accepting(server: &Server, path: &str, accept: &str) -> (u16, Frames) {
        let uri = format!("http://{}{path}", server.addr());
        let req = http::Request::get(uri)
            .header("accept", accept)
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let resp = http().request(req).await.expect("watch opens");
        (
            resp.status().as_u16(),
            Frames {
                body: resp.into_body(),
                buf: Vec::new(),
            },
        )
    }

    /// The rest of the body, whole, bounded in time: the answer of a watch refused with an
    /// error status.
    pub async fn rest(mut self) -> Bytes {
        let more = tokio::time::timeout(Duration::from_secs(30), self.body.collect())
            .await
            .expect("the body in time")
            .expect("the body")
            .to_bytes();
        self.buf.extend_from_slice(&more);
        Bytes::from(self.buf)
    }

    /// The next frame, or None at the end of the stream.
    pub async fn next(&mut self) -> Option<serde_json::Value> {
        let line = self.next_line().await?;
        Some(serde_json::from_slice(&line).expect("a JSON frame"))
    }

    /// The next frame if one arrives within `wait`: `Err(())` when none did, `Ok(None)` at
    /// the end of the stream.
    pub async fn next_within(&mut self, wait: Duration) -> Result<Option<serde_json::Value>, ()> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(serde_json::from_slice(&line).expect("a JSON frame")));
            }
            match tokio::time::timeout(wait, self.body.frame()).await {
                Err(_) => return Err(()),
                Ok(None) => return Ok(None),
                Ok(Some(frame)) => {
                    if let Ok(data) = frame.expect("body").into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next frame's type, read from its prefix (frames are `{"type":"…","object":…}`).
    pub async fn next_type(&mut self) -> Option<String> {
        let line = self.next_line().await?;
        let rest = line.strip_prefix(br#"{"type":""#).expect("a watch frame");
        let end = rest.iter().position(|b| *b == b'"').expect("a quoted type");
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    }

    pub async fn next_line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                return Some(self.buf.drain(..=i).collect());
            }
            let frame = tokio::time::timeout(Duration::from_secs(30), self.body.frame())
                .await
                .expect("a frame in time")?;
            if let Ok(data) = frame.expect("body").into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }
}

/// The lines a child process (kubectl `get -w`) writes to its piped standard output, each
/// awaited for at most 30 s.
pub struct OutputLines(tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>);

impl OutputLines {
    /// The lines of `child`'s standard output, which must be piped.
    pub fn of(child: &mut tokio::process::Child) -> OutputLines {
        use tokio::io::AsyncBufReadExt;
        let stdout = child.stdout.take().expect("standard output is piped");
        OutputLines(tokio::io::BufReader::new(stdout).lines())
    }

    /// The next line; panics when none comes within 30 s or the output ends.
    pub async fn next(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(30), self.0.next_line())
            .await
            .expect("a line in time")
            .expect("standard output")
            .expect("a line")
    }
}
