//! Values in the store that do not decode (KEP-3926's corrupt objects), and values kube-apiserver
//! stores by default (protobuf), on the embedded store and on etcd:
//!
//! - a corrupt object is never skipped nor served as what it was: a GET of it is 500 naming its
//!   key, a LIST that would include it is 500 `StorageReadError` naming each, a watch that
//!   would deliver it ends with an ERROR naming it; reads that would not include it go on;
//! - `DELETE …?ignoreStoreReadErrorWithClusterBreakingPotential=true` removes it (and is
//!   refused for an object that decodes);
//! - a value of the wrong types for its kind (which would make no protobuf) is corrupt for
//!   itself alone: protobuf LISTs and watches of other objects go on;
//! - protobuf values, made here by k8s-pb's prost types as an apiserver makes them, are read,
//!   listed and watched like JSON ones.

use bytes::Bytes;
use prost::Message;
use serde_json::{Value, json};
use watchcache_tests::{Backing, Frames, Server, get_raw, http, request};

async fn json(server: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let (code, body) = request(&http(), server, method, path, body).await;
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn cm(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}})
}

/// A ConfigMap as kube-apiserver stores it by default: `k8s\0` and a `runtime.Unknown` holding
/// the typed protobuf message.
fn protobuf_cm(ns: &str, name: &str, value: &str) -> Bytes {
    use k8s_pb::api::core::v1::ConfigMap;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    let object = ConfigMap {
        metadata: Some(ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }),
        data: [("k".to_owned(), value.to_owned())].into(),
        ..Default::default()
    };
    let envelope = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
        }),
        raw: Some(object.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut value = b"k8s\0".to_vec();
    value.extend(envelope.encode_to_vec());
    Bytes::from(value)
}

async fn store_put(server: &Server, key: &str, value: Bytes) {
    let store = server.store();
    if store.get(key).await.unwrap().is_some() {
        store.update(key, value, None).await.unwrap();
    } else {
        store.create(key, value).await.unwrap();
    }
}

