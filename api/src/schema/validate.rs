//! A value against its schema node, with the messages of the apiserver's OpenAPI validator
//! (`spec.size in body must be of type integer: "string"`) under its field paths.
//!
//! On an update, validation ratchets, as the apiserver's does (CRD validation ratcheting, on
//! by default since 1.30): the errors found under a value that is unchanged from its old
//! value are dropped, so that an object stored under an older, looser schema can still be
//! updated where it is not touched. Old values are correlated as the apiserver correlates
//! them: an object's fields by name, a map list's items by their keys; a set's or an atomic
//! list's items only through their list.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::{ListType, Schema, Type, format};
use crate::mutation::value_key::ValueKey;
use crate::validation::field::{ErrorKind, Errors, Path, go_quote};

/// The root object: its own fields (`apiVersion`, `kind` and `metadata` are the object's, and
/// checked elsewhere) and what the root requires.
pub(super) fn object_root(
    schema: &Schema,
    object: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
    errors: &mut Errors,
) {
    let mark = errors.list().len();
    object_root_fields(schema, object, old, errors);
    if errors.list().len() > mark && old == Some(object) {
        errors.truncate(mark);
    }
}

fn object_root_fields(
    schema: &Schema,
    object: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
    errors: &mut Errors,
) {
    let root = Path::new("");
    property_counts(schema, object.len(), &root, errors);
    if !(schema.all_of.is_empty()
        && schema.any_of.is_empty()
        && schema.one_of.is_empty()
        && schema.not.is_none())
    {
        combinators(schema, &Value::Object(object.clone()), &root, errors);
    }
    // A root metadata schema restricts the name and generateName alone.
    if let (Some(meta_schema), Some(Value::Object(meta))) =
        (schema.properties.get("metadata"), object.get("metadata"))
    {
        let old_meta = old.and_then(|o| o.get("metadata"));
        for field in ["name", "generateName"] {
            if let (Some(s), Some(v)) = (meta_schema.properties.get(field), meta.get(field)) {
                let before = old_meta.and_then(|m| m.get(field));
                value(s, v, before, &root.child("metadata").child(field), errors);
            }
        }
    }
    for name in &schema.required {
        if !object.contains_key(name) {
            errors.required(&root.child(name));
        }
    }
    for (name, s) in &schema.properties {
        if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(v) = object.get(name) {
            value(s, v, old.and_then(|o| o.get(name)), &root.child(name), errors);
        }
    }
}

/// The name of `v`'s JSON type, as the validator names it (an integral number is an
/// `integer`).
fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if is_integer(n) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
}

fn type_error(errors: &mut Errors, at: &Path, wanted: &str, given: &'static str) {
    errors.push(
        ErrorKind::TypeInvalid,
        at,
        Value::from(given),
        format!("{} in body must be of type {wanted}: {}", at.0, go_quote(given)),
    );
}

/// Whether `v` is of `schema`'s type; reports it if not.
fn typed(schema: &Schema, v: &Value, at: &Path, errors: &mut Errors) -> bool {
    let given = type_of(v);
    if v.is_null() {
        if schema.nullable || (schema.ty == Type::Any && !schema.int_or_string) {
            return true;
        }
        let wanted = if schema.int_or_string {
            "integer,string"
        } else {
            schema.ty.name()
        };
        type_error(errors, at, wanted, given);
        return false;
    }
    let ok = match schema.ty {
        Type::Any if schema.int_or_string => matches!(given, "integer" | "string"),
        Type::Any => true,
        Type::Integer => given == "integer",
        Type::Number => matches!(given, "integer" | "number"),
        other => given == other.name(),
    };
    if !ok {
        let wanted = if schema.int_or_string {
            "integer,string"
        } else {
            schema.ty.name()
        };
        type_error(errors, at, wanted, given);
    }
    ok
}

