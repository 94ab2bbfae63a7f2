//! Protobuf over HTTP, read by an independent decoder: `protoc --decode_raw` reads our GET,
//! LIST and WATCH bytes, and what it reads agrees with the JSON answers to the same requests.
//! Needs protoc (`apt-get install protobuf-compiler`); says so loudly when it is missing and
//! fails under WATCHCACHE_REQUIRE_EXTERNAL=1.

use std::io::Write as _;
use std::process::{Command, Stdio};

use bytes::Bytes;
use serde_json::{Value, json};
use watchcache_encoders::protobuf;
use watchcache_tests::{config, get_raw, http, request, request_full, start};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A message as `protoc --decode_raw` prints it: fields by number, in order.
#[derive(Debug, Clone)]
enum Node {
    /// A scalar as printed: a quoted, C-escaped string, a number, or `0x…`.
    Scalar(String),
    Message(Vec<(u32, Node)>),
}

impl Node {
    fn fields(&self, number: u32) -> Vec<&Node> {
        match self {
            Node::Message(fields) => fields
                .iter()
                .filter(|(n, _)| *n == number)
                .map(|(_, v)| v)
                .collect(),
            Node::Scalar(s) => panic!("field {number} asked of the scalar {s}"),
        }
    }

    /// The one field at `path`.
    fn at(&self, path: &[u32]) -> &Node {
        path.iter().fold(self, |node, n| {
            let found = node.fields(*n);
            assert_eq!(found.len(), 1, "field {n} of {path:?} in {node:?}");
            found[0]
        })
    }

    /// The bytes of a string (or bytes) field. protoc prints bytes that happen to parse as a
    /// message as one (`"ERROR"` reads as field 8, a fixed32); such a message is written back
    /// to the bytes it was read from.
    fn bytes(&self) -> Vec<u8> {
        match self {
            Node::Scalar(s) => unescape(
                s.strip_prefix('"')
                    .and_then(|s| s.strip_suffix('"'))
                    .expect("a string"),
            ),
            Node::Message(_) => {
                let mut out = Vec::new();
                self.encode(&mut out);
                out
            }
        }
    }

    /// The bytes of a string field as [`bytes`](Self::bytes) gives them, or, where protoc
    /// read a string as a message of groups (a resourceVersion `34` is field 6's group start
    /// and end), those groups written back.
    fn texts(&self) -> [String; 2] {
        let mut groups = Vec::new();
        if let Node::Message(_) = self {
            self.encode_groups(&mut groups);
        }
        [
            String::from_utf8_lossy(&self.bytes()).into_owned(),
            String::from_utf8_lossy(&groups).into_owned(),
        ]
    }

    /// A message's fields written back with its sub-messages as groups.
    fn encode_groups(&self, out: &mut Vec<u8>) {
        let Node::Message(fields) = self else {
            unreachable!()
        };
        for (n, node) in fields {
            match node {
                Node::Message(_) => {
                    out.push((*n << 3 | 3) as u8);
                    node.encode_groups(out);
                    out.push((*n << 3 | 4) as u8);
                }
                scalar => Node::Message(vec![(*n, scalar.clone())]).encode(out),
            }
        }
    }

    /// A message's fields written back in the wire format.
    fn encode(&self, out: &mut Vec<u8>) {
        let Node::Message(fields) = self else {
            unreachable!()
        };
        fn varint(mut v: u64, out: &mut Vec<u8>) {
            while v >= 0x80 {
                out.push((v & 0x7f) as u8 | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
        for (n, node) in fields {
            let n = u64::from(*n);
            match node {
                Node::Scalar(s) if s.starts_with("0x") => {
                    let v = u64::from_str_radix(&s[2..], 16).unwrap();
                    if s.len() == 10 {
                        varint(n << 3 | 5, out);
                        out.extend_from_slice(&(v as u32).to_le_bytes());
                    } else {
                        varint(n << 3 | 1, out);
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                }
                Node::Scalar(s) if !s.starts_with('"') => {
                    varint(n << 3, out);
                    varint(s.parse::<i64>().unwrap() as u64, out);
                }
                _ => {
                    let b = node.bytes();
                    varint(n << 3 | 2, out);
                    varint(b.len() as u64, out);
                    out.extend_from_slice(&b);
                }
            }
        }
    }

    fn text(&self) -> String {
        String::from_utf8(self.bytes()).expect("UTF-8")
    }

    fn number(&self) -> i64 {
        match self {
            Node::Scalar(s) => s.parse().unwrap_or_else(|_| panic!("a number: {s}")),
            Node::Message(m) => panic!("a number expected: {m:?}"),
        }
    }

    /// A `map<string, string>` field: its entries (`{1: key, 2: value}`).
    fn map(&self, number: u32) -> serde_json::Map<String, Value> {
        self.fields(number)
            .into_iter()
            .map(|e| {
                (
                    e.at(&[1]).text(),
                    Value::String(e.fields(2).first().map_or(String::new(), |v| v.text())),
                )
            })
            .collect()
    }
}

/// Undoes protoc's C escapes (`\n`, `\"`, `\\`, `\NNN` octal).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        match b[i] {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'0'..=b'7' => {
                let end = (i..(i + 3).min(b.len()))
                    .take_while(|j| (b'0'..=b'7').contains(&b[*j]))
                    .last()
                    .unwrap()
                    + 1;
                out.push(u8::from_str_radix(std::str::from_utf8(&b[i..end]).unwrap(), 8).unwrap());
                i = end;
                continue;
            }
            other => out.push(other),
        }
        i += 1;
    }
    out
}

