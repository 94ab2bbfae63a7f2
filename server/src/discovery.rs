//! Discovery: `/version`, `/api`, `/apis` and `/api/v1`, enough for kubectl.

use serde_json::{Value, json};

use crate::resources::Resource;

/// The Kubernetes version this server speaks, as `/version` and the OpenAPI documents give it.
pub(crate) const GIT_VERSION: &str = concat!("v1.32.0-watchcache.", env!("CARGO_PKG_VERSION"));

pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
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

pub(crate) fn apis() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
}

pub(crate) fn api_v1<'a>(resources: impl Iterator<Item = &'a Resource>) -> Value {
    let list: Vec<Value> = resources
        .map(|r| {
            json!({
                "name": r.info.resource,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.info.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                "shortNames": r.short_names,
            })
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": list})
}
