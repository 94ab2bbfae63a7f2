//! The workload generator: realistic pods of about 4 KiB spread over namespaces and nodes,
//! and a steady churn of updates, for the demo and the benchmarks. For a benchmark of
//! kubelets' traffic it also seeds a given number of nodes with a status, the ConfigMaps and
//! Secrets their pods mount, and churns node statuses (a kubelet's heartbeat); the churn can
//! wait until the benchmark's clients are connected ([`START_KEY`]).

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::store::backend::Backend;

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

/// What the generator seeds and churns (the server's benchmark workload flags).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Workload {
    /// Pods to seed (`--seed-pods`).
    pub pods: usize,
    /// Nodes to seed with a status, the pods spread over them (`--seed-nodes`); 0 for
    /// [`node_count`] nodes without a status, as without the flag.
    pub nodes: usize,
    /// Pod updates per second (`--churn`).
    pub pod_churn: f64,
    /// Node status updates per second (`--node-churn`).
    pub node_churn: f64,
    /// Whether the churn waits for [`START_KEY`] to exist (`--churn-wait`).
    pub wait: bool,
}

impl Workload {
    /// The nodes the pods run on.
    pub fn node_total(&self) -> usize {
        if self.nodes > 0 {
            self.nodes
        } else {
            node_count(self.pods)
        }
    }
}

/// With `--churn-wait`, the churn starts once this ConfigMap (`default/churn-start`) exists: a
/// benchmark creates it when its clients are connected, so that what they cost idle is
/// measured before the first update.
pub const START_KEY: &str = "/registry/configmaps/default/churn-start";

/// ConfigMaps and Secrets seeded in each namespace with `--seed-nodes` (`config-K`,
/// `secret-K`), which the kubelets of a benchmark watch by name.
pub const CONFIG_OBJECTS: usize = 16;

/// The ConfigMaps and Secrets the kubelet of node `node` watches: four of each, in the
/// namespace `ns-(node % 10)`, as (resource, namespace, name).
pub fn kubelet_objects(node: usize) -> Vec<(&'static str, String, String)> {
    let ns = format!("ns-{}", node % NAMESPACES);
    (0..4)
        .flat_map(|k| {
            let at = (node / NAMESPACES + k) % CONFIG_OBJECTS;
            [
                ("configmaps", ns.clone(), format!("config-{at}")),
                ("secrets", ns.clone(), format!("secret-{at}")),
            ]
        })
        .collect()
}

/// A Node with a status (about 2.5 KiB: conditions, addresses, capacity, images), its
/// heartbeat and the time it was written ([`WRITTEN_AT_ANNOTATION`]) fresh.
pub fn node(n: usize, generation: u64) -> Value {
    let stamp = now();
    let condition = |kind: &str, status: &str, reason: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": format!("kubelet reports {reason}"),
               "lastHeartbeatTime": stamp, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let images: Vec<Value> = (0..8)
        .map(|k| json!({"names": [format!("registry.example.com/team/image-{k}@sha256:{:064x}", n * 8 + k)], "sizeBytes": 10_000_000 + k * 1_000}))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": format!("node-{n}"),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kubernetes.io/hostname": format!("node-{n}"), "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": format!("zone-{}", n % 3)},
            "annotations": {"watchcache.dev/generation": generation.to_string(), WRITTEN_AT_ANNOTATION: micros_since_epoch()},
        },
        "spec": {"podCIDR": format!("10.{}.{}.0/24", n / 256 % 256, n % 256)},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "7800m", "memory": "31Gi", "pods": "110"},
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
            ],
            "addresses": [{"type": "InternalIP", "address": format!("192.0.{}.{}", n / 256 % 256, n % 256)}, {"type": "Hostname", "address": format!("node-{n}")}],
            "nodeInfo": {"kubeletVersion": "v1.31.0", "containerRuntimeVersion": "containerd://1.7.0", "osImage": "Debian GNU/Linux 12", "architecture": "amd64", "operatingSystem": "linux"},
            "images": images,
        },
    })
}

/// The storage key of seeded node `n`.
pub fn node_key(n: usize) -> String {
    format!("/registry/minions/node-{n}")
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

/// Creates the pods with their namespaces and nodes, and with `--seed-nodes` the nodes'
/// statuses and the ConfigMaps and Secrets of [`kubelet_objects`] (objects that already exist
/// are kept).
pub async fn seed(store: &Backend, w: &Workload) {
    use futures_util::StreamExt;
    let pods = w.pods;
    let nodes = w.node_total();
    let mut writes: Vec<(String, Value)> = Vec::new();
    let namespaces = if w.nodes > 0 {
        NAMESPACES
    } else {
        NAMESPACES.min(pods.max(1))
    };
    for n in 0..namespaces {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{n}"), "creationTimestamp": now()}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        writes.push((format!("/registry/namespaces/ns-{n}"), ns));
    }
    // Made as they are written, as the pods are: up to 100,000 nodes are never all in memory.
    let with_status = w.nodes > 0;
    let node_objects = (0..nodes).map(move |n| {
        let node = if with_status {
            node(n, 0)
        } else {
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{n}"), "creationTimestamp": now(), "labels": {"kubernetes.io/hostname": format!("node-{n}")}}, "spec": {}})
        };
        (node_key(n), node)
    });
    let mut kubelet_objects: Vec<(String, Value)> = Vec::new();
    if w.nodes > 0 {
        for n in 0..NAMESPACES {
            let ns = format!("ns-{n}");
            for k in 0..CONFIG_OBJECTS {
                let meta = |name: String| json!({"name": name, "namespace": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now()});
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(format!("config-{k}")), "data": {"app.conf": "x".repeat(512)}});
                let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta(format!("secret-{k}")), "type": "Opaque", "data": {"token": "eA==".repeat(64)}});
                kubelet_objects.push((format!("/registry/configmaps/{ns}/config-{k}"), cm));
                kubelet_objects.push((format!("/registry/secrets/{ns}/secret-{k}"), secret));
            }
        }
    }
    let objects = writes
        .into_iter()
        .chain(node_objects)
        .chain(kubelet_objects)
        .chain((0..pods).map(|i| (pod_key(i), pod(i, nodes, 0))));
    futures_util::stream::iter(objects)
        .map(|(key, value)| async move {
            let _ = store.create(&key, Bytes::from(value.to_string())).await;
        })
        .buffer_unordered(SEED_IN_FLIGHT)
        .for_each(|()| async {})
        .await;
}

