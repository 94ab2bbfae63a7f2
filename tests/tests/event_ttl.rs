//! Events expire after `--event-ttl`, on the embedded store and on etcd, as kube-apiserver's
//! do: written on a store lease that the writes of one reuse window share, so that they go
//! together, at one revision, which every watcher and every consistent LIST sees whole. Other
//! kinds stay. The waits are bounded and nothing is timed (that nothing goes before its TTL is
//! `leases.rs`'s test, on paused time); the one clock read is the shared-lease test's check
//! that its Events were written within one window, which it makes again if not.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use watchcache_tests::{Backing, Frames, Server, http, request};

const TTL: Duration = Duration::from_secs(2);

/// An Event about the config map `kept` of its own namespace (an Event about an object
/// elsewhere is refused, as the apiserver refuses it).
fn event(ns: &str, name: &str, message: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"kind": "ConfigMap", "name": "kept", "namespace": ns},
        "reason": "Test", "message": message, "type": "Normal"
    })
}

async fn send(server: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let (code, out) = request(&http(), server, method, path, body).await;
    let v = serde_json::from_slice(&out)
        .unwrap_or_else(|_| panic!("{method} {path}: JSON: {}", String::from_utf8_lossy(&out)));
    (code, v)
}

/// A server with Events living `TTL`, whose leases are reused for at most `share` of it.
async fn start(backing: &Backing, share: f64) -> Server {
    let mut cfg = backing.config(0);
    cfg.event_ttl = TTL;
    cfg.lease_reuse_share = share;
    watchcache_tests::start(cfg).await
}

/// The collection's resourceVersion, from a consistent LIST.
async fn list_rv(server: &Server, path: &str) -> String {
    let (code, v) = send(server, "GET", path, None).await;
    assert_eq!(code, 200, "{v}");
    v["metadata"]["resourceVersion"].as_str().unwrap().to_owned()
}

/// The next `n` frames that are not bookmarks: `(type, name, resourceVersion)`.
async fn frames(w: &mut Frames, n: usize) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    while out.len() < n {
        let frame = w
            .next_within(Duration::from_secs(30))
            .await
            .unwrap_or_else(|()| panic!("no frame within 30 s after {out:?}"))
            .unwrap_or_else(|| panic!("the watch ended after {out:?}"));
        let kind = frame["type"].as_str().unwrap();
        if kind == "BOOKMARK" {
            continue;
        }
        let meta = &frame["object"]["metadata"];
        out.push((
            kind.to_owned(),
            meta["name"].as_str().unwrap_or_default().to_owned(),
            meta["resourceVersion"].as_str().unwrap().parse().unwrap(),
        ));
    }
    out
}

