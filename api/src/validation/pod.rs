//! A Pod's spec, as the apiserver validates it: containers (required, named, with an image),
//! their ports, environment variable names and resources, the pod's restart and DNS policies,
//! node, service account and deadline; and on an update, a spec that no longer changes but for
//! its images, its deadline and added tolerations (a pod is run as it was scheduled).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::field::{Errors, Path};
use super::{meta, names, quantity};

/// The container lists of a pod, in the order the apiserver validates them.
const CONTAINER_LISTS: &[&str] = &["containers", "initContainers"];

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
/// Sorted, as the apiserver lists them.
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
/// The resources a container may ask for without a domain (and `hugepages-<size>`).
const CONTAINER_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage"];

/// What a running pod's update may change, as the apiserver's refusal lists it.
const UPDATABLE: &str = "pod updates may not change fields other than `spec.containers[*].image`,\
    `spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing \
    tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

const MAX_INT32: i64 = i32::MAX as i64;

fn spec(object: &Map<String, Value>) -> Map<String, Value> {
    object
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn list<'a>(spec: &'a Map<String, Value>, field: &str) -> &'a [Value] {
    spec.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text<'a>(object: &'a Map<String, Value>, field: &str) -> Option<&'a str> {
    object.get(field).and_then(Value::as_str)
}

/// A new pod's spec.
pub(super) fn validate(object: &Map<String, Value>, errors: &mut Errors) {
    let spec = spec(object);
    let path = Path::new("spec");
    let containers = path.child("containers");
    if list(&spec, "containers").is_empty() {
        errors.required(&containers);
    }
    let mut names = BTreeSet::new();
    for field in CONTAINER_LISTS {
        let at = path.child(field);
        for (i, c) in list(&spec, field).iter().enumerate() {
            if let Some(c) = c.as_object() {
                container(c, &at.index(i), &mut names, errors);
            }
        }
    }
    if let Some(policy) = spec.get("restartPolicy").and_then(Value::as_str) {
        one_of(policy, RESTART_POLICIES, &path.child("restartPolicy"), errors);
    }
    if let Some(policy) = spec.get("dnsPolicy").and_then(Value::as_str) {
        one_of(policy, DNS_POLICIES, &path.child("dnsPolicy"), errors);
    }
    if let Some(node) = text(&spec, "nodeName").filter(|n| !n.is_empty()) {
        errors.invalid_each(&path.child("nodeName"), node, names::dns1123_subdomain(node));
    }
    if let Some(account) = text(&spec, "serviceAccountName").filter(|n| !n.is_empty()) {
        errors.invalid_each(
            &path.child("serviceAccountName"),
            account,
            names::dns1123_subdomain(account),
        );
    }
    if let Some(selector) = spec.get("nodeSelector").and_then(Value::as_object) {
        meta::labels_of(selector, &path.child("nodeSelector"), errors);
    }
    if let Some(deadline) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && !(1..=MAX_INT32).contains(&deadline)
    {
        errors.invalid(
            &path.child("activeDeadlineSeconds"),
            deadline,
            format!("must be between 1 and {MAX_INT32}, inclusive"),
        );
    }
}

/// A value that must be one of `allowed` (and, being there, not empty).
fn one_of(value: &str, allowed: &[&str], field: &Path, errors: &mut Errors) {
    if value.is_empty() {
        errors.required(field);
    } else if !allowed.contains(&value) {
        errors.not_supported(field, value, allowed);
    }
}

/// One container: its name (unique across the pod's containers), image, pull policy, ports
/// and resources.
fn container(c: &Map<String, Value>, at: &Path, names: &mut BTreeSet<String>, errors: &mut Errors) {
    let name_at = at.child("name");
    match text(c, "name").filter(|n| !n.is_empty()) {
        None => errors.required(&name_at),
        Some(name) => {
            errors.invalid_each(&name_at, name, names::dns1123_label(name));
            if !names.insert(name.to_owned()) {
                errors.duplicate(&name_at, name);
            }
        }
    }
    if text(c, "image").is_none_or(str::is_empty) {
        errors.required(&at.child("image"));
    }
    if let Some(policy) = text(c, "imagePullPolicy") {
        one_of(policy, PULL_POLICIES, &at.child("imagePullPolicy"), errors);
    }
    let ports = at.child("ports");
    let mut port_names = BTreeSet::new();
    for (i, port) in list(c, "ports").iter().enumerate() {
        if let Some(port) = port.as_object() {
            container_port(port, &ports.index(i), &mut port_names, errors);
        }
    }
    env(c, at, errors);
    if let Some(resources) = c.get("resources").and_then(Value::as_object) {
        requirements(resources, &at.child("resources"), errors);
    }
}

