//! Field ownership (`metadata.managedFields`), as server-side apply keeps it.
//!
//! Every write records which manager set which fields, in the apiserver's `FieldsV1` form: a
//! tree whose keys are `f:<field>`, `k:<merge key as JSON>` for an element of a keyed list,
//! `v:<value as JSON>` for an element of a set, and `.` for an element (or a map) itself.
//! An update (POST, PUT, PATCH) gives its manager the fields it changed and takes them from
//! every other manager. An apply ([`apply`](crate::mutation::apply)) owns exactly the fields of its
//! configuration: it conflicts with another manager that owns one of them with a different
//! value, unless forced, and a field it owned and no longer sets is removed unless someone
//! else owns it too.
//!
//! Which lists are keyed, sets or atomic is the kind's ([`ListRules`]): a built-in type's
//! patch strategies, or a custom resource's `x-kubernetes-list-type` and
//! `x-kubernetes-list-map-keys` (an element of a list keyed on several fields is
//! `k:{"port":80,"protocol":"TCP"}`).
//!
//! What this does not model (structured-merge-diff does, from the OpenAPI schema): a map
//! field and a struct field look alike here, so `.` marks list elements and the known map
//! fields only ([`ListRules::is_map`]); and a field set is not converted between versions:
//! each entry keeps the API version its manager last wrote in, but a write in one version
//! compares its fields with another version's entries by name (which differ only where a
//! kind renames fields between versions, as an events.k8s.io Event does a core Event's).
//!
//! Each object a write compares is walked once ([`Indexed`]): its field set and the value at
//! each of its fields, by path, in a hash map. Comparing two objects field by field, and
//! removing many fields at once ([`remove_all`], which indexes each list it meets by element
//! or merge key), then take time linear in the object (times the depth of a path), where
//! looking each path up in the object again searched its lists once per field: quadratic in a
//! list's length (40,000 finalizers took 10 s per PATCH).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::mutation::strategic::{self, ListRules, ListStrategy};
use crate::mutation::value_key::ValueKey;

/// A set of field paths, as a `FieldsV1` tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields(BTreeMap<String, Fields>);

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
pub type Segment = String;

/// Where a walk that builds a field set records the value at each leaf: the path from the
/// root, and the values by path. Off inside the second and later elements of a keyed list
/// that share a key: a path through that key names the first such element.
struct Recorder<'a> {
    path: Vec<Segment>,
    values: HashMap<Vec<Segment>, &'a Value>,
    on: bool,
}

impl<'a> Recorder<'a> {
    fn leaf(&mut self, value: &'a Value) {
        if self.on {
            self.values.entry(self.path.clone()).or_insert(value);
        }
    }
}

