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
//! `patchMergeKey` ([`MERGE_LISTS`], through [`ListRules`]); the OpenAPI documents publish the same
//! table. A custom resource's lists follow its schema's list types instead.
//!
//! Every list is indexed once per merge (elements by value, or by merge key, in hash maps), so
//! merging, deleting and ordering cost time linear in the list and the patch, not their
//! product: a patch of a few thousand finalizers against tens of thousands must not take
//! seconds.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Map, Value};

use crate::mutation::value_key::{OwnedKey, ValueKey};

/// How a list field is patched.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ListStrategy<'a> {
    /// Atomic: the patch's list replaces the object's (no `patchStrategy` on the field, or
    /// `x-kubernetes-list-type: atomic`, a custom resource's default).
    Replace,
    /// Elements are maps, matched on their keys: `patchStrategy: merge` with
    /// `patchMergeKey`, or `x-kubernetes-list-type: map` with `x-kubernetes-list-map-keys`.
    MergeByKey(MergeKeys<'a>),
    /// `patchStrategy: merge` on a list of scalars, or `x-kubernetes-list-type: set`: a set
    /// union.
    MergeSet,
}

/// The keys a keyed list's elements are matched on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MergeKeys<'a> {
    /// A built-in type's `patchMergeKey`.
    One(&'a str),
    /// A custom resource's `x-kubernetes-list-map-keys`, with each key's schema default (an
    /// element that leaves a key unset has its default there, as server-side apply reads it):
    /// an element is identified by all of them together.
    Many(&'a [String], &'a [Option<Value>]),
    /// A built-in type's `x-kubernetes-list-map-keys`, where server-side apply keys a list on
    /// more than its `patchMergeKey` ([`APPLY_KEYS`]): each key with its string default.
    Fixed(&'static [KeyDefault]),
}

impl<'a> MergeKeys<'a> {
    /// The key names, in declared order.
    pub fn names(self) -> impl Iterator<Item = &'a str> {
        let (one, many, fixed) = match self {
            MergeKeys::One(k) => (Some(k), &[][..], &[][..]),
            MergeKeys::Many(ks, _) => (None, ks, &[][..]),
            MergeKeys::Fixed(ks) => (None, &[][..], ks),
        };
        one.into_iter()
            .chain(many.iter().map(String::as_str))
            .chain(fixed.iter().map(|(k, _)| *k))
    }

    /// Each key's value in `element`, in declared order: the element's own, or the key's
    /// default; `None` when a key has neither.
    fn values<'v>(self, element: &'v Map<String, Value>) -> Option<Vec<(&'a str, Cow<'v, Value>)>>
    where
        'a: 'v,
    {
        match self {
            MergeKeys::One(k) => Some(vec![(k, Cow::Borrowed(element.get(k)?))]),
            MergeKeys::Many(ks, defaults) => ks
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let default = defaults.get(i).and_then(Option::as_ref);
                    Some((k.as_str(), Cow::Borrowed(element.get(k).or(default)?)))
                })
                .collect(),
            MergeKeys::Fixed(ks) => ks
                .iter()
                .map(|(k, default)| {
                    let value = match (element.get(*k), default) {
                        (Some(v), _) => Cow::Borrowed(v),
                        (None, Some(d)) => Cow::Owned(Value::from(*d)),
                        (None, None) => return None,
                    };
                    Some((*k, value))
                })
                .collect(),
        }
    }

    /// The identity of `element`: its key's value, or the values of all its keys (in declared
    /// order) as a list; `None` for an element that is not a map or lacks a key that has no
    /// default.
    pub fn id(self, element: &Value) -> Option<Value> {
        let values = self.values(element.as_object()?)?;
        match self {
            MergeKeys::One(_) => values.into_iter().next().map(|(_, v)| v.into_owned()),
            MergeKeys::Many(..) | MergeKeys::Fixed(_) => Some(Value::Array(
                values.into_iter().map(|(_, v)| v.into_owned()).collect(),
            )),
        }
    }

    /// The `k:` segment of `element` in a field set: its keys and their values as a JSON map,
    /// keys in name order (`k:{"port":80,"protocol":"TCP"}`); `None` as for [`id`](Self::id).
    pub fn segment(self, element: &Map<String, Value>) -> Option<String> {
        let mut values = self.values(element)?;
        values.sort_unstable_by_key(|(k, _)| *k);
        values.dedup_by_key(|(k, _)| *k);
        Some(key_segment(values.iter().map(|(k, v)| (*k, &**v))))
    }
}