fn container_port(port: &Map<String, Value>, at: &Path, names: &mut BTreeSet<String>, errors: &mut Errors) {
    if let Some(name) = text(port, "name").filter(|n| !n.is_empty()) {
        let messages = names::port_name(name);
        if !messages.is_empty() {
            errors.invalid_each(&at.child("name"), name, messages);
        } else if !names.insert(name.to_owned()) {
            errors.duplicate(&at.child("name"), name);
        }
    }
    // A number of the wrong type is the value-type checks' to refuse.
    match port.get("containerPort") {
        None | Some(Value::Null) => errors.required(&at.child("containerPort")),
        Some(n) => match n.as_i64() {
            Some(0) => errors.required(&at.child("containerPort")),
            Some(n) => {
                for m in names::port_number(n) {
                    errors.invalid(&at.child("containerPort"), n, m);
                }
            }
            None => {}
        },
    }
    if let Some(host) = port.get("hostPort").and_then(Value::as_i64).filter(|p| *p != 0) {
        for m in names::port_number(host) {
            errors.invalid(&at.child("hostPort"), host, m);
        }
    }
    if let Some(protocol) = text(port, "protocol") {
        one_of(protocol, PROTOCOLS, &at.child("protocol"), errors);
    }
}

/// A container's environment: each variable named (a null one, which reads as an empty one,
/// has no name), and its names and `envFrom` prefixes as the apiserver allows them.
fn env(c: &Map<String, Value>, at: &Path, errors: &mut Errors) {
    let vars = at.child("env");
    for (i, var) in list(c, "env").iter().enumerate() {
        let name_at = vars.index(i).child("name");
        match var
            .as_object()
            .and_then(|v| text(v, "name"))
            .filter(|n| !n.is_empty())
        {
            None => errors.required(&name_at),
            Some(name) => errors.invalid_each(&name_at, name, names::env_var_name(name)),
        }
    }
    let sources = at.child("envFrom");
    for (i, source) in list(c, "envFrom").iter().enumerate() {
        if let Some(prefix) = source
            .as_object()
            .and_then(|s| text(s, "prefix"))
            .filter(|p| !p.is_empty())
        {
            let prefix_at = sources.index(i).child("prefix");
            errors.invalid_each(&prefix_at, prefix, names::env_var_name(prefix));
        }
    }
}

/// A container's limits and requests: names a container may ask for, no negative amount, no
/// request above its limit.
fn requirements(resources: &Map<String, Value>, at: &Path, errors: &mut Errors) {
    let amounts = |field: &str| -> Vec<(String, quantity::Quantity)> {
        resources
            .get(field)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), quantity::of(v)?.ok()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (limits, requests) = (amounts("limits"), amounts("requests"));
    for (field, list) in [("limits", &limits), ("requests", &requests)] {
        for (name, amount) in list {
            let key = at.child(field).key(name);
            resource_name(name, &key, errors);
            if amount.is_negative() {
                errors.invalid(&key, amount.canonical(), "must be greater than or equal to 0");
            }
        }
    }
    for (name, request) in &requests {
        if let Some((_, limit)) = limits.iter().find(|(n, _)| n == name)
            && request > limit
        {
            errors.invalid(
                &at.child("requests"),
                request.canonical(),
                format!(
                    "must be less than or equal to {name} limit of {}",
                    limit.canonical()
                ),
            );
        }
    }
}

/// A resource's name: a qualified name; without a domain, one a container may ask for; with
/// one outside `kubernetes.io`, an extended resource.
fn resource_name(name: &str, at: &Path, errors: &mut Errors) {
    errors.invalid_each(at, name, names::qualified_name(name));
    if !name.contains('/') {
        if !CONTAINER_RESOURCES.contains(&name) && !name.starts_with("hugepages-") {
            errors.invalid(at, name, "must be a standard resource for containers");
        }
    } else if !name.contains("kubernetes.io/") && name.starts_with("requests.") {
        errors.invalid(at, name, "doesn't follow extended resource name standard");
    }
}

