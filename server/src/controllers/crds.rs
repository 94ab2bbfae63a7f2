//! The CustomResourceDefinition controller: serves what each CRD defines, within a
//! recheck of its creation, and takes it away once the CRD is gone.
//!
//! Every `RECHECK` it reads the CRDs from their cache:
//! - a CRD whose names no other kind of its group uses is served: one resource per served
//!   version (its own cache over `/registry/<group>/<plural>/`), in discovery and the OpenAPI
//!   documents at once; its status says `NamesAccepted` and `Established`, with the accepted
//!   names and stored versions. A CRD whose names are taken gets `NamesAccepted=False`
//!   (`NameConflict`) and is not served. A changed CRD is served anew.
//! - a CRD being deleted (a DELETE marks it under the cleanup finalizer) gets
//!   `Terminating=True`; its objects are deleted; once none is left the finalizer goes, and the
//!   CRD with it; a CRD gone from the cache is no longer served.
//!
//! Every replica runs it: its status writes are conditional and idempotent, and each replica
//! serves what the CRDs in its cache say.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tracing::warn;
use watchcache_api::crd::{self, CLEANUP_FINALIZER, Names};
use watchcache_core::{Revision, WireFormat};

use crate::handlers::app::AppState;
use crate::handlers::params::{DeleteParams, Params};
use crate::handlers::target::Target;
use crate::handlers::writes;
use crate::store::resources;
use watchcache_api::openapi::OpenApi;

/// How often the CRDs are compared with what is served.
const RECHECK: Duration = Duration::from_millis(200);
/// How long a deleted CRD whose objects are not all gone waits before they are looked at again.
const FINALIZE_BACKOFF: Duration = Duration::from_secs(1);

/// What one CRD is served as: its resources (API version, plural) and the spec they were made
/// from.
struct Serving {
    fingerprint: u64,
    /// Its uid: another CRD of the same name (deleted and made again) is served anew.
    uid: String,
    /// Whether its deletion had started when it was last looked at.
    terminating: bool,
    resources: Vec<(String, String)>,
}