async fn corrupt_objects_fail_the_reads_that_include_them(etcd: bool) {
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    let server = watchcache_tests::start(backing.config(0)).await;
    watchcache_tests::create_namespaces(&server, &["t", "u"]).await;
    let cms = "/api/v1/namespaces/t/configmaps";
    for name in ["good", "turned"] {
        assert_eq!(json(&server, "POST", cms, Some(cm("t", name))).await.0, 201);
    }
    assert_eq!(
        json(
            &server,
            "POST",
            "/api/v1/namespaces/u/configmaps",
            Some(cm("u", "other"))
        )
        .await
        .0,
        201
    );
    let (_, list) = json(&server, "GET", cms, None).await;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let mut watch = Frames::open(&server, &format!("{cms}?watch=true&resourceVersion={rv}")).await;

    // An object whose value stops decoding (a tool wrote it; encrypted with a lost key).
    store_put(
        &server,
        "/registry/configmaps/t/turned",
        Bytes::from_static(b"k8s:enc:aescbc:v1:gone:..."),
    )
    .await;
    let (code, v) = json(&server, "GET", &format!("{cms}/turned"), None).await;
    assert_eq!((code, v["reason"].as_str()), (500, Some("InternalError")), "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("Key: /registry/configmaps/t/turned"),
        "{v}"
    );
    let (code, v) = json(&server, "GET", cms, None).await;
    assert_eq!(
        (code, v["reason"].as_str()),
        (500, Some("StorageReadError")),
        "{v}"
    );
    assert_eq!(
        v["details"]["causes"][0]["field"],
        "/registry/configmaps/t/turned"
    );
    let (code, v) = json(&server, "GET", "/api/v1/configmaps", None).await;
    assert_eq!(code, 500, "the cluster-wide LIST includes it: {v}");
    // Reads that would not include it go on: another namespace, another object.
    assert_eq!(
        json(&server, "GET", "/api/v1/namespaces/u/configmaps", None)
            .await
            .0,
        200
    );
    assert_eq!(json(&server, "GET", &format!("{cms}/good"), None).await.0, 200);
    // The watch of the namespace is told, naming it, and ends.
    let e = watch.next().await.expect("an event");
    assert_eq!(e["type"], "ERROR", "{e}");
    assert!(
        e["object"]["message"]
            .as_str()
            .unwrap()
            .contains("/registry/configmaps/t/turned"),
        "{e}"
    );
    assert!(watch.next().await.is_none(), "the watch ended");
    // Writes to it fail naming it; only the unsafe delete removes it, and only it.
    let (code, _) = json(&server, "PUT", &format!("{cms}/turned"), Some(cm("t", "turned"))).await;
    assert_eq!(code, 500);
    assert_eq!(
        json(&server, "DELETE", &format!("{cms}/turned"), None).await.0,
        500
    );
    let unsafe_delete = "ignoreStoreReadErrorWithClusterBreakingPotential=true";
    let (code, v) = json(&server, "DELETE", &format!("{cms}/good?{unsafe_delete}"), None).await;
    assert_eq!(
        (code, v["details"]["causes"][0]["field"].as_str()),
        (422, Some("ignoreStoreReadErrorWithClusterBreakingPotential")),
        "{v}"
    );
    let (code, v) = json(&server, "DELETE", &format!("{cms}/turned?{unsafe_delete}"), None).await;
    assert_eq!((code, v["status"].as_str()), (200, Some("Success")), "{v}");
    assert_eq!(
        (v["code"].as_u64(), &v["details"]["kind"]),
        (Some(200), &json!("ConfigMap")),
        "{v}"
    );
    assert_eq!(json(&server, "GET", &format!("{cms}/turned"), None).await.0, 404);
    let (code, v) = json(&server, "GET", cms, None).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["items"].as_array().unwrap().len(), 1);

    // A value of the wrong types for its kind: corrupt, for itself alone. A protobuf LIST of
    // the others still answers, where one such object used to fail every one of them.
    let ill_typed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ill", "namespace": "u"}, "data": {"a": 1}});
    store_put(
        &server,
        "/registry/configmaps/u/ill",
        Bytes::from(ill_typed.to_string()),
    )
    .await;
    let protobuf = "application/vnd.kubernetes.protobuf";
    let (code, _, _) = get_raw(&server, cms, protobuf).await;
    assert_eq!(code, 200, "a protobuf LIST of a namespace without it");
    // One whose objects are most of the resource: its LIST measures the snapshot's encoded
    // sizes at once, and the corrupt object elsewhere has none.
    for i in 0..6 {
        let (code, _) = json(&server, "POST", cms, Some(cm("t", &format!("many-{i}")))).await;
        assert_eq!(code, 201);
    }
    let (code, _, _) = get_raw(&server, cms, protobuf).await;
    assert_eq!(code, 200, "a protobuf LIST of most of the resource, without it");
    let (code, _, _) = get_raw(&server, "/api/v1/namespaces/u/configmaps", protobuf).await;
    assert_eq!(code, 500, "a protobuf LIST that includes it names it");
    let (code, v) = json(&server, "GET", "/api/v1/namespaces/u/configmaps", None).await;
    assert_eq!(
        (code, v["details"]["causes"][0]["field"].as_str()),
        (500, Some("/registry/configmaps/u/ill"))
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_objects_fail_the_reads_that_include_them_on_the_embedded_store() {
    corrupt_objects_fail_the_reads_that_include_them(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_objects_fail_the_reads_that_include_them_on_etcd() {
    corrupt_objects_fail_the_reads_that_include_them(true).await;
}

async fn values_kube_apiserver_stores_in_protobuf_are_served(etcd: bool) {
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    let server = watchcache_tests::start(backing.config(0)).await;
    watchcache_tests::create_namespaces(&server, &["t"]).await;
    let cms = "/api/v1/namespaces/t/configmaps";
    let (_, list) = json(&server, "GET", cms, None).await;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let mut watch = Frames::open(&server, &format!("{cms}?watch=true&resourceVersion={rv}")).await;
    store_put(
        &server,
        "/registry/configmaps/t/from-apiserver",
        protobuf_cm("t", "from-apiserver", "one"),
    )
    .await;
    let e = watch.next().await.expect("an event");
    assert_eq!(
        (e["type"].as_str(), e["object"]["data"]["k"].as_str()),
        (Some("ADDED"), Some("one")),
        "{e}"
    );
    let (code, v) = json(&server, "GET", &format!("{cms}/from-apiserver"), None).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        (v["kind"].as_str(), v["metadata"]["uid"].as_str()),
        (Some("ConfigMap"), Some("uid-from-apiserver"))
    );
    // Written through this server, it stays a ConfigMap (in JSON, as this server stores).
    let mut changed = v.clone();
    changed["data"]["k"] = json!("two");
    assert_eq!(
        json(&server, "PUT", &format!("{cms}/from-apiserver"), Some(changed))
            .await
            .0,
        200
    );
    let e = watch.next().await.expect("an event");
    assert_eq!(
        (e["type"].as_str(), e["object"]["data"]["k"].as_str()),
        (Some("MODIFIED"), Some("two"))
    );
    let (code, _, body) = get_raw(&server, cms, "application/vnd.kubernetes.protobuf").await;
    assert_eq!(code, 200);
    assert!(body.windows(14).any(|w| w == b"from-apiserver"));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_kube_apiserver_stores_in_protobuf_are_served_on_the_embedded_store() {
    values_kube_apiserver_stores_in_protobuf_are_served(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_kube_apiserver_stores_in_protobuf_are_served_on_etcd() {
    values_kube_apiserver_stores_in_protobuf_are_served(true).await;
}
