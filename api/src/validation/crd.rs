//! A CustomResourceDefinition's own rules: its name is its plural and group, its names and
//! scope are given, it has versions with exactly one stored and a schema each, and its
//! conversion is `None` (webhook conversion is refused: this server calls no webhooks).

use serde_json::{Map, Value};

use super::field::{Errors, Path};

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub(crate) fn validate(object: &Map<String, Value>, errors: &mut Errors) {
    let crd = Value::Object(object.clone());
    let spec = Path::new("spec");
    let (group, plural) = (
        text(&crd, &["spec", "group"]),
        text(&crd, &["spec", "names", "plural"]),
    );
    let name = text(&crd, &["metadata", "name"]);
    if name != format!("{plural}.{group}") {
        errors.invalid(
            &Path::new("metadata").child("name"),
            name,
            "must be spec.names.plural+\".\"+spec.group",
        );
    }
    if group.is_empty() {
        errors.required(&spec.child("group"));
    } else if !group.contains('.') {
        errors.invalid(
            &spec.child("group"),
            group,
            "should be a domain with at least one dot",
        );
    }
    // The Kubernetes project's own groups, as the apiserver guards them.
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|d| group == *d || group.ends_with(&format!(".{d}")));
    let approved = text(&crd, &["metadata", "annotations", "api-approved.kubernetes.io"]);
    if protected && approved.is_empty() {
        errors.required_because(
            &Path::new("metadata").child("annotations").key("api-approved.kubernetes.io"),
            "protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111",
        );
    }
    for field in ["plural", "singular", "kind", "listKind"] {
        let value = text(&crd, &["spec", "names", field]);
        let at = spec.child("names").child(field);
        match field {
            "plural" | "kind" if value.is_empty() => errors.required(&at),
            "plural" | "singular" if !value.is_empty() && !is_label(value) => errors.invalid(
                &at,
                value,
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            ),
            _ => {}
        }
    }
    match text(&crd, &["spec", "scope"]) {
        "Namespaced" | "Cluster" => {}
        "" => errors.required(&spec.child("scope")),
        other => errors.not_supported(&spec.child("scope"), other, &["Cluster", "Namespaced"]),
    }
    let versions = crd["spec"]["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        errors.required(&spec.child("versions"));
    }
    let stored = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count();
    if !versions.is_empty() && stored != 1 {
        let names: Vec<&str> = versions.iter().filter_map(|v| v["name"].as_str()).collect();
        errors.invalid(
            &spec.child("versions"),
            names.join(","),
            "must have exactly one version marked as storage version",
        );
    }
    let mut seen = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let at = spec.child("versions").index(i);
        let name = v["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            errors.required(&at.child("name"));
        } else if !is_dns1035(name) {
            errors.invalid(
                &at.child("name"),
                name,
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            );
        } else if seen.contains(&name) {
            errors.duplicate(&at.child("name"), name);
        }
        seen.push(name);
        match v.pointer("/schema/openAPIV3Schema").filter(|s| s.is_object()) {
            None => errors.required_because(
                &at.child("schema").child("openAPIV3Schema"),
                "schemas are required",
            ),
            Some(schema) => {
                let path = at.child("schema").child("openAPIV3Schema");
                if let Err(found) = crate::schema::Schema::compile(schema, &path.0) {
                    for e in found {
                        errors.push_error(e);
                    }
                }
            }
        }
        if v.pointer("/subresources/scale").is_some_and(Value::is_object)
            && v.pointer("/subresources/scale/specReplicasPath")
                .and_then(Value::as_str)
                .is_none()
        {
            errors.required(&at.child("subresources").child("scale").child("specReplicasPath"));
        }
    }
    if versions.iter().all(|v| v["served"].as_bool() != Some(true)) && !versions.is_empty() {
        errors.invalid(
            &spec.child("versions"),
            "",
            "must have at least one served version",
        );
    }
    match text(&crd, &["spec", "conversion", "strategy"]) {
        "" | "None" => {}
        "Webhook" => errors.invalid(
            &spec.child("conversion").child("strategy"),
            "Webhook",
            "webhook conversion is not supported: this server calls no webhooks (use None)",
        ),
        other => errors.not_supported(&spec.child("conversion").child("strategy"), other, &["None"]),
    }
}

pub(crate) fn validate_update(object: &Map<String, Value>, old: &Map<String, Value>, errors: &mut Errors) {
    let (new, old) = (Value::Object(object.clone()), Value::Object(old.clone()));
    for field in ["group", "scope"] {
        let (now, before) = (text(&new, &["spec", field]), text(&old, &["spec", field]));
        if now != before {
            errors.invalid(&Path::new("spec").child(field), now, "field is immutable");
        }
    }
}

fn is_dns1035(s: &str) -> bool {
    is_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

fn is_label(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
