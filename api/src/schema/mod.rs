//! A CustomResourceDefinition's structural schema, compiled once per CRD version and applied
//! to every write of its custom resources as the apiserver applies it: unknown fields are
//! pruned, schema defaults set, and the value validated — types, `required`, `enum`,
//! `pattern`, `format`, bounds, lengths, sizes, `nullable`, the `x-kubernetes-*` extensions
//! and the CEL rules of `x-kubernetes-validations` — with the apiserver's field paths,
//! reasons and messages.
//!
//! [`Schema::compile`] refuses what the apiserver refuses in a CRD's schema (a schema that is
//! not structural, a pattern that is no regular expression, a rule that does not compile),
//! and what this server cannot bound or evaluate (a rule naming a function it does not have,
//! a rule or all rules together over the cost budget by its estimate), each as a field error
//! under the version's `schema.openAPIV3Schema`. Applying a schema is bounded too: defaults
//! copied into one object stop at [`DEFAULTS_BUDGET`].
//!
//! Plain values in, field errors out: no HTTP here.

mod cel;
mod format;
mod validate;

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value, json};

use crate::mutation::strategic::{ListStrategy, MergeKeys, segments};
use crate::validation::field::{ErrorKind, Errors, Path};
use crate::validation::{FieldError, Refusal};

pub use self::cel::Rule;

/// The type a schema node declares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
    /// None: any value (under `x-kubernetes-preserve-unknown-fields` or
    /// `x-kubernetes-int-or-string`, or the root).
    Any,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Object => "object",
            Type::Array => "array",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
            Type::Any => "",
        }
    }
}

/// How a list's items are told apart (`x-kubernetes-list-type`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum ListType {
    /// A whole (the default).
    Atomic,
    /// Items are unique scalars.
    Set,
    /// Items are objects unique by these keys.
    Map(Vec<String>),
}

/// The most bytes of schema defaults copied into one object: more than a stored object may
/// hold (etcd takes 1.5 MiB).
pub const DEFAULTS_BUDGET: usize = 2 << 20;

/// Schema defaults would make an object larger than any store takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the schema's defaults would add more than {DEFAULTS_BUDGET} bytes to the object")]
pub struct DefaultsTooLarge;

/// One node of a compiled structural schema.
#[derive(Clone, Debug)]
pub struct Schema {
    ty: Type,
    nullable: bool,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded: bool,
    properties: BTreeMap<String, Schema>,
    additional: Option<Box<Schema>>,
    items: Option<Box<Schema>>,
    required: Vec<String>,
    enumeration: Vec<Value>,
    pattern: Option<(String, Regex)>,
    format: Option<String>,
    minimum: Option<(f64, bool)>,
    maximum: Option<(f64, bool)>,
    multiple_of: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    default: Option<Value>,
    /// The default's JSON size, what copying it costs.
    default_bytes: usize,
    list: ListType,
    /// A `map` list's keys' defaults, in the order of its keys (from its items' properties).
    map_key_defaults: Vec<Option<Value>>,
    all_of: Vec<Schema>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    not: Option<Box<Schema>>,
    rules: Vec<Rule>,
}

/// The most entries a list, map or string can have when its schema sets no bound: a request
/// body is at most 3 MiB, and an entry takes at least two bytes (`1,`).
const UNBOUNDED: f64 = (3 << 20) as f64 / 2.0;

/// The most any value read from a body can hold: the body's bound, 3 MiB.
const BODY_BYTES: f64 = (3 << 20) as f64;