/// Go's `%v` of a float: `1` for 1.0, `0.5`.
fn shown(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e21 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// Validates `v` against `schema`, at `at`; `old` is its correlated old value on an update,
/// whose equality ratchets the errors found under it.
pub(super) fn value(schema: &Schema, v: &Value, old: Option<&Value>, at: &Path, errors: &mut Errors) {
    let mark = errors.list().len();
    checked_value(schema, v, old, at, errors);
    // Compared only where something failed: an unchanged value costs nothing more.
    if errors.list().len() > mark && old == Some(v) {
        errors.truncate(mark);
    }
}

fn checked_value(schema: &Schema, v: &Value, old: Option<&Value>, at: &Path, errors: &mut Errors) {
    if !typed(schema, v, at, errors) || v.is_null() {
        return;
    }
    combinators(schema, v, at, errors);
    match v {
        Value::String(s) => string(schema, s, at, errors),
        Value::Number(n) => number(schema, n, v, at, errors),
        Value::Array(list) => array(schema, list, old.and_then(Value::as_array), at, errors),
        _ => {}
    }
    if !schema.enumeration.is_empty() && !schema.enumeration.iter().any(|e| same(e, v)) {
        let listed: Vec<String> = schema
            .enumeration
            .iter()
            .map(|e| match e {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
        errors.not_supported(at, v.clone(), &listed);
    }
    if let Value::Object(map) = v {
        object(schema, map, old.and_then(Value::as_object), at, errors);
    }
}

/// JSON equality, numbers by value (`1` and `1.0` are the same).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn passes(schema: &Schema, v: &Value) -> bool {
    let mut found = Errors::default();
    value(schema, v, None, &Path::new(""), &mut found);
    found.list().is_empty()
}

fn combinators(schema: &Schema, v: &Value, at: &Path, errors: &mut Errors) {
    for s in &schema.all_of {
        value(s, v, None, at, errors);
    }
    if !schema.any_of.is_empty() && !schema.any_of.iter().any(|s| passes(s, v)) {
        errors.invalid(
            at,
            v.clone(),
            format!("{} in body must validate at least one schema (anyOf)", at.0),
        );
    }
    if !schema.one_of.is_empty() {
        let valid = schema.one_of.iter().filter(|s| passes(s, v)).count();
        if valid != 1 {
            let why = if valid == 0 {
                "Found none valid"
            } else {
                "Found more than one valid"
            };
            errors.invalid(
                at,
                v.clone(),
                format!(
                    "{} in body must validate one and only one schema (oneOf). {why}",
                    at.0
                ),
            );
        }
    }
    if let Some(not) = &schema.not
        && passes(not, v)
    {
        errors.invalid(
            at,
            v.clone(),
            format!("{} in body must not validate the schema (not)", at.0),
        );
    }
}

fn string(schema: &Schema, s: &str, at: &Path, errors: &mut Errors) {
    let chars = s.chars().count() as u64;
    if let Some(max) = schema.max_length.filter(|&m| chars > m) {
        errors.too_long(at, max as usize);
    }
    if let Some(min) = schema.min_length.filter(|&m| chars < m) {
        errors.invalid(
            at,
            s,
            format!("{} in body should be at least {min} chars long", at.0),
        );
    }
    if let Some((text, re)) = &schema.pattern
        && !re.is_match(s)
    {
        errors.invalid(at, s, format!("{} in body should match '{text}'", at.0));
    }
    if let Some(f) = &schema.format
        && !format::valid(f, s)
    {
        errors.push(
            ErrorKind::TypeInvalid,
            at,
            Value::from(s),
            format!("{} in body must be of type {f}: {}", at.0, go_quote(s)),
        );
    }
}

fn number(schema: &Schema, n: &serde_json::Number, v: &Value, at: &Path, errors: &mut Errors) {
    let x = n.as_f64().unwrap_or_default();
    if let Some((max, exclusive)) = schema.maximum
        && (x > max || (exclusive && x == max))
    {
        let how = if exclusive {
            "less than"
        } else {
            "less than or equal to"
        };
        errors.invalid(
            at,
            v.clone(),
            format!("{} in body should be {how} {}", at.0, shown(max)),
        );
    }
    if let Some((min, exclusive)) = schema.minimum
        && (x < min || (exclusive && x == min))
    {
        let how = if exclusive {
            "greater than"
        } else {
            "greater than or equal to"
        };
        errors.invalid(
            at,
            v.clone(),
            format!("{} in body should be {how} {}", at.0, shown(min)),
        );
    }
    // Within a relative epsilon, as the apiserver's validator divides (0.3 is a multiple of 0.1).
    if let Some(m) = schema.multiple_of
        && ((x / m) - (x / m).round()).abs() > 1e-9 * (x / m).abs().max(1.0)
    {
        errors.invalid(
            at,
            v.clone(),
            format!("{} in body should be a multiple of {}", at.0, shown(m)),
        );
    }
}

fn array(schema: &Schema, list: &[Value], old: Option<&Vec<Value>>, at: &Path, errors: &mut Errors) {
    let len = list.len() as u64;
    if let Some(max) = schema.max_items.filter(|&m| len > m) {
        errors.push(
            ErrorKind::TooMany,
            at,
            Value::from(len),
            format!("must have at most {max} items"),
        );
    }
    if let Some(min) = schema.min_items.filter(|&m| len < m) {
        errors.invalid(
            at,
            len,
            format!("{} in body should have at least {min} items", at.0),
        );
    }
    if let Some(items) = &schema.items {
        // Only a map list's items have old values of their own (by key), each old list indexed
        // once.
        let by_key: HashMap<Vec<ValueKey<'_>>, &Value> = match (&schema.list, old) {
            (ListType::Map(keys), Some(l)) => l.iter().map(|o| (map_key(keys, o), o)).collect(),
            _ => HashMap::new(),
        };
        for (i, v) in list.iter().enumerate() {
            let before = match &schema.list {
                ListType::Map(keys) if !by_key.is_empty() => by_key.get(&map_key(keys, v)).copied(),
                _ => None,
            };
            value(items, v, before, &at.index(i), errors);
        }
    }
    match &schema.list {
        ListType::Atomic => {}
        // Each item hashed once: a list of any length is checked in linear time.
        ListType::Set => {
            let mut seen = HashSet::with_capacity(list.len());
            for (i, v) in list.iter().enumerate() {
                if !seen.insert(ValueKey(v)) {
                    errors.duplicate(&at.index(i), v.clone());
                }
            }
        }
        ListType::Map(keys) => {
            let mut seen = HashSet::with_capacity(list.len());
            for (i, v) in list.iter().enumerate() {
                let key = map_key(keys, v);
                if !seen.insert(key.clone()) {
                    let fields: Vec<String> = keys
                        .iter()
                        .zip(&key)
                        .map(|(k, v)| format!("{}:{}", go_quote(k), go_printed(v.0)))
                        .collect();
                    errors.duplicate(&at.index(i), Value::Null);
                    if let Some(last) = errors.last_mut() {
                        last.printed = Some(format!("map[string]interface {{}}{{{}}}", fields.join(", ")));
                    }
                }
            }
        }
    }
}

/// The key of an item of a map list: the values of its key fields (null where unset).
pub(super) fn map_key<'a>(keys: &[String], item: &'a Value) -> Vec<ValueKey<'a>> {
    static NULL: Value = Value::Null;
    keys.iter()
        .map(|k| ValueKey(item.get(k).unwrap_or(&NULL)))
        .collect()
}

