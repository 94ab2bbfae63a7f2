//! Peak extra heap of one LIST of 50,000 items of about 4 KiB, counted by a global allocator:
//! the streaming encoder stays under 1 MiB, the buffered one needs at least the body.
//! Bytes, never time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use watchcache_core::{Encoding, ListItems, ObjectKey, ObjectVersion, Revision, Snapshot, WireFormat};
use watchcache_encoders::{
    DEFAULT_CHUNK_SIZE, JsonCodec, ListHeader, ResourceInfo, StreamingList, encode_list,
};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The counters are process-wide: the tests of this binary take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const ITEMS: usize = if cfg!(miri) { 100 } else { 50_000 };
const ITEM_BYTES: usize = 4096;

/// Items built directly with their JSON bytes (no parsing: the property is the encoder's).
fn snapshot() -> Arc<Snapshot> {
    let objects = (0..ITEMS)
        .map(|i| {
            let name = format!("pod-{i:06}");
            let head = format!(r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"1"}},"pad":""#);
            let mut json = head.into_bytes();
            json.resize(ITEM_BYTES - 2, b'x');
            json.extend_from_slice(b"\"}");
            let bytes = Bytes::from(json);
            Arc::new(
                ObjectVersion::builder(ObjectKey::new("ns", name), Revision::new(1))
                    .encoding(WireFormat::Json, Encoding::new(bytes))
                    .build(),
            )
        })
        .collect();
    Arc::new(Snapshot::new(Revision::new(1), objects))
}

/// Runs `f` and returns its peak heap above what was live when it started.
fn peak_extra(f: impl FnOnce() -> usize) -> (usize, usize) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (PEAK.load(Ordering::SeqCst) - base, out)
}

#[test]
fn streaming_a_large_list_keeps_extra_heap_flat_while_buffering_needs_the_body() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let snapshot = snapshot();
    let info = ResourceInfo::new("pods", "Pod", "v1");
    let codec: Arc<JsonCodec> = Arc::new(JsonCodec::new(true, &[]));
    let header = ListHeader {
        revision: Revision::new(1),
        ..Default::default()
    };

    let (streaming_peak, streamed) = peak_extra(|| {
        let mut body = StreamingList::new(
            &info,
            &header,
            ListItems::all(snapshot.clone()),
            codec.clone(),
            DEFAULT_CHUNK_SIZE,
        );
        let mut total = 0;
        // A discarding consumer: each chunk is dropped before the next is asked for.
        while let Some(chunk) = body.next_chunk() {
            total += chunk.unwrap().len();
        }
        total
    });
    let (buffered_peak, buffered) = peak_extra(|| {
        encode_list(&info, &header, ListItems::all(snapshot.clone()), &*codec)
            .unwrap()
            .len()
    });
    eprintln!(
        "LIST of {ITEMS} items, {streamed} bytes: streaming peak extra heap {streaming_peak} B, buffered {buffered_peak} B ({:.0}x)",
        buffered_peak as f64 / streaming_peak.max(1) as f64
    );
    assert_eq!(streamed, buffered);
    assert!(streamed >= ITEMS * ITEM_BYTES);
    assert!(streaming_peak < 1024 * 1024, "streaming peak {streaming_peak} B");
    assert!(
        buffered_peak >= buffered,
        "buffered peak {buffered_peak} B below its body of {buffered} B"
    );
}

/// A realistic pod of about 4 KiB: labels, annotations, two containers with env and probes.
fn realistic_pod(i: usize) -> Vec<u8> {
    use serde_json::json;
    let env: Vec<_> = (0..12)
        .map(|e| json!({"name": format!("ENV_VAR_{e}"), "value": format!("value-{i}-{e}")}))
        .collect();
    let container = |name: &str| {
        json!({
            "name": name, "image": format!("registry.example.com/team/{name}:1.2.{i}"),
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
        })
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("web-{i:06}"), "namespace": format!("ns-{}", i % 20),
            "uid": format!("0b5c2f8e-{i:04}-4d2a-9a44-6f6c1d2e3f40"),
            "creationTimestamp": "2026-11-29T07:00:00Z",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "5d8f7c9b6"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(1600)},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f7c9b6", "uid": "a1", "controller": true}],
        },
        "spec": {"nodeName": format!("node-{}", i % 100), "containers": [container("app"), container("sidecar")],
                 "volumes": [{"name": "config", "configMap": {"name": "web-config"}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "hostIP": "192.0.2.1"},
    })
    .to_string()
    .into_bytes()
}

