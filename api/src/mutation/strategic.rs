//! Strategic merge patch (`application/strategic-merge-patch+json`), as the apiserver applies it
//! to the built-in types.
//!
//! A strategic patch is a JSON merge patch (RFC 7396) that knows lists: a list whose field
//! declares a merge key (a pod's `containers` by `name`, a container's `ports` by
//! `containerPort`) is merged element by element, matched on that key; a list of scalars
//! declared `merge` (`metadata.finalizers`) is merged as a set; any other list is replaced.
//! The patch may carry directives, which kubectl's apply and edit send:
//!
//! - `"$patch": "replace"` in a map replaces the map; as an element of a list, the list;
//! - `"$patch": "delete"` in a map deletes it; in a keyed list's element, that element;
//! - `"$deleteFromPrimitiveList/<field>": [...]` removes those values from a scalar list;
//! - `"$setElementOrder/<field>": [...]` orders a merged list (by merge key, or by value);
//! - `"$retainKeys": [...]` keeps only those keys of the map (volumes carry it).
//!
//! Which lists merge, and on which key, is the built-in types' `patchStrategy` and
//! `patchMergeKey` ([`list_strategy`]); the OpenAPI documents publish the same table.
//!
//! Every list is indexed once per merge (elements by value, or by merge key, in hash maps), so
//! merging, deleting and ordering cost time linear in the list and the patch, not their
//! product: a patch of a few thousand finalizers against tens of thousands must not take
//! seconds.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Map, Value};

use crate::mutation::value_key::{OwnedKey, ValueKey};

/// How a list field is patched.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// Atomic: the patch's list replaces the object's (no `patchStrategy` on the field).
    Replace,
    /// `patchStrategy: merge` with `patchMergeKey`: elements are maps, matched on the key.
    MergeByKey(&'static str),
    /// `patchStrategy: merge` on a list of scalars: a set union.
    MergeSet,
}

/// Every list field of the served types with a merge strategy, by kind and dotted path from
/// the object's root (list elements add no segment: `spec.containers.ports` is each
/// container's `ports`). Fields not listed are atomic. From the built-in types' Go struct
/// tags (`patchStrategy`, `patchMergeKey`).
pub const MERGE_LISTS: &[(&str, &str, ListStrategy)] = {
    use ListStrategy::{MergeByKey, MergeSet};
    &[
        ("*", "metadata.finalizers", MergeSet),
        ("*", "metadata.ownerReferences", MergeByKey("uid")),
        ("Pod", "spec.volumes", MergeByKey("name")),
        ("Pod", "spec.initContainers", MergeByKey("name")),
        ("Pod", "spec.containers", MergeByKey("name")),
        ("Pod", "spec.ephemeralContainers", MergeByKey("name")),
        ("Pod", "spec.imagePullSecrets", MergeByKey("name")),
        ("Pod", "spec.hostAliases", MergeByKey("ip")),
        ("Pod", "spec.topologySpreadConstraints", MergeByKey("topologyKey")),
        ("Pod", "spec.resourceClaims", MergeByKey("name")),
        ("Pod", "spec.schedulingGates", MergeByKey("name")),
        ("Pod", "spec.containers.ports", MergeByKey("containerPort")),
        ("Pod", "spec.containers.env", MergeByKey("name")),
        ("Pod", "spec.containers.volumeMounts", MergeByKey("mountPath")),
        ("Pod", "spec.containers.volumeDevices", MergeByKey("devicePath")),
        ("Pod", "spec.initContainers.ports", MergeByKey("containerPort")),
        ("Pod", "spec.initContainers.env", MergeByKey("name")),
        ("Pod", "spec.initContainers.volumeMounts", MergeByKey("mountPath")),
        (
            "Pod",
            "spec.initContainers.volumeDevices",
            MergeByKey("devicePath"),
        ),
        ("Pod", "spec.ephemeralContainers.env", MergeByKey("name")),
        (
            "Pod",
            "spec.ephemeralContainers.volumeMounts",
            MergeByKey("mountPath"),
        ),
        (
            "Pod",
            "spec.ephemeralContainers.volumeDevices",
            MergeByKey("devicePath"),
        ),
        ("Pod", "status.conditions", MergeByKey("type")),
        ("Pod", "status.podIPs", MergeByKey("ip")),
        ("Pod", "status.hostIPs", MergeByKey("ip")),
        ("Node", "spec.podCIDRs", MergeSet),
        ("Node", "status.conditions", MergeByKey("type")),
        ("Node", "status.addresses", MergeByKey("type")),
        ("Namespace", "status.conditions", MergeByKey("type")),
        ("Service", "spec.ports", MergeByKey("port")),
        ("ServiceAccount", "secrets", MergeByKey("name")),
        ("PersistentVolumeClaim", "status.conditions", MergeByKey("type")),
        ("Deployment", "status.conditions", MergeByKey("type")),
        ("ReplicaSet", "status.conditions", MergeByKey("type")),
        ("StatefulSet", "status.conditions", MergeByKey("type")),
        ("DaemonSet", "status.conditions", MergeByKey("type")),
        ("ReplicationController", "status.conditions", MergeByKey("type")),
        ("Job", "status.conditions", MergeByKey("type")),
        ("PodDisruptionBudget", "status.conditions", MergeByKey("type")),
    ]
};