/// What an update of a pod may not change: its containers' number, and its spec but for the
/// fields [`UPDATABLE`] names.
pub(super) fn validate_update(object: &Map<String, Value>, old: &Map<String, Value>, errors: &mut Errors) {
    let (new, old) = (spec(object), spec(old));
    let path = Path::new("spec");
    for field in CONTAINER_LISTS {
        let (now, before) = (list(&new, field), list(&old, field));
        if now.len() != before.len() {
            errors.forbidden(&path.child(field), "pod updates may not add or remove containers");
            return;
        }
        for (i, c) in now.iter().enumerate() {
            let image = c.get("image").and_then(Value::as_str);
            let at = path.child(field).index(i).child("image");
            match image {
                None | Some("") => errors.required(&at),
                Some(image) if image.trim() != image => {
                    errors.invalid(&at, image, "must not have leading or trailing whitespace");
                }
                Some(_) => {}
            }
        }
    }
    let deadline = |spec: &Map<String, Value>| spec.get("activeDeadlineSeconds").and_then(Value::as_i64);
    let at = path.child("activeDeadlineSeconds");
    match (deadline(&new), deadline(&old)) {
        (Some(n), _) if !(0..=MAX_INT32).contains(&n) => {
            errors.invalid(&at, n, format!("must be between 0 and {MAX_INT32}, inclusive"));
            return;
        }
        (Some(n), Some(o)) if o < n => {
            errors.invalid(&at, n, "must be less than or equal to previous value");
            return;
        }
        (None, Some(_)) => errors.invalid(
            &at,
            Value::Null,
            "must not update from a positive integer to nil value",
        ),
        _ => {}
    }
    let tolerations = |spec: &Map<String, Value>| list(spec, "tolerations").to_vec();
    let (added_to, were) = (tolerations(&new), tolerations(&old));
    let kept = were
        .iter()
        .all(|w| added_to.iter().any(|t| same_toleration(w, t)));
    if !kept {
        errors.forbidden(
            &path.child("tolerations"),
            "existing toleration can not be modified except its tolerationSeconds",
        );
    }
    if new == old {
        return;
    }
    // The fields an update may change take their old values; anything else that differs is
    // refused.
    let mut munged = new.clone();
    for field in CONTAINER_LISTS {
        if let Some(Value::Array(list)) = munged.get_mut(*field) {
            for (c, before) in list.iter_mut().zip(list_of(&old, field)) {
                if let (Value::Object(c), Some(image)) = (c, before.get("image")) {
                    c.insert("image".into(), image.clone());
                }
            }
        }
    }
    for field in ["activeDeadlineSeconds", "tolerations"] {
        match old.get(field) {
            Some(v) => munged.insert(field.into(), v.clone()),
            None => munged.remove(field),
        };
    }
    let grace = |spec: &Map<String, Value>| spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
    if grace(&old).is_some_and(|g| g < 0) && grace(&new) == Some(1) {
        munged.insert(
            "terminationGracePeriodSeconds".into(),
            old["terminationGracePeriodSeconds"].clone(),
        );
    }
    if munged != old {
        errors.forbidden(&path, UPDATABLE);
    }
}

pub(super) fn ephemeral_containers_update(
    object: &Map<String, Value>,
    old: &Map<String, Value>,
    errors: &mut Errors,
) {
    let (new, old) = (spec(object), spec(old));
    let path = Path::new("spec").child("ephemeralContainers");
    let (now, before) = (
        list(&new, "ephemeralContainers"),
        list(&old, "ephemeralContainers"),
    );
    let name = |c: &Value| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    for b in before {
        match now.iter().position(|c| name(c) == name(b)) {
            None => errors.forbidden(
                &path,
                format!("existing ephemeral containers {:?} may not be removed", name(b)),
            ),
            Some(i) if now[i] != *b => errors.forbidden(
                &path.index(i),
                format!("existing ephemeral containers {:?} may not be changed", name(b)),
            ),
            Some(_) => {}
        }
    }
    let mut names: Vec<String> = CONTAINER_LISTS
        .iter()
        .flat_map(|f| list(&new, f).iter().map(name))
        .collect();
    for (i, c) in now.iter().enumerate() {
        if before.iter().any(|b| name(b) == name(c)) {
            names.push(name(c));
            continue;
        }
        let at = path.index(i);
        let n = name(c);
        if n.is_empty() {
            errors.required(&at.child("name"));
        } else if names.contains(&n) {
            errors.duplicate(&at.child("name"), n.as_str());
        }
        names.push(n);
        match c.get("image").and_then(Value::as_str) {
            None | Some("") => errors.required(&at.child("image")),
            _ => {}
        }
        // What only a container the pod was made with may have.
        for field in [
            "lifecycle",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "ports",
            "resources",
            "resizePolicy",
        ] {
            if c.get(field).is_some_and(|v| !v.is_null()) {
                errors.forbidden(&at.child(field), "cannot be set for an Ephemeral Container");
            }
        }
    }
}

