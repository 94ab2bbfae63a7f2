//! The namespace controller: empties each namespace being deleted, then deletes it.
//!
//! Every `RECHECK` it looks for namespaces marked for deletion (by a DELETE here, on another
//! replica, or before a restart) and starts one cleanup per namespace: its objects of every
//! namespaced resource are deleted (those a finalizer holds are marked and waited for), and
//! once none is left the `kubernetes` finalizer goes, and the namespace with it unless
//! another finalizer holds it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use watchcache_core::SourceError;
use watchcache_encoders::Status;

use crate::handlers::app::AppState;
use crate::handlers::params::{DeleteParams, Params};
use crate::handlers::target::Target;
use crate::handlers::writes;
use crate::handlers::writes::namespaces::key;

/// How often the controller looks for namespaces to empty, and a cleanup looks again for
/// objects still held by finalizers.
const RECHECK: Duration = Duration::from_millis(250);

/// Runs until the server stops.
pub(crate) async fn run(state: Arc<AppState>) {
    let stop = state.shutdown.token();
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        for name in terminating(&state).await {
            let fresh = running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(name.clone());
            if fresh {
                let (state, running, stop) = (state.clone(), running.clone(), stop.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = cleanup(&state, &name) => {}
                    }
                    running
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&name);
                });
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// The namespaces marked for deletion, as the cache has them.
async fn terminating(state: &AppState) -> Vec<String> {
    let Some(namespaces) = state.resources.core("namespaces") else {
        return Vec::new();
    };
    let Ok(mut opts) = Params::default().list_options(None) else {
        return Vec::new();
    };
    opts.resource_version = Some(watchcache_core::Revision::ZERO);
    let Ok(list) = namespaces.cache.list(&opts).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for ns in list.items {
        let Ok(json) = ns.encoding(watchcache_core::WireFormat::Json, &*namespaces.codec) else {
            continue;
        };
        let v: Value = serde_json::from_slice(json.bytes()).unwrap_or(Value::Null);
        if v["metadata"]
            .get("deletionTimestamp")
            .is_some_and(|d| !d.is_null())
        {
            out.push(ns.key().name().to_owned());
        }
    }
    out
}

async fn cleanup(state: &Arc<AppState>, namespace: &str) {
    loop {
        // Finalized meanwhile (through /finalize, or by another replica): nothing left to do,
        // whatever objects remain.
        if !being_deleted(state, namespace).await {
            return;
        }
        match delete_contents(state, namespace).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => tracing::warn!(namespace, error = %e.message, "deleting a namespace's objects"),
        }
        tokio::time::sleep(RECHECK).await;
    }
    // Empty: the `kubernetes` finalizer goes, and the namespace with it unless another
    // finalizer holds it.
    for _ in 0..8 {
        let Ok(Some((raw, revision))) = state.store.get(&key(namespace)).await else {
            return;
        };
        let Ok(mut ns) = serde_json::from_slice::<Value>(&raw) else {
            return;
        };
        if let Some(list) = ns["spec"]["finalizers"].as_array_mut() {
            list.retain(|f| f != "kubernetes");
        }
        let spec_done = ns["spec"]["finalizers"].as_array().is_none_or(Vec::is_empty);
        let meta_done = ns["metadata"]["finalizers"].as_array().is_none_or(Vec::is_empty);
        let written = if spec_done && meta_done {
            state
                .store
                .delete(&key(namespace), Some(revision))
                .await
                .map(|_| ())
        } else {
            state
                .store
                .update(&key(namespace), Bytes::from(ns.to_string()), Some(revision))
                .await
                .map(|_| ())
        };
        match written {
            Ok(()) => return,
            Err(SourceError::Conflict { .. }) => continue,
            Err(e) => {
                tracing::warn!(namespace, error = %e, "finishing a namespace's deletion");
                return;
            }
        }
    }
}

/// Whether `namespace` is still there, marked for deletion (a store that does not answer is
/// asked again later).
async fn being_deleted(state: &AppState, namespace: &str) -> bool {
    match state.store.get(&key(namespace)).await {
        Ok(Some((raw, _))) => serde_json::from_slice::<Value>(&raw).is_ok_and(|ns| {
            ns["metadata"]
                .get("deletionTimestamp")
                .is_some_and(|d| !d.is_null())
        }),
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Deletes every object in `namespace`, of every namespaced resource; returns how many were
/// there (objects held by finalizers stay, marked, and are counted until they go).
async fn delete_contents(state: &Arc<AppState>, namespace: &str) -> Result<usize, Status> {
    let mut found = 0;
    // A kind stored as another kind's (events.k8s.io Events) is that kind's objects: emptied
    // once, through the stored kind.
    let served = state.resources.now();
    let owned = served
        .values()
        .filter(|r| r.spec.namespaced && r.spec.conversion.is_none());
    for resource in owned {
        let opts = Params::default().list_options(Some(namespace))?;
        let list = resource
            .cache
            .list(&opts)
            .await
            .map_err(|e| crate::handlers::errors::cache(&e, &resource.info))?;
        let t = Target {
            resource: resource.clone(),
            namespace: Some(namespace.to_owned()),
            name: None,
            subresource: None,
        };
        for object in list.items {
            found += 1;
            let name = object.key().name().to_owned();
            match writes::delete(state, &t, &name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(s) if s.code == 404 => {}
                Err(s) => return Err(s),
            }
        }
    }
    Ok(found)
}