/// Runs the churn of `w` until `stop`: pod updates at `w.pod_churn` per second and node
/// status updates at `w.node_churn`, from when [`START_KEY`] exists if `w.wait`.
///
/// The rates are kept against the clock, not per timer tick: a wake-up that comes late (the
/// runtime is busy fanning out the last writes) makes the writes that fell due meanwhile, so a
/// loaded server is offered the rate asked for. Up to [`CHURN_IN_FLIGHT`] writes are in flight
/// at once, so a store with a round trip (etcd) is not held to one write per round trip. A
/// version is made, and stamped, just before its write starts.
pub async fn churn(store: Backend, w: Workload, stop: CancellationToken) {
    use futures_util::StreamExt;
    if w.pod_churn <= 0.0 && w.node_churn <= 0.0 {
        return;
    }
    if w.wait {
        let mut poll = tokio::time::interval(Duration::from_millis(50));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = poll.tick() => {}
            }
            if matches!(store.get(START_KEY).await, Ok(Some(_))) {
                break;
            }
        }
    }
    let nodes = w.node_total();
    let pods = w.pods;
    let start = tokio::time::Instant::now();
    let mut pod_rate = Due::new(if pods > 0 { w.pod_churn } else { 0.0 });
    let mut node_rate = Due::new(if w.nodes > 0 { w.node_churn } else { 0.0 });
    let mut generation = 1u64;
    let mut in_flight = futures_util::stream::FuturesUnordered::new();
    // A tick per write at low rates, at most one a millisecond at high ones (several writes a
    // tick then), at least one every 100 ms.
    let total = pod_rate.rate.max(0.0) + node_rate.rate.max(0.0);
    let period = if total > 0.0 {
        (1.0 / total).clamp(0.001, 0.1)
    } else {
        0.1
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(period));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            Some(()) = in_flight.next(), if !in_flight.is_empty() => continue,
            _ = tick.tick() => {}
        }
        let elapsed = start.elapsed().as_secs_f64();
        // Interleaved, so that neither kind waits behind the other's backlog.
        let mut due = [pod_rate.take(elapsed), node_rate.take(elapsed)];
        while due != [0, 0] {
            for (kind, left) in due.iter_mut().enumerate() {
                if *left == 0 {
                    continue;
                }
                *left -= 1;
                if in_flight.len() >= CHURN_IN_FLIGHT {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = in_flight.next() => {}
                    }
                }
                generation += 1;
                let (key, value) = if kind == 0 {
                    let i = fastrand::usize(0..pods);
                    (pod_key(i), pod(i, nodes, generation))
                } else {
                    let n = fastrand::usize(0..nodes);
                    (node_key(n), node(n, generation))
                };
                in_flight.push(write(store.clone(), key, value));
            }
        }
    }
}

/// Writes the churn may have in flight at once.
pub const CHURN_IN_FLIGHT: usize = 32;

/// One churn write. An object deleted by a user is simply recreated.
async fn write(store: Backend, key: String, value: Value) {
    let value = Bytes::from(value.to_string());
    if store.update(&key, value.clone(), None).await.is_err() {
        let _ = store.create(&key, value).await;
    }
}

/// How many writes of a rate fell due by a time: the rate held against the clock.
struct Due {
    rate: f64,
    made: u64,
}

impl Due {
    fn new(rate: f64) -> Self {
        Due { rate, made: 0 }
    }

    /// The writes due by `elapsed` seconds and not made yet, counted as made. A backlog of
    /// more than a second's worth (a store far slower than the rate) is dropped down to one
    /// second's: the churn then resumes at the rate rather than in a burst.
    fn take(&mut self, elapsed: f64) -> u64 {
        if self.rate.is_nan() || self.rate <= 0.0 {
            return 0;
        }
        let due = (elapsed * self.rate) as u64;
        let most = self.rate.ceil().max(1.0) as u64;
        if due > self.made + most {
            self.made = due - most;
        }
        let n = due.saturating_sub(self.made);
        self.made += n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::Due;

    #[test]
    fn the_churn_keeps_its_rate_against_the_clock_when_woken_late() {
        let mut due = Due::new(1000.0);
        // Woken on time, a write a millisecond.
        assert_eq!(due.take(0.001), 1);
        assert_eq!(due.take(0.002), 1);
        // Woken 30 ms late: the 30 writes that fell due meanwhile, not one.
        assert_eq!(due.take(0.032), 30);
        assert_eq!(due.take(0.032), 0);
        // Ten seconds late: one second's worth, then the rate again.
        assert_eq!(due.take(10.032), 1000);
        assert_eq!(due.take(10.033), 1);
    }

    #[test]
    fn a_churn_rate_of_zero_or_nan_writes_nothing() {
        assert_eq!(Due::new(0.0).take(100.0), 0);
        assert_eq!(Due::new(f64::NAN).take(100.0), 0);
        let mut slow = Due::new(0.5);
        assert_eq!(slow.take(1.9), 0);
        assert_eq!(slow.take(2.1), 1);
    }
}
