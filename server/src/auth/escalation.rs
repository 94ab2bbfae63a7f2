//! Privilege escalation prevention on the RBAC kinds' writes, as kube-apiserver's RBAC
//! storage refuses them: no one grants, through a Role, ClusterRole or binding, what they do
//! not hold themselves, unless the policy lets them `escalate` (roles) or `bind` (bindings).
//!
//! Coverage is decided atom by atom: a rule is broken down into rules of one API group, one
//! resource, one resource name (where it names any) and one verb, or of one non-resource URL
//! and one verb, and each atom must be covered by some rule the writer holds ([`covers`]). A
//! held rule covers an atom when it has the verb (or `*`), the group (or `*`), the resource
//! (or `*`, or `*/<subresource>` for a subresource), a matching name list (none, or one that
//! lists the atom's name: a rule limited to names never covers one without), and the URL
//! (equal, or a prefix ending in `*`). What is missing is reported compacted (atoms of one
//! group and resource merged back, their verbs together), one rule a line, sorted, as the
//! apiserver's message lists them.
//!
//! Setting, changing or removing a ClusterRole's `aggregationRule` takes every right (it can
//! gather any rule), unless the writer may `escalate`.
//!
//! Who is exempt: `system:masters` (their authorizer allows them everything), the server's
//! own writes (bootstrap, aggregation), which do not come through here, and every writer in
//! `AlwaysAllow` mode, where `escalate` and `bind` are allowed like anything else.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use serde_json::{Map, Value};

use super::authorizer::Authorizer;
use super::{Attributes, Decision, MASTERS, UserInfo};
/// The RBAC API group.
const GROUP: &str = "rbac.authorization.k8s.io";

/// The atoms of `rule`: one group, resource, name (if any) and verb each, then one URL and
/// verb each.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &str| Some(vec![s.to_owned()]);
    let mut atoms = Vec::new();
    for group in rule.api_groups.iter().flatten() {
        for resource in rule.resources.iter().flatten() {
            let names: Vec<Option<&String>> = match rule.resource_names.as_deref() {
                Some(names) if !names.is_empty() => names.iter().map(Some).collect(),
                _ => vec![None],
            };
            for name in names {
                for verb in &rule.verbs {
                    atoms.push(PolicyRule {
                        api_groups: one(group),
                        resources: one(resource),
                        resource_names: name.map(|n| vec![n.clone()]),
                        verbs: vec![verb.clone()],
                        non_resource_urls: None,
                    });
                }
            }
        }
    }
    for url in rule.non_resource_urls.iter().flatten() {
        for verb in &rule.verbs {
            atoms.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: vec![verb.clone()],
                ..PolicyRule::default()
            });
        }
    }
    atoms
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn has_all(set: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(set, i))
}

fn list(l: &Option<Vec<String>>) -> &[String] {
    l.as_deref().unwrap_or_default()
}

/// Whether the held `resources` name every one of `wanted`: exactly, by `*`, or, for a
/// subresource, by `*/<subresource>`.
fn resources_cover(resources: &[String], wanted: &[String]) -> bool {
    has(resources, "*")
        || wanted.iter().all(|w| {
            has(resources, w)
                || w.split_once('/')
                    .is_some_and(|(_, sub)| has(resources, &format!("*/{sub}")))
        })
}

/// Whether the held `urls` match every one of `wanted`: equal, or a prefix ending in `*`.
fn urls_cover(urls: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| {
        urls.iter().any(|u| {
            u == w
                || u.strip_suffix('*')
                    .is_some_and(|prefix| w.starts_with(prefix.trim_end_matches('*')))
        })
    })
}

