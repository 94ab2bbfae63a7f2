//! What the apiserver refuses, converts or serialises on a write, over HTTP: an update without
//! a resourceVersion that never reverts a concurrent write (on both stores), the finalizer and
//! namespace-finalizer rules, graceful pod deletion and the pod garbage collector, creates
//! racing a namespace's deletion, generated names, apply bodies as declared objects, Secret
//! `stringData`, and the validation of the built-in kinds (a table of refusals).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};
use watchcache_tests::{Backing, Server, config, http, request, request_typed, start};

const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

/// Sends `method` with a JSON body (or none) and returns the code and the answer as JSON.
async fn call(server: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let (code, bytes) = request(&http(), server, method, path, body).await;
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        panic!(
            "{method} {path}: a JSON answer: {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (code, value)
}

/// PATCH with `content_type`.
async fn patch(server: &Server, path: &str, content_type: &str, body: Value) -> (u16, Value) {
    request_typed(&http(), server, "PATCH", path, content_type, body.to_string()).await
}

/// Asserts `code` and returns the answer.
async fn expect(server: &Server, method: &str, path: &str, body: Option<Value>, code: u16) -> Value {
    let (got, out) = call(server, method, path, body).await;
    assert_eq!(got, code, "{method} {path}: {out}");
    out
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn container() -> Value {
    json!({"name": "app", "image": "app:1"})
}

// ---- An update without a resourceVersion compare-and-swaps on the version it read ----

/// Rounds of the status-against-labels race.
const RACE_ROUNDS: usize = 1500;

/// One thread PATCHes a pod's status with a counter while another PUTs the pod (labels only,
/// no resourceVersion) as fast as it can; before each PATCH the first reads the pod, and a
/// counter below the last one it wrote is a regression: a PUT wrote its stale status back.
/// Returns the regressions, the status PATCHes answered 409, and how many PUTs ran.
async fn status_race(server: &Server) -> (usize, usize, usize) {
    let pods = "/api/v1/namespaces/default/pods";
    expect(
        server,
        "POST",
        pods,
        Some(pod("race", json!({"containers": [container()]}))),
        201,
    )
    .await;
    let path = format!("{pods}/race");
    let status = |n: usize| json!({"status": {"message": n.to_string()}});
    let (code, out) = patch(server, &format!("{path}/status"), MERGE, status(0)).await;
    assert_eq!(code, 200, "{out}");
    let stop = Arc::new(AtomicBool::new(false));
    let puts = Arc::new(AtomicUsize::new(0));
    let labeller = {
        let (stop, puts) = (stop.clone(), puts.clone());
        let addr = server.addr();
        let path = path.clone();
        tokio::spawn(async move {
            let c = http();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let get = http::Request::get(format!("http://{addr}{path}"))
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .unwrap();
                let mut object: Value = read_json(c.request(get).await.unwrap()).await.1;
                object["metadata"]["labels"] = json!({"round": n.to_string()});
                object["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("resourceVersion");
                let put = http::Request::put(format!("http://{addr}{path}"))
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(object.to_string())))
                    .unwrap();
                let (code, out) = read_json(c.request(put).await.unwrap()).await;
                assert_eq!(code, 200, "a PUT without resourceVersion: {out}");
                puts.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (mut regressions, mut conflicts) = (0, 0);
    for i in 1..=RACE_ROUNDS {
        let (code, seen) = call(server, "GET", &path, None).await;
        assert_eq!(code, 200);
        let seen: usize = seen["status"]["message"].as_str().unwrap().parse().unwrap();
        if seen < i - 1 {
            regressions += 1;
        }
        // A client retries a 409; the apiserver answers none to a patch without a precondition.
        for attempt in 0.. {
            let (code, out) = patch(server, &format!("{path}/status"), MERGE, status(i)).await;
            match code {
                200 => break,
                409 if attempt < 100 => conflicts += 1,
                _ => panic!("a status PATCH: {out}"),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    labeller.await.expect("the labeller ends cleanly");
    (regressions, conflicts, puts.load(Ordering::Relaxed))
}

async fn read_json(response: http::Response<hyper::body::Incoming>) -> (u16, Value) {
    use http_body_util::BodyExt;
    let code = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&body).unwrap())
}

async fn put_never_reverts(etcd: bool) {
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    let server = start(backing.config(0)).await;
    let (regressions, conflicts, puts) = status_race(&server).await;
    let store = if etcd { "etcd" } else { "the embedded store" };
    eprintln!(
        "status PATCH against label PUT on {store}: {regressions} regressions in {RACE_ROUNDS} rounds \
         ({puts} PUTs; {conflicts} PATCHes answered 409)"
    );
    assert_eq!(
        regressions, 0,
        "a PUT without resourceVersion reverted a status write"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_without_resource_version_never_reverts_a_concurrent_status_write() {
    put_never_reverts(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_without_resource_version_never_reverts_a_concurrent_status_write_on_etcd() {
    put_never_reverts(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_at_resource_version_zero_is_unconditional_and_dry_runs_answer_the_stored_version() {
    let server = start(config(0)).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let created = expect(
        &server,
        "POST",
        cms,
        Some(json!({"metadata": {"name": "c"}, "data": {"a": "1"}})),
        201,
    )
    .await;
    let stored = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // Dry runs answer with the stored object's resourceVersion, and store nothing.
    let mut body = created.clone();
    body["data"]["a"] = json!("2");
    let out = expect(
        &server,
        "PUT",
        &format!("{cms}/c?dryRun=All"),
        Some(body.clone()),
        200,
    )
    .await;
    assert_eq!(out["metadata"]["resourceVersion"], stored.as_str(), "{out}");
    assert_eq!(out["data"]["a"], "2");
    let (code, out) = patch(
        &server,
        &format!("{cms}/c?dryRun=All"),
        MERGE,
        json!({"data": {"a": "3"}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["metadata"]["resourceVersion"], stored.as_str(), "{out}");
    let (code, out) = patch(
        &server,
        &format!("{cms}/c?dryRun=All&fieldManager=m&force=true"),
        APPLY,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "4"}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["metadata"]["resourceVersion"], stored.as_str(), "{out}");
    let now = expect(&server, "GET", &format!("{cms}/c"), None, 200).await;
    assert_eq!(
        (
            now["data"]["a"].as_str(),
            now["metadata"]["resourceVersion"].as_str()
        ),
        (Some("1"), Some(stored.as_str()))
    );
    // "0" is no precondition: the update is unconditional, as in the apiserver.
    body["metadata"]["resourceVersion"] = json!("0");
    let out = expect(&server, "PUT", &format!("{cms}/c"), Some(body.clone()), 200).await;
    assert_eq!(out["data"]["a"], "2");
    // A stale one is still a conflict.
    body["metadata"]["resourceVersion"] = json!(stored);
    body["data"]["a"] = json!("5");
    expect(&server, "PUT", &format!("{cms}/c"), Some(body), 409).await;
    server.shutdown().await.unwrap();
}

// ---- generateName ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_names_use_the_apiservers_alphabet_and_length() {
    let server = start(config(0)).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    for _ in 0..40 {
        let out = expect(
            &server,
            "POST",
            cms,
            Some(json!({"metadata": {"generateName": "web-"}})),
            201,
        )
        .await;
        let name = out["metadata"]["name"].as_str().unwrap();
        let suffix = name.strip_prefix("web-").expect("the prefix");
        assert_eq!(suffix.len(), 5, "{name}");
        assert!(
            suffix.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{name}"
        );
        assert_eq!(out["metadata"]["generateName"], "web-");
    }
    // A long prefix is cut to 58 characters, so the name fits in 63.
    let long = "a".repeat(70);
    let out = expect(
        &server,
        "POST",
        cms,
        Some(json!({"metadata": {"generateName": long}})),
        201,
    )
    .await;
    let name = out["metadata"]["name"].as_str().unwrap();
    assert_eq!(name.len(), 63, "{name}");
    assert!(name.starts_with(&"a".repeat(58)), "{name}");
    server.shutdown().await.unwrap();
}

// ---- Secrets: stringData is write-only ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_string_data_is_merged_into_data_and_never_stored() {
    let server = start(config(0)).await;
    let secrets = "/api/v1/namespaces/default/secrets";
    let body = json!({"metadata": {"name": "s"}, "data": {"user": "YWRtaW4=", "pw": "b2xk"}, "stringData": {"pw": "hunter2"}});
    let out = expect(&server, "POST", secrets, Some(body), 201).await;
    assert_eq!(
        out["data"],
        json!({"user": "YWRtaW4=", "pw": "aHVudGVyMg=="}),
        "{out}"
    );
    assert!(out.get("stringData").is_none(), "{out}");
    let got = expect(&server, "GET", &format!("{secrets}/s"), None, 200).await;
    assert_eq!(got["data"]["pw"], "aHVudGVyMg==");
    assert!(got.get("stringData").is_none(), "{got}");
    // Updates and patches convert it the same way.
    let mut replaced = got.clone();
    replaced["stringData"] = json!({"token": "t"});
    let out = expect(&server, "PUT", &format!("{secrets}/s"), Some(replaced), 200).await;
    assert_eq!(out["data"]["token"], "dA==", "{out}");
    let (code, out) = patch(
        &server,
        &format!("{secrets}/s"),
        MERGE,
        json!({"stringData": {"user": "root"}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["data"]["user"], "cm9vdA==", "{out}");
    assert!(out.get("stringData").is_none(), "{out}");
    let (code, out) = patch(
        &server,
        &format!("{secrets}/applied?fieldManager=m"),
        APPLY,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "applied"}, "stringData": {"k": "v"}}),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["data"], json!({"k": "dg=="}), "{out}");
    assert!(out.get("stringData").is_none(), "{out}");
    // The Table's DATA column counts them.
    let (code, _, table) = watchcache_tests::get_raw(
        &server,
        &format!("{secrets}/s"),
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .await;
    assert_eq!(code, 200);
    let table: Value = serde_json::from_slice(&table).unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let data = columns.iter().position(|c| *c == "Data").expect("a Data column");
    assert_eq!(table["rows"][0]["cells"][data], 3, "{table}");
    server.shutdown().await.unwrap();
}
