//! The bootstrap RBAC policy: the ClusterRoles and ClusterRoleBindings the apiserver writes
//! when it starts, so that a new cluster has an administrator group, lets everyone read its
//! health and version, and lets authenticated users discover the API and ask what they may
//! do.
//!
//! Written at server start by reconciliation, as the apiserver's RBAC post-start hook does: a
//! missing object is created; one that exists and is not protected (its
//! `rbac.authorization.kubernetes.io/autoupdate` annotation is not `"false"`) gets the rules,
//! subjects, labels and annotations of the default it lacks, and keeps what it has beyond
//! them. Every write is conditional (a create that finds the object, an update at the
//! revision read), so replicas starting at once on one etcd each either write or find the
//! other's write and reconcile against it.
//!
//! Served: `cluster-admin` (bound to `system:masters`), `system:discovery` and
//! `system:basic-user` (bound to `system:authenticated`), `system:public-info-viewer` (bound to
//! `system:authenticated` and `system:unauthenticated`), and the user-facing `admin`, `edit`
//! and `view`, aggregated from `system:aggregate-to-admin`, `-edit` and `-view`, whose rules
//! are the apiserver's for the core, apps, autoscaling, batch, policy, networking and
//! discovery groups (not the deprecated `extensions` group's).

use bytes::Bytes;
use serde_json::{Map, Value, json};
use watchcache_core::SourceError;

use crate::store::backend::Backend;

/// The label every bootstrap object carries.
const BOOTSTRAPPING: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// The annotation that lets reconciliation change an object (`"false"` protects it).
pub(crate) const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The label `admin` aggregates the rules of (and `edit` carries).
const TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// How many times one object's reconciliation reads again after losing a race.
const ATTEMPTS: usize = 5;

/// One object of the policy: where it is kept (`clusterroles`) and what it holds.
pub(crate) struct PolicyObject {
    pub(crate) resource: &'static str,
    pub(crate) object: Value,
}

impl PolicyObject {
    fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    fn key(&self) -> String {
        format!("/registry/{}/{}", self.resource, self.name())
    }
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

fn url_rule(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"verbs": verbs, "nonResourceURLs": urls})
}

fn metadata(name: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = Map::new();
    for (k, v) in std::iter::once(&BOOTSTRAPPING).chain(extra_labels) {
        labels.insert((*k).to_owned(), json!(v));
    }
    json!({"name": name, "labels": labels, "annotations": {AUTOUPDATE: "true"}})
}

fn cluster_role(name: &str, extra_labels: &[(&str, &str)], rules: Vec<Value>) -> PolicyObject {
    PolicyObject {
        resource: "clusterroles",
        object: json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": metadata(name, extra_labels),
            "rules": rules,
        }),
    }
}

/// A ClusterRole whose rules are those of the ClusterRoles labelled `selector: "true"`.
fn aggregated(name: &str, extra_labels: &[(&str, &str)], selector: &str) -> PolicyObject {
    let mut role = cluster_role(name, extra_labels, Vec::new());
    role.object["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {selector: "true"}}]});
    role
}

fn binding(name: &str, role: &str, groups: &[&str]) -> PolicyObject {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g}))
        .collect();
    PolicyObject {
        resource: "clusterrolebindings",
        object: json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": metadata(name, &[]),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects,
        }),
    }
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

