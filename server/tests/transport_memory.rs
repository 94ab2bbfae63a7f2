//! What idle connections and streams cost the server, measured on the `watchcache` binary in
//! a process of its own (its RSS, from /proc): an idle TLS connection, and an idle watch on
//! an HTTP/2 stream. Run by hand; it prints the figures:
//! `cargo test -p watchcache-server --release --test transport_memory -- --ignored --nocapture`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn serve(dir: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--cert-dir",
            dir.to_str().unwrap(),
        ])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).expect("stderr") > 0,
            "the server exited early"
        );
        if let Some(rest) = line.trim().strip_prefix("watchcache: serving on https://") {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by hand"]
async fn idle_tls_connections_and_idle_http2_watch_streams_cost_little() {
    const CONNECTIONS: usize = 1000;
    const STREAMS: usize = 1000;
    let dir = std::env::temp_dir().join(format!("watchcache-memory-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut child, addr) = serve(&dir);
    let pid = child.id();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    // Warm up: one connection of each kind, one watch.
    let h1 = client(&dir, b"http/1.1");
    let h2c = client(&dir, b"h2");
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let warm = h1.connect(name.clone(), tcp).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_kib(pid);
    let mut idle = Vec::new();
    for _ in 0..CONNECTIONS {
        let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        idle.push(h1.connect(name.clone(), tcp).await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(pid);
    println!(
        "{CONNECTIONS} idle TLS connections (handshake done, HTTP/1.1): {} KiB, {:.1} KiB each",
        after - before,
        (after - before) as f64 / CONNECTIONS as f64
    );
    drop(idle);
    drop(warm);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let tls = h2c.connect(name.clone(), tcp).await.unwrap();
    let (mut send, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let mut watch = |path: &str| {
        let request = axum::http::Request::get(format!("https://{addr}{path}"))
            .body(())
            .unwrap();
        send.send_request(request, true).unwrap().0
    };
    let mut responses = vec![watch(
        "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=3600",
    )];
    let first = responses.pop().unwrap().await.unwrap();
    assert_eq!(first.status(), 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_kib(pid);
    for _ in 0..STREAMS - 1 {
        responses.push(watch(
            "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=3600",
        ));
    }
    let mut bodies = vec![first.into_body()];
    for r in responses {
        let r = r.await.unwrap();
        assert_eq!(r.status(), 200);
        bodies.push(r.into_body());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(pid);
    println!(
        "{} idle watches on HTTP/2 streams of one TLS connection: {} KiB, {:.2} KiB each",
        STREAMS - 1,
        after - before,
        (after - before) as f64 / (STREAMS - 1) as f64
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
