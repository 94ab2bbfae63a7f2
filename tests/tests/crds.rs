//! CustomResourceDefinitions: a created CRD is served within a second, with its conditions,
//! discovery, OpenAPI, printer columns, selectable fields, `/status` and `/scale`, in each of
//! its served versions; a CRD whose names are taken is not; deleting one deletes its objects
//! first.

use std::time::Duration;

use serde_json::{Value, json};
use watchcache_tests::{Server, config, create_namespaces, get_raw, http, request, request_typed, start};

const NS: &str = "crd";

fn crd(plural: &str, kind: &str, extra_version: bool) -> Value {
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"color": {"type": "string"}, "replicas": {"type": "integer"}}},
        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
    }}});
    let mut versions = vec![json!({
        "name": "v1", "served": true, "storage": true, "schema": schema,
        "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
        "selectableFields": [{"jsonPath": ".spec.color"}],
        "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color"}],
    })];
    if extra_version {
        versions.push(json!({"name": "v1beta1", "served": true, "storage": false, "schema": schema}));
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.to_ascii_lowercase(), "kind": kind, "shortNames": ["wg"]},
                 "versions": versions},
    })
}

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

async fn json(server: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let (code, out) = request(&http(), server, method, path, body).await;
    (code, serde_json::from_slice(&out).unwrap_or(Value::Null))
}