fn parse(text: &str) -> Node {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    fn message<'a>(lines: &mut impl Iterator<Item = &'a str>) -> Node {
        let mut fields = Vec::new();
        while let Some(line) = lines.next() {
            if line == "}" {
                break;
            }
            if let Some(n) = line.strip_suffix(" {") {
                fields.push((n.parse().expect("a field number"), message(lines)));
            } else {
                let (n, v) = line.split_once(": ").unwrap_or_else(|| panic!("a field: {line}"));
                fields.push((n.parse().expect("a field number"), Node::Scalar(v.to_owned())));
            }
        }
        Node::Message(fields)
    }
    message(&mut lines)
}

/// `protoc --decode_raw` of `bytes`, parsed.
fn decode_raw(bytes: &[u8]) -> Node {
    let mut child = Command::new("protoc")
        .arg("--decode_raw")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("protoc runs");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "protoc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&String::from_utf8(out.stdout).unwrap())
}

fn protoc_available() -> bool {
    let found = Command::new("protoc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        watchcache_tests::missing("protoc");
    }
    found
}

/// An enveloped body: the `typeMeta` and the object's message, as protoc reads them.
fn envelope(body: &[u8]) -> (String, String, Node) {
    assert_eq!(&body[..4], b"k8s\0", "the magic");
    let unknown = decode_raw(&body[4..]);
    let api_version = unknown.at(&[1, 1]).text();
    let kind = unknown.at(&[1, 2]).text();
    assert_eq!(unknown.at(&[3]).text(), "", "contentEncoding");
    (api_version, kind, unknown.at(&[2]).clone())
}

/// ObjectMeta (field 1 of every object) against the JSON's `metadata`.
fn same_meta(pb: &Node, json: &Value) {
    let meta = pb.at(&[1]);
    let j = &json["metadata"];
    assert_eq!(meta.at(&[1]).text(), j["name"].as_str().unwrap(), "name");
    if let Some(ns) = j["namespace"].as_str() {
        assert_eq!(meta.at(&[3]).text(), ns, "namespace");
    }
    assert_eq!(meta.at(&[5]).text(), j["uid"].as_str().unwrap(), "uid");
    let rv = j["resourceVersion"].as_str().unwrap();
    assert!(
        meta.at(&[6]).texts().iter().any(|t| t == rv),
        "resourceVersion {rv}: {:?}",
        meta.at(&[6])
    );
    let labels = j["labels"].as_object().cloned().unwrap_or_default();
    assert_eq!(meta.map(11), labels, "labels");
}

/// Watch frames: 4-byte big-endian length, then a WatchEvent; (type, object envelope).
fn frames(body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let event = decode_raw(&rest[4..4 + len]);
        out.push((event.at(&[1]).text(), event.at(&[2, 1]).bytes()));
        rest = &rest[4 + len..];
    }
    out
}