/// Whether `held` covers `atom` (or any rule, checked field by field).
fn rule_covers(held: &PolicyRule, atom: &PolicyRule) -> bool {
    let names_match = match (list(&held.resource_names), list(&atom.resource_names)) {
        ([], _) => true,
        (_, []) => false,
        (held, wanted) => has_all(held, wanted),
    };
    (has(&held.verbs, "*") || has_all(&held.verbs, &atom.verbs))
        && (has(list(&held.api_groups), "*") || has_all(list(&held.api_groups), list(&atom.api_groups)))
        && resources_cover(list(&held.resources), list(&atom.resources))
        && urls_cover(list(&held.non_resource_urls), list(&atom.non_resource_urls))
        && names_match
}

/// The atoms of `wanted` that no rule of `held` covers (empty: `held` covers `wanted`).
pub(crate) fn covers(held: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .flat_map(breakdown)
        .filter(|atom| !held.iter().any(|h| rule_covers(h, atom)))
        .collect()
}

/// `atoms` with those of one group and one resource (no names, no URLs) merged into one
/// rule of all their verbs, in order.
fn compact(atoms: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for atom in atoms {
        let simple = atom.resource_names.as_deref().unwrap_or_default().is_empty()
            && atom.non_resource_urls.as_deref().unwrap_or_default().is_empty()
            && list(&atom.api_groups).len() == 1
            && list(&atom.resources).len() == 1;
        if simple {
            let same = out.iter_mut().find(|r| {
                r.resource_names.is_none()
                    && r.non_resource_urls.is_none()
                    && r.api_groups == atom.api_groups
                    && r.resources == atom.resources
            });
            if let Some(rule) = same {
                for verb in atom.verbs {
                    if !has(&rule.verbs, &verb) {
                        rule.verbs.push(verb);
                    }
                }
                continue;
            }
        }
        out.push(atom);
    }
    out
}

/// A list as Go's `%q` writes a `[]string`: `["a" "b"]`.
fn go_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// A rule in the apiserver's compact form: `{APIGroups:[""], Resources:["secrets"],
/// Verbs:["get"]}`, the fields it sets only.
pub(crate) fn compact_string(rule: &PolicyRule) -> String {
    let fields = [
        ("APIGroups", list(&rule.api_groups)),
        ("Resources", list(&rule.resources)),
        ("NonResourceURLs", list(&rule.non_resource_urls)),
        ("ResourceNames", list(&rule.resource_names)),
        ("Verbs", &rule.verbs[..]),
    ];
    let parts: Vec<String> = fields
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}:{}", go_list(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Refuses `wanted` unless the rules `user` holds in `namespace` (cluster-wide ones only for
/// `""`) cover it: why, in the apiserver's words.
fn confirm_no_escalation(
    authz: &Authorizer,
    user: &UserInfo,
    namespace: &str,
    wanted: &[PolicyRule],
) -> Result<(), String> {
    let held = authz.rules_for(user, namespace);
    let all: Vec<PolicyRule> = held.resource.into_iter().chain(held.non_resource).collect();
    let missing = covers(&all, wanted);
    if missing.is_empty() {
        return Ok(());
    }
    let lines: BTreeSet<String> = compact(missing).iter().map(compact_string).collect();
    let mut message = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        go_list(&user.groups),
        lines.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !held.errors.is_empty() {
        message.push_str(&format!("; resolution errors: [{}]", held.errors.join(" ")));
    }
    Err(message)
}