impl Schema {
    /// How the list at dotted `path` from the root merges under server-side apply (list
    /// elements add no segment; a map's key is one). A path the schema does not describe (under
    /// `x-kubernetes-preserve-unknown-fields`) is atomic, as is a list without
    /// `x-kubernetes-list-type`.
    pub fn list_strategy(&self, path: &str) -> ListStrategy<'_> {
        let mut node = self;
        for segment in segments(path) {
            while node.ty == Type::Array {
                match node.items.as_deref() {
                    Some(items) => node = items,
                    None => return ListStrategy::Replace,
                }
            }
            node = match node.properties.get(&segment).or(node.additional.as_deref()) {
                Some(next) => next,
                None => return ListStrategy::Replace,
            };
        }
        match &node.list {
            ListType::Atomic => ListStrategy::Replace,
            ListType::Set => ListStrategy::MergeSet,
            ListType::Map(keys) => ListStrategy::MergeByKey(MergeKeys::Many(keys, &node.map_key_defaults)),
        }
    }

    /// Compiles a version's `schema.openAPIV3Schema`; `at` is its path in the CRD
    /// (`spec.versions[0].schema.openAPIV3Schema`), which the errors name.
    pub fn compile(schema: &Value, at: &str) -> Result<Schema, Vec<FieldError>> {
        let mut errors = Errors::default();
        let compiled = compile(schema, &Path::new(at), Place::Root, 1.0, &mut errors);
        let root = Path::new(at);
        complete(schema, Some(schema), &root, &root, &mut errors);
        // As the apiserver: the schema's own errors, in the order of their text; only a
        // schema without any has its rules' errors, in the order found, then its total cost.
        let (rules, mut own): (Vec<FieldError>, Vec<FieldError>) = errors
            .into_vec()
            .into_iter()
            .partition(|e| e.field.contains(".x-kubernetes-validations["));
        if !own.is_empty() {
            own.sort_by_cached_key(ToString::to_string);
            return Err(own);
        }
        let mut errors = Errors::default();
        rules.into_iter().for_each(|e| errors.push_error(e));
        cel::check_total(&compiled, &root, &mut errors);
        if errors.list().is_empty() {
            Ok(compiled)
        } else {
            Err(errors.into_vec())
        }
    }

    /// Removes from `object` every field its schema does not know (but under
    /// `x-kubernetes-preserve-unknown-fields`), as the apiserver prunes a custom resource
    /// before it stores it; answers the paths removed (`spec.bogus`), which the apiserver
    /// reports as unknown fields. `apiVersion`, `kind` and `metadata` are the object's own.
    pub fn prune(&self, object: &mut Map<String, Value>) -> Vec<String> {
        let mut pruned = Vec::new();
        self.prune_fields(object, "", true, &mut pruned);
        pruned.sort();
        pruned
    }

    fn prune_fields(&self, map: &mut Map<String, Value>, at: &str, root: bool, pruned: &mut Vec<String>) {
        let own = |k: &str| (root || self.embedded) && matches!(k, "apiVersion" | "kind" | "metadata");
        if let Some(additional) = &self.additional {
            for (key, v) in map.iter_mut() {
                additional.prune_value(v, &join(at, key), pruned);
            }
            return;
        }
        for (key, v) in map.iter_mut() {
            if let Some(s) = self.properties.get(key)
                && !own(key)
            {
                s.prune_value(v, &join(at, key), pruned);
            }
        }
        if !self.preserve_unknown {
            map.retain(|k, _| {
                let keep = own(k) || self.properties.contains_key(k);
                if !keep {
                    pruned.push(join(at, k));
                }
                keep
            });
        }
    }

    fn prune_value(&self, value: &mut Value, at: &str, pruned: &mut Vec<String>) {
        match value {
            Value::Object(map) => self.prune_fields(map, at, false, pruned),
            Value::Array(list) => {
                if let Some(items) = &self.items {
                    for (i, v) in list.iter_mut().enumerate() {
                        items.prune_value(v, &format!("{at}[{i}]"), pruned);
                    }
                }
            }
            _ => {}
        }
    }

    /// Sets the schema's defaults in `object` where it leaves a field unset (or null where the
    /// field is not nullable), as the apiserver defaults a custom resource after pruning.
    ///
    /// Defaults copied into one object are bounded: past [`DEFAULTS_BUDGET`] bytes (a default
    /// under a list's items is copied into each item) no more are copied and
    /// [`DefaultsTooLarge`] says so; such an object is larger than any store takes.
    pub fn apply_defaults(&self, object: &mut Map<String, Value>) -> Result<(), DefaultsTooLarge> {
        let mut budget = DEFAULTS_BUDGET;
        self.default_map(object, true, &mut budget)
    }

    fn default_map(
        &self,
        map: &mut Map<String, Value>,
        root: bool,
        budget: &mut usize,
    ) -> Result<(), DefaultsTooLarge> {
        for (key, s) in &self.properties {
            if root && key == "metadata" {
                continue;
            }
            match (map.get(key), &s.default) {
                (None, Some(d)) => {
                    s.spend(budget)?;
                    map.insert(key.clone(), d.clone());
                }
                (Some(Value::Null), Some(d)) if !s.nullable => {
                    s.spend(budget)?;
                    map.insert(key.clone(), d.clone());
                }
                // A null where none may be and no default: dropped, as the apiserver drops it
                // before validating.
                (Some(Value::Null), None) if !s.nullable => {
                    map.remove(key);
                }
                _ => {}
            }
        }
        if let Some(values) = &self.additional
            && values.default.is_none()
            && !values.nullable
        {
            map.retain(|_, v| !v.is_null());
        }
        for (key, v) in map.iter_mut() {
            if matches!(key.as_str(), "apiVersion" | "kind") || (root && key == "metadata") {
                continue;
            }
            if let Some(s) = self.properties.get(key) {
                s.default_value(v, budget)?;
            } else if let Some(s) = &self.additional {
                // A null value of a map whose values may not be null takes their default.
                s.default_null(v, budget)?;
                s.default_value(v, budget)?;
            }
        }
        Ok(())
    }

    fn default_value(&self, value: &mut Value, budget: &mut usize) -> Result<(), DefaultsTooLarge> {
        match value {
            Value::Object(map) => self.default_map(map, false, budget),
            Value::Array(list) => {
                if let Some(items) = &self.items {
                    for v in list {
                        // A null item of a list whose items may not be null takes their
                        // default.
                        items.default_null(v, budget)?;
                        items.default_value(v, budget)?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `value`, if it is a null this node does not allow, replaced by the node's default.
    fn default_null(&self, value: &mut Value, budget: &mut usize) -> Result<(), DefaultsTooLarge> {
        if let (Value::Null, Some(d), false) = (&value, &self.default, self.nullable) {
            self.spend(budget)?;
            *value = d.clone();
        }
        Ok(())
    }

    /// Takes this node's default's size from `budget`.
    fn spend(&self, budget: &mut usize) -> Result<(), DefaultsTooLarge> {
        *budget = budget.checked_sub(self.default_bytes).ok_or(DefaultsTooLarge)?;
        Ok(())
    }

    /// The field errors of `object` (the update of `old`, if any), as the apiserver validates
    /// a custom resource against its schema and then its CEL rules (`x-kubernetes-validations`;
    /// a rule on `oldSelf` only on an update where the old value exists).
    pub fn validate(&self, object: &Map<String, Value>, old: Option<&Map<String, Value>>) -> Vec<FieldError> {
        let mut errors = Errors::default();
        let value = Value::Object(object.clone());
        validate::object_root(self, object, old, &mut errors);
        // Rules are not run over a value that is not of its schema's type, misses a required
        // field or is over a bound (the cost estimate counts on bounds): the apiserver says so
        // instead.
        let blocking = errors.list().iter().any(|e| {
            matches!(
                e.kind,
                ErrorKind::TypeInvalid
                    | ErrorKind::NotSupported
                    | ErrorKind::Required
                    | ErrorKind::TooLong
                    | ErrorKind::TooMany
            )
        });
        if blocking {
            if self.has_rules() {
                errors.push(
                    ErrorKind::Invalid,
                    &Path::new("<nil>"),
                    Value::Null,
                    "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                );
            }
        } else {
            let old = old.map(|o| Value::Object(o.clone()));
            let unchanged = cel::Unchanged::root(&value, old.as_ref());
            cel::run(
                self,
                &value,
                old.as_ref(),
                &unchanged,
                &Path::new(""),
                &mut errors,
            );
        }
        errors.into_vec()
    }

    /// [`validate`](Self::validate) as a [`Refusal`], added to what the kind's other checks
    /// refused (`checked`).
    pub fn refuse(
        &self,
        checked: Result<(), Refusal>,
        object: &Map<String, Value>,
        old: Option<&Map<String, Value>>,
    ) -> Result<(), Refusal> {
        let mut found = match checked {
            Ok(()) => Vec::new(),
            Err(Refusal::Invalid(list)) => list,
            Err(other) => return Err(other),
        };
        found.extend(self.validate(object, old));
        if found.is_empty() {
            Ok(())
        } else {
            Err(Refusal::Invalid(found))
        }
    }

    fn has_rules(&self) -> bool {
        !self.rules.is_empty()
            || self.properties.values().any(Schema::has_rules)
            || self.items.as_ref().is_some_and(|s| s.has_rules())
            || self.additional.as_ref().is_some_and(|s| s.has_rules())
    }

    /// The most this node's value can hold, all its entries together (characters of a
    /// string, the sum of a list's items), at most what a body holds: what reading it costs.
    fn bytes(&self) -> f64 {
        let bytes = match self.ty {
            Type::Integer | Type::Number | Type::Boolean => 1.0,
            Type::String => self.max_length.map_or(BODY_BYTES, |m| m as f64),
            Type::Array => match (self.max_items, &self.items) {
                (Some(n), Some(items)) => n as f64 * items.bytes(),
                _ => BODY_BYTES,
            },
            Type::Object
                if self.additional.is_none() && !self.preserve_unknown && !self.properties.is_empty() =>
            {
                self.properties.values().map(|p| 1.0 + p.bytes()).sum()
            }
            _ => BODY_BYTES,
        };
        bytes.min(BODY_BYTES)
    }

    /// The most entries this node can hold (items, properties or characters).
    fn cardinality(&self) -> f64 {
        let bound = match self.ty {
            Type::Array => self.max_items,
            Type::Object => self.max_properties,
            Type::String => self.max_length,
            Type::Integer | Type::Number | Type::Boolean => Some(1),
            // Untyped (preserved unknown fields, int-or-string): anything a body can hold.
            Type::Any => self.max_items.or(self.max_properties).or(self.max_length),
        };
        bound.map_or(UNBOUNDED, |b| (b as f64).min(UNBOUNDED))
    }
}

/// Whether a root `metadata` schema restricts only `name` and `generateName` (as strings), as
/// the apiserver allows.
fn metadata_schema_allowed(meta: &Value) -> bool {
    let Some(m) = meta.as_object() else {
        return false;
    };
    let fields_ok = m.keys().all(|k| matches!(k.as_str(), "type" | "properties"));
    let type_ok = m.get("type").is_some_and(|t| t == "object");
    let props_ok = m
        .get("properties")
        .and_then(Value::as_object)
        .is_none_or(|p| p.keys().all(|k| k == "name" || k == "generateName"));
    fields_ok && type_ok && props_ok
}

/// `at.key`, or `key` at the root.
fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

/// The structural completeness rule: a field or items that `allOf`, `anyOf`, `oneOf` or `not`
/// (at any depth within them) validate must also be specified outside them, at the same
/// place (`s`), since only the structural part says what a field is (what is pruned, what
/// defaulted). The apiserver checks it for the root's value validations, as here.
fn complete(v: &Value, s: Option<&Value>, s_at: &Path, v_at: &Path, errors: &mut Errors) {
    let Some(s) = s else {
        errors.required_because(s_at, format!("because it is defined in {}", v_at.0));
        return;
    };
    if let Some(not) = v.get("not") {
        complete_nested(not, Some(s), s_at, &v_at.child("not"), errors);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, nested) in v
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            complete_nested(nested, Some(s), s_at, &v_at.child(key).index(i), errors);
        }
    }
}

fn complete_nested(v: &Value, s: Option<&Value>, s_at: &Path, v_at: &Path, errors: &mut Errors) {
    let Some(s) = s else {
        errors.required_because(s_at, format!("because it is defined in {}", v_at.0));
        return;
    };
    complete(v, Some(s), s_at, v_at, errors);
    if let Some(items) = v.get("items").filter(|i| i.is_object()) {
        let structural = s.get("items").filter(|i| i.is_object());
        complete_nested(
            items,
            structural,
            &s_at.child("items"),
            &v_at.child("items"),
            errors,
        );
    }
    for (k, field) in v
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let (s_field, v_field) = (s_at.child("properties").key(k), v_at.child("properties").key(k));
        match s.get("properties").and_then(|p| p.get(k)) {
            Some(structural) => complete_nested(field, Some(structural), &s_field, &v_field, errors),
            None => errors.required_because(&s_field, format!("because it is defined in {}", v_field.0)),
        }
    }
}

/// Where a schema node sits, for the messages of an untyped one.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Place {
    Root,
    Property,
    Items,
    Nested,
}

fn compile(v: &Value, at: &Path, place: Place, instances: f64, errors: &mut Errors) -> Schema {
    let empty = Map::new();
    let o = v.as_object().unwrap_or(&empty);
    let flag = |k: &str| o.get(k).and_then(Value::as_bool).unwrap_or(false);
    let count = |k: &str| o.get(k).and_then(Value::as_u64);
    let int_or_string = flag("x-kubernetes-int-or-string");
    let preserve_unknown = flag("x-kubernetes-preserve-unknown-fields");
    let embedded = flag("x-kubernetes-embedded-resource");
    let ty = match o.get("type").and_then(Value::as_str).unwrap_or_default() {
        "object" => Type::Object,
        "array" => Type::Array,
        "string" => Type::String,
        "integer" => Type::Integer,
        "number" => Type::Number,
        "boolean" => Type::Boolean,
        "" => {
            if !int_or_string && !preserve_unknown && place != Place::Nested {
                match place {
                    Place::Root => {
                        errors.required_because(&at.child("type"), "must not be empty at the root")
                    }
                    Place::Items => errors
                        .required_because(&at.child("type"), "must not be empty for specified array items"),
                    _ => errors
                        .required_because(&at.child("type"), "must not be empty for specified object fields"),
                }
            }
            Type::Any
        }
        other => {
            errors.not_supported(
                &at.child("type"),
                other,
                &["array", "boolean", "integer", "number", "object", "string"],
            );
            Type::Any
        }
    };
    // Inside allOf, anyOf, oneOf and not a schema only validates: what makes a schema's
    // structure is given outside them.
    if place == Place::Nested {
        for (key, why) in [
            ("type", "must be empty to be structural"),
            ("default", "must be undefined to be structural"),
            ("title", "must be empty to be structural"),
            ("description", "must be empty to be structural"),
            ("additionalProperties", "must be undefined to be structural"),
            ("x-kubernetes-validations", "must be empty to be structural"),
            ("x-kubernetes-embedded-resource", "must be false to be structural"),
            ("x-kubernetes-int-or-string", "must be false to be structural"),
            ("x-kubernetes-list-type", "must be undefined to be structural"),
            ("x-kubernetes-list-map-keys", "must be empty to be structural"),
            ("x-kubernetes-map-type", "must be undefined to be structural"),
        ] {
            let set = match o.get(key) {
                None | Some(Value::Null) => false,
                // Any default is one, `false` and `""` too.
                Some(_) if key == "default" => true,
                Some(Value::Bool(false)) => false,
                Some(Value::Array(a)) => !a.is_empty(),
                Some(Value::String(s)) => !s.is_empty(),
                Some(_) => true,
            };
            if set {
                errors.forbidden(&at.child(key), why);
            }
        }
        for key in ["nullable", "x-kubernetes-preserve-unknown-fields"] {
            if o.get(key).and_then(Value::as_bool) == Some(true) {
                errors.forbidden(&at.child(key), "must be false to be structural");
            }
        }
        // What metadata may be is the server's to say, never a validation's.
        if o.get("properties").and_then(|p| p.get("metadata")).is_some() {
            errors.forbidden(
                &at.child("properties").key("metadata"),
                "must not be specified in a nested context",
            );
        }
    }
    if place == Place::Root
        && let Some(meta) = o.get("properties").and_then(|p| p.get("metadata"))
        && !metadata_schema_allowed(meta)
    {
        errors.forbidden(
            &at.child("properties").key("metadata"),
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        );
    }
    if place == Place::Root && ty != Type::Object && ty != Type::Any {
        errors.invalid(&at.child("type"), ty.name(), "must be object at the root");
    }
    if o.contains_key("$ref") {
        errors.forbidden(&at.child("$ref"), "$ref is not supported");
    }
    let number = |k: &str| o.get(k).and_then(Value::as_f64);
    let mut schema = Schema {
        ty,
        nullable: flag("nullable"),
        int_or_string,
        preserve_unknown,
        embedded,
        properties: BTreeMap::new(),
        additional: None,
        items: None,
        required: o
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        enumeration: o
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        pattern: None,
        format: o.get("format").and_then(Value::as_str).map(str::to_owned),
        minimum: number("minimum").map(|m| (m, flag("exclusiveMinimum"))),
        maximum: number("maximum").map(|m| (m, flag("exclusiveMaximum"))),
        multiple_of: number("multipleOf"),
        min_length: count("minLength"),
        max_length: count("maxLength"),
        min_items: count("minItems"),
        max_items: count("maxItems"),
        min_properties: count("minProperties"),
        max_properties: count("maxProperties"),
        default: o.get("default").cloned(),
        default_bytes: o.get("default").map_or(0, |d| d.to_string().len()),
        list: ListType::Atomic,
        map_key_defaults: Vec::new(),
        all_of: Vec::new(),
        any_of: Vec::new(),
        one_of: Vec::new(),
        not: None,
        rules: Vec::new(),
    };
    if schema.multiple_of.is_some_and(|m| m <= 0.0) {
        errors.invalid(
            &at.child("multipleOf"),
            o["multipleOf"].clone(),
            "must be greater than zero",
        );
    }
    if let Some(p) = o.get("pattern").and_then(Value::as_str) {
        match regex::RegexBuilder::new(p).size_limit(1 << 20).build() {
            Ok(re) => schema.pattern = Some((p.to_owned(), re)),
            Err(e) => errors.invalid(
                &at.child("pattern"),
                p,
                format!("must be a valid regular expression, but isn't: {e}"),
            ),
        }
    }
    if let Some(props) = o.get("properties").and_then(Value::as_object) {
        for (name, s) in props {
            let child = compile(
                s,
                &at.child("properties").key(name),
                if place == Place::Nested {
                    Place::Nested
                } else {
                    Place::Property
                },
                instances,
                errors,
            );
            schema.properties.insert(name.clone(), child);
        }
    }
    match o.get("additionalProperties") {
        Some(Value::Object(s)) => {
            if !schema.properties.is_empty() {
                errors.forbidden(
                    &at.child("additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                );
            }
            let entries = instances * schema.cardinality();
            let s = compile(
                &Value::Object(s.clone()),
                &at.child("additionalProperties"),
                if place == Place::Nested {
                    Place::Nested
                } else {
                    Place::Property
                },
                entries,
                errors,
            );
            schema.additional = Some(Box::new(s));
        }
        Some(Value::Bool(false)) => {
            errors.forbidden(&at.child("additionalProperties"), "must not be false");
        }
        _ => {}
    }
    if let Some(items) = o.get("items") {
        let entries = instances * schema.cardinality();
        let child_place = if place == Place::Nested {
            Place::Nested
        } else {
            Place::Items
        };
        let s = compile(items, &at.child("items"), child_place, entries, errors);
        schema.items = Some(Box::new(s));
    } else if ty == Type::Array && place != Place::Nested {
        errors.required_because(&at.child("items"), "must be specified");
    }
    // An int-or-string field may say so as OpenAPI generators write it (controller-gen's
    // `intstr.IntOrString`): `anyOf: [{type: integer}, {type: string}]`, alone or as the
    // first `allOf`'s. Those two types are not checked as structural, as the apiserver skips
    // them; they still validate.
    // Compared as Go compares them: a field at its zero value (`""`, `false`, `null`) is unset.
    let int_or_string_any_of = |any_of: Option<&Value>| {
        let unset = |v: &Value| matches!(v, Value::Null | Value::Bool(false)) || v.as_str() == Some("");
        let stripped: Option<Vec<Value>> = any_of.and_then(Value::as_array).map(|list| {
            list.iter()
                .map(|s| match s {
                    Value::Object(m) => Value::Object(
                        m.iter()
                            .filter(|(_, v)| !unset(v))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    ),
                    other => other.clone(),
                })
                .collect()
        });
        stripped == Some(vec![json!({"type": "integer"}), json!({"type": "string"})])
    };
    let skip_any_of = int_or_string && int_or_string_any_of(o.get("anyOf"));
    let skip_first_all_of_any_of = int_or_string
        && int_or_string_any_of(
            o.get("allOf")
                .and_then(|a| a.get(0))
                .and_then(|first| first.get("anyOf")),
        );
    for (key, list) in [
        ("allOf", &mut schema.all_of),
        ("anyOf", &mut schema.any_of),
        ("oneOf", &mut schema.one_of),
    ] {
        for (i, s) in o
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let here = at.child(key).index(i);
            let mut found = Errors::default();
            list.push(compile(s, &here, Place::Nested, instances, &mut found));
            let skipped = match (key, i) {
                ("anyOf", _) if skip_any_of => Some(format!("{}.", here.0)),
                ("allOf", 0) if skip_first_all_of_any_of => Some(format!("{}.anyOf[", here.0)),
                _ => None,
            };
            for e in found.into_vec() {
                if skipped
                    .as_ref()
                    .is_none_or(|prefix| !e.field.starts_with(prefix.as_str()))
                {
                    errors.push_error(e);
                }
            }
        }
    }
    if let Some(n) = o.get("not") {
        schema.not = Some(Box::new(compile(
            n,
            &at.child("not"),
            Place::Nested,
            instances,
            errors,
        )));
    }
    match o.get("x-kubernetes-list-type").and_then(Value::as_str) {
        None | Some("atomic") => {}
        Some("set") => schema.list = ListType::Set,
        Some("map") => {
            let keys: Vec<String> = o
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            if keys.is_empty() {
                errors.required_because(
                    &at.child("x-kubernetes-list-map-keys"),
                    "must not be empty if x-kubernetes-list-type is map",
                );
            }
            schema.map_key_defaults = keys
                .iter()
                .map(|k| {
                    let items = schema.items.as_deref()?;
                    items.properties.get(k)?.default.clone()
                })
                .collect();
            schema.list = ListType::Map(keys);
        }
        Some(other) => errors.not_supported(
            &at.child("x-kubernetes-list-type"),
            other,
            &["atomic", "set", "map"],
        ),
    }
    if let Some(rules) = o.get("x-kubernetes-validations").and_then(Value::as_array) {
        for (i, r) in rules.iter().enumerate() {
            let path = at.child("x-kubernetes-validations").index(i);
            if let Some(rule) = cel::Rule::compile(r, &path, &schema, instances, errors) {
                schema.rules.push(rule);
            }
        }
    }
    if let Some(default) = &schema.default
        && errors.list().is_empty()
    {
        let mut found = Errors::default();
        let mut pruned = default.clone();
        schema.prune_value(&mut pruned, "", &mut Vec::new());
        validate::value(&schema, &pruned, None, &Path::new("default"), &mut found);
        if pruned != *default {
            errors.invalid(&at.child("default"), "", "must not have fields the schema prunes");
        }
        if let Some(e) = found.list().first() {
            let why = if e.detail.is_empty() {
                e.body()
            } else {
                e.detail.clone()
            };
            errors.invalid(&at.child("default"), default.clone(), why);
        }
    }
    schema
}

#[cfg(test)]
mod tests;
