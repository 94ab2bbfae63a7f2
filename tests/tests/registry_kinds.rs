//! Every kind the registry declares is served whole: discovery (legacy and aggregated),
//! OpenAPI v2 and v3, LIST, GET, WATCH, POST, PUT, PATCH and DELETE, Tables with the kind's
//! columns, the metadata-only form (PartialObjectMetadata) of GET, LIST and WATCH, and
//! protobuf GET, LIST and WATCH where the kind has a message. A kind added to the registry without a sample
//! object here fails the test, so none goes untested.

use std::time::Duration;

use serde_json::{Value, json};
use watchcache_api::{KindSpec, Registry};
use watchcache_tests::{Frames, config, create_namespaces, get_raw, http, request, request_typed, start};

const NS: &str = "registry-test";

fn containers() -> Value {
    json!([{"name": "app", "image": "registry.example.com/app:1.0"}])
}

fn template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers()}})
}

/// The name a kind's sample goes by: its kind, or its API version and kind where the kind's
/// name is served by two groups (`events.k8s.io/v1 Event`).
fn sample_name(spec: &KindSpec) -> String {
    match spec.group.as_str() {
        "events.k8s.io" => format!("{} {}", spec.api_version(), spec.kind),
        _ => spec.kind.clone(),
    }
}

