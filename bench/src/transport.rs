//! What idle connections and streams cost the server, measured on the `watchcache` binary in
//! a process of its own (its RSS, from /proc), and how many writes one event fanned out to the
//! streams of one HTTP/2 connection costs (strace): the `transport-memory` scenario.
//! `cargo run --release -p watchcache-bench -- transport-memory`.
//!
//! On the 2-core CI machine (release build, mimalloc, 1,000 of each; four other builds
//! sharing the cores, load average 6 to 9), issue 23, before → after, ranges of 3 to 4 runs:
//! an idle TLS connection with HTTP/1.1 29–32.5 → 9.0–9.6 KiB; with HTTP/2 and no stream
//! 44.6–44.9 → 28.8–29.6 KiB (h2 allocates a 16 KiB write and an 8 KiB read buffer per
//! connection up front); an idle watch on an HTTP/2 stream 7.6–12.3 → 1.8–3.1 KiB. Where the
//! bytes went and go: BENCHMARKS.md, "Transport". One event of 2.4 KiB to 100 watches of one
//! connection: 5 to 6 socket writes (the first frame alone, then the rest in writes of at
//! most 64 KiB, `coalesce.rs`); without `Coalesce`, h2 writes each data frame past 256 bytes
//! on its own.
//!
//! A failure to start the server, connect or read is a panic with what failed: the figures
//! would mean nothing past it.
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// What the scenario measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Connections or streams opened for each idle figure.
    pub count: usize,
    /// An idle TLS connection with HTTP/1.1, handshake done, in KiB of server RSS.
    pub tls_h1_kib: f64,
    /// An idle TLS connection with HTTP/2, settings exchanged, no stream, in KiB.
    pub tls_h2_kib: f64,
    /// An idle watch on a stream of one HTTP/2 connection over TLS, in KiB.
    pub h2_stream_kib: f64,
    /// Watches of one plaintext HTTP/2 connection the event went to.
    pub streams: usize,
    /// Socket writes of more than 8 bytes after the event (the POST's answer among them), as
    /// strace printed them.
    pub writes: Vec<String>,
}

/// A server process, killed when the measurement ends, even by a panic.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_kib(pid: u32) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn serve(binary: &Path, dir: &Path) -> (Killed, String) {
    launch(binary, &["--cert-dir", dir.to_str().unwrap()], "https")
}

/// Starts the binary on a free loopback port with `flags`; it and the address it announces
/// for `scheme`.
fn launch(binary: &Path, flags: &[&str], scheme: &str) -> (Killed, String) {
    let mut child = Killed(
        Command::new(binary)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(flags)
            .env("RUST_LOG", "warn")
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts"),
    );
    let mut stderr = BufReader::new(child.0.stderr.take().expect("stderr"));
    let announced = format!("watchcache: serving on {scheme}://");
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).expect("stderr") > 0,
            "the server exited early"
        );
        if let Some(rest) = line.trim().strip_prefix(announced.as_str()) {
            let addr = rest.to_owned();
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            return (child, addr);
        }
    }
}

fn client(dir: &Path, alpn: &[u8]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(dir.join("admin.crt"))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(dir.join("admin.key")).unwrap(),
            )
            .unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What each of `n` more of what `open` opens costs the server, in KiB of RSS, measured on a
