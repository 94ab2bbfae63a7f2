//! [`RequestInfo`]: what a request asks, read from its method, path and query alone, by the
//! rules of the apiserver's `RequestInfoFactory`: the Kubernetes verb (`list` for a GET of a
//! collection, `watch` with `watch=true`, `deletecollection` for a DELETE of one, …), and for
//! paths under `/api` and `/apis` the group, version, namespace, resource, subresource and
//! name. Audit events and authorization attributes are made of it; no I/O, no state.

use axum::http::Method;

/// The parts of a request that audit and authorization look at.
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

/// `strconv.ParseBool`'s true values, which the apiserver's `watch` parameter takes.
fn truthy(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

impl RequestInfo {
    /// Reads `method`, `path` and the raw `query` as the apiserver does. Never fails: a path
    /// that is not a resource path is a non-resource request.
    pub(crate) fn new(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let lower = method.as_str().to_ascii_lowercase();
        let non_resource = || RequestInfo {
            verb: lower.clone(),
            ..RequestInfo::default()
        };
        let mut parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let mut info = RequestInfo {
            resource_request: true,
            ..RequestInfo::default()
        };
        match parts.first() {
            Some(&"api") if parts.len() >= 2 => {
                info.api_version = parts[1].to_owned();
                parts.drain(..2);
            }
            Some(&"apis") if parts.len() >= 3 => {
                info.api_group = parts[1].to_owned();
                info.api_version = parts[2].to_owned();
                parts.drain(..3);
            }
            _ => return non_resource(),
        }
        // `/api/v1` itself and `/apis/<group>/<version>` are discovery: non-resource.
        if parts.is_empty() || parts == [""] {
            return non_resource();
        }
        info.verb = match *method {
            Method::POST => "create",
            Method::GET | Method::HEAD => "get",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => lower.as_str(),
        }
        .to_owned();
        // The deprecated `/watch/` path prefix.
        if parts[0] == "watch" {
            parts.remove(0);
            info.verb = "watch".to_owned();
        }
        if parts.first() == Some(&"namespaces") && parts.len() > 1 {
            info.namespace = parts[1].to_owned();
            // `namespaces/<name>/status` and `/finalize` are the namespace's own subresources.
            if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
                parts.drain(..2);
            }
        }
        info.resource = parts.first().map(|s| (*s).to_owned()).unwrap_or_default();
        info.name = parts.get(1).map(|s| (*s).to_owned()).unwrap_or_default();
        info.subresource = parts.get(2).map(|s| (*s).to_owned()).unwrap_or_default();
        let params = || form_urlencoded::parse(query.unwrap_or_default().as_bytes());
        if info.name.is_empty() && info.verb == "get" {
            let watch = params().any(|(k, v)| k == "watch" && truthy(&v));
            info.verb = if watch { "watch" } else { "list" }.to_owned();
        }
        // A list or watch of one object by `metadata.name` is about that object.
        if matches!(info.verb.as_str(), "list" | "watch") && info.name.is_empty() {
            let by_name = params()
                .filter(|(k, _)| k == "fieldSelector")
                .flat_map(|(_, v)| {
                    v.split(',')
                        .filter_map(|term| term.strip_prefix("metadata.name="))
                        .map(|n| n.trim_start_matches('=').to_owned())
                        .collect::<Vec<_>>()
                })
                .next();
            if let Some(name) = by_name {
                info.name = name;
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".to_owned();
        }
        info
    }
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