/// Where each kind that carries a pod template keeps it: the template's lists merge as a
/// pod's do (a Deployment's `spec.template.spec.containers` by name), as the apiserver's
/// shared PodSpec type makes them.
const POD_TEMPLATES: &[(&str, &str)] = &[
    ("Deployment", "spec.template."),
    ("ReplicaSet", "spec.template."),
    ("StatefulSet", "spec.template."),
    ("DaemonSet", "spec.template."),
    ("ReplicationController", "spec.template."),
    ("Job", "spec.template."),
    ("CronJob", "spec.jobTemplate.spec.template."),
    ("PodTemplate", "template."),
];

/// The strategy of the list at dotted `path` in an object of `kind`.
pub fn list_strategy(kind: &str, path: &str) -> ListStrategy {
    let declared = |kind: &str, path: &str| {
        MERGE_LISTS
            .iter()
            .find(|(k, p, _)| (*k == "*" || *k == kind) && *p == path)
            .map(|(_, _, s)| *s)
    };
    declared(kind, path)
        .or_else(|| {
            let (_, prefix) = POD_TEMPLATES.iter().find(|(k, _)| *k == kind)?;
            // The template's spec is a pod's, its metadata an object's (a CronJob's job
            // template's metadata too).
            let in_pod = path
                .strip_prefix(prefix)
                .or_else(|| {
                    path.strip_prefix("spec.jobTemplate.")
                        .filter(|_| kind == "CronJob")
                        .filter(|p| p.starts_with("metadata."))
                })
                .filter(|p| p.starts_with("spec.") || p.starts_with("metadata."))?;
            declared("Pod", in_pod)
        })
        .unwrap_or(ListStrategy::Replace)
}

