//! The objects clients wait for, kept as the controllers that make them in a cluster keep
//! them (no workload controller runs here; these are the ones whose absence clients notice):
//!
//! - each active namespace's `default` ServiceAccount (the serviceaccounts controller's:
//!   clients' test suites wait for it before they create pods);
//! - each active namespace's `kube-root-ca.crt` ConfigMap, the CA that signed the serving
//!   certificate, when the server serves TLS (the root-ca-cert-publisher's);
//! - the `kubernetes` Service in `default`, on the first address of the Service range, with
//!   its Endpoints and EndpointSlice naming this server (the apiserver's own).
//!
//! Every `RECHECK` it compares what the caches hold with what should be there, and writes
//! what is missing through the ordinary write path (defaulting, validation, address
//! allocation), as any client would: a create that finds the object made by another replica
//! is fine.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use watchcache_core::{Revision, WireFormat};

use crate::handlers::app::AppState;
use crate::handlers::params::{Params, WriteParams};
use crate::handlers::target::Target;
use crate::handlers::writes;

/// How often what should exist is compared with what does.
const RECHECK: Duration = Duration::from_millis(500);
/// How long an object whose create was refused is left alone before it is tried again.
const BACKOFF: Duration = Duration::from_secs(30);

/// The field manager the server's own writes are recorded under.
const MANAGER: &str = "watchcache-controllers";

/// The creates refused lately, by `plural/namespace/name`: not tried again before the time
/// kept, so that an object the store refuses (a name taken by a client, a namespace going) is
/// not written for every recheck.
#[derive(Default)]
struct Backoff(HashMap<String, Instant>);

impl Backoff {
    fn waiting(&mut self, what: &str) -> bool {
        let now = Instant::now();
        self.0.retain(|_, until| *until > now);
        self.0.contains_key(what)
    }
}

/// Runs until the server stops.
pub(crate) async fn run(state: Arc<AppState>) {
    let stop = state.shutdown.token();
    let mut backoff = Backoff::default();
    loop {
        ensure(&state, &mut backoff).await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// The objects of `plural` (core group) as the cache has them, as JSON.
async fn cached(state: &AppState, plural: &str, field_selector: Option<&str>) -> Vec<Value> {
    let Some(r) = state.resources.core(plural) else {
        return Vec::new();
    };
    let query = field_selector.map(|s| format!("fieldSelector={s}"));
    let Ok(mut opts) = Params::parse(query.as_deref()).and_then(|p| p.list_options(None)) else {
        return Vec::new();
    };
    opts.resource_version = Some(Revision::ZERO);
    let Ok(list) = r.cache.list(&opts).await else {
        return Vec::new();
    };
    list.items
        .filter_map(|o| {
            let json = o.encoding(WireFormat::Json, &*r.codec).ok()?;
            serde_json::from_slice(json.bytes()).ok()
        })
        .collect()
}

fn names_by_namespace(objects: &[Value]) -> HashSet<String> {
    objects
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str())
        .map(str::to_owned)
        .collect()
}

async fn create(
    state: &AppState,
    backoff: &mut Backoff,
    api_version: &str,
    plural: &str,
    namespace: &str,
    object: Value,
) {
    let what = format!(
        "{plural}/{namespace}/{}",
        object["metadata"]["name"].as_str().unwrap_or_default()
    );
    if backoff.waiting(&what) {
        return;
    }
    let Ok(t) = Target::resolve(state, api_version, plural, Some(namespace.to_owned()), None) else {
        return;
    };
    let p = WriteParams {
        manager: MANAGER.to_owned(),
        ..WriteParams::default()
    };
    match writes::create(state, &t, &p, object.to_string().as_bytes())
        .await
        .map(drop)
    {
        // Made, or made meanwhile by another replica.
        Ok(_) => {}
        Err(e) if e.code == 409 => {}
        Err(e) => {
            // A namespace going meanwhile is expected; anything else is worth a line.
            if e.code != 403 && e.code != 404 {
                tracing::warn!(what, error = %e.message, "creating a system object; trying again in 30 s");
            }
            backoff.0.insert(what, Instant::now() + BACKOFF);
        }
    }
}

async fn ensure(state: &AppState, backoff: &mut Backoff) {
    let active: Vec<String> = cached(state, "namespaces", None)
        .await
        .into_iter()
        .filter(|ns| ns["status"]["phase"] == "Active" && ns["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|ns| ns["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    let accounts =
        names_by_namespace(&cached(state, "serviceaccounts", Some("metadata.name%3Ddefault")).await);
    for ns in active.iter().filter(|ns| !accounts.contains(*ns)) {
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        create(state, backoff, "v1", "serviceaccounts", ns, sa).await;
    }
    if let Some(ca) = &state.root_ca {
        let maps = cached(state, "configmaps", Some("metadata.name%3Dkube-root-ca.crt")).await;
        let have = names_by_namespace(&maps);
        for ns in active.iter().filter(|ns| !have.contains(*ns)) {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "kube-root-ca.crt",
                             "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                "data": {"ca.crt": ca},
            });
            create(state, backoff, "v1", "configmaps", ns, cm).await;
        }
    }
    if active.iter().any(|ns| ns == "default") {
        kubernetes_service(state, backoff).await;
    }
}

/// The `kubernetes` Service, Endpoints and EndpointSlice in `default`, created when missing.
async fn kubernetes_service(state: &AppState, backoff: &mut Backoff) {
    let port = state.addr.port();
    let ip = if state.addr.ip().is_unspecified() {
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
    } else {
        state.addr.ip()
    };
    let family = if ip.is_ipv6() { "IPv6" } else { "IPv4" };
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    let services = cached(state, "services", Some("metadata.name%3Dkubernetes")).await;
    if !services.iter().any(|s| s["metadata"]["namespace"] == "default") {
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "labels": labels},
            "spec": {
                "clusterIP": state.config.service_ranges.ips.first().to_string(),
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
                "sessionAffinity": "None",
                "type": "ClusterIP",
            },
        });
        create(state, backoff, "v1", "services", "default", service).await;
    }
    let endpoints = cached(state, "endpoints", Some("metadata.name%3Dkubernetes")).await;
    if !endpoints.iter().any(|s| s["metadata"]["namespace"] == "default") {
        let ep = json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": ip.to_string()}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
        });
        create(state, backoff, "v1", "endpoints", "default", ep).await;
    }
    let Ok(t) = Target::resolve(
        state,
        "discovery.k8s.io/v1",
        "endpointslices",
        Some("default".into()),
        None,
    ) else {
        return;
    };
    let slice = t
        .resource
        .cache
        .get(&t.key("kubernetes"), Some(Revision::ZERO))
        .await;
    if matches!(slice, Ok((None, _))) {
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": family,
            "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        });
        create(
            state,
            backoff,
            "discovery.k8s.io/v1",
            "endpointslices",
            "default",
            slice,
        )
        .await;
    }
}
