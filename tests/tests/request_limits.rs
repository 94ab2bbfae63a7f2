//! What a client can make the server hold, and for how long: a request body has the request
//! timeout to arrive (504 after it), a GET's body is never read, the request bytes of one
//! HTTP/2 connection are bounded (a header list, and the header lists and bodies of its open
//! streams together), a connection with no request is closed after the idle timeout (a watch
//! is not idle), connections past `--max-connections` are closed as they are accepted, and
//! mutating requests past `--max-mutating-requests-inflight` are answered 429.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use watchcache_tests::tls::{h2_body, h2_connect};
use watchcache_tests::{ServeConfig, Server, config, create_namespaces, http, request_full, start};

/// A bound for what must happen, far past when it should: a test fails rather than hangs.
const BOUND: Duration = Duration::from_secs(30);

/// Writes `request` on `c` and reads until the server closes it: the status line and the body.
async fn exchange(c: &mut TcpStream, request: &[u8]) -> (String, String) {
    c.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, c.read_to_end(&mut answer))
        .await
        .expect("answered, and closed, in time")
        .unwrap();
    split(&answer)
}

fn split(answer: &[u8]) -> (String, String) {
    let answer = String::from_utf8_lossy(answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

fn reason(body: &str) -> String {
    let status: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    status["reason"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_still_coming_at_the_request_timeout_is_answered_504_and_its_connection_closed() {
    let server = start(ServeConfig {
        request_timeout: Duration::from_secs(1),
        ..config(0)
    })
    .await;
    let mut c = TcpStream::connect(server.addr()).await.unwrap();
    let len = 3_000_000;
    let head = format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    );
    c.write_all(head.as_bytes()).await.unwrap();
    // All but the last byte.
    let (status, body) = exchange(&mut c, &vec![b' '; len - 1]).await;
    assert_eq!(status, "HTTP/1.1 504 Gateway Timeout", "{body}");
    assert_eq!(reason(&body), "Timeout", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_is_answered_without_reading_the_body_it_announces() {
    let server = start(config(0)).await;
    let mut c = TcpStream::connect(server.addr()).await.unwrap();
    // A megabyte announced, none sent: the list is answered at once all the same.
    let request = "GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n\
                   Content-Length: 1000000\r\nConnection: close\r\n\r\n";
    let (status, body) = exchange(&mut c, request.as_bytes()).await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(body.contains("ConfigMapList"), "{body}");
}

/// A POST of a ConfigMap on `send` announcing `len` bytes of body; the body not sent.
fn post(send: &mut h2::client::SendRequest<Bytes>, len: usize, headers: &[(&str, &str)]) -> Open {
    let mut request = http::Request::post("http://x/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .header("content-length", len.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send.send_request(request.body(()).unwrap(), false)
        .expect("the stream is opened")
}

/// A request sent, its body still to come: its answer, and its body's sender.
type Open = (h2::client::ResponseFuture, h2::SendStream<Bytes>);

/// Sends `n` bytes of body on `stream` as its window allows; false if the server stopped
/// taking them (the window stays shut, or the stream is gone).
async fn send_body(stream: &mut h2::SendStream<Bytes>, mut n: usize) -> bool {
    while n > 0 {
        stream.reserve_capacity(n.min(1 << 20));
        let granted = tokio::time::timeout(
            Duration::from_secs(3),
            std::future::poll_fn(|cx| stream.poll_capacity(cx)),
        )
        .await;
        let Ok(Some(Ok(granted))) = granted else {
            return false;
        };
        let chunk = granted.min(n);
        if stream.send_data(Bytes::from(vec![b' '; chunk]), false).is_err() {
            return false;
        }
        n -= chunk;
    }
    true
}

/// The status of an answer that must come within [`BOUND`].
async fn status_of(response: h2::client::ResponseFuture) -> Result<u16, h2::Error> {
    let response = tokio::time::timeout(BOUND, response)
        .await
        .expect("an answer in time")?;
    Ok(response.status().as_u16())
}

/// What the streams of one HTTP/2 connection may hold in these tests (32 MiB in service).
const HELD: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_bodies_of_an_http2_connection_are_bounded_and_each_has_the_request_timeout() {
    let server = start(ServeConfig {
        request_timeout: Duration::from_secs(5),
        http2_held_request_bytes: HELD,
        ..config(0)
    })
    .await;
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, _conn) = h2_connect(tcp, 64 * 1024).await;
    // Bodies of 300 KB but their last byte, one stream after another, until the server stops
    // taking them: the connection may hold 1 MiB, three such bodies and their headers.
    let len = 300_000;
    let mut held = Vec::new();
    let refused = loop {
        assert!(
            held.len() < 10,
            "the server took 3 MB of bodies on one connection"
        );
        send = send.ready().await.unwrap();
        let (response, mut body) = post(&mut send, len, &[]);
        if send_body(&mut body, len - 1).await {
            held.push((response, body));
        } else {
            break response;
        }
    };
    assert_eq!(held.len(), 3, "bodies taken before the server stopped");
    assert_eq!(status_of(refused).await.unwrap(), 429, "the body past the bound");
    // The bodies taken are dropped at their deadline: 504 each.
    for (response, _body) in held {
        assert_eq!(status_of(response).await.unwrap(), 504);
    }
    // Their bytes are given back: a whole body is taken again.
    send = send.ready().await.unwrap();
    let object = br#"{"metadata":{"name":"after"}}"#;
    let (response, mut body) = post(&mut send, object.len(), &[]);
    body.send_data(Bytes::from_static(object), true).unwrap();
    assert_eq!(status_of(response).await.unwrap(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_header_list_over_128_kib_is_refused_and_the_open_streams_headers_are_bounded() {
    let server = start(ServeConfig {
        request_timeout: Duration::from_secs(20),
        http2_held_request_bytes: HELD,
        ..config(0)
    })
    .await;
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, _conn) = h2_connect(tcp, 64 * 1024).await;
    // One field of ~4 KB, which HPACK sends once and then as an index of a byte or two.
    let value = "v".repeat(3900);
    let fields = |n: usize| vec![("x-a", value.as_str()); n];
    // 40 of them: ~154 KiB decoded, past the limit.
    send = send.ready().await.unwrap();
    let (response, _) = post(&mut send, 10, &fields(40));
    match status_of(response).await {
        Ok(code) => assert_eq!(code, 431, "a header list of ~154 KiB"),
        Err(e) => assert!(e.is_reset(), "{e}"),
    }
    // 30: ~115 KiB each, under the limit, held while their bodies do not come: eight fit in
    // the connection's 1 MiB, and the streams past them are refused.
    let mut open = Vec::new();
    for _ in 0..12 {
        send = send.ready().await.unwrap();
        open.push(post(&mut send, 10, &fields(30)));
    }
    let last = open.split_off(8);
    for (response, _body) in last {
        let e = status_of(response).await.expect_err("refused");
        assert_eq!(e.reason(), Some(h2::Reason::REFUSED_STREAM), "{e}");
    }
    // Once the held streams are reset by the client, a stream of the same headers is served.
    drop(open);
    let served = async {
        loop {
            send = send.clone().ready().await.unwrap();
            let mut request = http::Request::get("http://x/healthz");
            for (name, value) in fields(30) {
                request = request.header(name, value);
            }
            let (response, _) = send.send_request(request.body(()).unwrap(), true).unwrap();
            if let Ok(200) = status_of(response).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(BOUND, served)
        .await
        .expect("served once the streams are reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_requests_is_closed_after_the_idle_timeout_and_a_watch_is_not_idle() {
    let server = start(ServeConfig {
        idle_timeout: Duration::from_secs(1),
        ..config(0)
    })
    .await;
    create_namespaces(&server, &["idle"]).await;
    // HTTP/2, no stream: GOAWAY, and the client's connection ends.
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (_send, conn) = h2_connect(tcp, 64 * 1024).await;
    tokio::time::timeout(BOUND, conn)
        .await
        .expect("the idle connection is closed")
        .unwrap()
        .expect("closed cleanly, by GOAWAY");
    // HTTP/1 kept alive after a request: closed too.
    let mut c = TcpStream::connect(server.addr()).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, c.read_to_end(&mut answer))
        .await
        .expect("the kept-alive connection is closed")
        .unwrap();
    assert_eq!(split(&answer).0, "HTTP/1.1 200 OK");
    // A watch on HTTP/2 outlives the idle timeout: an object made after it is delivered.
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, _conn) = h2_connect(tcp, 64 * 1024).await;
    let path = "/api/v1/namespaces/idle/configmaps?watch=1&timeoutSeconds=10";
    let (code, mut events) = watchcache_tests::tls::h2_get(&mut send, "x", path).await;
    assert_eq!(code, 200);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let made = watchcache_tests::request(
        &watchcache_tests::http(),
        &server,
        "POST",
        "/api/v1/namespaces/idle/configmaps",
        Some(serde_json::json!({"metadata": {"name": "late"}})),
    )
    .await;
    assert_eq!(made.0, 201);
    let seen = tokio::time::timeout(BOUND, h2_body(&mut events))
        .await
        .expect("the watch ends at its timeout")
        .expect("the watch's stream is not reset");
    assert!(String::from_utf8_lossy(&seen).contains(r#""name":"late""#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_max_connections_are_closed_as_accepted_and_counted() {
    let server = start(ServeConfig {
        max_connections: 2,
        ..config(0)
    })
    .await;
    let health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    // Two connections served and kept open. The readiness check's connection may still hold
    // a place for a moment after its client closed it (the server has yet to read the close):
    // a connection refused meanwhile is tried again.
    let mut kept = Vec::new();
    let open_two = async {
        while kept.len() < 2 {
            let mut c = TcpStream::connect(server.addr()).await.unwrap();
            let _ = c.write_all(health).await;
            let mut buf = [0; 256];
            match c.read(&mut buf).await {
                Ok(n) if buf[..n].starts_with(b"HTTP/1.1 200") => kept.push(c),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    };
    tokio::time::timeout(BOUND, open_two)
        .await
        .expect("two connections served");
    let before = refused(&server);
    let mut third = TcpStream::connect(server.addr()).await.unwrap();
    let _ = third.write_all(health).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, third.read_to_end(&mut answer))
        .await
        .expect("closed at once");
    assert!(read.is_err() || answer.is_empty(), "no answer: {answer:?}");
    assert_eq!(refused(&server), before + 1);
    // One of the two closes: its place goes to the next connection.
    drop(kept.pop());
    let served = async {
        loop {
            let mut c = TcpStream::connect(server.addr()).await.unwrap();
            let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
            let _ = c.write_all(request).await;
            let mut answer = Vec::new();
            let _ = c.read_to_end(&mut answer).await;
            if answer.starts_with(b"HTTP/1.1 200") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(BOUND, served)
        .await
        .expect("served once a place is free");
}

fn refused(server: &Server) -> u64 {
    server.metrics().connections_refused.get()
}

/// Opens a POST of a configmap on a connection of its own and sends one byte of its body of
/// 100: the request holds its place among the mutating requests in flight while it waits for
/// the rest.
async fn post_held(server: &Server) -> TcpStream {
    let mut c = TcpStream::connect(server.addr()).await.unwrap();
    let head = "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n\
                Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
    c.write_all(head.as_bytes()).await.unwrap();
    c
}

/// POSTs configmaps named `{name}-{i}` until one is answered other than 201, a tenth of a
/// second apart (the held requests take their places once the server has read their
/// headers), at most `tries` times: that answer (code, Retry-After, body).
async fn post_until_refused(
    server: &Server,
    name: &str,
    tries: usize,
) -> Option<(u16, Option<String>, String)> {
    let path = "/api/v1/namespaces/default/configmaps";
    for i in 0..tries {
        let cm = serde_json::json!({"metadata": {"name": format!("{name}-{i}")}});
        let (code, headers, body) = request_full(&http(), server, "POST", path, Some(cm)).await;
        if code != 201 {
            let retry = headers
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            return Some((code, retry, String::from_utf8_lossy(&body).into_owned()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// `--max-mutating-requests-inflight` bounds the mutating requests in flight across all
/// connections, from before their body is read: past it a POST is answered at once with the
/// apiserver's 429 and `Retry-After: 1`, while reads go on and `system:masters` is let through;
/// a place given back (its client gone) is taken again; and 0 bounds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_requests_in_flight_are_bounded_across_connections_and_reads_are_not() {
    const MAX: usize = 2;
    let tokens = std::env::temp_dir().join(format!("watchcache-inflight-{}.csv", std::process::id()));
    std::fs::write(&tokens, "admin-token,admin,1000,system:masters\n").unwrap();
    let server = start(ServeConfig {
        max_mutating_requests_inflight: MAX,
        request_timeout: Duration::from_secs(120),
        token_auth_file: Some(tokens.clone()),
        ..config(0)
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..MAX {
        held.push(post_held(&server).await);
    }
    let (code, retry, body) = post_until_refused(&server, "past", 300)
        .await
        .expect("a POST past the bound is refused");
    assert_eq!(code, 429, "{body}");
    assert_eq!(retry.as_deref(), Some("1"));
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "TooManyRequests", "{status}");
    assert_eq!(
        status["message"], "Too many requests, please try again later.",
        "{status}"
    );
    assert_eq!(status["details"]["retryAfterSeconds"], 1, "{status}");

    let path = "/api/v1/namespaces/default/configmaps";
    let (code, _, _) = request_full(&http(), &server, "GET", path, None).await;
    assert_eq!(code, 200, "a read is not bounded by the mutating requests");
    // The apiserver lets system:masters through past the bound.
    let body = r#"{"metadata":{"name":"by-admin"}}"#;
    let mut c = TcpStream::connect(server.addr()).await.unwrap();
    let post = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-token\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (line, answer) = exchange(&mut c, post.as_bytes()).await;
    assert!(line.contains(" 201 "), "{line} {answer}");

    // A held request whose client goes gives its place back.
    drop(held.pop());
    let mut freed = false;
    for i in 0..300 {
        let cm = serde_json::json!({"metadata": {"name": format!("freed-{i}")}});
        let (code, _, _) = request_full(&http(), &server, "POST", path, Some(cm)).await;
        if code == 201 {
            freed = true;
            break;
        }
        assert_eq!(code, 429);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "the place of a request whose client went is taken again");
    drop(held);
    let _ = std::fs::remove_file(&tokens);

    let unbounded = start(ServeConfig {
        max_mutating_requests_inflight: 0,
        request_timeout: Duration::from_secs(120),
        ..config(0)
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..MAX + 1 {
        held.push(post_held(&unbounded).await);
    }
    // Every POST is created, the held ones' places taken or not.
    assert_eq!(
        post_until_refused(&unbounded, "free", 20).await.map(|a| a.0),
        None
    );
    drop(held);
}

/// Reads `s` until the server closes it, `chunk` bytes every `pause`, for at most `bound`;
/// what was read, or `None` if the connection was still open at the bound.
async fn read_paced(s: &mut TcpStream, chunk: usize, pause: Duration, bound: Duration) -> Option<usize> {
    let mut buf = vec![0u8; chunk];
    let mut read = 0usize;
    let reading = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return read,
                Ok(n) => read += n,
            }
            tokio::time::sleep(pause).await;
        }
    };
    tokio::time::timeout(bound, reading).await.ok()
}

/// An HTTP/1 socket with a small fixed receive buffer, `request` sent on it.
async fn small_buffered(server: &Server, request: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    let mut s = socket.connect(server.addr()).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_or_get_ends_at_the_request_timeout_and_its_deadline_ends_no_later_request() {
    // 2,000 pods: a LIST of about 8 MB.
    let server = start(ServeConfig {
        request_timeout: Duration::from_secs(1),
        shutdown_grace: Duration::from_millis(500),
        ..config(2000)
    })
    .await;
    let big = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big"}, "data": {"blob": "x".repeat(900_000)}});
    let (code, _, _) = request_full(
        &http(),
        &server,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(big),
    )
    .await;
    assert_eq!(code, 201);

    // A GET whose client opens a 1 KiB window and never reads is reset at the request timeout;
    // so is a GET by name with `watch=1`, which is a GET (the apiserver's rule).
    for path in [
        "/api/v1/namespaces/default/configmaps/big",
        "/api/v1/namespaces/default/configmaps/big?watch=1",
    ] {
        let (mut send, _conn) = h2_connect(TcpStream::connect(server.addr()).await.unwrap(), 1024).await;
        let (code, mut body) = watchcache_tests::tls::h2_get(&mut send, "x", path).await;
        assert_eq!(code, 200, "{path}");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let rest = tokio::time::timeout(BOUND, h2_body(&mut body))
            .await
            .expect("in time");
        assert!(
            rest.is_err(),
            "{path}: served past the request timeout ({:?} bytes)",
            rest.map(|b| b.len())
        );
    }

    // A LIST whose client reads, but slowly (64 KiB every 50 ms: its 8 MB would take 6.5 s), is
    // ended at the request timeout too, as the apiserver ends a request that is not
    // long-running. What the server's socket had taken by then (at most 4 MB) still arrives.
    let mut slow = small_buffered(
        &server,
        &format!("GET /api/v1/pods HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr()),
    )
    .await;
    let read = read_paced(&mut slow, 64 << 10, Duration::from_millis(50), BOUND)
        .await
        .expect("the LIST's connection is closed");
    assert!(read < 8 << 20, "the LIST was not cut short ({read} bytes)");

    // An answer hyper takes whole before it is sent (a Table, built in one piece: with each
    // pod's object, about 8 MB) to a client that reads nothing: its connection is dropped
    // once blocked for the grace past the request timeout, not held until shutdown.
    let table = format!(
        "GET /api/v1/pods?includeObject=Object HTTP/1.1\r\nHost: {}\r\nAccept: application/json;as=Table;v=v1;g=meta.k8s.io\r\n\r\n",
        server.addr()
    );
    let mut unread = small_buffered(&server, &table).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let read = read_paced(&mut unread, 1 << 16, Duration::ZERO, BOUND)
        .await
        .expect("the Table's connection is closed");
    assert!(read < 8 << 20, "the Table was not cut short ({read} bytes)");

    // A LIST, then a watch on the same HTTP/1 connection whose reader pauses for 4 s (past the
    // LIST's timeout and grace): the watch is held to its own deadline (600 s), not the LIST's.
    let mut c = small_buffered(
        &server,
        &format!(
            "GET /api/v1/namespaces/empty/configmaps HTTP/1.1\r\nHost: {}\r\n\r\n",
            server.addr()
        ),
    )
    .await;
    let mut answer = Vec::new();
    let mut buf = vec![0u8; 4096];
    while !answer.ends_with(b"0\r\n\r\n") {
        let n = tokio::time::timeout(BOUND, c.read(&mut buf))
            .await
            .expect("in time")
            .unwrap();
        assert!(n > 0, "the LIST's answer ended early");
        answer.extend_from_slice(&buf[..n]);
    }
    let watch = format!(
        "GET /api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=600 HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr()
    );
    c.write_all(watch.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Still open: reading drains the initial events and then waits for more.
    let read = read_paced(&mut c, 1 << 16, Duration::ZERO, Duration::from_secs(5)).await;
    assert_eq!(read, None, "the watch's connection was closed");
    server.shutdown().await.unwrap();
}
