//! Services get their addresses as the apiserver gives them: a free cluster IP from
//! `--service-cluster-ip-range` (or the one asked for, once), node ports from
//! `--service-node-port-range`, kept across updates, released on delete, and never the same
//! one twice across replicas sharing a store. And the objects clients wait for are there: the
//! `kubernetes` Service with its endpoints, and each namespace's `default` ServiceAccount.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};
use watchcache_core::MemorySource;
use watchcache_server::Backend;
use watchcache_server::config::{IpRange, ServiceRanges};
use watchcache_tests::{Server, config, create_namespaces, http, request, request_typed, start_ready};

const NS: &str = "svc";

fn ranges(cidr: &str, ports: (u16, u16)) -> ServiceRanges {
    ServiceRanges {
        ips: IpRange::parse(cidr).unwrap(),
        node_ports: ports,
        repair_every: Duration::from_millis(100),
    }
}

async fn serve(store: &MemorySource, ranges: ServiceRanges) -> Server {
    let mut c = config(0);
    c.service_ranges = ranges;
    let server = Server::start_with(c, Backend::Memory(store.clone()))
        .await
        .unwrap();
    start_ready(server).await
}

async fn create(server: &Server, body: Value) -> (u16, Value) {
    let (code, out) = request(
        &http(),
        server,
        "POST",
        &format!("/api/v1/namespaces/{NS}/services"),
        Some(body),
    )
    .await;
    (code, serde_json::from_slice(&out).unwrap())
}

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

