//! Discovery: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/<group>` and
//! `/apis/<group>/<version>`, and aggregated discovery (`apidiscovery.k8s.io` v2 and v2beta1:
//! every group, version and resource in one answer from `/api` and `/apis`, which kubectl
//! and client-go ask for first).
//!
//! Besides the resources the table serves, the group `authorization.k8s.io/v1` lists the two
//! self-checks (create only), which are answered by the authorizer and stored nowhere.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::store::resources::Resource;

/// The Kubernetes version this server speaks, as `/version` and the OpenAPI documents give it.
pub(crate) const GIT_VERSION: &str = concat!("v1.32.0-watchcache.", env!("CARGO_PKG_VERSION"));

/// The commit this build was made from (`git rev-parse HEAD`), or `unknown` (build.rs).
const GIT_COMMIT: &str = env!("WATCHCACHE_GIT_COMMIT");
/// `SOURCE_DATE_EPOCH`, else the commit's date, as RFC 3339 in UTC; or `unknown` (build.rs).
const BUILD_DATE: &str = env!("WATCHCACHE_BUILD_DATE");

/// Every verb of a resource served whole (the bootstrap policy's read-write roles grant them).
pub(crate) const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": GIT_COMMIT,
        "gitTreeState": "clean",
        "buildDate": BUILD_DATE,
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

pub(crate) fn api(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// The self-checks of `authorization.k8s.io/v1`: `(resource, kind)`.
const REVIEWS: &[(&str, &str)] = &[
    ("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
    ("selfsubjectrulesreviews", "SelfSubjectRulesReview"),
];
const REVIEW_GROUP: &str = "authorization.k8s.io";
const REVIEW_VERSION: &str = "v1";

/// `(group, version)` of a resource; the core group is `""`.
fn group_version(r: &Resource) -> (&str, &str) {
    match r.info.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", r.info.api_version.as_str()),
    }
}

/// The named groups served, each with its versions.
fn groups<'a>(resources: impl Iterator<Item = &'a Resource>) -> BTreeMap<&'a str, Vec<&'a str>> {
    let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in resources {
        let (g, v) = group_version(r);
        if !g.is_empty() {
            let versions = out.entry(g).or_default();
            if !versions.contains(&v) {
                versions.push(v);
            }
        }
    }
    out.entry(REVIEW_GROUP).or_default().push(REVIEW_VERSION);
    out
}

fn group_json(name: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": versions, "preferredVersion": versions[0]})
}

/// `/apis`: the named groups.
pub(crate) fn apis<'a>(resources: impl Iterator<Item = &'a Resource>) -> Value {
    let groups: Vec<Value> = groups(resources)
        .iter()
        .map(|(name, versions)| group_json(name, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if served.
pub(crate) fn api_group<'a>(resources: impl Iterator<Item = &'a Resource>, group: &str) -> Option<Value> {
    let groups = groups(resources);
    let versions = groups.get(group)?;
    let mut out = group_json(group, versions);
    out["kind"] = json!("APIGroup");
    out["apiVersion"] = json!("v1");
    Some(out)
}

/// The `APIResourceList` of group-version `api_version` (`v1`, `coordination.k8s.io/v1`),
/// if it serves anything.
pub(crate) fn resource_list<'a>(
    resources: impl Iterator<Item = &'a Resource>,
    api_version: &str,
) -> Option<Value> {
    let mut list = Vec::new();
    if api_version == crate::auth::REVIEW_GROUP_VERSION {
        for (name, kind) in REVIEWS {
            list.push(json!({"name": name, "singularName": "", "namespaced": false, "kind": kind, "verbs": ["create"]}));
        }
    }
    for r in resources.filter(|r| r.info.api_version == api_version) {
        list.push(json!({
            "name": r.info.resource,
            "singularName": r.spec.singular,
            "namespaced": r.spec.namespaced,
            "kind": r.info.kind,
            "verbs": VERBS,
            "shortNames": r.spec.short_names,
            "categories": r.spec.categories,
        }));
        if r.spec.subresources.status {
            list.push(json!({
                "name": format!("{}/status", r.info.resource),
                "singularName": "",
                "namespaced": r.spec.namespaced,
                "kind": r.info.kind,
                "verbs": STATUS_VERBS,
            }));
        }
        if r.spec.subresources.eviction {
            list.push(json!({
                "name": format!("{}/eviction", r.info.resource),
                "singularName": "",
                "namespaced": r.spec.namespaced,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }));
        }
        if r.spec.subresources.ephemeral_containers {
            list.push(json!({
                "name": format!("{}/ephemeralcontainers", r.info.resource),
                "singularName": "",
                "namespaced": r.spec.namespaced,
                "kind": r.info.kind,
                "verbs": STATUS_VERBS,
            }));
        }
        if r.spec.subresources.scale.is_some() {
            list.push(json!({
                "name": format!("{}/scale", r.info.resource),
                "singularName": "",
                "namespaced": r.spec.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": STATUS_VERBS,
            }));
        }
        if r.spec.subresources.finalize {
            list.push(json!({
                "name": format!("{}/finalize", r.info.resource),
                "singularName": "",
                "namespaced": r.spec.namespaced,
                "kind": r.info.kind,
                "verbs": ["update"],
            }));
        }
    }
    (!list.is_empty())
        .then(|| json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version, "resources": list}))
}

