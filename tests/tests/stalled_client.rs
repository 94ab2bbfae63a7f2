//! A client that stops reading, in a process of its own: the test measures the process's
//! RSS, which no other test may move while it runs.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use watchcache_tests::{Frames, config, start};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_lapped_alone_and_memory_stays_bounded() {
    let mut cfg = config(20);
    cfg.history = 64;
    // Only what a stalled client could make the server hold is measured: no snapshots kept for
    // paging beyond the window (they would hold the 48 MB of superseded versions for 75 s).
    cfg.snapshot_retention = Duration::ZERO;
    let server = start(cfg).await;
    let store = watchcache_tests::memory(&server).clone();
    // A raw connection that asks for a watch and never reads a byte.
    let mut stalled = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    stalled
        .write_all(
            format!(
                "GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: {}\r\n\r\n",
                server.addr()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // A healthy watcher that reads everything.
    let mut healthy = Frames::open(&server, "/api/v1/pods?watch=1&resourceVersion=0").await;
    for _ in 0..20 {
        assert_eq!(healthy.next().await.unwrap()["type"], "ADDED");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_before = rss_bytes();
    // 12,000 updates of about 4 KiB: 48 MB through the cache, far beyond the loopback socket
    // buffers (about 10 MB), so whatever the server kept for the stalled client would show.
    // The writer is paced against the healthy reader only (test pacing: the server never
    // waits for anyone); the stalled client falls behind without bound.
    const UPDATES: u64 = 12_000;
    let values: Vec<Bytes> = (0..20)
        .map(|i| Bytes::from(watchcache_server::workload::pod(i, 1, 7).to_string()))
        .collect();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let progress = seen.clone();
    let writer = tokio::task::spawn_blocking(move || {
        for g in 0..UPDATES {
            while g >= progress.load(std::sync::atomic::Ordering::Acquire) + 48 {
                std::thread::sleep(Duration::from_micros(200));
            }
            let i = (g % 20) as usize;
            store
                .update(
                    &format!("/registry/pods/ns-{}/web-{i:06}", i % 10),
                    values[i].clone(),
                    None,
                )
                .unwrap();
        }
    });
    for n in 1..=UPDATES {
        let kind = healthy
            .next_type()
            .await
            .expect("the healthy watcher keeps receiving");
        assert_eq!(kind, "MODIFIED", "the healthy watcher is never lapped");
        seen.store(n, std::sync::atomic::Ordering::Release);
    }
    writer.await.unwrap();
    let rss_after = rss_bytes();
    let grown = rss_after.saturating_sub(rss_before);
    eprintln!(
        "RSS grew by {} MiB while 48 MB passed a stalled client",
        grown >> 20
    );
    assert!(
        grown < 32 << 20,
        "memory grew by {grown} bytes: something buffers for the stalled client"
    );
    // The stalled connection: reading now yields what its buffers held, then an ERROR 410.
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stalled.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.contains("\"type\":\"ERROR\"") && text.contains("\"code\":410"),
        "the stalled watcher ended with 410"
    );
    server.shutdown().await.unwrap();
}
