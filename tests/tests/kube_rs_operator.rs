//! A kube-rs operator against `watchcache serve`: a `#[derive(CustomResource)]` kind installed
//! from `CustomResourceExt::crd()`, and a kube-runtime `Controller` that reconciles each custom
//! resource into a ConfigMap it owns and reports through the resource's `/status`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, Config, CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use watchcache_tests::{Server, http, request, start};

/// A tenant of the operator: the size of its configuration.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "operator.example.com",
    version = "v1",
    kind = "Tenant",
    namespaced,
    status = "TenantStatus",
    shortname = "tn",
    printcolumn = r#"{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}"#
)]
struct TenantSpec {
    size: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tier: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
struct TenantStatus {
    config_map: String,
    observed_size: i32,
}

const NS: &str = "default";
const MANAGER: &str = "tenant-operator";

fn client(server: &Server) -> Client {
    let url = format!("http://{}", server.addr()).parse().expect("a URL");
    Client::try_from(Config::new(url)).expect("a client")
}

/// Makes the tenant's ConfigMap (owned by it) and reports it in the tenant's status.
async fn reconcile(tenant: Arc<Tenant>, client: Arc<Client>) -> Result<Action, kube::Error> {
    let name = tenant.name_any();
    let owner = tenant
        .controller_owner_ref(&())
        .expect("a stored tenant has a uid");
    let config_map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-config"), "ownerReferences": [owner]},
        "data": {"size": tenant.spec.size.to_string()},
    });
    let config_maps: Api<ConfigMap> = Api::namespaced((*client).clone(), NS);
    let apply = PatchParams::apply(MANAGER).force();
    config_maps
        .patch(&format!("{name}-config"), &apply, &Patch::Apply(&config_map))
        .await?;
    let tenants: Api<Tenant> = Api::namespaced((*client).clone(), NS);
    let status =
        json!({"status": {"config_map": format!("{name}-config"), "observed_size": tenant.spec.size}});
    tenants
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Tenant>, _: &kube::Error, _: Arc<Client>) -> Action {
    Action::requeue(Duration::from_millis(100))
}

/// Waits (bounded) until every tenant's ConfigMap holds its size, owned by it, and its status
/// says so.
async fn converged(client: &Client, sizes: &[(&str, i32)]) {
    let tenants: Api<Tenant> = Api::namespaced(client.clone(), NS);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut last = String::new();
    for _ in 0..200 {
        let mut done = true;
        for (name, size) in sizes {
            let tenant = tenants.get(name).await.expect("the tenant");
            let cm = config_maps
                .get_opt(&format!("{name}-config"))
                .await
                .expect("a GET");
            let owned = cm.as_ref().is_some_and(|cm| {
                cm.owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == tenant.meta().uid.as_ref() && o.controller == Some(true))
            });
            let data = cm
                .as_ref()
                .and_then(|cm| cm.data.as_ref())
                .and_then(|d| d.get("size").cloned());
            let observed = tenant.status.as_ref().map(|s| s.observed_size);
            if !owned || data != Some(size.to_string()) || observed != Some(*size) {
                done = false;
                last = format!("{name}: owned {owned}, data {data:?}, status {observed:?}");
            }
        }
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the operator never converged: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rs_controller_reconciles_custom_resources_into_owned_config_maps() {
    let server = start(watchcache_tests::config(0)).await;
    let client = client(&server);

    // The CRD kube-rs derives, served within a second.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Tenant::crd())
        .await
        .expect("the CRD is created");
    let mut served = false;
    for _ in 0..50 {
        let established = crds
            .get("tenants.operator.example.com")
            .await
            .expect("the CRD")
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "the CRD is established within a second");

    let tenants: Api<Tenant> = Api::namespaced(client.clone(), NS);
    for (name, size) in [("a", 1), ("b", 2), ("c", 3)] {
        let tenant = Tenant::new(name, TenantSpec { size, tier: None });
        tenants
            .create(&PostParams::default(), &tenant)
            .await
            .expect("a tenant");
    }
    // A tenant whose spec does not fit the derived schema is refused by the server.
    let bad = json!({"apiVersion": "operator.example.com/v1", "kind": "Tenant",
        "metadata": {"name": "bad"}, "spec": {"size": "big"}});
    let path = format!("/apis/operator.example.com/v1/namespaces/{NS}/tenants");
    let (code, body) = request(&http(), &server, "POST", &path, Some(bad)).await;
    assert_eq!(code, 422, "{}", String::from_utf8_lossy(&body));

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let shared = Arc::new(client.clone());
    let controller = tokio::spawn(
        Controller::new(tenants.clone(), watcher::Config::default())
            .owns(config_maps, watcher::Config::default())
            .run(reconcile, error_policy, shared)
            .for_each(|_| async {}),
    );
    converged(&client, &[("a", 1), ("b", 2), ("c", 3)]).await;

    // A spec change reaches the child through the watch.
    let change = json!({"spec": {"size": 5}});
    tenants
        .patch("b", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect("the spec changes");
    converged(&client, &[("a", 1), ("b", 5), ("c", 3)]).await;
    // The status written through /status did not move the spec's generation.
    let b = tenants.get("b").await.expect("b");
    assert_eq!(b.metadata.generation, Some(2), "{b:?}");
    controller.abort();
}
