//! kube-rs against `watchcache serve`: its watcher and reflector, as controllers use them.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::Value;
use watchcache_tests::{Backing, Server, http, request, start};

fn client(server: &Server) -> Client {
    let url = format!("http://{}", server.addr()).parse().expect("a URL");
    Client::try_from(Config::new(url)).expect("a client")
}

/// name -> resourceVersion of every pod, read from the server (a consistent list).
async fn server_state(server: &Server) -> BTreeMap<String, String> {
    let (code, body) = request(&http(), server, "GET", "/api/v1/pods", None).await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_slice(&body).expect("json");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| {
            let m = &p["metadata"];
            (
                format!(
                    "{}/{}",
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap_or("")
                ),
                m["resourceVersion"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn store_state(store: &Store<Pod>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                p.resource_version().unwrap_or_default(),
            )
        })
        .collect()
}

async fn update(server: &Server, ns: &str, name: &str, generation: usize) {
    let c = http();
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    let (code, body) = request(&c, server, "GET", &path, None).await;
    assert_eq!(code, 200);
    let mut pod: Value = serde_json::from_slice(&body).expect("json");
    pod["metadata"]["labels"]["generation"] = Value::String(generation.to_string());
    let (code, body) = request(&c, server, "PUT", &path, Some(pod)).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
}

/// Drives a reflector until its store equals the server's state (bounded), counting the
/// initial syncs (one per list, so more than one means kube-rs re-listed) and the errors it
/// yielded (kube-rs yields a 410 as an error item before re-listing). The states are compared
/// whenever the stream has been idle for a moment.
async fn sync_until_equal(
    stream: &mut (impl futures_util::Stream<Item = Result<Event<Pod>, watcher::Error>> + Unpin),
    store: &Store<Pod>,
    server: &Server,
    inits: &mut usize,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut errors = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(150), stream.next()).await {
            Ok(Some(Ok(Event::InitDone))) => {
                *inits += 1;
                continue;
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(e))) => {
                errors.push(e.to_string());
                assert!(errors.len() < 100, "kube-rs keeps failing: {errors:?}");
                continue;
            }
            Ok(None) => panic!("the watcher ended"),
            Err(_) => {}
        }
        if *inits > 0 && store_state(store) == server_state(server).await {
            return errors;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reflector never matched the server: {errors:?}"
        );
    }
}

