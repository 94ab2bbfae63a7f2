//! The operator story: N custom resources of about 2 KiB (one per tenant, as the StarRocks
//! operator keeps one per tenant cluster), each reconciled by an operator into three children
//! (a StatefulSet, a headless Service and a ConfigMap), with spec changes at a fixed rate,
//! through `watchcache serve` in this process over loopback.
//!
//! The operator is written as controllers are: informers (a LIST, then a WATCH from its
//! revision) on the custom resources and, by label, on each kind of child; a work queue that
//! holds each name once; `--concurrency` workers that server-side apply the three children
//! (owned by the custom resource) and write its status through `/status`. A changer patches
//! one custom resource's spec at `--change-rate` per second, stamping each change with a
//! version the operator copies into its StatefulSet's pod template.
//!
//! Reported per N: the heap the server holds per custom resource against the resource's JSON
//! (the process's heap, counted by the bench's allocator, before and after the resources are
//! created: the store, the cache and the history together), the watch latency of a change (the
//! PATCH sent to the operator's informer seeing it), the time from a change to the operator's
//! StatefulSet update being seen by its own informer, a full LIST of the custom resources, and
//! the initial reconcile of all of them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use watchcache_tests::{Frames, Server, config, create_namespaces, http, request, request_typed, start};

use crate::alloc::Counting;
use crate::report::quantile;

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Custom resource counts, one row each.
    pub crs: Vec<usize>,
    /// The approximate JSON size of a custom resource's spec.
    pub cr_bytes: usize,
    /// Reconciling workers.
    pub concurrency: usize,
    /// Spec changes per second.
    pub change_rate: f64,
    /// Seconds of changes.
    pub seconds: f64,
}

const NS: &str = "tenants";
const GROUP: &str = "bench.example.com";
const MANAGER: &str = "bench-operator";
const LABEL: &str = "app.kubernetes.io/managed-by";

fn crs_path() -> String {
    format!("/apis/{GROUP}/v1/namespaces/{NS}/tenants")
}

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("tenants.{GROUP}")},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"plural": "tenants", "singular": "tenant", "kind": "Tenant"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size", "image"], "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 100},
                        "image": {"type": "string"},
                        "version": {"type": "integer"},
                        "settings": {"type": "object", "additionalProperties": {"type": "string"}},
                    }},
                    "status": {"type": "object", "properties": {
                        "observedGeneration": {"type": "integer"},
                        "ready": {"type": "boolean"},
                    }},
                }}}}]},
    })
}

/// Custom resource `i`: its settings pad it to about `bytes` of spec.
fn tenant(i: usize, bytes: usize) -> Value {
    let settings: serde_json::Map<String, Value> = (0..bytes / 64)
        .map(|k| {
            (
                format!("setting-{k:03}"),
                Value::from(format!("{:0>48}", i * 7919 + k)),
            )
        })
        .collect();
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Tenant",
        "metadata": {"name": format!("tenant-{i:05}"), "labels": {"tier": "gold"}},
        "spec": {"size": 1 + i % 5, "image": "starrocks/fe:3.3", "version": 0, "settings": settings}})
}

/// What the operator knows of a custom resource, from its informer.
#[derive(Clone)]
struct Known {
    uid: String,
    generation: u64,
    spec: Value,
}

/// The operator's state: its informers' caches, its queue and its figures.
#[derive(Default)]
struct Operator {
    known: Mutex<HashMap<String, Known>>,
    reconciled: Mutex<HashMap<String, u64>>,
    queue: Mutex<(VecDeque<String>, HashSet<String>)>,
    /// Change version -> when the changer sent it.
    sent: Mutex<HashMap<u64, Instant>>,
    /// Microseconds from a change sent to the operator's informer seeing it.
    watch_us: Mutex<Vec<u64>>,
    /// Microseconds from a change sent to the operator's informer seeing its StatefulSet.
    child_us: Mutex<Vec<u64>>,
    seen_watch: Mutex<HashSet<u64>>,
    seen_child: Mutex<HashSet<u64>>,
    reconciles: AtomicU64,
    errors: AtomicU64,
    child_events: AtomicU64,
    stop: AtomicBool,
}

impl Operator {
    fn enqueue(&self, name: &str) {
        let mut q = self.queue.lock().unwrap();
        if q.1.insert(name.to_owned()) {
            q.0.push_back(name.to_owned());
        }
    }