/// The `k:` segment of an element whose keys have these values, keys in the order given.
pub(crate) fn key_segment<'v>(values: impl IntoIterator<Item = (&'v str, &'v Value)>) -> String {
    let mut out = String::from("k:{");
    for (n, (name, value)) in values.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(&Value::from(name).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push('}');
    out
}

/// `path` and one more `field`, dotted. A dot or backslash in the field is escaped with a
/// backslash, so that a name with dots (a map key `example.com`) stays one segment for a
/// schema's lookup ([`segments`]); the built-in tables' paths have none.
pub fn join(path: &str, field: &str) -> String {
    let mut out = String::with_capacity(path.len() + field.len() + 1);
    out.push_str(path);
    if !path.is_empty() {
        out.push('.');
    }
    for c in field.chars() {
        if c == '.' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The segments of a path [`join`] made, unescaped.
pub fn segments(path: &str) -> impl Iterator<Item = String> + '_ {
    let mut chars = path.chars().peekable();
    std::iter::from_fn(move || {
        chars.peek()?;
        let mut segment = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => segment.extend(chars.next()),
                '.' => break,
                c => segment.push(c),
            }
        }
        Some(segment)
    })
}

impl std::fmt::Display for MergeKeys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MergeKeys::One(k) => write!(f, "{k:?}"),
            MergeKeys::Many(ks, _) => write!(f, "{ks:?}"),
            MergeKeys::Fixed(ks) => {
                let names: Vec<&str> = ks.iter().map(|(k, _)| *k).collect();
                write!(f, "{names:?}")
            }
        }
    }
}

/// Which lists of a kind's objects merge, and on which keys, under strategic merge patch and
/// server-side apply: what the kind declares ([`Lists`](crate::registry::Lists)), or its
/// custom resource schema's. An object's metadata lists merge in every kind, as
/// [`MERGE_LISTS`]'s `*` rows give them.
#[derive(Copy, Clone, Debug)]
pub enum ListRules<'a> {
    /// Every list outside the metadata is atomic.
    Atomic,
    /// A built-in type's Go struct tags, by its kind name: [`MERGE_LISTS`], and the lists of
    /// a pod template where the kind carries one. What a strategic merge patch merges by.
    BuiltIn(&'a str),
    /// The same type as server-side apply (structured-merge-diff) sees it: keyed on its
    /// OpenAPI `x-kubernetes-list-map-keys`, which are more than the `patchMergeKey` for a few
    /// lists ([`APPLY_KEYS`]: a Service's ports are one per port *and* protocol, so DNS's
    /// UDP and TCP 53 are two). What field ownership and apply use ([`for_apply`](Self::for_apply)).
    BuiltInApply(&'a str),
    /// A custom resource's structural schema: `x-kubernetes-list-type` and
    /// `x-kubernetes-list-map-keys`.
    Schema(&'a crate::schema::Schema),
}

impl<'a> ListRules<'a> {
    /// The strategy of the list at dotted `path` (list elements add no segment).
    pub fn strategy(self, path: &str) -> ListStrategy<'a> {
        let common = MERGE_LISTS
            .iter()
            .find(|(k, p, _)| *k == "*" && *p == path)
            .map(|(_, _, s)| *s);
        if let Some(s) = common {
            return s;
        }
        match self {
            ListRules::Atomic => ListStrategy::Replace,
            ListRules::BuiltIn(kind) => list_strategy(kind, path, false),
            ListRules::BuiltInApply(kind) => list_strategy(kind, path, true),
            ListRules::Schema(schema) => schema.list_strategy(path),
        }
    }

    /// The rules server-side apply and field ownership follow: a built-in type's keys as
    /// structured-merge-diff has them ([`BuiltInApply`](Self::BuiltInApply)); the others as they are.
    pub fn for_apply(self) -> ListRules<'a> {
        match self {
            ListRules::BuiltIn(kind) => ListRules::BuiltInApply(kind),
            other => other,
        }
    }

    /// Whether the field at dotted `path` is a map (a Go `map[string]…`), whose existence
    /// server-side apply owns with `.`: labels and annotations in every kind; a built-in
    /// kind's own maps (`data`, `binaryData`, `stringData`, `spec.nodeSelector`).
    pub fn is_map(self, path: &str) -> bool {
        matches!(path, "metadata.labels" | "metadata.annotations")
            || matches!(self, ListRules::BuiltIn(_) | ListRules::BuiltInApply(_))
                && BUILTIN_MAPS.contains(&path)
    }
}

