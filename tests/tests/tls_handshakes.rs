//! TLS: garbage and handshakes that never finish cost nothing past the handshake limit, a
//! replaced certificate is served to the next handshakes, `--cert-dir` is made once and
//! reused, and curl speaks HTTP/2 to the server (ALPN over TLS, prior knowledge on plaintext).

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use watchcache_tests::tls::{TestCa, client_config, connect_tls, temp_dir};
use watchcache_tests::{ServeConfig, Server, config};

/// A config serving TLS with certificates made in `dir`, handshakes limited to two seconds.
fn tls_config(dir: &Path) -> ServeConfig {
    ServeConfig {
        cert_dir: Some(dir.to_owned()),
        handshake_timeout: Duration::from_secs(2),
        ..config(0)
    }
}

/// GET `path` over HTTPS (HTTP/1.1) with the admin certificate of `dir`: the status and body.
async fn get_https(server: &Server, dir: &Path, path: &str) -> (u16, Bytes) {
    let tls = client_config(
        &dir.join("ca.crt"),
        Some((&dir.join("admin.crt"), &dir.join("admin.key"))),
        &[b"http/1.1"],
    );
    let stream = connect_tls(server.addr(), tls).await.expect("TLS connects");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1.1");
    tokio::spawn(conn);
    let request = http::Request::get(path)
        .header("host", "127.0.0.1")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), send.send_request(request))
        .await
        .expect("an answer in time")
        .expect("an answer");
    let code = response.status().as_u16();
    (
        code,
        response.into_body().collect().await.expect("the body").to_bytes(),
    )
}

