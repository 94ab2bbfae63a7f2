//! A request's [`Attributes`]: its method, path and query read as the apiserver's
//! `RequestInfoFactory` reads them, so that RBAC rules written for kube-apiserver grant here
//! what they grant there.
//!
//! The path is split on `/`. Paths under `/api/<version>/…` and `/apis/<group>/<version>/…`
//! name resources; every other path (`/healthz`, `/version`, `/api`, `/apis/<group>`,
//! `/openapi/…`, `/metrics`) is a non-resource URL whose verb is the lower-cased method. Past
//! the version: an optional `watch/` (the old watch paths), an optional `namespaces/<ns>/`,
//! then `resource[/name[/subresource]]`. `namespaces/<ns>` on its own (and with `status` or
//! `finalize` after it) is the namespace object itself, in its own namespace. A GET without a
//! name lists, or watches when the query says `watch`; a DELETE without a name deletes the
//! collection. A list or watch whose field selector requires `metadata.name=x` is for the
//! object `x`, so that rules with `resourceNames` allow it. Path segments are percent-decoded
//! after the split, as the router's path extractor decodes them, so that the attributes name
//! what the handler serves.

use std::borrow::Cow;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use watchcache_core::FieldSelector;

use super::{Attributes, UserInfo};

/// A path under an API prefix that names no resource (`/api/v1/watch`): the apiserver cannot
/// tell what it is for, and refuses it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot tell the resource and namespace from the path {0:?}")]
pub(crate) struct Unresolvable(pub(crate) String);

/// Subresources of a namespace whose path has the shape of a namespaced collection.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// The attributes of `method` on `path` with `query` (undecoded, without the `?`), by `user`.
pub(crate) fn attributes(
    user: Arc<UserInfo>,
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Result<Attributes, Unresolvable> {
    let mut a = Attributes::non_resource(user, method.to_ascii_lowercase(), path);
    let trimmed = path.trim_matches('/');
    // Each segment as the handler's path extractor sees it: percent-decoded (a segment that
    // does not decode to UTF-8 stays as it is; the router refuses it).
    let decoded: Vec<Cow<'_, str>> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed
            .split('/')
            .map(|s| percent_decode_str(s).decode_utf8().unwrap_or(Cow::Borrowed(s)))
            .collect()
    };
    let segments: Vec<&str> = decoded.iter().map(|s| &**s).collect();
    let mut rest: &[&str] = match segments.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => {
            a.api_version = (*version).to_owned();
            rest
        }
        ["apis", group, version, rest @ ..] if !rest.is_empty() => {
            a.api_group = (*group).to_owned();
            a.api_version = (*version).to_owned();
            rest
        }
        _ => return Ok(a),
    };
    a.resource_request = true;
    let by_path = rest.first() == Some(&"watch");
    if by_path {
        if rest.len() < 2 {
            return Err(Unresolvable(path.to_owned()));
        }
        a.verb = "watch".to_owned();
        rest = &rest[1..];
    } else {
        a.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_owned();
    }
    if rest[0] == "namespaces" && rest.len() > 1 {
        a.namespace = rest[1].to_owned();
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        }
    }
    a.resource = rest[0].to_owned();
    if let Some(name) = rest.get(1) {
        a.name = (*name).to_owned();
    }
    if let Some(sub) = rest.get(2) {
        a.subresource = (*sub).to_owned();
    }
    if a.name.is_empty() && a.verb == "get" {
        let (watch, name) = list_query(query);
        a.verb = if watch { "watch" } else { "list" }.to_owned();
        a.name = name.unwrap_or_default();
    }
    if a.name.is_empty() && a.verb == "delete" {
        a.verb = "deletecollection".to_owned();
    }
    Ok(a)
}

/// What a list's query says for authorization: whether it watches, and the one object a field
/// selector restricts it to.
///
/// Watching is judged as the apiserver's query decoding judges it, any `watch` value but
/// empty, `0` or `false` (the read path refuses the values it does not take, so nothing is
/// served as a watch that was authorized as a list). The name is taken only from a query with
/// exactly one `fieldSelector` that parses and requires `metadata.name` to equal a name that
/// could be a path segment: the read path filters by that same selector.
fn list_query(query: Option<&str>) -> (bool, Option<String>) {
    let mut watch = false;
    let mut selectors = Vec::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*k {
            "watch" => watch |= !(v.is_empty() || v == "0" || v.eq_ignore_ascii_case("false")),
            "fieldSelector" => selectors.push(v),
            _ => {}
        }
    }
    let name = match selectors.as_slice() {
        [one] => FieldSelector::parse(one).ok().and_then(|s| {
            s.equality("metadata.name")
                .filter(|n| is_path_segment(n))
                .map(str::to_owned)
        }),
        _ => None,
    };
    (watch, name)
}