/// A valid object of `kind`, beyond its metadata.
fn sample(kind: &str) -> Option<Value> {
    let selector = json!({"matchLabels": {"app": "web"}});
    Some(match kind {
        "Pod" => json!({"spec": {"containers": containers()}}),
        "ConfigMap" => json!({"data": {"a": "b"}}),
        "Secret" => json!({"data": {"a": "Yg=="}}),
        "Namespace" | "Node" | "ServiceAccount" => json!({}),
        "events.k8s.io/v1 Event" => json!({
            "regarding": {"kind": "Pod", "name": "web", "namespace": NS},
            "reason": "Started", "note": "started", "type": "Normal", "action": "Start",
            "reportingController": "kubelet", "reportingInstance": "node-1",
            "eventTime": "2026-12-02T10:00:00.000000Z",
        }),
        "Event" => json!({
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": NS},
            "reason": "Started", "message": "started", "type": "Normal",
        }),
        "Service" => json!({"spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}),
        "Endpoints" => json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}),
        "PersistentVolume" => json!({"spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv"}}}),
        "PersistentVolumeClaim" => json!({"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        "ReplicationController" => {
            json!({"spec": {"replicas": 1, "selector": {"app": "web"}, "template": template()}})
        }
        "PodTemplate" => json!({"template": template()}),
        "LimitRange" => json!({"spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}}]}}),
        "ResourceQuota" => json!({"spec": {"hard": {"pods": "10"}}}),
        "Lease" => json!({"spec": {"holderIdentity": "a"}}),
        "Deployment" | "ReplicaSet" | "DaemonSet" => {
            json!({"spec": {"selector": selector, "template": template()}})
        }
        "StatefulSet" => {
            json!({"spec": {"selector": selector, "serviceName": "web", "template": template()}})
        }
        "ControllerRevision" => json!({"revision": 1, "data": {"a": 1}}),
        "Job" => {
            json!({"spec": {"template": {"spec": {"containers": containers(), "restartPolicy": "Never"}}}})
        }
        "CronJob" => {
            json!({"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "containers": containers(), "restartPolicy": "OnFailure"}}}}}})
        }
        "EndpointSlice" => {
            json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 80}]})
        }
        "Ingress" => json!({"spec": {"rules": [{"host": "a.example.com"}]}}),
        "IngressClass" => json!({"spec": {"controller": "example.com/ingress"}}),
        "NetworkPolicy" => json!({"spec": {"podSelector": {}}}),
        "PodDisruptionBudget" => json!({"spec": {"minAvailable": 1, "selector": selector}}),
        "HorizontalPodAutoscaler" => json!({"spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 3}}),
        "StorageClass" => json!({"provisioner": "example.com/disk"}),
        "PriorityClass" => json!({"value": 1000}),
        "Role" | "ClusterRole" => {
            json!({"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]})
        }
        "CustomResourceDefinition" => json!({"spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "samples", "kind": "Sample"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        }}),
        "RoleBinding" | "ClusterRoleBinding" => json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "someone"}],
        }),
        _ => return None,
    })
}

/// The collection path of `spec` (in [`NS`] when namespaced).
fn collection(spec: &KindSpec) -> String {
    let base = if spec.group.is_empty() {
        format!("/api/{}", spec.version)
    } else {
        format!("/apis/{}/{}", spec.group, spec.version)
    };
    if spec.namespaced {
        format!("{base}/namespaces/{NS}/{}", spec.plural)
    } else {
        format!("{base}/{}", spec.plural)
    }
}

fn discovery_path(spec: &KindSpec) -> String {
    if spec.group.is_empty() {
        format!("/api/{}", spec.version)
    } else {
        format!("/apis/{}/{}", spec.group, spec.version)
    }
}

async fn json_get(server: &watchcache_tests::Server, path: &str, accept: &str) -> Value {
    let (code, _, body) = get_raw(server, path, accept).await;
    assert_eq!(code, 200, "GET {path}: {}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// One length-delimited field of a protobuf message: its number and its bytes (the tests read
/// only such fields of a WatchEvent).
fn fields(mut message: &[u8]) -> Vec<(u64, &[u8])> {
    fn varint(bytes: &mut &[u8]) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let (b, rest) = bytes.split_first().expect("a whole varint");
            *bytes = rest;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        value
    }
    let mut out = Vec::new();
    while !message.is_empty() {
        let tag = varint(&mut message);
        assert_eq!(tag & 7, 2, "a length-delimited field");
        let len = varint(&mut message) as usize;
        out.push((tag >> 3, &message[..len]));
        message = &message[len..];
    }
    out
}

/// A protobuf watch body's events: each a 4-byte big-endian length, then a WatchEvent (type,
/// and the object's envelope in a RawExtension).
fn protobuf_events(mut body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let len = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
        let event = fields(&body[4..4 + len]);
        let kind = String::from_utf8(event[0].1.to_vec()).unwrap();
        let raw = fields(event[1].1)[0].1.to_vec();
        out.push((kind, raw));
        body = &body[4 + len..];
    }
    out
}

/// The keys of a metadata-only object, as the apiserver writes one.
fn is_metadata_only(object: &Value) -> bool {
    let keys: Vec<&str> = object.as_object().unwrap().keys().map(String::as_str).collect();
    keys.len() == 3
        && ["kind", "apiVersion", "metadata"]
            .iter()
            .all(|k| keys.contains(k))
}

/// The next frame's type and object name, skipping bookmarks.
async fn next_event(frames: &mut Frames) -> (String, String) {
    loop {
        let f = frames.next().await.expect("the watch goes on");
        let kind = f["type"].as_str().unwrap_or_default().to_owned();
        if kind != "BOOKMARK" {
            return (
                kind,
                f["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_declared_kind_is_served_whole() {
    let registry = Registry::builtin();
    let missing: Vec<&str> = registry
        .iter()
        .filter(|s| sample(&sample_name(s)).is_none())
        .map(|s| s.kind.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "kinds without a sample object here: {missing:?}"
    );

    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let client = http();
    let aggregated_core = json_get(&server, "/api", AGGREGATED).await;
    let aggregated_groups = json_get(&server, "/apis", AGGREGATED).await;
    let v3_index = json_get(&server, "/openapi/v3", "application/json").await;
    let v2 = json_get(&server, "/openapi/v2", "application/json").await;
    let mut protobuf_watches = Vec::new();

    for spec in registry.iter() {
        let what = format!("{} ({})", spec.kind, spec.api_version());
        // Discovery, legacy and aggregated.
        let list = json_get(&server, &discovery_path(spec), "application/json").await;
        let entry = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == spec.plural.as_str())
            .unwrap_or_else(|| panic!("{what}: not in {}", discovery_path(spec)));
        assert_eq!(entry["kind"], spec.kind.as_str(), "{what}");
        assert_eq!(entry["namespaced"], spec.namespaced, "{what}");
        assert_eq!(entry["shortNames"], json!(spec.short_names), "{what}");
        let aggregated = if spec.group.is_empty() {
            &aggregated_core
        } else {
            &aggregated_groups
        };
        let listed = aggregated["items"].as_array().unwrap().iter().any(|g| {
            g["metadata"]["name"].as_str().unwrap_or_default() == spec.group
                && g["versions"].as_array().unwrap().iter().any(|v| {
                    v["version"] == spec.version.as_str()
                        && v["resources"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|r| r["resource"] == spec.plural.as_str())
                })
        });
        assert!(listed, "{what}: not in aggregated discovery");

        // OpenAPI v3: the group-version's document defines the kind, with its GVK.
        let gv_path = discovery_path(spec).trim_start_matches('/').to_owned();
        let url = v3_index["paths"][&gv_path]["serverRelativeURL"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no OpenAPI v3 document {gv_path}"));
        let doc = json_get(&server, url, "application/json").await;
        let (definition, _) = spec.openapi.as_ref().expect("a built-in kind has a schema");
        let gvk = &doc["components"]["schemas"][definition]["x-kubernetes-group-version-kind"];
        assert_eq!(
            gvk[0]["kind"],
            spec.kind.as_str(),
            "{what}: {definition} in {gv_path}"
        );
        // OpenAPI v2: the definition with this group, version and kind, and the collection's
        // path.
        let gvks = v2["definitions"][definition]["x-kubernetes-group-version-kind"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: no v2 definition {definition}"));
        assert!(
            gvks.iter().any(|g| g["group"] == spec.group.as_str()
                && g["version"] == spec.version.as_str()
                && g["kind"] == spec.kind.as_str()),
            "{what}: {gvks:?}"
        );
        let template = if spec.namespaced {
            format!(
                "{}/namespaces/{{namespace}}/{}",
                discovery_path(spec),
                spec.plural
            )
        } else {
            format!("{}/{}", discovery_path(spec), spec.plural)
        };
        assert!(
            v2["paths"].get(&template).is_some(),
            "{what}: no v2 path {template}"
        );

        // LIST, then a WATCH from its revision, of this object only.
        let path = collection(spec);
        let (code, listed) = request_typed(&client, &server, "GET", &path, "application/json", "").await;
        assert_eq!(code, 200, "{what}: LIST {listed}");
        assert_eq!(listed["kind"], format!("{}List", spec.kind), "{what}");
        let rv = listed["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        // A CRD's name is its plural and group.
        let name = if spec.kind == "CustomResourceDefinition" {
            "samples.example.com"
        } else {
            "sample"
        };
        let watch_path = format!("{path}?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3D{name}");
        let mut watch = Frames::open(&server, &watch_path).await;
        let (code, mut metadata_watch) = Frames::open_accepting(&server, &watch_path, METADATA).await;
        assert_eq!(code, 200, "{what}: a metadata-only watch");

        // POST.
        let mut body = sample(&sample_name(spec)).unwrap();
        body["apiVersion"] = json!(spec.api_version());
        body["kind"] = json!(spec.kind);
        body["metadata"] = json!({"name": name, "labels": {"app": "web"}});
        let (code, created) = request(&client, &server, "POST", &path, Some(body)).await;
        let created: Value = serde_json::from_slice(&created).unwrap();
        assert_eq!(code, 201, "{what}: POST {created}");
        assert_eq!(created["kind"], spec.kind.as_str(), "{what}");
        assert_eq!(created["apiVersion"], spec.api_version(), "{what}");
        assert!(created["metadata"]["uid"].is_string(), "{what}: {created}");

        // GET, as JSON, as a Table, and as protobuf.
        let item = format!("{path}/{name}");
        let got = json_get(&server, &item, "application/json").await;
        assert_eq!(got["metadata"]["uid"], created["metadata"]["uid"], "{what}");
        let table = json_get(&server, &item, TABLE).await;
        assert_eq!(table["kind"], "Table", "{what}");
        let columns = table["columnDefinitions"].as_array().unwrap();
        assert_eq!(columns.len(), spec.printer.columns.len(), "{what}: {table}");
        assert_eq!(
            table["rows"][0]["cells"].as_array().unwrap().len(),
            columns.len(),
            "{what}: {table}"
        );
        // The metadata-only forms, as kube-rs's metadata watcher and client-go's metadata
        // informers read them.
        let meta = json_get(&server, &item, METADATA).await;
        assert!(is_metadata_only(&meta), "{what}: {meta}");
        assert_eq!(meta["kind"], "PartialObjectMetadata", "{what}");
        assert_eq!(meta["metadata"]["uid"], got["metadata"]["uid"], "{what}");
        let metas = json_get(&server, &path, METADATA_LIST).await;
        assert_eq!(metas["kind"], "PartialObjectMetadataList", "{what}");
        let items = metas["items"].as_array().unwrap();
        assert!(items.iter().all(is_metadata_only), "{what}: {metas}");
        assert!(
            items
                .iter()
                .any(|i| i["metadata"]["uid"] == got["metadata"]["uid"]),
            "{what}: {metas}"
        );
        let (code, ct, bytes) = get_raw(&server, &item, PROTOBUF).await;
        if spec.protobuf.is_none() {
            // JSON only (CRDs, as the apiserver serves them): a client that takes nothing else
            // is told so.
            assert_eq!(code, 406, "{what}: JSON only");
        } else {
            assert_eq!(code, 200, "{what}");
            assert_eq!(ct.as_deref(), Some(PROTOBUF), "{what}: served in protobuf");
            let envelope = watchcache_encoders::protobuf::open_envelope(&bytes).expect("a protobuf envelope");
            assert_eq!(envelope.kind, spec.kind, "{what}");
            let decoded = watchcache_encoders::protobuf::decode_json(definition, envelope.raw)
                .expect("the message decodes");
            assert_eq!(decoded["metadata"]["uid"], got["metadata"]["uid"], "{what}");
            assert_eq!(
                decoded.get("spec"),
                got.get("spec"),
                "{what}: protobuf and JSON agree"
            );
            // LIST as protobuf: the list kind's message, with the object.
            let (code, _, bytes) = get_raw(&server, &path, PROTOBUF).await;
            assert_eq!(code, 200, "{what}: a protobuf LIST");
            let envelope = watchcache_encoders::protobuf::open_envelope(&bytes).expect("a protobuf envelope");
            assert_eq!(envelope.kind, format!("{}List", spec.kind), "{what}");
            let list = watchcache_encoders::protobuf::decode_json(&format!("{definition}List"), envelope.raw)
                .expect("the list decodes");
            assert!(
                list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|i| i["metadata"]["uid"] == got["metadata"]["uid"]),
                "{what}: the protobuf LIST has the object"
            );
        }

        // PUT (a label more), then a merge PATCH (an annotation).
        let mut updated = got.clone();
        updated["metadata"]["labels"]["tier"] = json!("front");
        // Unconditional: a controller may write the object meanwhile (a CRD's status).
        updated["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        let (code, put) = request(&client, &server, "PUT", &item, Some(updated)).await;
        assert_eq!(code, 200, "{what}: PUT {}", String::from_utf8_lossy(&put));
        let (code, patched) = request_typed(
            &client,
            &server,
            "PATCH",
            &item,
            "application/merge-patch+json",
            json!({"metadata": {"annotations": {"patched": "yes"}}}).to_string(),
        )
        .await;
        assert_eq!(code, 200, "{what}: PATCH {patched}");
        assert_eq!(patched["metadata"]["labels"]["tier"], "front", "{what}");
        assert_eq!(patched["metadata"]["annotations"]["patched"], "yes", "{what}");

        // /scale, where the kind has it: read, then scaled by a merge patch as kubectl does.
        if let Some(paths) = &spec.subresources.scale {
            let scale = json_get(&server, &format!("{item}/scale"), "application/json").await;
            assert_eq!(scale["kind"], "Scale", "{what}: {scale}");
            assert_eq!(scale["status"]["selector"], "app=web", "{what}: {scale}");
            let (code, scaled) = request_typed(
                &client,
                &server,
                "PATCH",
                &format!("{item}/scale"),
                "application/merge-patch+json",
                json!({"spec": {"replicas": 3}}).to_string(),
            )
            .await;
            assert_eq!(
                (code, &scaled["spec"]["replicas"]),
                (200, &json!(3)),
                "{what}: {scaled}"
            );
            let object = json_get(&server, &item, "application/json").await;
            let path: Vec<&str> = paths.spec_replicas.split('.').collect();
            assert_eq!(object[path[0]][path[1]], 3, "{what}: the object is scaled");
            // Scaling back, so that the watch below sees as many changes for every kind.
            let (code, _) = request_typed(
                &client,
                &server,
                "PUT",
                &format!("{item}/scale"),
                "application/json",
                json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": name},
                       "spec": {"replicas": 1}})
                .to_string(),
            )
            .await;
            assert_eq!(code, 200, "{what}: PUT /scale");
        }

        // LIST sees it.
        let (_, listed) = request_typed(&client, &server, "GET", &path, "application/json", "").await;
        assert!(
            listed["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["metadata"]["name"] == name),
            "{what}: LIST after POST"
        );

        // DELETE.
        let (code, deleted) = request(&client, &server, "DELETE", &item, None).await;
        assert!(
            code == 200 || code == 202,
            "{what}: DELETE {code} {}",
            String::from_utf8_lossy(&deleted)
        );

        // A protobuf watch from the same revision, read whole after its timeout (all kinds'
        // at once, at the end).
        if spec.protobuf.is_some() {
            let server_path = format!("{watch_path}&timeoutSeconds=1");
            let server = &server;
            let (what, kind, definition) = (what.clone(), spec.kind.clone(), definition.clone());
            protobuf_watches.push(async move {
                let accept = format!("{PROTOBUF};stream=watch");
                let (code, _, body) = get_raw(server, &server_path, &accept).await;
                assert_eq!(code, 200, "{what}: a protobuf watch");
                let events = protobuf_events(&body);
                assert!(events.len() >= 3, "{what}: {} protobuf events", events.len());
                assert_eq!(events[0].0, "ADDED", "{what}");
                let envelope =
                    watchcache_encoders::protobuf::open_envelope(&events[0].1).expect("a protobuf envelope");
                assert_eq!(envelope.kind, kind, "{what}");
                let object = watchcache_encoders::protobuf::decode_json(&definition, envelope.raw)
                    .expect("the event's object decodes");
                assert_eq!(object["metadata"]["name"], name, "{what}");
            });
        }

        // The metadata-only watch saw the object made, in metadata form.
        let first = loop {
            let f = metadata_watch
                .next()
                .await
                .expect("the metadata-only watch goes on");
            if f["type"] != "BOOKMARK" {
                break f;
            }
        };
        assert_eq!(first["type"], "ADDED", "{what}: {first}");
        assert!(is_metadata_only(&first["object"]), "{what}: {first}");
        assert_eq!(first["object"]["kind"], "PartialObjectMetadata", "{what}");
        assert_eq!(first["object"]["metadata"]["name"], name, "{what}");

        // The watch saw each write, then the deletion (a namespace ends once its controller
        // has emptied and finalized it).
        let events = [
            next_event(&mut watch).await,
            next_event(&mut watch).await,
            next_event(&mut watch).await,
        ];
        let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED"], "{what}");
        if spec.subresources.scale.is_some() {
            for _ in 0..2 {
                assert_eq!(next_event(&mut watch).await.0, "MODIFIED", "{what}: scaled");
            }
        }
        assert!(events.iter().all(|(_, n)| n == name), "{what}: {events:?}");
        let ended = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if next_event(&mut watch).await.0 == "DELETED" {
                    return;
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "{what}: no DELETED event");
    }
    futures_util::future::join_all(protobuf_watches).await;
    server.shutdown().await.unwrap();
}

/// events.k8s.io/v1 Events are the core Events, converted: one written in either form is read
/// in both, and watched in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_served_in_both_groups_over_one_storage() {
    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let c = http();
    let core = format!("/api/v1/namespaces/{NS}/events");
    let v1 = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events");
    let (code, list) = request(&c, &server, "GET", &v1, None).await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_slice(&list).unwrap();
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let mut watch = Frames::open(&server, &format!("{v1}?watch=true&resourceVersion={rv}")).await;

    let old = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "core"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": NS},
        "reason": "Pulled", "message": "pulled the image", "type": "Normal", "count": 3,
        "source": {"component": "kubelet"}});
    let (code, _) = request(&c, &server, "POST", &core, Some(old)).await;
    assert_eq!(code, 201);
    let (code, read) = request(&c, &server, "GET", &format!("{v1}/core"), None).await;
    assert_eq!(code, 200);
    let read: Value = serde_json::from_slice(&read).unwrap();
    assert_eq!(read["apiVersion"], "events.k8s.io/v1");
    assert_eq!(read["regarding"]["name"], "web");
    assert_eq!(read["note"], "pulled the image");
    assert_eq!(read["deprecatedCount"], 3);
    assert_eq!(read["deprecatedSource"]["component"], "kubelet");
    assert!(
        read.get("message").is_none() && read.get("involvedObject").is_none(),
        "{read}"
    );
    let event = watch
        .next()
        .await
        .expect("the core write, watched as events.k8s.io");
    assert_eq!(
        (event["type"].as_str(), event["object"]["note"].as_str()),
        (Some("ADDED"), Some("pulled the image"))
    );

    let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "new"},
        "regarding": {"kind": "Pod", "name": "db", "namespace": NS}, "reason": "Scheduled",
        "note": "assigned to node-1", "type": "Normal", "action": "Binding",
        "reportingController": "default-scheduler", "reportingInstance": "scheduler-1",
        "eventTime": "2026-12-02T10:00:00.000000Z"});
    let (code, made) = request(&c, &server, "POST", &v1, Some(new)).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&made));
    let (code, read) = request(&c, &server, "GET", &format!("{core}/new"), None).await;
    assert_eq!(code, 200);
    let read: Value = serde_json::from_slice(&read).unwrap();
    assert_eq!(read["apiVersion"], "v1");
    assert_eq!(read["involvedObject"]["name"], "db");
    assert_eq!(read["message"], "assigned to node-1");
    assert_eq!(read["reportingComponent"], "default-scheduler");
    // Selected by the events.k8s.io field names.
    let (code, selected) = request(
        &c,
        &server,
        "GET",
        &format!("{v1}?fieldSelector=regarding.name%3Ddb"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    let selected: Value = serde_json::from_slice(&selected).unwrap();
    let names: Vec<&str> = selected["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["new"]);
    server.shutdown().await.unwrap();
}

/// An Event kube-apiserver stored (protobuf, a core `v1.Event` in a `runtime.Unknown`) is read
/// through events.k8s.io/v1 too: parsed as the core message it is, then converted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_apiserver_stored_in_protobuf_reads_in_both_groups() {
    use k8s_pb::api::core::v1::{Event, EventSource, ObjectReference};
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    use prost::Message;

    let server = start(config(0)).await;
    create_namespaces(&server, &[NS]).await;
    let event = Event {
        metadata: Some(ObjectMeta {
            name: Some("stored".into()),
            namespace: Some(NS.into()),
            uid: Some("uid-stored".into()),
            ..Default::default()
        }),
        involved_object: Some(ObjectReference {
            kind: Some("Pod".into()),
            name: Some("web".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        }),
        reason: Some("Pulled".into()),
        message: Some("pulled the image".into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: None,
        }),
        count: Some(4),
        r#type: Some("Normal".into()),
        ..Default::default()
    };
    let envelope = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".into()),
            kind: Some("Event".into()),
        }),
        raw: Some(event.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut value = b"k8s\0".to_vec();
    value.extend(envelope.encode_to_vec());
    let key = format!("/registry/events/{NS}/stored");
    server.store().create(&key, value.into()).await.unwrap();
    watchcache_tests::settle(&server).await;

    let c = http();
    let (code, core) = request(
        &c,
        &server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/events/stored"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&core));
    let core: Value = serde_json::from_slice(&core).unwrap();
    assert_eq!(
        (core["message"].as_str(), core["count"].as_i64()),
        (Some("pulled the image"), Some(4))
    );
    let path = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events/stored");
    let (code, v1) = request(&c, &server, "GET", &path, None).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&v1));
    let v1: Value = serde_json::from_slice(&v1).unwrap();
    assert_eq!(v1["note"], "pulled the image");
    assert_eq!(v1["regarding"]["name"], "web");
    assert_eq!(v1["deprecatedCount"], 4);
    assert_eq!(v1["deprecatedSource"]["component"], "kubelet");
    // And written through events.k8s.io over it (the read before the write parses it too):
    // its labels, as an events.k8s.io update may change nothing of the event itself.
    let (code, patched) = request_typed(
        &c,
        &server,
        "PATCH",
        &path,
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"seen": "yes"}}}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        (&patched["metadata"]["labels"]["seen"], &patched["note"]),
        (&json!("yes"), &json!("pulled the image"))
    );
    let (code, refused) = request_typed(
        &c,
        &server,
        "PATCH",
        &path,
        "application/merge-patch+json",
        json!({"note": "pulled again"}).to_string(),
    )
    .await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["message"],
        "Event.events.k8s.io \"stored\" is invalid: message: Invalid value: \"pulled again\": field is immutable"
    );
    server.shutdown().await.unwrap();
}