/// A scalar as Go's `%#v` prints it inside a map.
fn go_printed(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Null => "interface {}(nil)".to_owned(),
        other => other.to_string(),
    }
}

/// An object's property count against `minProperties` and `maxProperties`.
fn property_counts(schema: &Schema, count: usize, at: &Path, errors: &mut Errors) {
    let len = count as u64;
    if let Some(max) = schema.max_properties.filter(|&m| len > m) {
        errors.push(
            ErrorKind::TooMany,
            at,
            Value::from(len),
            format!("must have at most {max} items"),
        );
    }
    if let Some(min) = schema.min_properties.filter(|&m| len < m) {
        errors.invalid(
            at,
            len,
            format!("{} in body should have at least {min} properties", at.0),
        );
    }
}

fn object(
    schema: &Schema,
    map: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
    at: &Path,
    errors: &mut Errors,
) {
    property_counts(schema, map.len(), at, errors);
    for name in &schema.required {
        if !map.contains_key(name) {
            errors.required(&at.child(name));
        }
    }
    if schema.embedded {
        for field in ["apiVersion", "kind"] {
            if map.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                errors.required_because(&at.child(field), "must not be empty");
            }
        }
    }
    for (name, v) in map {
        let before = old.and_then(|o| o.get(name));
        if let Some(s) = schema.properties.get(name) {
            value(s, v, before, &at.child(name), errors);
        } else if let Some(s) = &schema.additional {
            value(s, v, before, &at.child(name), errors);
        }
    }
}
