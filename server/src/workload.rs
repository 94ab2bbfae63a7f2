//! The workload generator: realistic pods of about 4 KiB spread over namespaces and nodes,
//! and a steady churn of updates, for the demo and the benchmarks.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The annotation carrying when a pod version was written, in microseconds since the Unix
/// epoch: a watcher on the same machine subtracts it from its clock to get the end-to-end
/// latency (the benchmark runner's `http` scenario does).
pub const WRITTEN_AT_ANNOTATION: &str = "watchcache.dev/written-at-us";

fn micros_since_epoch() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
        .to_string()
}

/// Namespaces the seeded pods are spread over.
pub const NAMESPACES: usize = 10;

/// How many nodes `pods` seeded pods run on: about 30 each, between 1 and 100 nodes.
pub fn node_count(pods: usize) -> usize {
    pods.div_ceil(30).clamp(1, 100)
}

/// A pod of about 4 KiB: labels, annotations, two containers with env, resources and probes.
pub fn pod(i: usize, nodes: usize, generation: u64) -> Value {
    let env: Vec<Value> = (0..12)
        .map(|e| json!({"name": format!("ENV_VAR_{e}"), "value": format!("value-{i}-{e}")}))
        .collect();
    let container = |name: &str| {
        json!({
            "name": name,
            "image": format!("registry.example.com/team/{name}:1.2.{}", i % 7),
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
        })
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("web-{i:06}"),
            "namespace": format!("ns-{}", i % NAMESPACES),
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": now(),
            "labels": {"app": if i.is_multiple_of(3) { "api" } else { "web" }, "tier": "frontend", "shard": format!("s{}", i % 16)},
            "annotations": {"watchcache.dev/generation": generation.to_string(), WRITTEN_AT_ANNOTATION: micros_since_epoch(), "note": "x".repeat(1500)},
        },
        "spec": {
            "nodeName": format!("node-{}", i % nodes),
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "containers": [container("app"), container("sidecar")],
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
        },
        "status": {"phase": "Running", "podIP": format!("10.{}.{}.{}", i / 65536 % 256, i / 256 % 256, i % 256), "hostIP": "192.0.2.1"},
    })
}

/// The storage key of seeded pod `i`.
pub fn pod_key(i: usize) -> String {
    format!("/registry/pods/ns-{}/web-{i:06}", i % NAMESPACES)
}

/// How many writes seeding keeps in flight (etcd answers each after a round of consensus).
const SEED_IN_FLIGHT: usize = 64;

/// Creates `pods` pods with their namespaces and nodes (objects that already exist are kept).
pub async fn seed(store: &Backend, pods: usize) {
    use futures_util::StreamExt;
    let nodes = node_count(pods);
    let mut writes: Vec<(String, Value)> = Vec::new();
    for n in 0..NAMESPACES.min(pods.max(1)) {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{n}"), "creationTimestamp": now()}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        writes.push((format!("/registry/namespaces/ns-{n}"), ns));
    }
    for n in 0..nodes {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{n}"), "creationTimestamp": now(), "labels": {"kubernetes.io/hostname": format!("node-{n}")}}, "spec": {}});
        writes.push((format!("/registry/minions/node-{n}"), node));
    }
    let objects = writes
        .into_iter()
        .chain((0..pods).map(|i| (pod_key(i), pod(i, nodes, 0))));
    futures_util::stream::iter(objects)
        .map(|(key, value)| async move {
            let _ = store.create(&key, Bytes::from(value.to_string())).await;
        })
        .buffer_unordered(SEED_IN_FLIGHT)
        .for_each(|()| async {})
        .await;
}

/// Updates random seeded pods at `rate` per second until `stop`.
pub async fn churn(store: Backend, pods: usize, rate: f64, stop: CancellationToken) {
    if pods == 0 || rate <= 0.0 {
        return;
    }
    let nodes = node_count(pods);
    // Ticks of at least 1 ms, several updates a tick at high rates.
    let per_tick = (rate / 1000.0).ceil().max(1.0);
    let period = Duration::from_secs_f64(per_tick / rate);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut generation = 1u64;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        for _ in 0..per_tick as usize {
            let i = fastrand::usize(0..pods);
            generation += 1;
            let key = pod_key(i);
            let value = Bytes::from(pod(i, nodes, generation).to_string());
            // A pod deleted by a user is simply recreated.
            if store.update(&key, value.clone(), None).await.is_err() {
                let _ = store.create(&key, value).await;
            }
        }
    }
}