/// Why a strategic patch could not be applied: the apiserver answers 422.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct PatchError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, PatchError> {
    Err(PatchError(message.into()))
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Applies the strategic merge `patch` to `object`, an object of `kind`.
pub fn apply(
    kind: &str,
    object: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<(), PatchError> {
    match merge_map(kind, "", object, patch)? {
        Outcome::Keep => Ok(()),
        Outcome::Delete => err("a strategic merge patch cannot delete the object itself"),
    }
}

/// What a map's own `$patch` directive asks of the map's parent.
enum Outcome {
    Keep,
    Delete,
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn merge_map(
    kind: &str,
    path: &str,
    object: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Outcome, PatchError> {
    match patch.get(PATCH) {
        None => {}
        Some(Value::String(s)) if s == "replace" => {
            // The rest of the patch is the map, its own directives applied to nothing.
            let mut fresh = Map::new();
            let rest: Map<String, Value> = patch
                .iter()
                .filter(|(k, _)| *k != PATCH)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            merge_map(kind, path, &mut fresh, &rest)?;
            *object = fresh;
            return Ok(Outcome::Keep);
        }
        Some(Value::String(s)) if s == "delete" => return Ok(Outcome::Delete),
        Some(other) => return err(format!("unknown patch type {other} in {}", at(path))),
    }
    let mut orders = Vec::new();
    for (key, value) in patch {
        if key == RETAIN_KEYS {
            continue;
        }
        if let Some(field) = key.strip_prefix(SET_ORDER) {
            let Value::Array(order) = value else {
                return err(format!("{key} in {} is not a list", at(path)));
            };
            orders.push((field, order));
            continue;
        }
        if let Some(field) = key.strip_prefix(DELETE_FROM) {
            let Value::Array(remove) = value else {
                return err(format!("{key} in {} is not a list", at(path)));
            };
            if let Some(Value::Array(list)) = object.get_mut(field) {
                let remove: HashSet<ValueKey<'_>> = remove.iter().map(ValueKey).collect();
                list.retain(|v| !remove.contains(&ValueKey(v)));
            }
            continue;
        }
        if key.starts_with('$') {
            return err(format!("unknown directive {key} in {}", at(path)));
        }
        let field_path = join(path, key);
        match value {
            Value::Null => {
                object.remove(key);
            }
            Value::Object(sub) => {
                let mut current = match object.remove(key) {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                if let Outcome::Keep = merge_map(kind, &field_path, &mut current, sub)? {
                    object.insert(key.clone(), Value::Object(current));
                }
            }
            Value::Array(items) => {
                let current = match object.remove(key) {
                    Some(Value::Array(list)) => list,
                    _ => Vec::new(),
                };
                let merged = merge_list(kind, &field_path, current, items)?;
                object.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                object.insert(key.clone(), scalar.clone());
            }
        }
    }
    for (field, order) in orders {
        let strategy = list_strategy(kind, &join(path, field));
        if let Some(Value::Array(list)) = object.get_mut(field) {
            reorder(list, order, strategy)?;
        }
    }
    match patch.get(RETAIN_KEYS) {
        None => {}
        Some(Value::Array(keep)) => {
            let mut names = HashSet::with_capacity(keep.len());
            for k in keep {
                let Value::String(k) = k else {
                    return err(format!("$retainKeys in {} holds a non-string", at(path)));
                };
                names.insert(k.as_str());
            }
            object.retain(|k, _| names.contains(k.as_str()));
        }
        Some(_) => return err(format!("$retainKeys in {} is not a list", at(path))),
    }
    Ok(Outcome::Keep)
}

fn at(path: &str) -> &str {
    if path.is_empty() { "the object" } else { path }
}

fn is_directive(item: &Value, which: &str) -> bool {
    item.as_object()
        .and_then(|m| m.get(PATCH))
        .is_some_and(|v| v == which)
}

fn merge_list(
    kind: &str,
    path: &str,
    mut current: Vec<Value>,
    patch: &[Value],
) -> Result<Vec<Value>, PatchError> {
    let strategy = list_strategy(kind, path);
    // `{"$patch": "replace"}` as an element: the patch's other elements are the list.
    let replace = patch.iter().any(|item| is_directive(item, "replace"));
    if strategy == ListStrategy::Replace || replace {
        let mut out = Vec::with_capacity(patch.len());
        for item in patch.iter().filter(|item| !is_directive(item, "replace")) {
            out.push(fresh(kind, path, item)?);
        }
        return Ok(out);
    }
    match strategy {
        ListStrategy::Replace => unreachable!("handled above"),
        ListStrategy::MergeSet => {
            // The values the list holds, and those the patch adds (once each, in its order).
            let mut added = Vec::new();
            {
                let mut present: HashSet<ValueKey<'_>> = current.iter().map(ValueKey).collect();
                for item in patch {
                    if item.is_object() || item.is_array() {
                        return err(format!("{path} is a list of values; the patch holds {item}"));
                    }
                    if present.insert(ValueKey(item)) {
                        added.push(item.clone());
                    }
                }
            }
            current.extend(added);
            Ok(current)
        }
        ListStrategy::MergeByKey(key) => merge_by_key(kind, path, key, current, patch),
    }
}

/// The merge key of `element`, if it is a map that has one.
fn id_of<'v>(element: &'v Value, key: &str) -> Option<&'v Value> {
    element.as_object().and_then(|m| m.get(key))
}

/// A keyed list merged with the patch's elements, in the patch's order: an element with a key
/// the list has is merged into the first element with that key (or, with `$patch: delete`,
/// every element with it goes); any other is appended. The list is indexed once: for each key,
/// the positions of the elements that have it, first first.
fn merge_by_key(
    kind: &str,
    path: &str,
    key: &str,
    current: Vec<Value>,
    patch: &[Value],
) -> Result<Vec<Value>, PatchError> {
    let mut slots: Vec<Option<Value>> = current.into_iter().map(Some).collect();
    let mut by_id: HashMap<OwnedKey, VecDeque<usize>> = HashMap::new();
    for (i, slot) in slots.iter().enumerate() {
        if let Some(id) = slot.as_ref().and_then(|e| id_of(e, key)) {
            by_id.entry(OwnedKey(id.clone())).or_default().push_back(i);
        }
    }
    // Files position `i` under the key its element has now (if any), in list order.
    let index = |by_id: &mut HashMap<OwnedKey, VecDeque<usize>>, slots: &[Option<Value>], i: usize| {
        if let Some(id) = slots[i].as_ref().and_then(|e| id_of(e, key)) {
            let positions = by_id.entry(OwnedKey(id.clone())).or_default();
            let at = positions.partition_point(|&p| p < i);
            positions.insert(at, i);
        }
    };
    for item in patch {
        let Value::Object(element) = item else {
            return err(format!(
                "{path} is merged by {key:?}; the patch's element {item} is not a map"
            ));
        };
        let Some(id) = element.get(key) else {
            return err(format!(
                "{path}: the patch's element {item} does not contain the merge key {key:?}"
            ));
        };
        let id = OwnedKey(id.clone());
        if is_directive(item, "delete") {
            for i in by_id.remove(&id).unwrap_or_default() {
                slots[i] = None;
            }
            continue;
        }
        match by_id.get(&id).and_then(|p| p.front().copied()) {
            Some(i) => {
                let Some(Value::Object(existing)) = &mut slots[i] else {
                    unreachable!("indexed by a map's key");
                };
                let outcome = merge_map(kind, path, existing, element)?;
                // The element leaves its key's index if it goes, or if the merge changed its
                // key (`$retainKeys` can drop it); it is filed again under a new one.
                let still = matches!(outcome, Outcome::Keep)
                    && slots[i].as_ref().and_then(|e| id_of(e, key)) == Some(&id.0);
                if !still {
                    if let Entry::Occupied(mut e) = by_id.entry(id) {
                        e.get_mut().pop_front();
                        if e.get().is_empty() {
                            e.remove();
                        }
                    }
                    match outcome {
                        Outcome::Delete => slots[i] = None,
                        Outcome::Keep => index(&mut by_id, &slots, i),
                    }
                }
            }
            None => {
                slots.push(Some(fresh(kind, path, item)?));
                index(&mut by_id, &slots, slots.len() - 1);
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// A patch value that has nothing to merge into, its directives applied to nothing.
fn fresh(kind: &str, path: &str, item: &Value) -> Result<Value, PatchError> {
    match item {
        Value::Object(patch) => {
            let mut out = Map::new();
            merge_map(kind, path, &mut out, patch)?;
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

/// Orders `list` as `$setElementOrder` asks: the elements it names, in its order; any other
/// element (one the patch did not mention, such as one a controller added) keeps its place
/// relative to its neighbours in the list as it was.
fn reorder(list: &mut Vec<Value>, order: &[Value], strategy: ListStrategy) -> Result<(), PatchError> {
    let identity = |v: &Value| -> Option<Value> {
        match strategy {
            ListStrategy::MergeByKey(key) => v.as_object().and_then(|m| m.get(key)).cloned(),
            _ => Some(v.clone()),
        }
    };
    // Each identity's first place in the order.
    let mut wanted: HashMap<OwnedKey, usize> = HashMap::with_capacity(order.len());
    for (rank, o) in order.iter().enumerate() {
        let id = identity(o)
            .ok_or_else(|| PatchError(format!("$setElementOrder element {o} has no merge key")))?;
        wanted.entry(OwnedKey(id)).or_insert(rank);
    }
    let mut original: Vec<Option<Value>> = std::mem::take(list).into_iter().map(Some).collect();
    let rank = |v: &Value| identity(v).and_then(|id| wanted.get(&OwnedKey(id)).copied());
    let mut named: Vec<(usize, usize)> = Vec::new(); // (rank, index in the list as it was)
    let mut others: Vec<usize> = Vec::new();
    for (i, v) in original.iter().enumerate() {
        match v.as_ref().and_then(rank) {
            Some(r) => named.push((r, i)),
            None => others.push(i),
        }
    }
    named.sort_unstable();
    // Merge the two sequences: an unnamed element goes before the next named one if it stood
    // before it in the list as it was.
    let (mut a, mut b) = (named.into_iter().peekable(), others.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(&(_, ai)), Some(&bi)) if bi < ai => b.next(),
            (Some(_), _) => a.next().map(|(_, i)| i),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        list.extend(next.and_then(|i| original[i].take()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn patched(kind: &str, object: Value, patch: Value) -> Result<Value, PatchError> {
        let mut object = object.as_object().unwrap().clone();
        apply(kind, &mut object, patch.as_object().unwrap())?;
        Ok(Value::Object(object))
    }

    fn pod(containers: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    #[test]
    fn a_container_is_merged_by_name_and_the_others_kept() {
        let before = pod(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]));
        let after = patched(
            "Pod",
            before,
            json!({"spec": {"containers": [{"name": "b", "image": "b:2"}]}}),
        )
        .unwrap();
        assert_eq!(
            after["spec"]["containers"],
            json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}])
        );
    }

    #[test]
    fn a_pod_templates_lists_merge_as_a_pods_in_every_kind_that_carries_one() {
        let containers = json!([{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]);
        let patch_at = |prefix: &[&str]| {
            let mut patch = json!({"spec": {"containers": [{"name": "b", "image": "b:2"},
                {"name": "a", "env": [{"name": "Y", "value": "2"}]}]}});
            let mut object = json!({"spec": {"containers": containers.clone()}});
            for key in prefix.iter().rev() {
                patch = json!({*key: patch});
                object = json!({*key: object});
            }
            (object, patch)
        };
        for (kind, prefix) in [
            ("Deployment", vec!["spec", "template"]),
            ("StatefulSet", vec!["spec", "template"]),
            ("CronJob", vec!["spec", "jobTemplate", "spec", "template"]),
            ("PodTemplate", vec!["template"]),
        ] {
            let (object, patch) = patch_at(&prefix);
            let mut after = patched(kind, object, patch).unwrap();
            for key in &prefix {
                after = after[*key].clone();
            }
            assert_eq!(
                after["spec"]["containers"],
                json!([{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
                    {"name": "b", "image": "b:2"}]),
                "{kind}"
            );
        }
        // The template's metadata merges as an object's.
        let object = json!({"spec": {"template": {"metadata": {"finalizers": ["a"]}}}});
        let patch = json!({"spec": {"template": {"metadata": {"finalizers": ["b"]}}}});
        let after = patched("Deployment", object, patch).unwrap();
        assert_eq!(
            after["spec"]["template"]["metadata"]["finalizers"],
            json!(["a", "b"])
        );
        let object = json!({"spec": {"jobTemplate": {"metadata": {"finalizers": ["a"]}}}});
        let patch = json!({"spec": {"jobTemplate": {"metadata": {"finalizers": ["b"]}}}});
        let after = patched("CronJob", object, patch).unwrap();
        assert_eq!(
            after["spec"]["jobTemplate"]["metadata"]["finalizers"],
            json!(["a", "b"])
        );
        // A Service's ports merge by port.
        let service =
            json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}});
        let after = patched(
            "Service",
            service,
            json!({"spec": {"ports": [{"port": 443, "targetPort": 8443}]}}),
        )
        .unwrap();
        assert_eq!(
            after["spec"]["ports"],
            json!([{"port": 80, "name": "http"}, {"port": 443, "name": "https", "targetPort": 8443}])
        );
    }

    #[test]
    fn a_new_keyed_element_is_appended_and_nested_lists_merge_by_their_own_keys() {
        let before = pod(
            json!([{"name": "a", "env": [{"name": "X", "value": "1"}], "ports": [{"containerPort": 80}]}]),
        );
        let patch = json!({"spec": {"containers": [
            {"name": "a", "env": [{"name": "Y", "value": "2"}], "ports": [{"containerPort": 80, "protocol": "TCP"}]},
            {"name": "c", "image": "c"}
        ]}});
        let after = patched("Pod", before, patch).unwrap();
        assert_eq!(
            after["spec"]["containers"],
            json!([
                {"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                {"name": "c", "image": "c"}
            ])
        );
    }

    #[test]
    fn lists_without_a_strategy_are_replaced() {
        let before = json!({"spec": {"tolerations": [{"key": "a"}], "containers": []}});
        let after = patched("Pod", before, json!({"spec": {"tolerations": [{"key": "b"}]}})).unwrap();
        assert_eq!(after["spec"]["tolerations"], json!([{"key": "b"}]));
    }

    #[test]
    fn null_deletes_a_field_and_maps_merge() {
        let before = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let after = patched(
            "ConfigMap",
            before,
            json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
        )
        .unwrap();
        assert_eq!(after["metadata"]["labels"], json!({"b": "2", "c": "3"}));
    }

    #[test]
    fn delete_and_replace_directives() {
        let before = pod(json!([{"name": "a"}, {"name": "b"}]));
        let after = patched(
            "Pod",
            before.clone(),
            json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(after["spec"]["containers"], json!([{"name": "b"}]));

        let after = patched(
            "Pod",
            before.clone(),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z"}]}}),
        )
        .unwrap();
        assert_eq!(after["spec"]["containers"], json!([{"name": "z"}]));

        let with_labels = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let after = patched(
            "Pod",
            with_labels.clone(),
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
        )
        .unwrap();
        assert_eq!(after["metadata"]["labels"], json!({"c": "3"}));
        let after = patched(
            "Pod",
            with_labels,
            json!({"metadata": {"labels": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert_eq!(after["metadata"], json!({}));
    }

    #[test]
    fn finalizers_merge_as_a_set_and_delete_from_primitive_list_removes() {
        let before = json!({"metadata": {"finalizers": ["a", "b"]}});
        let after = patched(
            "Pod",
            before.clone(),
            json!({"metadata": {"finalizers": ["b", "c"]}}),
        )
        .unwrap();
        assert_eq!(after["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let after = patched(
            "Pod",
            before,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(after["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn set_element_order_orders_named_elements_and_keeps_others_in_place() {
        let before = pod(json!([{"name": "a"}, {"name": "sidecar"}, {"name": "b"}]));
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "a", "image": "x"}]
        }});
        let after = patched("Pod", before, patch).unwrap();
        let names: Vec<&str> = after["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        // As apimachinery orders it: the sidecar stood before b, so it stays before b.
        assert_eq!(names, ["sidecar", "b", "a"]);
        assert_eq!(after["spec"]["containers"][2]["image"], "x");

        let before = pod(json!([{"name": "a"}, {"name": "b"}, {"name": "sidecar"}]));
        let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}});
        let after = patched("Pod", before, patch).unwrap();
        let names: Vec<&str> = after["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["b", "a", "sidecar"]);
    }

    #[test]
    fn retain_keys_drops_the_keys_not_named() {
        let before = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "containers": []}});
        let patch = json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}});
        let after = patched("Pod", before, patch).unwrap();
        assert_eq!(
            after["spec"]["volumes"],
            json!([{"name": "v", "hostPath": {"path": "/x"}}])
        );
    }

    #[test]
    fn malformed_patches_are_errors_not_panics() {
        let before = pod(json!([{"name": "a"}]));
        for patch in [
            json!({"spec": {"containers": [{"image": "no-name"}]}}),
            json!({"spec": {"containers": ["not-a-map"]}}),
            json!({"spec": {"$patch": "explode"}}),
            json!({"spec": {"$unknown": 1}}),
            json!({"spec": {"$setElementOrder/containers": 3}}),
            json!({"spec": {"$retainKeys": [1]}}),
            json!({"metadata": {"finalizers": [{"x": 1}]}}),
            json!({"$patch": "delete"}),
        ] {
            assert!(patched("Pod", before.clone(), patch.clone()).is_err(), "{patch}");
        }
    }
}
