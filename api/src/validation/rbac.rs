//! The RBAC kinds, as the apiserver's RBAC validation checks them:
//! - each rule of a Role or a ClusterRole names verbs, and either resources (with their API
//!   groups) or non-resource URLs, never both; a Role's rules never name URLs;
//! - a ClusterRole's aggregation rule, when present, has selectors, each a valid label
//!   selector;
//! - a binding refers to a role of `rbac.authorization.k8s.io` by kind (a RoleBinding to a
//!   Role or a ClusterRole, a ClusterRoleBinding to a ClusterRole only) and name, and no
//!   update changes that reference;
//! - each subject is named, and is a User, a Group (of the RBAC group) or a ServiceAccount
//!   (of the core group, with a namespace when the binding has none).
//!
//! Run after the defaults (`conversion.rs`): a subject's and a role reference's API group are
//! filled in by then where the apiserver fills them in.

use serde_json::{Map, Value};

use super::field::{Errors, Path, go_quote};
use super::meta::labels_of;
use super::names;

/// The RBAC API group.
pub(crate) const GROUP: &str = "rbac.authorization.k8s.io";

fn string<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn list<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v.get(field).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    list(v, field)
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A list of strings as Go's `%#v` prints one.
fn go_strings(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

pub(super) fn role(object: &Map<String, Value>, errors: &mut Errors) {
    rules(object, true, errors);
}

pub(super) fn cluster_role(object: &Map<String, Value>, errors: &mut Errors) {
    rules(object, false, errors);
    aggregation_rule(object, errors);
}

pub(super) fn role_binding(object: &Map<String, Value>, errors: &mut Errors) {
    binding(object, &["Role", "ClusterRole"], true, errors);
}

pub(super) fn cluster_role_binding(object: &Map<String, Value>, errors: &mut Errors) {
    binding(object, &["ClusterRole"], false, errors);
}

/// A binding's role reference never changes: the apiserver refuses the update, showing the
/// new reference as Go prints the struct.
pub(super) fn binding_update(object: &Map<String, Value>, old: &Map<String, Value>, errors: &mut Errors) {
    let now = object.get("roleRef").unwrap_or(&Value::Null);
    let before = old.get("roleRef").unwrap_or(&Value::Null);
    let parts = |r: &Value| [string(r, "apiGroup"), string(r, "kind"), string(r, "name")].map(str::to_owned);
    if parts(now) != parts(before) {
        let [group, kind, name] = parts(now);
        let printed = format!(
            "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
            go_quote(&group),
            go_quote(&kind),
            go_quote(&name)
        );
        errors.invalid_printed(
            &Path::new("roleRef"),
            now.clone(),
            printed,
            "cannot change roleRef",
        );
    }
}

fn rules(object: &Map<String, Value>, namespaced: bool, errors: &mut Errors) {
    let path = Path::new("rules");
    for (i, rule) in object
        .get("rules")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .enumerate()
    {
        policy_rule(rule, namespaced, &path.index(i), errors);
    }
}

fn policy_rule(rule: &Value, namespaced: bool, path: &Path, errors: &mut Errors) {
    if list(rule, "verbs").is_empty() {
        errors.required_because(&path.child("verbs"), "verbs must contain at least one value");
    }
    let urls = strings(rule, "nonResourceURLs");
    if !urls.is_empty() {
        let field = path.child("nonResourceURLs");
        let value = rule.get("nonResourceURLs").cloned().unwrap_or_default();
        if namespaced {
            errors.invalid_printed(
                &field,
                value.clone(),
                go_strings(&urls),
                "namespaced rules cannot apply to non-resource URLs",
            );
        }
        if ["apiGroups", "resources", "resourceNames"]
            .iter()
            .any(|f| !list(rule, f).is_empty())
        {
            errors.invalid_printed(
                &field,
                value,
                go_strings(&urls),
                "rules cannot apply to both regular resources and non-resource URLs",
            );
        }
        return;
    }
    if list(rule, "apiGroups").is_empty() {
        errors.required_because(
            &path.child("apiGroups"),
            "resource rules must supply at least one api group",
        );
    }
    if list(rule, "resources").is_empty() {
        errors.required_because(
            &path.child("resources"),
            "resource rules must supply at least one resource",
        );
    }
}

fn aggregation_rule(object: &Map<String, Value>, errors: &mut Errors) {
    let Some(rule) = object.get("aggregationRule").filter(|r| r.is_object()) else {
        return;
    };
    let path = Path::new("aggregationRule").child("clusterRoleSelectors");
    let selectors = list(rule, "clusterRoleSelectors");
    if selectors.is_empty() {
        errors.required_because(
            &path,
            "at least one clusterRoleSelector required if aggregationRule is non-nil",
        );
    }
    for (i, selector) in selectors.iter().enumerate() {
        label_selector(selector, &path.index(i), errors);
    }
}

/// A label selector, as apimachinery validates one: label keys and values, each expression's
/// key and operator, and values exactly when the operator takes them.
fn label_selector(selector: &Value, path: &Path, errors: &mut Errors) {
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        labels_of(labels, &path.child("matchLabels"), errors);
    }
    for (i, expression) in list(selector, "matchExpressions").iter().enumerate() {
        let path = path.child("matchExpressions").index(i);
        let values = list(expression, "values");
        match string(expression, "operator") {
            "In" | "NotIn" if values.is_empty() => errors.required_because(
                &path.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "In" | "NotIn" => {}
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.forbidden(
                &path.child("values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            "Exists" | "DoesNotExist" => {}
            other => errors.invalid(&path.child("operator"), other, "not a valid selector operator"),
        }
        let key = string(expression, "key");
        errors.invalid_each(&path.child("key"), key, names::qualified_name(key));
    }
}

fn binding(object: &Map<String, Value>, kinds: &[&str], namespaced: bool, errors: &mut Errors) {
    let role_ref = object.get("roleRef").unwrap_or(&Value::Null);
    let path = Path::new("roleRef");
    let group = string(role_ref, "apiGroup");
    if group != GROUP {
        errors.not_supported(&path.child("apiGroup"), group, &[GROUP]);
    }
    let kind = string(role_ref, "kind");
    if !kinds.contains(&kind) {
        errors.not_supported(&path.child("kind"), kind, kinds);
    }
    let name = string(role_ref, "name");
    if name.is_empty() {
        errors.required(&path.child("name"));
    } else {
        errors.invalid_each(&path.child("name"), name, names::path_segment(name));
    }
    let path = Path::new("subjects");
    let subjects = object.get("subjects").and_then(Value::as_array);
    for (i, subject) in subjects.map_or(&[][..], Vec::as_slice).iter().enumerate() {
        self::subject(subject, namespaced, &path.index(i), errors);
    }
}

fn subject(subject: &Value, namespaced: bool, path: &Path, errors: &mut Errors) {
    let name = string(subject, "name");
    if name.is_empty() {
        errors.required(&path.child("name"));
    }
    let group = string(subject, "apiGroup");
    match string(subject, "kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                errors.invalid_each(&path.child("name"), name, names::dns1123_subdomain(name));
            }
            if !group.is_empty() {
                errors.not_supported(&path.child("apiGroup"), group, &[""]);
            }
            if !namespaced && string(subject, "namespace").is_empty() {
                errors.required(&path.child("namespace"));
            }
        }
        "User" | "Group" => {
            if group != GROUP {
                errors.not_supported(&path.child("apiGroup"), group, &[GROUP]);
            }
        }
        other => errors.not_supported(&path.child("kind"), other, &["ServiceAccount", "User", "Group"]),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::field::{obj, shown};
    use super::*;

    #[test]
    fn rules_name_verbs_and_either_resources_or_urls() {
        let role = obj(json!({"rules": [
            {"verbs": [], "apiGroups": [""], "resources": ["pods"]},
            {"verbs": ["get"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz"], "resources": ["pods"]},
        ]}));
        assert_eq!(
            shown(|e| super::role(&role, e)),
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[1].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].resources: Required value: resource rules must supply at least one resource",
                "rules[2].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
                "rules[3].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
                "rules[3].nonResourceURLs: Invalid value: []string{\"/healthz\"}: rules cannot apply to both regular resources and non-resource URLs",
            ]
        );
        // A ClusterRole may name URLs.
        let cluster = obj(json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}));
        assert_eq!(shown(|e| cluster_role(&cluster, e)), Vec::<String>::new());
    }

    #[test]
    fn an_aggregation_rule_has_valid_selectors() {
        let empty = obj(json!({"aggregationRule": {}}));
        assert_eq!(
            shown(|e| cluster_role(&empty, e)),
            [
                "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"
            ]
        );
        let bad = obj(json!({"aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {"a": "b c"}},
            {"matchExpressions": [{"key": "k", "operator": "Near"}, {"key": "k", "operator": "In"}]},
        ]}}));
        assert_eq!(
            shown(|e| cluster_role(&bad, e)).len(),
            3,
            "{:?}",
            shown(|e| cluster_role(&bad, e))
        );
    }

    #[test]
    fn bindings_refer_to_roles_and_name_known_subjects() {
        let binding = obj(json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Pod", "name": "a/b"},
            "subjects": [
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                {"kind": "Robot", "name": "r2"},
                {"kind": "ServiceAccount", "name": "Default", "apiGroup": "x"},
                {"kind": "Group", "apiGroup": "", "name": ""},
            ],
        }));
        assert_eq!(
            shown(|e| cluster_role_binding(&binding, e)),
            [
                "roleRef.kind: Unsupported value: \"Pod\": supported values: \"ClusterRole\"",
                "roleRef.name: Invalid value: \"a/b\": may not contain '/'",
                "subjects[1].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                "subjects[2].name: Invalid value: \"Default\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "subjects[2].apiGroup: Unsupported value: \"x\": supported values: \"\"",
                "subjects[2].namespace: Required value",
                "subjects[3].name: Required value",
                "subjects[3].apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\"",
            ]
        );
        // A RoleBinding may bind a Role, and its service accounts default to its namespace.
        let ok = obj(json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "system:r"},
            "subjects": [{"kind": "ServiceAccount", "name": "default"}],
        }));
        assert_eq!(shown(|e| role_binding(&ok, e)), Vec::<String>::new());
    }

    #[test]
    fn a_role_reference_never_changes() {
        let old = obj(json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "edit"}}));
        let new = obj(json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"}}));
        assert_eq!(
            shown(|e| binding_update(&new, &old, e)),
            [
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"view\"}: cannot change roleRef"
            ]
        );
        assert_eq!(shown(|e| binding_update(&old, &old, e)), Vec::<String>::new());
    }
}
