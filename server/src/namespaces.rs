//! Namespace lifecycle, as the apiserver keeps it:
//! - the namespaces the apiserver creates at start (`default`, `kube-system`, `kube-public`,
//!   `kube-node-lease`) exist;
//! - creating in a namespace that does not exist is 404, in one being deleted 403.
//!
//! Deleting a namespace marks it `Terminating` (the write path); emptying it is the
//! [namespace controller](crate::namespace_controller)'s job.

use bytes::Bytes;
use serde_json::{Value, json};
use watchcache_core::SourceError;
use watchcache_encoders::Status;

use crate::app::AppState;
use crate::backend::Backend;
use crate::target::Target;

/// The namespaces the apiserver makes at start.
const SYSTEM: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The storage key of namespace `name`.
pub(crate) fn key(name: &str) -> String {
    format!("/registry/namespaces/{name}")
}

/// Creates the system namespaces that do not exist yet.
pub(crate) async fn ensure_system(store: &Backend) {
    for name in SYSTEM {
        let ns = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": uuid::Uuid::new_v4().to_string(),
                         "creationTimestamp": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                         "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        match store.create(&key(name), Bytes::from(ns.to_string())).await {
            Ok(_) | Err(SourceError::AlreadyExists(_)) => {}
            Err(e) => tracing::warn!(namespace = name, error = %e, "cannot create a system namespace"),
        }
    }
}

/// Whether objects may be created in `namespace`: 404 if it does not exist, 403 if it is
/// being deleted, as the apiserver's NamespaceLifecycle admission answers.
pub(crate) async fn check_creatable(state: &AppState, t: &Target, name: &str) -> Result<(), Status> {
    let Some(namespace) = t.namespace.as_deref() else {
        return Ok(());
    };
    let stored = state
        .store
        .get(&key(namespace))
        .await
        .map_err(|e| crate::errors::source(&e, "namespaces", namespace))?;
    let Some((raw, _)) = stored else {
        return Err(Status::not_found("namespaces", namespace));
    };
    let ns: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let terminating = ns["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|d| !d.is_null())
        || ns["status"]["phase"] == "Terminating";
    if terminating {
        let message =
            format!("unable to create new content in namespace {namespace} because it is being terminated");
        let mut s = Status::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {message}", t.resource.info.resource),
        );
        s.details = Some(json!({
            "name": name,
            "kind": t.resource.info.resource,
            "causes": [{"reason": "NamespaceTerminating", "message": message, "field": "metadata.namespace"}],
        }));
        return Err(s);
    }
    Ok(())
}
