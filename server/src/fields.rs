//! Field ownership (`metadata.managedFields`), as server-side apply keeps it.
//!
//! Every write records which manager set which fields, in the apiserver's `FieldsV1` form: a
//! tree whose keys are `f:<field>`, `k:<merge key as JSON>` for an element of a keyed list,
//! `v:<value as JSON>` for an element of a set, and `.` for an element (or a map) itself.
//! An update (POST, PUT, PATCH) gives its manager the fields it changed and takes them from
//! every other manager. An apply ([`apply`](crate::apply)) owns exactly the fields of its
//! configuration: it conflicts with another manager that owns one of them with a different
//! value, unless forced, and a field it owned and no longer sets is removed unless someone
//! else owns it too.
//!
//! What this does not model (structured-merge-diff does, from the OpenAPI schema): a map
//! field and a struct field look alike here, so `.` marks list elements and the known map
//! fields only ([`MAP_FIELDS`]); and the manager's apiVersion is always `v1`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::strategic::{ListStrategy, list_strategy};

/// A set of field paths, as a `FieldsV1` tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fields(BTreeMap<String, Fields>);

/// Fields of map type (`map[string]…` in the Go types) whose existence is owned with `.`,
/// as the apiserver records them.
const MAP_FIELDS: &[&str] = &[
    "metadata.labels",
    "metadata.annotations",
    "data",
    "binaryData",
    "stringData",
    "spec.nodeSelector",
];

/// Fields no manager owns: identity and what the server sets.
const UNOWNED: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.resourceVersion",
    "metadata.generation",
    "metadata.creationTimestamp",
    "metadata.deletionTimestamp",
    "metadata.deletionGracePeriodSeconds",
    "metadata.managedFields",
    "metadata.selfLink",
];

/// One segment of a field path.
pub(crate) type Segment = String;

impl Fields {
    /// The fields set in `object`, an object of `kind`.
    pub(crate) fn of(kind: &str, object: &Map<String, Value>) -> Fields {
        let mut out = Fields::default();
        out.add_map(kind, "", object);
        out
    }

    fn add_map(&mut self, kind: &str, path: &str, map: &Map<String, Value>) {
        for (k, v) in map {
            let field_path = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if UNOWNED.contains(&field_path.as_str()) {
                continue;
            }
            let mut child = Fields::default();
            child.add_value(kind, &field_path, v);
            // A map whose every field is unowned (metadata with just a name) is no field.
            let only_unowned = child.is_empty() && v.as_object().is_some_and(|m| !m.is_empty());
            if !only_unowned {
                self.0.insert(format!("f:{k}"), child);
            }
        }
    }

    fn add_value(&mut self, kind: &str, path: &str, value: &Value) {
        match value {
            Value::Object(m) => {
                if MAP_FIELDS.contains(&path) {
                    self.0.insert(".".into(), Fields::default());
                }
                self.add_map(kind, path, m);
            }
            Value::Array(items) => match list_strategy(kind, path) {
                ListStrategy::Replace => {}
                ListStrategy::MergeSet => {
                    for item in items {
                        self.0.insert(format!("v:{item}"), Fields::default());
                    }
                }
                ListStrategy::MergeByKey(key) => {
                    for item in items {
                        let Some((id, element)) = item
                            .as_object()
                            .and_then(|m| Some((element_key(key, m.get(key)?), m)))
                        else {
                            continue;
                        };
                        let child = self.0.entry(id).or_default();
                        child.0.insert(".".into(), Fields::default());
                        child.add_map(kind, path, element);
                    }
                }
            },
            _ => {}
        }
    }