fn json_frames(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protoc_reads_get_list_and_watch_and_agrees_with_json() {
    if !protoc_available() {
        return;
    }
    let server = start(config(0)).await;
    let c = http();
    // Names and values protoc cannot mistake for nested messages (it prints a string as a
    // message when its bytes happen to parse as one).
    let (_, list) = request(&c, &server, "GET", "/api/v1/namespaces/default/pods", None).await;
    let start_rv = serde_json::from_slice::<Value>(&list).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    for name in ["gamma", "delta", "fox"] {
        let pod = json!({"metadata": {"name": name, "labels": {"app": "gold"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}});
        let (code, _) = request(&c, &server, "POST", "/api/v1/namespaces/default/pods", Some(pod)).await;
        assert_eq!(code, 201);
    }
    let patch = Bytes::from(json!({"metadata": {"labels": {"tier": "front"}}}).to_string());
    let (code, _) = watchcache_tests::request_typed(
        &c,
        &server,
        "PATCH",
        "/api/v1/namespaces/default/pods/gamma",
        "application/merge-patch+json",
        patch,
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = request(
        &c,
        &server,
        "DELETE",
        "/api/v1/namespaces/default/pods/delta",
        None,
    )
    .await;
    assert_eq!(code, 200);

    // GET.
    let path = "/api/v1/namespaces/default/pods/gamma";
    let (code, ct, pb) = get_raw(&server, path, PROTOBUF).await;
    assert_eq!((code, ct.as_deref()), (200, Some(PROTOBUF)));
    let (_, _, json) = get_raw(&server, path, "application/json").await;
    let json: Value = serde_json::from_slice(&json).unwrap();
    let (api_version, kind, pod) = envelope(&pb);
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Pod"));
    same_meta(&pod, &json);
    // spec.containers[0].image (PodSpec field 2, Container field 2), status.phase (field 1).
    assert_eq!(
        pod.at(&[2, 2, 2]).text(),
        json["spec"]["containers"][0]["image"].as_str().unwrap()
    );
    assert_eq!(pod.at(&[3, 1]).text(), json["status"]["phase"].as_str().unwrap());

    // LIST, paged: ListMeta and items agree, page by page.
    let mut token = String::new();
    let mut names = Vec::new();
    loop {
        let path = format!("/api/v1/namespaces/default/pods?limit=1&continue={token}");
        let (code, ct, pb) = get_raw(&server, &path, PROTOBUF).await;
        assert_eq!((code, ct.as_deref()), (200, Some(PROTOBUF)));
        let (_, _, json) = get_raw(&server, &path, "application/json").await;
        let json: Value = serde_json::from_slice(&json).unwrap();
        let (api_version, kind, list) = envelope(&pb);
        assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "PodList"));
        let meta = list.at(&[1]);
        assert_eq!(
            meta.at(&[2]).text(),
            json["metadata"]["resourceVersion"].as_str().unwrap()
        );
        let items = list.fields(2);
        let json_items = json["items"].as_array().unwrap();
        assert_eq!(items.len(), json_items.len());
        for (item, j) in items.iter().zip(json_items) {
            same_meta(item, j);
            names.push(j["metadata"]["name"].as_str().unwrap().to_owned());
        }
        token = meta.at(&[3]).text();
        assert_eq!(token, json["metadata"]["continue"].as_str().unwrap_or(""));
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(names, ["fox", "gamma"]);
    // A selected LIST (its sizes are measured item by item, not read from the snapshot).
    let path = "/api/v1/pods?labelSelector=tier%3Dfront";
    let (_, _, pb) = get_raw(&server, path, PROTOBUF).await;
    let (_, _, json) = get_raw(&server, path, "application/json").await;
    let json: Value = serde_json::from_slice(&json).unwrap();
    let (_, _, list) = envelope(&pb);
    let items = list.fields(2);
    assert_eq!(items.len(), 1);
    same_meta(items[0], &json["items"][0]);

    // WATCH from before the writes: the same events, in the same order, with the same
    // revisions; the DELETED one stamped with the deletion's revision, not re-encoded.
    let path = format!("/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1&resourceVersion={start_rv}");
    let (code, ct, pb) = get_raw(&server, &path, &format!("{PROTOBUF};stream=watch")).await;
    assert_eq!(
        (code, ct.as_deref()),
        (200, Some("application/vnd.kubernetes.protobuf;stream=watch"))
    );
    let (_, _, json) = get_raw(&server, &path, "application/json").await;
    let pb_frames = frames(&pb);
    let json_frames = json_frames(&json);
    let types: Vec<&str> = pb_frames.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "ADDED", "MODIFIED", "DELETED"]);
    assert_eq!(pb_frames.len(), json_frames.len());
    for ((ty, object), j) in pb_frames.iter().zip(&json_frames) {
        assert_eq!(ty, j["type"].as_str().unwrap());
        let (_, kind, pod) = envelope(object);
        assert_eq!(kind, "Pod");
        same_meta(&pod, &j["object"]);
    }

    // Initial events end with an annotated BOOKMARK, in protobuf too.
    let path = "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1&sendInitialEvents=true\
                &allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
    let (_, _, pb) = get_raw(&server, path, &format!("{PROTOBUF};stream=watch")).await;
    let pb_frames = frames(&pb);
    let types: Vec<&str> = pb_frames.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types[..3], ["ADDED", "ADDED", "BOOKMARK"], "{types:?}");
    let (_, _, bookmark) = envelope(&pb_frames[2].1);
    let annotations = bookmark.at(&[1]).map(12);
    assert_eq!(annotations["k8s.io/initial-events-end"], "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_watch_that_starts_too_old_gets_an_error_frame() {
    if !protoc_available() {
        return;
    }
    let mut cfg = config(0);
    cfg.history = 8;
    let server = start(cfg).await;
    let c = http();
    for i in 0..20 {
        let cm = json!({"metadata": {"name": "gauge"}, "data": {"n": i.to_string()}});
        let (method, path) = if i == 0 {
            ("POST", "/api/v1/namespaces/default/configmaps".to_owned())
        } else {
            ("PUT", "/api/v1/namespaces/default/configmaps/gauge".to_owned())
        };
        let (code, _) = request(&c, &server, method, &path, Some(cm)).await;
        assert!(code == 200 || code == 201, "{code}");
    }
    // Below the window and below the store's compaction: neither the window nor the store's
    // history (a catch-up) can serve it.
    let store = watchcache_tests::memory(&server);
    store.compact(store.revision());
    let path = "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=2";
    let (code, _, pb) = get_raw(&server, path, &format!("{PROTOBUF};stream=watch")).await;
    assert_eq!(code, 200, "HTTP 200, then the error in the stream");
    let pb_frames = frames(&pb);
    assert_eq!(pb_frames.len(), 1);
    let (ty, object) = &pb_frames[0];
    assert_eq!(ty, "ERROR");
    let (api_version, kind, status) = envelope(object);
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Status"));
    // Status: reason (4) and code (6).
    assert_eq!(
        (status.at(&[4]).text().as_str(), status.at(&[6]).number()),
        ("Expired", 410)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_bodies_create_and_replace_and_writes_answer_in_protobuf() {
    let server = start(config(0)).await;
    let c = http();
    let def = "io.k8s.api.core.v1.ConfigMap";
    let cm = |data: Value, rv: Option<&str>| {
        let mut meta = json!({"name": "settings"});
        if let Some(rv) = rv {
            meta["resourceVersion"] = rv.into();
        }
        let object = json!({"metadata": meta, "data": data});
        let raw = protobuf::encode_json(def, object.as_object().unwrap()).unwrap();
        Bytes::from(protobuf::envelope("v1", "ConfigMap", &raw))
    };
    let send = |method: &'static str, path: &'static str, body: Bytes, accept: &'static str| {
        let c = c.clone();
        let addr = server.addr();
        async move {
            let req = http::Request::builder()
                .method(method)
                .uri(format!("http://{addr}{path}"))
                .header("content-type", PROTOBUF)
                .header("accept", accept)
                .body(http_body_util::Full::new(body))
                .unwrap();
            let resp = c.request(req).await.unwrap();
            let code = resp.status().as_u16();
            let ct = resp
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes();
            (code, ct, body)
        }
    };
    let cms = "/api/v1/namespaces/default/configmaps";
    // Created from protobuf; answered in protobuf, as asked.
    let (code, ct, body) = send("POST", cms, cm(json!({"mode": "fast"}), None), PROTOBUF).await;
    assert_eq!(
        (code, ct.as_deref()),
        (201, Some(PROTOBUF)),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let envelope = protobuf::open_envelope(&body).unwrap();
    assert_eq!(envelope.kind, "ConfigMap");
    let created = protobuf::decode_json(def, envelope.raw).unwrap();
    assert_eq!(created["data"], json!({"mode": "fast"}));
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // Replaced from protobuf with its resourceVersion; answered in JSON when that is preferred.
    let path = "/api/v1/namespaces/default/configmaps/settings";
    let (code, ct, body) = send(
        "PUT",
        path,
        cm(json!({"mode": "safe"}), Some(&rv)),
        "application/json",
    )
    .await;
    assert_eq!((code, ct.as_deref()), (200, Some("application/json")));
    let replaced: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(replaced["data"], json!({"mode": "safe"}));
    // A stale resourceVersion is still a conflict; errors are Status in JSON.
    let (code, ct, body) = send("PUT", path, cm(json!({"mode": "x"}), Some(&rv)), PROTOBUF).await;
    assert_eq!(
        (code, ct.as_deref()),
        (409, Some("application/json")),
        "{}",
        String::from_utf8_lossy(&body)
    );
    // A truncated body is 400 and changes nothing.
    let whole = cm(json!({"mode": "y"}), None);
    let (code, _, _) = send("PUT", path, whole.slice(..whole.len() - 5), PROTOBUF).await;
    assert_eq!(code, 400);
    // DeleteOptions in protobuf (client-go's typed clients send them): a dry run deletes nothing.
    let options = json!({"dryRun": ["All"]});
    let raw = protobuf::encode_json(
        "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
        options.as_object().unwrap(),
    )
    .unwrap();
    let (code, _, _) = send(
        "DELETE",
        path,
        Bytes::from(protobuf::envelope("v1", "DeleteOptions", &raw)),
        "application/json",
    )
    .await;
    assert_eq!(code, 200);
    let (code, _, body) = request_full(&c, &server, "GET", path, None).await;
    assert_eq!(code, 200, "a dry run: {}", String::from_utf8_lossy(&body));
    let (code, _, body) = send("DELETE", path, Bytes::new(), PROTOBUF).await;
    assert_eq!(code, 200);
    let envelope = protobuf::open_envelope(&body).unwrap();
    assert_eq!(envelope.kind, "ConfigMap", "the deleted object, in protobuf");
}

/// Every field the workload generator writes survives protobuf both ways.
#[test]
fn workload_pods_round_trip_through_protobuf() {
    for i in 0..40 {
        let mut pod = watchcache_server::workload::pod(i, 7, i as u64 + 1);
        let object = pod.as_object_mut().unwrap();
        object.remove("apiVersion");
        object.remove("kind");
        let bytes = protobuf::encode_json("io.k8s.api.core.v1.Pod", object).unwrap();
        let back = protobuf::decode_json("io.k8s.api.core.v1.Pod", &bytes).unwrap();
        assert_eq!(Value::Object(back), pod, "pod {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_map_value_reads_the_same_through_json_and_protobuf() {
    let server = start(config(0)).await;
    watchcache_tests::create_namespaces(&server, &["ns-1"]).await;
    let c = http();
    let cms = "/api/v1/namespaces/ns-1/configmaps";
    let written = json!({
        "metadata": {"name": "nulls", "labels": {"l": null, "m": "1"}, "annotations": {"n": null}},
        "data": {"a": null, "b": "x"},
    });
    let (code, body) = request(&c, &server, "POST", cms, Some(written)).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    // As stored by a server before this one read nulls as Go does: straight into the store.
    let raw = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "old", "namespace": "ns-1", "uid": "u", "creationTimestamp": "2024-01-01T00:00:00Z", "labels": {"l": null}},
        "data": {"a": null, "b": "x"},
    });
    watchcache_tests::memory(&server)
        .create("/registry/configmaps/ns-1/old", Bytes::from(raw.to_string()))
        .unwrap();
    for name in ["nulls", "old"] {
        let path = format!("{cms}/{name}?resourceVersion=0");
        let mut json: Value = Value::Null;
        for _ in 0..100 {
            let (code, body) = request(&c, &server, "GET", &path, None).await;
            if code == 200 {
                json = serde_json::from_slice(&body).unwrap();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let (code, _, body) = get_raw(&server, &path, PROTOBUF).await;
        assert_eq!(code, 200);
        let envelope = protobuf::open_envelope(&body).unwrap();
        let pb = protobuf::decode_json("io.k8s.api.core.v1.ConfigMap", envelope.raw).unwrap();
        // Go decodes a null map value as the zero value of its type: "" for a string.
        assert_eq!(json["data"], json!({"a": "", "b": "x"}), "{name}: {json}");
        assert_eq!(pb["data"], json["data"], "{name}");
        assert_eq!(pb["metadata"]["labels"], json["metadata"]["labels"], "{name}");
        assert_eq!(json["metadata"]["labels"]["l"], "", "{name}");
    }
    server.shutdown().await.unwrap();
}
