//! CustomResourceDefinitions: a created CRD is served within a second, with its conditions,
//! discovery, OpenAPI, printer columns, selectable fields, `/status` and `/scale`, in each of
//! its served versions; a CRD whose names are taken is not; deleting one deletes its objects
//! first.

use std::time::Duration;

use serde_json::{Value, json};
use watchcache_tests::{
    Server, config, create_namespaces, get_raw, http, request, request_full, request_typed, start,
};

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
    let rv = out["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let mut watch =
        watchcache_tests::Frames::open(&server, &format!("{widgets}?watch=1&resourceVersion={rv}")).await;
    let (code, out) = json(&server, "DELETE", &format!("{CRDS}/widgets.example.com"), None).await;
    assert_eq!(code, 200, "{out}");
    crd_until(&server, "widgets.example.com", "terminating", |c| {
        condition(c, "Terminating") == "True"
    })
    .await;
    // Its deletion starting (which moves its generation) does not serve it anew: its watches go
    // on, and see its objects go.
    let mut seen = Vec::new();
    while !seen.iter().any(|f: &Value| {
        f["type"] == "MODIFIED"
            && f["object"]["metadata"]["name"] == "b"
            && !f["object"]["metadata"]["deletionTimestamp"].is_null()
    }) {
        let frame = watch.next_within(Duration::from_secs(5)).await;
        let frame = frame
            .unwrap_or_else(|()| panic!("b's deletion is seen: {seen:?}"))
            .unwrap_or_else(|| panic!("the watch goes on: {seen:?}"));
        assert_ne!(frame["type"], "ERROR", "{frame}");
        seen.push(frame);
    }
    let late = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "late"}});
    let (code, out) = json(&server, "POST", &widgets, Some(late)).await;
    assert_eq!(code, 405, "no object is made while its CRD goes: {out}");
    let (code, held) = json(&server, "GET", &format!("{widgets}/b"), None).await;
    assert_eq!(code, 200, "{held}");
    assert!(!held["metadata"]["deletionTimestamp"].is_null(), "{held}");
    // A spec changed while it goes is served: a version added (an operator's upgrade, which
    // then lets its objects go through it).
    let (code, mut terminating) = json(&server, "GET", &format!("{CRDS}/widgets.example.com"), None).await;
    assert_eq!(code, 200, "{terminating}");
    let mut v2 = terminating["spec"]["versions"][1].clone();
    v2["name"] = json!("v2");
    terminating["spec"]["versions"].as_array_mut().unwrap().push(v2);
    let (code, out) = json(
        &server,
        "PUT",
        &format!("{CRDS}/widgets.example.com"),
        Some(terminating),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let widgets_v2 = format!("/apis/example.com/v2/namespaces/{NS}/widgets");
    let mut served = 0;
    for _ in 0..100 {
        (served, _) = json(&server, "GET", &format!("{widgets_v2}/b"), None).await;
        if served == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(served, 200, "the version added while it goes is served");
    let (code, out) = request_typed(
        &http(),
        &server,
        "PATCH",
        &format!("{widgets_v2}/b"),
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

/// A CRD whose schema has every kind of constraint, a default and CEL rules.
fn strict_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "owner": {"type": "string", "format": "email"},
                    }, "x-kubernetes-validations": [
                        {"rule": "self.size <= 5 || self.color == 'blue'", "message": "big gadgets are blue"},
                        {"rule": "self.size >= oldSelf.size", "message": "size may not shrink"},
                    ]},
                    "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                }}}}]},
    })
}

/// Changes the `spec` schema of the CRD at `path` (its first version's) by `change`, by a GET
/// and a PUT.
async fn edit_spec_schema(server: &Server, path: &str, change: impl FnOnce(&mut Value)) {
    let (code, mut crd) = json(server, "GET", path, None).await;
    assert_eq!(code, 200, "{crd}");
    change(&mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]);
    let (code, out) = json(server, "PUT", path, Some(crd)).await;
    assert_eq!(code, 200, "{out}");
}

async fn merge_patch(server: &Server, path: &str, patch: Value) -> (u16, Value) {
    request_typed(
        &http(),
        server,
        "PATCH",
        path,
        "application/merge-patch+json",
        patch.to_string(),
    )
    .await
}

