//! Realistic pods of a chosen encoded size, for every design.
//!
//! The size comes from structure, as in real clusters: containers carry more environment
//! variables as the target grows, and one annotation takes up the last few bytes so the
//! encoded size is exact. A decoded copy of such a pod is a tree of many small nodes, which is
//! what a design that deep-copies or materialises objects pays for.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use watchcache_core::{Codec, ObjectVersion, Revision};
use watchcache_encoders::JsonCodec;

/// The encoded JSON of pod `i`, exactly `bytes` long when `bytes` is at least
/// [`MIN_POD_BYTES`] (smaller targets get the smallest pod).
pub fn pod_json(i: usize, bytes: usize) -> Vec<u8> {
    PodMaker::new(bytes).make(i)
}

/// Makes pods of one size; [`pod_json`] for many pods.
#[derive(Clone, Copy, Debug)]
pub struct PodMaker {
    bytes: usize,
    env: usize,
}

impl PodMaker {
    /// Pods of `bytes` each.
    pub fn new(bytes: usize) -> Self {
        let len = |env| serde_json::to_vec(&pod(0, env, None)).map_or(0, |v| v.len());
        // Whole environment variables while they fit (each adds the same bytes to both
        // containers), leaving room for the padding annotation.
        let base = len(0);
        let per_env = len(1) - base;
        let mut env = bytes.saturating_sub(base + 64) / per_env;
        while env > 0 && len(env) + 32 > bytes {
            env -= 1;
        }
        PodMaker { bytes, env }
    }

    /// Pod `i`.
    pub fn make(&self, i: usize) -> Vec<u8> {
        let mut value = pod(i, self.env, None);
        let len = serde_json::to_vec(&value).map_or(0, |v| v.len());
        // `"pad":""` is 8 bytes around its content.
        if let Some(pad) = self.bytes.checked_sub(len + 8) {
            value["metadata"]["annotations"]["pad"] = Value::String("x".repeat(pad));
        }
        let out = serde_json::to_vec(&value).unwrap_or_default();
        debug_assert!(self.bytes < MIN_POD_BYTES || out.len() == self.bytes);
        out
    }
}

/// The smallest pod [`pod_json`] makes.
pub const MIN_POD_BYTES: usize = 700;

fn pod(i: usize, env: usize, pad: Option<usize>) -> Value {
    let env: Vec<Value> = (0..env)
        .map(|e| json!({"name": format!("ENV_VAR_{e:03}"), "value": format!("value-{i:06}-{e:03}")}))
        .collect();
    let container = |name: &str| {
        json!({
            "name": name,
            "image": format!("registry.example.com/team/{name}:1.2.{}", i % 7),
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        })
    };
    let mut annotations = serde_json::Map::new();
    if let Some(pad) = pad {
        annotations.insert("pad".into(), Value::String("x".repeat(pad)));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("web-{i:06}"),
            "namespace": format!("ns-{}", i % 10),
            "uid": format!("5f0c6d2e-{:04x}-4a8b-9c3d-{i:012x}", i % 65536),
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-29T07:00:00Z",
            "labels": {"app": "web", "tier": "frontend", "shard": format!("s{}", i % 16)},
            "annotations": annotations,
        },
        "spec": {"nodeName": format!("node-{}", i % 100), "containers": [container("app"), container("sidecar")]},
        "status": {"phase": "Running", "podIP": format!("10.0.{}.{}", i / 256 % 256, i % 256)},
    })
}

/// The protobuf message of the pods.
pub const POD_MESSAGE: &str = "io.k8s.api.core.v1.Pod";

/// The codec every design that keeps encoded objects uses (JSON, and protobuf when asked).
pub fn codec() -> Arc<JsonCodec> {
    Arc::new(JsonCodec::new(true, &["spec.nodeName", "status.phase"]).with_protobuf(POD_MESSAGE))
}

/// Pod `i` of `bytes`, decoded once into a stored object version at `revision`.
pub fn object_version(codec: &JsonCodec, i: usize, bytes: usize, revision: u64) -> Arc<ObjectVersion> {
    let raw = pod_json(i, bytes);
    Arc::new(
        codec
            .decode(&raw, Revision::new(revision))
            .expect("the generated pods are valid"),
    )
}

/// Pod `i` of `bytes` as shared encoded bytes.
pub fn pod_bytes(i: usize, bytes: usize) -> Bytes {
    Bytes::from(pod_json(i, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_have_the_size_asked_for_and_decode() {
        let codec = codec();
        for bytes in [MIN_POD_BYTES, 1024, 1500, 4096, 16 * 1024, 100_000] {
            for i in [0, 7, 123_456] {
                let raw = pod_json(i, bytes);
                assert_eq!(raw.len(), bytes, "pod {i} of {bytes} bytes");
                let v: Value = serde_json::from_slice(&raw).unwrap();
                assert_eq!(v["metadata"]["name"], format!("web-{i:06}"));
                let version = codec.decode(&raw, Revision::new(3)).unwrap();
                assert_eq!(
                    version.field("spec.nodeName"),
                    Some(&*format!("node-{}", i % 100))
                );
            }
        }
        assert!(pod_json(1, 10).len() <= MIN_POD_BYTES);
    }

    #[test]
    fn bigger_pods_have_more_structure_not_just_padding() {
        let nodes = |bytes| {
            fn count(v: &Value) -> usize {
                1 + match v {
                    Value::Array(a) => a.iter().map(count).sum(),
                    Value::Object(o) => o.values().map(count).sum(),
                    _ => 0,
                }
            }
            count(&serde_json::from_slice(&pod_json(1, bytes)).unwrap())
        };
        assert!(nodes(4096) > 2 * nodes(1024));
        assert!(nodes(16 * 1024) > 3 * nodes(4096));
    }
}
