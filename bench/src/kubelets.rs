//! A cluster's watch traffic over the real transport: `watchcache serve` seeded with N nodes
//! and their pods, and for each node a kubelet on one connection (on HTTP/1.1, one connection
//! per watch) watching its pods (`spec.nodeName`), its Node (`metadata.name`) and the four
//! ConfigMaps and four Secrets its pods mount (by name, in its namespace); plus controllers,
//! each on a connection of its own watching all pods and all nodes. The server's workload
//! churns pods and node statuses at fixed offered rates, each version stamped with the time
//! it was written.
//!
//! Every kubelet watch parses what it receives (a kubelet receives little: the cluster's
//! churn divided among the nodes); two controllers parse, the others count frames. A kubelet
//! receives each event of its node, so the kubelets' pod events together are the pod events
//! written in the window, which a parsing controller counts: their ratio is the delivered
//! fraction; a controller's is against the same count.

use serde_json::{Map, Value, json};
use watchcache_server::workload::kubelet_objects;

use crate::report::{quantile, round3};
use crate::wire::{Outcome, Plan, Transport, Watch, connections};

/// Watches start from the cache's revision as they open, as an informer's after its LIST.
const FROM_NOW: &str = "resourceVersion=0&sendInitialEvents=false&resourceVersionMatch=NotOlderThan";

/// The plan's kinds.
pub const KINDS: [&str; 5] = [
    "kubelet_pods",
    "kubelet_nodes",
    "kubelet_objects",
    "controller_pods",
    "controller_nodes",
];

/// Controllers that parse frames for their latency (the others count).
const SAMPLED_CONTROLLERS: usize = 2;

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Nodes, each with a kubelet.
    pub nodes: usize,
    /// Controllers watching all pods and all nodes.
    pub controllers: usize,
    /// Pods seeded per node.
    pub pods_per_node: usize,
    /// Pod updates per second.
    pub pod_churn: f64,
    /// Node status updates per second.
    pub node_churn: f64,
    /// Seconds the clients count.
    pub seconds: f64,
}

/// The server's workload flags.
pub fn server_args(p: &Params) -> Vec<String> {
    [
        "--seed-nodes".to_owned(),
        p.nodes.to_string(),
        "--seed-pods".to_owned(),
        (p.nodes * p.pods_per_node).to_string(),
        "--churn".to_owned(),
        p.pod_churn.to_string(),
        "--node-churn".to_owned(),
        p.node_churn.to_string(),
    ]
    .into()
}

/// The watches, a connection per kubelet and per controller, split per watch on HTTP/1.1.
pub fn plan(p: &Params, transport: Transport) -> Plan {
    let watch = |path: String, kind: usize, sampled: bool| Watch { path, kind, sampled };
    let kubelets = (0..p.nodes).map(|n| {
        let mut w = vec![
            watch(
                format!("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-{n}&{FROM_NOW}"),
                0,
                true,
            ),
            watch(
                format!("/api/v1/nodes?watch=1&fieldSelector=metadata.name%3Dnode-{n}&{FROM_NOW}"),
                1,
                true,
            ),
        ];
        for (resource, ns, name) in kubelet_objects(n) {
            w.push(watch(
                format!(
                    "/api/v1/namespaces/{ns}/{resource}?watch=1&fieldSelector=metadata.name%3D{name}&{FROM_NOW}"
                ),
                2,
                true,
            ));
        }
        w
    });
    let controllers = (0..p.controllers).map(|c| {
        let sampled = c < SAMPLED_CONTROLLERS;
        vec![
            watch(format!("/api/v1/pods?watch=1&{FROM_NOW}"), 3, sampled),
            watch(format!("/api/v1/nodes?watch=1&{FROM_NOW}"), 4, sampled),
        ]
    });
    Plan {
        kinds: KINDS.to_vec(),
        connections: connections(kubelets.chain(controllers).collect(), transport),
    }
}

/// What every transport's row shows of its connections: handshake cost, memory per
/// connection and per stream, CPU per delivered frame.
pub fn transport_fields(out: &Outcome, delivered: u64, row: &mut Map<String, Value>) {
    let conns = out.connections.max(1) as f64;
    let streams = out.streams.max(1) as f64;
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let fields = [
        ("connections", json!(out.connections)),
        ("streams", json!(out.streams)),
        ("failed_connections", json!(out.failed_connections)),
        ("connect_secs", json!(round3(out.connect_secs))),
        ("handshake_cpu_us", json!(round3(out.connect_cpu_s * 1e6 / conns))),
        (
            "watch_open_cpu_us",
            json!(round3(out.watch_cpu_s * 1e6 / streams)),
        ),
        (
            "rss_bytes_per_connection",
            json!(round3(
                out.rss_connected.saturating_sub(out.rss_before) as f64 / conns
            )),
        ),
        (
            "rss_bytes_per_stream",
            json!(round3(
                out.rss_streams.saturating_sub(out.rss_connected) as f64 / streams
            )),
        ),
        ("server_rss_idle_bytes", json!(out.rss_streams)),
        ("peak_rss_bytes", json!(out.rss_peak)),
        ("server_cores", json!(round3(out.server_cores))),
        ("client_cores", json!(round3(out.client_cores))),
        ("deliveries", json!(delivered)),
        ("deliveries_per_sec", json!(round3(delivered as f64 / secs))),
        (
            "server_cpu_us_per_frame",
            json!(round3(out.server_cores * secs * 1e6 / delivered.max(1) as f64)),
        ),
    ];
    for (k, v) in fields {
        row.insert(k.into(), v);
    }
}