    fn dequeue(&self) -> Option<String> {
        let mut q = self.queue.lock().unwrap();
        let name = q.0.pop_front()?;
        q.1.remove(&name);
        Some(name)
    }

    /// Records, the first time `seen` sees change `version`, how long ago it was sent.
    fn first_seen(&self, version: u64, seen: &Mutex<HashSet<u64>>, latencies: &Mutex<Vec<u64>>) {
        if version > 0
            && seen.lock().unwrap().insert(version)
            && let Some(at) = self.sent.lock().unwrap().get(&version)
        {
            latencies.lock().unwrap().push(at.elapsed().as_micros() as u64);
        }
    }

    /// An event of the custom resources' informer.
    fn on_tenant(&self, event: &Value) {
        let object = &event["object"];
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        if event["type"] == "DELETED" || name.is_empty() {
            return;
        }
        let generation = object["metadata"]["generation"].as_u64().unwrap_or(0);
        let version = object["spec"]["version"].as_u64().unwrap_or(0);
        self.first_seen(version, &self.seen_watch, &self.watch_us);
        let known = Known {
            uid: object["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
            generation,
            spec: object["spec"].clone(),
        };
        self.known.lock().unwrap().insert(name.clone(), known);
        // Only a new generation is work (controller-runtime's generation predicate): the
        // operator's own status write, which says which generation it reconciled, is not.
        let observed = object["status"]["observedGeneration"].as_u64();
        if observed != Some(generation) && self.reconciled.lock().unwrap().get(&name) != Some(&generation) {
            self.enqueue(&name);
        }
    }

    /// An event of the StatefulSets' informer.
    fn on_stateful_set(&self, event: &Value) {
        self.child_events.fetch_add(1, Ordering::Relaxed);
        let version = event["object"]["spec"]["template"]["metadata"]["annotations"]["bench/version"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        self.first_seen(version, &self.seen_child, &self.child_us);
    }
}

/// The three children of `name`, owned by it.
fn children(name: &str, k: &Known) -> [(String, Value); 3] {
    let owner = json!([{"apiVersion": format!("{GROUP}/v1"), "kind": "Tenant", "name": name,
        "uid": k.uid, "controller": true, "blockOwnerDeletion": true}]);
    let labels = json!({LABEL: MANAGER, "tenant": name});
    let version = k.spec["version"].as_u64().unwrap_or(0).to_string();
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
        "spec": {"replicas": k.spec["size"], "serviceName": name,
            "selector": {"matchLabels": {"tenant": name}},
            "template": {"metadata": {"labels": {"tenant": name}, "annotations": {"bench/version": version}},
                "spec": {"containers": [{"name": "fe", "image": k.spec["image"],
                    "ports": [{"containerPort": 9030, "name": "query"}]}]}}}});
    let svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
        "spec": {"clusterIP": "None", "selector": {"tenant": name}, "ports": [{"name": "query", "port": 9030}]}});
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-config"), "labels": labels, "ownerReferences": owner},
        "data": k.spec["settings"]});
    [
        (format!("/apis/apps/v1/namespaces/{NS}/statefulsets/{name}"), sts),
        (format!("/api/v1/namespaces/{NS}/services/{name}"), svc),
        (format!("/api/v1/namespaces/{NS}/configmaps/{name}-config"), cm),
    ]
}

/// One worker: applies the children of each queued custom resource and reports its status.
async fn worker(server: Arc<Server>, op: Arc<Operator>) {
    let c = http();
    while !op.stop.load(Ordering::Relaxed) {
        let Some(name) = op.dequeue() else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        let Some(k) = op.known.lock().unwrap().get(&name).cloned() else {
            continue;
        };
        let mut ok = true;
        for (path, body) in children(&name, &k) {
            let apply = format!("{path}?fieldManager={MANAGER}&force=true");
            let (code, _) = request_typed(
                &c,
                &server,
                "PATCH",
                &apply,
                "application/apply-patch+yaml",
                body.to_string(),
            )
            .await;
            ok &= code == 200 || code == 201;
        }
        let status = json!({"status": {"observedGeneration": k.generation, "ready": true}});
        let path = format!("{}/{name}/status", crs_path());
        let (code, _) = request_typed(
            &c,
            &server,
            "PATCH",
            &path,
            "application/merge-patch+json",
            status.to_string(),
        )
        .await;
        ok &= code == 200;
        op.reconciles.fetch_add(1, Ordering::Relaxed);
        if ok {
            op.reconciled.lock().unwrap().insert(name, k.generation);
        } else {
            op.errors.fetch_add(1, Ordering::Relaxed);
            op.enqueue(&name);
        }
    }
}