/// Whether `name` can be a path segment, as the apiserver requires of a name taken from a
/// field selector: not empty, `.` or `..`, and without `/` or `%`.
fn is_path_segment(name: &str) -> bool {
    !matches!(name, "" | "." | "..") && !name.contains(['/', '%'])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(method, path?query, verb, resource_request, group, version, namespace, resource,
    /// subresource, name)`
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        bool,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    );

    const TABLE: &[Row] = &[
        (
            "GET",
            "/api/v1/namespaces/ns/pods",
            "list",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        ("GET", "/api/v1/pods", "list", true, "", "v1", "", "pods", "", ""),
        (
            "GET",
            "/api/v1/namespaces/ns/pods/p",
            "get",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "p",
        ),
        (
            "HEAD",
            "/api/v1/namespaces/ns/pods/p",
            "get",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "p",
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods?watch=true",
            "watch",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods?watch=1&resourceVersion=0",
            "watch",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/pods?watch=false",
            "list",
            true,
            "",
            "v1",
            "",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/pods?watch=0&watch=1",
            "watch",
            true,
            "",
            "v1",
            "",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/watch/namespaces/ns/pods",
            "watch",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/watch/namespaces/ns/pods/p",
            "watch",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "p",
        ),
        (
            "GET",
            "/api/v1/watch/pods",
            "watch",
            true,
            "",
            "v1",
            "",
            "pods",
            "",
            "",
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods",
            "create",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        (
            "PUT",
            "/api/v1/namespaces/ns/pods/p",
            "update",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "p",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/p",
            "patch",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "p",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods/p",
            "delete",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "p",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods",
            "deletecollection",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        (
            "PUT",
            "/api/v1/namespaces/ns/pods/p/status",
            "update",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "status",
            "p",
        ),
        (
            "GET",
            "/api/v1/nodes/n1/status",
            "get",
            true,
            "",
            "v1",
            "",
            "nodes",
            "status",
            "n1",
        ),
        // The namespace object is in its own namespace.
        (
            "GET",
            "/api/v1/namespaces",
            "list",
            true,
            "",
            "v1",
            "",
            "namespaces",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/namespaces/foo",
            "get",
            true,
            "",
            "v1",
            "foo",
            "namespaces",
            "",
            "foo",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/foo",
            "delete",
            true,
            "",
            "v1",
            "foo",
            "namespaces",
            "",
            "foo",
        ),
        (
            "PUT",
            "/api/v1/namespaces/foo/status",
            "update",
            true,
            "",
            "v1",
            "foo",
            "namespaces",
            "status",
            "foo",
        ),
        (
            "PUT",
            "/api/v1/namespaces/foo/finalize",
            "update",
            true,
            "",
            "v1",
            "foo",
            "namespaces",
            "finalize",
            "foo",
        ),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            "get",
            true,
            "coordination.k8s.io",
            "v1",
            "ns",
            "leases",
            "",
            "l",
        ),
        (
            "GET",
            "/apis/apps/v1/deployments",
            "list",
            true,
            "apps",
            "v1",
            "",
            "deployments",
            "",
            "",
        ),
        (
            "PUT",
            "/apis/apps/v1/namespaces/ns/deployments/d/scale",
            "update",
            true,
            "apps",
            "v1",
            "ns",
            "deployments",
            "scale",
            "d",
        ),
        (
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            "create",
            true,
            "authorization.k8s.io",
            "v1",
            "",
            "selfsubjectaccessreviews",
            "",
            "",
        ),
        // A field selector on the name is a request for that object.
        (
            "GET",
            "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp",
            "list",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "p",
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3D%3Dp,spec.nodeName%3Dn&watch=true",
            "watch",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "p",
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name!%3Dp",
            "list",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp&fieldSelector=metadata.name%3Dq",
            "list",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3D..",
            "list",
            true,
            "",
            "v1",
            "ns",
            "pods",
            "",
            "",
        ),
        // Not resources: the lower-cased method.
        ("GET", "/healthz", "get", false, "", "", "", "", "", ""),
        ("GET", "/version", "get", false, "", "", "", "", "", ""),
        ("GET", "/metrics", "get", false, "", "", "", "", "", ""),
        ("GET", "/", "get", false, "", "", "", "", "", ""),
        ("GET", "/api", "get", false, "", "", "", "", "", ""),
        ("GET", "/api/v1", "get", false, "", "", "", "", "", ""),
        ("GET", "/apis", "get", false, "", "", "", "", "", ""),
        ("GET", "/apis/apps", "get", false, "", "", "", "", "", ""),
        ("GET", "/apis/apps/v1", "get", false, "", "", "", "", "", ""),
        ("GET", "/openapi/v3/api/v1", "get", false, "", "", "", "", "", ""),
        ("POST", "/healthz", "post", false, "", "", "", "", "", ""),
        ("PROPFIND", "/api/v1/pods", "", true, "", "v1", "", "pods", "", ""),
        // Segments read as the router's path extractor reads them.
        (
            "GET",
            "/api/v1/namespaces/te%61m/pods/p%2Fq",
            "get",
            true,
            "",
            "v1",
            "team",
            "pods",
            "",
            "p/q",
        ),
    ];

    #[test]
    fn paths_read_as_the_apiservers_request_info() {
        for &(method, target, verb, resource_request, group, version, ns, resource, sub, name) in TABLE {
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (target, None),
            };
            let a = attributes(Arc::new(UserInfo::anonymous()), method, path, query)
                .unwrap_or_else(|e| panic!("{method} {target}: {e}"));
            let got = (
                a.verb.as_str(),
                a.resource_request,
                a.api_group.as_str(),
                a.api_version.as_str(),
                a.namespace.as_str(),
                a.resource.as_str(),
                a.subresource.as_str(),
                a.name.as_str(),
            );
            assert_eq!(
                got,
                (verb, resource_request, group, version, ns, resource, sub, name),
                "{method} {target}"
            );
            assert_eq!(a.path, path);
        }
    }

    #[test]
    fn a_watch_path_without_a_resource_is_refused() {
        let user = Arc::new(UserInfo::anonymous());
        assert!(attributes(user.clone(), "GET", "/api/v1/watch", None).is_err());
        assert!(attributes(user, "GET", "/apis/apps/v1/watch/", None).is_err());
    }
}
