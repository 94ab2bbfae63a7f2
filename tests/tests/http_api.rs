//! The HTTP facade: every error is a metav1.Status with the apiserver's code, bad parameters
//! name themselves, watches that start too old or are lapped end in-stream with 410, and a
//! client that stops reading hurts nobody else.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use watchcache_core::MemorySource;
use watchcache_tests::{Frames, Server, config, create_namespaces, http, request, request_full, start};

fn status(body: &Bytes) -> Value {
    let s: Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("a JSON Status: {}", String::from_utf8_lossy(body)));
    assert_eq!(
        (s["kind"].as_str(), s["apiVersion"].as_str(), s["status"].as_str()),
        (Some("Status"), Some("v1"), Some("Failure")),
        "{s}"
    );
    s
}

async fn expect_status(
    server: &Server,
    method: &str,
    path: &str,
    body: Option<Value>,
    code: u16,
    reason: &str,
) -> Value {
    let (got, bytes) = request(&http(), server, method, path, body).await;
    assert_eq!(got, code, "{method} {path}: {}", String::from_utf8_lossy(&bytes));
    let s = status(&bytes);
    // An empty reason is left out, as Go's `omitempty` leaves it.
    assert_eq!(
        (s["code"].as_u64(), s["reason"].as_str().unwrap_or_default()),
        (Some(code as u64), reason),
        "{method} {path}: {s}"
    );
    s
}