    /// Whether the set is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every path in the set that ends in a leaf (a value, an atomic list, or `.`).
    pub(crate) fn leaves(&self) -> Vec<Vec<Segment>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<Segment>, out: &mut Vec<Vec<Segment>>) {
        for (k, child) in &self.0 {
            prefix.push(k.clone());
            if child.0.is_empty() {
                out.push(prefix.clone());
            } else {
                child.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// Whether `path` is a leaf of the set.
    pub(crate) fn contains(&self, path: &[Segment]) -> bool {
        let mut at = self;
        for seg in path {
            match at.0.get(seg) {
                Some(next) => at = next,
                None => return false,
            }
        }
        at.0.is_empty()
    }

    /// Adds `path` as a leaf.
    pub(crate) fn insert(&mut self, path: &[Segment]) {
        let mut at = self;
        for seg in path {
            at = at.0.entry(seg.clone()).or_default();
        }
    }

    /// Removes leaf `path`, and the branches it leaves empty.
    pub(crate) fn remove(&mut self, path: &[Segment]) {
        fn go(at: &mut Fields, path: &[Segment]) {
            let Some((first, rest)) = path.split_first() else {
                return;
            };
            if rest.is_empty() {
                at.0.remove(first);
            } else if let Some(child) = at.0.get_mut(first) {
                go(child, rest);
                if child.0.is_empty() {
                    at.0.remove(first);
                }
            }
        }
        go(self, path);
    }

    /// The set as `FieldsV1` JSON.
    pub(crate) fn to_json(&self) -> Value {
        Value::Object(self.0.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
    }

    /// A `FieldsV1` JSON tree; anything else is an empty set.
    pub(crate) fn from_json(v: &Value) -> Fields {
        match v {
            Value::Object(m) => Fields(m.iter().map(|(k, v)| (k.clone(), Fields::from_json(v))).collect()),
            _ => Fields::default(),
        }
    }
}

/// The `k:` segment of a keyed list's element.
fn element_key(key: &str, id: &Value) -> String {
    let mut m = Map::new();
    m.insert(key.to_owned(), id.clone());
    format!("k:{}", Value::Object(m))
}

/// The value at `path` in `object`: `Some(Value::Null)`-free, `None` when absent. A `.`
/// segment names the element or map itself.
pub(crate) fn value_at<'a>(object: &'a Map<String, Value>, path: &[Segment]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let field = first.strip_prefix("f:")?;
    let mut at = object.get(field)?;
    for seg in rest {
        at = step(at, seg)?;
    }
    Some(at)
}

fn step<'a>(at: &'a Value, seg: &str) -> Option<&'a Value> {
    if seg == "." {
        return Some(at);
    }
    if let Some(field) = seg.strip_prefix("f:") {
        return at.as_object()?.get(field);
    }
    let list = at.as_array()?;
    if let Some(key) = seg.strip_prefix("k:") {
        let want: Map<String, Value> = serde_json::from_str(key).ok()?;
        return list.iter().find(|item| {
            item.as_object()
                .is_some_and(|m| want.iter().all(|(k, v)| m.get(k) == Some(v)))
        });
    }
    let value: Value = serde_json::from_str(seg.strip_prefix("v:")?).ok()?;
    list.iter().find(|item| **item == value)
}

/// Removes the field at `path` from `object` (for `.`, the element or map that holds it).
pub(crate) fn remove_at(object: &mut Map<String, Value>, path: &[Segment]) {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    let path = match path.split_last() {
        Some((&".", parent)) => parent,
        _ => &path[..],
    };
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let Some((first, rest)) = parents.split_first() else {
        if let Some(field) = last.strip_prefix("f:") {
            object.remove(field);
        }
        return;
    };
    let Some(mut at) = first.strip_prefix("f:").and_then(|f| object.get_mut(f)) else {
        return;
    };
    for seg in rest {
        let next = match (seg.strip_prefix("f:"), &mut *at) {
            (Some(field), Value::Object(m)) => m.get_mut(field),
            (None, Value::Array(list)) => {
                let found = list.iter().position(|item| step_matches(item, seg));
                found.map(|i| &mut list[i])
            }
            _ => None,
        };
        match next {
            Some(next) => at = next,
            None => return,
        }
    }
    match (last.strip_prefix("f:"), at) {
        (Some(field), Value::Object(m)) => {
            m.remove(field);
        }
        (None, Value::Array(list)) => list.retain(|item| !step_matches(item, last)),
        _ => {}
    }
}

fn step_matches(item: &Value, seg: &str) -> bool {
    let holder = Value::Array(vec![item.clone()]);
    step(&holder, seg).is_some()
}

/// Whether `path` is a `.` leaf: it owns that an element or map exists, not its contents.
pub(crate) fn is_existence(path: &[Segment]) -> bool {
    path.last().is_some_and(|s| s == ".")
}

/// `path` as the apiserver prints it in a conflict: `.spec.containers[name="a"].image`.
pub(crate) fn display(path: &[Segment]) -> String {
    let mut out = String::new();
    for seg in path {
        if let Some(f) = seg.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = seg.strip_prefix("k:") {
            let m: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = seg.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        }
    }
    out
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Manager {
    pub(crate) manager: String,
    /// `Apply` or `Update`.
    pub(crate) operation: &'static str,
    /// `status` for writes through the status subresource; empty otherwise.
    pub(crate) subresource: String,
    pub(crate) time: String,
    pub(crate) fields: Fields,
}

/// The managers recorded in `object`'s `metadata.managedFields`. Entries that do not parse
/// are dropped, as the apiserver resets field sets it cannot decode.
pub(crate) fn managers(object: &Map<String, Value>) -> Vec<Manager> {
    let Some(Value::Array(entries)) = object.get("metadata").and_then(|m| m.get("managedFields")) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| {
            let e = e.as_object()?;
            let operation = match e.get("operation")?.as_str()? {
                "Apply" => "Apply",
                "Update" => "Update",
                _ => return None,
            };
            Some(Manager {
                manager: e.get("manager")?.as_str()?.to_owned(),
                operation,
                subresource: e
                    .get("subresource")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                time: e
                    .get("time")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                fields: Fields::from_json(e.get("fieldsV1").unwrap_or(&Value::Null)),
            })
        })
        .collect()
}

