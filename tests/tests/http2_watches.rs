//! HTTP/2: many watches on one connection, each a stream. A stream whose client stops
//! reading holds up none of the others and is reset once its deadline and the grace period
//! have passed; shutdown ends the streams cleanly after GOAWAY; the streams of a connection
//! are limited by `--http2-max-streams-per-connection`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use watchcache_tests::tls::{client_config, connect_tls, h2_body, h2_connect, h2_get, temp_dir};
use watchcache_tests::{ServeConfig, Server, config, create_namespaces, http, request, start};

const STREAMS: usize = 100;
const EVENTS: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_holds_up_none_of_the_99_others_and_is_reset_after_its_deadline_and_grace() {
    let server = start(ServeConfig {
        shutdown_grace: Duration::from_secs(1),
        ..config(0)
    })
    .await;
    create_namespaces(&server, &["h2"]).await;
    // Plaintext HTTP/2 by prior knowledge; every stream opens a 16 KiB window.
    let tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, conn) = h2_connect(tcp, 16 * 1024).await;
    let authority = server.addr().to_string();
    // Long enough for the writes below on a busy machine.
    let path = "/api/v1/namespaces/h2/configmaps?watch=1&timeoutSeconds=8";
    let opened = Instant::now();
    let mut bodies = Vec::new();
    for _ in 0..STREAMS {
        let (code, body) = h2_get(&mut send, &authority, path).await;
        assert_eq!(code, 200);
        bodies.push(body);
    }
    // The first stream is never read: its window closes after a few events.
    let mut stalled = bodies.remove(0);
    let seen = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = bodies
        .into_iter()
        .map(|mut body| {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut added = 0;
                let mut buf = Vec::new();
                while let Some(data) = body.data().await {
                    let data = data.expect("a healthy stream is never reset");
                    let _ = body.flow_control().release_capacity(data.len());
                    buf.extend_from_slice(&data);
                    while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=i).collect();
                        if line.starts_with(br#"{"type":"ADDED""#) {
                            added += 1;
                            seen.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                added
            })
        })
        .collect();
    // 30 ConfigMaps of about 2 KiB: some 70 KiB for each watch, far past the stalled
    // stream's window.
    let client = http();
    for i in 0..EVENTS {
        let body = serde_json::json!({
            "metadata": {"name": format!("cm-{i}")},
            "data": {"blob": "x".repeat(2048)},
        });
        let (code, out) = request(
            &client,
            &server,
            "POST",
            "/api/v1/namespaces/h2/configmaps",
            Some(body),
        )
        .await;
        assert_eq!(code, 201, "{}", String::from_utf8_lossy(&out));
    }
    let deadline = opened + Duration::from_secs(8);
    while seen.load(Ordering::Relaxed) < (STREAMS - 1) * EVENTS {
        assert!(
            Instant::now() < deadline,
            "the 99 streams received {} of {} events before their deadline",
            seen.load(Ordering::Relaxed),
            (STREAMS - 1) * EVENTS
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for reader in readers {
        // Each ends cleanly at its deadline with every event.
        assert_eq!(reader.await.unwrap(), EVENTS);
    }
    // The stalled stream: reset once its deadline (8 s) and the grace (1 s) have passed. It is
    // read only after that, so that reading gives it no window before.
    tokio::time::sleep_until((opened + Duration::from_secs(11)).into()).await;
    let ended = h2_body(&mut stalled).await;
    let err = ended.expect_err("the stalled stream is reset, not ended");
    assert_eq!(err.reason(), Some(h2::Reason::CANCEL), "{err}");
    // The connection goes on.
    let (code, mut body) = h2_get(&mut send, &authority, "/version").await;
    assert_eq!(code, 200);
    assert!(h2_body(&mut body).await.unwrap().starts_with(b"{"));
    drop(send);
    server.shutdown().await.unwrap();
    let _ = conn.await;
}

/// An HTTP/2 connection over TLS (ALPN `h2`) with the admin certificate of `dir`.
async fn h2_over_tls(
    server: &Server,
    dir: &Path,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tls = client_config(
        &dir.join("ca.crt"),
        Some((&dir.join("admin.crt"), &dir.join("admin.key"))),
        &[b"h2"],
    );
    let stream = connect_tls(server.addr(), tls).await.expect("TLS connects");
    assert_eq!(
        stream.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "ALPN chose h2"
    );
    h2_connect(stream, 64 * 1024).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_watch_ends_cleanly_at_shutdown_after_goaway() {
    let dir = temp_dir("h2-goaway");
    let server = Server::start(ServeConfig {
        cert_dir: Some(dir.clone()),
        ..config(3)
    })
    .await
    .expect("the server starts");
    let (mut send, conn) = h2_over_tls(&server, &dir).await;
    let authority = server.addr().to_string();
    // Wait for the caches (they answer 200 once ready).
    let ready_by = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, mut body) = h2_get(&mut send, &authority, "/readyz").await;
        let _ = h2_body(&mut body).await;
        if code == 200 {
            break;
        }
        assert!(Instant::now() < ready_by, "ready in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, mut watch) = h2_get(&mut send, &authority, "/api/v1/pods?watch=1&resourceVersion=0").await;
    assert_eq!(code, 200);
    let mut got = Vec::new();
    while got.windows(5).filter(|w| w == b"ADDED").count() < 3 {
        let data = watch.data().await.expect("the initial events").unwrap();
        let _ = watch.flow_control().release_capacity(data.len());
        got.extend_from_slice(&data);
    }
    drop(send);
    let started = Instant::now();
    let shutdown = tokio::spawn(server.shutdown());
    let rest = tokio::time::timeout(Duration::from_secs(5), h2_body(&mut watch))
        .await
        .expect("the watch ends at shutdown");
    assert!(rest.is_ok(), "a clean end of stream, not a reset: {rest:?}");
    let conn = tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the connection closes")
        .unwrap();
    // The server reads what the client still sends after its last stream (a window update
    // for what it read) before it closes: the client never meets a reset.
    assert!(conn.is_ok(), "closed after GOAWAY, cleanly: {conn:?}");
    shutdown.await.unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "well within the grace period"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streams_of_a_connection_are_limited_by_the_flag() {
    let server = start(ServeConfig {
        http2_max_streams_per_connection: 3,
        ..config(0)
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, conn) = h2_connect(tcp, 64 * 1024).await;
    let (code, mut body) = h2_get(&mut send, &server.addr().to_string(), "/version").await;
    assert_eq!(code, 200);
    let _ = h2_body(&mut body).await;
    assert_eq!(send.current_max_send_streams(), 3);
    drop(send);
    server.shutdown().await.unwrap();
    let _ = conn.await;
}