/// The policy, in the order it is written (roles before the bindings that name them).
pub(crate) fn policy() -> Vec<PolicyObject> {
    use crate::auth::{AUTHENTICATED, MASTERS, UNAUTHENTICATED};
    vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![rule(&["*"], &["*"], &["*"]), url_rule(&["*"], &["*"])],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![url_rule(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![rule(
                &["create"],
                &["authorization.k8s.io"],
                &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![url_rule(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        aggregated("admin", &[], TO_ADMIN),
        aggregated("edit", &[(TO_ADMIN, "true")], TO_EDIT),
        aggregated("view", &[(TO_EDIT, "true")], TO_VIEW),
        cluster_role(
            "system:aggregate-to-admin",
            &[(TO_ADMIN, "true")],
            vec![
                rule(
                    crate::handlers::discovery::VERBS,
                    &["rbac.authorization.k8s.io"],
                    &["rolebindings", "roles"],
                ),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[(TO_EDIT, "true")],
            vec![
                rule(
                    WRITE,
                    &[""],
                    &[
                        "pods",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                    ],
                ),
                rule(&["create"], &[""], &["pods/eviction"]),
                rule(
                    WRITE,
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                rule(READ, &[""], &["secrets"]),
                rule(&["impersonate"], &[""], &["serviceaccounts"]),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
                rule(
                    WRITE,
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
                rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
                rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
                rule(WRITE, &["networking.k8s.io"], &["ingresses", "networkpolicies"]),
            ],
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[(TO_VIEW, "true")],
            vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                rule(
                    READ,
                    &[""],
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                rule(READ, &[""], &["namespaces"]),
                rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
                rule(
                    READ,
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                rule(
                    READ,
                    &["autoscaling"],
                    &["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
                ),
                rule(
                    READ,
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                ),
                rule(
                    READ,
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
                rule(
                    READ,
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                ),
            ],
        ),
        binding("cluster-admin", "cluster-admin", &[MASTERS]),
        binding("system:discovery", "system:discovery", &[AUTHENTICATED]),
        binding("system:basic-user", "system:basic-user", &[AUTHENTICATED]),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[AUTHENTICATED, UNAUTHENTICATED],
        ),
    ]
}

/// What `existing` lacks of `default` added to it, or `None` when it lacks nothing or is
/// protected: labels and annotations it does not have, rules or subjects it does not hold
/// (compared whole), and a binding's role reference if it has none. A role's aggregation rule
/// is the default's when it has none.
pub(crate) fn reconcile(existing: &Value, default: &Value) -> Option<Value> {
    let protected = existing["metadata"]["annotations"][AUTOUPDATE].as_str() == Some("false");
    if protected {
        return None;
    }
    let mut out = existing.clone();
    let mut changed = false;
    for map in ["labels", "annotations"] {
        let Some(wanted) = default["metadata"][map].as_object() else {
            continue;
        };
        // An object of the wrong shape is left as it is.
        let meta = out.get_mut("metadata").and_then(Value::as_object_mut)?;
        let have = meta.entry(map).or_insert_with(|| json!({}));
        if have.is_null() {
            *have = json!({});
        }
        let have = have.as_object_mut()?;
        for (k, v) in wanted {
            if !have.contains_key(k) {
                have.insert(k.clone(), v.clone());
                changed = true;
            }
        }
    }
    for list in ["rules", "subjects"] {
        let Some(wanted) = default.get(list).and_then(Value::as_array) else {
            continue;
        };
        let have = out.as_object_mut()?.entry(list).or_insert_with(|| json!([]));
        if have.is_null() {
            *have = json!([]);
        }
        let have = have.as_array_mut()?;
        for item in wanted {
            if !have.contains(item) {
                have.push(item.clone());
                changed = true;
            }
        }
    }
    for field in ["roleRef", "aggregationRule"] {
        if let Some(wanted) = default.get(field)
            && out.get(field).is_none_or(Value::is_null)
        {
            out[field] = wanted.clone();
            changed = true;
        }
    }
    changed.then_some(out)
}

/// A new object's server-set metadata.
fn created(default: &Value) -> Bytes {
    let mut object = default.clone();
    object["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
    object["metadata"]["creationTimestamp"] =
        json!(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string());
    Bytes::from(object.to_string())
}

/// Writes the policy: each object created if missing, reconciled if present. A failure is
/// logged and leaves that object as it is (the next start tries again).
pub(crate) async fn ensure(store: &Backend) {
    for default in policy() {
        if let Err(e) = ensure_one(store, &default).await {
            tracing::warn!(key = %default.key(), error = %e, "cannot write a bootstrap RBAC object");
        }
    }
}

async fn ensure_one(store: &Backend, default: &PolicyObject) -> Result<(), SourceError> {
    let key = default.key();
    for _ in 0..ATTEMPTS {
        match store.get(&key).await? {
            None => match store.create(&key, created(&default.object)).await {
                // Another replica made it first: reconcile against its write.
                Err(SourceError::AlreadyExists(_)) => continue,
                other => return other.map(drop),
            },
            Some((raw, revision)) => {
                let Ok(existing) = serde_json::from_slice::<Value>(&raw) else {
                    tracing::warn!(%key, "a bootstrap RBAC object is stored undecodable: left as it is");
                    return Ok(());
                };
                let Some(reconciled) = reconcile(&existing, &default.object) else {
                    return Ok(());
                };
                tracing::info!(%key, "reconciling a bootstrap RBAC object with its default");
                match store
                    .update(&key, Bytes::from(reconciled.to_string()), Some(revision))
                    .await
                {
                    // Changed (or deleted) since it was read: read it again.
                    Err(SourceError::Conflict { .. } | SourceError::NotFound(_)) => continue,
                    other => return other.map(drop),
                }
            }
        }
    }
    Err(SourceError::Unavailable(format!(
        "{key} kept changing while it was reconciled"
    )))
}

#[cfg(test)]
mod tests {
    use watchcache_core::MemorySource;

    use super::*;

    fn stored(store: &MemorySource, key: &str) -> Value {
        serde_json::from_slice(&store.get(key).expect("stored").0).unwrap()
    }

    #[tokio::test]
    async fn the_policy_is_written_once_and_left_alone_when_whole() {
        let memory = MemorySource::new();
        let store = Backend::Memory(memory.clone());
        ensure(&store).await;
        let admin = stored(&memory, "/registry/clusterroles/cluster-admin");
        assert_eq!(
            admin["metadata"]["labels"]["kubernetes.io/bootstrapping"],
            "rbac-defaults"
        );
        assert_eq!(admin["metadata"]["annotations"][AUTOUPDATE], "true");
        assert_eq!(
            admin["rules"][1],
            json!({"verbs": ["*"], "nonResourceURLs": ["*"]})
        );
        let binding = stored(&memory, "/registry/clusterrolebindings/system:public-info-viewer");
        assert_eq!(binding["subjects"].as_array().unwrap().len(), 2);
        let masters = stored(&memory, "/registry/clusterrolebindings/cluster-admin");
        assert_eq!(masters["subjects"][0]["name"], "system:masters");
        assert_eq!(masters["roleRef"]["name"], "cluster-admin");

        // A second start (another replica) writes nothing.
        let before = memory.get("/registry/clusterroles/cluster-admin").unwrap().1;
        ensure(&store).await;
        assert_eq!(
            memory.get("/registry/clusterroles/cluster-admin").unwrap().1,
            before
        );
    }

    #[tokio::test]
    async fn replicas_starting_at_once_each_find_the_policy_written() {
        let memory = MemorySource::new();
        let store = Backend::Memory(memory.clone());
        let runs: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { ensure(&store).await })
            })
            .collect();
        for r in runs {
            r.await.unwrap();
        }
        for d in policy() {
            let o = stored(&memory, &d.key());
            assert_eq!(reconcile(&o, &d.object), None, "{}", d.key());
        }
    }

    #[test]
    fn reconciling_adds_what_is_missing_and_keeps_the_rest() {
        let default = &policy()
            .into_iter()
            .find(|d| d.name() == "system:public-info-viewer" && d.resource == "clusterrolebindings")
            .unwrap()
            .object;
        let existing = json!({"metadata": {"name": "system:public-info-viewer", "labels": {"team": "a"}},
            "roleRef": default["roleRef"],
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"}]});
        let fixed = reconcile(&existing, default).unwrap();
        assert_eq!(fixed["metadata"]["labels"]["team"], "a");
        assert_eq!(
            fixed["metadata"]["labels"]["kubernetes.io/bootstrapping"],
            "rbac-defaults"
        );
        assert_eq!(fixed["subjects"].as_array().unwrap().len(), 3);
        assert_eq!(fixed["subjects"][0]["name"], "bob");
        assert_eq!(reconcile(&fixed, default), None);

        let mut protected = existing;
        protected["metadata"]["annotations"] = json!({AUTOUPDATE: "false"});
        assert_eq!(reconcile(&protected, default), None);
    }

    #[tokio::test]
    async fn a_changed_default_object_is_reconciled_at_start() {
        let memory = MemorySource::new();
        let store = Backend::Memory(memory.clone());
        let key = "/registry/clusterroles/system:discovery";
        let cut = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:discovery", "uid": "u"},
            "rules": [{"verbs": ["get"], "nonResourceURLs": ["/extra"]}]});
        memory.create(key, Bytes::from(cut.to_string())).unwrap();
        ensure(&store).await;
        let fixed = stored(&memory, key);
        assert_eq!(fixed["metadata"]["uid"], "u");
        assert_eq!(fixed["rules"].as_array().unwrap().len(), 2);
        assert_eq!(fixed["rules"][0]["nonResourceURLs"], json!(["/extra"]));
    }
}