fn pod(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_parameters_are_400s_that_name_the_parameter() {
    let server = start(config(10)).await;
    for (query, name) in [
        ("resourceVersion=abc", "resourceVersion"),
        ("limit=-1", "limit"),
        ("limit=x", "limit"),
        (
            "resourceVersionMatch=Exact&resourceVersion=0",
            "resourceVersionMatch=Exact",
        ),
        ("resourceVersionMatch=Exact", "resourceVersionMatch=Exact"),
        ("continue=abc&resourceVersion=5", "continue"),
        ("labelSelector=a%20in%20b", "labelSelector"),
        ("fieldSelector=nope", "fieldSelector"),
        ("fieldSelector=status.hostIP%3Dx", "status.hostIP"),
        ("watch=1&timeoutSeconds=x", "timeoutSeconds"),
        ("continue=not-a-token", "continue"),
    ] {
        let s = expect_status(
            &server,
            "GET",
            &format!("/api/v1/pods?{query}"),
            None,
            400,
            "BadRequest",
        )
        .await;
        assert!(
            s["message"].as_str().unwrap_or_default().contains(name),
            "{query}: {s}"
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_conflict_and_already_exists_are_statuses() {
    let server = start(config(0)).await;
    create_namespaces(&server, &["a"]).await;
    expect_status(&server, "GET", "/api/v1/widgets", None, 404, "NotFound").await;
    expect_status(
        &server,
        "GET",
        "/api/v1/namespaces/a/nodes",
        None,
        404,
        "NotFound",
    )
    .await;
    expect_status(&server, "GET", "/nope", None, 404, "NotFound").await;
    let s = expect_status(
        &server,
        "GET",
        "/api/v1/namespaces/a/pods/missing",
        None,
        404,
        "NotFound",
    )
    .await;
    assert_eq!(s["details"]["name"], "missing");
    expect_status(
        &server,
        "DELETE",
        "/api/v1/namespaces/a/pods/missing",
        None,
        404,
        "NotFound",
    )
    .await;
    expect_status(
        &server,
        "PUT",
        "/api/v1/namespaces/a/pods/missing",
        Some(pod("a", "missing")),
        404,
        "NotFound",
    )
    .await;

    let (code, body) = request(
        &http(),
        &server,
        "POST",
        "/api/v1/namespaces/a/pods",
        Some(pod("a", "p")),
    )
    .await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let created: Value = serde_json::from_slice(&body).unwrap();
    assert!(created["metadata"]["uid"].is_string() && created["metadata"]["creationTimestamp"].is_string());
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    expect_status(
        &server,
        "POST",
        "/api/v1/namespaces/a/pods",
        Some(pod("a", "p")),
        409,
        "AlreadyExists",
    )
    .await;

    // Optimistic concurrency: the right resourceVersion wins once, a stale one is a Conflict.
    let mut update = pod("a", "p");
    update["metadata"]["resourceVersion"] = json!(rv);
    update["metadata"]["labels"] = json!({"v": "2"});
    let (code, body) = request(
        &http(),
        &server,
        "PUT",
        "/api/v1/namespaces/a/pods/p",
        Some(update.clone()),
    )
    .await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let updated: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        updated["metadata"]["uid"], created["metadata"]["uid"],
        "the server keeps the uid"
    );
    expect_status(
        &server,
        "PUT",
        "/api/v1/namespaces/a/pods/p",
        Some(update),
        409,
        "Conflict",
    )
    .await;

    // Malformed writes.
    expect_status(
        &server,
        "POST",
        "/api/v1/namespaces/a/pods",
        Some(json!([1])),
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &server,
        "POST",
        "/api/v1/namespaces/a/pods",
        Some(pod("b", "q")),
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &server,
        "POST",
        "/api/v1/namespaces/a/pods",
        Some(json!({"metadata": {}})),
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &server,
        "POST",
        "/api/v1/namespaces/a/pods",
        Some(pod("a", "Bad_Name")),
        422,
        "Invalid",
    )
    .await;
    let mut wrong_kind = pod("a", "r");
    wrong_kind["kind"] = json!("ConfigMap");
    expect_status(
        &server,
        "POST",
        "/api/v1/namespaces/a/pods",
        Some(wrong_kind),
        400,
        "BadRequest",
    )
    .await;
    // A PATCH whose body is plain JSON is no patch type: 415, as the apiserver answers it.
    expect_status(
        &server,
        "PATCH",
        "/api/v1/namespaces/a/pods/p",
        Some(json!({})),
        415,
        "UnsupportedMediaType",
    )
    .await;

    // DELETE answers with the object's last state, stamped with the deletion's revision as
    // the apiserver's store does: a LIST at that revision no longer holds it. GET afterwards
    // is 404.
    let rv = |v: &Value| -> u64 {
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (_, body) = request(&http(), &server, "GET", "/api/v1/namespaces/a/pods/p", None).await;
    let last = rv(&serde_json::from_slice::<Value>(&body).unwrap());
    let (code, body) = request(&http(), &server, "DELETE", "/api/v1/namespaces/a/pods/p", None).await;
    assert_eq!(code, 200);
    let deleted = serde_json::from_slice::<Value>(&body).unwrap();
    assert_eq!(deleted["metadata"]["name"], "p");
    let at = rv(&deleted);
    assert!(
        at > last,
        "DELETE answered at {at}, the object's own revision {last}"
    );
    let (code, body) = request(
        &http(),
        &server,
        "GET",
        &format!("/api/v1/namespaces/a/pods?resourceVersion={at}&resourceVersionMatch=Exact"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    let list = serde_json::from_slice::<Value>(&body).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 0, "{list}");
    expect_status(
        &server,
        "GET",
        "/api/v1/namespaces/a/pods/p",
        None,
        404,
        "NotFound",
    )
    .await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_resource_versions_are_504_with_a_cause_and_not_ready_is_429() {
    let server = start(config(3)).await;
    let s = expect_status(
        &server,
        "GET",
        "/api/v1/pods?resourceVersion=999999",
        None,
        504,
        "Timeout",
    )
    .await;
    assert_eq!(s["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    assert_eq!(s["details"]["retryAfterSeconds"], 1);
    server.shutdown().await.unwrap();

    let store = MemorySource::new();
    store.set_available(false);
    let server = Server::start_with(config(0), watchcache_server::Backend::Memory(store))
        .await
        .unwrap();
    let (code, headers, body) =
        request_full(&http(), &server, "GET", "/api/v1/pods?resourceVersion=0", None).await;
    assert_eq!(code, 429);
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(status(&body)["reason"], "TooManyRequests");
    let (code, _) = request(&http(), &server, "GET", "/readyz", None).await;
    assert_eq!(code, 503, "not ready until the first list");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_below_the_window_catches_up_from_the_store_and_is_an_in_stream_410_once_compacted() {
    let mut cfg = config(5);
    cfg.history = 8;
    let server = start(cfg).await;
    let store = watchcache_tests::memory(&server).clone();
    let (_, body) = request(&http(), &server, "GET", "/api/v1/pods", None).await;
    let start_rv: u64 = serde_json::from_slice::<Value>(&body).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut revs = Vec::new();
    for g in 0..20 {
        let value = watchcache_server::workload::pod(0, 1, g + 1).to_string();
        revs.push(
            store
                .update("/registry/pods/ns-0/web-000000", Bytes::from(value), None)
                .unwrap(),
        );
    }
    request(&http(), &server, "GET", "/api/v1/pods", None).await; // caught up
    // Twenty events through a window of eight: the store still holds them, and serves them.
    let mut caught_up = Frames::open(
        &server,
        &format!("/api/v1/pods?watch=1&resourceVersion={start_rv}"),
    )
    .await;
    for rev in &revs {
        let f = caught_up.next().await.expect("an event");
        assert_eq!(
            (
                f["type"].as_str(),
                f["object"]["metadata"]["resourceVersion"].as_str()
            ),
            (Some("MODIFIED"), Some(rev.to_string().as_str()))
        );
    }
    drop(caught_up);
    // Once the store compacted past the start: 410.
    store.compact(revs[5]);
    let mut old = Frames::open(
        &server,
        &format!("/api/v1/pods?watch=1&resourceVersion={start_rv}"),
    )
    .await;
    let err = old.next().await.expect("an ERROR frame");
    assert_eq!(err["type"], "ERROR");
    assert_eq!(
        (err["object"]["code"].as_u64(), err["object"]["reason"].as_str()),
        (Some(410), Some("Expired"))
    );
    assert!(old.next().await.is_none(), "the stream ends after the error");

    // Timeouts end a watch cleanly, without an error.
    let mut short = Frames::open(&server, "/api/v1/pods?watch=1&timeoutSeconds=1&resourceVersion=0").await;
    let mut n = 0;
    while let Some(f) = short.next().await {
        assert_ne!(f["type"], "ERROR");
        n += 1;
    }
    assert_eq!(n, 5, "the initial state, then a clean end");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_names_and_namespaces_are_422_with_causes_and_nothing_is_stored() {
    let server = start(config(0)).await;
    let cm = |ns: &str, name: &str| json!({"metadata": {"name": name, "namespace": ns}, "data": {"a": "b"}});
    for (path_ns, body_ns, name, field) in [
        ("a%2Fb", "a/b", "x", "metadata.namespace"),
        ("UPPER", "UPPER", "x", "metadata.namespace"),
        ("ns-1", "ns-1", "Bad_Name", "metadata.name"),
        ("ns-1", "ns-1", "a/b", "metadata.name"),
    ] {
        let path = format!("/api/v1/namespaces/{path_ns}/configmaps");
        let s = expect_status(&server, "POST", &path, Some(cm(body_ns, name)), 422, "Invalid").await;
        let causes = s["details"]["causes"].as_array().expect("causes").clone();
        assert!(
            causes
                .iter()
                .any(|c| c["field"] == field && c["reason"] == "FieldValueInvalid"),
            "{path} {name}: {s}"
        );
        assert_eq!(s["details"]["kind"], "ConfigMap");
    }
    // A namespace's own name is a DNS label: no dots.
    let ns = json!({"metadata": {"name": "a.b"}});
    expect_status(&server, "POST", "/api/v1/namespaces", Some(ns), 422, "Invalid").await;
    // The body's namespace must be the URL's.
    expect_status(
        &server,
        "POST",
        "/api/v1/namespaces/ns-1/configmaps",
        Some(cm("ns-2", "x")),
        400,
        "BadRequest",
    )
    .await;
    // Nothing was stored: no ghost that GET cannot find and a retry conflicts with.
    let (_, body) = request(&http(), &server, "GET", "/api/v1/configmaps", None).await;
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{list}");
    let (_, body) = request(&http(), &server, "GET", "/api/v1/namespaces", None).await;
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["metadata"]["name"] != "a.b")
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectable_fields_the_apiserver_defaults_are_found_by_field_selectors() {
    let server = start(config(0)).await;
    create_namespaces(&server, &["ns-1"]).await;
    let created = [
        ("/api/v1/namespaces/ns-1/pods", pod("ns-1", "fresh")),
        ("/api/v1/nodes", json!({"metadata": {"name": "node-a"}})),
        (
            "/api/v1/namespaces/ns-1/secrets",
            json!({"metadata": {"name": "s"}}),
        ),
        ("/api/v1/namespaces", json!({"metadata": {"name": "ns-9"}})),
    ];
    for (path, body) in created {
        let (code, body) = request(&http(), &server, "POST", path, Some(body)).await;
        assert_eq!(code, 201, "{path}: {}", String::from_utf8_lossy(&body));
    }
    for (path, selector, name) in [
        ("/api/v1/pods", "status.phase=Pending", "fresh"),
        ("/api/v1/nodes", "spec.unschedulable=false", "node-a"),
        ("/api/v1/secrets", "type=Opaque", "s"),
        ("/api/v1/namespaces", "status.phase=Active", "ns-9"),
    ] {
        let (_, body) = request(
            &http(),
            &server,
            "GET",
            &format!("{path}?fieldSelector={selector}"),
            None,
        )
        .await;
        let list: Value = serde_json::from_slice(&body).unwrap();
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert!(
            names.contains(&name),
            "{path}?fieldSelector={selector}: {names:?}"
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_neither_outlives_its_timeout_nor_holds_up_shutdown() {
    // About 8 MB of initial events (and of LIST): more than the server's send buffer (at most
    // 4 MB) and the clients' receive buffers (kept small below) hold, so the server is left
    // blocked writing to clients that never read.
    let mut cfg = config(2000);
    cfg.shutdown_grace = Duration::from_millis(500);
    cfg.request_timeout = Duration::from_secs(1);
    let server = start(cfg).await;
    let stalled = |path: &'static str| stalled_client(server.addr(), path);
    let mut timed = stalled("/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=1").await;
    // A LIST is held to the request timeout (1 s here) as a watch is to its deadline.
    let mut listed = stalled("/api/v1/pods").await;
    let held = stalled("/api/v1/pods?watch=1&resourceVersion=0").await;
    // The deadline (1 s) passes while the clients read nothing: the watch's end and the rest of
    // the LIST cannot be flushed, and half a second later the server drops the connections by
    // itself.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Reading now drains what the sockets held, then meets the end of the connection. Had the
    // server kept it, the last read would wait (a kept-alive connection after the watch's end,
    // or the rest of the LIST).
    for (what, s) in [("watch", &mut timed), ("LIST", &mut listed)] {
        let read = read_until_dropped(s, what).await;
        assert!(
            read < 8 << 20,
            "the {what} was dropped before it could send everything ({read} bytes)"
        );
    }
    // Shutdown ends the other after its grace period rather than waiting on the client.
    tokio::time::timeout(Duration::from_secs(30), server.shutdown())
        .await
        .expect("shutdown does not wait for a client that never reads")
        .unwrap();
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_store_nothing_and_delete_preconditions_are_checked() {
    let server = start(config(0)).await;
    create_namespaces(&server, &["ns-1"]).await;
    let c = http();
    let path = "/api/v1/namespaces/ns-1/configmaps";
    let cm = json!({"metadata": {"name": "cm"}, "data": {"a": "b"}});
    // A dry-run create answers the object and stores nothing.
    let (code, body) = request(
        &c,
        &server,
        "POST",
        &format!("{path}?dryRun=All"),
        Some(cm.clone()),
    )
    .await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let (code, _) = request(&c, &server, "GET", &format!("{path}/cm"), None).await;
    assert_eq!(code, 404, "the dry run stored nothing");
    let (code, body) = request(
        &c,
        &server,
        "POST",
        &format!("{path}?fieldManager=me&fieldValidation=Strict"),
        Some(cm),
    )
    .await;
    assert_eq!(code, 201);
    let created: Value = serde_json::from_slice(&body).unwrap();
    let (uid, rv) = (
        created["metadata"]["uid"].as_str().unwrap().to_owned(),
        created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    // A dry-run delete (kubectl delete --dry-run=server sends it in the body) deletes nothing.
    let dry = json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"], "propagationPolicy": "Background"});
    let (code, _) = request(&c, &server, "DELETE", &format!("{path}/cm"), Some(dry)).await;
    assert_eq!(code, 200);
    let (code, _) = request(&c, &server, "DELETE", &format!("{path}/cm?dryRun=All"), None).await;
    assert_eq!(code, 200);
    let (code, _) = request(&c, &server, "GET", &format!("{path}/cm"), None).await;
    assert_eq!(code, 200, "still there after both dry runs");
    // Preconditions that do not hold are 409s; ones that do, delete.
    for pre in [json!({"uid": "someone-else"}), json!({"resourceVersion": "1"})] {
        let s = expect_status(
            &server,
            "DELETE",
            &format!("{path}/cm"),
            Some(json!({"preconditions": pre})),
            409,
            "Conflict",
        )
        .await;
        assert!(
            s["message"].as_str().unwrap().starts_with("Precondition failed"),
            "{s}"
        );
    }
    expect_status(
        &server,
        "DELETE",
        &format!("{path}/cm?propagationPolicy=Sideways"),
        None,
        422,
        "Invalid",
    )
    .await;
    expect_status(
        &server,
        "DELETE",
        &format!("{path}/cm?gracePeriodSeconds=soon"),
        None,
        400,
        "BadRequest",
    )
    .await;
    expect_status(
        &server,
        "POST",
        &format!("{path}?dryRun=Maybe"),
        Some(json!({"metadata": {"name": "x"}})),
        422,
        "Invalid",
    )
    .await;
    let ok = json!({"preconditions": {"uid": uid, "resourceVersion": rv}});
    let (code, _) = request(
        &c,
        &server,
        "DELETE",
        &format!("{path}/cm?gracePeriodSeconds=0"),
        Some(ok),
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = request(&c, &server, "GET", &format!("{path}/cm"), None).await;
    assert_eq!(code, 404);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_3_mib_are_413_and_history_is_bounded_by_bytes() {
    let mut cfg = config(0);
    cfg.history_bytes = 8 << 20;
    let server = start(cfg).await;
    create_namespaces(&server, &["ns-1", "a"]).await;
    let c = http();
    let path = "/api/v1/namespaces/ns-1/configmaps";
    let cm = |n: usize, fill: char| json!({"metadata": {"name": "big"}, "data": {"v": fill.to_string().repeat(n)}});
    let s = expect_status(
        &server,
        "POST",
        path,
        Some(cm(3 << 20, 'x')),
        413,
        "RequestEntityTooLarge",
    )
    .await;
    assert!(s["message"].as_str().unwrap().contains("larger than"), "{s}");
    let (code, _) = request(&c, &server, "GET", &format!("{path}/big"), None).await;
    assert_eq!(code, 404, "nothing stored");
    // 40 versions of 1 MiB, written one after another: history keeps at most 8 MiB of them,
    // and the store's change log compacts to match.
    let (code, _) = request(&c, &server, "POST", path, Some(cm(1 << 20, 'a'))).await;
    assert_eq!(code, 201);
    let first = watchcache_tests::memory(&server).revision();
    for i in 0..40u32 {
        let fill = char::from(b'a' + (i % 26) as u8);
        let (code, body) = request(
            &c,
            &server,
            "PUT",
            &format!("{path}/big"),
            Some(cm(1 << 20, fill)),
        )
        .await;
        assert_eq!(
            code,
            200,
            "{}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        );
    }
    request(&c, &server, "GET", path, None).await; // the cache has caught up
    let (_, metrics) = request(&c, &server, "GET", "/metrics", None).await;
    let metrics = String::from_utf8_lossy(&metrics);
    let held: u64 = metrics
        .lines()
        .find(|l| l.starts_with("watchcache_history_bytes{resource=\"configmaps\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("a history_bytes gauge: {metrics}"));
    assert!(held > 4 << 20 && held <= 8 << 20, "history holds {held} bytes");
    assert!(
        watchcache_tests::memory(&server).compacted_revision() > first,
        "the store compacted the oldest values"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_methods_are_405_statuses_and_add_no_metric_series() {
    let server = start(config(0)).await;
    for (i, path) in [
        "/api/v1/pods",
        "/api/v1/namespaces/ns-0/pods/x",
        "/api",
        "/metrics",
    ]
    .iter()
    .enumerate()
    {
        expect_status(&server, &format!("X{i}"), path, None, 405, "MethodNotAllowed").await;
    }
    expect_status(&server, "POST", "/api", None, 405, "MethodNotAllowed").await;
    let (_, metrics) = request(&http(), &server, "GET", "/metrics", None).await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        !metrics.contains("verb=\"X"),
        "a series per invented method:\n{metrics}"
    );
    assert!(metrics.contains("verb=\"OTHER\""), "{metrics}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_zero_ahead_of_the_cache_and_initial_events_false_follow_the_api() {
    let server = start(config(2)).await;
    let store = watchcache_tests::memory(&server).clone();
    // The revision once the server's own start-up writes (the bootstrap policy among them)
    // are done: one landing after it would be the "rv + 1" below.
    let mut rv = store.revision().get();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = store.revision().get();
        if now == rv {
            break;
        }
        rv = now;
    }
    let write = |name: &str| {
        let value = serde_json::to_vec(&pod("ns-0", name)).unwrap();
        store
            .create(&format!("/registry/pods/ns-0/{name}"), Bytes::from(value))
            .unwrap()
    };
    // timeoutSeconds=0 is the server's default, not a watch that ends at once; a revision
    // ahead of the cache starts at once and delivers what follows it.
    let mut zero = Frames::open(
        &server,
        &format!("/api/v1/pods?watch=1&timeoutSeconds=0&resourceVersion={}", rv + 1),
    )
    .await;
    // sendInitialEvents=false: no ADDED for the two seeded pods, only what is written next.
    let mut none = Frames::open(
        &server,
        "/api/v1/pods?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion=0",
    )
    .await;
    write("skipped"); // at rv + 1: not after the requested revision
    let after = write("after");
    let f = zero.next().await.expect("the watch stays open");
    assert_eq!(
        (f["type"].as_str(), f["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("after"))
    );
    assert_eq!(f["object"]["metadata"]["resourceVersion"], after.to_string());
    let f = none.next().await.expect("a live event");
    assert_eq!(
        f["object"]["metadata"]["name"], "skipped",
        "no initial events before it"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_beyond_max_watchers_get_429_and_the_slot_frees_when_one_ends() {
    let mut cfg = config(1);
    cfg.max_watchers = 1;
    let server = start(cfg).await;
    let mut first = Frames::open(&server, "/api/v1/pods?watch=1&resourceVersion=0").await;
    assert_eq!(first.next().await.unwrap()["type"], "ADDED");
    let (code, headers, body) = request_full(&http(), &server, "GET", "/api/v1/pods?watch=1", None).await;
    assert_eq!(code, 429);
    assert!(headers.contains_key("retry-after"));
    assert_eq!(status(&body)["reason"], "TooManyRequests");
    drop(first);
    // The server notices the closed connection on its next write or poll; a bookmark or a
    // change prompts one. Retry briefly until the slot is free.
    let store = watchcache_tests::memory(&server).clone();
    let mut freed = false;
    for g in 0..100 {
        let value = watchcache_server::workload::pod(0, 1, g + 1).to_string();
        store
            .update("/registry/pods/ns-0/web-000000", Bytes::from(value), None)
            .unwrap();
        let mut again = Frames::open_any(&server, "/api/v1/pods?watch=1&resourceVersion=0").await;
        if again.0 == 200 {
            assert_eq!(again.1.next().await.unwrap()["type"], "ADDED");
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(freed, "the slot of a closed watch is released");
    server.shutdown().await.unwrap();
}

/// Writes wait for a place once as many as the server runs at once are in flight, but only as
/// many as it runs: past those, a write is answered at once with the apiserver's 429 and its
/// Retry-After, and holds nothing (its body least of all) while its client waits to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_those_running_and_waiting_get_429_with_retry_after() {
    const RUNNING: usize = 2;
    const SENT: usize = 10;
    let mut cfg = config(0);
    cfg.max_writes = RUNNING;
    // Each create holds its place this long, as a slow write may: all of them are sent while
    // the first ones hold theirs.
    cfg.create_delay = Duration::from_secs(2);
    let server = std::sync::Arc::new(start(cfg).await);
    let writes: Vec<_> = (0..SENT)
        .map(|i| {
            let server = server.clone();
            tokio::spawn(async move {
                let cm = json!({"metadata": {"name": format!("w-{i}")}});
                let path = "/api/v1/namespaces/default/configmaps";
                request_full(&http(), &server, "POST", path, Some(cm)).await
            })
        })
        .collect();
    let (mut created, mut refused) = (0, 0);
    for w in writes {
        let (code, headers, body) = w.await.expect("a write ends");
        match code {
            201 => created += 1,
            429 => {
                refused += 1;
                assert_eq!(headers.get("retry-after").map(|v| v.as_bytes()), Some(&b"1"[..]));
                let s = status(&body);
                assert_eq!(s["reason"], "TooManyRequests", "{s}");
                assert_eq!(s["message"], "Too many requests, please try again later.", "{s}");
                assert_eq!(s["details"]["retryAfterSeconds"], 1, "{s}");
            }
            _ => panic!("a write: {code} {}", String::from_utf8_lossy(&body)),
        }
    }
    eprintln!("{SENT} writes at once, {RUNNING} run at a time: {created} created, {refused} answered 429");
    // The first writes run and as many wait, whenever the others come.
    assert!(created >= 2 * RUNNING, "{created} created");
    assert!(
        refused > 0,
        "no write was refused: the writes waiting are not bounded"
    );
    let server = std::sync::Arc::into_inner(server).expect("writes done");
    server.shutdown().await.unwrap();
}

/// A protobuf LIST of `path`: its code, and the item count when it decodes.
async fn protobuf_list(server: &Server, path: &str) -> (u16, Option<usize>) {
    let (code, _, body) =
        watchcache_tests::get_raw(server, path, "application/vnd.kubernetes.protobuf").await;
    let items = watchcache_encoders::protobuf::open_envelope(&body)
        .ok()
        .and_then(|e| {
            watchcache_encoders::protobuf::decode_json("io.k8s.api.core.v1.ConfigMapList", e.raw).ok()
        })
        .map(|list| list.get("items").and_then(Value::as_array).map_or(0, Vec::len));
    (code, items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ill_typed_values_are_400_on_every_write_and_protobuf_lists_go_on() {
    let server = start(config(0)).await;
    create_namespaces(&server, &["ns-1"]).await;
    let c = http();
    let cms = "/api/v1/namespaces/ns-1/configmaps";
    let (code, _) = request(
        &c,
        &server,
        "POST",
        cms,
        Some(json!({"metadata": {"name": "good"}, "data": {"a": "1"}})),
    )
    .await;
    assert_eq!(code, 201);
    let pod = |spec: Value| json!({"metadata": {"name": "p"}, "spec": spec});
    let container = |extra: Value| {
        let mut c = json!({"name": "a", "image": "i"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        pod(json!({"containers": [c]}))
    };
    let cases = [
        // (collection, body, what the message names)
        (
            cms,
            json!({"metadata": {"name": "n"}, "data": {"a": 1}}),
            "ConfigMap.data",
        ),
        (
            cms,
            json!({"metadata": {"name": "n"}, "data": ["a"]}),
            "ConfigMap.data",
        ),
        (
            cms,
            json!({"metadata": {"name": "n", "labels": {"a": true}}}),
            "metadata.labels",
        ),
        (
            cms,
            json!({"metadata": {"name": "n", "finalizers": "a"}}),
            "metadata.finalizers",
        ),
        (
            cms,
            json!({"metadata": {"name": "n"}, "immutable": "yes"}),
            "immutable",
        ),
        (
            cms,
            json!({"metadata": {"name": "n"}, "binaryData": {"b": "not base64!"}}),
            "binaryData",
        ),
        (
            "/api/v1/namespaces/ns-1/pods",
            pod(json!({"containers": {"name": "a"}})),
            "spec.containers",
        ),
        (
            "/api/v1/namespaces/ns-1/pods",
            container(json!({"ports": [{"containerPort": "80"}]})),
            "containerPort",
        ),
        (
            "/api/v1/namespaces/ns-1/pods",
            container(json!({"ports": [{"containerPort": 4_294_967_296u64}]})),
            "containerPort",
        ),
        (
            "/api/v1/namespaces/ns-1/pods",
            container(json!({"ports": [{"containerPort": 80.5}]})),
            "containerPort",
        ),
        (
            "/api/v1/namespaces/ns-1/pods",
            container(json!({"resources": {"limits": {"cpu": "lots"}}})),
            // apimachinery's parser's own words, which name no field.
            "quantities must match the regular expression",
        ),
        (
            "/api/v1/namespaces/ns-1/pods",
            container(json!({"resources": {"limits": {"cpu": ["1"]}}})),
            "limits",
        ),
        (
            "/api/v1/namespaces/ns-1/pods",
            container(json!({"livenessProbe": {"httpGet": {"port": true}}})),
            "port",
        ),
        (
            "/api/v1/namespaces/ns-1/pods",
            pod(json!({"containers": [], "activeDeadlineSeconds": 1.5})),
            "activeDeadlineSeconds",
        ),
        (
            "/api/v1/namespaces/ns-1/events",
            json!({"metadata": {"name": "e"}, "involvedObject": {}, "lastTimestamp": "yesterday"}),
            "lastTimestamp",
        ),
    ];
    for (path, body, names) in cases {
        let s = expect_status(&server, "POST", path, Some(body.clone()), 400, "BadRequest").await;
        let message = s["message"].as_str().unwrap();
        assert!(
            message.contains("cannot be handled as a") && message.contains(names),
            "{body}: {message}"
        );
    }
    // A patch, an update and an apply that would make the object ill-typed are refused too.
    let good = format!("{cms}/good");
    let (code, s) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        &good,
        "application/merge-patch+json",
        r#"{"data":{"a":1}}"#,
    )
    .await;
    assert_eq!((code, s["reason"].as_str()), (400, Some("BadRequest")), "{s}");
    let (code, s) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        &good,
        "application/json-patch+json",
        r#"[{"op":"add","path":"/data/b","value":{"x":1}}]"#,
    )
    .await;
    assert_eq!((code, s["reason"].as_str()), (400, Some("BadRequest")), "{s}");
    let (code, s) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        &format!("{good}?fieldManager=m"),
        "application/apply-patch+yaml",
        "data:\n  a: 1\n",
    )
    .await;
    assert_eq!((code, s["reason"].as_str()), (400, Some("BadRequest")), "{s}");
    let (code, _) = request(
        &c,
        &server,
        "PUT",
        &good,
        Some(json!({"metadata": {"name": "good"}, "data": {"a": 2}})),
    )
    .await;
    assert_eq!(code, 400);
    // Nothing ill-typed was stored: every protobuf LIST of config maps answers, whole.
    for path in [cms, "/api/v1/configmaps"] {
        assert_eq!(protobuf_list(&server, path).await, (200, Some(1)), "{path}");
    }
    let (_, body) = request(&c, &server, "GET", &good, None).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["data"],
        json!({"a": "1"})
    );
    // What clients send in the value types' other JSON forms is accepted: a quantity as a
    // number, an IntOrString as either, null for anything.
    let ok = container(json!({
        "resources": {"limits": {"cpu": 1, "memory": "64Mi"}, "requests": {"cpu": "250m"}},
        "livenessProbe": {"httpGet": {"port": "http"}, "periodSeconds": null},
        "readinessProbe": {"tcpSocket": {"port": 8080}},
    }));
    let (code, body) = request(&c, &server, "POST", "/api/v1/namespaces/ns-1/pods", Some(ok)).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patches_are_bounded_in_operations_and_copies_and_objects_in_size() {
    let server = start(config(0)).await;
    create_namespaces(&server, &["ns-1"]).await;
    let c = http();
    let cms = "/api/v1/namespaces/ns-1/configmaps";
    let (code, _) = request(
        &c,
        &server,
        "POST",
        cms,
        Some(json!({"metadata": {"name": "cm"}, "data": {"a": "x".repeat(1024)}})),
    )
    .await;
    assert_eq!(code, 201);
    let cm = format!("{cms}/cm");
    let patch = |ops: Vec<Value>| Value::Array(ops).to_string();
    // More operations than the apiserver allows: 413.
    let test = json!({"op": "test", "path": "/data/a", "value": "x".repeat(1024)});
    let many = patch(vec![
        json!({"op": "test", "path": "/kind", "value": "ConfigMap"});
        10_001
    ]);
    let (code, s) =
        watchcache_tests::request_typed(&c, &server, "PATCH", &cm, "application/json-patch+json", many).await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (413, Some("RequestEntityTooLarge")),
        "{s}"
    );
    assert!(s["message"].as_str().unwrap().contains("10000"), "{s}");
    // Copies that double a map twelve times (a 600-byte patch, 4 MiB of copies): 422 once
    // the copies add up past 3 MiB, and nothing is stored.
    let mut ops = vec![
        test,
        json!({"op": "add", "path": "/data", "value": {"a": "x".repeat(1024)}}),
    ];
    ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    for i in 0..12 {
        ops.push(json!({"op": "copy", "from": "/data", "path": format!("/data/d{i}")}));
    }
    let (code, s) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        &cm,
        "application/json-patch+json",
        patch(ops),
    )
    .await;
    assert_eq!((code, s["reason"].as_str()), (422, Some("Invalid")), "{s}");
    assert!(s["message"].as_str().unwrap().contains("copy"), "{s}");
    // Within the bounds, copies apply.
    let ops = vec![json!({"op": "copy", "from": "/data/a", "path": "/data/b"})];
    let (code, out) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        &cm,
        "application/json-patch+json",
        patch(ops),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["data"]["b"], out["data"]["a"]);
    // An object larger than etcd takes (1.5 MiB) is refused as the apiserver refuses it, on a
    // create, an update and a patch alike; one just under is stored. (A Lease: a ConfigMap's
    // data is refused past 1 MiB by its validation already, with a 422.)
    let leases = "/apis/coordination.k8s.io/v1/namespaces/ns-1/leases";
    let big =
        |name: &str, n: usize| json!({"metadata": {"name": name}, "spec": {"holderIdentity": "y".repeat(n)}});
    let (code, _) = request(&c, &server, "POST", leases, Some(big("lease", 10))).await;
    assert_eq!(code, 201);
    for (method, path, name) in [
        ("POST", leases.to_owned(), "big"),
        ("PUT", format!("{leases}/lease"), "lease"),
    ] {
        let s = expect_status(&server, method, &path, Some(big(name, 1_600_000)), 500, "").await;
        assert!(
            s["message"].as_str().unwrap().contains("request is too large"),
            "{s}"
        );
    }
    let grow = json!({"spec": {"holderIdentity": "z".repeat(1_600_000)}}).to_string();
    let lease = format!("{leases}/lease");
    let (code, s) =
        watchcache_tests::request_typed(&c, &server, "PATCH", &lease, "application/merge-patch+json", grow)
            .await;
    assert_eq!(code, 500, "{s}");
    let (code, _) = request(&c, &server, "GET", &format!("{leases}/big"), None).await;
    assert_eq!(code, 404, "nothing stored");
    let (code, _) = request(&c, &server, "POST", leases, Some(big("big", 1_500_000))).await;
    assert_eq!(code, 201);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_aliases_cannot_expand_a_body_past_the_body_limit() {
    let server = start(config(0)).await;
    create_namespaces(&server, &["ns-1"]).await;
    let c = http();
    let cms = "/api/v1/namespaces/ns-1/configmaps";
    // 10,000 aliases of a 1 KiB string: a 70 KB body that expands to 10 MB of finalizers.
    let mut wide = format!(
        "metadata:\n  name: wide\n  annotations:\n    a: &a {}\n  finalizers:\n",
        "x".repeat(1024)
    );
    for _ in 0..10_000 {
        wide.push_str("  - *a\n");
    }
    // Nine levels of nine aliases each (the classic "billion laughs").
    let mut laughs = String::from("metadata:\n  name: laughs\ndata:\n  l0: &l0 \"lol\"\n");
    for i in 1..10 {
        let refs = vec![format!("*l{}", i - 1); 9].join(", ");
        laughs.push_str(&format!("  l{i}: &l{i} [{refs}]\n"));
    }
    for (name, body) in [("wide", &wide), ("laughs", &laughs)] {
        for (method, path, ct) in [
            ("POST", cms.to_owned(), "application/yaml"),
            (
                "PATCH",
                format!("{cms}/{name}?fieldManager=m"),
                "application/apply-patch+yaml",
            ),
        ] {
            let (code, s) =
                watchcache_tests::request_typed(&c, &server, method, &path, ct, body.clone()).await;
            assert_eq!(
                (code, s["reason"].as_str()),
                (400, Some("BadRequest")),
                "{name} {method}: {s}"
            );
        }
        let (code, _) = request(&c, &server, "GET", &format!("{cms}/{name}"), None).await;
        assert_eq!(code, 404, "{name}: nothing stored");
    }
    // An anchor used a few times is still YAML the server reads.
    let yaml =
        "metadata:\n  name: anchored\n  labels:\n    app: &app web\n    tier: *app\ndata:\n  k: *app\n";
    let (code, out) =
        watchcache_tests::request_typed(&c, &server, "POST", cms, "application/yaml", yaml).await;
    assert_eq!((code, out["data"]["k"].as_str()), (201, Some("web")), "{out}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_its_catch_up_is_ended_and_frees_the_read() {
    // A watch from below the window (64 events) catches up over the 2,000 seeded pods, about
    // 8 MB: more than the sockets hold. Its client reads nothing. With one catch-up read
    // allowed, it holds that read; past its deadline (1 s) and the grace, the server ends it
    // as it ends any stalled watch (the watch at its deadline, the connection after the
    // grace), and the read is free for the next catch-up, which then starts at once rather
    // than wait in line for the read's idle time or slice.
    let mut cfg = config(2000);
    cfg.history = 64;
    cfg.embedded_revisions = Some(4096);
    cfg.catch_up = Some(watchcache_core::CatchUpReads::new(1));
    cfg.shutdown_grace = Duration::from_millis(500);
    let server = start(cfg).await;
    let mut s = stalled_client(
        server.addr(),
        "/api/v1/pods?watch=1&resourceVersion=1&timeoutSeconds=1",
    )
    .await;
    let metric = |name: &'static str| {
        let server = &server;
        async move {
            let (_, body) = request(&http(), server, "GET", "/metrics", None).await;
            String::from_utf8_lossy(&body)
                .lines()
                .find(|l| l.starts_with(&format!("{name}{{resource=\"pods\"}}")))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        metric("watchcache_watch_catch_ups_total").await,
        1,
        "the stalled watch catches up"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let read = read_until_dropped(&mut s, "stalled catch-up").await;
    assert!(
        read < 8 << 20,
        "ended before it could send everything ({read} bytes)"
    );
    // The next catch-up has the read: its first event comes within 5 s.
    let mut next = Frames::open(&server, "/api/v1/pods?watch=1&resourceVersion=1").await;
    let frame = next
        .next_within(Duration::from_secs(5))
        .await
        .expect("an event before the wait in line would end")
        .expect("the watch goes on");
    assert_eq!(frame["type"], "ADDED", "{frame}");
    assert_eq!(metric("watchcache_watch_catch_ups_refused_total").await, 0);
    drop(next);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_timeout_is_clamped_and_a_client_that_stops_reading_is_still_dropped() {
    // As `a_client_that_never_reads_neither_outlives_its_timeout_nor_holds_up_shutdown`, with
    // timeoutSeconds = 2^64 - 1: the watch ends at the server's longest deadline (twice the
    // minimum request timeout: 2 s here), and the stalled connection is dropped after grace.
    let mut cfg = config(2000);
    cfg.shutdown_grace = Duration::from_millis(500);
    cfg.min_request_timeout = Duration::from_secs(1);
    let server = start(cfg).await;
    let path = "/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=18446744073709551615";
    let mut s = stalled_client(server.addr(), path).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let read = read_until_dropped(&mut s, "connection").await;
    assert!(
        read < 8 << 20,
        "dropped before it could send everything ({read} bytes)"
    );
    // The server goes on serving.
    let (code, _) = request(&http(), &server, "GET", "/api/v1/pods?limit=1", None).await;
    assert_eq!(code, 200);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_patch_of_an_object_with_40000_finalizers_keeps_every_finalizer() {
    let server = start(config(0)).await;
    create_namespaces(&server, &["ns-1"]).await;
    let c = http();
    let cms = "/api/v1/namespaces/ns-1/configmaps";
    let finalizers: Vec<String> = (0..40_000).map(|i| format!("f{i}")).collect();
    let body = json!({"metadata": {"name": "held", "finalizers": finalizers}, "data": {"k": "v"}});
    let (code, out) = request(
        &c,
        &server,
        "POST",
        &format!("{cms}?fieldManager=creator"),
        Some(body),
    )
    .await;
    assert_eq!(
        code,
        201,
        "{}",
        String::from_utf8_lossy(&out[..out.len().min(300)])
    );
    let held = format!("{cms}/held");
    let finalizers_of = |v: &Value| -> Vec<String> {
        v["metadata"]["finalizers"]
            .as_array()
            .map(|a| a.iter().map(|f| f.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    // kubectl label: a merge patch of the labels.
    let (code, out) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        &format!("{held}?fieldManager=labeller"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"tier":"front"}}}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(out["metadata"]["labels"]["tier"], "front");
    assert_eq!(finalizers_of(&out), finalizers, "every finalizer kept, in order");
    let managers: Vec<&str> = out["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["creator", "labeller"]);
    // A strategic patch that removes half of them, and an apply that takes one: the rest stay.
    let half: Vec<&String> = finalizers.iter().step_by(2).collect();
    let drop_half = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": half}}).to_string();
    let (code, out) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        &held,
        "application/strategic-merge-patch+json",
        drop_half,
    )
    .await;
    assert_eq!(code, 200);
    let odd: Vec<String> = finalizers.iter().skip(1).step_by(2).cloned().collect();
    assert_eq!(finalizers_of(&out), odd);
    let apply = "metadata:\n  finalizers: [f1]\n  labels:\n    owner: me\n";
    let (code, out) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        &format!("{held}?fieldManager=applier"),
        "application/apply-patch+yaml",
        apply,
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(finalizers_of(&out), odd);
    assert_eq!(out["metadata"]["labels"], json!({"tier": "front", "owner": "me"}));
    server.shutdown().await.unwrap();
}

/// A client that sends `GET path` on a connection of its own and then reads nothing, its
/// receive buffer fixed small (no autotuning up to tcp_rmem's maximum, 32 MB on some hosts).
async fn stalled_client(addr: std::net::SocketAddr, path: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s
}

/// Reads what `s` held until the server's end of the connection: the bytes read. Panics if
/// the server keeps the connection (a read waits 10 s), naming `what`.
async fn read_until_dropped(s: &mut tokio::net::TcpStream, what: &str) -> usize {
    let mut buf = vec![0u8; 1 << 16];
    let mut read = 0usize;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return read,
            Ok(Ok(n)) => read += n,
            Err(_) => panic!("the server kept the {what} past its deadline ({read} bytes read)"),
        }
    }
}