/// An informer: a LIST, then a WATCH from its revision; each object and event to `on`.
async fn informer(server: Arc<Server>, op: Arc<Operator>, path: String, on: fn(&Operator, &Value)) {
    let c = http();
    let (code, body) = request(&c, &server, "GET", &path, None).await;
    assert_eq!(code, 200, "{path}: {}", String::from_utf8_lossy(&body));
    let list: Value = serde_json::from_slice(&body).expect("a list");
    for item in list["items"].as_array().into_iter().flatten() {
        on(&op, &json!({"type": "ADDED", "object": item}));
    }
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let sep = if path.contains('?') { '&' } else { '?' };
    let watch = format!("{path}{sep}watch=true&resourceVersion={rv}&allowWatchBookmarks=true");
    let mut frames = Frames::open(&server, &watch).await;
    while !op.stop.load(Ordering::Relaxed) {
        match frames.next_within(Duration::from_millis(200)).await {
            Ok(Some(event)) if event["type"] != "BOOKMARK" => on(&op, &event),
            Ok(Some(_)) | Err(()) => {}
            Ok(None) => break,
        }
    }
}

/// One row: N custom resources, on a fresh server.
async fn one(p: &Params, n: usize, progress: &(dyn Fn(u64) + Sync)) -> Result<Value, String> {
    let server = Arc::new(start(config(0)).await);
    create_namespaces(&server, &[NS]).await;
    let c = http();
    let (code, body) = request(
        &c,
        &server,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        Some(crd()),
    )
    .await;
    if code != 201 {
        return Err(format!("the CRD: {code} {}", String::from_utf8_lossy(&body)));
    }
    let mut established = false;
    for _ in 0..200 {
        let (code, _) = request(&c, &server, "GET", &crs_path(), None).await;
        if code == 200 {
            established = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if !established {
        return Err("the CRD was never served".into());
    }

    // Create the custom resources, 32 at a time; the heap they cost the server.
    let before = Counting::live();
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut creators = Vec::new();
    for _ in 0..32 {
        let (server, next, bytes) = (server.clone(), next.clone(), p.cr_bytes);
        creators.push(tokio::spawn(async move {
            let c = http();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= n {
                    return Ok::<(), String>(());
                }
                let (code, body) = request(&c, &server, "POST", &crs_path(), Some(tenant(i, bytes))).await;
                if code != 201 {
                    return Err(format!("tenant {i}: {code} {}", String::from_utf8_lossy(&body)));
                }
            }
        }));
    }
    for creator in creators {
        creator.await.map_err(|e| e.to_string())??;
    }
    let create_secs = started.elapsed().as_secs_f64();
    // The creators' connections closed, the cache caught up with the store.
    watchcache_tests::settle(&server).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let heap_per_cr = (Counting::live() - before) as f64 / n as f64;
    progress(n as u64);

    // A full LIST of the custom resources, three times.
    let mut list_us = Vec::new();
    let mut list_bytes = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let (code, body) = request(&c, &server, "GET", &crs_path(), None).await;
        list_us.push(t.elapsed().as_micros() as u64);
        if code != 200 {
            return Err(format!("the LIST: {code}"));
        }
        list_bytes = body.len();
    }
    let json_per_cr = list_bytes as f64 / n as f64;

    // The operator: informers, then workers; the initial reconcile of every resource.
    let op = Arc::new(Operator::default());
    let selector = format!("labelSelector={LABEL}%3D{MANAGER}");
    let mut tasks = vec![tokio::spawn(informer(
        server.clone(),
        op.clone(),
        crs_path(),
        Operator::on_tenant,
    ))];
    for (path, on) in [
        (
            format!("/apis/apps/v1/namespaces/{NS}/statefulsets?{selector}"),
            Operator::on_stateful_set as fn(&Operator, &Value),
        ),
        (
            format!("/api/v1/namespaces/{NS}/services?{selector}"),
            |op: &Operator, _: &Value| {
                op.child_events.fetch_add(1, Ordering::Relaxed);
            },
        ),
        (
            format!("/api/v1/namespaces/{NS}/configmaps?{selector}"),
            |op: &Operator, _: &Value| {
                op.child_events.fetch_add(1, Ordering::Relaxed);
            },
        ),
    ] {
        tasks.push(tokio::spawn(informer(server.clone(), op.clone(), path, on)));
    }
    let reconcile_started = Instant::now();
    for _ in 0..p.concurrency {
        tasks.push(tokio::spawn(worker(server.clone(), op.clone())));
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while op.reconciled.lock().unwrap().len() < n {
        if Instant::now() > deadline {
            return Err("the initial reconcile did not finish in 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let initial_secs = reconcile_started.elapsed().as_secs_f64();

    // Spec changes at a fixed rate, each a new version.
    let changes = (p.change_rate * p.seconds).round() as u64;
    let interval = Duration::from_secs_f64(1.0 / p.change_rate);
    let churn_started = Instant::now();
    let mut pick = 0x9e37_79b9_7f4a_7c15_u64;
    for v in 1..=changes {
        let due = churn_started + interval.mul_f64(v as f64 - 1.0);
        tokio::time::sleep_until(due.into()).await;
        pick ^= pick << 13;
        pick ^= pick >> 7;
        pick ^= pick << 17;
        let name = format!("tenant-{:05}", pick % n as u64);
        let patch = json!({"spec": {"version": v, "size": 1 + v % 7}});
        op.sent.lock().unwrap().insert(v, Instant::now());
        let path = format!("{}/{name}", crs_path());
        let (code, _) = request_typed(
            &c,
            &server,
            "PATCH",
            &path,
            "application/merge-patch+json",
            patch.to_string(),
        )
        .await;
        if code != 200 {
            op.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Let the last changes through.
    let drain = Instant::now() + Duration::from_secs(10);
    while (op.seen_child.lock().unwrap().len() as u64) < changes && Instant::now() < drain {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    op.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let mut watch_us = op.watch_us.lock().unwrap().clone();
    let mut child_us = op.child_us.lock().unwrap().clone();
    list_us.sort_unstable();
    let ms = |x: Option<u64>| {
        x.map_or(Value::Null, |us| {
            json!((us as f64 / 1e3 * 1000.0).round() / 1000.0)
        })
    };
    let row = json!({
        "crs": n,
        "cr_json_bytes": json_per_cr.round(),
        "heap_per_cr_bytes": heap_per_cr.round(),
        "heap_to_json": (heap_per_cr / json_per_cr * 100.0).round() / 100.0,
        "creates_per_sec": (n as f64 / create_secs).round(),
        "initial_reconcile_s": (initial_secs * 1000.0).round() / 1000.0,
        "changes": changes,
        "changes_seen": op.seen_watch.lock().unwrap().len(),
        "children_seen": op.seen_child.lock().unwrap().len(),
        "watch_p50_ms": ms(quantile(&mut watch_us, 0.5)),
        "watch_p99_ms": ms(quantile(&mut watch_us, 0.99)),
        "change_to_child_p50_ms": ms(quantile(&mut child_us, 0.5)),
        "change_to_child_p99_ms": ms(quantile(&mut child_us, 0.99)),
        "list_ms": ms(Some(list_us[1])),
        "list_bytes": list_bytes,
        "reconciles": op.reconciles.load(Ordering::Relaxed),
        "child_events": op.child_events.load(Ordering::Relaxed),
        "errors": op.errors.load(Ordering::Relaxed),
    });
    match Arc::try_unwrap(server) {
        Ok(server) => server.shutdown().await.map_err(|e| e.to_string())?,
        Err(_) => return Err("the server is still shared".into()),
    }
    Ok(row)
}

/// Runs every N in turn, each on a fresh server; `progress` is told the resources created.
pub fn run(p: &Params, progress: &(dyn Fn(u64) + Sync)) -> Result<Vec<Value>, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    Counting::enable();
    rt.block_on(async {
        let mut rows = Vec::new();
        for &n in &p.crs {
            rows.push(one(p, n, progress).await?);
        }
        Ok(rows)
    })
}
