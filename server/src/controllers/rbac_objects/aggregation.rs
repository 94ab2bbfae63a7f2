//! The ClusterRole aggregation controller: writes into each aggregated ClusterRole (one with
//! an `aggregationRule`) the rules of the ClusterRoles its selectors match, as the
//! apiserver's clusterrole-aggregation controller does, so that `kubectl describe clusterrole
//! view` shows what `view` allows.
//!
//! The rules are the policy's ([`PolicySource`], which resolves aggregation when it decodes
//! the caches). Whenever the policy's version moves, every aggregated role whose stored rules
//! differ is updated at the revision read; a write that loses a race (another replica, a
//! user's update) is tried again at the next look, `RECHECK` later.
//!
//! [`PolicySource`]: crate::auth::PolicySource

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::rbac::v1::ClusterRole;
use serde_json::Value;
use watchcache_core::SourceError;

use crate::handlers::app::AppState;
use crate::store::backend::Backend;

/// How often the controller looks at the policy's version.
const RECHECK: Duration = Duration::from_millis(250);

/// Runs until the server stops.
pub(crate) async fn run(state: Arc<AppState>) {
    let stop = state.shutdown.token();
    let mut done: Option<u64> = None;
    loop {
        let (version, policy) = state.rbac.policy();
        if done != Some(version) {
            let mut all = true;
            for role in policy
                .cluster_roles
                .iter()
                .filter(|r| r.aggregation_rule.is_some())
            {
                if let Err(e) = write_rules(&state.store, role).await {
                    let name = role.metadata.name.as_deref().unwrap_or_default();
                    tracing::debug!(role = name, error = %e, "aggregated rules not written yet");
                    all = false;
                }
            }
            if all {
                done = Some(version);
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// Stores `role`'s resolved rules in its stored object, if they differ.
async fn write_rules(store: &Backend, role: &ClusterRole) -> Result<(), SourceError> {
    let name = role.metadata.name.as_deref().unwrap_or_default();
    let key = format!("/registry/clusterroles/{name}");
    let Some((raw, revision)) = store.get(&key).await? else {
        return Ok(()); // deleted since: nothing to write
    };
    let Ok(Value::Object(mut stored)) = serde_json::from_slice::<Value>(&raw) else {
        return Ok(()); // not an object: the policy left it out, and so does this
    };
    let rules = serde_json::to_value(role.rules.as_deref().unwrap_or_default())
        .map_err(|e| SourceError::Unavailable(e.to_string()))?;
    if stored.get("rules") == Some(&rules) {
        return Ok(());
    }
    stored.insert("rules".into(), rules);
    let value = Bytes::from(Value::Object(stored).to_string());
    store.update(&key, value, Some(revision)).await.map(drop)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    async fn get(server: &crate::Server, key: &str) -> Value {
        let (raw, _) = server.store().get(key).await.unwrap().expect("stored");
        serde_json::from_slice(&raw).unwrap()
    }

    async fn resources_of(server: &crate::Server, role: &str, want: usize) -> Vec<String> {
        let key = format!("/registry/clusterroles/{role}");
        for _ in 0..400 {
            let stored = get(server, &key).await;
            let resources: Vec<String> = stored["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect();
            if resources.len() >= want {
                return resources;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{role}'s rules were not written");
    }

    #[tokio::test]
    async fn aggregated_roles_are_written_the_rules_they_select() {
        let config = crate::ServeConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..crate::ServeConfig::default()
        };
        let server = crate::Server::start(config).await.unwrap();
        // The bootstrap aggregation: view's rules in view, edit and admin.
        let view = resources_of(&server, "view", 1).await;
        assert!(view.contains(&"pods".to_owned()), "{view:?}");
        let admin = resources_of(&server, "admin", 1).await;
        assert!(admin.contains(&"rolebindings".to_owned()), "{admin:?}");

        // A new role labelled for view shows in all three.
        let widgets = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "widgets", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": [{"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["widgets"]}]});
        let key = "/registry/clusterroles/widgets";
        server
            .store()
            .create(key, widgets.to_string().into())
            .await
            .unwrap();
        for role in ["view", "edit", "admin"] {
            let resources = resources_of(&server, role, view.len() + 1).await;
            assert!(resources.contains(&"widgets".to_owned()), "{role}: {resources:?}");
        }
        // And leaves when it goes.
        server.store().delete(key, None).await.unwrap();
        for _ in 0..400 {
            if !resources_of(&server, "view", 1)
                .await
                .contains(&"widgets".to_owned())
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(
            !resources_of(&server, "view", 1)
                .await
                .contains(&"widgets".to_owned())
        );
        server.shutdown().await.unwrap();
    }
}