/// Waits (bounded) until `check` holds of the CRD `name`.
async fn crd_until(server: &Server, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..100 {
        let (_, crd) = json(server, "GET", &format!("{CRDS}/{name}"), None).await;
        if check(&crd) {
            return crd;
        }
        last = crd;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{name}: never {what}: {last}");
}

fn condition(crd: &Value, kind: &str) -> String {
    crd["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_is_served_in_its_versions_until_it_is_deleted() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let (code, out) = json(&server, "POST", CRDS, Some(crd("widgets", "Widget", true))).await;
    assert_eq!(code, 201, "{out}");
    let started = std::time::Instant::now();
    let made = crd_until(&server, "widgets.example.com", "established", |c| {
        condition(c, "Established") == "True"
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "served in {:?}",
        started.elapsed()
    );
    assert_eq!(condition(&made, "NamesAccepted"), "True");
    assert_eq!(made["status"]["acceptedNames"]["listKind"], "WidgetList");
    assert_eq!(made["status"]["storedVersions"], json!(["v1"]));

    // Discovery and OpenAPI.
    let (code, list) = json(&server, "GET", "/apis/example.com/v1", None).await;
    assert_eq!(code, 200, "{list}");
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        names.contains(&"widgets") && names.contains(&"widgets/status") && names.contains(&"widgets/scale"),
        "{names:?}"
    );
    let (_, index) = json(&server, "GET", "/openapi/v3", None).await;
    let url = index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("a v3 document: {index}"))
        .to_owned();
    let (_, doc) = json(&server, "GET", &url, None).await;
    assert_eq!(
        doc["components"]["schemas"]["com.example.v1.Widget"]["x-kubernetes-group-version-kind"][0]["kind"],
        "Widget"
    );

    // Objects: written, selected, printed, scaled; in either version, stored in v1.
    let widgets = format!("/apis/example.com/v1/namespaces/{NS}/widgets");
    for (name, color) in [("a", "blue"), ("b", "red")] {
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name},
                       "spec": {"color": color, "replicas": 1}});
        let (code, out) = json(&server, "POST", &widgets, Some(w)).await;
        assert_eq!(code, 201, "{out}");
    }
    let (_, blue) = json(
        &server,
        "GET",
        &format!("{widgets}?fieldSelector=spec.color%3Dblue"),
        None,
    )
    .await;
    let items: Vec<&str> = blue["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(items, ["a"]);
    let (_, _, table) = get_raw(&server, &widgets, "application/json;as=Table;v=v1;g=meta.k8s.io").await;
    let table: Value = serde_json::from_slice(&table).unwrap();
    assert_eq!(table["columnDefinitions"][1]["name"], "Color");
    assert_eq!(table["rows"][0]["cells"], json!(["a", "blue"]));
    let (code, scaled) = request_typed(
        &http(),
        &server,
        "PATCH",
        &format!("{widgets}/a/scale"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": 4}}).to_string(),
    )
    .await;
    assert_eq!((code, &scaled["spec"]["replicas"]), (200, &json!(4)), "{scaled}");
    let beta = format!("/apis/example.com/v1beta1/namespaces/{NS}/widgets");
    let w = json!({"apiVersion": "example.com/v1beta1", "kind": "Widget", "metadata": {"name": "c"}, "spec": {"color": "green"}});
    let (code, out) = json(&server, "POST", &beta, Some(w)).await;
    assert_eq!(
        (code, &out["apiVersion"]),
        (201, &json!("example.com/v1beta1")),
        "{out}"
    );
    let (_, as_v1) = json(&server, "GET", &format!("{widgets}/c"), None).await;
    assert_eq!(as_v1["apiVersion"], "example.com/v1", "{as_v1}");
    let stored = watchcache_tests::memory(&server)
        .get(&format!("/registry/example.com/widgets/{NS}/c"))
        .unwrap()
        .0;
    assert!(String::from_utf8_lossy(&stored).contains(r#""apiVersion":"example.com/v1""#));

    // A CRD whose names are taken in the group is not served.
    let (code, out) = json(&server, "POST", CRDS, Some(crd("gadgets", "Widget", false))).await;
    assert_eq!(code, 201, "{out}");
    let refused = crd_until(&server, "gadgets.example.com", "refused", |c| {
        condition(c, "NamesAccepted") == "False"
    })
    .await;
    assert_ne!(condition(&refused, "Established"), "True", "{refused}");
    let (code, _) = json(
        &server,
        "GET",
        &format!("/apis/example.com/v1/namespaces/{NS}/gadgets"),
        None,
    )
    .await;
    assert_eq!(code, 404);

    // Webhook conversion is refused, clearly.
    let mut webhook = crd("things", "Thing", false);
    webhook["spec"]["conversion"] = json!({"strategy": "Webhook"});
    let (code, out) = json(&server, "POST", CRDS, Some(webhook)).await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("spec.conversion.strategy"),
        "{out}"
    );

    // A group of the Kubernetes project's needs its approval.
    let mut protected = crd("things", "Thing", false);
    protected["metadata"]["name"] = json!("things.core.k8s.io");
    protected["spec"]["group"] = json!("core.k8s.io");
    let (code, out) = json(&server, "POST", CRDS, Some(protected)).await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("api-approved.kubernetes.io"),
        "{out}"
    );

    // Deleted: it is Terminating while an object's own finalizer holds it (still served, no
    // object made), then its objects go, then it, then its endpoints.
    let (code, out) = request_typed(
        &http(),
        &server,
        "PATCH",
        &format!("{widgets}/b"),
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": ["example.com/hold"]}}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let (code, out) = json(&server, "DELETE", &format!("{CRDS}/widgets.example.com"), None).await;
    assert_eq!(code, 200, "{out}");
    crd_until(&server, "widgets.example.com", "terminating", |c| {
        condition(c, "Terminating") == "True"
    })
    .await;
    let late = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "late"}});
    let (code, out) = json(&server, "POST", &widgets, Some(late)).await;
    assert_eq!(code, 405, "no object is made while its CRD goes: {out}");
    let (code, held) = json(&server, "GET", &format!("{widgets}/b"), None).await;
    assert_eq!(code, 200, "{held}");
    assert!(!held["metadata"]["deletionTimestamp"].is_null(), "{held}");
    let (code, out) = request_typed(
        &http(),
        &server,
        "PATCH",
        &format!("{widgets}/b"),
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": null}}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let mut gone = false;
    for _ in 0..250 {
        let (code, _) = json(&server, "GET", &format!("{CRDS}/widgets.example.com"), None).await;
        let (served, _) = json(&server, "GET", &widgets, None).await;
        if code == 404 && served == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the CRD and its endpoints are gone");
    assert!(
        watchcache_core::Source::list(server.store(), "/registry/example.com/widgets/", None)
            .await
            .unwrap()
            .items
            .is_empty(),
        "its objects were deleted"
    );
    server.shutdown().await.unwrap();
}
