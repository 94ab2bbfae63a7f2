//! Trailers on a GET's HTTP/2 stream: h2 keeps trailers for a body the server does not read
//! until the stream ends, so each long watch could be made to hold a header list (up to
//! 128 KiB) beyond the connection's bound on held request bytes. The server reads and drops
//! them. Alone in its binary: it counts the live heap of the process (server and client).

use std::time::Duration;

use tokio::net::TcpStream;
use watchcache_tests::tls::h2_connect;
use watchcache_tests::{ServeConfig, config, start};

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_sent_on_open_watches_are_not_held() {
    let server = start(ServeConfig {
        http2_held_request_bytes: 1 << 20,
        ..config(0)
    })
    .await;
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, _conn) = h2_connect(tcp, 64 * 1024).await;
    let before = live_bytes();
    let mut open = Vec::new();
    // 300 watches, each sending about 117 KB of trailers in literal (unshared) values: 35 MB
    // held if they were kept.
    for _ in 0..300 {
        send = send.ready().await.unwrap();
        let request =
            http::Request::get("http://x/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=600")
                .body(())
                .unwrap();
        let (response, mut body) = send.send_request(request, false).unwrap();
        let mut trailers = http::HeaderMap::new();
        for _ in 0..30 {
            let value: String = (0..3900).map(|_| fastrand::alphanumeric()).collect();
            trailers.append("x-a", http::HeaderValue::from_str(&value).unwrap());
        }
        body.send_trailers(trailers).unwrap();
        open.push((response, body));
    }
    for (response, _) in &mut open {
        let response = tokio::time::timeout(Duration::from_secs(30), response)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    // The client may still be sending trailers, and the server reading them: what is held
    // for good is what is still there after a while.
    let mut grew = usize::MAX;
    for _ in 0..100 {
        grew = live_bytes().saturating_sub(before);
        if grew < 8 << 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("live heap grew {grew} bytes");
    // The watches themselves, server and client side, are a few MiB.
    assert!(
        grew < 8 << 20,
        "300 watches and their trailers hold {} MiB",
        grew >> 20
    );
    drop(open);
    server.shutdown().await.unwrap();
}