async fn reflector_follows_the_server(cfg: watcher::Config, etcd: bool) {
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    let server = start(backing.config(50)).await;
    let api: Api<Pod> = Api::all(client(&server));
    let (store, writer) = reflector::store();
    let mut stream = watcher::watcher(api, cfg).reflect(writer).boxed();
    let mut inits = 0;
    let errors = sync_until_equal(&mut stream, &store, &server, &mut inits).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(store.state().len(), 50);
    // Changes through the API reach kube-rs through the cache.
    for i in 0..10 {
        update(&server, &format!("ns-{i}"), &format!("web-{i:06}"), i).await;
    }
    let (code, _) = request(
        &http(),
        &server,
        "DELETE",
        // Bound to a node: deleted at once only with a grace period of 0, as a kubelet deletes.
        "/api/v1/namespaces/ns-1/pods/web-000011?gracePeriodSeconds=0",
        None,
    )
    .await;
    assert_eq!(code, 200);
    let errors = sync_until_equal(&mut stream, &store, &server, &mut inits).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(store.state().len(), 49);
    assert_eq!(inits, 1, "no re-list was needed");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_default_watcher_with_paged_list_watch_and_bookmarks() {
    reflector_follows_the_server(watcher::Config::default().page_size(7), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_default_watcher_on_etcd() {
    reflector_follows_the_server(watcher::Config::default().page_size(7), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_streaming_lists_end_their_initial_sync_at_the_annotated_bookmark() {
    reflector_follows_the_server(watcher::Config::default().streaming_lists(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_streaming_lists_on_etcd() {
    reflector_follows_the_server(watcher::Config::default().streaming_lists(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_catch_up_kube_rs_relists_after_an_in_stream_410_and_converges() {
    lapped_by_a_burst(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapped_kube_rs_watcher_catches_up_from_the_store_without_a_relist() {
    lapped_by_a_burst(false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapped_kube_rs_watcher_catches_up_from_etcd_without_a_relist() {
    lapped_by_a_burst(true, true).await;
}

/// A kube-rs reflector whose client stops reading while far more writes than the window go
/// by. Without catch-up (the apiserver's behaviour), the server ends its watch with an
/// in-stream 410 and kube-rs lists again; with it, the watch reads the store's history and
/// goes on: no error, no second list.
async fn lapped_by_a_burst(etcd: bool, catch_up: bool) {
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    let mut cfg = backing.config(20);
    cfg.history = 16;
    if !catch_up {
        cfg.catch_up = None;
    }
    // The embedded store retains the burst, as etcd retains its history until compacted.
    cfg.embedded_revisions = Some(20_000);
    let server = start(cfg).await;
    let api: Api<Pod> = Api::all(client(&server));
    let (store, writer) = reflector::store();
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .reflect(writer)
        .boxed();
    let mut inits = 0;
    sync_until_equal(&mut stream, &store, &server, &mut inits).await;
    // Let its watch connect, then stop reading it: TCP backpressure stalls its server-side
    // watcher while far more events than the window (16) pass, about 4 KiB each.
    for _ in 0..5 {
        let _ = tokio::time::timeout(Duration::from_millis(100), stream.next()).await;
    }
    let expired_before = metric(&server, "watchcache_watch_expired_in_stream_total").await;
    // 6,000 updates, 20 at a time (one per pod, so each pod's updates stay in order).
    let backend = server.store();
    for round in 0..300 {
        let writes = (0..20).map(|i| {
            let key = watchcache_server::workload::pod_key(i);
            let value = watchcache_server::workload::pod(i, 1, round * 20 + i as u64 + 1).to_string();
            async move {
                backend
                    .update(&key, bytes::Bytes::from(value), None)
                    .await
                    .expect("update")
            }
        });
        futures_util::future::join_all(writes).await;
    }
    let errors = sync_until_equal(&mut stream, &store, &server, &mut inits).await;
    let expired = metric(&server, "watchcache_watch_expired_in_stream_total").await - expired_before;
    let terminated = metric(&server, "apiserver_terminated_watchers_total").await;
    if catch_up {
        // Reading again: the buffered frames, then the rest from the store's history.
        assert_eq!(
            (inits, expired, terminated),
            (1, 0, 0),
            "no 410, no relist: {errors:?}"
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert!(metric(&server, "watchcache_watch_catch_ups_total").await >= 1);
        assert!(metric(&server, "watchcache_watch_catch_up_reads_total").await >= 1);
        assert!(metric(&server, "watchcache_watch_catch_up_events_total").await > 0);
        if etcd {
            // The server's catch-ups read etcd over the history connections.
            let (_, body) = request(&http(), &server, "GET", "/metrics", None).await;
            let opened: u64 = String::from_utf8_lossy(&body)
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("watchcache_etcd_history_watches_total ")?
                        .parse::<u64>()
                        .ok()
                })
                .sum();
            assert!(opened >= 1, "no history watch opened on etcd");
        }
    } else {
        // Reading again: the buffered frames, then an ERROR 410, then kube-rs re-lists.
        assert!(
            inits >= 2,
            "kube-rs re-listed after the 410 ({inits} initial syncs)"
        );
        assert!(
            errors.iter().any(|e| e.contains("410") || e.contains("too old")),
            "{errors:?}"
        );
        assert!(expired > 0 && terminated > 0, "the server ended a lapped watcher");
    }
    server.shutdown().await.unwrap();
}

/// A pods counter of `/metrics`.
async fn metric(server: &Server, name: &str) -> u64 {
    let (_, body) = request(&http(), server, "GET", "/metrics", None).await;
    let prefix = format!("{name}{{resource=\"pods\"}}");
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// kube-rs's patch types, its finalizer() around a delete, a Lease taken and renewed with
/// optimistic concurrency (as leader election does it), and its discovery finding the
/// Lease group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_patches_runs_a_finalizer_and_holds_a_lease() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    use kube::runtime::controller::Action;
    use kube::runtime::finalizer::{Event as Finalizer, finalizer};

    let server = start(watchcache_tests::config(0)).await;
    let client = client(&server);

    // The four patch types on a pod: the strategic one merges a container by name.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}, {"name": "side", "image": "side:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.expect("created");
    let strategic = serde_json::json!({"spec": {"containers": [{"name": "side", "image": "side:2"}]}});
    let p = pods
        .patch("p", &PatchParams::default(), &Patch::Strategic(strategic))
        .await
        .expect("strategic");
    let images: Vec<String> = p
        .spec
        .unwrap()
        .containers
        .into_iter()
        .filter_map(|c| c.image)
        .collect();
    assert_eq!(images, ["app:1", "side:2"]);
    let merge = serde_json::json!({"metadata": {"labels": {"merged": "yes"}}});
    let p = pods
        .patch("p", &PatchParams::default(), &Patch::Merge(merge))
        .await
        .expect("merge");
    assert_eq!(p.labels().get("merged").map(String::as_str), Some("yes"));
    let ops: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/labels/merged", "value": "yes"},
        {"op": "add", "path": "/metadata/labels/json", "value": "yes"}
    ]))
    .unwrap();
    let p = pods
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .expect("json");
    assert_eq!(p.labels().get("json").map(String::as_str), Some("yes"));
    let applied = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"owner": "ssa"}}});
    let p = pods
        .patch("p", &PatchParams::apply("kube-rs-test"), &Patch::Apply(applied))
        .await
        .expect("apply");
    assert_eq!(p.labels().get("owner").map(String::as_str), Some("ssa"));
    assert!(
        p.managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some("kube-rs-test"))
    );

    // finalizer(): added before the first reconcile, kept through delete until cleanup ran.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "guarded"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.expect("created");
    let name = "example.com/cleanup";
    let cleaned = Arc::new(AtomicBool::new(false));
    let reconcile = |cleaned: Arc<AtomicBool>| {
        move |event: Finalizer<ConfigMap>| async move {
            if let Finalizer::Cleanup(_) = event {
                cleaned.store(true, Ordering::SeqCst);
            }
            Ok::<_, kube::Error>(Action::await_change())
        }
    };
    let latest = Arc::new(cms.get("guarded").await.unwrap());
    finalizer(&cms, name, latest, reconcile(cleaned.clone()))
        .await
        .expect("finalizer added");
    let latest = cms.get("guarded").await.unwrap();
    assert_eq!(latest.finalizers(), [name.to_owned()]);
    finalizer(&cms, name, Arc::new(latest), reconcile(cleaned.clone()))
        .await
        .expect("applied");
    cms.delete("guarded", &DeleteParams::default())
        .await
        .expect("deleted");
    let marked = cms.get("guarded").await.expect("held by its finalizer");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(!cleaned.load(Ordering::SeqCst));
    finalizer(&cms, name, Arc::new(marked), reconcile(cleaned.clone()))
        .await
        .expect("cleaned up");
    assert!(cleaned.load(Ordering::SeqCst));
    assert!(
        cms.get_opt("guarded").await.unwrap().is_none(),
        "gone once the finalizer is removed"
    );

    // A Lease: taken by a, renewed by a; b's attempt from a stale read conflicts.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let renew_time =
        |s: &str| -> MicroTime { serde_json::from_value(serde_json::json!(s)).expect("a MicroTime") };
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "controller"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}
    }))
    .unwrap();
    let mut held = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("taken");
    let stale = held.clone();
    held.spec.as_mut().unwrap().renew_time = Some(renew_time("2026-11-30T12:00:05.000000Z"));
    let renewed = leases
        .replace("controller", &PostParams::default(), &held)
        .await
        .expect("renewed");
    assert_ne!(renewed.resource_version(), stale.resource_version());
    let mut grab = stale;
    grab.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let err = leases
        .replace("controller", &PostParams::default(), &grab)
        .await
        .expect_err("stale");
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409), "{err:?}");
    assert_eq!(
        leases
            .get("controller")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );

    // Discovery finds the Lease group, and a dynamic API lists through it.
    let discovery = kube::Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let (ar, _) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "Lease")
        .expect("Lease discovered");
    let dynamic: Api<kube::api::DynamicObject> = Api::namespaced_with(client, "kube-system", &ar);
    assert_eq!(dynamic.list(&Default::default()).await.unwrap().items.len(), 1);
}