/// fresh server after one was opened (so that what the first one sets up is not counted).
async fn cost<T>(binary: &Path, n: usize, open: impl AsyncFn(&Path, &str) -> T) -> f64 {
    let dir = std::env::temp_dir().join(format!("watchcache-memory-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (child, addr) = serve(binary, &dir);
    let pid = child.0.id();
    let warm = open(&dir, &addr).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_kib(pid);
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(open(&dir, &addr).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(pid);
    drop((held, warm, child));
    let _ = std::fs::remove_dir_all(dir);
    (after - before) as f64 / n as f64
}

async fn tls(dir: &Path, addr: &str, alpn: &[u8]) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    client(dir, alpn).connect(name, tcp).await.unwrap()
}

/// The three idle figures, `n` of each; `phase(i)` after the `i`-th.
async fn idle_tls_connections_and_idle_http2_watch_streams(
    binary: &Path,
    n: usize,
    out: &mut Outcome,
    phase: &(dyn Fn(u64) + Sync),
) {
    out.count = n;
    out.tls_h1_kib = cost(binary, n, async |dir: &Path, addr: &str| {
        tls(dir, addr, b"http/1.1").await
    })
    .await;
    phase(1);
    out.tls_h2_kib = cost(binary, n, async |dir: &Path, addr: &str| {
        let (send, conn) = h2::client::handshake(tls(dir, addr, b"h2").await).await.unwrap();
        (send, tokio::spawn(conn))
    })
    .await;
    phase(2);
    // Streams of one connection, which the first call opens.
    let shared: tokio::sync::Mutex<Option<h2::client::SendRequest<bytes::Bytes>>> =
        tokio::sync::Mutex::new(None);
    out.h2_stream_kib = cost(binary, n - 1, async |dir: &Path, addr: &str| {
        let mut shared = shared.lock().await;
        if shared.is_none() {
            let (send, conn) = h2::client::handshake(tls(dir, addr, b"h2").await).await.unwrap();
            tokio::spawn(conn);
            *shared = Some(send);
        }
        let send = shared.as_mut().unwrap();
        let request = http::Request::get(format!(
            "https://{addr}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=3600"
        ))
        .body(())
        .unwrap();
        let response = send.send_request(request, true).unwrap().0.await.unwrap();
        assert_eq!(response.status(), 200);
        response.into_body()
    })
    .await;
    phase(3);
}

/// Starts the binary on plaintext; its address.
fn serve_plaintext(binary: &Path) -> (Killed, String) {
    launch(binary, &[], "http")
}

/// A request of one HTTP/1.1 connection of its own: the status line.
fn http1(addr: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = tcp.read_to_string(&mut out);
    out.lines().next().unwrap_or_default().to_owned()
}

async fn one_event_to_streams_of_one_connection(binary: &Path, streams_wanted: usize, out: &mut Outcome) {
    let (child_guard, addr) = serve_plaintext(binary);
    let pid = child_guard.0.id();
    let post = |path: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    assert!(
        http1(
            &addr,
            &post("/api/v1/namespaces", r#"{"metadata":{"name":"fan"}}"#)
        )
        .contains("201")
    );
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // A connection window as large as Go's (1 GiB) would do: the streams are read one after
    // another, and with a small one the first unread streams would hold it all.
    let (mut send, conn) = h2::client::Builder::new()
        .initial_connection_window_size(16 << 20)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut bodies = Vec::new();
    for _ in 0..streams_wanted {
        let request = http::Request::get(format!("http://{addr}/api/v1/namespaces/fan/configmaps?watch=1"))
            .body(())
            .unwrap();
        send = send.ready().await.unwrap();
        let (response, _) = send.send_request(request, true).unwrap();
        bodies.push(response);
    }
    let mut streams = Vec::new();
    for r in bodies {
        streams.push(r.await.unwrap().into_body());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let trace = std::env::temp_dir().join(format!("watchcache-fanout-{pid}.strace"));
    let mut strace = Command::new("strace")
        .args(["-f", "-e", "trace=write,writev,sendto,sendmsg", "-s", "0", "-o"])
        .arg(&trace)
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .expect("strace runs");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // An event of about 2.3 KiB: h2 copies a data frame of up to 256 bytes into its buffer,
    // and flushes before it takes each larger one.
    let blob = "x".repeat(2048);
    let event = format!(r#"{{"metadata":{{"name":"one-event"}},"data":{{"blob":"{blob}"}}}}"#);
    let created = http1(&addr, &post("/api/v1/namespaces/fan/configmaps", &event));
    assert!(created.contains("201"), "{created}");
    for (i, body) in streams.iter_mut().enumerate() {
        let mut got = Vec::new();
        while !got.ends_with(b"\n") {
            let data = tokio::time::timeout(Duration::from_secs(10), body.data())
                .await
                .unwrap_or_else(|_| panic!("stream {i} after {} bytes", got.len()))
                .unwrap()
                .unwrap();
            let _ = body.flow_control().release_capacity(data.len());
            got.extend_from_slice(&data);
        }
        assert!(got.starts_with(br#"{"type":"ADDED""#));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status();
    let _ = strace.wait();
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    // Writes of more than one frame's worth: the watch events (the eventfd writes of the
    // runtime are 8 bytes, the POST's answer is one writev).
    out.streams = streams_wanted;
    out.writes = text
        .lines()
        .filter(|l| {
            l.contains("writev(") || l.contains("sendto(") || l.contains("sendmsg(") || l.contains("write(")
        })
        .filter(|l| !l.trim_end().ends_with("= 8"))
        .map(str::to_owned)
        .collect();
    let _ = std::fs::remove_file(trace);
    drop(child_guard);
}

/// Runs both measurements on `binary`: `count` of each idle thing, one event to `streams`
/// watches of one connection; `phase(i)` after each of the four parts.
pub fn run(binary: &Path, count: usize, streams: usize, phase: &(dyn Fn(u64) + Sync)) -> Outcome {
    assert!(count >= 2 && streams >= 1, "at least two of each and one stream");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut out = Outcome::default();
    runtime.block_on(idle_tls_connections_and_idle_http2_watch_streams(
        binary, count, &mut out, phase,
    ));
    runtime.block_on(one_event_to_streams_of_one_connection(binary, streams, &mut out));
    phase(4);
    out
}
