//! Namespace lifecycle, as the apiserver keeps it:
//! - the namespaces the apiserver creates at start (`default`, `kube-system`, `kube-public`,
//!   `kube-node-lease`) exist;
//! - creating in a namespace that does not exist is 404, in one being deleted 403, including a
//!   create that raced the namespace's deletion (it confirms the namespace after its write).
//!
//! Deleting a namespace marks it `Terminating` (the write path); emptying it is the
//! [namespace controller](crate::controllers::namespace_controller)'s job.

use bytes::Bytes;
use serde_json::{Value, json};
use watchcache_core::{Revision, SourceError};
use watchcache_encoders::Status;

use crate::handlers::app::AppState;
use crate::handlers::target::Target;
use crate::store::backend::Backend;

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

/// The namespace a create found active: the one it writes into, which must still be there,
/// and still active, once the object is written ([`confirm_created`]).
pub(crate) struct Admitted {
    /// `None` for an object of a cluster-scoped resource.
    uid: Option<String>,
}

/// Whether objects may be created in `namespace`: 404 if it does not exist, 403 if it is
/// being deleted, as the apiserver's NamespaceLifecycle admission answers.
pub(crate) async fn check_creatable(state: &AppState, t: &Target, name: &str) -> Result<Admitted, Status> {
    let Some(namespace) = t.namespace.as_deref() else {
        return Ok(Admitted { uid: None });
    };
    let ns = active(state, t, namespace, name).await?;
    let pause = state.config.create_delay;
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
    Ok(Admitted {
        uid: Some(ns["metadata"]["uid"].as_str().unwrap_or_default().to_owned()),
    })
}

/// How many times a create reads its namespace again when the store does not answer, and
/// how long apart (an etcd electing a leader answers within a few seconds).
const CONFIRM_ATTEMPTS: usize = 20;
const CONFIRM_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// The check a create's write can race: the namespace's deletion may start between the check
/// and the write, and its controller may list the namespace empty before the write lands, so
/// the object would outlive its namespace. So after writing, the create reads the namespace
/// again: still the one it found, and still active, the object stands (were the deletion to
/// start now, the controller, listing after it, finds the object); otherwise the create
/// deletes what it wrote and is refused as if it had come later.
///
/// What it deletes is its own write only, at `written_at`, the revision the create made: by
/// the time it confirms, the namespace controller may have deleted the object and another
/// client made one under the name (in the namespace made again), or another write changed the
/// object (a finalizer added). Either is someone else's write, and stays; the create is still
/// refused.
pub(crate) async fn confirm_created(
    state: &AppState,
    t: &Target,
    name: &str,
    admitted: &Admitted,
    written_at: Revision,
) -> Result<(), Status> {
    let (Some(namespace), Some(uid)) = (t.namespace.as_deref(), admitted.uid.as_deref()) else {
        return Ok(());
    };
    let mut attempt = 0;
    let refusal = loop {
        match active(state, t, namespace, name).await {
            Ok(ns) if ns["metadata"]["uid"].as_str().unwrap_or_default() == uid => return Ok(()),
            // Deleted and made again: not the namespace the object was admitted to.
            Ok(_) => break Status::not_found("namespaces", namespace),
            Err(refusal) if matches!(refusal.code, 403 | 404) => break refusal,
            // The store did not answer: the object is kept (a namespace that cannot be read
            // proves nothing, and taking back a create that stands would lose it), and the
            // create is answered as a write whose outcome the store did not confirm.
            Err(unconfirmed) if attempt == CONFIRM_ATTEMPTS => return Err(unconfirmed),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(CONFIRM_RETRY).await;
            }
        }
    };
    match state.store.delete(&t.storage_key(name), Some(written_at)).await {
        // Taken back; or gone, or written since by someone else: not the create's to take.
        Ok(_) | Err(SourceError::NotFound(_) | SourceError::Conflict { .. }) => Err(refusal),
        Err(e) => Err(crate::handlers::errors::source(
            &e,
            &t.resource.info.resource,
            name,
        )),
    }
}

/// `namespace`, as stored, if it is active: else 404 if it does not exist, 403 if it is being
/// deleted (for the create of `name`).
async fn active(state: &AppState, t: &Target, namespace: &str, name: &str) -> Result<Value, Status> {
    let stored = state
        .store
        .get(&key(namespace))
        .await
        .map_err(|e| crate::handlers::errors::source(&e, "namespaces", namespace))?;
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
    Ok(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on a free loopback port, on this test's runtime and thread.
    async fn server() -> crate::Server {
        let config = crate::ServeConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..crate::ServeConfig::default()
        };
        crate::Server::start(config).await.unwrap()
    }

    fn namespace(name: &str, uid: &str) -> Bytes {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": uid}, "status": {"phase": "Active"}});
        Bytes::from(ns.to_string())
    }

    fn config_map(name: &str, marker: &str) -> Bytes {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "labels": {"by": marker}}});
        Bytes::from(cm.to_string())
    }

    /// The take-back of a create whose namespace went (or was made again) between its check and
    /// its confirm removes the create's own write, and nothing written after it: the window
    /// between the write and the confirm is opened here by writing in it directly.
    #[tokio::test]
    async fn a_create_takes_back_only_its_own_write() {
        let server = server().await;
        let state = server.state();
        let store = &state.store;
        let t = Target::resolve(state, "v1", "configmaps", Some("ns".into()), None).unwrap();
        let admitted = Admitted {
            uid: Some("first".to_owned()),
        };
        store.create(&key("ns"), namespace("ns", "first")).await.unwrap();

        // Nothing since the create's write: the namespace was made again, and the write is
        // taken back.
        let mine = store
            .create(&t.storage_key("a"), config_map("a", "me"))
            .await
            .unwrap();
        store.delete(&key("ns"), None).await.unwrap();
        store.create(&key("ns"), namespace("ns", "second")).await.unwrap();
        let refused = confirm_created(state, &t, "a", &admitted, mine)
            .await
            .unwrap_err();
        assert_eq!(refused.code, 404);
        assert!(store.get(&t.storage_key("a")).await.unwrap().is_none());

        // Another client's object made under the name in the new namespace (the namespace
        // controller deleted the create's write meanwhile): refused, and the other's object is
        // left as it is.
        let mine = store
            .create(&t.storage_key("b"), config_map("b", "me"))
            .await
            .unwrap();
        store.delete(&t.storage_key("b"), None).await.unwrap();
        let theirs = store
            .create(&t.storage_key("b"), config_map("b", "them"))
            .await
            .unwrap();
        let refused = confirm_created(state, &t, "b", &admitted, mine)
            .await
            .unwrap_err();
        assert_eq!(refused.code, 404);
        let kept = store.get(&t.storage_key("b")).await.unwrap();
        assert_eq!(kept, Some((config_map("b", "them"), theirs)));

        // The create's own object, changed by another write since (a finalizer added, say): the
        // change is not the create's to take back.
        let mine = store
            .create(&t.storage_key("c"), config_map("c", "me"))
            .await
            .unwrap();
        let changed = store
            .update(&t.storage_key("c"), config_map("c", "changed"), Some(mine))
            .await
            .unwrap();
        let refused = confirm_created(state, &t, "c", &admitted, mine)
            .await
            .unwrap_err();
        assert_eq!(refused.code, 404);
        let kept = store.get(&t.storage_key("c")).await.unwrap();
        assert_eq!(kept, Some((config_map("c", "changed"), changed)));
        server.shutdown().await.unwrap();
    }
}