/// Whether the authorizer allows `user` `verb` on the RBAC `resource` (`roles`,
/// `clusterroles`) named `name` in `namespace`.
fn allowed(
    authz: &Authorizer,
    user: &Arc<UserInfo>,
    verb: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> bool {
    let a = Attributes {
        user: user.clone(),
        verb: verb.to_owned(),
        resource_request: true,
        api_group: GROUP.to_owned(),
        api_version: "*".to_owned(),
        resource: resource.to_owned(),
        subresource: String::new(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        path: String::new(),
    };
    matches!(authz.authorize(&a), Decision::Allow(_))
}

/// An RBAC object written by a user, as the escalation check sees it.
pub(crate) struct RbacWrite<'a> {
    /// `Role`, `ClusterRole`, `RoleBinding` or `ClusterRoleBinding` (any other kind passes).
    pub(crate) kind: &'a str,
    /// The request's namespace (`""` for the cluster-scoped kinds).
    pub(crate) namespace: &'a str,
    /// The request's name (`""` for a create, which names no object in its path).
    pub(crate) request_name: &'a str,
    /// The object to store.
    pub(crate) object: &'a Map<String, Value>,
    /// The stored object it replaces, for an update.
    pub(crate) current: Option<&'a Map<String, Value>>,
}

/// Whether a ClusterRole has an `aggregationRule` with selectors.
fn aggregates(object: &Map<String, Value>) -> bool {
    object
        .get("aggregationRule")
        .and_then(|a| a.get("clusterRoleSelectors"))
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
}

/// Everything: `*` on `*.*` and on every URL.
fn full_authority() -> [PolicyRule; 2] {
    let all = || Some(vec!["*".to_owned()]);
    [
        PolicyRule {
            verbs: vec!["*".to_owned()],
            api_groups: all(),
            resources: all(),
            ..PolicyRule::default()
        },
        PolicyRule {
            verbs: vec!["*".to_owned()],
            non_resource_urls: all(),
            ..PolicyRule::default()
        },
    ]
}

/// Refuses `write` by `user` when it grants what `user` does not hold and the policy does
/// not let them `escalate` (roles) or `bind` (the referenced role): the reason, for a 403.
pub(crate) fn confirm(authz: &Authorizer, user: &Arc<UserInfo>, write: &RbacWrite<'_>) -> Result<(), String> {
    if authz.allows_everything() || user.groups.iter().any(|g| g == MASTERS) {
        return Ok(());
    }
    let field = |name: &str| write.object.get(name).cloned().unwrap_or(Value::Null);
    match write.kind {
        "Role" | "ClusterRole" => {
            let resource = if write.kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            if allowed(
                authz,
                user,
                "escalate",
                resource,
                write.namespace,
                write.request_name,
            ) {
                return Ok(());
            }
            // Validated before this, so the rules read; a shape that does not is granted
            // nothing.
            let rules: Vec<PolicyRule> = serde_json::from_value(field("rules")).unwrap_or_default();
            confirm_no_escalation(authz, user, write.namespace, &rules)?;
            // An aggregation rule can gather anything: setting one, changing one or taking
            // one away takes `*` on everything.
            let aggregated = write.kind == "ClusterRole"
                && (aggregates(write.object) || write.current.is_some_and(aggregates));
            if aggregated && confirm_no_escalation(authz, user, "", &full_authority()).is_err() {
                return Err("must have cluster-admin privileges to use the aggregationRule".to_owned());
            }
            Ok(())
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let role: RoleRef = serde_json::from_value(field("roleRef")).map_err(|e| e.to_string())?;
            let resource = match role.kind.as_str() {
                "ClusterRole" => Some("clusterroles"),
                "Role" => Some("roles"),
                _ => None,
            };
            if resource.is_some_and(|r| allowed(authz, user, "bind", r, write.namespace, &role.name)) {
                return Ok(());
            }
            let rules = authz.role_rules(&role.kind, &role.name, write.namespace)?;
            confirm_no_escalation(authz, user, write.namespace, &rules)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::rbac::tests::{rule, urls};

    #[test]
    fn a_rule_covers_atoms_as_the_apiserver_decides() {
        let get_pods = rule(&["get"], &[""], &["pods"], &[]);
        // (held, wanted, covered)
        let table: &[(PolicyRule, PolicyRule, bool)] = &[
            (get_pods.clone(), get_pods.clone(), true),
            (
                rule(&["*"], &[""], &["pods"], &[]),
                rule(&["get", "delete"], &[""], &["pods"], &[]),
                true,
            ),
            (
                get_pods.clone(),
                rule(&["get", "list"], &[""], &["pods"], &[]),
                false,
            ),
            // Groups: exact or `*`.
            (rule(&["get"], &["*"], &["pods"], &[]), get_pods.clone(), true),
            (rule(&["get"], &["apps"], &["pods"], &[]), get_pods.clone(), false),
            // Resources: `*` covers subresources too; `*/status` only the status of any.
            (
                rule(&["get"], &[""], &["*"], &[]),
                rule(&["get"], &[""], &["pods/log"], &[]),
                true,
            ),
            (get_pods.clone(), rule(&["get"], &[""], &["pods/log"], &[]), false),
            (
                rule(&["update"], &["*"], &["*/status"], &[]),
                rule(&["update"], &["apps"], &["deployments/status"], &[]),
                true,
            ),
            (
                rule(&["update"], &["*"], &["*/status"], &[]),
                rule(&["update"], &["apps"], &["deployments"], &[]),
                false,
            ),
            (
                rule(&["update"], &[""], &["pods/status"], &[]),
                get_pods.clone(),
                false,
            ),
            // Names: a rule without covers any, one with covers those it lists only, and
            // never a rule without names.
            (get_pods.clone(), rule(&["get"], &[""], &["pods"], &["a"]), true),
            (
                rule(&["get"], &[""], &["pods"], &["a", "b"]),
                rule(&["get"], &[""], &["pods"], &["b"]),
                true,
            ),
            (
                rule(&["get"], &[""], &["pods"], &["a"]),
                rule(&["get"], &[""], &["pods"], &["a", "c"]),
                false,
            ),
            (rule(&["get"], &[""], &["pods"], &["a"]), get_pods.clone(), false),
            // URLs: equal, or a prefix ending in `*`.
            (urls(&["get"], &["/healthz"]), urls(&["get"], &["/healthz"]), true),
            (
                urls(&["get"], &["/healthz"]),
                urls(&["get"], &["/healthz/etcd"]),
                false,
            ),
            (
                urls(&["get"], &["/healthz/*"]),
                urls(&["get"], &["/healthz/etcd"]),
                true,
            ),
            (urls(&["get"], &["*"]), urls(&["get"], &["/metrics"]), true),
            (
                urls(&["get"], &["/healthz*"]),
                urls(&["post"], &["/healthz"]),
                false,
            ),
            // Resource rules and URL rules never cover each other.
            (
                rule(&["*"], &["*"], &["*"], &[]),
                urls(&["get"], &["/metrics"]),
                false,
            ),
            (urls(&["*"], &["*"]), get_pods.clone(), false),
            // A rule granting nothing is covered by anything.
            (get_pods.clone(), rule(&["get"], &[""], &[], &[]), true),
        ];
        for (i, (held, wanted, covered)) in table.iter().enumerate() {
            let missing = covers(std::slice::from_ref(held), std::slice::from_ref(wanted));
            assert_eq!(
                missing.is_empty(),
                *covered,
                "{i}: {held:?} over {wanted:?}: {missing:?}"
            );
        }
    }

    #[test]
    fn missing_rights_are_compacted_and_written_as_the_apiserver_writes_them() {
        let held = [rule(&["get"], &[""], &["pods"], &[])];
        let wanted = [
            rule(&["get", "list", "watch"], &["", "apps"], &["pods"], &[]),
            rule(&["get"], &[""], &["secrets"], &["s1"]),
            urls(&["get"], &["/metrics"]),
        ];
        let lines: Vec<String> = compact(covers(&held, &wanted))
            .iter()
            .map(compact_string)
            .collect();
        assert_eq!(
            lines,
            [
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["list" "watch"]}"#,
                r#"{APIGroups:["apps"], Resources:["pods"], Verbs:["get" "list" "watch"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], ResourceNames:["s1"], Verbs:["get"]}"#,
                r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#,
            ]
        );
    }
}