/// A built-in kind's map fields, besides the metadata's, whose existence server-side apply
/// owns with `.`.
const BUILTIN_MAPS: &[&str] = &["data", "binaryData", "stringData", "spec.nodeSelector"];

/// `patchStrategy: merge` with `patchMergeKey: key`.
const fn by_key(key: &'static str) -> ListStrategy<'static> {
    ListStrategy::MergeByKey(MergeKeys::One(key))
}

/// Every list field of the served types with a merge strategy, by kind and dotted path from
/// the object's root (list elements add no segment: `spec.containers.ports` is each
/// container's `ports`). Fields not listed are atomic. From the built-in types' Go struct
/// tags (`patchStrategy`, `patchMergeKey`).
pub const MERGE_LISTS: &[(&str, &str, ListStrategy<'static>)] = {
    use ListStrategy::MergeSet;
    &[
        ("*", "metadata.finalizers", MergeSet),
        ("*", "metadata.ownerReferences", by_key("uid")),
        ("Pod", "spec.volumes", by_key("name")),
        ("Pod", "spec.initContainers", by_key("name")),
        ("Pod", "spec.containers", by_key("name")),
        ("Pod", "spec.ephemeralContainers", by_key("name")),
        ("Pod", "spec.imagePullSecrets", by_key("name")),
        ("Pod", "spec.hostAliases", by_key("ip")),
        ("Pod", "spec.topologySpreadConstraints", by_key("topologyKey")),
        ("Pod", "spec.resourceClaims", by_key("name")),
        ("Pod", "spec.schedulingGates", by_key("name")),
        ("Pod", "spec.containers.ports", by_key("containerPort")),
        ("Pod", "spec.containers.env", by_key("name")),
        ("Pod", "spec.containers.volumeMounts", by_key("mountPath")),
        ("Pod", "spec.containers.volumeDevices", by_key("devicePath")),
        ("Pod", "spec.initContainers.ports", by_key("containerPort")),
        ("Pod", "spec.initContainers.env", by_key("name")),
        ("Pod", "spec.initContainers.volumeMounts", by_key("mountPath")),
        ("Pod", "spec.initContainers.volumeDevices", by_key("devicePath")),
        ("Pod", "spec.ephemeralContainers.env", by_key("name")),
        (
            "Pod",
            "spec.ephemeralContainers.volumeMounts",
            by_key("mountPath"),
        ),
        (
            "Pod",
            "spec.ephemeralContainers.volumeDevices",
            by_key("devicePath"),
        ),
        ("Pod", "status.conditions", by_key("type")),
        ("Pod", "status.podIPs", by_key("ip")),
        ("Pod", "status.hostIPs", by_key("ip")),
        ("Node", "spec.podCIDRs", MergeSet),
        ("Node", "status.conditions", by_key("type")),
        ("Node", "status.addresses", by_key("type")),
        ("Namespace", "status.conditions", by_key("type")),
        ("Service", "spec.ports", by_key("port")),
        ("ServiceAccount", "secrets", by_key("name")),
        ("PersistentVolumeClaim", "status.conditions", by_key("type")),
        ("Deployment", "status.conditions", by_key("type")),
        ("ReplicaSet", "status.conditions", by_key("type")),
        ("StatefulSet", "status.conditions", by_key("type")),
        ("DaemonSet", "status.conditions", by_key("type")),
        ("ReplicationController", "status.conditions", by_key("type")),
        ("Job", "status.conditions", by_key("type")),
        ("PodDisruptionBudget", "status.conditions", by_key("type")),
    ]
};

/// A list map key's name, and its default (`+default`) if it has one.
pub type KeyDefault = (&'static str, Option<&'static str>);

/// The lists server-side apply keys on more than their `patchMergeKey` (the built-in types'
/// `+listMapKey` tags, published as `x-kubernetes-list-map-keys`), each key with its default
/// (`+default`), by kind and dotted path as in [`MERGE_LISTS`]. A pod template's lists follow
/// the pod's.
pub const APPLY_KEYS: &[(&str, &str, &[KeyDefault])] = &[
    (
        "Service",
        "spec.ports",
        &[("port", None), ("protocol", Some("TCP"))],
    ),
    (
        "Pod",
        "spec.containers.ports",
        &[("containerPort", None), ("protocol", Some("TCP"))],
    ),
    (
        "Pod",
        "spec.initContainers.ports",
        &[("containerPort", None), ("protocol", Some("TCP"))],
    ),
    (
        "Pod",
        "spec.topologySpreadConstraints",
        &[("topologyKey", None), ("whenUnsatisfiable", None)],
    ),
];

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
fn list_strategy(kind: &str, path: &str, apply: bool) -> ListStrategy<'static> {
    let declared = |kind: &str, path: &str| {
        let keyed = APPLY_KEYS
            .iter()
            .filter(|_| apply)
            .find(|(k, p, _)| *k == kind && *p == path)
            .map(|(_, _, keys)| ListStrategy::MergeByKey(MergeKeys::Fixed(keys)));
        keyed.or_else(|| {
            MERGE_LISTS
                .iter()
                .find(|(k, p, _)| (*k == "*" || *k == kind) && *p == path)
                .map(|(_, _, s)| *s)
        })
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

/// Applies the strategic merge `patch` to `object`, whose lists merge as `rules` says.
pub fn apply(
    rules: ListRules<'_>,
    object: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<(), PatchError> {
    match merge_map(rules, "", object, patch)? {
        Outcome::Keep => Ok(()),
        Outcome::Delete => err("a strategic merge patch cannot delete the object itself"),
    }
}

/// What a map's own `$patch` directive asks of the map's parent.
enum Outcome {
    Keep,
    Delete,
}

fn merge_map(
    rules: ListRules<'_>,
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
            merge_map(rules, path, &mut fresh, &rest)?;
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
                if let Outcome::Keep = merge_map(rules, &field_path, &mut current, sub)? {
                    object.insert(key.clone(), Value::Object(current));
                }
            }
            Value::Array(items) => {
                let current = match object.remove(key) {
                    Some(Value::Array(list)) => list,
                    _ => Vec::new(),
                };
                let merged = merge_list(rules, &field_path, current, items)?;
                object.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                object.insert(key.clone(), scalar.clone());
            }
        }
    }
    for (field, order) in orders {
        let strategy = rules.strategy(&join(path, field));
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
    rules: ListRules<'_>,
    path: &str,
    mut current: Vec<Value>,
    patch: &[Value],
) -> Result<Vec<Value>, PatchError> {
    let strategy = rules.strategy(path);
    // `{"$patch": "replace"}` as an element: the patch's other elements are the list.
    let replace = patch.iter().any(|item| is_directive(item, "replace"));
    if strategy == ListStrategy::Replace || replace {
        let mut out = Vec::with_capacity(patch.len());
        for item in patch.iter().filter(|item| !is_directive(item, "replace")) {
            out.push(fresh(rules, path, item)?);
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
        ListStrategy::MergeByKey(keys) => merge_by_key(rules, path, keys, current, patch),
    }
}

/// A keyed list merged with the patch's elements, in the patch's order: an element with a key
/// the list has is merged into the first element with that key (or, with `$patch: delete`,
/// every element with it goes); any other is appended. The list is indexed once: for each key,
/// the positions of the elements that have it, first first.
fn merge_by_key(
    rules: ListRules<'_>,
    path: &str,
    keys: MergeKeys<'_>,
    current: Vec<Value>,
    patch: &[Value],
) -> Result<Vec<Value>, PatchError> {
    let mut slots: Vec<Option<Value>> = current.into_iter().map(Some).collect();
    let mut by_id: HashMap<OwnedKey, VecDeque<usize>> = HashMap::new();
    for (i, slot) in slots.iter().enumerate() {
        if let Some(id) = slot.as_ref().and_then(|e| keys.id(e)) {
            by_id.entry(OwnedKey(id)).or_default().push_back(i);
        }
    }
    // Files position `i` under the key its element has now (if any), in list order.
    let index = |by_id: &mut HashMap<OwnedKey, VecDeque<usize>>, slots: &[Option<Value>], i: usize| {
        if let Some(id) = slots[i].as_ref().and_then(|e| keys.id(e)) {
            let positions = by_id.entry(OwnedKey(id)).or_default();
            let at = positions.partition_point(|&p| p < i);
            positions.insert(at, i);
        }
    };
    for item in patch {
        let Value::Object(element) = item else {
            return err(format!(
                "{path} is merged by {keys}; the patch's element {item} is not a map"
            ));
        };
        let Some(id) = keys.id(item) else {
            return err(format!(
                "{path}: the patch's element {item} does not contain the merge key {keys}"
            ));
        };
        let id = OwnedKey(id);
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
                let outcome = merge_map(rules, path, existing, element)?;
                // The element leaves its key's index if it goes, or if the merge changed its
                // key (`$retainKeys` can drop it); it is filed again under a new one.
                let still = matches!(outcome, Outcome::Keep)
                    && slots[i].as_ref().and_then(|e| keys.id(e)).as_ref() == Some(&id.0);
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
                slots.push(Some(fresh(rules, path, item)?));
                index(&mut by_id, &slots, slots.len() - 1);
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// A patch value that has nothing to merge into, its directives applied to nothing.
fn fresh(rules: ListRules<'_>, path: &str, item: &Value) -> Result<Value, PatchError> {
    match item {
        Value::Object(patch) => {
            let mut out = Map::new();
            merge_map(rules, path, &mut out, patch)?;
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

/// Orders `list` as `$setElementOrder` asks: the elements it names, in its order; any other
/// element (one the patch did not mention, such as one a controller added) keeps its place
/// relative to its neighbours in the list as it was.
fn reorder(list: &mut Vec<Value>, order: &[Value], strategy: ListStrategy<'_>) -> Result<(), PatchError> {
    let identity = |v: &Value| -> Option<Value> {
        match strategy {
            ListStrategy::MergeByKey(keys) => keys.id(v),
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
        apply(ListRules::BuiltIn(kind), &mut object, patch.as_object().unwrap())?;
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

    #[test]
    fn a_schemas_lists_merge_by_their_list_type_wherever_they_sit() {
        let ports = json!({"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name", "protocol"],
            "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "protocol": {"type": "string", "default": "TCP"},
                "port": {"type": "integer"}}}});
        let schema = crate::schema::Schema::compile(
            &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "groups": {"type": "array", "items": {"type": "object", "properties": {"ports": ports.clone()}}},
                "ports": ports,
                "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}},
                "containers": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}}}},
                "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }}}}),
            "schema",
        )
        .unwrap();
        let rules = ListRules::Schema(&schema);
        let keys = vec!["name".to_owned(), "protocol".to_owned()];
        let defaults = vec![None, Some(json!("TCP"))];
        assert_eq!(
            rules.strategy("spec.groups.ports"),
            ListStrategy::MergeByKey(MergeKeys::Many(&keys, &defaults))
        );
        assert_eq!(rules.strategy("spec.byName.any.tags"), ListStrategy::MergeSet);
        // A map key with dots is one segment.
        assert_eq!(
            rules.strategy(&(join("spec.byName", "example.com") + ".tags")),
            ListStrategy::MergeSet
        );
        assert_eq!(
            segments(&join(&join("a", "b.c\\d"), "e")).collect::<Vec<_>>(),
            ["a", "b.c\\d", "e"]
        );
        // No list type: atomic, whatever a built-in kind's list of that name does.
        assert_eq!(rules.strategy("spec.containers"), ListStrategy::Replace);
        assert_eq!(rules.strategy("spec.open.list"), ListStrategy::Replace);
        // The metadata's lists merge in every kind.
        assert_eq!(rules.strategy("metadata.finalizers"), ListStrategy::MergeSet);
        assert_eq!(
            ListRules::Atomic.strategy("metadata.finalizers"),
            ListStrategy::MergeSet
        );
        assert_eq!(
            ListRules::Atomic.strategy("spec.containers"),
            ListStrategy::Replace
        );

        // Merged on both keys: the same name with another protocol is another element.
        let mut object = json!({"spec": {"ports": [
            {"name": "web", "protocol": "TCP", "port": 80},
            {"name": "dns", "protocol": "UDP", "port": 53}]}})
        .as_object()
        .unwrap()
        .clone();
        // (A key left out is its default: `web` without a protocol is `web`/TCP.)
        let patch = json!({"spec": {"ports": [
            {"name": "web", "protocol": "UDP", "port": 81},
            {"name": "web", "port": 8080}]}});
        apply(rules, &mut object, patch.as_object().unwrap()).unwrap();
        assert_eq!(
            object["spec"]["ports"],
            json!([{"name": "web", "protocol": "TCP", "port": 8080}, {"name": "dns", "protocol": "UDP", "port": 53},
                   {"name": "web", "protocol": "UDP", "port": 81}])
        );
        let mut object = json!({"spec": {"byName": {"a": {"tags": ["x"]}}}})
            .as_object()
            .unwrap()
            .clone();
        apply(
            rules,
            &mut object,
            json!({"spec": {"byName": {"a": {"tags": ["y", "x"]}}}})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(object["spec"]["byName"]["a"]["tags"], json!(["x", "y"]));

        // An element's segment names all its keys, in name order; one that lacks a key has none.
        let element = json!({"protocol": "TCP", "port": 80, "name": "web"});
        let element = element.as_object().unwrap();
        assert_eq!(
            MergeKeys::Many(&["protocol".to_owned(), "name".to_owned()], &[])
                .segment(element)
                .as_deref(),
            Some(r#"k:{"name":"web","protocol":"TCP"}"#)
        );
        let (zone, default) = (["name".to_owned(), "zone".to_owned()], [None, Some(json!("a"))]);
        assert_eq!(MergeKeys::Many(&zone, &[]).segment(element), None);
        assert_eq!(
            MergeKeys::Many(&zone, &default).segment(element).as_deref(),
            Some(r#"k:{"name":"web","zone":"a"}"#)
        );
        assert_eq!(
            MergeKeys::One("port").segment(element).as_deref(),
            Some(r#"k:{"port":80}"#)
        );
    }
}
