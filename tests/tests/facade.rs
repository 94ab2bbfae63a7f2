//! The facade beyond LIST and WATCH, over HTTP: PATCH of the four types with the apiserver's
//! status codes, server-side apply with field ownership, `managedFields` kept by every write,
//! the metadata a client may not set, the OpenAPI documents and the field validation they
//! promise, and Table output.

use serde_json::{Value, json};
use watchcache_tests::{Server, config, get_raw, http, request, request_full, request_typed, start};

const JSON: &str = "application/json-patch+json";
const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

async fn patch(server: &Server, path: &str, content_type: &str, body: Value) -> (u16, Value) {
    request_typed(&http(), server, "PATCH", path, content_type, body.to_string()).await
}

async fn get(server: &Server, path: &str) -> Value {
    let (code, body) = request(&http(), server, "GET", path, None).await;
    assert_eq!(code, 200, "GET {path}: {}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    (
                        m["manager"].as_str().unwrap().to_owned(),
                        m["operation"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_patch_type_applies_and_bad_ones_get_the_apiservers_codes() {
    let server = start(config(0)).await;
    let c = http();
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}});
    let (code, _) = request(&c, &server, "POST", pods, Some(pod)).await;
    assert_eq!(code, 201);
    let path = format!("{pods}/p");

    // Strategic: the container named b is merged, a is kept.
    let (code, out) = patch(
        &server,
        &path,
        STRATEGIC,
        json!({"spec": {"containers": [{"name": "b", "image": "b:2"}]}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}])
    );
    // Merge: the list is replaced whole (a pod's containers may only change their images); a
    // null removes a label.
    let (code, out) = patch(
        &server,
        &path,
        MERGE,
        json!({"metadata": {"labels": {"app": null, "tier": "x"}}, "spec": {"containers": [{"image": "a:3", "name": "a"}, {"name": "b", "image": "b:3"}]}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["metadata"]["labels"], json!({"tier": "x"}));
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "a", "image": "a:3"}, {"name": "b", "image": "b:3"}])
    );
    // JSON patch, with a test that holds.
    let ops = json!([
        {"op": "test", "path": "/metadata/labels/tier", "value": "x"},
        {"op": "add", "path": "/metadata/annotations", "value": {"note": "hi"}}
    ]);
    let (code, out) = patch(&server, &path, JSON, ops).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["metadata"]["annotations"]["note"], "hi");
    // What the patches wrote is what a GET reads, at the revision the last one answered.
    let read = get(&server, &path).await;
    assert_eq!(
        read["metadata"]["resourceVersion"],
        out["metadata"]["resourceVersion"]
    );
    assert_eq!(read["metadata"]["annotations"], json!({"note": "hi"}));

    // 422: a test that fails, a path that is not there, an element without its merge key.
    let failed = json!([{"op": "test", "path": "/metadata/labels/tier", "value": "y"}]);
    let missing = json!([{"op": "replace", "path": "/spec/nothing/here", "value": 1}]);
    let keyless = json!({"spec": {"containers": [{"image": "no-name"}]}});
    for (ty, body) in [(JSON, failed), (JSON, missing), (STRATEGIC, keyless)] {
        let (code, s) = patch(&server, &path, ty, body).await;
        assert_eq!((code, s["reason"].as_str()), (422, Some("Invalid")), "{s}");
    }
    // 400: not a patch of its type. 415: not a patch type.
    let (code, s) = request_typed(&c, &server, "PATCH", &path, JSON, "{\"op\":1}").await;
    assert_eq!((code, s["reason"].as_str()), (400, Some("BadRequest")), "{s}");
    let (code, s) = request_typed(&c, &server, "PATCH", &path, MERGE, "not json").await;
    assert_eq!(code, 400, "{s}");
    for ct in ["application/json", "text/plain", "application/yaml"] {
        let (code, s) = request_typed(&c, &server, "PATCH", &path, ct, "{}").await;
        assert_eq!(
            (code, s["reason"].as_str()),
            (415, Some("UnsupportedMediaType")),
            "{ct}: {s}"
        );
    }
    // 404 for an object that is not there; 409 for a resourceVersion that is not current;
    // a patch that renames the object is refused.
    let (code, _) = patch(&server, &format!("{pods}/nope"), MERGE, json!({})).await;
    assert_eq!(code, 404);
    let (code, s) = patch(
        &server,
        &path,
        MERGE,
        json!({"metadata": {"resourceVersion": "1"}}),
    )
    .await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    let current = read["metadata"]["resourceVersion"].clone();
    let (code, s) = patch(
        &server,
        &path,
        MERGE,
        json!({"metadata": {"resourceVersion": current, "labels": {"v": "2"}}}),
    )
    .await;
    assert_eq!(
        code, 200,
        "the current resourceVersion is a precondition that holds: {s}"
    );
    let (code, s) = patch(&server, &path, MERGE, json!({"metadata": {"name": "other"}})).await;
    assert_eq!(code, 400, "{s}");
    // force is only for apply; a dry run stores nothing.
    let (code, _) = patch(&server, &format!("{path}?force=true"), MERGE, json!({})).await;
    assert_eq!(code, 422);
    let (code, out) = patch(
        &server,
        &format!("{path}?dryRun=All"),
        MERGE,
        json!({"metadata": {"labels": {"dry": "1"}}}),
    )
    .await;
    assert_eq!(
        (code, out["metadata"]["labels"]["dry"].as_str()),
        (200, Some("1"))
    );
    assert!(
        get(&server, &path).await["metadata"]["labels"]
            .get("dry")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_creates_merges_owns_conflicts_and_removes() {
    let server = start(config(0)).await;
    let path = "/api/v1/namespaces/default/configmaps/cm";
    let config = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data});

    // fieldManager is required.
    let (code, s) = patch(&server, path, APPLY, config(json!({"a": "1"}))).await;
    assert_eq!(code, 422, "{s}");
    // The first apply creates.
    let (code, out) = patch(
        &server,
        &format!("{path}?fieldManager=alice"),
        APPLY,
        config(json!({"a": "1", "b": "1"})),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    assert_eq!(managers(&out), [("alice".to_owned(), "Apply".to_owned())]);
    assert_eq!(
        out["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}})
    );
    // Bob sets b to another value: a conflict with alice, unless forced.
    let (code, s) = patch(
        &server,
        &format!("{path}?fieldManager=bob"),
        APPLY,
        config(json!({"b": "2"})),
    )
    .await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    assert_eq!(s["details"]["causes"][0]["field"], ".data.b");
    assert!(s["message"].as_str().unwrap().contains("\"alice\""), "{s}");
    let (code, out) = patch(
        &server,
        &format!("{path}?fieldManager=bob&force=true"),
        APPLY,
        config(json!({"b": "2"})),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
    // Alice stops applying a and b: a goes (only she owned it); b stays (bob owns it).
    let (code, out) = patch(
        &server,
        &format!("{path}?fieldManager=alice"),
        APPLY,
        config(json!({"c": "3"})),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["data"], json!({"b": "2", "c": "3"}));
    // An update by someone else takes what it changes: carol's merge patch makes c hers, and
    // alice re-applying c=3 over carol's c=4 now conflicts.
    let (code, out) = patch(
        &server,
        &format!("{path}?fieldManager=carol"),
        MERGE,
        json!({"data": {"c": "4"}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert!(
        managers(&out).contains(&("carol".to_owned(), "Update".to_owned())),
        "{out}"
    );
    let (code, s) = patch(
        &server,
        &format!("{path}?fieldManager=alice"),
        APPLY,
        config(json!({"c": "3"})),
    )
    .await;
    assert_eq!(code, 409, "{s}");
    assert!(s["message"].as_str().unwrap().contains("\"carol\""), "{s}");
    // YAML, as curl users send it, applies like JSON.
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  e: \"5\"\n";
    let (code, out) = request_typed(
        &http(),
        &server,
        "PATCH",
        &format!("{path}?fieldManager=dave"),
        APPLY,
        yaml,
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["data"]["e"], "5");
    // A body that is not an apply configuration.
    let (code, _) = request_typed(
        &http(),
        &server,
        "PATCH",
        &format!("{path}?fieldManager=x"),
        APPLY,
        "[]",
    )
    .await;
    assert_eq!(code, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_keep_managed_fields_and_ignore_server_owned_metadata() {
    let server = start(config(0)).await;
    let c = http();
    let cms = "/api/v1/namespaces/default/configmaps";
    let sent = json!({"metadata": {"name": "cm", "uid": "mine", "creationTimestamp": "2001-01-01T00:00:00Z",
        "managedFields": [{"manager": "forged", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}],
        "deletionTimestamp": "2001-01-01T00:00:00Z"}, "data": {"a": "1"}});
    let (code, body) = request(
        &c,
        &server,
        "POST",
        &format!("{cms}?fieldManager=maker"),
        Some(sent),
    )
    .await;
    assert_eq!(code, 201);
    let created: Value = serde_json::from_slice(&body).unwrap();
    assert_ne!(created["metadata"]["uid"], "mine");
    assert_ne!(created["metadata"]["creationTimestamp"], "2001-01-01T00:00:00Z");
    assert!(
        created["metadata"].get("deletionTimestamp").is_none(),
        "{created}"
    );
    assert_eq!(managers(&created), [("maker".to_owned(), "Update".to_owned())]);

    // A PUT that sends another uid and no managedFields keeps the server's, and its manager
    // (named after the User-Agent when no fieldManager is given: hyper sends none, so
    // "unknown") owns what it changed.
    let mut replaced = created.clone();
    replaced["metadata"]["uid"] = json!("other");
    replaced["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    replaced["data"]["b"] = json!("2");
    let (code, body) = request(&c, &server, "PUT", &format!("{cms}/cm"), Some(replaced)).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let updated: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        managers(&updated),
        [
            ("maker".to_owned(), "Update".to_owned()),
            ("unknown".to_owned(), "Update".to_owned())
        ]
    );
    assert_eq!(
        get(&server, &format!("{cms}/cm")).await["metadata"]["managedFields"],
        updated["metadata"]["managedFields"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_documents_describe_the_served_kinds_and_field_validation_follows_them() {
    let server = start(config(0)).await;
    let c = http();
    // v3: an index, then a document per group-version with kubectl's extensions.
    let (code, body) = request(&c, &server, "GET", "/openapi/v3", None).await;
    assert_eq!(code, 200);
    let index: Value = serde_json::from_slice(&body).unwrap();
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .expect("api/v1 is listed")
        .to_owned();
    assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
    assert!(
        index["paths"]["apis/coordination.k8s.io/v1"]["serverRelativeURL"].is_string(),
        "Leases have their group's document: {index}"
    );
    let (code, body) = request(&c, &server, "GET", &url, None).await;
    assert_eq!(code, 200);
    let v3: Value = serde_json::from_slice(&body).unwrap();
    let schemas = &v3["components"]["schemas"];
    assert_eq!(
        schemas["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "version": "v1", "kind": "Pod"}])
    );
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name", "{containers}");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    let patch_op = &v3["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
    assert_eq!(patch_op["x-kubernetes-group-version-kind"]["kind"], "Pod");
    assert!(
        patch_op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"),
        "kubectl leaves validation to the server only if PATCH declares fieldValidation"
    );
    for kind in ["ConfigMap", "Secret", "Namespace", "Node"] {
        assert!(
            schemas[format!("io.k8s.api.core.v1.{kind}")].is_object(),
            "{kind}"
        );
    }
    let (code, _) = request(&c, &server, "GET", "/openapi/v3/apis/nothing/v9", None).await;
    assert_eq!(code, 404);

    // v2: JSON when asked for JSON, protobuf when asked for it (as client-go asks), 406 else.
    let openapi_v2 = |accept: &'static str| get_raw(&server, "/openapi/v2", accept);
    let (code, _, body) = openapi_v2("application/json").await;
    assert_eq!(code, 200);
    let v2: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v2["swagger"], "2.0");
    assert_eq!(
        v2["definitions"]["io.k8s.api.core.v1.ConfigMap"]["x-kubernetes-group-version-kind"][0]["kind"],
        "ConfigMap"
    );
    let (code, ct, body) = openapi_v2("application/com.github.proto-openapi.spec.v2@v1.0+protobuf").await;
    assert_eq!(code, 200);
    assert!(ct.unwrap().contains("protobuf"));
    // Field 1 (swagger) is the first thing in the message: tag 0x0a, length 3, "2.0".
    assert_eq!(&body[..5], b"\x0a\x032.0");
    let (code, _, _) = openapi_v2("text/html").await;
    assert_eq!(code, 406);

    // fieldValidation: Strict refuses unknown fields by name; Warn (the default) and Ignore
    // drop them, Warn with a Warning header per field.
    let cms = "/api/v1/namespaces/default/configmaps";
    let with_unknown =
        |name: &str| json!({"metadata": {"name": name, "bogus": 1}, "data": {"a": "1"}, "dataa": {"x": "y"}});
    let (code, body) = request(
        &c,
        &server,
        "POST",
        &format!("{cms}?fieldValidation=Strict"),
        Some(with_unknown("s")),
    )
    .await;
    assert_eq!(code, 400);
    let s: Value = serde_json::from_slice(&body).unwrap();
    let message = s["message"].as_str().unwrap();
    assert!(
        message.contains("unknown field \"dataa\"") && message.contains("unknown field \"metadata.bogus\""),
        "{message}"
    );
    let (code, headers, body) = request_full(&c, &server, "POST", cms, Some(with_unknown("w"))).await;
    assert_eq!(code, 201);
    let warnings: Vec<&str> = headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].starts_with("299 - "), "{warnings:?}");
    let stored: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        stored.get("dataa").is_none() && stored["metadata"].get("bogus").is_none(),
        "{stored}"
    );
    let (code, headers, _) = request_full(
        &c,
        &server,
        "POST",
        &format!("{cms}?fieldValidation=Ignore"),
        Some(with_unknown("i")),
    )
    .await;
    assert_eq!(code, 201);
    assert!(headers.get("warning").is_none());
    assert!(get(&server, &format!("{cms}/i")).await.get("dataa").is_none());
    // Strict applies to a patch's result too.
    let (code, _) = patch(
        &server,
        &format!("{cms}/i?fieldValidation=Strict"),
        MERGE,
        json!({"dataa": {}}),
    )
    .await;
    assert_eq!(code, 400);
}

const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// [`get_raw`], the body as JSON.
async fn get_accept(server: &Server, path: &str, accept: &str) -> (u16, Option<String>, Value) {
    let (code, ct, body) = get_raw(server, path, accept).await;
    (code, ct, serde_json::from_slice(&body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_carry_the_apiservers_columns_for_lists_gets_and_watches() {
    let server = start(config(0)).await;
    let c = http();
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}});
    let (code, _) = request(&c, &server, "POST", pods, Some(pod)).await;
    assert_eq!(code, 201);
    // The status is the kubelet's to write, through /status.
    let status = json!({"status": {"phase": "Running", "podIP": "10.0.0.9", "containerStatuses": [
        {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}},
        {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}});
    let (code, out) = patch(&server, &format!("{pods}/p/status"), MERGE, status).await;
    assert_eq!(code, 200, "{out}");

    let (code, ct, table) = get_accept(&server, &format!("{pods}?limit=500"), TABLE_ACCEPT).await;
    assert_eq!(code, 200);
    assert_eq!(
        ct.as_deref(),
        Some("application/json;as=Table;v=v1;g=meta.k8s.io")
    );
    assert_eq!(
        (table["kind"].as_str(), table["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1"))
    );
    let columns: Vec<(&str, u64)> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Name", 0),
            ("Ready", 0),
            ("Status", 0),
            ("Restarts", 0),
            ("Age", 0),
            ("IP", 1),
            ("Node", 1),
            ("Nominated Node", 1),
            ("Readiness Gates", 1)
        ]
    );
    let row = &table["rows"][0];
    assert_eq!(
        row["cells"].as_array().unwrap()[..4],
        [json!("p"), json!("1/2"), json!("ImagePullBackOff"), json!("1")]
    );
    assert_eq!(
        row["cells"].as_array().unwrap()[5..7],
        [json!("10.0.0.9"), json!("n1")]
    );
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["namespace"], "default");
    assert!(table["metadata"]["resourceVersion"].is_string());
    // includeObject=Object carries the whole object; None, nothing.
    let (_, _, full) = get_accept(&server, &format!("{pods}?includeObject=Object"), TABLE_ACCEPT).await;
    assert_eq!(full["rows"][0]["object"]["kind"], "Pod");
    let (_, _, bare) = get_accept(&server, &format!("{pods}?includeObject=None"), TABLE_ACCEPT).await;
    assert!(bare["rows"][0].get("object").is_none());
    let (code, _, _) = get_accept(&server, &format!("{pods}?includeObject=All"), TABLE_ACCEPT).await;
    assert_eq!(code, 400);
    // A GET is a Table of one row; a client that did not ask gets the object.
    let (_, _, one) = get_accept(&server, &format!("{pods}/p"), TABLE_ACCEPT).await;
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    let (_, _, plain) = get_accept(&server, &format!("{pods}/p"), "application/json").await;
    assert_eq!(plain["kind"], "Pod");
    // Other kinds have their own columns.
    let (code, _) = request(
        &c,
        &server,
        "POST",
        "/api/v1/namespaces/default/secrets",
        Some(json!({"metadata": {"name": "s"}, "data": {"k": "dg=="}})),
    )
    .await;
    assert_eq!(code, 201);
    let (_, _, secrets) = get_accept(&server, "/api/v1/namespaces/default/secrets", TABLE_ACCEPT).await;
    assert_eq!(
        secrets["rows"][0]["cells"].as_array().unwrap()[..3],
        [json!("s"), json!("Opaque"), json!(1)]
    );

    // A watch: each event is a Table of one row, column definitions on the first only.
    let (code, mut frames) = watchcache_tests::Frames::open_accepting(
        &server,
        &format!("{pods}?watch=true&resourceVersion=0"),
        TABLE_ACCEPT,
    )
    .await;
    assert_eq!(code, 200);
    let first = frames.next().await.expect("the initial event");
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Table");
    assert!(first["object"]["columnDefinitions"].is_array());
    assert_eq!(first["object"]["rows"][0]["cells"][0], "p");
    let (code, _) = patch(
        &server,
        &format!("{pods}/p/status"),
        MERGE,
        json!({"status": {"phase": "Failed"}}),
    )
    .await;
    assert_eq!(code, 200);
    let next = frames.next().await.expect("the change");
    assert_eq!(next["type"], "MODIFIED");
    assert!(next["object"].get("columnDefinitions").is_none());
    assert_eq!(next["object"]["rows"].as_array().unwrap().len(), 1);
}

const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// kube-rs's metadata watcher (`Controller::owns`) and client-go's metadata informers read
/// objects reduced to their metadata: a LIST as a PartialObjectMetadataList (streamed over
/// several chunks here, and paginated), a GET and each watch event as a PartialObjectMetadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_reads_carry_each_objects_metadata_and_nothing_else() {
    let server = start(config(0)).await;
    let c = http();
    let cms = "/api/v1/namespaces/default/configmaps";
    // 120 objects of about 1.5 KiB of metadata: the list spans more than one 64 KiB chunk.
    for i in 0..120 {
        let cm = json!({"metadata": {"name": format!("cm-{i:03}"), "annotations": {"note": "x".repeat(1500)}},
            "data": {"k": "v"}});
        let (code, _) = request(&c, &server, "POST", cms, Some(cm)).await;
        assert_eq!(code, 201);
    }
    let (_, _, full) = get_accept(&server, cms, "application/json").await;
    let (code, ct, list) = get_accept(&server, cms, METADATA_LIST).await;
    assert_eq!(code, 200);
    assert_eq!(ct.as_deref(), Some(METADATA_LIST));
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(
        list["metadata"]["resourceVersion"],
        full["metadata"]["resourceVersion"]
    );
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 120);
    for (item, object) in items.iter().zip(full["items"].as_array().unwrap()) {
        assert_eq!(
            item,
            &json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"]})
        );
    }
    // Pages: the list's metadata carries the token and the count left.
    let (_, _, page) = get_accept(&server, &format!("{cms}?limit=100"), METADATA_LIST).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 100);
    assert_eq!(page["metadata"]["remainingItemCount"], 20);
    let token = page["metadata"]["continue"].as_str().expect("a continue token");
    let (_, _, rest) = get_accept(
        &server,
        &format!("{cms}?limit=100&continue={token}"),
        METADATA_LIST,
    )
    .await;
    assert_eq!(rest["items"].as_array().unwrap().len(), 20);
    assert_eq!(rest["items"][0]["metadata"]["name"], "cm-100");
    // One object; and the wrong kind for what is read is 406, as the apiserver answers it.
    let (code, ct, one) = get_accept(&server, &format!("{cms}/cm-007"), METADATA).await;
    assert_eq!((code, ct.as_deref()), (200, Some(METADATA)));
    assert_eq!(one["metadata"], full["items"][7]["metadata"]);
    assert!(one.get("data").is_none());
    let (code, _, status) = get_accept(&server, &format!("{cms}/cm-007"), METADATA_LIST).await;
    assert_eq!((code, status["reason"].as_str()), (406, Some("NotAcceptable")));
    let (code, _, _) = get_accept(&server, cms, METADATA).await;
    assert_eq!(code, 406);

    // A streaming list's watch: each initial object and the end bookmark in metadata form,
    // then a change.
    let (code, mut frames) = watchcache_tests::Frames::open_accepting(
        &server,
        &format!("{cms}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
        METADATA,
    )
    .await;
    assert_eq!(code, 200);
    for i in 0..120 {
        let event = frames.next().await.expect("an initial event");
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(event["object"]["metadata"]["name"], format!("cm-{i:03}"));
        assert!(event["object"].get("data").is_none());
    }
    let end = frames.next().await.expect("the bookmark");
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(end["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let (code, _) = patch(
        &server,
        &format!("{cms}/cm-000"),
        MERGE,
        json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await;
    assert_eq!(code, 200);
    let next = frames.next().await.expect("the change");
    assert_eq!(next["type"], "MODIFIED");
    assert_eq!(next["object"]["metadata"]["labels"]["a"], "b");
    assert!(next["object"].get("data").is_none());

    // A metadata client's PATCH is answered with the metadata alone.
    let req = ::http::Request::builder()
        .method("PATCH")
        .uri(format!("http://{}{cms}/cm-001", server.addr()))
        .header("accept", METADATA)
        .header("content-type", MERGE)
        .body(http_body_util::Full::new(bytes::Bytes::from(
            json!({"metadata": {"labels": {"owned": "yes"}}}).to_string(),
        )))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers().get("content-type").and_then(|v| v.to_str().ok()),
        Some(METADATA)
    );
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let patched: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (patched["kind"].as_str(), patched["apiVersion"].as_str()),
        (Some("PartialObjectMetadata"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(patched["metadata"]["labels"]["owned"], "yes");
    assert!(patched.get("data").is_none(), "{patched}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_follows_the_spec_and_finalizers_hold_a_deleted_object_until_removed() {
    let server = start(config(0)).await;
    let c = http();
    let pods = "/api/v1/namespaces/ns-0/pods";
    let pod = json!({"metadata": {"name": "g", "generation": 7}, "spec": {"containers": [{"name": "a", "image": "a:1"}]}});
    let (code, body) = request(&c, &server, "POST", pods, Some(pod)).await;
    assert_eq!(code, 201);
    let created: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        created["metadata"]["generation"], 1,
        "the client's generation is ignored"
    );
    let (_, out) = patch(
        &server,
        &format!("{pods}/g"),
        MERGE,
        json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await;
    assert_eq!(out["metadata"]["generation"], 1, "metadata is not spec");
    let (_, out) = patch(
        &server,
        &format!("{pods}/g"),
        STRATEGIC,
        json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}}),
    )
    .await;
    assert_eq!(out["metadata"]["generation"], 2, "a spec change");
    let (_, body) = request(
        &c,
        &server,
        "POST",
        "/api/v1/namespaces/ns-0/configmaps",
        Some(json!({"metadata": {"name": "nogen"}})),
    )
    .await;
    let cm: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        cm["metadata"].get("generation").is_none(),
        "ConfigMaps keep no generation: {cm}"
    );

    // A finalizer holds a deleted object: marked, still readable, then gone with the finalizer.
    let cms = "/api/v1/namespaces/ns-0/configmaps";
    let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {"a": "1"}});
    let (code, _) = request(&c, &server, "POST", cms, Some(held)).await;
    assert_eq!(code, 201);
    let (code, mut frames) = watchcache_tests::Frames::open_accepting(
        &server,
        &format!("{cms}?watch=1&fieldSelector=metadata.name%3Dheld"),
        "application/json",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(frames.next().await.unwrap()["type"], "ADDED");
    let (code, body) = request(&c, &server, "DELETE", &format!("{cms}/held"), None).await;
    assert_eq!(code, 200);
    let marked: Value = serde_json::from_slice(&body).unwrap();
    assert!(marked["metadata"]["deletionTimestamp"].is_string(), "{marked}");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(frames.next().await.unwrap()["type"], "MODIFIED");
    let still = get(&server, &format!("{cms}/held")).await;
    assert_eq!(
        still["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );
    // Deleting again changes nothing; an update cannot unmark it.
    let (code, _) = request(&c, &server, "DELETE", &format!("{cms}/held"), None).await;
    assert_eq!(code, 200);
    let (_, out) = patch(
        &server,
        &format!("{cms}/held"),
        MERGE,
        json!({"metadata": {"deletionTimestamp": null}, "data": {"b": "2"}}),
    )
    .await;
    assert_eq!(
        out["metadata"]["deletionTimestamp"], marked["metadata"]["deletionTimestamp"],
        "{out}"
    );
    assert_eq!(frames.next().await.unwrap()["type"], "MODIFIED");
    // Removing the last finalizer deletes it.
    let (code, out) = patch(
        &server,
        &format!("{cms}/held"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let (code, _) = request(&c, &server, "GET", &format!("{cms}/held"), None).await;
    assert_eq!(code, 404);
    assert_eq!(frames.next().await.unwrap()["type"], "DELETED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_changes_only_through_status_and_no_op_updates_write_nothing() {
    let server = start(config(0)).await;
    let c = http();
    let pods = "/api/v1/namespaces/ns-0/pods";
    let pod = json!({"metadata": {"name": "s"}, "spec": {"containers": [{"name": "a", "image": "a",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}, "status": {"phase": "Running"}});
    let (code, body) = request(&c, &server, "POST", pods, Some(pod)).await;
    assert_eq!(code, 201);
    let created: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        created["status"],
        json!({"phase": "Pending", "qosClass": "Guaranteed"}),
        "a new pod's status is the server's"
    );
    assert!(
        created["metadata"]["managedFields"][0]["fieldsV1"]
            .get("f:status")
            .is_none(),
        "the creator does not own the status the server set: {created}"
    );
    // The object itself ignores status; /status changes nothing else.
    let (_, out) = patch(
        &server,
        &format!("{pods}/s"),
        MERGE,
        json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "1"}}}),
    )
    .await;
    assert_eq!(
        (
            out["status"]["phase"].as_str(),
            out["metadata"]["labels"]["a"].as_str()
        ),
        (Some("Pending"), Some("1"))
    );
    let (code, out) = patch(
        &server,
        &format!("{pods}/s/status"),
        MERGE,
        json!({"status": {"phase": "Running"}, "spec": {"nodeName": "elsewhere"}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["status"]["phase"], "Running");
    assert!(out["spec"].get("nodeName").is_none(), "{out}");
    assert!(
        out["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["subresource"] == "status"),
        "{out}"
    );
    let mut through_put = out.clone();
    through_put["status"]["phase"] = json!("Succeeded");
    let (code, body) = request(&c, &server, "PUT", &format!("{pods}/s/status"), Some(through_put)).await;
    assert_eq!(code, 200);
    let put: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(put["status"]["phase"], "Succeeded");
    // GET on /status reads the object; DELETE on it is not served.
    assert_eq!(
        get(&server, &format!("{pods}/s/status")).await["metadata"]["name"],
        "s"
    );
    let (code, _) = request(&c, &server, "DELETE", &format!("{pods}/s/status"), None).await;
    assert_eq!(code, 405);
    // Nodes and namespaces have /status too (a namespace's path looks like a collection's);
    // ConfigMaps do not.
    let (code, _) = request(
        &c,
        &server,
        "POST",
        "/api/v1/nodes",
        Some(json!({"metadata": {"name": "n"}})),
    )
    .await;
    assert_eq!(code, 201);
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let (code, out) = patch(&server, "/api/v1/nodes/n/status", STRATEGIC, ready).await;
    assert_eq!(
        (code, out["status"]["conditions"][0]["type"].as_str()),
        (200, Some("Ready")),
        "{out}"
    );
    let (code, out) = patch(
        &server,
        "/api/v1/namespaces/ns-0/status",
        MERGE,
        json!({"status": {"phase": "Active"}}),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["kind"], "Namespace");
    let (code, _) = patch(
        &server,
        "/api/v1/namespaces/ns-0/configmaps/x/status",
        MERGE,
        json!({}),
    )
    .await;
    assert_eq!(code, 404);

    // An update that changes nothing keeps the resourceVersion (and sends no event).
    let before = get(&server, &format!("{pods}/s")).await;
    let (code, out) = patch(
        &server,
        &format!("{pods}/s"),
        MERGE,
        json!({"metadata": {"labels": {"a": "1"}}}),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        out["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let mut stale = before.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    let (code, _) = request(&c, &server, "PUT", &format!("{pods}/s"), Some(stale)).await;
    assert_eq!(
        code, 409,
        "a stale resourceVersion conflicts even when nothing changes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_must_exist_and_deleting_one_deletes_what_it_holds() {
    let server = start(config(0)).await;
    let c = http();
    // The namespaces the apiserver makes at start are there.
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert_eq!(
            get(&server, &format!("/api/v1/namespaces/{ns}")).await["status"]["phase"],
            "Active"
        );
    }
    let cm = |name: &str| json!({"metadata": {"name": name}});
    let (code, body) = request(
        &c,
        &server,
        "POST",
        "/api/v1/namespaces/nowhere/configmaps",
        Some(cm("x")),
    )
    .await;
    assert_eq!(code, 404, "{}", String::from_utf8_lossy(&body));
    let (code, _) = patch(
        &server,
        "/api/v1/namespaces/nowhere/configmaps/x?fieldManager=m",
        APPLY,
        cm("x"),
    )
    .await;
    assert_eq!(code, 404, "an apply that would create is refused too");

    let (code, body) = request(
        &c,
        &server,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "team"}})),
    )
    .await;
    assert_eq!(code, 201);
    let ns: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    let cms = "/api/v1/namespaces/team/configmaps";
    for name in ["a", "b"] {
        let (code, _) = request(&c, &server, "POST", cms, Some(cm(name))).await;
        assert_eq!(code, 201);
    }
    let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/keep"]}});
    let (code, _) = request(&c, &server, "POST", cms, Some(held)).await;
    assert_eq!(code, 201);

    let (code, body) = request(&c, &server, "DELETE", "/api/v1/namespaces/team", None).await;
    assert_eq!(code, 200);
    let marked: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(marked["status"]["phase"], "Terminating");
    let (code, body) = request(&c, &server, "POST", cms, Some(cm("late"))).await;
    assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));
    let s: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(s["details"]["causes"][0]["reason"], "NamespaceTerminating");

    // Its objects go; the one a finalizer holds is marked and keeps the namespace.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let list = get(&server, cms).await;
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect();
        if names == ["held"] {
            assert!(list["items"][0]["metadata"]["deletionTimestamp"].is_string());
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still there: {names:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        get(&server, "/api/v1/namespaces/team").await["status"]["phase"],
        "Terminating"
    );
    let (code, _) = patch(
        &server,
        &format!("{cms}/held"),
        MERGE,
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(code, 200);
    loop {
        let (code, _) = request(&c, &server, "GET", "/api/v1/namespaces/team", None).await;
        if code == 404 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the namespace is still there"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_collection_deletes_what_the_selectors_match() {
    let server = start(config(0)).await;
    let c = http();
    let cms = "/api/v1/namespaces/default/configmaps";
    for (name, tier) in [("a", "web"), ("b", "web"), ("c", "db")] {
        let body = json!({"metadata": {"name": name, "labels": {"tier": tier}}});
        let (code, _) = request(&c, &server, "POST", cms, Some(body)).await;
        assert_eq!(code, 201);
    }
    let (code, body) = request(
        &c,
        &server,
        "DELETE",
        &format!("{cms}?labelSelector=tier%3Dweb"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let deleted: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(deleted["kind"], "ConfigMapList");
    assert_eq!(deleted["items"].as_array().unwrap().len(), 2);
    let left = get(&server, cms).await;
    let names: Vec<&str> = left["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c"]);
    // A dry run deletes nothing; a field selector on the name picks one.
    let (code, _) = request(&c, &server, "DELETE", &format!("{cms}?dryRun=All"), None).await;
    assert_eq!(code, 200);
    assert_eq!(get(&server, cms).await["items"].as_array().unwrap().len(), 1);
    let (code, _) = request(
        &c,
        &server,
        "DELETE",
        &format!("{cms}?fieldSelector=metadata.name%3Dc"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert!(get(&server, cms).await["items"].as_array().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_discovered_legacy_and_aggregated_and_leases_and_events_are_served() {
    let server = start(config(0)).await;
    let c = http();
    let apis = get(&server, "/apis").await;
    let named = |list: &Value, key: &str, name: &str| -> Value {
        list.as_array()
            .unwrap()
            .iter()
            .find(|g| g.pointer(key) == Some(&Value::from(name)))
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {list}"))
    };
    let coordination = named(&apis["groups"], "/name", "coordination.k8s.io");
    assert_eq!(
        coordination["preferredVersion"]["groupVersion"],
        "coordination.k8s.io/v1"
    );
    // The self-checks' group, which no stored resource makes.
    named(&apis["groups"], "/name", "authorization.k8s.io");
    let reviews = get(&server, "/apis/authorization.k8s.io/v1").await;
    assert_eq!(reviews["resources"][0]["name"], "selfsubjectaccessreviews");
    assert_eq!(reviews["resources"][1]["verbs"], serde_json::json!(["create"]));
    let group = get(&server, "/apis/coordination.k8s.io").await;
    assert_eq!(group["kind"], "APIGroup");
    let leases = get(&server, "/apis/coordination.k8s.io/v1").await;
    assert_eq!(leases["resources"][0]["name"], "leases");
    let core = get(&server, "/api/v1").await;
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for name in [
        "pods",
        "pods/status",
        "nodes/status",
        "namespaces/status",
        "events",
        "configmaps",
        "secrets",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let (code, _) = request(&c, &server, "GET", "/apis/nothing.example.com/v1", None).await;
    assert_eq!(code, 404);

    // Aggregated discovery, as kubectl and client-go ask for it first.
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let (code, ct, all) = get_accept(&server, "/apis", accept).await;
    assert_eq!(code, 200);
    assert_eq!(
        ct.as_deref(),
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    );
    let coordination = named(&all["items"], "/metadata/name", "coordination.k8s.io");
    assert_eq!(
        coordination["versions"][0]["resources"][0]["responseKind"]["kind"],
        "Lease"
    );
    let authorization = named(&all["items"], "/metadata/name", "authorization.k8s.io");
    assert_eq!(
        authorization["versions"][0]["resources"][1]["resource"],
        "selfsubjectrulesreviews"
    );
    let (_, _, core) = get_accept(&server, "/api", accept).await;
    let pods = core["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "pods")
        .cloned()
        .unwrap();
    assert_eq!(
        (
            pods["scope"].as_str(),
            pods["subresources"][0]["subresource"].as_str()
        ),
        (Some("Namespaced"), Some("status"))
    );

    // Leases live under their group's path, not the core one.
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
    let path = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let (code, body) = request(&c, &server, "POST", path, Some(lease)).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let (code, _) = request(
        &c,
        &server,
        "GET",
        "/api/v1/namespaces/default/leases/leader",
        None,
    )
    .await;
    assert_eq!(code, 404);
    let (code, out) = patch(
        &server,
        &format!("{path}/leader"),
        MERGE,
        json!({"spec": {"holderIdentity": "b"}}),
    )
    .await;
    assert_eq!((code, out["spec"]["holderIdentity"].as_str()), (200, Some("b")));
    let (code, body) = request(
        &c,
        &server,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/pods",
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 404, "{}", String::from_utf8_lossy(&body));

    // Events are selected by the object they are about.
    let events = "/api/v1/namespaces/default/events";
    for (name, pod) in [("e1", "web"), ("e2", "db")] {
        let ev = json!({"metadata": {"name": name}, "involvedObject": {"kind": "Pod", "name": pod, "namespace": "default"},
            "reason": "Started", "type": "Normal", "message": "started"});
        let (code, _) = request(&c, &server, "POST", events, Some(ev)).await;
        assert_eq!(code, 201);
    }
    let selected = get(
        &server,
        &format!("{events}?fieldSelector=involvedObject.name%3Dweb,involvedObject.kind%3DPod"),
    )
    .await;
    let names: Vec<&str> = selected["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["e1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_negotiate_accept_and_writes_refuse_bodies_they_cannot_read() {
    let server = start(config(0)).await;
    let c = http();
    let cms = "/api/v1/namespaces/default/configmaps";
    // A client that accepts nothing served gets 406; protobuf is served (tests/protobuf.rs),
    // and a client that prefers it gets it.
    for path in [
        cms.to_owned(),
        format!("{cms}?watch=1"),
        "/api/v1/namespaces/default".to_owned(),
    ] {
        let (code, _, body) = get_raw(&server, &path, "application/xml, text/html").await;
        assert_eq!(code, 406, "{path}: {}", String::from_utf8_lossy(&body));
        let s: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(s["reason"], "NotAcceptable");
    }
    let (code, ct, _) = get_raw(
        &server,
        cms,
        "application/vnd.kubernetes.protobuf, application/json",
    )
    .await;
    assert_eq!(
        (code, ct.as_deref()),
        (200, Some("application/vnd.kubernetes.protobuf"))
    );
    let (code, ct, _) = get_raw(
        &server,
        cms,
        "application/vnd.kubernetes.protobuf;q=0.5, application/json",
    )
    .await;
    assert_eq!((code, ct.as_deref()), (200, Some("application/json")));
    // Quality values order the choice.
    let (_, _, table) = get_accept(
        &server,
        cms,
        "application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io;q=0.9",
    )
    .await;
    assert_eq!(table["kind"], "Table");

    // Bodies: JSON, YAML or protobuf; a protobuf body that is not an envelope is 400.
    let (code, s) = request_typed(
        &c,
        &server,
        "POST",
        cms,
        "application/vnd.kubernetes.protobuf",
        &b"{\"kind\":\"ConfigMap\"}"[..],
    )
    .await;
    assert_eq!((code, s["reason"].as_str()), (400, Some("BadRequest")), "{s}");
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  k: v\n";
    let (code, out) = request_typed(&c, &server, "POST", cms, "application/yaml", yaml).await;
    assert_eq!((code, out["data"]["k"].as_str()), (201, Some("v")), "{out}");
    let (code, _) = request_typed(&c, &server, "PUT", &format!("{cms}/from-yaml"), "text/plain", "x").await;
    assert_eq!(code, 415);
}
