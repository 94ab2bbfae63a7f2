//! Every kind's metadata, as apimachinery validates it: label keys and values, annotation
//! keys and their total size, finalizer names; and on an update, no finalizer added to an
//! object that is being deleted (it could hold the object forever after its deleter left).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::field::{Errors, Path, go_quote};
use super::names;

/// The most bytes an object's annotations may hold, keys and values together.
const ANNOTATIONS_MAX_BYTES: usize = 256 << 10;

fn metadata(object: &Map<String, Value>) -> Option<&Map<String, Value>> {
    object.get("metadata").and_then(Value::as_object)
}

fn strings<'a>(meta: Option<&'a Map<String, Value>>, field: &str) -> Vec<&'a str> {
    meta.and_then(|m| m.get(field))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Labels, annotations and finalizer names.
pub(super) fn validate(object: &Map<String, Value>, errors: &mut Errors) {
    let meta = metadata(object);
    let path = Path::new("metadata");
    if let Some(labels) = meta.and_then(|m| m.get("labels")).and_then(Value::as_object) {
        labels_of(labels, &path.child("labels"), errors);
    }
    if let Some(annotations) = meta.and_then(|m| m.get("annotations")).and_then(Value::as_object) {
        let field = path.child("annotations");
        let mut size = 0;
        for (key, value) in annotations {
            // Annotation keys are qualified names but for case.
            errors.invalid_each(&field, key, names::qualified_name(&key.to_lowercase()));
            size += key.len() + value.as_str().map_or(0, str::len);
        }
        if size > ANNOTATIONS_MAX_BYTES {
            errors.too_long(&field, ANNOTATIONS_MAX_BYTES);
        }
    }
    let field = path.child("finalizers");
    for finalizer in strings(meta, "finalizers") {
        errors.invalid_each(&field, finalizer, names::qualified_name(finalizer));
    }
}

/// A map of labels (an object's, a pod's node selector): each key a qualified name, each
/// value a label value; errors name the map, not the key, as the apiserver's do.
pub(super) fn labels_of(labels: &Map<String, Value>, field: &Path, errors: &mut Errors) {
    for (key, value) in labels {
        errors.invalid_each(field, key, names::qualified_name(key));
        if let Some(value) = value.as_str() {
            errors.invalid_each(field, value, names::label_value(value));
        }
    }
}

/// What an update of the metadata may not do: add a finalizer once the object is being
/// deleted.
pub(super) fn validate_update(object: &Map<String, Value>, old: &Map<String, Value>, errors: &mut Errors) {
    let old_meta = metadata(old);
    let deleting = old_meta
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|d| !d.is_null());
    if !deleting {
        return;
    }
    let before: BTreeSet<&str> = strings(old_meta, "finalizers").into_iter().collect();
    let added: BTreeSet<&str> = strings(metadata(object), "finalizers")
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if !added.is_empty() {
        // Listed as Go prints a []string with %#v.
        let listed: Vec<String> = added.iter().map(|f| go_quote(f)).collect();
        errors.forbidden(
            &Path::new("metadata").child("finalizers"),
            format!(
                "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                listed.join(", ")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::field::{obj, shown};
    use super::*;

    #[test]
    fn new_finalizers_are_forbidden_once_deleting() {
        let old = obj(json!({"metadata": {"deletionTimestamp": "t", "finalizers": ["a/x"]}}));
        let new = obj(json!({"metadata": {"deletionTimestamp": "t", "finalizers": ["c/z", "a/x", "b/y"]}}));
        assert_eq!(
            shown(|e| validate_update(&new, &old, e)),
            [
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, \
                 found new finalizers []string{\"b/y\", \"c/z\"}"
            ]
        );
        let removed = obj(json!({"metadata": {"finalizers": []}}));
        assert!(shown(|e| validate_update(&removed, &old, e)).is_empty());
        let live = obj(json!({"metadata": {"finalizers": []}}));
        assert!(
            shown(|e| validate_update(&new, &live, e)).is_empty(),
            "not being deleted"
        );
    }

    #[test]
    fn annotations_are_checked_case_blind_and_sized() {
        let ok = obj(json!({"metadata": {"annotations": {"Example.com/Note": "x"}}}));
        assert!(shown(|e| validate(&ok, e)).is_empty());
        let big = obj(json!({"metadata": {"annotations": {"a": "x".repeat(ANNOTATIONS_MAX_BYTES)}}}));
        assert_eq!(
            shown(|e| validate(&big, e)),
            ["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }
}
