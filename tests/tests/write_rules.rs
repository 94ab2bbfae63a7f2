//! What the apiserver refuses, converts or serialises on a write, over HTTP: an update without
//! a resourceVersion that never reverts a concurrent write (on both stores), the finalizer and
//! namespace-finalizer rules, graceful pod deletion and the pod garbage collector, creates
//! racing a namespace's deletion, generated names, apply bodies as declared objects, Secret
//! `stringData`, and the validation of the built-in kinds (a table of refusals).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use watchcache_tests::{Backing, Server, config, http, request, request_typed, start};

const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
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

/// Waits (bounded) until GET `path` answers 404.
async fn until_gone(server: &Server, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, _) = request(&http(), server, "GET", path, None).await;
        if code == 404 {
            return;
        }
        assert!(Instant::now() < deadline, "{path} is still there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The cause of a Status with `field`, if any.
fn cause<'a>(status: &'a Value, field: &str) -> Option<&'a Value> {
    status["details"]["causes"]
        .as_array()?
        .iter()
        .find(|c| c["field"] == field)
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

// ---- No new finalizer on an object being deleted ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_new_finalizer_may_be_added_to_an_object_being_deleted() {
    let server = start(config(0)).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/a"]}});
    expect(&server, "POST", cms, Some(held), 201).await;
    let marked = expect(&server, "DELETE", &format!("{cms}/held"), None, 200).await;
    assert!(marked["metadata"]["deletionTimestamp"].is_string(), "{marked}");
    let message = "ConfigMap \"held\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added \
        if the object is being deleted, found new finalizers []string{\"example.com/b\"}";
    // Through a patch, a replace and an apply alike.
    let add = json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}});
    let (code, s) = patch(&server, &format!("{cms}/held"), MERGE, add.clone()).await;
    assert_eq!((code, s["reason"].as_str()), (422, Some("Invalid")), "{s}");
    assert_eq!(s["message"], message);
    let c = cause(&s, "metadata.finalizers").expect("a cause");
    assert_eq!(c["reason"], "FieldValueForbidden");
    let mut replaced = marked.clone();
    replaced["metadata"]["finalizers"] = json!(["example.com/b", "example.com/a"]);
    let s = expect(&server, "PUT", &format!("{cms}/held"), Some(replaced), 422).await;
    assert_eq!(s["message"], message);
    let (code, s) = patch(
        &server,
        &format!("{cms}/held?fieldManager=m"),
        APPLY,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["example.com/b"]}}),
    )
    .await;
    assert_eq!(code, 422, "{s}");
    // Removing one is how it goes.
    let (code, out) = patch(
        &server,
        &format!("{cms}/held"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    until_gone(&server, &format!("{cms}/held")).await;
    server.shutdown().await.unwrap();
}

// ---- A namespace's spec.finalizers change only through /finalize ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaces_spec_finalizers_change_only_through_finalize() {
    let server = start(config(0)).await;
    expect(
        &server,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "team"}})),
        201,
    )
    .await;
    // An object a finalizer holds keeps the namespace Terminating.
    let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/keep"]}});
    expect(
        &server,
        "POST",
        "/api/v1/namespaces/team/configmaps",
        Some(held),
        201,
    )
    .await;
    expect(&server, "DELETE", "/api/v1/namespaces/team", None, 200).await;
    // A plain update cannot drop the `kubernetes` finalizer (the apiserver resets it).
    let (code, out) = patch(
        &server,
        "/api/v1/namespaces/team",
        MERGE,
        json!({"spec": {"finalizers": []}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["spec"]["finalizers"], json!(["kubernetes"]), "{out}");
    let mut ns = expect(&server, "GET", "/api/v1/namespaces/team", None, 200).await;
    ns["spec"]["finalizers"] = json!([]);
    let out = expect(&server, "PUT", "/api/v1/namespaces/team", Some(ns.clone()), 200).await;
    assert_eq!(out["spec"]["finalizers"], json!(["kubernetes"]), "{out}");
    // Nor can a status write.
    let (code, out) = patch(
        &server,
        "/api/v1/namespaces/team/status",
        MERGE,
        json!({"spec": {"finalizers": []}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["spec"]["finalizers"], json!(["kubernetes"]), "{out}");
    // The namespace and what it holds are still there.
    let still = expect(&server, "GET", "/api/v1/namespaces/team", None, 200).await;
    assert_eq!(still["status"]["phase"], "Terminating");
    expect(
        &server,
        "GET",
        "/api/v1/namespaces/team/configmaps/held",
        None,
        200,
    )
    .await;
    // /finalize is the way (kubectl replace --raw …/finalize): it changes spec.finalizers only.
    let mut finalize = still.clone();
    finalize["spec"]["finalizers"] = json!(["example.com/other", "kubernetes"]);
    finalize["status"]["phase"] = json!("Active");
    let out = expect(
        &server,
        "PUT",
        "/api/v1/namespaces/team/finalize",
        Some(finalize),
        200,
    )
    .await;
    assert_eq!(
        out["spec"]["finalizers"],
        json!(["example.com/other", "kubernetes"]),
        "{out}"
    );
    assert_eq!(
        out["status"]["phase"], "Terminating",
        "/finalize leaves the status alone"
    );
    expect(
        &server,
        "PATCH",
        "/api/v1/namespaces/team/finalize",
        Some(json!({})),
        405,
    )
    .await;
    expect(
        &server,
        "PUT",
        "/api/v1/namespaces/default/configmaps/held/finalize",
        Some(json!({})),
        404,
    )
    .await;
    // Emptied through /finalize, a namespace being deleted goes.
    let mut empty = out.clone();
    empty["spec"]["finalizers"] = json!([]);
    expect(
        &server,
        "PUT",
        "/api/v1/namespaces/team/finalize",
        Some(empty),
        200,
    )
    .await;
    until_gone(&server, "/api/v1/namespaces/team").await;
    server.shutdown().await.unwrap();
}

// ---- Graceful pod deletion and the pod garbage collector ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_bound_to_a_node_are_deleted_gracefully() {
    let server = start(config(0)).await;
    expect(
        &server,
        "POST",
        "/api/v1/nodes",
        Some(json!({"metadata": {"name": "n1"}})),
        201,
    )
    .await;
    let pods = "/api/v1/namespaces/default/pods";
    // Bound, with a long grace period: marked, and there until a grace-0 delete.
    let spec = json!({"nodeName": "n1", "terminationGracePeriodSeconds": 3600, "containers": [container()]});
    expect(&server, "POST", pods, Some(pod("bound", spec)), 201).await;
    let before = std::time::SystemTime::now();
    let marked = expect(&server, "DELETE", &format!("{pods}/bound"), None, 200).await;
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 3600, "{marked}");
    let at = humantime::parse_rfc3339(marked["metadata"]["deletionTimestamp"].as_str().unwrap()).unwrap();
    let ahead = at.duration_since(before).expect("in the future").as_secs();
    assert!(
        (3590..=3601).contains(&ahead),
        "deletionTimestamp is now + grace: {ahead}s ahead"
    );
    assert_eq!(
        marked["metadata"]["generation"], 2,
        "the first graceful delete bumps generation"
    );
    let still = expect(&server, "GET", &format!("{pods}/bound"), None, 200).await;
    assert_eq!(
        still["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );
    // A second delete may shorten the grace period, never lengthen it.
    let shorter = expect(
        &server,
        "DELETE",
        &format!("{pods}/bound?gracePeriodSeconds=1800"),
        None,
        200,
    )
    .await;
    assert_eq!(
        shorter["metadata"]["deletionGracePeriodSeconds"], 1800,
        "{shorter}"
    );
    let sooner =
        humantime::parse_rfc3339(shorter["metadata"]["deletionTimestamp"].as_str().unwrap()).unwrap();
    assert_eq!(
        at.duration_since(sooner).unwrap().as_secs(),
        1800,
        "moved by the difference"
    );
    let longer = json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 2400});
    let same = expect(&server, "DELETE", &format!("{pods}/bound"), Some(longer), 200).await;
    assert_eq!(same["metadata"]["deletionGracePeriodSeconds"], 1800, "{same}");
    assert_eq!(
        same["metadata"]["resourceVersion"],
        shorter["metadata"]["resourceVersion"]
    );
    expect(
        &server,
        "DELETE",
        &format!("{pods}/bound?gracePeriodSeconds=0"),
        None,
        200,
    )
    .await;
    expect(&server, "GET", &format!("{pods}/bound"), None, 404).await;

    // Unbound pods, and pods that have finished, go at once.
    expect(
        &server,
        "POST",
        pods,
        Some(pod("unbound", json!({"containers": [container()]}))),
        201,
    )
    .await;
    expect(&server, "DELETE", &format!("{pods}/unbound"), None, 200).await;
    expect(&server, "GET", &format!("{pods}/unbound"), None, 404).await;
    let spec = json!({"nodeName": "n1", "containers": [container()]});
    expect(&server, "POST", pods, Some(pod("done", spec)), 201).await;
    let (code, out) = patch(
        &server,
        &format!("{pods}/done/status"),
        MERGE,
        json!({"status": {"phase": "Succeeded"}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    expect(&server, "DELETE", &format!("{pods}/done"), None, 200).await;
    expect(&server, "GET", &format!("{pods}/done"), None, 404).await;

    // A finalizer holds a force-deleted pod; removing it then deletes the pod.
    let spec = json!({"nodeName": "n1", "terminationGracePeriodSeconds": 3600, "containers": [container()]});
    let mut held = pod("held", spec);
    held["metadata"]["finalizers"] = json!(["example.com/keep"]);
    expect(&server, "POST", pods, Some(held), 201).await;
    let out = expect(
        &server,
        "DELETE",
        &format!("{pods}/held?gracePeriodSeconds=0"),
        None,
        200,
    )
    .await;
    assert_eq!(out["metadata"]["deletionGracePeriodSeconds"], 0, "{out}");
    let (code, out) = patch(
        &server,
        &format!("{pods}/held"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    until_gone(&server, &format!("{pods}/held")).await;

    // A ConfigMap has no graceful deletion: a finalizer holds it with a grace period of 0.
    let cms = "/api/v1/namespaces/default/configmaps";
    expect(
        &server,
        "POST",
        cms,
        Some(json!({"metadata": {"name": "cm", "finalizers": ["example.com/keep"]}})),
        201,
    )
    .await;
    let out = expect(
        &server,
        "DELETE",
        &format!("{cms}/cm?gracePeriodSeconds=30"),
        None,
        200,
    )
    .await;
    assert_eq!(out["metadata"]["deletionGracePeriodSeconds"], 0, "{out}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_gc_finishes_deletions_no_kubelet_will() {
    let server = start(config(0)).await;
    let pods = "/api/v1/namespaces/default/pods";
    // On a node that does not exist: force-deleted as podgc does, grace period or not.
    let spec =
        json!({"nodeName": "gone", "terminationGracePeriodSeconds": 3600, "containers": [container()]});
    expect(&server, "POST", pods, Some(pod("orphan", spec)), 201).await;
    let marked = expect(&server, "DELETE", &format!("{pods}/orphan"), None, 200).await;
    assert!(marked["metadata"]["deletionTimestamp"].is_string(), "{marked}");
    until_gone(&server, &format!("{pods}/orphan")).await;
    // On a node that exists: gone once its grace period has run out, as its kubelet would
    // have deleted it by then.
    expect(
        &server,
        "POST",
        "/api/v1/nodes",
        Some(json!({"metadata": {"name": "n1"}})),
        201,
    )
    .await;
    let spec = json!({"nodeName": "n1", "terminationGracePeriodSeconds": 1, "containers": [container()]});
    expect(&server, "POST", pods, Some(pod("brief", spec)), 201).await;
    let marked = expect(&server, "DELETE", &format!("{pods}/brief"), None, 200).await;
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 1, "{marked}");
    until_gone(&server, &format!("{pods}/brief")).await;
    // Not a pod that is not being deleted.
    let spec = json!({"nodeName": "gone", "containers": [container()]});
    expect(&server, "POST", pods, Some(pod("running", spec)), 201).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    expect(&server, "GET", &format!("{pods}/running"), None, 200).await;
    server.shutdown().await.unwrap();
}

/// Pods made again under their names, as a StatefulSet makes them, in the race.
const REMADE_PODS: usize = 100;

/// What a StatefulSet does to the pods of a node that is gone, while the collector finishes
/// their graceful deletions: each pod is force-deleted and created again under its name (bound
/// to the same node, not being deleted). Returns how many of the new pods are not there once
/// the collector has caught up (none of them was ever marked for deletion, so the collector
/// has no business with any of them).
async fn remade_pods_lost(server: &Arc<Server>) -> usize {
    let pods = "/api/v1/namespaces/default/pods";
    let on_ghost = |name: &str, generation: &str| {
        let mut p = pod(
            name,
            json!({"nodeName": "ghost", "terminationGracePeriodSeconds": 3600, "containers": [container()]}),
        );
        p["metadata"]["labels"] = json!({"gen": generation});
        p
    };
    for i in 0..REMADE_PODS {
        expect(
            server,
            "POST",
            pods,
            Some(on_ghost(&format!("sts-{i}"), "old")),
            201,
        )
        .await;
    }
    // Marked, all of them: the collector finds their node gone and deletes them, a round at a
    // time, while the StatefulSet below makes them again.
    for i in 0..REMADE_PODS {
        expect(server, "DELETE", &format!("{pods}/sts-{i}"), None, 200).await;
    }
    const WORKERS: usize = 10;
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let server = server.clone();
            tokio::spawn(async move {
                for i in (w..REMADE_PODS).step_by(WORKERS) {
                    let path = format!("{pods}/sts-{i}?gracePeriodSeconds=0");
                    let (code, out) = call(&server, "DELETE", &path, None).await;
                    // 404: the collector came first.
                    assert!(code == 200 || code == 404, "a force delete: {code} {out}");
                    expect(
                        &server,
                        "POST",
                        pods,
                        Some(on_ghost(&format!("sts-{i}"), "new")),
                        201,
                    )
                    .await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("a worker ends");
    }
    // A pod marked after every new pod was made: once the collector has deleted it, it has seen
    // every change before (the old pods' deletions among them), and any deletion it was to make
    // of a name made again is made.
    expect(server, "POST", pods, Some(on_ghost("sentinel", "sentinel")), 201).await;
    expect(server, "DELETE", &format!("{pods}/sentinel"), None, 200).await;
    until_gone(server, &format!("{pods}/sentinel")).await;
    let new = expect(
        server,
        "GET",
        &format!("{pods}?labelSelector=gen%3Dnew"),
        None,
        200,
    )
    .await;
    REMADE_PODS - new["items"].as_array().expect("items").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_gc_never_deletes_a_pod_made_again_under_a_terminating_pods_name_on_etcd() {
    let Some(backing) = Backing::new(true).await else {
        return;
    };
    let server = Arc::new(start(backing.config(0)).await);
    let lost = remade_pods_lost(&server).await;
    eprintln!("pods made again under a terminating pod's name on etcd: {lost} of {REMADE_PODS} lost");
    assert_eq!(lost, 0, "the collector deleted pods nobody marked");
    Arc::into_inner(server)
        .expect("workers done")
        .shutdown()
        .await
        .unwrap();
}

/// The same, made certain on the embedded store: the collector's view is held stale (the
/// store's watches paused, so no cache sees a change) while every terminating pod is
/// force-deleted and made again, and then their node is deleted, so that the collector's next
/// round picks every pod it still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_gc_never_deletes_a_pod_made_again_while_its_view_of_the_pods_is_stale() {
    let server = start(config(0)).await;
    let pods = "/api/v1/namespaces/default/pods";
    let node = json!({"metadata": {"name": "n1"}});
    expect(&server, "POST", "/api/v1/nodes", Some(node), 201).await;
    let on_n1 = |name: &str, generation: &str| {
        let mut p = pod(
            name,
            json!({"nodeName": "n1", "terminationGracePeriodSeconds": 3600, "containers": [container()]}),
        );
        p["metadata"]["labels"] = json!({"gen": generation});
        p
    };
    let names: Vec<String> = (0..REMADE_PODS).map(|i| format!("sts-{i}")).collect();
    // The canary is not made again: the collector deletes it once it finds the node gone.
    for name in names.iter().map(String::as_str).chain(["canary"]) {
        expect(&server, "POST", pods, Some(on_n1(name, "old")), 201).await;
        expect(&server, "DELETE", &format!("{pods}/{name}"), None, 200).await;
    }
    // A consistent read: the cache, and so the collector's watch, has every mark.
    let marked = expect(
        &server,
        "GET",
        &format!("{pods}?labelSelector=gen%3Dold"),
        None,
        200,
    )
    .await;
    let marked = marked["items"].as_array().expect("items");
    assert_eq!(marked.len(), REMADE_PODS + 1);
    assert!(
        marked
            .iter()
            .all(|p| p["metadata"]["deletionTimestamp"].is_string())
    );
    let store = watchcache_tests::memory(&server);
    store.pause_watches(true);
    for name in &names {
        expect(
            &server,
            "DELETE",
            &format!("{pods}/{name}?gracePeriodSeconds=0"),
            None,
            200,
        )
        .await;
        expect(&server, "POST", pods, Some(on_n1(name, "new")), 201).await;
    }
    expect(&server, "DELETE", "/api/v1/nodes/n1", None, 200).await;
    // The canary's deletion starts a round that finds every pod the collector holds on a node
    // that is gone; the round runs to its end before the collector reads its watch again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.get("/registry/pods/default/canary").is_some() {
        assert!(
            Instant::now() < deadline,
            "the collector never deleted the canary"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.pause_watches(false);
    // Once a pod marked now is deleted, the collector has read its watch again.
    expect(&server, "POST", pods, Some(on_n1("sentinel", "sentinel")), 201).await;
    expect(&server, "DELETE", &format!("{pods}/sentinel"), None, 200).await;
    until_gone(&server, &format!("{pods}/sentinel")).await;
    let new = expect(
        &server,
        "GET",
        &format!("{pods}?labelSelector=gen%3Dnew"),
        None,
        200,
    )
    .await;
    let lost = REMADE_PODS - new["items"].as_array().expect("items").len();
    eprintln!("pods made again while the collector's view was stale: {lost} of {REMADE_PODS} lost");
    assert_eq!(lost, 0, "the collector deleted pods nobody marked");
    server.shutdown().await.unwrap();
}

// ---- Creates racing their namespace's deletion ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_racing_a_namespace_deletion_do_not_outlive_it() {
    let mut cfg = config(0);
    // Each create pauses between finding its namespace active and writing, as a slow one may:
    // longer than the namespace controller takes to empty and delete a namespace.
    cfg.create_delay = Duration::from_secs(2);
    let server = Arc::new(start(cfg).await);
    let mut survivors = 0;
    let mut created = 0;
    for round in 0..3 {
        let ns = format!("race-{round}");
        expect(
            &server,
            "POST",
            "/api/v1/namespaces",
            Some(json!({"metadata": {"name": ns}})),
            201,
        )
        .await;
        let creators: Vec<_> = (0..3)
            .map(|w| {
                let (server, ns) = (server.clone(), ns.clone());
                tokio::spawn(async move {
                    let mut ok = 0;
                    for k in 0.. {
                        let cm = json!({"metadata": {"name": format!("c-{w}-{k}")}});
                        let (code, out) = call(
                            &server,
                            "POST",
                            &format!("/api/v1/namespaces/{ns}/configmaps"),
                            Some(cm),
                        )
                        .await;
                        match code {
                            201 => ok += 1,
                            403 | 404 => return ok,
                            _ => panic!("a create: {out}"),
                        }
                    }
                    ok
                })
            })
            .collect();
        // Deleted once each creator's first create has landed and while its second is between
        // its check and its write.
        tokio::time::sleep(Duration::from_millis(2300 + 300 * round as u64)).await;
        expect(&server, "DELETE", &format!("/api/v1/namespaces/{ns}"), None, 200).await;
        for c in creators {
            created += c.await.expect("a creator ends");
        }
        until_gone(&server, &format!("/api/v1/namespaces/{ns}")).await;
        let left = expect(
            &server,
            "GET",
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            None,
            200,
        )
        .await;
        survivors += left["items"].as_array().unwrap().len();
    }
    eprintln!("creates racing a namespace's deletion: {survivors} outlived it ({created} answered 201)");
    assert_eq!(survivors, 0, "objects outlived their namespace");
    Arc::into_inner(server)
        .expect("creators done")
        .shutdown()
        .await
        .unwrap();
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

// ---- Apply bodies are declared objects ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_bodies_are_declared_objects_not_patches() {
    let server = start(config(0)).await;
    let path = "/api/v1/namespaces/default/configmaps/ssa";
    let cm = |labels: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": labels}});
    let (code, out) = patch(
        &server,
        &format!("{path}?fieldManager=a"),
        APPLY,
        cm(json!({"x": "1", "y": "2"})),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    // Strategic merge directives are refused wherever they are.
    for body in [
        cm(json!({"$patch": "replace", "z": "3"})),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "$patch": "delete"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "$setElementOrder/finalizers": []}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "$retainKeys": ["name"]}}),
    ] {
        let (code, s) = patch(&server, &format!("{path}?fieldManager=b"), APPLY, body.clone()).await;
        assert_eq!(
            (code, s["reason"].as_str()),
            (400, Some("BadRequest")),
            "{body}: {s}"
        );
        assert!(s["message"].as_str().unwrap().contains("$"), "{s}");
    }
    let pods = "/api/v1/namespaces/default/pods";
    expect(
        &server,
        "POST",
        pods,
        Some(pod("p", json!({"containers": [container()]}))),
        201,
    )
    .await;
    let (code, s) = patch(
        &server,
        &format!("{pods}/p?fieldManager=b"),
        APPLY,
        pod("p", json!({"containers": [{"name": "app", "$patch": "delete"}]})),
    )
    .await;
    assert_eq!(code, 400, "{s}");
    // A null is no deletion: b declares nothing of x, which stays a's.
    let (code, out) = patch(
        &server,
        &format!("{path}?fieldManager=b"),
        APPLY,
        cm(json!({"x": null, "w": "4"})),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["metadata"]["labels"],
        json!({"x": "1", "y": "2", "w": "4"}),
        "{out}"
    );
    let now = expect(&server, "GET", path, None, 200).await;
    assert_eq!(now["metadata"]["labels"]["x"], "1");
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

// ---- Validation of the built-in kinds ----

/// One refusal: what is sent, and what the apiserver answers.
struct Refusal {
    what: &'static str,
    method: &'static str,
    /// Under /api/v1/namespaces/default/.
    path: &'static str,
    body: Value,
    code: u16,
    /// The cause's field and reason (422), or a piece of the message (400).
    field: &'static str,
    reason: &'static str,
}

fn refusals() -> Vec<Refusal> {
    let spec = |containers: Value| json!({"containers": containers});
    let with = |extra: Value| {
        let mut c = container();
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        spec(json!([c]))
    };
    let resources =
        |requests: Value, limits: Value| with(json!({"resources": {"requests": requests, "limits": limits}}));
    let ports = |port: Value| with(json!({"ports": [port]}));
    let meta = |meta: Value| {
        let mut p = pod("x", spec(json!([container()])));
        for (k, v) in meta.as_object().unwrap() {
            p["metadata"][k] = v.clone();
        }
        p
    };
    let r = |what, body, code, field, reason| Refusal {
        what,
        method: "POST",
        path: "pods",
        body,
        code,
        field,
        reason,
    };
    let update = |what, method, body: Value, field, reason| Refusal {
        what,
        method,
        path: "pods/running",
        body,
        code: 422,
        field,
        reason,
    };
    vec![
        r(
            "a pod with no containers",
            pod("x", spec(json!([]))),
            422,
            "spec.containers",
            "FieldValueRequired",
        ),
        r(
            "a pod with no spec",
            json!({"metadata": {"name": "x"}}),
            422,
            "spec.containers",
            "FieldValueRequired",
        ),
        r(
            "a container with no image",
            pod("x", spec(json!([{"name": "app"}]))),
            422,
            "spec.containers[0].image",
            "FieldValueRequired",
        ),
        r(
            "a container with no name",
            pod("x", spec(json!([{"image": "a"}]))),
            422,
            "spec.containers[0].name",
            "FieldValueRequired",
        ),
        r(
            "an env var that is null (a variable without a name)",
            pod("x", with(json!({"env": [null]}))),
            422,
            "spec.containers[0].env[0].name",
            "FieldValueRequired",
        ),
        r(
            "an env var name with an '='",
            pod("x", with(json!({"env": [{"name": "A=B", "value": "1"}]}))),
            422,
            "spec.containers[0].env[0].name",
            "FieldValueInvalid",
        ),
        r(
            "an env var name of an init container with a control character",
            pod(
                "x",
                json!({"containers": [container()], "initContainers": [{"name": "init", "image": "i", "env": [{"name": "A", "value": "1"}, {"name": "B\tC"}]}]}),
            ),
            422,
            "spec.initContainers[0].env[1].name",
            "FieldValueInvalid",
        ),
        r(
            "an envFrom prefix with an '='",
            pod(
                "x",
                with(json!({"envFrom": [{"prefix": "P=", "configMapRef": {"name": "cm"}}]})),
            ),
            422,
            "spec.containers[0].envFrom[0].prefix",
            "FieldValueInvalid",
        ),
        r(
            "a container name that is no DNS label",
            pod("x", spec(json!([{"name": "App_1", "image": "a"}]))),
            422,
            "spec.containers[0].name",
            "FieldValueInvalid",
        ),
        r(
            "two containers of one name",
            pod("x", spec(json!([container(), container()]))),
            422,
            "spec.containers[1].name",
            "FieldValueDuplicate",
        ),
        r(
            "an init container with no image",
            pod(
                "x",
                json!({"containers": [container()], "initContainers": [{"name": "init"}]}),
            ),
            422,
            "spec.initContainers[0].image",
            "FieldValueRequired",
        ),
        r(
            "cpu: lots",
            pod("x", resources(json!({"cpu": "lots"}), json!({}))),
            400,
            "quantities must match the regular expression",
            "",
        ),
        r(
            "memory: 32MMi",
            pod("x", resources(json!({}), json!({"memory": "32MMi"}))),
            400,
            "unable to parse quantity's suffix",
            "",
        ),
        r(
            "a negative request",
            pod("x", resources(json!({"cpu": "-1"}), json!({}))),
            422,
            "spec.containers[0].resources.requests[cpu]",
            "FieldValueInvalid",
        ),
        r(
            "a request over its limit",
            pod("x", resources(json!({"cpu": "2"}), json!({"cpu": "1"}))),
            422,
            "spec.containers[0].resources.requests",
            "FieldValueInvalid",
        ),
        r(
            "a resource no container has",
            pod("x", resources(json!({"gpus": "1"}), json!({}))),
            422,
            "spec.containers[0].resources.requests[gpus]",
            "FieldValueInvalid",
        ),
        r(
            "port 70000",
            pod("x", ports(json!({"containerPort": 70000}))),
            422,
            "spec.containers[0].ports[0].containerPort",
            "FieldValueInvalid",
        ),
        r(
            "a port with no number",
            pod("x", ports(json!({"name": "http"}))),
            422,
            "spec.containers[0].ports[0].containerPort",
            "FieldValueRequired",
        ),
        r(
            "host port 0x10000",
            pod("x", ports(json!({"containerPort": 80, "hostPort": 65536}))),
            422,
            "spec.containers[0].ports[0].hostPort",
            "FieldValueInvalid",
        ),
        r(
            "protocol XTP",
            pod("x", ports(json!({"containerPort": 80, "protocol": "XTP"}))),
            422,
            "spec.containers[0].ports[0].protocol",
            "FieldValueNotSupported",
        ),
        r(
            "a port name too long",
            pod(
                "x",
                ports(json!({"containerPort": 80, "name": "a-very-long-port-name"})),
            ),
            422,
            "spec.containers[0].ports[0].name",
            "FieldValueInvalid",
        ),
        r(
            "restartPolicy: Sometimes",
            pod(
                "x",
                json!({"containers": [container()], "restartPolicy": "Sometimes"}),
            ),
            422,
            "spec.restartPolicy",
            "FieldValueNotSupported",
        ),
        r(
            "a label key with a bad prefix",
            meta(json!({"labels": {"Example.com/app": "x"}})),
            422,
            "metadata.labels",
            "FieldValueInvalid",
        ),
        r(
            "a label value of 64 characters",
            meta(json!({"labels": {"app": "v".repeat(64)}})),
            422,
            "metadata.labels",
            "FieldValueInvalid",
        ),
        r(
            "a label value with a space",
            meta(json!({"labels": {"app": "a b"}})),
            422,
            "metadata.labels",
            "FieldValueInvalid",
        ),
        r(
            "an annotation key with two slashes",
            meta(json!({"annotations": {"a/b/c": "x"}})),
            422,
            "metadata.annotations",
            "FieldValueInvalid",
        ),
        r(
            "annotations over 256 KiB",
            meta(json!({"annotations": {"big": "x".repeat(300 << 10)}})),
            422,
            "metadata.annotations",
            "FieldValueTooLong",
        ),
        r(
            "a finalizer that is no qualified name",
            meta(json!({"finalizers": ["a b"]})),
            422,
            "metadata.finalizers",
            "FieldValueInvalid",
        ),
        Refusal {
            what: "a ConfigMap key with a space",
            method: "POST",
            path: "configmaps",
            body: json!({"metadata": {"name": "x"}, "data": {"a b": "1"}}),
            code: 422,
            field: "data[a b]",
            reason: "FieldValueInvalid",
        },
        Refusal {
            what: "a Secret key that is '..'",
            method: "POST",
            path: "secrets",
            body: json!({"metadata": {"name": "x"}, "data": {"..": "YQ=="}}),
            code: 422,
            field: "data[..]",
            reason: "FieldValueInvalid",
        },
        Refusal {
            what: "Secret data that is not base64",
            method: "POST",
            path: "secrets",
            body: json!({"metadata": {"name": "x"}, "data": {"a": "not base64!"}}),
            code: 400,
            field: "illegal base64 data",
            reason: "",
        },
        update(
            "moving a running pod to another node",
            "PATCH",
            json!({"spec": {"nodeName": "n2"}}),
            "spec",
            "FieldValueForbidden",
        ),
        update(
            "a port added to a running pod",
            "PATCH",
            json!({"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 81}]}]}}),
            "spec",
            "FieldValueForbidden",
        ),
        update(
            "a container added to a running pod",
            "PATCH",
            json!({"spec": {"containers": [{"name": "app"}, {"name": "more", "image": "m"}]}}),
            "spec.containers",
            "FieldValueForbidden",
        ),
        update(
            "an image removed",
            "PATCH",
            json!({"spec": {"containers": [{"name": "app", "image": null}]}}),
            "spec.containers[0].image",
            "FieldValueRequired",
        ),
        Refusal {
            what: "a Service with UDP and TCP on one port, and TCP on it twice",
            method: "POST",
            path: "services",
            body: json!({"metadata": {"name": "dns"}, "spec": {"ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                {"name": "again", "port": 53}]}}),
            code: 422,
            field: "spec.ports[2]",
            reason: "FieldValueDuplicate",
        },
        Refusal {
            what: "a Service of two ports, one without a name",
            method: "POST",
            path: "services",
            body: json!({"metadata": {"name": "two"}, "spec": {"ports": [{"port": 80}, {"name": "b", "port": 81}]}}),
            code: 422,
            field: "spec.ports[0].name",
            reason: "FieldValueRequired",
        },
        update(
            "a bad label on an update",
            "PATCH",
            json!({"metadata": {"labels": {"-x": "1"}}}),
            "metadata.labels",
            "FieldValueInvalid",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_kinds_are_validated_as_the_apiserver_validates_them() {
    let server = start(config(0)).await;
    let base = "/api/v1/namespaces/default";
    let running = pod(
        "running",
        json!({"nodeName": "n1", "containers": [container()], "tolerations": [{"key": "a", "operator": "Exists"}]}),
    );
    expect(&server, "POST", &format!("{base}/pods"), Some(running), 201).await;
    let mut failures = Vec::new();
    for case in refusals() {
        let path = format!("{base}/{}", case.path);
        let (code, s) = match case.method {
            "PATCH" => patch(&server, &path, STRATEGIC, case.body.clone()).await,
            method => call(&server, method, &path, Some(case.body.clone())).await,
        };
        let ok = match case.code {
            422 => {
                code == 422
                    && s["reason"] == "Invalid"
                    && cause(&s, case.field).is_some_and(|c| c["reason"] == case.reason)
                    && s["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains(&format!("{}: ", case.field))
            }
            _ => {
                code == case.code
                    && s["reason"] == "BadRequest"
                    && s["message"].as_str().unwrap_or_default().contains(case.field)
            }
        };
        if !ok {
            failures.push(format!(
                "{}: expected {} {}, got {code} {s}",
                case.what, case.code, case.field
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of the refusals differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Nothing refused was stored; what a running pod may change, it may.
    let list = expect(&server, "GET", &format!("{base}/pods"), None, 200).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    let (code, out) = patch(&server, &format!("{base}/pods/running"), STRATEGIC, json!({"spec": {"containers": [{"name": "app", "image": "app:2"}], "activeDeadlineSeconds": 600, "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]}, "metadata": {"labels": {"tier": "web"}}})).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["spec"]["containers"][0]["image"], "app:2");
    // Messages are the apiserver's.
    let (_, s) = call(
        &server,
        "POST",
        &format!("{base}/pods"),
        Some(pod("x", spec_with_image_missing())),
    )
    .await;
    assert_eq!(
        s["message"],
        "Pod \"x\" is invalid: spec.containers[0].image: Required value"
    );
    assert_eq!(
        cause(&s, "spec.containers[0].image").unwrap()["message"],
        "Required value"
    );
    let (_, s) = call(&server, "POST", &format!("{base}/pods"), Some(pod("x", json!({"containers": [{"name": "app", "image": "a", "resources": {"requests": {"cpu": "lots"}}}]})))).await;
    assert_eq!(
        s["message"],
        "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression \
         '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    let (_, s) = call(&server, "POST", &format!("{base}/pods"), Some(pod("x", json!({"containers": [{"name": "app", "image": "a", "ports": [{"containerPort": 80, "protocol": "XTP"}]}]})))).await;
    assert_eq!(
        s["message"],
        "Pod \"x\" is invalid: spec.containers[0].ports[0].protocol: Unsupported value: \"XTP\": supported values: \"SCTP\", \"TCP\", \"UDP\""
    );
    let (_, s) = call(&server, "POST", &format!("{base}/pods"), Some(pod("x", json!({"containers": [{"name": "app", "image": "a", "resources": {"requests": {"cpu": "1500m"}, "limits": {"cpu": "1"}}}]})))).await;
    assert_eq!(
        s["message"],
        "Pod \"x\" is invalid: spec.containers[0].resources.requests: Invalid value: \"1500m\": must be less than or equal to cpu limit of 1"
    );
    server.shutdown().await.unwrap();
}

fn spec_with_image_missing() -> Value {
    json!({"containers": [{"name": "app"}]})
}

/// Defaults as the apiserver sets them, where they decide what server-side apply keys on: a
/// container port's protocol (TCP), so an applier that stops declaring a port removes it
/// (its entry is `k:{"containerPort":81,"protocol":"TCP"}`, which the stored port must
/// carry); and a Service's empty type, affinity and protocol, and a target port of 0 or "",
/// are filled in, not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_fill_in_what_apply_keys_on_and_what_is_left_empty() {
    let server = start(config(0)).await;
    let base = "/api/v1/namespaces/default";
    let template = |ports: Value| {
        json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
               "template": {"spec": {"containers": [{"name": "c", "image": "i", "ports": ports}]}}})
    };
    let path = format!("{base}/podtemplates/t?fieldManager=m");
    let (code, out) = patch(
        &server,
        &path,
        APPLY,
        template(json!([{"containerPort": 80}, {"containerPort": 81}])),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(
        out["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 81, "protocol": "TCP"}]),
        "{out}"
    );
    let (code, out) = patch(&server, &path, APPLY, template(json!([{"containerPort": 80}]))).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}]),
        "{out}"
    );

    let service = json!({"metadata": {"name": "empty"}, "spec": {"type": "", "sessionAffinity": "",
        "ports": [{"name": "a", "port": 80, "protocol": "", "targetPort": 0}, {"name": "b", "port": 81, "targetPort": ""}]}});
    let (code, out) = call(&server, "POST", &format!("{base}/services"), Some(service)).await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(
        (&out["spec"]["type"], &out["spec"]["sessionAffinity"]),
        (&json!("ClusterIP"), &json!("None")),
        "{out}"
    );
    assert_eq!(
        out["spec"]["ports"],
        json!([{"name": "a", "port": 80, "protocol": "TCP", "targetPort": 80}, {"name": "b", "port": 81, "protocol": "TCP", "targetPort": 81}]),
        "{out}"
    );

    // An update is defaulted as a create is: a Secret replaced without its type keeps
    // Opaque, a ReplicaSet replaced without replicas gets 1.
    let secret = json!({"metadata": {"name": "s"}, "data": {"a": "Yg=="}});
    let out = expect(
        &server,
        "POST",
        &format!("{base}/secrets"),
        Some(secret.clone()),
        201,
    )
    .await;
    assert_eq!(out["type"], "Opaque", "{out}");
    let out = expect(&server, "PUT", &format!("{base}/secrets/s"), Some(secret), 200).await;
    assert_eq!(out["type"], "Opaque", "{out}");
    let rs = |replicas: Option<u64>| {
        let mut rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r"},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        if let Some(n) = replicas {
            rs["spec"]["replicas"] = json!(n);
        }
        rs
    };
    let apps = "/apis/apps/v1/namespaces/default/replicasets";
    let out = expect(&server, "POST", apps, Some(rs(Some(3))), 201).await;
    assert_eq!(out["spec"]["replicas"], 3, "{out}");
    let out = expect(&server, "PUT", &format!("{apps}/r"), Some(rs(None)), 200).await;
    assert_eq!(out["spec"]["replicas"], 1, "{out}");
    server.shutdown().await.unwrap();
}