/// Writes `managers` into `object`'s `metadata.managedFields` (removed when there are none).
pub(crate) fn set_managers(object: &mut Map<String, Value>, managers: &[Manager], api_version: &str) {
    let Some(Value::Object(meta)) = object.get_mut("metadata") else {
        return;
    };
    let entries: Vec<Value> = managers
        .iter()
        .filter(|m| !m.fields.is_empty())
        .map(|m| {
            let mut e = Map::new();
            e.insert("manager".into(), Value::String(m.manager.clone()));
            e.insert("operation".into(), Value::String(m.operation.into()));
            e.insert("apiVersion".into(), Value::String(api_version.into()));
            e.insert("time".into(), Value::String(m.time.clone()));
            e.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            e.insert("fieldsV1".into(), m.fields.to_json());
            if !m.subresource.is_empty() {
                e.insert("subresource".into(), Value::String(m.subresource.clone()));
            }
            Value::Object(e)
        })
        .collect();
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(entries));
    }
}

/// Records an update by `manager` that turned `before` (empty for a create) into `after`:
/// the fields it added or changed become its own and no one else's; the fields it removed
/// are no one's.
pub(crate) fn record_update(
    kind: &str,
    managers: &mut Vec<Manager>,
    manager: &str,
    subresource: &str,
    now: &str,
    before: &Map<String, Value>,
    after: &Map<String, Value>,
) {
    let old = Fields::of(kind, before);
    let new = Fields::of(kind, after);
    let changed: Vec<Vec<Segment>> = new
        .leaves()
        .into_iter()
        .filter(|p| !old.contains(p) || (!is_existence(p) && value_at(before, p) != value_at(after, p)))
        .collect();
    let removed: Vec<Vec<Segment>> = old.leaves().into_iter().filter(|p| !new.contains(p)).collect();
    for m in managers.iter_mut() {
        for p in changed.iter().chain(&removed) {
            m.fields.remove(p);
        }
    }
    if !changed.is_empty() {
        let i = match managers
            .iter()
            .position(|m| m.manager == manager && m.operation == "Update" && m.subresource == subresource)
        {
            Some(i) => i,
            None => {
                managers.push(Manager {
                    manager: manager.to_owned(),
                    operation: "Update",
                    subresource: subresource.to_owned(),
                    time: String::new(),
                    fields: Fields::default(),
                });
                managers.len() - 1
            }
        };
        managers[i].time = now.to_owned();
        for p in &changed {
            managers[i].fields.insert(p);
        }
    }
    managers.retain(|m| !m.fields.is_empty());
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn fields_v1_has_the_apiservers_shape() {
        let pod = obj(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "x"}, "finalizers": ["f"]},
            "spec": {"containers": [{"name": "a", "image": "i", "ports": [{"containerPort": 80}]}],
                     "tolerations": [{"key": "k"}]}
        }));
        let f = Fields::of("Pod", &pod).to_json();
        assert_eq!(
            f,
            json!({
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:finalizers": {"v:\"f\"": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"a\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80}": {".": {}, "f:containerPort": {}}}
                    }},
                    "f:tolerations": {}
                }
            })
        );
        assert_eq!(Fields::from_json(&f), Fields::of("Pod", &pod));
    }

    #[test]
    fn values_are_found_and_removed_by_path() {
        let mut pod = obj(
            json!({"spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b"}]},
                                  "metadata": {"finalizers": ["x", "y"]}}),
        );
        let image: Vec<Segment> = vec![
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"a\"}".into(),
            "f:image".into(),
        ];
        assert_eq!(value_at(&pod, &image), Some(&json!("i")));
        assert_eq!(display(&image), ".spec.containers[name=\"a\"].image");
        remove_at(&mut pod, &image);
        assert_eq!(pod["spec"]["containers"][0], json!({"name": "a"}));
        let element: Vec<Segment> = vec![
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"b\"}".into(),
            ".".into(),
        ];
        remove_at(&mut pod, &element);
        assert_eq!(pod["spec"]["containers"], json!([{"name": "a"}]));
        let set: Vec<Segment> = vec!["f:metadata".into(), "f:finalizers".into(), "v:\"x\"".into()];
        remove_at(&mut pod, &set);
        assert_eq!(pod["metadata"]["finalizers"], json!(["y"]));
    }

    #[test]
    fn an_update_takes_the_fields_it_changes_from_other_managers() {
        let before = obj(json!({"metadata": {"labels": {"a": "1", "b": "2"}}}));
        let mut managers = Vec::new();
        record_update(
            "ConfigMap",
            &mut managers,
            "creator",
            "",
            "t0",
            &Map::new(),
            &before,
        );
        assert_eq!(managers.len(), 1);
        let after = obj(json!({"metadata": {"labels": {"a": "1", "b": "3"}}}));
        record_update("ConfigMap", &mut managers, "labeller", "", "t1", &before, &after);
        let by = |name: &str| {
            managers
                .iter()
                .find(|m| m.manager == name)
                .unwrap()
                .fields
                .leaves()
        };
        let b: Vec<Segment> = vec!["f:metadata".into(), "f:labels".into(), "f:b".into()];
        assert!(by("labeller").contains(&b));
        assert!(!by("creator").contains(&b));
        assert_eq!(by("labeller").len(), 1, "only what it changed");
    }
}