/// Waits until the server closes `tcp` (EOF or an error), reading and dropping what it sends,
/// at most `limit` after `start`; how long after `start` that was.
async fn closed_within(tcp: &mut tokio::net::TcpStream, start: Instant, limit: Duration) -> Duration {
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((start + limit).into(), tcp.read(&mut buf)).await {
            Err(_) => panic!("the connection is still open after {limit:?}"),
            Ok(Ok(0) | Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_handshakes_that_never_finish_are_dropped_and_the_server_stays_healthy() {
    let dir = temp_dir("tls-garbage");
    let server = start_ready_tls(tls_config(&dir), &dir).await;
    // Garbage: refused at once.
    let mut garbage = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let sent = Instant::now();
    garbage.write_all(&[0x42; 300]).await.unwrap();
    let took = closed_within(&mut garbage, sent, Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(1),
        "garbage is refused at once, took {took:?}"
    );
    // Slowloris: a record header promising a ClientHello, then silence; and a connection that
    // never sends a byte. Both are dropped at the limit (two seconds here), and meanwhile the
    // server answers others.
    let connected = Instant::now();
    let mut slow = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    slow.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let mut silent = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let (code, _) = get_https(&server, &dir, "/healthz").await;
    assert_eq!(code, 200, "healthy during the slow handshakes");
    for tcp in [&mut slow, &mut silent] {
        let took = closed_within(tcp, connected, Duration::from_secs(5)).await;
        assert!(
            took >= Duration::from_millis(900),
            "dropped at the limit, not before: {took:?}"
        );
    }
    let (code, _) = get_https(&server, &dir, "/healthz").await;
    assert_eq!(code, 200, "healthy after");
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_connection_that_stops_in_the_preface_is_dropped_at_the_limit() {
    let server = watchcache_tests::start(ServeConfig {
        handshake_timeout: Duration::from_secs(1),
        ..config(0)
    })
    .await;
    let connected = Instant::now();
    let mut slow = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    slow.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let took = closed_within(&mut slow, connected, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(900), "{took:?}");
    let (code, _) =
        watchcache_tests::request(&watchcache_tests::http(), &server, "GET", "/healthz", None).await;
    assert_eq!(code, 200);
    server.shutdown().await.unwrap();
}

/// Starts a TLS server and waits until it is ready, asking over HTTPS.
async fn start_ready_tls(config: ServeConfig, dir: &Path) -> Server {
    let server = Server::start(config).await.expect("the server starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = get_https(&server, dir, "/readyz").await;
        if code == 200 {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "not ready: {}",
            String::from_utf8_lossy(&body)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The serving certificate a TLS handshake with `server` gets, as DER.
async fn served_cert(server: &Server, ca: &Path) -> Vec<u8> {
    let stream = connect_tls(server.addr(), client_config(ca, None, &[b"http/1.1"]))
        .await
        .expect("the handshake succeeds");
    let (_, session) = stream.get_ref();
    session.peer_certificates().expect("a certificate")[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_is_served_to_the_next_handshakes_without_a_restart() {
    let dir = temp_dir("tls-reload");
    let ca = TestCa::new(&dir, "test-ca");
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    let (first, first_key) = ca.serving("first");
    std::fs::write(&cert_path, &first).unwrap();
    std::fs::write(&key_path, &first_key).unwrap();
    // Handshakes are served before the caches are ready: no wait for /readyz.
    let server = Server::start(ServeConfig {
        tls_cert_file: Some(cert_path.clone()),
        tls_private_key_file: Some(key_path.clone()),
        ..config(0)
    })
    .await
    .expect("the server starts");
    let before = served_cert(&server, &ca.cert).await;
    assert_eq!(before, watchcache_tests::tls::certs(&cert_path)[0].to_vec());
    // Replaced as a certificate manager does: the key, then the certificate, each renamed
    // into place.
    let (second, second_key) = ca.serving("second");
    std::fs::write(dir.join("new.key"), &second_key).unwrap();
    std::fs::rename(dir.join("new.key"), &key_path).unwrap();
    std::fs::write(dir.join("new.crt"), &second).unwrap();
    std::fs::rename(dir.join("new.crt"), &cert_path).unwrap();
    let expected = watchcache_tests::tls::certs(&cert_path)[0].to_vec();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = served_cert(&server, &ca.cert).await;
        if now == expected {
            break;
        }
        assert!(Instant::now() < deadline, "the new certificate is not served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_dir_is_made_once_and_reused_after_a_restart() {
    let dir = temp_dir("tls-cert-dir");
    let server = start_ready_tls(tls_config(&dir), &dir).await;
    let files = [
        "ca.crt",
        "ca.key",
        "apiserver.crt",
        "apiserver.key",
        "admin.crt",
        "admin.key",
    ];
    let made: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(dir.join(f)).expect(f))
        .collect();
    let kubeconfig = std::fs::read_to_string(dir.join("admin.kubeconfig")).expect("a kubeconfig");
    assert!(
        kubeconfig.contains(&format!("server: https://{}", server.addr())),
        "{kubeconfig}"
    );
    server.shutdown().await.unwrap();
    let server = start_ready_tls(tls_config(&dir), &dir).await;
    for (f, before) in files.iter().zip(&made) {
        assert_eq!(&std::fs::read(dir.join(f)).unwrap(), before, "{f} is reused");
    }
    let kubeconfig = std::fs::read_to_string(dir.join("admin.kubeconfig")).unwrap();
    assert!(
        kubeconfig.contains(&format!("server: https://{}", server.addr())),
        "the kubeconfig names the new address: {kubeconfig}"
    );
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// curl's `%{http_version}` for a GET of /version with `args`.
async fn curl_version(args: &[&str], url: &str) -> Option<String> {
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
            "--max-time",
            "30",
        ])
        .args(args)
        .arg(url)
        .output()
        .await
        .ok()?;
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_speaks_http2_by_alpn_over_tls_and_by_prior_knowledge_on_plaintext() {
    let has_h2 = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("HTTP2"));
    if !has_h2 {
        watchcache_tests::missing("curl with HTTP/2");
        return;
    }
    let dir = temp_dir("tls-curl");
    let server = start_ready_tls(tls_config(&dir), &dir).await;
    let (ca, cert, key) = (dir.join("ca.crt"), dir.join("admin.crt"), dir.join("admin.key"));
    let url = format!("https://{}/version", server.addr());
    let tls_args = [
        "--cacert",
        ca.to_str().unwrap(),
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let mut h2 = tls_args.to_vec();
    h2.push("--http2");
    assert_eq!(curl_version(&h2, &url).await.as_deref(), Some("2 200"));
    let mut h1 = tls_args.to_vec();
    h1.push("--http1.1");
    assert_eq!(curl_version(&h1, &url).await.as_deref(), Some("1.1 200"));
    server.shutdown().await.unwrap();

    let plain = watchcache_tests::start(config(0)).await;
    let url = format!("http://{}/version", plain.addr());
    assert_eq!(
        curl_version(&["--http2-prior-knowledge"], &url).await.as_deref(),
        Some("2 200")
    );
    assert_eq!(curl_version(&[], &url).await.as_deref(), Some("1.1 200"));
    plain.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