fn causes(status: &Value) -> Vec<(String, String, String)> {
    status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let text = |f: &str| c[f].as_str().unwrap_or_default().to_owned();
            (text("reason"), text("field"), text("message"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_are_pruned_defaulted_and_validated_by_their_schema() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let (code, out) = json(&server, "POST", CRDS, Some(strict_crd())).await;
    assert_eq!(code, 201, "{out}");
    crd_until(&server, "gadgets.example.com", "established", |c| {
        condition(c, "Established") == "True"
    })
    .await;
    let gadgets = format!("/apis/example.com/v1/namespaces/{NS}/gadgets");

    // Unknown fields are pruned (and named in a warning), the default is set.
    let (code, headers, made) = request_full(
        &http(),
        &server,
        "POST",
        &format!("{gadgets}?fieldValidation=Warn"),
        Some(
            json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"},
            "spec": {"size": 3, "bogus": 1}, "extra": true}),
        ),
    )
    .await;
    let made: Value = serde_json::from_slice(&made).unwrap();
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["spec"], json!({"size": 3, "color": "red"}));
    assert!(made.get("extra").is_none());
    let warnings: Vec<&str> = headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(
        warnings,
        [
            "299 - \"unknown field \\\"extra\\\"\"",
            "299 - \"unknown field \\\"spec.bogus\\\"\""
        ]
    );

    // Strict decoding refuses the unknown fields instead.
    let (code, out) = json(
        &server,
        "POST",
        &format!("{gadgets}?fieldValidation=Strict"),
        Some(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "s"}, "spec": {"size": 1, "bogus": 1}})),
    )
    .await;
    assert_eq!(code, 400, "{out}");
    assert_eq!(
        out["message"],
        "strict decoding error: unknown field \"spec.bogus\""
    );

    // Schema violations are 422 with the apiserver's causes.
    let (code, out) = json(
        &server,
        "POST",
        &gadgets,
        Some(
            json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "bad"},
            "spec": {"size": 0, "color": "pink", "owner": "nobody"}}),
        ),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(out["reason"], "Invalid");
    let mut found = causes(&out);
    found.sort();
    assert_eq!(
        found,
        [
            ("FieldValueInvalid".into(), "spec.size".into(), "Invalid value: 0: spec.size in body should be greater than or equal to 1".into()),
            ("FieldValueNotSupported".into(), "spec.color".into(), "Unsupported value: \"pink\": supported values: \"red\", \"blue\"".into()),
            ("FieldValueTypeInvalid".into(), "spec.owner".into(), "Invalid value: \"nobody\": spec.owner in body must be of type email: \"nobody\"".into()),
            ("FieldValueInvalid".into(), "<nil>".into(), "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into()),
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<(String, String, String)>>()
        .into_iter()
        .collect::<Vec<_>>(),
        "{out}"
    );
    let (code, out) = json(
        &server,
        "POST",
        &gadgets,
        Some(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "bad"}, "spec": {"size": "big"}})),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"].as_str().unwrap().contains(
            "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""
        ),
        "{out}"
    );

    // CEL: a rule on the object, and a transition rule on updates.
    let (code, out) = json(
        &server,
        "POST",
        &gadgets,
        Some(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "big"}, "spec": {"size": 7}})),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(
        out["message"],
        "Gadget.example.com \"big\" is invalid: spec: Invalid value: \"object\": big gadgets are blue"
    );
    let (code, out) = merge_patch(&server, &format!("{gadgets}/g"), json!({"spec": {"size": 2}})).await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .ends_with("spec: Invalid value: \"object\": size may not shrink"),
        "{out}"
    );
    let (code, out) = merge_patch(&server, &format!("{gadgets}/g"), json!({"spec": {"size": 4}})).await;
    assert_eq!((code, &out["spec"]["size"]), (200, &json!(4)), "{out}");

    // The status is validated through /status too.
    let (code, out) = merge_patch(
        &server,
        &format!("{gadgets}/g/status"),
        json!({"status": {"ready": "yes"}}),
    )
    .await;
    assert_eq!(code, 422, "{out}");

    // Tightened, the schema ratchets: `g` (size 4) can still be updated where it is not
    // touched; a change to its size is held to the new bound.
    let path = format!("{CRDS}/gadgets.example.com");
    edit_spec_schema(&server, &path, |spec| {
        spec["properties"]["size"]["maximum"] = json!(3)
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let probe = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "probe"}, "spec": {"size": 4}});
        let (code, out) = json(&server, "POST", &format!("{gadgets}?dryRun=All"), Some(probe)).await;
        if code == 422 {
            break;
        }
        assert_eq!(code, 201, "{out}");
        assert!(
            std::time::Instant::now() < deadline,
            "the tightened schema is not served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, out) = merge_patch(
        &server,
        &format!("{gadgets}/g/status"),
        json!({"status": {"ready": true}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let (code, out) = merge_patch(
        &server,
        &format!("{gadgets}/g"),
        json!({"spec": {"color": "blue"}}),
    )
    .await;
    assert_eq!((code, &out["spec"]["color"]), (200, &json!("blue")), "{out}");
    let (code, out) = merge_patch(&server, &format!("{gadgets}/g"), json!({"spec": {"size": 5}})).await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("spec.size in body should be less than or equal to 3"),
        "{out}"
    );

    // A field added with a default reads with it in the objects stored before, as the
    // apiserver defaults what it reads from etcd; nothing is written.
    let (code, before) = json(&server, "GET", &format!("{gadgets}/g"), None).await;
    assert_eq!(code, 200, "{before}");
    edit_spec_schema(&server, &path, |spec| {
        spec["properties"]["mode"] = json!({"type": "string", "default": "auto"});
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let read = loop {
        let (code, read) = json(&server, "GET", &format!("{gadgets}/g"), None).await;
        assert_eq!(code, 200, "{read}");
        if read["spec"]["mode"] == "auto" {
            break read;
        }
        assert!(std::time::Instant::now() < deadline, "no default on read: {read}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        read["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let (code, list) = json(&server, "GET", &gadgets, None).await;
    assert_eq!(code, 200, "{list}");
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["spec"]["mode"] == "auto"),
        "{list}"
    );

    // A CRD whose rule cannot be evaluated here, or that asks for webhook conversion, is refused.
    let mut unknown_function = strict_crd();
    unknown_function["metadata"]["name"] = json!("gizmos.example.com");
    unknown_function["spec"]["names"] = json!({"plural": "gizmos", "kind": "Gizmo"});
    unknown_function["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
        json!([{"rule": "isURL(self.spec.owner)"}]);
    let (code, out) = json(&server, "POST", CRDS, Some(unknown_function.clone())).await;
    assert_eq!(code, 422, "{out}");
    let message = out["message"].as_str().unwrap();
    assert!(
        message.contains("spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule: Invalid value: \"isURL(self.spec.owner)\": compilation failed")
            && message.contains("undeclared reference to 'isURL'"),
        "{message}"
    );
    let mut webhook = unknown_function;
    webhook["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        .as_object_mut()
        .unwrap()
        .remove("x-kubernetes-validations");
    webhook["spec"]["conversion"] = json!({"strategy": "Webhook"});
    let (code, out) = json(&server, "POST", CRDS, Some(webhook)).await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"].as_str().unwrap().contains(
            "spec.conversion.strategy: Invalid value: \"Webhook\": webhook conversion is not supported"
        ),
        "{out}"
    );
}

/// A CRD whose spec changes is served anew (new caches): its watchers end cleanly, not with
/// 410, and each resumes from its last resourceVersion on the new caches with nothing lost and
/// no relist, as the apiserver ends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_served_anew_ends_its_watches_cleanly_and_they_resume_without_a_relist() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let (code, out) = json(&server, "POST", CRDS, Some(crd("gizmos", "Gizmo", false))).await;
    assert_eq!(code, 201, "{out}");
    crd_until(&server, "gizmos.example.com", "established", |c| {
        condition(c, "Established") == "True"
    })
    .await;
    let objects = format!("/apis/example.com/v1/namespaces/{NS}/gizmos");
    let make = |name: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": name},
               "spec": {"color": "red"}})
    };
    let (code, first) = json(&server, "POST", &objects, Some(make("a"))).await;
    assert_eq!(code, 201, "{first}");
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let mut watch =
        watchcache_tests::Frames::open(&server, &format!("{objects}?watch=1&resourceVersion={rv}")).await;
    let (code, _) = json(&server, "POST", &objects, Some(make("b"))).await;
    assert_eq!(code, 201);
    let added = watch.next_within(Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!(added["object"]["metadata"]["name"], "b", "{added}");
    let mut last = added["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // A spec change: served anew.
    edit_spec_schema(&server, &format!("{CRDS}/gizmos.example.com"), |spec| {
        spec["properties"]["shade"] = json!({"type": "string"});
    })
    .await;
    let mut made = Vec::new();
    let mut ended = false;
    for i in 0..50 {
        let name = format!("c{i:02}");
        let (code, out) = json(&server, "POST", &objects, Some(make(&name))).await;
        assert_eq!(code, 201, "{out}");
        made.push(name);
        // The watch delivers what came before its end, then ends cleanly.
        loop {
            match watch.next_within(Duration::from_millis(100)).await {
                Ok(Some(f)) => {
                    assert_ne!(f["type"], "ERROR", "no 410 while the store holds {last}: {f}");
                    last = f["object"]["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    made.retain(|n| f["object"]["metadata"]["name"] != n.as_str());
                }
                Ok(None) => {
                    ended = true;
                    break;
                }
                Err(()) => break,
            }
        }
        if ended {
            break;
        }
    }
    assert!(ended, "the watch of the old caches ended");
    // Resumed from the last resourceVersion it had: the rest, and no error.
    let mut resumed =
        watchcache_tests::Frames::open(&server, &format!("{objects}?watch=1&resourceVersion={last}")).await;
    for name in made {
        let f = resumed
            .next_within(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (f["type"].as_str(), f["object"]["metadata"]["name"].as_str()),
            (Some("ADDED"), Some(name.as_str())),
            "{f}"
        );
    }
    server.shutdown().await.unwrap();
}

/// The value of the series `series` in `/metrics`, if it is there.
async fn series(server: &Server, series: &str) -> Option<u64> {
    let (_, body) = request(&http(), server, "GET", "/metrics", None).await;
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.split(' ').next() == Some(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Waits (bounded) until the series `name` is `want`.
async fn series_until(server: &Server, name: &str, want: Option<u64>) {
    let mut last = None;
    for _ in 0..100 {
        last = series(server, name).await;
        if last == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{name}: {last:?}, not {want:?}");
}

/// A CRD's versions share its `resource` label, each served by a cache of its own: the label's
/// counters are the sum of its caches', past and present (a CRD served anew replaces its
/// caches, and its counters go on from where they were), and its gauges the sum of the caches
/// served now (none once it is gone). Its watches ended by a change are counted as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crds_metrics_sum_its_versions_caches_and_go_on_when_it_is_served_anew() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let (code, out) = json(&server, "POST", CRDS, Some(crd("doodads", "Doodad", true))).await;
    assert_eq!(code, 201, "{out}");
    crd_until(&server, "doodads.example.com", "established", |c| {
        condition(c, "Established") == "True"
    })
    .await;
    let label = "{resource=\"doodads.example.com\"}";
    let lists = format!("apiserver_watch_cache_initializations_total{label}");
    let capacity = format!("watchcache_ring_capacity{label}");
    let closed = format!("watchcache_watches_closed_total{label}");
    let in_stream = format!("watchcache_watch_expired_in_stream_total{label}");
    let objects = |version: &str| format!("/apis/example.com/{version}/namespaces/{NS}/doodads");
    let (code, made) = json(
        &server,
        "POST",
        &objects("v1"),
        Some(json!({"apiVersion": "example.com/v1", "kind": "Doodad",
                    "metadata": {"name": "a"}, "spec": {"color": "red"}})),
    )
    .await;
    assert_eq!(code, 201, "{made}");
    let rv = made["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    // A watch on each version: each cache has listed. No scrape yet: what the first caches
    // counted is added when they are dropped.
    let mut watches = Vec::new();
    for version in ["v1", "v1beta1"] {
        let path = format!("{}?watch=1&resourceVersion={rv}", objects(version));
        watches.push(watchcache_tests::Frames::open(&server, &path).await);
    }
    // Served anew: two new caches, each listed once more; the watches end cleanly.
    edit_spec_schema(&server, &format!("{CRDS}/doodads.example.com"), |spec| {
        spec["properties"]["shade"] = json!({"type": "string"});
    })
    .await;
    for watch in &mut watches {
        assert_eq!(
            watch.next_within(Duration::from_secs(10)).await,
            Ok(None),
            "the watch of the old caches ends cleanly"
        );
    }
    series_until(&server, &lists, Some(4)).await;
    let one = series(&server, "watchcache_ring_capacity{resource=\"configmaps\"}")
        .await
        .expect("the configmaps' window");
    assert_eq!(
        series(&server, &capacity).await,
        Some(2 * one),
        "the two caches served now"
    );
    series_until(&server, &closed, Some(2)).await;
    assert_eq!(series(&server, &in_stream).await, Some(0), "and with no 410");

    // Gone: no gauge, and the counters stay.
    let (code, out) = json(&server, "DELETE", &format!("{CRDS}/doodads.example.com"), None).await;
    assert_eq!(code, 200, "{out}");
    series_until(&server, &capacity, None).await;
    assert_eq!(series(&server, &lists).await, Some(4));
    server.shutdown().await.unwrap();
}

/// A custom resource's lists merge as its schema says, not as a built-in kind of its name
/// would: under server-side apply a `map` list merges by all its keys (each applier keeps its
/// own entries, and managedFields name each entry by its keys), a `set` by value, and a list
/// with no list type is atomic, owned whole. A strategic merge patch is 415, as the apiserver
/// answers for custom resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resources_lists_merge_by_its_schema_under_apply() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    // Named as the built-in Pod, whose `spec.containers` merge by name and `spec.ports` do not.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "pods.lists.example.com"},
        "spec": {"group": "lists.example.com", "scope": "Namespaced",
            "names": {"plural": "pods", "kind": "Pod"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "ports": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name", "protocol"],
                            "items": {"type": "object", "required": ["name"], "properties": {
                                "name": {"type": "string"}, "protocol": {"type": "string", "default": "TCP"},
                                "port": {"type": "integer"}}}},
                        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "byDomain": {"type": "object", "additionalProperties": {"type": "array",
                            "x-kubernetes-list-type": "set", "items": {"type": "string"}}},
                        "replicas": {"type": "integer"},
                        "containers": {"type": "array", "items": {"type": "object", "properties": {
                            "name": {"type": "string"}, "image": {"type": "string"}}}},
                    }},
                    "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                }}},
                "subresources": {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
            }]},
    });
    let (code, out) = json(&server, "POST", CRDS, Some(crd)).await;
    assert_eq!(code, 201, "{out}");
    crd_until(&server, "pods.lists.example.com", "established", |c| {
        condition(c, "Established") == "True"
    })
    .await;
    let object = format!("/apis/lists.example.com/v1/namespaces/{NS}/pods/x");
    let apply = |manager: &str, spec: Value| {
        let body = json!({"apiVersion": "lists.example.com/v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": spec});
        let path = format!("{object}?fieldManager={manager}");
        let server = &server;
        async move {
            request_typed(
                &http(),
                server,
                "PATCH",
                &path,
                "application/apply-patch+yaml",
                body.to_string(),
            )
            .await
        }
    };
    let (code, out) = apply(
        "a",
        json!({"ports": [{"name": "web", "port": 80}], "tags": ["a"], "byDomain": {"example.com": ["a"]},
               "containers": [{"name": "c1", "image": "i1"}]}),
    )
    .await;
    assert_eq!(code, 201, "{out}");

    // The atomic list is a's, whole: b's other list conflicts with it.
    let (code, out) = apply("b", json!({"containers": [{"name": "c2", "image": "i2"}]})).await;
    assert_eq!(code, 409, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap_or_default()
            .contains(".spec.containers"),
        "{out}"
    );

    // An entry with the same name and another protocol is another entry: both stay.
    let (code, out) = apply(
        "b",
        json!({"ports": [{"name": "web", "protocol": "UDP", "port": 81}], "tags": ["b"],
               "byDomain": {"example.com": ["b"]}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["spec"]["ports"],
        json!([{"name": "web", "protocol": "TCP", "port": 80}, {"name": "web", "protocol": "UDP", "port": 81}]),
        "{out}"
    );
    assert_eq!(out["spec"]["tags"], json!(["a", "b"]), "{out}");
    // A map key with dots is one field, its set merged.
    assert_eq!(
        out["spec"]["byDomain"],
        json!({"example.com": ["a", "b"]}),
        "{out}"
    );
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "c1", "image": "i1"}]),
        "{out}"
    );
    let owned = |manager: &str| -> Value {
        out["metadata"]["managedFields"]
            .as_array()
            .and_then(|m| m.iter().find(|e| e["manager"] == manager))
            .map(|e| e["fieldsV1"]["f:spec"].clone())
            .unwrap_or_else(|| panic!("{manager} owns nothing: {out}"))
    };
    assert_eq!(
        owned("b"),
        json!({"f:ports": {"k:{\"name\":\"web\",\"protocol\":\"UDP\"}": {".": {}, "f:name": {}, "f:protocol": {}, "f:port": {}}},
               "f:tags": {"v:\"b\"": {}}, "f:byDomain": {"f:example.com": {"v:\"b\"": {}}}}),
    );
    assert_eq!(
        owned("a")["f:containers"],
        json!({}),
        "an atomic list is owned whole"
    );
    assert_eq!(
        owned("a")["f:ports"],
        json!({"k:{\"name\":\"web\",\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}}}),
        "an entry whose key is defaulted is owned under its default"
    );

    // a stops setting its entry and its tag: they go, b's stay.
    let (code, out) = apply("a", json!({"containers": [{"name": "c1", "image": "i1"}]})).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["spec"]["ports"],
        json!([{"name": "web", "protocol": "UDP", "port": 81}]),
        "{out}"
    );
    assert_eq!(out["spec"]["tags"], json!(["b"]), "{out}");

    for (path, body) in [
        (object.clone(), json!({"spec": {"tags": ["c"]}})),
        (format!("{object}/scale"), json!({"spec": {"replicas": 2}})),
    ] {
        let (code, out) = request_typed(
            &http(),
            &server,
            "PATCH",
            &path,
            "application/strategic-merge-patch+json",
            body.to_string(),
        )
        .await;
        assert_eq!(
            (code, &out["reason"]),
            (415, &json!("UnsupportedMediaType")),
            "{path}: {out}"
        );
    }
    server.shutdown().await.unwrap();
}

