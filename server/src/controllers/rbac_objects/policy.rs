//! The RBAC objects as the authorizer reads them: the [`PolicySource`] interface, and
//! [`CachedPolicy`], the server's own, over its Role, ClusterRole, RoleBinding and
//! ClusterRoleBinding caches.
//!
//! A [`Policy`] is built by decoding every cached RBAC object into its k8s-openapi type, and
//! built again only when one of the four caches has moved since (their current snapshots'
//! revisions are compared): in steady state a request costs four loads of the caches' views
//! and one of the last build. An object that does not decode is left out, with a warning.
//!
//! An aggregated ClusterRole (one with an `aggregationRule`) gets the rules of every other
//! ClusterRole its selectors match, as the apiserver's clusterrole-aggregation controller
//! writes them into it; aggregated roles that select one another (`view` into `edit` into
//! `admin`) are resolved to a fixed point.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::de::DeserializeOwned;
use watchcache_core::{Revision, Snapshot, WireFormat};

pub(crate) use crate::auth::{Policy, PolicySource};
use crate::store::resources::{Resource, Served};

/// The resources a policy is read from, in the order of [`Built::revisions`].
const RESOURCES: [&str; 4] = ["roles", "clusterroles", "rolebindings", "clusterrolebindings"];

/// One build: the caches' revisions it was made at, its version and the policy.
struct Built {
    revisions: [Revision; 4],
    version: u64,
    policy: Arc<Policy>,
}

/// The server's policy source: its four RBAC caches, decoded when they change.
pub(crate) struct CachedPolicy {
    resources: [Arc<Resource>; 4],
    built: ArcSwap<Built>,
    /// Held while building, so that a change is decoded once however many requests see it.
    building: Mutex<()>,
}

impl CachedPolicy {
    /// Over the RBAC caches among `resources`; `None` if one of the four is not served.
    pub(crate) fn new(resources: &Served) -> Option<CachedPolicy> {
        let [a, b, c, d] = RESOURCES.map(|r| resources.get("rbac.authorization.k8s.io/v1", r).cloned());
        Some(CachedPolicy {
            resources: [a?, b?, c?, d?],
            built: ArcSwap::from_pointee(Built {
                // Below any cache's revision once it has listed, so the first call builds.
                revisions: [Revision::ZERO; 4],
                version: 0,
                policy: Arc::new(Policy::empty()),
            }),
            building: Mutex::new(()),
        })
    }

    fn snapshots(&self) -> [Option<Arc<Snapshot>>; 4] {
        [0, 1, 2, 3].map(|i| self.resources[i].cache.current())
    }
}

fn revisions(snapshots: &[Option<Arc<Snapshot>>; 4]) -> [Revision; 4] {
    [0, 1, 2, 3].map(|i| snapshots[i].as_ref().map_or(Revision::ZERO, |s| s.revision()))
}

impl PolicySource for CachedPolicy {
    fn policy(&self) -> (u64, Arc<Policy>) {
        let snapshots = self.snapshots();
        let now = revisions(&snapshots);
        let last = self.built.load();
        if last.revisions == now {
            return (last.version, Arc::clone(&last.policy));
        }
        drop(last);
        let _building = self
            .building
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Another caller may have built it while this one waited.
        let last = self.built.load_full();
        if last.revisions == now {
            return (last.version, Arc::clone(&last.policy));
        }
        let policy = Arc::new(Policy {
            roles: decode_all(&self.resources[0], snapshots[0].as_deref()),
            cluster_roles: aggregate(decode_all(&self.resources[1], snapshots[1].as_deref())),
            role_bindings: decode_all(&self.resources[2], snapshots[2].as_deref()),
            cluster_role_bindings: decode_all(&self.resources[3], snapshots[3].as_deref()),
        });
        let version = last.version + 1;
        self.built.store(Arc::new(Built {
            revisions: now,
            version,
            policy: Arc::clone(&policy),
        }));
        (version, policy)
    }
}

impl Policy {
    fn empty() -> Policy {
        Policy {
            roles: Vec::new(),
            cluster_roles: Vec::new(),
            role_bindings: Vec::new(),
            cluster_role_bindings: Vec::new(),
        }
    }
}

/// Every object of `snapshot` that decodes as `T`; the others are left out, with a warning.
fn decode_all<T: DeserializeOwned>(resource: &Resource, snapshot: Option<&Snapshot>) -> Vec<T> {
    let Some(snapshot) = snapshot else {
        return Vec::new();
    };
    let kind = &resource.info.kind;
    let mut out = Vec::with_capacity(snapshot.len());
    for object in snapshot.iter() {
        if let Some((key, why)) = object.corruption() {
            tracing::warn!(%kind, %key, %why, "a corrupt RBAC object is left out of the policy");
            continue;
        }
        let decoded = object
            .encoding(WireFormat::Json, &*resource.codec)
            .map_err(|e| e.to_string())
            .and_then(|e| serde_json::from_slice::<T>(e.bytes()).map_err(|e| e.to_string()));
        match decoded {
            Ok(o) => out.push(o),
            Err(why) => {
                tracing::warn!(%kind, object = %object.key(), %why, "an RBAC object that does not decode is left out of the policy");
            }
        }
    }
    out
}