#[test]
fn a_stored_object_version_costs_at_most_1_3_times_its_encoded_size() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let codec = JsonCodec::new(true, &["spec.nodeName", "status.phase"]);
    let raws: Vec<Vec<u8>> = (0..2_000).map(realistic_pod).collect();
    let (stored, encoded) = stored_and_encoded(&codec, &raws, "stored object versions");
    assert!(encoded >= 3_500, "the pods are realistic in size");
    assert!(
        stored as f64 <= 1.3 * encoded as f64,
        "{stored} B for {encoded} B encoded"
    );
}

/// Decodes `raws` with `codec` and keeps the versions: the heap each holds and its JSON's
/// size, on average (and printed, `what` naming them).
fn stored_and_encoded(codec: &JsonCodec, raws: &[Vec<u8>], what: &str) -> (usize, usize) {
    use watchcache_core::Codec;
    let base = LIVE.load(Ordering::SeqCst);
    let versions: Vec<Arc<ObjectVersion>> = raws
        .iter()
        .enumerate()
        .map(|(i, raw)| Arc::new(codec.decode(raw, Revision::new(i as u64 + 1)).unwrap()))
        .collect();
    let stored = (LIVE.load(Ordering::SeqCst) - base) / versions.len();
    let encoded = versions
        .iter()
        .map(|v| v.encoded(WireFormat::Json).unwrap().bytes().len())
        .sum::<usize>()
        / versions.len();
    let ratio = stored as f64 / encoded as f64;
    eprintln!("{what}: {stored} B each for {encoded} B of JSON ({ratio:.3}x)");
    (stored, encoded)
}

/// A custom resource of about 2 KiB as a CRD's operator keeps one per tenant: a spec of
/// settings, a status, and the `managedFields` of its creator and its operator.
fn realistic_custom_resource(i: usize) -> Vec<u8> {
    use serde_json::json;
    let settings: serde_json::Map<String, serde_json::Value> = (0..24)
        .map(|k| (format!("setting-{k:03}"), json!(format!("{:0>40}", i * 7919 + k))))
        .collect();
    json!({
        "apiVersion": "bench.example.com/v1", "kind": "Tenant",
        "metadata": {
            "name": format!("tenant-{i:05}"), "namespace": "tenants",
            "uid": format!("0b5c2f8e-{i:04}-4d2a-9a44-6f6c1d2e3f40"), "generation": 3,
            "creationTimestamp": "2026-11-29T07:00:00Z", "labels": {"tier": "gold"},
            "managedFields": [
                {"manager": "kubectl", "operation": "Update", "apiVersion": "bench.example.com/v1",
                 "time": "2026-11-29T07:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {".": {}, "f:image": {}, "f:size": {}, "f:settings": {}}}},
                {"manager": "tenant-operator", "operation": "Update", "apiVersion": "bench.example.com/v1",
                 "time": "2026-11-29T07:00:01Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {".": {}, "f:observedGeneration": {}, "f:ready": {}}}},
            ],
        },
        "spec": {"size": 3, "image": "starrocks/fe:3.3", "version": 7, "settings": settings},
        "status": {"observedGeneration": 3, "ready": true},
    })
    .to_string()
    .into_bytes()
}

/// Custom resources are stored encoded, like every kind: what the cache keeps of one is its
/// JSON and a small head, at most 1.3 times the JSON (an apiserver's decoded custom resource
/// costs many times more).
#[test]
fn a_stored_custom_resource_costs_at_most_1_3_times_its_json() {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let codec = JsonCodec::new(true, &[]);
    let raws: Vec<Vec<u8>> = (0..2_000).map(realistic_custom_resource).collect();
    let (stored, encoded) = stored_and_encoded(&codec, &raws, "stored custom resources");
    assert!(encoded >= 1_800, "the resources are realistic in size");
    assert!(
        stored as f64 <= 1.3 * encoded as f64,
        "{stored} B for {encoded} B of JSON"
    );
}