/// The row of one transport's run.
pub fn row(transport: Transport, p: &Params, out: &mut Outcome) -> Value {
    let k = &out.kinds;
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    // The events written in the window: what a parsing controller received of them.
    let pods_written = k[3].max_written_in_window;
    let nodes_written = k[4].max_written_in_window;
    let ctrl = p.controllers as f64;
    let got = k[0].written_in_window as f64
        + k[1].written_in_window as f64
        + k[3].deliveries as f64
        + k[4].deliveries as f64;
    let expected = (pods_written + nodes_written) as f64 * (1.0 + ctrl);
    let fraction = |a: f64, b: f64| {
        if b > 0.0 {
            json!(round3(a / b))
        } else {
            Value::Null
        }
    };
    let mut row = Map::new();
    row.insert("design".into(), json!(transport.name()));
    row.insert("nodes".into(), json!(p.nodes));
    row.insert(
        "pod_events_written_per_sec".into(),
        json!(round3(pods_written as f64 / secs)),
    );
    row.insert(
        "node_events_written_per_sec".into(),
        json!(round3(nodes_written as f64 / secs)),
    );
    row.insert("delivered_fraction".into(), fraction(got, expected));
    row.insert(
        "kubelet_pods_delivered".into(),
        fraction(k[0].written_in_window as f64, pods_written as f64),
    );
    row.insert(
        "kubelet_nodes_delivered".into(),
        fraction(k[1].written_in_window as f64, nodes_written as f64),
    );
    row.insert(
        "controller_pods_delivered".into(),
        fraction(k[3].deliveries as f64, pods_written as f64 * ctrl),
    );
    row.insert(
        "controller_nodes_delivered".into(),
        fraction(k[4].deliveries as f64, nodes_written as f64 * ctrl),
    );
    let failed: usize = k.iter().map(|k| k.failed).sum();
    row.insert("failed_watches".into(), json!(failed));
    let delivered = k.iter().map(|k| k.deliveries).sum();
    transport_fields(out, delivered, &mut row);
    let mut all = Vec::new();
    for (i, kind) in KINDS.iter().enumerate() {
        let lat = &mut out.kinds[i].latencies_us;
        all.extend_from_slice(lat);
        for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
            if let Some(v) = quantile(lat, q) {
                row.insert(format!("{kind}_{name}_us"), json!(v));
            }
        }
    }
    for (q, name) in [
        (0.5, "p50_latency_us"),
        (0.99, "p99_latency_us"),
        (0.999, "p999_latency_us"),
    ] {
        if let Some(v) = quantile(&mut all, q) {
            row.insert(name.into(), json!(v));
        }
    }
    row.insert("latency_samples".into(), json!(all.len()));
    Value::Object(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(nodes: usize, controllers: usize) -> Params {
        Params {
            nodes,
            controllers,
            pods_per_node: 1,
            pod_churn: 1.0,
            node_churn: 1.0,
            seconds: 1.0,
        }
    }

    #[test]
    fn a_kubelet_is_one_connection_of_ten_watches_on_http2_and_ten_connections_on_http1() {
        let h2 = plan(&params(3, 2), Transport::H2Tls);
        assert_eq!(h2.connections.len(), 3 + 2);
        assert!(h2.connections[..3].iter().all(|c| c.len() == 10));
        assert!(h2.connections[3..].iter().all(|c| c.len() == 2));
        let first = &h2.connections[1];
        assert!(first[0].path.contains("spec.nodeName%3Dnode-1&"));
        assert!(
            first[1].path.starts_with("/api/v1/nodes?") && first[1].path.contains("metadata.name%3Dnode-1&")
        );
        assert_eq!(first.iter().filter(|w| w.kind == 2).count(), 8);
        let h1 = plan(&params(3, 2), Transport::H1);
        assert_eq!(h1.connections.len(), 3 * 10 + 2 * 2);
        assert!(h1.connections.iter().all(|c| c.len() == 1));
        // Two controllers parse; with more, the rest only count.
        let many = plan(&params(1, 5), Transport::H2);
        let sampled = many.connections[1..].iter().filter(|c| c[0].sampled).count();
        assert_eq!(sampled, SAMPLED_CONTROLLERS);
    }
}