/// Which aggregated discovery version an Accept header asks for before plain JSON, if any.
pub(crate) fn aggregated_version(accept: Option<&str>) -> Option<&'static str> {
    for range in crate::handlers::media::ranges(accept)
        .iter()
        .filter(|r| r.is_json())
    {
        match (range.param("as"), range.param("g"), range.param("v")) {
            (None, _, _) => return None,
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => return Some("v2"),
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2beta1")) => {
                return Some("v2beta1");
            }
            _ => {}
        }
    }
    None
}

/// The Content-Type of an aggregated discovery answer.
pub(crate) fn aggregated_content_type(version: &str) -> &'static str {
    match version {
        "v2beta1" => "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        _ => "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    }
}

/// The aggregated discovery document of `/api` (`core`: the core group) or `/apis` (the
/// named groups).
pub(crate) fn aggregated<'a>(
    resources: impl Iterator<Item = &'a Resource>,
    core: bool,
    version: &str,
) -> Value {
    // group → version → resources
    let mut tree: BTreeMap<&str, BTreeMap<&str, Vec<Value>>> = BTreeMap::new();
    for r in resources {
        let (g, v) = group_version(r);
        if g.is_empty() != core {
            continue;
        }
        let kind = json!({"group": g, "version": v, "kind": r.info.kind});
        let mut entry = json!({
            "resource": r.info.resource,
            "responseKind": kind,
            "scope": if r.spec.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": r.spec.singular,
            "verbs": VERBS,
            "shortNames": r.spec.short_names,
            "categories": r.spec.categories,
        });
        let mut subresources = Vec::new();
        if r.spec.subresources.status {
            subresources.push(json!({"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS}));
        }
        if r.spec.subresources.eviction {
            subresources.push(json!({
                "subresource": "eviction",
                "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "verbs": ["create"],
            }));
        }
        if r.spec.subresources.ephemeral_containers {
            subresources.push(
                json!({"subresource": "ephemeralcontainers", "responseKind": kind, "verbs": STATUS_VERBS}),
            );
        }
        if r.spec.subresources.scale.is_some() {
            subresources.push(json!({
                "subresource": "scale",
                "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "verbs": STATUS_VERBS,
            }));
        }
        if r.spec.subresources.finalize {
            subresources.push(json!({"subresource": "finalize", "responseKind": kind, "verbs": ["update"]}));
        }
        if !subresources.is_empty() {
            entry["subresources"] = Value::Array(subresources);
        }
        tree.entry(g).or_default().entry(v).or_default().push(entry);
    }
    if !core {
        let reviews = tree
            .entry(REVIEW_GROUP)
            .or_default()
            .entry(REVIEW_VERSION)
            .or_default();
        for (name, kind) in REVIEWS {
            reviews.push(json!({
                "resource": name,
                "responseKind": {"group": REVIEW_GROUP, "version": REVIEW_VERSION, "kind": kind},
                "scope": "Cluster",
                "singularResource": name.trim_end_matches('s'),
                "verbs": ["create"],
            }));
        }
    }
    let items: Vec<Value> = tree
        .into_iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .into_iter()
                .map(|(v, resources)| json!({"version": v, "resources": resources, "freshness": "Current"}))
                .collect();
            let metadata = if group.is_empty() {
                json!({})
            } else {
                json!({"name": group})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_the_commit_and_the_date_of_the_build() {
        let v = version();
        let commit = v["gitCommit"].as_str().unwrap();
        assert!(
            commit == "unknown" || (commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{commit}"
        );
        let date = v["buildDate"].as_str().unwrap();
        assert!(
            date == "unknown" || date.parse::<jiff::Timestamp>().is_ok() && date.ends_with('Z'),
            "{date}"
        );
        assert!(
            v["gitVersion"]
                .as_str()
                .unwrap()
                .starts_with("v1.32.0-watchcache.")
        );
    }

    #[test]
    fn kubectls_accept_header_asks_for_aggregated_v2() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                       application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(Some(kubectl)), Some("v2"));
        let old =
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(Some(old)), Some("v2beta1"));
        assert_eq!(aggregated_version(Some("application/json")), None);
        assert_eq!(aggregated_version(None), None);
    }
}