async fn an_event_goes_after_its_ttl_and_a_configmap_stays(etcd: bool) {
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    let server = start(&backing, 0.05).await;
    let events = "/api/v1/namespaces/default/events";
    let rv = list_rv(&server, events).await;
    let mut w = Frames::open(&server, &format!("{events}?watch=true&resourceVersion={rv}")).await;
    let (code, v) = send(&server, "POST", events, Some(event("default", "created", "once"))).await;
    assert_eq!(code, 201, "{v}");
    let (code, mut updated) = send(&server, "POST", events, Some(event("default", "updated", "once"))).await;
    assert_eq!(code, 201, "{updated}");
    updated["message"] = json!("twice");
    let (code, v) = send(&server, "PUT", &format!("{events}/updated"), Some(updated)).await;
    assert_eq!(code, 200, "{v}");
    let cm = json!({"metadata": {"name": "kept"}, "data": {"k": "v"}});
    let (code, v) = send(&server, "POST", "/api/v1/namespaces/default/configmaps", Some(cm)).await;
    assert_eq!(code, 201, "{v}");

    let written: Vec<_> = frames(&mut w, 3).await.into_iter().map(|f| (f.0, f.1)).collect();
    let written: Vec<_> = written.iter().map(|(t, n)| (t.as_str(), n.as_str())).collect();
    assert_eq!(
        written,
        [
            ("ADDED", "created"),
            ("ADDED", "updated"),
            ("MODIFIED", "updated")
        ]
    );
    let mut gone: Vec<_> = frames(&mut w, 2).await.into_iter().map(|f| (f.0, f.1)).collect();
    gone.sort();
    assert_eq!(
        gone,
        [
            ("DELETED".to_owned(), "created".to_owned()),
            ("DELETED".to_owned(), "updated".to_owned())
        ],
        "both Events expire, the updated one too"
    );
    for name in ["created", "updated"] {
        let (code, v) = send(&server, "GET", &format!("{events}/{name}"), None).await;
        assert_eq!(code, 404, "{name}: {v}");
    }
    let (code, v) = send(&server, "GET", "/api/v1/namespaces/default/configmaps/kept", None).await;
    assert_eq!(code, 200, "a ConfigMap has no TTL: {v}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_created_or_updated_goes_after_the_event_ttl_and_a_configmap_stays() {
    an_event_goes_after_its_ttl_and_a_configmap_stays(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_created_or_updated_goes_after_the_event_ttl_and_a_configmap_stays_on_etcd() {
    an_event_goes_after_its_ttl_and_a_configmap_stays(true).await;
}

/// Events created within one reuse window: one lease, one revision for their expiry.
const SHARED: usize = 5;

async fn events_of_one_window_go_at_one_revision(etcd: bool) {
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    // The whole TTL as the window: a lease of 4 s, taken by every Event of its first 2 s.
    let window = TTL;
    for attempt in 0..3 {
        let server = start(&backing, 1.0).await;
        let ns = format!("window-{attempt}");
        watchcache_tests::create_namespaces(&server, &[&ns]).await;
        let cm = json!({"metadata": {"name": "kept"}});
        let (code, v) = send(
            &server,
            "POST",
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            Some(cm),
        )
        .await;
        assert_eq!(code, 201, "{v}");
        let events = format!("/api/v1/namespaces/{ns}/events");
        let rv = list_rv(&server, &events).await;
        let mut w = Frames::open(&server, &format!("{events}?watch=true&resourceVersion={rv}")).await;
        let began = Instant::now();
        for i in 0..SHARED {
            let (code, v) = send(&server, "POST", &events, Some(event(&ns, &format!("e{i}"), "m"))).await;
            assert_eq!(code, 201, "{v}");
        }
        if began.elapsed() >= window {
            // A machine too busy to write five Events within the window: they may rightly
            // span two leases. Not what this test is about; again, on a fresh server.
            eprintln!(
                "note: {SHARED} Events took {:?}, more than the reuse window; again",
                began.elapsed()
            );
            server.shutdown().await.unwrap();
            continue;
        }
        // Every consistent LIST until they are gone sees all of them or none.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (code, v) = send(&server, "GET", &events, None).await;
            assert_eq!(code, 200, "{v}");
            let n = v["items"].as_array().unwrap().len();
            assert!(
                n == SHARED || n == 0,
                "a LIST at {} shows {n} of the {SHARED} Events of one lease",
                v["metadata"]["resourceVersion"]
            );
            if n == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "the Events are still there 30 s on");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let seen = frames(&mut w, 2 * SHARED).await;
        let (added, deleted) = seen.split_at(SHARED);
        assert!(added.iter().all(|f| f.0 == "ADDED"), "{seen:?}");
        assert!(deleted.iter().all(|f| f.0 == "DELETED"), "{seen:?}");
        let mut names: Vec<_> = deleted.iter().map(|f| f.1.clone()).collect();
        names.sort();
        assert_eq!(names, (0..SHARED).map(|i| format!("e{i}")).collect::<Vec<_>>());
        assert!(
            deleted.iter().all(|f| f.2 == deleted[0].2),
            "every DELETED at the lease's one revision: {deleted:?}"
        );
        let (code, v) = send(
            &server,
            "GET",
            &format!("/api/v1/namespaces/{ns}/configmaps/kept"),
            None,
        )
        .await;
        assert_eq!(code, 200, "{v}");
        server.shutdown().await.unwrap();
        return;
    }
    panic!("three times, {SHARED} Events took longer than the reuse window to write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_created_within_the_reuse_window_share_a_lease_and_go_at_one_revision() {
    events_of_one_window_go_at_one_revision(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_created_within_the_reuse_window_share_a_lease_and_go_at_one_revision_on_etcd() {
    events_of_one_window_go_at_one_revision(true).await;
}
