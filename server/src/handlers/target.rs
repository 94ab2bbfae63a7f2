//! [`Target`]: what a resource request addresses, resolved from its path against the served
//! resources.

use std::sync::Arc;

use watchcache_core::ObjectKey;
use watchcache_core::source::storage_key;
use watchcache_encoders::Status;

use crate::handlers::app::AppState;
use crate::store::resources::Resource;

/// A resource, and within it a namespace and an object name where the path gives them.
pub(crate) struct Target {
    pub(crate) resource: Arc<Resource>,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    /// `status` for `…/<name>/status` (and `scale`, `finalize`); `None` for the object itself.
    pub(crate) subresource: Option<Subresource>,
}

/// The subresources served.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Subresource {
    /// `/status`: writes change only the status (pods, nodes and namespaces).
    Status,
    /// `/finalize`: a namespace's update that may change its `spec.finalizers` (PUT only).
    Finalize,
    /// `/scale`: an `autoscaling/v1` Scale over the object's replica count.
    Scale,
    /// A pod's `/eviction` (POST only).
    Eviction,
    /// A pod's `/ephemeralcontainers`: writes change only `spec.ephemeralContainers`.
    EphemeralContainers,
}

impl Subresource {
    /// Whether the subresource serves `method`.
    pub(crate) fn serves(self, method: &axum::http::Method) -> bool {
        use axum::http::Method;
        match self {
            Subresource::Eviction => *method == Method::POST,
            Subresource::Status | Subresource::Scale | Subresource::EphemeralContainers => {
                matches!(*method, Method::GET | Method::PUT | Method::PATCH)
            }
            Subresource::Finalize => *method == Method::PUT,
        }
    }

    /// Its name in a path and in `managedFields`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Finalize => "finalize",
            Subresource::Scale => "scale",
            Subresource::Eviction => "eviction",
            Subresource::EphemeralContainers => "ephemeralcontainers",
        }
    }
}

/// The answer to a subresource only a kubelet serves (a pod's log, exec, attach and
/// port-forward, and their websocket and SPDY upgrades): 400 BadRequest, as the apiserver
/// answers for a pod it cannot reach a kubelet for, whose message kubectl prints as it is
/// (`Error from server (BadRequest): …`, or `unable to upgrade connection: …` for exec).
fn no_kubelet(subresource: &str, namespace: Option<&str>, name: Option<&str>) -> Status {
    let pod = match (namespace, name) {
        (Some(ns), Some(name)) => format!("pod {ns}/{name}"),
        (None, Some(name)) => format!("pod {name}"),
        _ => "a pod".to_owned(),
    };
    Status::bad_request(format!(
        "pods/{subresource} is served by the kubelet of the pod's node, and this server (watchcache) runs no kubelets: \
         the containers of {pod} cannot be reached"
    ))
}

impl Target {
    /// Resolves `resource` of the group-version `api_version` (`v1`, `coordination.k8s.io/v1`),
    /// and a namespace for namespaced resources only; unknown ones are 404.
    pub(crate) fn resolve(
        state: &AppState,
        api_version: &str,
        resource: &str,
        namespace: Option<String>,
        name: Option<String>,
    ) -> Result<Target, Status> {
        let Some(r) = state.resources.get(api_version, resource) else {
            return Err(Status::not_found(resource, ""));
        };
        if namespace.is_some() && !r.spec.namespaced {
            return Err(Status::not_found(resource, ""));
        }
        Ok(Target {
            resource: r,
            namespace,
            name,
            subresource: None,
        })
    }

    /// The target with `subresource` of the named object: 404 for one the resource lacks.
    pub(crate) fn with_subresource(mut self, subresource: &str) -> Result<Target, Status> {
        match subresource {
            "status" if self.resource.spec.subresources.status && self.name.is_some() => {
                self.subresource = Some(Subresource::Status);
                Ok(self)
            }
            "eviction" if self.resource.spec.subresources.eviction && self.name.is_some() => {
                self.subresource = Some(Subresource::Eviction);
                Ok(self)
            }
            "ephemeralcontainers"
                if self.resource.spec.subresources.ephemeral_containers && self.name.is_some() =>
            {
                self.subresource = Some(Subresource::EphemeralContainers);
                Ok(self)
            }
            "scale" if self.resource.spec.subresources.scale.is_some() && self.name.is_some() => {
                self.subresource = Some(Subresource::Scale);
                Ok(self)
            }
            "finalize" if self.resource.spec.subresources.finalize && self.name.is_some() => {
                self.subresource = Some(Subresource::Finalize);
                Ok(self)
            }
            "log" | "exec" | "attach" | "portforward" if self.resource.spec.subresources.kubelet => Err(
                no_kubelet(subresource, self.namespace.as_deref(), self.name.as_deref()),
            ),
            _ => Err(Status::not_found(
                &format!("{}/{subresource}", self.resource.info.resource),
                "",
            )),
        }
    }

    /// The key of object `name` in the target's namespace.
    pub(crate) fn key(&self, name: &str) -> ObjectKey {
        ObjectKey::new(self.namespace.clone().unwrap_or_default(), name)
    }

    /// The storage key of object `name` in the target's namespace.
    pub(crate) fn storage_key(&self, name: &str) -> String {
        storage_key(&self.resource.prefix, &self.key(name))
    }
}
