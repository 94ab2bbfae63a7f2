//! [`RequestInfo`]: what a request asks, read from its method, path and query alone, by the
//! rules of the apiserver's `RequestInfoFactory`: the Kubernetes verb (`list` for a GET of a
//! collection, `watch` with `watch=true`, `deletecollection` for a DELETE of one, …), and for
//! paths under `/api` and `/apis` the group, version, namespace, resource, subresource and
//! name. Audit events are made of it. The reading is authorization's (`auth/request.rs`), so
//! that an audit event names what was authorized; no I/O, no state.

use std::sync::{Arc, OnceLock};

use axum::http::Method;

use crate::auth::UserInfo;

/// The parts of a request that audit looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RequestInfo {
    /// Whether the path addresses a resource (else a non-resource URL such as `/healthz`).
    pub(crate) resource_request: bool,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `deletecollection` on
    /// resources; the lower-cased HTTP method on other paths.
    pub(crate) verb: String,
    /// The API group, `""` for the core group.
    pub(crate) api_group: String,
    /// The API version.
    pub(crate) api_version: String,
    /// The namespace, or empty.
    pub(crate) namespace: String,
    /// The resource (`pods`), or empty.
    pub(crate) resource: String,
    /// The subresource (`status`, `log`), or empty.
    pub(crate) subresource: String,
    /// The object's name, or empty for a collection.
    pub(crate) name: String,
}

impl RequestInfo {
    /// Reads `method`, `path` and the raw `query` as the apiserver does, by the same reading
    /// authorization makes ([`auth::attributes`](crate::auth::attributes)). Never fails: a path
    /// authorization cannot resolve (`/api/v1/watch`) is a non-resource request here.
    pub(crate) fn new(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        match crate::auth::attributes(anonymous(), method.as_str(), path, query) {
            Ok(a) => RequestInfo {
                resource_request: a.resource_request,
                verb: a.verb,
                api_group: a.api_group,
                api_version: a.api_version,
                namespace: a.namespace,
                resource: a.resource,
                subresource: a.subresource,
                name: a.name,
            },
            Err(_) => RequestInfo {
                verb: method.as_str().to_ascii_lowercase(),
                ..RequestInfo::default()
            },
        }
    }
}

/// The user the reading is made for: it does not depend on the user.
fn anonymous() -> Arc<UserInfo> {
    static ANONYMOUS: OnceLock<Arc<UserInfo>> = OnceLock::new();
    Arc::clone(ANONYMOUS.get_or_init(|| Arc::new(UserInfo::anonymous())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, path: &str, query: &str) -> RequestInfo {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        RequestInfo::new(&method, path, (!query.is_empty()).then_some(query))
    }

    macro_rules! assert_verb {
        ($method:expr, $path:expr, $query:expr, $verb:expr) => {
            assert_eq!(
                info($method, $path, $query).verb,
                $verb,
                "{} {}?{}",
                $method,
                $path,
                $query
            );
        };
    }

    #[test]
    fn verbs_are_the_apiservers() {
        assert_verb!("GET", "/api/v1/namespaces/a/pods", "", "list");
        assert_verb!("GET", "/api/v1/pods", "limit=500", "list");
        assert_verb!(
            "GET",
            "/api/v1/namespaces/a/pods",
            "watch=true&resourceVersion=5",
            "watch"
        );
        assert_verb!("GET", "/api/v1/namespaces/a/pods", "watch=1", "watch");
        assert_verb!("GET", "/api/v1/namespaces/a/pods", "watch=false", "list");
        assert_verb!("GET", "/api/v1/watch/namespaces/a/pods", "", "watch");
        assert_verb!("GET", "/api/v1/namespaces/a/pods/p", "", "get");
        assert_verb!("HEAD", "/api/v1/namespaces/a/pods/p", "", "get");
        assert_verb!("POST", "/api/v1/namespaces/a/pods", "", "create");
        assert_verb!("PUT", "/api/v1/namespaces/a/pods/p", "", "update");
        assert_verb!("PATCH", "/api/v1/namespaces/a/pods/p", "", "patch");
        assert_verb!("DELETE", "/api/v1/namespaces/a/pods/p", "", "delete");
        assert_verb!("DELETE", "/api/v1/namespaces/a/pods", "", "deletecollection");
        assert_verb!("PUT", "/api/v1/namespaces/a/pods/p/status", "", "update");
        assert_verb!("POST", "/api/v1/namespaces/a/pods/p/exec", "command=ls", "create");
        assert_verb!("GET", "/healthz", "", "get");
        assert_verb!("POST", "/version", "", "post");
        assert_verb!("GET", "/api/v1", "", "get");
    }

    #[test]
    fn resource_paths_are_split_into_their_parts() {
        let i = info(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
            "",
        );
        assert!(i.resource_request);
        assert_eq!(
            (
                &*i.api_group,
                &*i.api_version,
                &*i.namespace,
                &*i.resource,
                &*i.name,
                &*i.subresource
            ),
            ("coordination.k8s.io", "v1", "kube-system", "leases", "l", "")
        );
        let i = info("GET", "/api/v1/namespaces/a/pods/p/log", "container=c");
        assert_eq!(
            (&*i.resource, &*i.name, &*i.subresource, &*i.verb),
            ("pods", "p", "log", "get")
        );
        // A namespace is itself in the `namespaces` resource, and so are its subresources.
        let i = info("GET", "/api/v1/namespaces/a", "");
        assert_eq!((&*i.namespace, &*i.resource, &*i.name), ("a", "namespaces", "a"));
        let i = info("PUT", "/api/v1/namespaces/a/finalize", "");
        assert_eq!(
            (&*i.resource, &*i.name, &*i.subresource),
            ("namespaces", "a", "finalize")
        );
        let i = info(
            "GET",
            "/api/v1/nodes",
            "fieldSelector=metadata.name%3Dn1&watch=true",
        );
        assert_eq!((&*i.verb, &*i.name), ("watch", "n1"));
        assert!(!info("GET", "/apis/coordination.k8s.io/v1", "").resource_request);
        assert!(!info("GET", "/openapi/v2", "").resource_request);
    }
}
