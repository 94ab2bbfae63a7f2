//! The audit log through the server: each request's `audit.k8s.io/v1` `Event` at
//! `Metadata`, with the verb the apiserver would name, the object it addressed, the user, the
//! code and the times, and the `Audit-Id` header that names it; the policy file's levels;
//! a watch audited when it starts and when it ends; a bad policy refused at start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use watchcache_tests::{AuditConfig, ServeConfig, Server, config, http, request, request_full};

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: None
    nonResourceURLs: ["/readyz*", "/healthz*"]
  - level: None
    resources:
      - group: ""
        resources: ["events"]
  - level: RequestResponse
"#;

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("watchcache-audit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

fn audited(dir: &Path, policy: &str) -> ServeConfig {
    let policy_file = dir.join("policy.yaml");
    std::fs::write(&policy_file, policy).expect("a policy file");
    ServeConfig {
        audit: Some(AuditConfig {
            path: dir.join("audit.log"),
            policy_file: Some(policy_file),
            ..AuditConfig::default()
        }),
        ..config(0)
    }
}

fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.log"))
        .expect("the audit log")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn micros(t: &Value) -> i64 {
    let t = t.as_str().expect("a timestamp");
    assert!(
        t.ends_with('Z') && t.len() == "2006-01-02T15:04:05.000000Z".len(),
        "{t}"
    );
    let ts: jiff::Timestamp = t.parse().expect("RFC 3339");
    ts.as_microsecond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_audited_at_metadata_with_the_apiservers_fields() {
    let dir = dir("fields");
    let server = watchcache_tests::start(audited(&dir, POLICY)).await;
    watchcache_tests::create_namespaces(&server, &["audit"]).await;
    let client = http();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
    let (code, headers, _) = request_full(
        &client,
        &server,
        "POST",
        "/api/v1/namespaces/audit/configmaps",
        Some(cm),
    )
    .await;
    assert_eq!(code, 201);
    let create_id = headers["audit-id"].to_str().unwrap().to_owned();
    for (method, path, code) in [
        ("GET", "/api/v1/namespaces/audit/configmaps/a", 200),
        ("GET", "/api/v1/namespaces/audit/configmaps/missing", 404),
        ("GET", "/api/v1/namespaces/audit/configmaps?limit=10", 200),
        (
            "GET",
            "/api/v1/namespaces/audit/configmaps?watch=true&timeoutSeconds=1",
            200,
        ),
        ("GET", "/api/v1/namespaces/audit/events", 200),
        ("GET", "/readyz", 200),
        ("DELETE", "/api/v1/namespaces/audit/configmaps", 200),
        ("GET", "/version", 200),
    ] {
        let (got, body) = request(&client, &server, method, path, None).await;
        assert_eq!(got, code, "{method} {path}: {}", String::from_utf8_lossy(&body));
    }
    assert!(server.flush_audit(Duration::from_secs(10)).await);
    let events = events(&dir);
    let of = |uri: &str| -> &Value {
        events
            .iter()
            .find(|e| e["requestURI"] == uri)
            .unwrap_or_else(|| panic!("no event for {uri} in {events:#?}"))
    };
    let create = of("/api/v1/namespaces/audit/configmaps");
    assert_eq!(create["kind"], "Event");
    assert_eq!(create["apiVersion"], "audit.k8s.io/v1");
    // RequestResponse is audited at Metadata: no bodies are recorded.
    assert_eq!(create["level"], "Metadata");
    assert_eq!(create["stage"], "ResponseComplete");
    assert_eq!(create["auditID"], create_id.as_str());
    assert_eq!(create["verb"], "create");
    assert_eq!(create["user"]["username"], "system:anonymous");
    assert_eq!(create["user"]["groups"], json!(["system:unauthenticated"]));
    assert_eq!(create["sourceIPs"], json!(["127.0.0.1"]));
    assert_eq!(
        create["objectRef"],
        json!({"resource": "configmaps", "namespace": "audit", "apiVersion": "v1"})
    );
    assert_eq!(create["responseStatus"]["code"], 201);
    assert!(micros(&create["requestReceivedTimestamp"]) <= micros(&create["stageTimestamp"]));
    let get = of("/api/v1/namespaces/audit/configmaps/a");
    assert_eq!(
        (&get["verb"], &get["objectRef"]["name"]),
        (&json!("get"), &json!("a"))
    );
    assert_eq!(
        of("/api/v1/namespaces/audit/configmaps/missing")["responseStatus"]["code"],
        404
    );
    assert_eq!(of("/api/v1/namespaces/audit/configmaps?limit=10")["verb"], "list");
    // A watch is audited when it starts and when it ends, under one id.
    let watch: Vec<&Value> = events.iter().filter(|e| e["verb"] == "watch").collect();
    assert_eq!(watch.len(), 2, "{watch:#?}");
    let (started, complete) = (watch[0], watch[1]);
    assert_eq!(
        (&started["stage"], &complete["stage"]),
        (&json!("ResponseStarted"), &json!("ResponseComplete"))
    );
    assert_eq!(started["auditID"], complete["auditID"]);
    assert_eq!(
        complete["requestURI"],
        "/api/v1/namespaces/audit/configmaps?watch=true&timeoutSeconds=1"
    );
    let lasted = micros(&complete["stageTimestamp"]) - micros(&complete["requestReceivedTimestamp"]);
    assert!(
        lasted >= 900_000,
        "the watch's last event was made at its end: {lasted} µs"
    );
    assert!(micros(&started["stageTimestamp"]) < micros(&complete["stageTimestamp"]));
    // Other requests have no ResponseStarted stage.
    assert_eq!(
        events.iter().filter(|e| e["stage"] == "ResponseStarted").count(),
        1
    );
    assert_eq!(of("/api/v1/namespaces/audit/configmaps")["verb"], "create");
    assert!(events.iter().any(|e| e["verb"] == "deletecollection"));
    let version = of("/version");
    assert!(version.get("objectRef").is_none(), "{version}");
    assert_eq!(version["verb"], "get");
    // The policy's None rules.
    assert!(
        !events
            .iter()
            .any(|e| e["requestURI"] == "/api/v1/namespaces/audit/events")
    );
    assert!(!events.iter().any(|e| e["requestURI"] == "/readyz"));
    // Every request has a distinct id.
    let complete: Vec<&Value> = events
        .iter()
        .filter(|e| e["stage"] == "ResponseComplete")
        .collect();
    let mut ids: Vec<&str> = complete.iter().map(|e| e["auditID"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), complete.len());
    let (_, metrics) = request(&client, &server, "GET", "/metrics", None).await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("apiserver_audit_error_total{plugin=\"log\"} 0"),
        "{metrics}"
    );
    let made = metrics
        .lines()
        .find_map(|l| l.strip_prefix("apiserver_audit_event_total "))
        .and_then(|n| n.parse::<usize>().ok())
        .expect("apiserver_audit_event_total");
    assert!(made >= events.len(), "{made} made, {} written", events.len());
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_bad_policy_or_an_unwritable_log_stops_the_server_from_starting() {
    let dir = dir("bad");
    let bad = audited(
        &dir,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Verbose\n",
    );
    let e = Server::start(bad).await.err().expect("refused").to_string();
    assert!(e.contains("policy.yaml") && e.contains("rules[0].level"), "{e}");
    let mut unwritable = audited(&dir, POLICY);
    if let Some(a) = &mut unwritable.audit {
        a.path = dir.join("no-such-dir").join("audit.log");
    }
    let e = Server::start(unwritable)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("no-such-dir"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
