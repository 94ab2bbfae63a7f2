//! `/metrics` says what a cache keeps of older states: the snapshots paginated LISTs pin
//! (`watchcache_pinned_snapshots`) and the LISTs served from a state made by undoing the
//! window's events (`watchcache_undone_reads_total`). The `snapshots` bench scenario reads
//! both.

use bytes::Bytes;
use serde_json::Value;
use watchcache_server::workload::{node_count, pod, pod_key};
use watchcache_tests::{config, http, memory, request, start};

fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_snapshots_and_undone_reads_are_in_the_metrics() {
    let server = start(config(5)).await;
    let c = http();
    let metrics = async || {
        let (_, body) = request(&c, &server, "GET", "/metrics", None).await;
        String::from_utf8_lossy(&body).into_owned()
    };
    let pinned = "watchcache_pinned_snapshots{resource=\"pods\"}";
    let undone = "watchcache_undone_reads_total{resource=\"pods\"}";
    assert_eq!(metric(&metrics().await, pinned), 0);

    // A first page of several: its snapshot is pinned for the next pages.
    let (code, body) = request(&c, &server, "GET", "/api/v1/pods?limit=2", None).await;
    assert_eq!(code, 200);
    let page: Value = serde_json::from_slice(&body).expect("a PodList");
    assert!(page["metadata"]["continue"].is_string(), "{}", page["metadata"]);
    assert_eq!(metric(&metrics().await, pinned), 1);

    // Two writes; an Exact LIST at the first one's revision, which no LIST pinned, is made by
    // undoing the second.
    let write = |generation: u64| {
        let value = Bytes::from(pod(0, node_count(5), generation).to_string());
        memory(&server)
            .update(&pod_key(0), value, None)
            .expect("the pod is updated")
            .get()
    };
    let first = write(100);
    write(101);
    // A consistent read waits for the cache to reach the store's revision.
    let (code, _) = request(&c, &server, "GET", "/api/v1/pods", None).await;
    assert_eq!(code, 200);
    let before = metric(&metrics().await, undone);
    let exact = format!("/api/v1/pods?resourceVersion={first}&resourceVersionMatch=Exact");
    let (code, body) = request(&c, &server, "GET", &exact, None).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(metric(&metrics().await, undone), before + 1);
    server.shutdown().await.expect("a clean shutdown");
}
