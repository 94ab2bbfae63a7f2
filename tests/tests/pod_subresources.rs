//! A pod's `/eviction` (a PodDisruptionBudget's leave, or 429) and `/ephemeralcontainers`
//! (only added, never changed), and Status bodies written byte for byte as the apiserver
//! writes them.

use serde_json::{Value, json};
use watchcache_tests::{config, create_namespaces, get_raw, http, request, request_typed, start};

const NS: &str = "evict";

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
           "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1"}]}})
}

async fn post(server: &watchcache_tests::Server, path: &str, body: Value) -> (u16, Value) {
    let (code, out) = request(&http(), server, "POST", path, Some(body)).await;
    (code, serde_json::from_slice(&out).unwrap_or(Value::Null))
}

fn eviction(name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_takes_a_disruption_from_the_budget_or_is_refused_with_429() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let client = http();
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    for name in ["a", "b", "pending"] {
        let (code, out) = post(&server, &pods, pod(name)).await;
        assert_eq!(code, 201, "{out}");
    }
    for name in ["a", "b"] {
        let (code, out) = request_typed(
            &client,
            &server,
            "PATCH",
            &format!("{pods}/{name}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running"}}).to_string(),
        )
        .await;
        assert_eq!(code, 200, "{out}");
    }
    let pdbs = format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets");
    let budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
                        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    let (code, out) = post(&server, &pdbs, budget).await;
    assert_eq!(code, 201, "{out}");

    // Not yet processed by a disruption controller: refused.
    let (code, refused) = post(&server, &format!("{pods}/a/eviction"), eviction("a")).await;
    assert_eq!(code, 429, "{refused}");
    assert_eq!(
        refused["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(
        refused["details"]["causes"][0]["message"],
        "The disruption budget web is still being processed by the server."
    );
    // Processed, and allowing none.
    let status = |allowed: i64| {
        json!({"status": {"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": 2,
                          "desiredHealthy": 1, "expectedPods": 2}})
        .to_string()
    };
    let set_status = |allowed: i64| {
        let client = client.clone();
        let server = &server;
        let path = format!("{pdbs}/web/status");
        async move {
            let (code, out) = request_typed(
                &client,
                server,
                "PATCH",
                &path,
                "application/merge-patch+json",
                status(allowed),
            )
            .await;
            assert_eq!(code, 200, "{out}");
        }
    };
    set_status(0).await;
    let (code, refused) = post(&server, &format!("{pods}/a/eviction"), eviction("a")).await;
    assert_eq!(code, 429, "{refused}");
    assert_eq!(
        refused["details"]["causes"][0],
        json!({"reason": "DisruptionBudget", "message": "The disruption budget web needs 1 healthy pods and has 2 currently"})
    );
    // Allowing one: a dry run (asked for in the Eviction, as kubectl drain --dry-run=server
    // asks) spends nothing and deletes nothing; then the first eviction takes it, the second
    // is refused.
    set_status(1).await;
    let mut dry = eviction("a");
    dry["deleteOptions"] = json!({"dryRun": ["All"]});
    let (code, out) = post(&server, &format!("{pods}/a/eviction"), dry).await;
    assert_eq!(code, 201, "{out}");
    let (code, _) = request(&client, &server, "GET", &format!("{pods}/a"), None).await;
    assert_eq!(code, 200, "a dry run evicts nothing");
    let (code, done) = post(&server, &format!("{pods}/a/eviction"), eviction("a")).await;
    assert_eq!(code, 201, "{done}");
    assert_eq!(done["status"], "Success");
    let (code, _) = request(&client, &server, "GET", &format!("{pods}/a"), None).await;
    assert_eq!(code, 404, "the evicted pod is gone");
    let (_, pdb) = request(&client, &server, "GET", &format!("{pdbs}/web"), None).await;
    let pdb: Value = serde_json::from_slice(&pdb).unwrap();
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0, "{pdb}");
    assert!(pdb["status"]["disruptedPods"]["a"].is_string(), "{pdb}");
    let (code, _) = post(&server, &format!("{pods}/b/eviction"), eviction("b")).await;
    assert_eq!(code, 429);
    // A pending pod needs no budget's leave; a name that is not the URL's is refused.
    let (code, out) = post(&server, &format!("{pods}/pending/eviction"), eviction("b")).await;
    assert_eq!(code, 400, "{out}");
    let (code, out) = post(&server, &format!("{pods}/pending/eviction"), eviction("pending")).await;
    assert_eq!(code, 201, "{out}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_containers_are_only_added_through_their_subresource() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let client = http();
    let path = format!("/api/v1/namespaces/{NS}/pods/p");
    let (code, out) = post(&server, &format!("/api/v1/namespaces/{NS}/pods"), pod("p")).await;
    assert_eq!(code, 201, "{out}");
    let debugger = json!({"name": "debugger", "image": "busybox", "targetContainerName": "app"});
    // As kubectl debug adds one: a strategic merge patch of the subresource.
    let (code, added) = request_typed(
        &client,
        &server,
        "PATCH",
        &format!("{path}/ephemeralcontainers"),
        "application/strategic-merge-patch+json",
        json!({"spec": {"ephemeralContainers": [debugger]}}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{added}");
    assert_eq!(added["spec"]["ephemeralContainers"][0]["name"], "debugger");
    let (code, got) = request_typed(
        &client,
        &server,
        "GET",
        &format!("{path}/ephemeralcontainers"),
        "",
        "",
    )
    .await;
    assert_eq!((code, &got["kind"]), (200, &json!("Pod")));
    // One changed, or removed, is refused; so is a name taken by a container.
    let mut changed = got.clone();
    changed["spec"]["ephemeralContainers"][0]["image"] = json!("alpine");
    let (code, out) = request(
        &client,
        &server,
        "PUT",
        &format!("{path}/ephemeralcontainers"),
        Some(changed),
    )
    .await;
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"].as_str().unwrap().contains("may not be changed"),
        "{out}"
    );
    let mut removed = got.clone();
    removed["spec"]["ephemeralContainers"] = json!([]);
    let (code, out) = request(
        &client,
        &server,
        "PUT",
        &format!("{path}/ephemeralcontainers"),
        Some(removed),
    )
    .await;
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"].as_str().unwrap().contains("may not be removed"),
        "{out}"
    );
    let (code, out) = request_typed(
        &client,
        &server,
        "PATCH",
        &format!("{path}/ephemeralcontainers"),
        "application/strategic-merge-patch+json",
        json!({"spec": {"ephemeralContainers": [{"name": "app", "image": "busybox"}]}}).to_string(),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    // What only the pod's own containers may have is refused.
    let (code, out) = request_typed(
        &client,
        &server,
        "PATCH",
        &format!("{path}/ephemeralcontainers"),
        "application/strategic-merge-patch+json",
        json!({"spec": {"ephemeralContainers": [debugger, {"name": "junk", "image": "busybox", "ports": [{"containerPort": 80}]}]}}).to_string(),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("cannot be set for an Ephemeral Container"),
        "{out}"
    );
    // The pod itself cannot add one.
    let mut via_pod = got.clone();
    via_pod["spec"]["ephemeralContainers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "other", "image": "busybox"}));
    let (code, _) = request(&client, &server, "PUT", &path, Some(via_pod)).await;
    assert_eq!(code, 422);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_bodies_are_the_apiservers_byte_for_byte() {
    let server = start(config(0)).await;
    let (code, _, body) = get_raw(
        &server,
        "/api/v1/namespaces/default/configmaps/missing",
        "application/json",
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
         \"message\":\"configmaps \\\"missing\\\" not found\",\"reason\":\"NotFound\",\
         \"details\":{\"name\":\"missing\",\"kind\":\"configmaps\"},\"code\":404}\n"
    );
    server.shutdown().await.unwrap();
}