/// Whether `labels` are matched by `selector`, as apimachinery matches a label selector (an
/// empty selector matches everything; an unknown operator nothing).
fn selects(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let label = |k: &str| labels.and_then(|l| l.get(k));
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| label(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = label(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// `roles` with each aggregated role's rules replaced by those of the other roles its
/// selectors match, each rule once, in the order found; repeated until nothing changes, so
/// that aggregated roles selecting aggregated roles see their resolved rules.
fn aggregate(mut roles: Vec<ClusterRole>) -> Vec<ClusterRole> {
    let aggregated: Vec<usize> = (0..roles.len())
        .filter(|&i| roles[i].aggregation_rule.is_some())
        .collect();
    for &i in &aggregated {
        roles[i].rules = Some(Vec::new());
    }
    // Each pass that changes something adds a rule; rules are finite, so this ends. The
    // bound is for safety only.
    for _ in 0..=roles.len() {
        let mut changed = false;
        for &i in &aggregated {
            let selectors = roles[i]
                .aggregation_rule
                .as_ref()
                .and_then(|a| a.cluster_role_selectors.as_deref())
                .unwrap_or_default();
            let mut rules: Vec<PolicyRule> = Vec::new();
            for (j, other) in roles.iter().enumerate() {
                let labels = other.metadata.labels.as_ref();
                if j == i || !selectors.iter().any(|s| selects(s, labels)) {
                    continue;
                }
                for rule in other.rules.iter().flatten() {
                    if !rules.contains(rule) {
                        rules.push(rule.clone());
                    }
                }
            }
            if roles[i].rules.as_ref() != Some(&rules) {
                roles[i].rules = Some(rules);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    roles
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use serde_json::{Value, json};

    use super::*;

    fn role(name: &str, labels: Value, aggregate_from: Option<&str>, rules: Value) -> ClusterRole {
        let mut r = json!({"metadata": {"name": name, "labels": labels}, "rules": rules});
        if let Some(label) = aggregate_from {
            r["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]});
        }
        serde_json::from_value(r).unwrap()
    }

    fn rule(resource: &str) -> Value {
        json!({"verbs": ["get"], "apiGroups": [""], "resources": [resource]})
    }

    fn resources_of(r: &ClusterRole) -> Vec<String> {
        r.rules
            .iter()
            .flatten()
            .flat_map(|r| r.resources.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn aggregated_roles_get_the_rules_of_the_roles_they_select_through_chains() {
        let roles = vec![
            role("admin", json!({}), Some("to-admin"), json!([rule("stale")])),
            role("edit", json!({"to-admin": "true"}), Some("to-edit"), json!([])),
            role("view", json!({"to-edit": "true"}), Some("to-view"), json!([])),
            role("pods", json!({"to-view": "true"}), None, json!([rule("pods")])),
            role(
                "secrets",
                json!({"to-edit": "true"}),
                None,
                json!([rule("secrets")]),
            ),
            role(
                "both",
                json!({"to-edit": "true", "to-admin": "true"}),
                None,
                json!([rule("pods")]),
            ),
            role("other", json!({"to-other": "true"}), None, json!([rule("nodes")])),
            // Two aggregated roles selecting each other end with each other's rules.
            role("a", json!({"ring": "true"}), Some("ring"), json!([])),
            role(
                "b",
                json!({"ring": "true", "to-view": "true"}),
                Some("ring"),
                json!([rule("x")]),
            ),
        ];
        let out = aggregate(roles);
        let by = |n: &str| {
            resources_of(
                out.iter()
                    .find(|r| r.metadata.name.as_deref() == Some(n))
                    .unwrap(),
            )
        };
        assert_eq!(by("view"), ["pods"]);
        assert_eq!(by("edit"), ["pods", "secrets"]);
        assert_eq!(by("admin"), ["pods", "secrets"]);
        assert_eq!(by("other"), ["nodes"]);
        assert_eq!(by("a"), Vec::<String>::new());
        assert_eq!(by("b"), Vec::<String>::new());
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let labels: BTreeMap<String, String> = [("a".to_owned(), "1".to_owned())].into();
        let sel = |v: Value| serde_json::from_value::<LabelSelector>(v).unwrap();
        assert!(selects(&sel(json!({})), None));
        assert!(selects(&sel(json!({"matchLabels": {"a": "1"}})), Some(&labels)));
        assert!(!selects(&sel(json!({"matchLabels": {"a": "2"}})), Some(&labels)));
        let expr = |op: &str, values: Value| {
            sel(json!({"matchExpressions": [{"key": "a", "operator": op, "values": values}]}))
        };
        assert!(selects(&expr("In", json!(["1", "2"])), Some(&labels)));
        assert!(!selects(&expr("NotIn", json!(["1"])), Some(&labels)));
        assert!(selects(&expr("NotIn", json!(["1"])), None));
        assert!(selects(&expr("Exists", json!([])), Some(&labels)));
        assert!(selects(&expr("DoesNotExist", json!([])), None));
        assert!(!selects(&expr("Near", json!([])), Some(&labels)));
    }

    async fn server() -> crate::Server {
        let config = crate::ServeConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..crate::ServeConfig::default()
        };
        crate::Server::start(config).await.unwrap()
    }

    /// The policy once `ready` holds of it.
    async fn policy_when(source: &CachedPolicy, ready: impl Fn(&Policy) -> bool) -> (u64, Arc<Policy>) {
        for _ in 0..500 {
            let (version, policy) = source.policy();
            if ready(&policy) {
                return (version, policy);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the RBAC caches did not catch up");
    }

    fn names<T: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>>(
        list: &[T],
    ) -> Vec<String> {
        list.iter()
            .map(|o| o.metadata().name.clone().unwrap_or_default())
            .collect()
    }

    #[tokio::test]
    async fn a_change_to_any_rbac_object_moves_the_version_and_shows_in_the_policy() {
        let server = server().await;
        let state = server.state();
        let source = CachedPolicy::new(&state.resources.now()).expect("the RBAC kinds are served");
        let (v0, p0) = policy_when(&source, |p| p.cluster_role_bindings.len() == 4).await;
        // The bootstrap policy, aggregation resolved.
        assert!(names(&p0.cluster_roles).contains(&"cluster-admin".to_owned()));
        assert_eq!(p0.cluster_role_bindings.len(), 4);
        let view = p0
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some("view"))
            .unwrap();
        assert!(!view.rules.as_deref().unwrap_or_default().is_empty());
        // Nothing changed: the same build.
        let (again, p) = source.policy();
        assert_eq!(again, v0);
        assert!(Arc::ptr_eq(&p, &p0));

        let writes = [
            (
                "/registry/roles/default/r",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "r", "namespace": "default"}, "rules": [rule("pods")]}),
            ),
            (
                "/registry/clusterroles/c",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "c", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
                "rules": [rule("widgets")]}),
            ),
            (
                "/registry/rolebindings/default/rb",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "rb", "namespace": "default"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}}),
            ),
            (
                "/registry/clusterrolebindings/crb",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "crb"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "c"}}),
            ),
        ];
        let mut version = v0;
        let present = |key: &str, p: &Policy| {
            let name = key.rsplit('/').next().unwrap().to_owned();
            match key.split('/').nth(2).unwrap() {
                "roles" => names(&p.roles),
                "clusterroles" => names(&p.cluster_roles),
                "rolebindings" => names(&p.role_bindings),
                _ => names(&p.cluster_role_bindings),
            }
            .contains(&name)
        };
        for (key, object) in writes {
            state
                .store
                .create(key, Bytes::from(object.to_string()))
                .await
                .unwrap();
            let (v, _) = policy_when(&source, |p| present(key, p)).await;
            assert!(v > version, "{key}: the version moved");
            version = v;
        }
        // The new ClusterRole is aggregated into view, and through edit into admin.
        let (_, p) = source.policy();
        for aggregated in ["view", "edit", "admin"] {
            let role = p
                .cluster_roles
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(aggregated))
                .unwrap();
            assert!(resources_of(role).contains(&"widgets".to_owned()), "{aggregated}");
        }
        // A delete moves it too.
        state
            .store
            .delete("/registry/roles/default/r", None)
            .await
            .unwrap();
        let (v, _) = policy_when(&source, |p| p.roles.is_empty()).await;
        assert!(v > version);
        server.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn objects_that_do_not_decode_are_left_out() {
        let server = server().await;
        let state = server.state();
        let source = CachedPolicy::new(&state.resources.now()).unwrap();
        // Rules of the wrong shape: valid JSON, no ClusterRole.
        let bad = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "bad"}, "rules": "all of them"});
        state
            .store
            .create("/registry/clusterroles/bad", Bytes::from(bad.to_string()))
            .await
            .unwrap();
        // Not JSON at all: the cache holds it as corrupt.
        state
            .store
            .create("/registry/roles/default/junk", Bytes::from_static(b"\x00junk"))
            .await
            .unwrap();
        // A marker written after both: once it shows, both have been seen.
        let marker = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "marker", "namespace": "default"}});
        state
            .store
            .create("/registry/roles/default/marker", Bytes::from(marker.to_string()))
            .await
            .unwrap();
        let settled = |p: &Policy| {
            names(&p.roles) == ["marker"] && names(&p.cluster_roles).contains(&"cluster-admin".to_owned())
        };
        let (_, p) = policy_when(&source, settled).await;
        assert!(!names(&p.cluster_roles).contains(&"bad".to_owned()));
        server.shutdown().await.unwrap();
    }
}