/// Runs until the server stops.
pub(crate) async fn run(state: Arc<AppState>) {
    let stop = state.shutdown.token();
    let mut serving: BTreeMap<String, Serving> = BTreeMap::new();
    let mut backoff: BTreeMap<String, Instant> = BTreeMap::new();
    let mut parsed = Parsed::new();
    let mut compiled = Compiled::new();
    loop {
        reconcile(&state, &mut serving, &mut backoff, &mut parsed, &mut compiled).await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// The CRDs parsed, by name: each parsed once per version (a CRD's schema may be large, and
/// the controller looks every tick).
type Parsed = BTreeMap<String, (Revision, Arc<Value>)>;

/// The kinds each CRD serves, by name, compiled once per parsed version (its schemas' patterns
/// and rules are compiled with them).
type Compiled = BTreeMap<String, (Arc<Value>, Result<Vec<watchcache_api::KindSpec>, String>)>;

/// The CRDs as their cache has them, oldest first (the first to claim a name keeps it).
async fn crds(state: &AppState, parsed: &mut Parsed) -> Vec<Arc<Value>> {
    let Some(r) = state
        .resources
        .get("apiextensions.k8s.io/v1", "customresourcedefinitions")
    else {
        return Vec::new();
    };
    let Ok(mut opts) = Params::default().list_options(None) else {
        return Vec::new();
    };
    opts.resource_version = Some(Revision::ZERO);
    let Ok(list) = r.cache.list(&opts).await else {
        return Vec::new();
    };
    let mut seen = BTreeSet::new();
    let mut out: Vec<Arc<Value>> = list
        .items
        .filter_map(|o| {
            let name = o.key().name().to_owned();
            seen.insert(name.clone());
            if let Some((revision, value)) = parsed.get(&name)
                && *revision == o.revision()
            {
                return Some(Arc::clone(value));
            }
            let json = o.encoding(WireFormat::Json, &*r.codec).ok()?;
            let value: Arc<Value> = Arc::new(serde_json::from_slice(json.bytes()).ok()?);
            parsed.insert(name, (o.revision(), Arc::clone(&value)));
            Some(value)
        })
        .collect();
    parsed.retain(|name, _| seen.contains(name));
    out.sort_by(|a, b| {
        let key = |v: &Arc<Value>| {
            (
                v["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                v["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
            )
        };
        key(a).cmp(&key(b))
    });
    out
}

/// What a CRD is served from: its identity and its spec's generation (which every change of
/// its spec moves, and the start of its deletion too: see `reconcile`).
fn fingerprint(crd: &Value) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    crd["metadata"]["uid"].as_str().hash(&mut h);
    crd["metadata"]["generation"].as_i64().hash(&mut h);
    h.finish()
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Whether `crd` has had its names accepted as they are now: it keeps them before any CRD
/// that has not.
fn accepted_as_asked(crd: &Value, names: &Names) -> bool {
    crd["status"]["acceptedNames"] == names.accepted()
        && crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "NamesAccepted" && c["status"] == "True")
}

async fn reconcile(
    state: &AppState,
    serving: &mut BTreeMap<String, Serving>,
    backoff: &mut BTreeMap<String, Instant>,
    parsed: &mut Parsed,
    compiled: &mut Compiled,
) {
    let mut crds = crds(state, parsed).await;
    compiled.retain(|name, _| parsed.contains_key(name));
    // Who gets a name is decided from the CRDs alone, the same way on every replica: those
    // whose names were accepted first (status.acceptedNames), then the oldest.
    crds.sort_by_key(|c| match Names::of(c) {
        Ok(n) => !accepted_as_asked(c, &n),
        Err(_) => true,
    });
    let mut changed = false;
    // Written once discovery and the OpenAPI documents show the change, so that a client that
    // sees a CRD established finds it everywhere.
    let mut statuses: Vec<(&Value, Names, Option<String>)> = Vec::new();
    let names: BTreeSet<String> = crds
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    let crd_resources: BTreeSet<(String, String)> = serving
        .values()
        .flat_map(|s| s.resources.iter().cloned())
        .collect();
    // The built-in kinds: every name a CRD might take from them.
    let served = state.resources.now();
    let mut taken: Vec<Arc<watchcache_api::KindSpec>> = served
        .values()
        .filter(|r| !crd_resources.contains(&(r.info.api_version.clone(), r.info.resource.clone())))
        .map(|r| Arc::clone(&r.spec))
        .collect();
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for crd in &crds {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let Ok(names_asked) = Names::of(crd) else { continue };
        let conflict = taken.iter().find_map(|k| names_asked.conflict_with(k));
        let kinds = match compiled.get(&name) {
            Some((version, kinds)) if Arc::ptr_eq(version, crd) => kinds.clone(),
            _ => {
                let kinds = crd::kinds_of(crd).map(|(kinds, problems)| {
                    if !problems.is_empty() {
                        warn!(crd = %name, ?problems, "serving a CRD whose schema is not enforced");
                    }
                    kinds
                });
                if let Err(why) = &kinds {
                    warn!(crd = %name, %why, "not serving a CRD");
                }
                compiled.insert(name.clone(), (Arc::clone(crd), kinds.clone()));
                kinds
            }
        };
        let Ok(kinds) = kinds else { continue };
        if let Some(why) = conflict {
            statuses.push((crd, names_asked, Some(why)));
            continue;
        }
        taken.extend(kinds.iter().cloned().map(Arc::new));
        wanted.insert(name.clone());
        let terminating = !crd["metadata"]["deletionTimestamp"].is_null();
        let print = fingerprint(crd);
        let uid = crd["metadata"]["uid"].as_str().unwrap_or_default();
        // Served anew when its spec changed, not when its deletion started: the write that sets
        // its deletionTimestamp moves its generation too, and the caches it has go on serving
        // it, its watches kept, while its objects go. A spec changed after that is served anew.
        let served_anew = match serving.get_mut(&name) {
            None => true,
            Some(s) if s.uid != uid => true,
            Some(s) if s.fingerprint == print => false,
            Some(s) if terminating && !s.terminating => {
                s.fingerprint = print;
                s.terminating = true;
                false
            }
            Some(_) => true,
        };
        if served_anew {
            // New or changed: served anew (each version its own cache).
            let own: Vec<(String, String)> = serving
                .get(&name)
                .map(|s| s.resources.clone())
                .unwrap_or_default();
            let mut made = Vec::new();
            for kind in kinds {
                match resources::start(&state.store, &state.config, &state.metrics, &Arc::new(kind)) {
                    Ok(r) => made.push(Arc::new(r)),
                    Err(e) => tracing::warn!(crd = name, error = %e, "cannot serve a CRD's version"),
                }
            }
            for (api_version, plural) in &own {
                if !made
                    .iter()
                    .any(|r| &r.info.api_version == api_version && &r.info.resource == plural)
                {
                    state.resources.remove(api_version, plural);
                }
            }
            let resources = made
                .iter()
                .map(|r| (r.info.api_version.clone(), r.info.resource.clone()))
                .collect();
            for r in made {
                state.resources.add(r);
            }
            serving.insert(
                name.clone(),
                Serving {
                    fingerprint: print,
                    uid: uid.to_owned(),
                    terminating,
                    resources,
                },
            );
            changed = true;
        }
        // A CRD being deleted is still served (its objects read, updated, deleted; none made)
        // while its objects go.
        if let Some(s) = serving.get(&name) {
            for (api_version, plural) in &s.resources {
                if let Some(r) = state.resources.get(api_version, plural) {
                    r.terminating
                        .store(terminating, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        if terminating {
            let due = backoff.get(&name).is_none_or(|at| *at <= Instant::now());
            if due && !finalize(state, crd, &name).await {
                // Objects left (held by finalizers of their own): looked at again in a second.
                backoff.insert(name.clone(), Instant::now() + FINALIZE_BACKOFF);
            }
        }
        statuses.push((crd, names_asked, None));
    }
    // Gone, or no longer accepted: no longer served.
    for gone in serving
        .keys()
        .filter(|n| !names.contains(*n) || !wanted.contains(*n))
        .cloned()
        .collect::<Vec<_>>()
    {
        if let Some(s) = serving.remove(&gone) {
            for (api_version, plural) in s.resources {
                state.resources.remove(&api_version, &plural);
            }
            changed = true;
        }
    }
    backoff.retain(|n, _| names.contains(n));
    if changed {
        // Off the runtime's workers: every kind's documents are made again.
        let served = state.resources.now();
        let built = tokio::task::spawn_blocking(move || {
            OpenApi::build(
                served.values().map(|r| &*r.spec),
                crate::handlers::discovery::GIT_VERSION,
            )
        })
        .await;
        if let Ok(openapi) = built {
            state.openapi.store(Arc::new(openapi));
        }
    }
    // Idempotent: a status already so is not written (an Established a client overwrote is
    // written again).
    for (crd, names, conflict) in statuses {
        write_status(state, crd, &names, conflict.as_deref()).await;
    }
}

/// Sets a CRD's conditions: accepted and established, or (`conflict`) not accepted.
async fn write_status(state: &AppState, crd: &Value, names: &Names, conflict: Option<&str>) {
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    let key = format!("/registry/apiextensions.k8s.io/customresourcedefinitions/{name}");
    for _ in 0..5 {
        let Ok(Some((raw, revision))) = state.store.get(&key).await else {
            return;
        };
        let Ok(mut stored) = serde_json::from_slice::<Value>(&raw) else {
            return;
        };
        if stored["metadata"]["uid"] != crd["metadata"]["uid"] {
            return;
        }
        let before = stored["status"].clone();
        let mut conditions: Vec<Value> = before["conditions"].as_array().cloned().unwrap_or_default();
        let mut set = |kind: &str, status: &str, reason: &str, message: &str| {
            match conditions.iter_mut().find(|c| c["type"] == kind) {
                Some(c) if c["status"] == status && c["reason"] == reason => {}
                Some(c) => {
                    *c = json!({"type": kind, "status": status, "lastTransitionTime": now(), "reason": reason, "message": message});
                }
                None => conditions.push(
                    json!({"type": kind, "status": status, "lastTransitionTime": now(), "reason": reason, "message": message}),
                ),
            }
        };
        if !crd["metadata"]["deletionTimestamp"].is_null() {
            set(
                "Terminating",
                "True",
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress",
            );
        }
        match conflict {
            Some(why) => {
                set("NamesAccepted", "False", "NameConflict", why);
                set(
                    "Established",
                    "False",
                    "NotAccepted",
                    "not all names are accepted",
                );
            }
            None => {
                set("NamesAccepted", "True", "NoConflicts", "no conflicts found");
                set(
                    "Established",
                    "True",
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                );
            }
        }
        let mut status = before.as_object().cloned().unwrap_or_default();
        status.insert("conditions".into(), Value::Array(conditions));
        if conflict.is_none() {
            status.insert("acceptedNames".into(), names.accepted());
        }
        let mut stored_versions: Vec<Value> =
            before["storedVersions"].as_array().cloned().unwrap_or_default();
        if let Some(v) = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["storage"].as_bool() == Some(true))
            .map(|v| v["name"].clone())
            && !stored_versions.contains(&v)
        {
            stored_versions.push(v);
        }
        status.insert("storedVersions".into(), Value::Array(stored_versions));
        let status = Value::Object(status);
        if status == before {
            return;
        }
        stored["status"] = status;
        match state
            .store
            .update(&key, stored.to_string().into(), Some(revision))
            .await
        {
            Ok(_) => return,
            Err(watchcache_core::SourceError::Conflict { .. }) => continue,
            Err(e) => {
                tracing::warn!(crd = name, error = %e, "writing a CRD's status");
                return;
            }
        }
    }
}

/// A CRD being deleted: its objects go, then its cleanup finalizer (and the CRD with it).
/// Whether it is done (or has nothing to do): `false` while objects are left.
async fn finalize(state: &AppState, crd: &Value, name: &str) -> bool {
    let holds = crd["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == CLEANUP_FINALIZER));
    if !holds {
        return true;
    }
    let Ok(names) = Names::of(crd) else { return true };
    let Some(version) = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["served"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
    else {
        return true;
    };
    let api_version = format!("{}/{version}", names.group);
    let prefix = format!("/registry/{}/{}/", names.group, names.plural);
    let left = match state.resources.get(&api_version, &names.plural) {
        Some(_) => {
            // Every object, in every namespace, deleted through the write path (its own
            // finalizers are honoured; the CRD waits for them).
            let Ok(list) = watchcache_core::Source::list(&state.store, &prefix, None).await else {
                return false;
            };
            for item in &list.items {
                let Some(rest) = item.key.strip_prefix(&prefix) else {
                    continue;
                };
                let (ns, obj) = match rest.split_once('/') {
                    Some((ns, obj)) => (Some(ns.to_owned()), obj.to_owned()),
                    None => (None, rest.to_owned()),
                };
                let Ok(t) = Target::resolve(state, &api_version, &names.plural, ns, Some(obj.clone())) else {
                    continue;
                };
                let _ = writes::delete(state, &t, &obj, &DeleteParams::default()).await;
            }
            list.items.len()
        }
        None => watchcache_core::Source::list(&state.store, &prefix, None)
            .await
            .map_or(1, |l| l.items.len()),
    };
    if left > 0 {
        return false;
    }
    // Empty: the finalizer goes; with no other, the CRD is deleted.
    let key = format!("/registry/apiextensions.k8s.io/customresourcedefinitions/{name}");
    let Ok(Some((raw, revision))) = state.store.get(&key).await else {
        return true;
    };
    let Ok(mut stored) = serde_json::from_slice::<Value>(&raw) else {
        return true;
    };
    if let Some(list) = stored["metadata"]["finalizers"].as_array_mut() {
        list.retain(|f| f != CLEANUP_FINALIZER);
    }
    let done = stored["metadata"]["finalizers"]
        .as_array()
        .is_none_or(Vec::is_empty);
    let _ = if done {
        state.store.delete(&key, Some(revision)).await.map(drop)
    } else {
        state
            .store
            .update(&key, stored.to_string().into(), Some(revision))
            .await
            .map(drop)
    };
    true
}