/// Waits (bounded) for `path` to answer 200.
async fn eventually(server: &Server, path: &str) -> Value {
    for _ in 0..100 {
        let (code, body) = request(&http(), server, "GET", path, None).await;
        if code == 200 {
            return serde_json::from_slice(&body).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{path} never appeared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ips_and_node_ports_are_allocated_kept_and_released() {
    let store = MemorySource::new();
    let server = serve(&store, ranges("10.96.0.0/28", (30000, 30009))).await;
    create_namespaces(&server, &[NS]).await;

    // The apiserver's own Service, on the range's first address, with its endpoints.
    let k = eventually(&server, "/api/v1/namespaces/default/services/kubernetes").await;
    assert_eq!(k["spec"]["clusterIP"], "10.96.0.1", "{k}");
    let slice = eventually(
        &server,
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes",
    )
    .await;
    assert_eq!(slice["ports"][0]["port"], server.addr().port(), "{slice}");
    eventually(&server, "/api/v1/namespaces/default/endpoints/kubernetes").await;
    eventually(
        &server,
        &format!("/api/v1/namespaces/{NS}/serviceaccounts/default"),
    )
    .await;

    // A ClusterIP Service gets a free address of the range, never the first.
    let (code, a) = create(&server, service("a", json!({"ports": [{"port": 80}]}))).await;
    assert_eq!(code, 201, "{a}");
    let ip_a = a["spec"]["clusterIP"].as_str().unwrap().to_owned();
    assert!(ip_a.starts_with("10.96.0.") && ip_a != "10.96.0.1", "{ip_a}");
    assert_eq!(a["spec"]["clusterIPs"], json!([ip_a]));
    assert_eq!(a["spec"]["ipFamilies"], json!(["IPv4"]));

    // One asked for and taken is refused, naming it.
    let (code, taken) = create(
        &server,
        service("b", json!({"clusterIP": ip_a, "ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!(code, 422, "{taken}");
    assert!(
        taken["message"]
            .as_str()
            .unwrap()
            .contains("provided IP is already allocated"),
        "{taken}"
    );
    // Out of the range, too.
    let (code, out) = create(
        &server,
        service("b", json!({"clusterIP": "10.1.0.5", "ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("not in the valid range"),
        "{out}"
    );

    // A NodePort Service gets a node port per port; one asked for twice is refused.
    let (code, n) = create(
        &server,
        service("n", json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30005}, {"name": "b", "port": 81}]})),
    )
    .await;
    assert_eq!(code, 201, "{n}");
    assert_eq!(n["spec"]["ports"][0]["nodePort"], 30005);
    let other = n["spec"]["ports"][1]["nodePort"].as_i64().unwrap();
    assert!((30000..=30009).contains(&other) && other != 30005, "{other}");
    let (code, out) = create(
        &server,
        service(
            "m",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30005}]}),
        ),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("provided port is already allocated"),
        "{out}"
    );

    // A dry run holds nothing (of an address no Service has).
    let held = [a["spec"]["clusterIP"].clone(), n["spec"]["clusterIP"].clone()];
    let free = (2..15)
        .map(|i| format!("10.96.0.{i}"))
        .find(|ip| !held.contains(&json!(ip)))
        .unwrap();
    let (code, _) = request(
        &http(),
        &server,
        "POST",
        &format!("/api/v1/namespaces/{NS}/services?dryRun=All"),
        Some(service("d", json!({"clusterIP": free, "ports": [{"port": 80}]}))),
    )
    .await;
    assert_eq!(code, 201);

    // An update that leaves the addresses out keeps them; one that changes the IP is refused.
    let path = format!("/api/v1/namespaces/{NS}/services/n");
    let put = service(
        "n",
        json!({"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}),
    );
    let (code, kept) = request(&http(), &server, "PUT", &path, Some(put)).await;
    let kept: Value = serde_json::from_slice(&kept).unwrap();
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["spec"]["clusterIP"], n["spec"]["clusterIP"]);
    assert_eq!(kept["spec"]["ports"], n["spec"]["ports"]);
    let (code, out) = request_typed(
        &http(),
        &server,
        "PATCH",
        &path,
        "application/merge-patch+json",
        json!({"spec": {"clusterIP": if n["spec"]["clusterIP"] == "10.96.0.2" { "10.96.0.3" } else { "10.96.0.2" }}})
            .to_string(),
    )
    .await;
    assert_eq!(code, 422, "{out}");

    // Deleted, its addresses are free again at once.
    let (code, _) = request(&http(), &server, "DELETE", &path, None).await;
    assert_eq!(code, 200);
    let reuse = service(
        "r",
        json!({"type": "NodePort", "clusterIP": n["spec"]["clusterIP"], "ports": [{"port": 80, "nodePort": 30005}]}),
    );
    let (code, out) = create(&server, reuse).await;
    assert_eq!(code, 201, "{out}");
    let (code, out) = create(
        &server,
        service("d", json!({"clusterIP": free, "ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!(code, 201, "the dry run held nothing: {out}");

    // A claim no Service holds (a write that stopped half way, on a replica that died) is
    // released by the repair loop; the held ones stay.
    let orphan = "/registry/servicenodeports/31999";
    store.create(orphan, bytes::Bytes::from_static(b"{}")).unwrap();
    for _ in 0..100 {
        if store.get(orphan).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(store.get(orphan).is_none(), "the orphaned claim is released");
    assert!(
        store.get(&format!("/registry/ipaddresses/{ip_a}")).is_some(),
        "a held claim stays"
    );

    // A node port on a type that has none is refused; a node port is kept when its port
    // changes, and released once the Service no longer uses one.
    let (code, out) = create(
        &server,
        service("c", json!({"ports": [{"port": 80, "nodePort": 30007}]})),
    )
    .await;
    assert_eq!(code, 422, "{out}");
    let (code, np) = create(
        &server,
        service("np", json!({"type": "NodePort", "ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!(code, 201, "{np}");
    let held_port = np["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    let path = format!("/api/v1/namespaces/{NS}/services/np");
    let moved = service(
        "np",
        json!({"type": "NodePort", "ports": [{"port": 81, "nodePort": held_port}]}),
    );
    let (code, out) = request(&http(), &server, "PUT", &path, Some(moved)).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
    let back = service("np", json!({"type": "ClusterIP", "ports": [{"port": 81}]}));
    let (code, out) = request(&http(), &server, "PUT", &path, Some(back)).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
    let (code, out) = create(
        &server,
        service(
            "np2",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": held_port}]}),
        ),
    )
    .await;
    assert_eq!(code, 201, "the node port is free once no longer used: {out}");
    // A Service stored without its claims (restored from a backup) has them claimed for it
    // by the repair loop: its address is not handed out again.
    let (_, listed) = request(&http(), &server, "GET", "/api/v1/services", None).await;
    let listed: Value = serde_json::from_slice(&listed).unwrap();
    let used: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["spec"]["clusterIP"].as_str())
        .collect();
    let free = (2..15)
        .map(|i| format!("10.96.0.{i}"))
        .find(|ip| !used.contains(&ip.as_str()))
        .unwrap();
    let restored = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "restored", "namespace": NS, "uid": "restored-uid"},
        "spec": {"type": "ClusterIP", "clusterIP": free, "clusterIPs": [free], "ports": [{"port": 80}]}});
    store
        .create(
            &format!("/registry/services/specs/{NS}/restored"),
            bytes::Bytes::from(restored.to_string()),
        )
        .unwrap();
    for _ in 0..100 {
        if store.get(&format!("/registry/ipaddresses/{free}")).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, out) = create(
        &server,
        service("thief", json!({"clusterIP": free, "ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!(code, 422, "a restored Service's address is its own: {out}");

    // A headless Service gets none.
    let (code, h) = create(
        &server,
        service("h", json!({"clusterIP": "None", "ports": [{"port": 80}]})),
    )
    .await;
    assert_eq!((code, &h["spec"]["clusterIPs"]), (201, &json!(["None"])), "{h}");

    // The range runs out (a /28: 13 addresses to hand out, 1 the kubernetes Service's).
    let mut codes = Vec::new();
    for i in 0..14 {
        let (code, _) = create(
            &server,
            service(&format!("x{i}"), json!({"ports": [{"port": 80}]})),
        )
        .await;
        codes.push(code);
    }
    assert!(codes.contains(&500), "{codes:?}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_one_store_never_hand_out_an_address_twice() {
    let store = MemorySource::new();
    let range = ranges("10.96.0.0/26", (30000, 30099));
    let (a, b) = (serve(&store, range.clone()).await, serve(&store, range).await);
    create_namespaces(&a, &[NS]).await;
    let mut writes = Vec::new();
    for i in 0..40 {
        let server = if i % 2 == 0 { &a } else { &b };
        let body = service(
            &format!("s{i}"),
            json!({"type": "NodePort", "ports": [{"port": 80}]}),
        );
        writes.push(create(server, body));
    }
    let created = futures_util::future::join_all(writes).await;
    let mut ips = HashSet::new();
    let mut ports = HashSet::new();
    for (code, s) in &created {
        assert_eq!(*code, 201, "{s}");
        assert!(
            ips.insert(s["spec"]["clusterIP"].as_str().unwrap().to_owned()),
            "an IP twice: {s}"
        );
        assert!(
            ports.insert(s["spec"]["ports"][0]["nodePort"].as_i64().unwrap()),
            "a port twice: {s}"
        );
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// CoreDNS's Service, server-side applied twice over HTTP: UDP and TCP on port 53 stay two
/// ports, owned as `k:{"port":53,"protocol":…}` each, as structured-merge-diff keys them (on the
/// port alone, the second apply made both one TCP port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_applied_again_keeps_udp_and_tcp_on_one_port() {
    let store = MemorySource::new();
    let server = serve(&store, ranges("10.96.0.0/28", (30000, 30009))).await;
    create_namespaces(&server, &[NS]).await;
    let ports = json!([{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                       {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]);
    let body = service(
        "kube-dns",
        json!({"selector": {"k8s-app": "kube-dns"}, "ports": ports}),
    );
    let path = format!("/api/v1/namespaces/{NS}/services/kube-dns?fieldManager=kubectl");
    let mut got = Value::Null;
    for expected in [201, 200] {
        let (code, out) = request_typed(
            &http(),
            &server,
            "PATCH",
            &path,
            "application/apply-patch+yaml",
            body.to_string(),
        )
        .await;
        assert_eq!(code, expected, "{out}");
        got = out;
    }
    assert_eq!(got["spec"]["ports"], ports, "{got}");
    let owned = &got["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:ports"];
    for protocol in ["UDP", "TCP"] {
        let key = format!(r#"k:{{"port":53,"protocol":"{protocol}"}}"#);
        assert!(owned.get(&key).is_some(), "{key} in {owned}");
    }
    server.shutdown().await.unwrap();
}