fn list_of<'a>(spec: &'a Map<String, Value>, field: &str) -> impl Iterator<Item = &'a Value> {
    list(spec, field).iter()
}

/// The same toleration but for its `tolerationSeconds`, which an update may change.
fn same_toleration(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Value::Object(m) = &mut v {
            m.remove("tolerationSeconds");
        }
        v
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::field::{obj, shown};
    use super::*;

    #[test]
    fn containers_ports_and_resources() {
        let pod = obj(json!({"spec": {"containers": [
            {"name": "a", "image": "i", "ports": [
                {"containerPort": 80, "name": "web"}, {"containerPort": 81, "name": "web"}],
             "resources": {"requests": {"cpu": "2", "memory": "-1"}, "limits": {"cpu": "1500m"}}},
            {"name": "a"}]}}));
        assert_eq!(
            shown(|e| validate(&pod, e)),
            [
                "spec.containers[0].ports[1].name: Duplicate value: \"web\"",
                "spec.containers[0].resources.requests[memory]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1500m",
                "spec.containers[1].name: Duplicate value: \"a\"",
                "spec.containers[1].image: Required value",
            ]
        );
    }

    #[test]
    fn env_var_names_are_required_and_printable_ascii_without_an_equals_sign() {
        let pod = obj(json!({"spec": {"containers": [
            {"name": "a", "image": "i",
             "env": [null, {}, {"name": ""}, {"name": "my.env-name 1"}, {"name": "A=B"}, {"name": "é"},
                     {"name": "TAB\tHERE"}, {"name": "_ok:{}[]~"}],
             "envFrom": [{"prefix": ""}, {"prefix": "P_"}, {"prefix": "P="}]}]}}));
        let why = "a valid environment variable name must consist only of printable ASCII characters other than '='";
        assert_eq!(
            shown(|e| validate(&pod, e)),
            [
                "spec.containers[0].env[0].name: Required value".to_owned(),
                "spec.containers[0].env[1].name: Required value".to_owned(),
                "spec.containers[0].env[2].name: Required value".to_owned(),
                format!("spec.containers[0].env[4].name: Invalid value: \"A=B\": {why}"),
                format!("spec.containers[0].env[5].name: Invalid value: \"é\": {why}"),
                format!("spec.containers[0].env[6].name: Invalid value: \"TAB\\tHERE\": {why}"),
                format!("spec.containers[0].envFrom[2].prefix: Invalid value: \"P=\": {why}"),
            ]
        );
    }

    #[test]
    fn a_running_pods_spec_changes_only_where_allowed() {
        let old = obj(
            json!({"spec": {"nodeName": "n", "containers": [{"name": "a", "image": "i:1"}],
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 5}]}}),
        );
        let mut images = old.clone();
        images["spec"]["containers"][0]["image"] = json!("i:2");
        images["spec"]["activeDeadlineSeconds"] = json!(60);
        images["spec"]["tolerations"] =
            json!([{"key": "k", "operator": "Exists", "tolerationSeconds": 1}, {"key": "x"}]);
        assert!(shown(|e| validate_update(&images, &old, e)).is_empty());
        let mut moved = old.clone();
        moved["spec"]["nodeName"] = json!("m");
        assert_eq!(
            shown(|e| validate_update(&moved, &old, e)),
            [format!("spec: Forbidden: {UPDATABLE}")]
        );
        let mut dropped = old.clone();
        dropped["spec"]["tolerations"] = json!([]);
        assert_eq!(
            shown(|e| validate_update(&dropped, &old, e)),
            [
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
            ]
        );
    }
}