impl Fields {
    fn add_map<'a>(
        &mut self,
        rules: ListRules<'_>,
        path: &str,
        map: &'a Map<String, Value>,
        rec: &mut Recorder<'a>,
    ) {
        for (k, v) in map {
            let field_path = strategic::join(path, k);
            if UNOWNED.contains(&field_path.as_str()) {
                continue;
            }
            rec.path.push(format!("f:{k}"));
            let mut child = Fields::default();
            child.add_value(rules, &field_path, v, rec);
            // A map whose every field is unowned (metadata with just a name) is no field.
            let only_unowned = child.is_empty() && v.as_object().is_some_and(|m| !m.is_empty());
            if !only_unowned {
                if child.is_empty() {
                    rec.leaf(v);
                }
                self.0.insert(format!("f:{k}"), child);
            }
            rec.path.pop();
        }
    }

    fn add_value<'a>(&mut self, rules: ListRules<'_>, path: &str, value: &'a Value, rec: &mut Recorder<'a>) {
        match value {
            Value::Object(m) => {
                if rules.is_map(path) {
                    self.0.insert(".".into(), Fields::default());
                    rec.path.push(".".into());
                    rec.leaf(value);
                    rec.path.pop();
                }
                self.add_map(rules, path, m, rec);
            }
            Value::Array(items) => match rules.strategy(path) {
                ListStrategy::Replace => {}
                ListStrategy::MergeSet => {
                    for item in items {
                        let seg = format!("v:{item}");
                        rec.path.push(seg.clone());
                        rec.leaf(item);
                        rec.path.pop();
                        self.0.insert(seg, Fields::default());
                    }
                }
                ListStrategy::MergeByKey(keys) => {
                    let mut seen = HashSet::new();
                    for item in items {
                        let Some((id, element)) = item.as_object().and_then(|m| Some((keys.segment(m)?, m)))
                        else {
                            continue;
                        };
                        let was_on = rec.on;
                        rec.on = was_on && seen.insert(id.clone());
                        rec.path.push(id.clone());
                        let child = self.0.entry(id).or_default();
                        child.0.insert(".".into(), Fields::default());
                        rec.path.push(".".into());
                        rec.leaf(item);
                        rec.path.pop();
                        child.add_map(rules, path, element, rec);
                        rec.path.pop();
                        rec.on = was_on;
                    }
                }
            },
            _ => {}
        }
    }

    /// Whether some path of the set starts with `prefix` (for the empty prefix: whether the set
    /// has any path).
    pub fn has_prefix(&self, prefix: &[Segment]) -> bool {
        let mut at = self;
        for seg in prefix {
            match at.0.get(seg) {
                Some(next) => at = next,
                None => return false,
            }
        }
        !prefix.is_empty() || !self.is_empty()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every path in the set that ends in a leaf (a value, an atomic list, or `.`).
    pub fn leaves(&self) -> Vec<Vec<Segment>> {
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
    pub fn contains(&self, path: &[Segment]) -> bool {
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
    pub fn insert(&mut self, path: &[Segment]) {
        let mut at = self;
        for seg in path {
            at = at.0.entry(seg.clone()).or_default();
        }
    }

    /// Removes leaf `path`, and the branches it leaves empty.
    pub fn remove(&mut self, path: &[Segment]) {
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
    pub fn to_json(&self) -> Value {
        Value::Object(self.0.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
    }

    /// A `FieldsV1` JSON tree; anything else is an empty set.
    pub fn from_json(v: &Value) -> Fields {
        match v {
            Value::Object(m) => Fields(m.iter().map(|(k, v)| (k.clone(), Fields::from_json(v))).collect()),
            _ => Fields::default(),
        }
    }
}

/// The fields set in an object and the value at each of them, from one walk over it: what an
/// update or an apply compares path by path.
pub struct Indexed<'a> {
    /// The fields set.
    pub fields: Fields,
    values: HashMap<Vec<Segment>, &'a Value>,
}

impl<'a> Indexed<'a> {
    /// `object`, whose lists are as `rules` says, walked once.
    pub fn of(rules: ListRules<'_>, object: &'a Map<String, Value>) -> Indexed<'a> {
        let mut rec = Recorder {
            path: Vec::new(),
            values: HashMap::new(),
            on: true,
        };
        let mut fields = Fields::default();
        // Ownership is structured-merge-diff's: a built-in type's lists keyed as it keys them.
        fields.add_map(rules.for_apply(), "", object, &mut rec);
        Indexed {
            fields,
            values: rec.values,
        }
    }

    /// The value at `path`, a leaf of the object's field set (`None` for a path that is not
    /// one): for a `.` leaf, the element or map itself.
    pub fn value(&self, path: &[Segment]) -> Option<&'a Value> {
        self.values.get(path).copied()
    }
}

/// Removes from `object` every field of `gone` (for a `.` path, the element or map that holds
/// it), as removing each path in turn would: a field by name; a list's element by its
/// `v:`/`k:` segment, every element it matches when the path ends there (or at its `.`), the
/// first one it matches when the path goes on into it. One walk over `gone` and the parts of
/// the object it names; each list met is indexed once by the segments `gone` names in it.
pub fn remove_all(object: &mut Map<String, Value>, gone: &Fields) {
    remove_in_map(object, gone);
}

/// Whether removing `sub` (the paths below a segment) removes what the segment names itself:
/// it is a leaf, or has a `.` leaf.
fn whole(sub: &Fields) -> bool {
    sub.is_empty() || sub.0.get(".").is_some_and(Fields::is_empty)
}

fn remove_in_map(map: &mut Map<String, Value>, gone: &Fields) {
    for (seg, sub) in &gone.0 {
        let Some(field) = seg.strip_prefix("f:") else {
            continue; // a list's segment where there is a map: it names nothing here
        };
        if whole(sub) {
            map.remove(field);
            continue;
        }
        match map.get_mut(field) {
            Some(Value::Object(m)) => remove_in_map(m, sub),
            Some(Value::Array(list)) => remove_in_list(list, sub),
            _ => {}
        }
    }
}

/// What a list's segment in `gone` matches: an element equal to a value (`v:`), or one whose
/// merge key has a value (`k:` with one key), or (any other `k:`) one whose keys all match.
enum Matcher {
    Value(Value),
    Key(String, Value),
    Keys(Map<String, Value>),
}

impl Matcher {
    fn parse(seg: &str) -> Option<Matcher> {
        if let Some(v) = seg.strip_prefix("v:") {
            return serde_json::from_str(v).ok().map(Matcher::Value);
        }
        let mut want: Map<String, Value> = serde_json::from_str(seg.strip_prefix("k:")?).ok()?;
        if want.len() == 1 {
            let (k, v) = std::mem::take(&mut want).into_iter().next()?;
            return Some(Matcher::Key(k, v));
        }
        Some(Matcher::Keys(want))
    }
}

fn remove_in_list(list: &mut Vec<Value>, gone: &Fields) {
    // The segments named here, by what they match; each with its paths below.
    let matchers: Vec<(Matcher, &Fields)> = gone
        .0
        .iter()
        .filter_map(|(seg, sub)| Some((Matcher::parse(seg)?, sub)))
        .collect();
    let mut by_value: HashMap<ValueKey<'_>, usize> = HashMap::new();
    let mut by_key: HashMap<&str, HashMap<ValueKey<'_>, usize>> = HashMap::new();
    // Segments on several keys, by their key names (in name order), then by their text as
    // an element's own segment on those names is written: each element is looked up once per
    // set of names, not compared with every segment.
    let mut by_keys: HashMap<Vec<&str>, HashMap<String, usize>> = HashMap::new();
    for (n, (m, _)) in matchers.iter().enumerate() {
        match m {
            Matcher::Value(v) => {
                by_value.entry(ValueKey(v)).or_insert(n);
            }
            Matcher::Key(k, v) => {
                by_key
                    .entry(k.as_str())
                    .or_default()
                    .entry(ValueKey(v))
                    .or_insert(n);
            }
            Matcher::Keys(want) => {
                // A serde_json map iterates in key order.
                let names: Vec<&str> = want.keys().map(String::as_str).collect();
                let text = strategic::key_segment(want.iter().map(|(k, v)| (k.as_str(), v)));
                by_keys.entry(names).or_default().entry(text).or_insert(n);
            }
        }
    }
    let matching = |item: &Value| -> Vec<usize> {
        let mut out: Vec<usize> = by_value.get(&ValueKey(item)).copied().into_iter().collect();
        if let Value::Object(m) = item {
            for (k, ids) in &by_key {
                out.extend(m.get(*k).and_then(|id| ids.get(&ValueKey(id))).copied());
            }
            for (names, ids) in &by_keys {
                let values: Option<Vec<(&str, &Value)>> =
                    names.iter().map(|k| Some((*k, m.get(*k)?))).collect();
                if let Some(values) = values {
                    out.extend(ids.get(&strategic::key_segment(values)).copied());
                }
            }
        }
        out
    };
    let mut entered = vec![false; matchers.len()];
    let mut keep = Vec::with_capacity(list.len());
    for item in list.iter_mut() {
        let mut remove = false;
        for n in matching(item) {
            let sub = matchers[n].1;
            if whole(sub) {
                remove = true;
            } else if !entered[n] {
                entered[n] = true;
                if let Value::Object(m) = item {
                    remove_in_map(m, sub);
                }
            }
        }
        keep.push(!remove);
    }
    let mut keep = keep.into_iter();
    list.retain(|_| keep.next().unwrap_or(true));
}

/// Whether `path` is a `.` leaf: it owns that an element or map exists, not its contents.
pub fn is_existence(path: &[Segment]) -> bool {
    path.last().is_some_and(|s| s == ".")
}

/// `path` as the apiserver prints it in a conflict: `.spec.containers[name="a"].image`.
pub fn display(path: &[Segment]) -> String {
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
pub struct Manager {
    /// The field manager's name (`kubectl-client-side-apply`).
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: &'static str,
    /// `status` for writes through the status subresource; empty otherwise.
    pub subresource: String,
    /// The API version its fields are named in (`example.com/v1beta1`): the version it last
    /// wrote in. Part of an updater's identity, as the apiserver keeps it: one updater writing
    /// in two versions has an entry for each. Empty: the version of the write that records it.
    pub api_version: String,
    /// When it last wrote, RFC 3339.
    pub time: String,
    /// The fields it owns.
    pub fields: Fields,
}

/// Who made a write, as its managedFields entry records it.
#[derive(Clone, Copy, Debug)]
pub struct Writer<'a> {
    /// The field manager's name.
    pub manager: &'a str,
    /// `status` for a write through the status subresource; empty otherwise.
    pub subresource: &'a str,
    /// The API version the write was made in.
    pub api_version: &'a str,
    /// When, RFC 3339.
    pub time: &'a str,
}

/// The managers recorded in `object`'s `metadata.managedFields`. Entries that do not parse
/// are dropped, as the apiserver resets field sets it cannot decode.
pub fn managers(object: &Map<String, Value>) -> Vec<Manager> {
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
                api_version: e
                    .get("apiVersion")
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

/// Writes `managers` into `object`'s `metadata.managedFields` (removed when there are none),
/// each entry in its own API version, or `api_version` (the write's) where it names none.
pub fn set_managers(object: &mut Map<String, Value>, managers: &[Manager], api_version: &str) {
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
            let version = if m.api_version.is_empty() {
                api_version
            } else {
                &m.api_version
            };
            e.insert("apiVersion".into(), Value::String(version.into()));
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

/// Records an update by `writer` that turned `before` (empty for a create) into `after`:
/// the fields it added or changed become its own and no one else's; the fields it removed
/// are no one's.
pub fn record_update(
    rules: ListRules<'_>,
    managers: &mut Vec<Manager>,
    writer: &Writer<'_>,
    before: &Map<String, Value>,
    after: &Map<String, Value>,
) {
    let old = Indexed::of(rules, before);
    let new = Indexed::of(rules, after);
    let changed: Vec<Vec<Segment>> = new
        .fields
        .leaves()
        .into_iter()
        .filter(|p| !old.fields.contains(p) || (!is_existence(p) && old.value(p) != new.value(p)))
        .collect();
    let removed: Vec<Vec<Segment>> = old
        .fields
        .leaves()
        .into_iter()
        .filter(|p| !new.fields.contains(p))
        .collect();
    for m in managers.iter_mut() {
        for p in changed.iter().chain(&removed) {
            m.fields.remove(p);
        }
    }
    if !changed.is_empty() {
        let i = match managers.iter().position(|m| {
            m.manager == writer.manager
                && m.operation == "Update"
                && m.subresource == writer.subresource
                && (m.api_version.is_empty() || m.api_version == writer.api_version)
        }) {
            Some(i) => i,
            None => {
                managers.push(Manager {
                    manager: writer.manager.to_owned(),
                    operation: "Update",
                    subresource: writer.subresource.to_owned(),
                    api_version: writer.api_version.to_owned(),
                    time: String::new(),
                    fields: Fields::default(),
                });
                managers.len() - 1
            }
        };
        managers[i].time = writer.time.to_owned();
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
        let f = Indexed::of(ListRules::BuiltIn("Pod"), &pod).fields.to_json();
        assert_eq!(
            f,
            json!({
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:finalizers": {"v:\"f\"": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"a\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
                    }},
                    "f:tolerations": {}
                }
            })
        );
        assert_eq!(
            Fields::from_json(&f),
            Indexed::of(ListRules::BuiltIn("Pod"), &pod).fields
        );
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
        assert_eq!(
            Indexed::of(ListRules::BuiltIn("Pod"), &pod).value(&image),
            Some(&json!("i"))
        );
        assert_eq!(display(&image), ".spec.containers[name=\"a\"].image");
        let remove_at = |pod: &mut Map<String, Value>, path: &[Segment]| {
            let mut gone = Fields::default();
            gone.insert(path);
            remove_all(pod, &gone);
        };
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
    fn a_long_set_is_recorded_in_one_pass_and_many_of_its_fields_go_at_once() {
        let finalizers: Vec<String> = (0..40_000).map(|i| format!("f{i}")).collect();
        let before = obj(json!({"metadata": {"finalizers": finalizers}}));
        let mut managers = Vec::new();
        record_update(
            ListRules::BuiltIn("ConfigMap"),
            &mut managers,
            &Writer {
                manager: "creator",
                subresource: "",
                api_version: "v1",
                time: "t0",
            },
            &Map::new(),
            &before,
        );
        let mut after = before.clone();
        after["metadata"]["labels"] = json!({"a": "1"});
        record_update(
            ListRules::BuiltIn("ConfigMap"),
            &mut managers,
            &Writer {
                manager: "labeller",
                subresource: "",
                api_version: "v1",
                time: "t1",
            },
            &before,
            &after,
        );
        assert_eq!(
            managers[0].fields.leaves().len(),
            40_000,
            "the creator keeps every finalizer"
        );
        assert_eq!(
            managers[1].fields.to_json(),
            json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
        );
        let mut gone = Fields::default();
        for i in (0..40_000).step_by(2) {
            gone.insert(&["f:metadata".into(), "f:finalizers".into(), format!("v:\"f{i}\"")]);
        }
        remove_all(&mut after, &gone);
        let left = after["metadata"]["finalizers"].as_array().unwrap();
        assert_eq!(
            (left.len(), &left[0], &left[19_999]),
            (20_000, &json!("f1"), &json!("f39999"))
        );
    }

    #[test]
    fn a_path_through_a_duplicated_key_reads_the_first_element_with_it() {
        let pod = obj(json!({"spec": {"containers": [
            {"name": "a", "image": "1"}, {"name": "a", "image": "2", "tty": true}, {"name": "b"}
        ]}}));
        let indexed = Indexed::of(ListRules::BuiltIn("Pod"), &pod);
        let at = |last: &str| -> Vec<Segment> {
            vec![
                "f:spec".into(),
                "f:containers".into(),
                "k:{\"name\":\"a\"}".into(),
                last.into(),
            ]
        };
        assert_eq!(indexed.value(&at("f:image")), Some(&json!("1")));
        assert!(
            indexed.fields.contains(&at("f:tty")),
            "the set has the second element's field"
        );
        assert_eq!(
            indexed.value(&at("f:tty")),
            None,
            "which the first element has not"
        );
        assert_eq!(indexed.value(&at(".")), Some(&pod["spec"]["containers"][0]));
        // Going into the elements with key "a" edits the first; removing them removes both.
        let mut edited = pod.clone();
        let mut gone = Fields::default();
        gone.insert(&at("f:image"));
        remove_all(&mut edited, &gone);
        assert_eq!(edited["spec"]["containers"][0], json!({"name": "a"}));
        assert_eq!(edited["spec"]["containers"][1]["image"], "2");
        gone.insert(&at("."));
        remove_all(&mut edited, &gone);
        assert_eq!(edited["spec"]["containers"], json!([{"name": "b"}]));
        assert!(
            Indexed::of(ListRules::BuiltIn("Pod"), &pod)
                .fields
                .has_prefix(&["f:spec".into()])
        );
        assert!(!Fields::default().has_prefix(&[]));
    }

    #[test]
    fn an_update_takes_the_fields_it_changes_from_other_managers() {
        let before = obj(json!({"metadata": {"labels": {"a": "1", "b": "2"}}}));
        let mut managers = Vec::new();
        record_update(
            ListRules::BuiltIn("ConfigMap"),
            &mut managers,
            &Writer {
                manager: "creator",
                subresource: "",
                api_version: "v1",
                time: "t0",
            },
            &Map::new(),
            &before,
        );
        assert_eq!(managers.len(), 1);
        let after = obj(json!({"metadata": {"labels": {"a": "1", "b": "3"}}}));
        record_update(
            ListRules::BuiltIn("ConfigMap"),
            &mut managers,
            &Writer {
                manager: "labeller",
                subresource: "",
                api_version: "v1",
                time: "t1",
            },
            &before,
            &after,
        );
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