/// Each `managedFields` entry keeps the API version its manager last wrote in, as the
/// apiserver keeps them: a write in one version does not relabel the others' entries, and an
/// updater that writes in two versions has an entry for each (an applier has one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_fields_keep_the_version_each_manager_wrote_in() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let (code, out) = json(&server, "POST", CRDS, Some(crd("gizmos", "Gizmo", true))).await;
    assert_eq!(code, 201, "{out}");
    crd_until(&server, "gizmos.example.com", "established", |c| {
        condition(c, "Established") == "True"
    })
    .await;
    let at = |version: &str| format!("/apis/example.com/{version}/namespaces/{NS}/gizmos");
    let g = json!({"apiVersion": "example.com/v1beta1", "kind": "Gizmo", "metadata": {"name": "g"},
                   "spec": {"color": "blue"}});
    let (code, out) = json(
        &server,
        "POST",
        &format!("{}?fieldManager=maker", at("v1beta1")),
        Some(g),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    let write = |version: &'static str, manager: &'static str, content_type: &'static str, body: Value| {
        let path = format!("{}/g?fieldManager={manager}", at(version));
        let server = &server;
        async move {
            let (code, out) =
                request_typed(&http(), server, "PATCH", &path, content_type, body.to_string()).await;
            assert!(code == 200, "{version} {manager}: {code} {out}");
        }
    };
    const MERGE: &str = "application/merge-patch+json";
    write("v1", "painter", MERGE, json!({"spec": {"color": "red"}})).await;
    write(
        "v1beta1",
        "applier",
        "application/apply-patch+yaml",
        json!({"apiVersion": "example.com/v1beta1", "kind": "Gizmo", "metadata": {"name": "g"},
               "spec": {"replicas": 3}}),
    )
    .await;
    write(
        "v1beta1",
        "painter",
        MERGE,
        json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await;
    let (_, got) = json(&server, "GET", &format!("{}/g", at("v1")), None).await;
    let mut entries: Vec<(String, String, String, Vec<String>)> = got["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("{got}"))
        .iter()
        .map(|e| {
            let text = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
            let owned = e["fieldsV1"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            (text("manager"), text("operation"), text("apiVersion"), owned)
        })
        .collect();
    entries.sort();
    let entry = |m: &str, op: &str, v: &str, f: &[&str]| {
        (
            m.to_owned(),
            op.to_owned(),
            v.to_owned(),
            f.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        entries,
        vec![
            entry("applier", "Apply", "example.com/v1beta1", &["f:spec"]),
            entry("painter", "Update", "example.com/v1", &["f:spec"]),
            entry("painter", "Update", "example.com/v1beta1", &["f:metadata"]),
        ],
        "maker's color went to painter: {got}"
    );
    server.shutdown().await.unwrap();
}
